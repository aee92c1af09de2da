"""Shares of an experiment fanned out over Kaggle kernels: a CV group's folds (`make kernel-fanout
FOLDS=5`: one kernel per fold, merged into the local runs dir, where the group assembles once every
fold is there, `pipeline/cv/merge.py`), or a study's trials (`TRIALS=N`, `pipeline/sweep/fanout.py`:
a kernel per batch of trials whose values were fixed before the push). Each kernel is pushed while
Kaggle's limits allow, followed, and collected as it completes.

Kaggle's limits (sources in docs/kaggle-limits.md):
- sessions at once: a push past the limit is refused ("Maximum batch GPU session count of 2
  reached"), seen in 2026 as 1 TPU, 2 GPU and 5 CPU batch sessions. At most that many shares run
  (`CONCURRENT`, or `--concurrent`), and a refusal of that kind waits for a session to end;
- the weekly GPU and TPU quotas (30 h and 20 h in Kaggle's docs): a running session is counted
  against them at its time limit ("projected to exceed maximum weekly GPU quota"), so a fold is
  pushed only while the quota's unreserved hours cover its limit (the client's `quota_view`, what
  `kaggle quota` prints); a fold that does not fit waits for the weekly reset.
Every share's state is in `kernels/<name>.fanout.json`, replaced whole after each change: a rerun
collects the shares that completed meanwhile, follows those still running and pushes the rest; a
share already collected is never pushed again. A kernel that ends in an error is named in one line
and pushed again once; one that fails again is left for a rerun (after a fix) to push. While it
waits, its progress (pipeline/core/progress.py): N of K kernels done, and the time left at the pace
of those that completed (each share's push and completion times are in the state file, so a rerun
keeps the pace), as many at once as the session limit runs.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pipeline.core.errors import PetalsError, first_line
from pipeline.core.files import write_json
from pipeline.core.options import KernelOptions
from pipeline.core.paths import check_name
from pipeline.core.progress import Progress, time_left
from pipeline.kernels.client import generate, remote
from pipeline.kernels.client.metadata import (
    SESSION_LIMIT,
    check_accelerator,
    default_name,
    read_metadata,
)
from pipeline.kernels.client.shares import ACTIVE, PUSHES, STATES, Share, load, one_line

if TYPE_CHECKING:
    from pipeline.tasks.competitions import Competition

# Batch sessions Kaggle lets one user run at once, as its push refusals name them (2026).
CONCURRENT = {"tpu": 1, "gpu": 2, "cpu": 5}
# A push Kaggle refuses for a session count that frees up when a session ends: wait, not fail.
SESSION_REFUSAL = re.compile(r"session count|maximum batch", re.IGNORECASE)
QUOTA_REFUSAL = re.compile(r"quota", re.IGNORECASE)
ENDED = ("complete", "collected", "failed")  # done with on Kaggle: the progress counts them


@dataclass
class Plan:
    """What is fanned out: the shares asked for now (by number), how a new one is made, checked when
    read back from the state file, generated and collected (its output downloaded and placed here,
    and for a study's trials, told to the study), and what the fan-out is (a rerun of other
    settings is refused)."""

    kind: str  # "fold" or "trial": the progress line's word
    base: str  # the kernels' names start with it; its state file is <base>.fanout.json
    settings: dict
    numbers: list[int]
    count: int  # shares in all (the state file's numbers are 0..count-1)
    new_share: Callable[[int], Share]
    check: Callable[[Share], None]  # a share read from the state file: PetalsError if not this plan's
    options_of: Callable[[Share], KernelOptions]
    collect: Callable[[Share], None]


@dataclass
class Blocked:
    """What holds waiting shares back: a session count that frees up, or the weekly quota."""

    words: str
    until_reset: bool  # the quota: nothing frees up before the week turns


def fanout(
    options: KernelOptions,
    competition: Competition,
    plan: Plan | None = None,
    report: Callable[[str], None] = print,
) -> dict[str, int]:
    """Push, follow and collect the plan's kernels (default: one per fold of `options.folds`, those
    in `fold_list` or all) until every share is collected or failed, or `wait_seconds` pass; the
    shares' counts. `competition`: the one the options name, as the stage resolved it. PetalsError
    in one line for a share that failed, or for shares left waiting or running."""
    options = generate.resolved(options, competition.spec)
    session = check_accelerator(options.accelerator)
    _check_limits(options)
    plan = plan or fold_plan(options, competition)
    path = options.kernels_dir / f"{plan.base}.fanout.json"
    every = load(path, plan, report)  # FOLD= picks some; the rest are kept as they are
    shares = [every[n] for n in plan.numbers]

    def save() -> None:
        write_json(path, {**plan.settings, "shares": [dataclasses.asdict(s) for s in every.values()]})

    for share in shares:
        if share.state == "waiting" and share.pushes == 0:  # generated now; a pushed one keeps its folder
            share.kernel = read_metadata(generate.generate(plan.options_of(share), competition))["id"]
            save()
    save()
    try:
        counts = _follow_all(shares, options, session, plan, save, report)
    finally:
        save()
    unfinished = [s for s in shares if s.state in ("failed", "complete")]
    if unfinished:
        named = "; ".join(s.line(s.why) for s in unfinished)
        raise PetalsError(
            f"kernel-fanout: {len(unfinished)} {plan.kind} kernel(s) not collected: {named}; fix, then rerun"
        )
    return counts


def fold_plan(options: KernelOptions, competition: Competition) -> Plan:
    """A CV group's folds on `competition` (the options'), one kernel each (`FOLDS=K`, `FOLD=` picks
    some)."""
    folds = _folds(options)
    base = options.name or default_name(generate.kernel_recipe(options), competition.spec.name)
    check_name(base, "--name")
    # What the fan-out is: a rerun with other settings would mix kernels of two kinds in one group.
    settings = {
        "folds": options.folds,
        "recipe": options.recipe,
        "overrides": list(options.overrides),
        "accelerator": options.accelerator,
        "timeout": options.timeout,
        "tta": options.tta,
    }

    def check(share: Share) -> None:
        if share.trials:
            raise PetalsError(f"share {share.number} holds trials {share.trials}: not a fold's share")

    def collect(share: Share) -> None:  # `make kernel-output`: the fold run placed, its group assembled
        folder = options.kernels_dir / share.name
        # Every fold kernel was generated from these options: its runs are on their competition.
        remote.output(folder, options.submissions_dir, options.data_dir, options.runs_dir, "folds",
                      competition_of=lambda _named: competition, track=options.track)  # fmt: skip

    return Plan(
        kind="fold",
        base=base,
        settings=settings,
        numbers=folds,
        count=options.folds,
        new_share=lambda fold: Share(fold, f"{base}-fold{fold}"),
        check=check,
        options_of=lambda share: dataclasses.replace(options, name=share.name, fold_list=(share.number,)),
        collect=collect,
    )


def _follow_all(
    shares: list[Share], options: KernelOptions, session: str, plan: Plan, save, report
) -> dict[str, int]:
    """Follow the shares in rounds (`_rounds`) with their progress on a bar or in lines, the lines
    they print kept clear of the bar."""
    limit = options.timeout or SESSION_LIMIT[session]
    concurrent = options.concurrent or CONCURRENT[session]
    with _done_bar(shares, plan.kind, concurrent, report) as bar:
        report = bar.said(report)
        plan = dataclasses.replace(plan, collect=_aside(bar, plan.collect))  # its lines clear of the bar
        return _rounds(shares, options, session, plan, save, report, bar, limit, concurrent)


def _done_bar(shares: list[Share], kind: str, concurrent: int, report) -> Progress:
    """The shares' kernels done with on Kaggle, of them all, and the time left: those running and
    waiting, `concurrent` at a time, at the mean pace of those that completed."""

    def left() -> float | None:
        now = time.time()
        took = [s.took for s in shares if s.took is not None]
        running = [now - s.pushed_at for s in shares if s.state in ACTIVE and s.pushed_at is not None]
        return time_left(took, sum(s.state == "waiting" for s in shares), running, concurrent)

    return Progress(f"kernel-fanout: {kind} kernels", len(shares), "kernels", left=left, report=report)


def _aside(bar: Progress, collect: Callable[[Share], None]) -> Callable[[Share], None]:
    def collected(share: Share) -> None:
        with bar.aside():
            collect(share)

    return collected


def _rounds(
    shares, options, session, plan: Plan, save, report, bar: Progress, limit, concurrent
) -> dict[str, int]:
    """Rounds of: ask after each active kernel (collecting those complete), push what waits as far
    as the limits allow, one line when the counts change; until none is active."""
    deadline, shown_counts = time.monotonic() + options.wait_seconds, None
    for share in shares:
        if share.state == "complete":  # its output did not come last time: only collected again
            _collect(share, options, plan, report)
            save()
    while True:
        for share in shares:
            if share.state in ACTIVE:
                _follow(share, options, plan, report)
                save()
        blocked = _push_waiting(shares, options, session, limit, concurrent, save, report)
        counts = {state: sum(s.state == state for s in shares) for state in STATES}
        if counts != shown_counts:
            report(_progress(plan.kind, counts))
            shown_counts = counts
        bar.reach(sum(counts[state] for state in ENDED))
        active = counts["queued"] + counts["running"]
        if not active and not counts["waiting"]:
            return counts
        if not active and blocked is not None and blocked.until_reset:
            raise PetalsError(f"kernel-fanout: {blocked.words}; rerun `make kernel-fanout` then for the rest")
        if time.monotonic() >= deadline:
            held = f"; {blocked.words}" if blocked else ""
            raise PetalsError(
                f"kernel-fanout: {active} kernel(s) still queued or running, {counts['waiting']} waiting, "
                f"after {options.wait_seconds:.0f} s{held}; rerun `make kernel-fanout` to go on "
                "(a kernel pushed is followed, not pushed again)"
            )
        time.sleep(options.poll_seconds)


def _check_limits(options: KernelOptions) -> None:
    if options.concurrent is not None and options.concurrent < 1:
        raise PetalsError(f"CONCURRENT={options.concurrent}: at least one kernel at a time")
    if options.poll_seconds <= 0 or options.wait_seconds < 0:
        raise PetalsError(
            f"--poll-seconds {options.poll_seconds} must be more than 0 and --wait-seconds "
            f"{options.wait_seconds} at least 0"
        )


def _folds(options: KernelOptions) -> list[int]:
    if options.folds is None:
        raise PetalsError("kernel-fanout needs FOLDS=K: one kernel per fold of the recipe's K-fold CV group")
    if options.folds < 2:
        raise PetalsError(f"FOLDS={options.folds}: cross-validation needs at least 2 folds")
    folds = list(dict.fromkeys(options.fold_list)) or list(range(options.folds))
    bad = [f for f in folds if not 0 <= f < options.folds]
    if bad:
        raise PetalsError(f"FOLD={','.join(map(str, options.fold_list))}: folds are 0..{options.folds - 1}")
    return folds


def _follow(share: Share, options: KernelOptions, plan: Plan, report) -> None:
    """Ask Kaggle where the share's kernel stands; collect it once complete; one line per change."""
    from pipeline.core import kaggle_client

    answer = kaggle_client.kernel_status(share.kernel)
    state = remote.kernel_state(answer)
    if state in remote.KERNEL_FAILED:
        said = f": {answer.failure_message}" if answer.failure_message else ""
        share.why = one_line(state.lower().replace("_", " ") + said)
        if share.pushes < PUSHES:
            report(share.line(f"{share.why}; to be pushed again"))
            share.state = "waiting"
        else:
            report(share.line(f"{share.why}; failed twice"))
            share.state = "failed"
        return
    if state != remote.KERNEL_FINISHED:
        seen = "running" if state == "RUNNING" else "queued"
        if seen != share.state:
            report(share.line(seen))
            share.state = seen
        return
    report(share.line("complete; collecting"))
    share.state = "complete"
    if share.pushed_at is not None:
        share.took = max(time.time() - share.pushed_at, 0.0)
    _collect(share, options, plan, report)


