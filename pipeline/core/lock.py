"""One writer per folder: a lock file naming its holder (pid, host, start time).

Two `train`s of the same run (two terminals, or `make train` beside a resumed kernel run) would
write the same checkpoints and weights at once; two fetches the same data dir. The second writer
is refused with one line naming the holder. A lock whose holder is gone (a dead pid on this host,
as `kill -9` or a lost machine leaves it) is taken over with a line saying so. A lock held on
another host cannot be checked from here: the line says which host and how to clear it.

The lock file appears whole or not at all (written beside it, then hard-linked into place, which
fails when it exists), so a writer killed while taking it leaves no half-written lock. A process's
staging folder (`staging_folder`: a download or a copy arriving before it moves into place) is
named for it the same way, so the next one removes what a killed one left.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from pipeline.core.errors import PetalsError
from pipeline.core.foreign import text
from pipeline.core.foreign_files import json_record, present

log = logging.getLogger(__name__)


def _process_start(pid: int) -> str | None:
    """When `pid` started (clock ticks since boot, from /proc), so a reused pid is not taken for the
    holder; None where /proc cannot say."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[19]  # field 22, counted after the command's parentheses


def _alive(holder: dict) -> bool:
    """Whether the holder (on this host) still runs: its pid exists and started when it said."""
    pid = int(holder.get("pid", 0))
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    started = holder.get("process_start")
    return started is None or _process_start(pid) in (None, started)


def process_name(pid: int | None = None) -> str:
    """A process (this one) as a name's part: host (its name's plain characters), pid, start."""
    host = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:40] or "host"
    pid = os.getpid() if pid is None else pid
    return f"{host}.{pid}.{_process_start(pid)}"


def ended(name: str) -> bool | None:
    """Whether the process `name` begins with (`process_name`'s form) has stopped; None where it
    is another host's, whose processes cannot be seen from here, or `name` is not of that form."""
    owner = name.split(".")
    if len(owner) < 3 or owner[0] != process_name().split(".")[0] or not owner[1].isdigit():
        return None
    return not _alive({"pid": int(owner[1]), "process_start": None if owner[2] == "None" else owner[2]})


def staging_folder(parent: Path, prefix: str) -> Path:
    """A new folder in `parent` for this process to stage a download or a copy in, before it moves
    into place. A `kill -9` leaves its staging folder behind (gigabytes, for a kernel's outputs), so
    those of `prefix` whose process is gone (on this host, by pid and start) are removed first."""
    for old in parent.glob(f"{prefix}*"):
        if old.is_dir() and not old.is_symlink() and ended(old.name[len(prefix) :]):
            shutil.rmtree(old, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{process_name()}.", dir=parent))


def _describe(holder: dict) -> str:
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(holder.get("time", 0)))
    host, what = text(holder.get("host"), 80), text(holder.get("what", "?"), 80)
    return f"pid {holder.get('pid')} on {host} ({what}, since {since})"


def _read(path: Path) -> dict | None:
    """The lock's holder; None where there is no lock, {} where no holder can be named (so nobody is
    alive behind it). A lock comes with a shared folder as anything at all: it is read by the rule for
    foreign files (a pipe, a link out, a list, 100,000 brackets: no holder), and a pid or a time that
    petals would not write is no pid or time."""
    if not present(path):
        return None
    holder = json_record(path, "lock file")
    pid, since = holder.get("pid"), holder.get("time")
    if not (type(pid) is int and 0 < pid < 1 << 31):
        holder.pop("pid", None)
    if not (type(since) in (int, float) and 0 <= since < 1e11):  # up to the year 5138
        holder.pop("time", None)
    return holder


def _try_take(path: Path, me: dict) -> bool:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.partial")
    try:
        tmp.write_text(json.dumps(me) + "\n")
    except OSError as err:  # name the folder the user chose, not the lock's own temporary file
        tmp.unlink(missing_ok=True)
        raise OSError(err.errno, err.strerror, str(path.parent)) from err
    try:
        os.link(tmp, path)  # atomic, and fails when a lock is there
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)


def _set_aside(path: Path, stale: dict) -> bool:
    """Move the stale lock out of the way; put it back if what moved was a new holder's lock (one
    taken over by another process since we read it)."""
    aside = path.with_name(f"{path.name}.{os.getpid()}.stale")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return False
    moved = _read(aside)
    if moved != stale:
        with contextlib.suppress(FileExistsError):
            os.link(aside, path)
    aside.unlink(missing_ok=True)
    return moved == stale


@contextlib.contextmanager
def holding(path: Path, what: str) -> Iterator[None]:
    """Hold the lock file `path` while the block runs, for `what` (e.g. "train"); refused with a
    PetalsError naming the holder when another live process holds it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pid = os.getpid()
    me = {"pid": pid, "host": socket.gethostname(), "time": time.time(), "what": what,
          "process_start": _process_start(pid)}  # fmt: skip
    for _ in range(3):  # another writer may take over a stale lock between our steps
        if _try_take(path, me):
            break
        holder = _read(path)
        if holder is None:
            continue  # released between our two steps
        if holder.get("host", me["host"]) != me["host"]:
            raise PetalsError(
                f"{path.parent}: in use by {_describe(holder)}; if that run is gone, delete {path}"
            )
        if holder and _alive(holder):
            raise PetalsError(
                f"{path.parent}: in use by {_describe(holder)}; wait for it to finish or stop it"
            )
        if _set_aside(path, holder):
            log.warning(
                "%s: %s: taking over the lock of %s, which is no longer running",
                what,
                path.parent,
                _describe(holder) if holder else "an unreadable lock file",
            )
    else:
        raise PetalsError(f"{path}: could not take the lock (other writers keep taking it)")
    try:
        yield
    finally:
        if (_read(path) or {}).get("pid") == pid:
            path.unlink(missing_ok=True)
