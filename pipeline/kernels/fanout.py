"""A CV group's folds fanned out over Kaggle kernels (`make kernel-fanout FOLDS=5`): one kernel per
fold, pushed while Kaggle's limits allow, followed, collected as each completes and merged into the
local runs dir, where the group assembles once every fold is there (`pipeline/cv/merge.py`).

Kaggle's limits (sources in docs/kaggle-limits.md):
- sessions at once: a push past the limit is refused ("Maximum batch GPU session count of 2
  reached"), seen in 2026 as 1 TPU, 2 GPU and 5 CPU batch sessions. At most that many shares run
  (`CONCURRENT`, or `--concurrent`), and a refusal of that kind waits for a session to end;
- the weekly GPU and TPU quotas (30 h and 20 h in Kaggle's docs): a running session is counted
  against them at its time limit ("projected to exceed maximum weekly GPU quota"), so a fold is
  pushed only while the quota's unreserved hours cover its limit (the client's `quota_view`, what
  `kaggle quota` prints); a fold that does not fit waits for the weekly reset.
Every share's state is in `kernels/<name>.fanout.json`, replaced whole after each change: a rerun
collects the folds that completed meanwhile, follows those still running and pushes the rest; a
fold already collected is never pushed again. A kernel that ends in an error is named in one line
and pushed again once; one that fails again is left for a rerun (after a fix) to push.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.core.errors import PetalsError
from pipeline.core.files import write_json
from pipeline.core.options import KernelOptions
from pipeline.core.paths import check_name, shown
from pipeline.kernels import generate, remote
from pipeline.kernels.metadata import (
    SESSION_LIMIT,
    check_accelerator,
    check_kernel,
    default_name,
    read_metadata,
)

# Batch sessions Kaggle lets one user run at once, as its push refusals name them (2026).
CONCURRENT = {"tpu": 1, "gpu": 2, "cpu": 5}
PUSHES = 2  # a kernel that ends in an error is pushed again once
# A push Kaggle refuses for a limit that passes (a session ends, the week turns): wait, not fail.
WAIT_REFUSAL = re.compile(r"session count|maximum batch|quota", re.IGNORECASE)
ACTIVE = ("queued", "running")
STATES = ("waiting", *ACTIVE, "collected", "failed")
MAX_STATE_BYTES = 2**20  # a state file of a few hundred folds is a few KiB


@dataclass
class Share:
    """One fold's kernel and where it stands: waiting (not pushed, or to be pushed again), queued or
    running on Kaggle, collected (its fold run placed here), or failed (twice)."""

    fold: int
    name: str  # the kernel's folder and slug
    kernel: str = ""  # owner/slug, once generated
    state: str = "waiting"
    pushes: int = 0
    version: int | None = None
    why: str = ""  # a failed share's reason


def fanout(options: KernelOptions, report: Callable[[str], None] = print) -> dict[str, int]:
    """Push, follow and collect one kernel per fold of `options.folds` (those in `fold_list`, or
    all) until every share is collected or failed, or `wait_seconds` pass; the shares' counts.
    PetalsError in one line for a share that failed twice, or for shares left waiting or running."""
    options = generate.resolved(options)
    session = check_accelerator(options.accelerator)
    folds = _folds(options)
    base = options.name or default_name(generate.kernel_recipe(options), generate.kernel_spec(options).name)
    check_name(base, "--name")
    path = options.kernels_dir / f"{base}.fanout.json"
    # What the fan-out is: a rerun with another recipe would mix two groups' folds.
    settings = {"folds": options.folds, "recipe": options.recipe, "overrides": list(options.overrides)}
    shares = _load(path, base, settings, folds, report)
    for share in shares:
        if share.state == "waiting" and share.pushes == 0:  # generated now; a pushed one keeps its folder
            share_options = dataclasses.replace(options, name=share.name, fold_list=(share.fold,))
            share.kernel = read_metadata(generate.generate(share_options))["id"]
    _save(path, settings, shares)
    limit = options.timeout or SESSION_LIMIT[session]
    concurrent = options.concurrent or CONCURRENT[session]
    deadline, shown_counts = time.monotonic() + options.wait_seconds, None
    while True:
        for share in shares:
            if share.state in ACTIVE:
                _follow(share, options, report)
                _save(path, settings, shares)
        blocked = _push_waiting(shares, options, session, limit, concurrent, report)
        _save(path, settings, shares)
        counts = {state: sum(s.state == state for s in shares) for state in STATES}
        if counts != shown_counts:
            report(_progress(counts))
            shown_counts = counts
        if not counts["queued"] + counts["running"]:
            if counts["waiting"]:
                raise PetalsError(
                    f"kernel-fanout: {blocked}; rerun `make kernel-fanout` then to push the rest"
                )
            break
        if time.monotonic() >= deadline:
            raise PetalsError(
                f"kernel-fanout: {counts['queued'] + counts['running']} kernel(s) still queued or running "
                f"after {options.wait_seconds:.0f} s; rerun `make kernel-fanout` to go on following them "
                "(none is pushed again)"
            )
        time.sleep(options.poll_seconds)
    failed = [s for s in shares if s.state == "failed"]
    if failed:
        named = "; ".join(f"fold {s.fold} ({s.kernel}): {s.why}" for s in failed)
        raise PetalsError(f"kernel-fanout: {len(failed)} fold(s) failed twice: {named}; fix, then rerun")
    return counts


def _folds(options: KernelOptions) -> list[int]:
    if options.concurrent is not None and options.concurrent < 1:
        raise PetalsError(f"CONCURRENT={options.concurrent}: at least one kernel at a time")
    if options.poll_seconds <= 0 or options.wait_seconds < 0:
        raise PetalsError("--poll-seconds must be more than 0 and --wait-seconds at least 0")
    if options.folds is None:
        raise PetalsError("kernel-fanout needs FOLDS=K: one kernel per fold of the recipe's K-fold CV group")
    if options.folds < 2:
        raise PetalsError(f"FOLDS={options.folds}: cross-validation needs at least 2 folds")
    folds = list(dict.fromkeys(options.fold_list)) or list(range(options.folds))
    bad = [f for f in folds if not 0 <= f < options.folds]
    if bad:
        raise PetalsError(f"FOLD={','.join(map(str, options.fold_list))}: folds are 0..{options.folds - 1}")
    return folds


def _load(path: Path, base: str, settings: dict, folds: list[int], report) -> list[Share]:
    """The shares of these folds: as the state file left them (a failed one to be pushed again),
    else new. A state file of other settings, or one that does not read, is one line naming it."""
    known: dict[int, Share] = {}
    if path.exists():
        for share in _read_state(path, settings):
            known[share.fold] = share
    shares = []
    for fold in folds:
        share = known.get(fold) or Share(fold, f"{base}-fold{fold}")
        if share.state == "failed":
            report(f"fold {fold} ({share.kernel}): failed last time ({share.why}); pushed again")
            share = Share(fold, share.name, share.kernel)
        shares.append(share)
    return shares


def _read_state(path: Path, settings: dict) -> list[Share]:
    """The state file's shares, each field checked: it names folders and Kaggle slugs."""
    if path.stat().st_size > MAX_STATE_BYTES:
        raise PetalsError(f"{path}: larger than {MAX_STATE_BYTES} bytes; not a fan-out's state")
    k = settings["folds"]
    try:
        raw = json.loads(path.read_text())
        for key, value in settings.items():
            if raw.get(key) != value:
                raise PetalsError(
                    f"{path}: a fan-out of {key} {shown(raw.get(key))}, not {shown(value)}; "
                    "move it aside to start another (its kernels stay on Kaggle)"
                )
        shares = [Share(**entry) for entry in raw["shares"]]
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError, KeyError, TypeError) as err:
        raise PetalsError(f"{path}: not a fan-out's state ({err})") from None
    for share in shares:
        bad_fold = not isinstance(share.fold, int) or isinstance(share.fold, bool) or not 0 <= share.fold < k
        if bad_fold or share.state not in STATES or not isinstance(share.pushes, int):
            raise PetalsError(f"{path}: share {shown(dataclasses.asdict(share))} is not a fold's state")
        check_name(share.name, "share name", path)
        if share.kernel:
            check_kernel(share.kernel, path)
    return shares


