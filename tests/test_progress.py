"""The progress of a long step: lines at each tenth with an estimate in a log, a bar on a terminal,
nothing for a short step (pipeline/core/progress.py), on a fake clock."""

from __future__ import annotations

import io

from pipeline.core import progress
from pipeline.core.progress import Progress


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _step(total: int, seconds_each: float, stream=None, **kwargs) -> list[str]:
    """`total` units at `seconds_each` a unit on a fake clock; the lines it logged."""
    clock, lines = Clock(), []
    with Progress("caching", total, "img", stream=stream or io.StringIO(), report=lines.append,
                  clock=clock, **kwargs) as bar:  # fmt: skip
        for _ in range(total):
            clock.now += seconds_each
            bar.advance()
    return lines


def test_a_long_step_logs_a_line_at_each_tenth_with_the_time_left():
    lines = _step(400, 0.25)  # 100 s in all
    assert lines[0] == "caching: 10% (40/400 img), 10 s, about 1 min 30 s left"
    assert lines[-1] == "caching: 90% (360/400 img), 1 min 30 s, about 10 s left"
    assert len(lines) == 9  # never at the end: the step's own line says it is done


def test_the_first_lines_wait_until_the_step_has_run_ten_seconds():
    lines = _step(100, 0.3)  # 30 s: the tenths before 10 s pass silently
    assert lines[0].startswith("caching: 40% (40/100 img), 12 s, about 18 s left")
    assert len(lines) == 6


def test_a_short_step_logs_nothing():
    assert _step(1000, 0.009) == []  # 9 s


def test_a_terminal_gets_a_bar_and_no_lines():
    terminal = Terminal()
    clock, lines = Clock(), []
    bar = Progress("caching", 50, "img", stream=terminal, report=lines.append, clock=clock)
    assert bar.bar is not None
    bar.bar.delay, bar.bar.mininterval = 0, 0  # tqdm reads its own clock: drawn at each update here
    for _ in range(50):
        clock.now += 1.0
        bar.advance()
    drawn = terminal.getvalue()
    bar.close()
    assert lines == []
    assert "caching" in drawn and "50/50" in drawn
    assert terminal.getvalue().endswith("\r")  # wiped at the end: the stage's lines stay as they were


def test_a_short_step_on_a_terminal_draws_no_bar():
    terminal = Terminal()
    assert _step(20, 0.0, stream=terminal) == []
    assert terminal.getvalue() == ""  # under BAR_AFTER seconds


def test_a_wait_says_what_is_left_at_most():
    clock, lines = Clock(), []
    wait = Progress("kernel me/k version 3", 3600, "s", bound=True, report=lines.append, clock=clock,
                    stream=io.StringIO())  # fmt: skip
    for _ in range(3):
        clock.now += 720
        wait.reach(clock.now - 100.0)
    assert lines[-1] == "kernel me/k version 3: 36 min 00 s so far, at most 24 min 00 s left"


def test_disabled_or_empty_steps_say_nothing():
    assert _step(400, 0.25, enabled=False) == []
    assert _step(0, 1.0) == []


def test_durations_read_as_a_person_writes_them():
    assert [progress.duration(s) for s in (4.6, 200, 7500)] == ["5 s", "3 min 20 s", "2 h 05 min"]


def test_quiet_logging_draws_no_bar_either(caplog):
    caplog.set_level("WARNING", logger="pipeline.core.progress")
    assert Progress("caching", 50, "img", stream=Terminal()).bar is None
    caplog.set_level("INFO", logger="pipeline.core.progress")
    with Progress("caching", 50, "img", stream=Terminal()) as shown:
        assert shown.bar is not None


def test_a_step_with_its_own_estimate_says_it_on_the_bar_and_lines_said_are_clear_of_it():
    terminal, said = Terminal(), []
    bar = Progress("kernels", 4, "kernels", left=lambda: 600.0, stream=terminal, report=print)
    bar.bar.delay, bar.bar.mininterval = 0, 0
    bar.reach(1)
    bar.said(lambda line: said.append((line, terminal.getvalue())))("fold 1: complete")
    drawn = terminal.getvalue()
    bar.close()
    assert "1/4 kernels" in drawn and ", about 10 min 00 s left]" in drawn and "it/s" not in drawn
    assert ", ," not in drawn
    [(line, before)] = said
    assert line == "fold 1: complete" and before.endswith("\r")  # the bar wiped before the line
    assert drawn.rstrip().endswith("about 10 min 00 s left]")  # and drawn again after it


def test_a_steps_own_estimate_goes_in_its_lines():
    clock, lines = Clock(), []
    with Progress("kernels", 5, "kernels", left=lambda: 7200.0, report=lines.append, clock=clock,
                  stream=io.StringIO()) as bar:  # fmt: skip
        clock.now += 3600
        bar.reach(1)
    assert lines == ["kernels: 20% (1/5 kernels), 1 h 00 min, about 2 h 00 min left"]