def _collect(share: Share, options: KernelOptions, plan: Plan, report) -> None:
    """Download the complete kernel's output and place its runs (as `make kernel-output` does), and
    what the plan does with them; on any failure the share stays complete, to be collected again by
    a rerun, never pushed again."""
    try:
        plan.collect(share)
    except Exception as err:  # a download cut, a refused output: this fold named, the others go on
        share.why = one_line(f"its output was not collected: {first_line(err)}")
        report(share.line(share.why))
        return
    share.state, share.why = "collected", ""


def _push_waiting(shares, options, session: str, limit: int, concurrent: int, save, report) -> Blocked | None:
    """Push waiting shares while fewer than `concurrent` run and the weekly quota covers each one's
    time limit, saving the state after each push; what holds the rest back (None when nothing)."""
    running = sum(s.state in ACTIVE for s in shares)
    waiting = [s for s in shares if s.state == "waiting"]
    if not waiting:
        return None
    if running >= concurrent:
        return Blocked(f"{concurrent} kernel(s) at once", until_reset=False)
    left, refresh = _quota_left(session)
    for share in waiting:
        if running >= concurrent:
            return Blocked(f"{concurrent} kernel(s) at once", until_reset=False)
        if left is not None and left < limit:
            held = "; ".join(s.what for s in shares if s.state == "waiting")
            return Blocked(
                f"{held} wait for the weekly {session.upper()} quota: {left / 3600:.1f} h "
                f"unreserved, each kernel may take its {limit / 3600:.1f} h limit (TIMEOUT= lowers it); "
                f"it resets {refresh}",
                until_reset=True,
            )
        refused = _push(share, options, report)
        if refused is not None:
            return refused
        save()
        running += 1
        if left is not None:
            left -= limit  # reserved by Kaggle from now on; the next round reads it again
    return None


