"""Progress of a long step with an estimate of the time left: a bar on a terminal, a log line at
every tenth elsewhere (a log file, a Kaggle kernel, CI), nothing at all for a short step.

Every step that can take more than a few seconds (drawing the embedded data, the feature cache's
pass, an epoch, a prediction, a wait for a kernel) reports through here, so each says the same
things the same way. On a terminal the bar (tqdm's) is drawn only once the step has run
`BAR_AFTER` seconds and is wiped when it ends: the lines a stage prints stay as they were. In a
log a line costs a reader's attention, so none is written before the step has run `LINES_AFTER`
seconds, and then one at each tenth reached, never at the end (the step's own line says it is
done). An update is a clock read and a comparison: cheap enough for every batch.

A step of a few long parts (a CV group's folds, a sweep's trials, a fan-out's kernels) whose time
left is not its share done times its pace (kernels run side by side; a fold trained before takes
no time) says its own estimate, `time_left`, from the parts done.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TextIO

log = logging.getLogger(__name__)

BAR_AFTER = 2.0  # seconds before a terminal's bar appears: a short step draws none
LINES_AFTER = 10.0  # seconds before a log's first line: a short step writes none
MARKS = 10  # a log line at every tenth of the step
MB = 10**6  # a step over bytes (a download, an archive unpacked) counts megabytes


def duration(seconds: float) -> str:
    """Seconds as a person reads them: `45 s`, `3 min 20 s`, `2 h 05 min`."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def time_left(
    took: Sequence[float], left: int, running: Sequence[float] = (), at_once: int = 1
) -> float | None:
    """Seconds until `left` parts not started and those `running` (seconds each has run) end, each
    part taking the mean of those that `took`, `at_once` at a time; None before any part ended."""
    if not took:
        return None
    each = sum(took) / len(took)
    ends = [max(each - ran, 0.0) for ran in running]
    ends += [0.0] * max(at_once - len(ends), 0)  # free places, a part may start now
    heapq.heapify(ends)
    for _ in range(left):
        heapq.heappush(ends, heapq.heappop(ends) + each)
    return max(ends, default=0.0)


def parts_left(took: Sequence[float], left: int, part: str) -> str:
    """`; about 6 min 20 s left (2 min 07 s a fold)`: what a line starting the next of `left` parts
    adds, at the mean of those that `took` (this process's: a part done before takes no time);
    nothing before any part ended."""
    if not took:
        return ""
    each = sum(took) / len(took)
    return f"; about {duration(time_left(took, left))} left ({duration(each)} a {part})"


def on_terminal(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class Progress:
    """`done` of `total` units of the step `what`: `advance(n)` or `reach(done)` as it goes, then
    `close()` (or use it as a context manager). `bound=True`: `total` is a limit, not a plan (a
    wait for a kernel): the lines say what is left at most, never an estimate. `left`: the step's
    own estimate of its seconds left (`time_left`), read at each update, in place of its pace's."""

    def __init__(
        self,
        what: str,
        total: float,
        unit: str = "",
        *,
        bound: bool = False,
        left: Callable[[], float | None] | None = None,
        enabled: bool = True,
        stream: TextIO | None = None,
        report: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.what, self.total, self.unit, self.bound = what, max(total, 0), unit, bound
        self.left = left
        if report is None and not log.isEnabledFor(logging.INFO):
            enabled = False  # --quiet: warnings and errors only, no bar either
        self.report = report or log.info
        self.clock = clock
        self.started = clock()
        self.done = 0
        self.mark = 0  # the last tenth a line was written at
        stream = stream or sys.stderr
        self.bar = None
        if enabled and self.total > 0 and on_terminal(stream):
            self.bar = _bar(what, self.total, unit, stream, paced=left is None)
        self.lines = enabled and self.total > 0 and self.bar is None

    def advance(self, n: float = 1) -> None:
        self.reach(self.done + n)

    def reach(self, done: float) -> None:
        """`done` units of the total are done (a count that only grows: steps, examples, seconds)."""
        step, self.done = done - self.done, min(done, self.total)
        if self.bar is not None:
            if self.left is not None:
                self.bar.set_postfix_str(_left_words(self.left()), refresh=False)
            self.bar.update(step)
        elif self.lines:
            mark = int(MARKS * self.done / self.total)
            if mark > self.mark and mark < MARKS:
                self.mark = mark
                elapsed = self.clock() - self.started
                if elapsed >= LINES_AFTER:
                    self.report(self.line(elapsed))

    def line(self, elapsed: float) -> str:
        """`what: 40% (400/1,000 img), 1 min 10 s, about 1 min 45 s left`; a wait's,
        `what: 1 h 20 min so far, at most 10 h 40 min left`."""
        if self.bound:  # a wait: its limit is the most it can take, not a plan
            return f"{self.what}: {duration(elapsed)} so far, at most {duration(self.total - self.done)} left"
        share = self.done / self.total
        counted = f"{self.done:,.0f}/{self.total:,.0f}{' ' + self.unit if self.unit else ''}"
        left = elapsed * (1 - share) / max(share, 1e-9) if self.left is None else self.left()
        return f"{self.what}: {share:.0%} ({counted}), {duration(elapsed)}, {_left_words(left)}"

    @contextlib.contextmanager
    def aside(self) -> Iterator[None]:
        """Lines printed inside stay clear of the bar: it is wiped first and drawn again after."""
        if self.bar is None:
            yield
            return
        self.bar.clear()
        try:
            yield
        finally:
            if self.bar is not None:
                self.bar.refresh()

    def said(self, report: Callable[[str], None]) -> Callable[[str], None]:
        """`report`, each line it says kept clear of the bar (`aside`)."""

        def say(line: str) -> None:
            with self.aside():
                report(line)

        return say

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        self.lines = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _left_words(left: float | None) -> str:
    return "time left not known yet" if left is None else f"about {duration(left)} left"


def _bar(what: str, total: float, unit: str, stream: TextIO, paced: bool = True):
    """tqdm's bar on `stream`: shown after BAR_AFTER seconds, gone when closed. Not `paced`: the
    step's own estimate (its postfix, which tqdm starts with ", ") in place of tqdm's, which
    assumes a steady pace."""
    from tqdm import tqdm

    own = (
        None if paced else "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} {unit} [{elapsed}{postfix}]"
    )
    return tqdm(
        bar_format=own,
        total=total,
        desc=what,
        unit=unit or "it",
        file=stream,
        leave=False,
        delay=BAR_AFTER,
        dynamic_ncols=True,
        mininterval=0.5,
    )
