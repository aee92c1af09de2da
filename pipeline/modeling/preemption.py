"""Stopping a run early without losing it: SIGTERM, SIGINT and a time limit.

Spot and preemptible Cloud TPU VMs get SIGTERM about 30 s before they go; Kaggle stops a
notebook at its time limit; a person presses Ctrl-C. While the training loops run, a signal is
only noted: both loops (Keras `fit` and the custom loop, on either backend) look at it between
steps, save a checkpoint at the step they reached, and the run ends with `Preempted`, which the
CLI turns into one line and exit code 75. The rerun resumes from that step, so what is lost is
at most the step in flight. The feature cache's pass looks at it between the pieces it saves,
so the rerun computes only the pieces not yet saved. Elsewhere (building, the outputs after the
last epoch) a signal stops the stage at once: nothing there is lost that the rerun does not redo.

If saving takes longer than `grace` seconds after the signal (a stalled disk), the process exits
anyway with the same code: the previous checkpoint is still whole, since checkpoints are
renamed into place.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator

from pipeline.core.errors import EXIT_PREEMPTED, Preempted

log = logging.getLogger(__name__)

GRACE_SECONDS = 20.0  # inside the ~30 s notice a preempted Cloud TPU VM gets


class StopRequest:
    """Whether the run should stop now, and why: a signal received, or the time limit near."""

    def __init__(
        self, time_limit: float | None = None, grace: float = GRACE_SECONDS, agreed=None, judge=None
    ) -> None:
        self.started = time.monotonic()
        # A sweep's trial (pipeline/stages/sweep.py): `judge(epoch, row)` after each epoch, a reason
        # to stop there (the trial is pruned) or None.
        self.judge = judge
        # Several JAX processes: JAX's preemption notifier takes SIGTERM, and `agreed(n)` (JAX's
        # `reached_preemption_sync_point`) says, at the n-th look, whether this is the step every
        # process stops at: stopping each at its own step would leave the others in a collective.
        # Every process looks the same number of times, between the same steps.
        self.agreed = agreed
        self.looks = 0
        self.limit_told = False
        self.deadline = self.started + time_limit if time_limit else None
        self.grace = grace
        self.reason: str | None = None
        self.deferring = False  # True while a loop will look at the request between steps
        self.finished = threading.Event()  # set when the watched block is over: no watchdog exit

    def __call__(self) -> str | None:
        """The reason to stop now, or None."""
        if self.agreed is not None:
            return self._agreed_reason() if self.deferring else None
        if self.reason is None and self.deadline is not None and time.monotonic() >= self.deadline:
            self.reason = "the time limit"
        return self.reason

    def _agreed_reason(self) -> str | None:
        """Several processes: this one's time limit becomes a preemption notice to all of them (a
        SIGTERM to itself, which JAX's notifier passes on); they stop at the step JAX names."""
        if not self.limit_told and self.deadline is not None and time.monotonic() >= self.deadline:
            self.limit_told = True
            os.kill(os.getpid(), signal.SIGTERM)
        self.looks += 1
        if self.reason is None and self.agreed(self.looks):
            self.reason = "the time limit" if self.limit_told else "SIGTERM (all processes stop at this step)"
        return self.reason

    def epoch_ended(self, epoch: int, row: dict) -> None:
        """An epoch's history row, for the judge; its reason to stop is this request's."""
        if self.judge is not None and self.reason is None:
            self.reason = self.judge(epoch, row)

    def signalled(self, signum: int, frame) -> None:
        name = signal.Signals(signum).name
        if self.reason is not None:  # a second signal: stop now, the previous checkpoint is whole
            raise Preempted(f"stopped by a second {name}; rerun the same command to resume")
        if not self.deferring:
            self.reason = name
            raise Preempted(
                f"stopped by {name} outside the training steps (finished epochs are kept); "
                "rerun the same command to resume"
            )
        self.reason = name
        log.warning("train: %s received: saving a checkpoint at the current step", name)
        threading.Thread(target=self._watchdog, name="preemption-watchdog", daemon=True).start()

    def _watchdog(self) -> None:
        if self.finished.wait(self.grace):
            return
        print(
            f"petals train: stopped by {self.reason}: no checkpoint within {self.grace:.0f} s; "
            "the rerun resumes from the previous one",
            file=sys.stderr,
            flush=True,
        )
        os._exit(EXIT_PREEMPTED)


@contextlib.contextmanager
def watching(stop: StopRequest) -> Iterator[StopRequest]:
    """SIGTERM and SIGINT go to `stop` while the block runs (in the main thread only: elsewhere
    Python cannot take signals, and the block runs unguarded); SIGTERM stays JAX's when the
    processes agree on where to stop (`stop.agreed`)."""
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    taken = (signal.SIGINT,) if stop.agreed is not None else (signal.SIGTERM, signal.SIGINT)
    previous = {s: signal.signal(s, stop.signalled) for s in taken}
    try:
        yield stop
    finally:
        stop.finished.set()
        for s, handler in previous.items():
            signal.signal(s, handler)