def _push(share: Share, options: KernelOptions, report) -> Blocked | None:
    """Push the share's kernel: None once pushed, else what Kaggle's refusal says holds it back."""
    from pipeline.core import kaggle_client
    from pipeline.kernels.client import weights, wheels

    folder = options.kernels_dir / share.name
    wheels.publish(folder, report)  # uploaded once; each later share finds it there
    weights.publish(folder, report)
    meta = read_metadata(folder)
    slug = (meta.get("competition_sources") or [""])[0]
    try:
        version = kaggle_client.push_kernel(
            folder, slug, meta["id"], options.timeout, meta.get("machine_shape")
        )
    except PetalsError as err:
        said = one_line(str(err))
        if SESSION_REFUSAL.search(said):
            return Blocked(f"Kaggle holds {share.what} back ({said})", until_reset=False)
        if QUOTA_REFUSAL.search(said):
            return Blocked(f"Kaggle holds {share.what} back ({said})", until_reset=True)
        raise
    share.version, share.pushes, share.state = version, share.pushes + 1, "queued"
    share.pushed_at, share.took = time.time(), None
    report(share.line("pushed again" if share.pushes > 1 else "pushed"))
    return None


def _quota_left(session: str) -> tuple[float | None, str]:
    """The weekly quota's unreserved seconds for the session's accelerator and when it resets;
    (None, "") for a CPU kernel, which has no quota, or when Kaggle answers none."""
    if session == "cpu":
        return None, ""
    from pipeline.core import kaggle_client

    answer: Any = kaggle_client.accelerator_quota()
    quota = getattr(answer, f"{session}_quota", None) if answer is not None else None
    if quota is None or not quota.total_time_allowed:
        return None, ""
    zero = timedelta(0)  # a field Kaggle leaves out (nothing used, nothing reserved) reads as None
    left = quota.total_time_allowed - (quota.time_used or zero) - (quota.time_reserved or zero)
    refresh = answer.quota_refresh_time
    return max(left.total_seconds(), 0.0), refresh.isoformat() if refresh else "weekly"


def _progress(kind: str, counts: dict[str, int]) -> str:
    total = sum(counts.values())
    done = ", ".join(f"{counts[s]} {s}" for s in STATES)
    return f"kernel-fanout: {total} {kind} kernel(s): {done}"