def _save(path: Path, settings: dict, shares: list[Share]) -> None:
    write_json(path, {**settings, "shares": [dataclasses.asdict(s) for s in shares]})


def _follow(share: Share, options: KernelOptions, report) -> None:
    """Ask Kaggle where the share's kernel stands; collect it once complete; one line per change."""
    from pipeline.core import kaggle_client

    answer = kaggle_client.kernel_status(share.kernel)
    state = remote.kernel_state(answer)
    if state in remote.KERNEL_FAILED:
        why = f"{state.lower().replace('_', ' ')}" + (
            f": {answer.failure_message}" if answer.failure_message else ""
        )
        if share.pushes < PUSHES:
            report(f"fold {share.fold} ({share.kernel}) version {share.version}: {why}; to be pushed again")
            share.state = "waiting"
        else:
            report(f"fold {share.fold} ({share.kernel}) version {share.version}: {why}; failed twice")
            share.state, share.why = "failed", why
        return
    if state != remote.KERNEL_FINISHED:
        seen = "running" if state == "RUNNING" else "queued"
        if seen != share.state:
            report(f"fold {share.fold} ({share.kernel}) version {share.version}: {seen}")
            share.state = seen
        return
    report(f"fold {share.fold} ({share.kernel}) version {share.version}: complete; collecting")
    folder = options.kernels_dir / share.name
    try:
        remote.output(folder, options.submissions_dir, options.data_dir, options.runs_dir)
    except PetalsError as err:  # its output does not merge: pushing it again would give the same
        report(f"fold {share.fold} ({share.kernel}): its output was refused: {err}")
        share.state, share.why = "failed", f"output refused: {err}"
        return
    share.state = "collected"


