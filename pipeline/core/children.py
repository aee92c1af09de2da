"""Processes petals starts die with the one that started them, however it dies.

A stage killed with -9 (an OOM kill, Ctrl-\\, a test's fault injection) gets no chance to stop its
children: a drawing worker waiting on its queue, or a launched host process, would live on as a
child of init. Each child therefore asks the kernel to kill it when its parent dies.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

PARENT_VARIABLE = "PETALS_DIE_WITH"  # a launched stage's parent pid (pipeline/launch.py sets it)
_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_PARENT_POLL_SECONDS = 1.0


def die_with_parent(parent: int) -> None:
    """Make this process die with `parent`. On Linux the kernel kills it (PR_SET_PDEATHSIG); the
    parent may have died before that was asked for, hence the check of getppid after it. Elsewhere
    a thread polls getppid and exits when the parent is gone."""
    asked = False
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            asked = libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
        except (OSError, AttributeError):
            asked = False
    if os.getppid() != parent:
        os._exit(1)
    if not asked:
        threading.Thread(target=_exit_when_orphaned, args=(parent,), daemon=True).start()


def _exit_when_orphaned(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(_PARENT_POLL_SECONDS)
    os._exit(1)


def die_with_launcher() -> None:
    """In a stage a launcher started (PETALS_DIE_WITH names it): die with that launcher. The variable
    is taken out of the environment, so this stage's own children are bound to it, not to the launcher."""
    parent = os.environ.pop(PARENT_VARIABLE, "")
    if parent.isdigit():
        die_with_parent(int(parent))