def _push_waiting(shares: list[Share], options, session: str, limit: int, concurrent: int, report) -> str:
    """Push waiting shares while fewer than `concurrent` run and the weekly quota covers each one's
    time limit; what holds the rest back, in words ("" when nothing does)."""
    running = sum(s.state in ACTIVE for s in shares)
    waiting = [s for s in shares if s.state == "waiting"]
    if not waiting or running >= concurrent:
        return ""
    left, refresh = _quota_left(session)
    for share in waiting:
        if running >= concurrent:
            return f"{concurrent} kernel(s) at once"
        if left is not None and left < limit:
            held = ", ".join(str(s.fold) for s in shares if s.state == "waiting")
            return (
                f"fold(s) {held} wait for the weekly "
                f"{session.upper()} quota: {left / 3600:.1f} h unreserved, each kernel may take its "
                f"{limit / 3600:.1f} h limit (TIMEOUT= lowers it); it resets {refresh}"
            )
        refused = _push(share, options, report)
        if refused:
            return refused
        running += 1
        if left is not None:
            left -= limit  # reserved by Kaggle from now on; the next round reads it again
    return ""


def _push(share: Share, options: KernelOptions, report) -> str:
    """Push the share's kernel: "" once pushed, else Kaggle's words for a limit that passes."""
    from pipeline.core import kaggle_client

    folder = options.kernels_dir / share.name
    meta = read_metadata(folder)
    slug = (meta.get("competition_sources") or [""])[0]
    try:
        share.version = kaggle_client.push_kernel(
            folder, slug, meta["id"], options.timeout, meta.get("machine_shape")
        )
    except PetalsError as err:
        if WAIT_REFUSAL.search(str(err)):
            return f"Kaggle holds fold {share.fold} back ({err})"
        raise
    share.pushes += 1
    share.state = "queued"
    again = " again" if share.pushes > 1 else ""
    report(f"fold {share.fold} ({share.kernel}) version {share.version}: pushed{again}")
    return ""


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
    left = (quota.total_time_allowed - quota.time_used - quota.time_reserved).total_seconds()
    refresh = answer.quota_refresh_time
    return max(left, 0.0), refresh.isoformat() if refresh else "weekly"


def _progress(counts: dict[str, int]) -> str:
    total = sum(counts.values())
    done = ", ".join(f"{counts[s]} {s}" for s in STATES)
    return f"kernel-fanout: {total} fold kernel(s): {done}"
