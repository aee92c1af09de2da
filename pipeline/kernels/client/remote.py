"""A generated kernel on Kaggle: push a new version, follow it, collect its outputs.

Every call goes through `pipeline.core.kaggle_client`; a folder is checked (`pipeline.kernels.client.check`)
by the caller before it is pushed. `wait_for_kernel` follows a pushed version to its end.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.core.errors import PetalsError
from pipeline.core.foreign import text
from pipeline.core.options import TRACK
from pipeline.core.paths import inside
from pipeline.core.progress import Progress
from pipeline.kernels.client.metadata import (
    SUMMARY,
    read_folds_summary,
    read_json_object,
    read_metadata,
    read_summary,
    read_trials_summary,
)

if TYPE_CHECKING:
    from pipeline.tasks.competitions import Competition


def push(folder: Path, timeout: int | None = None) -> int:
    """Push the folder as a new version of its kernel, once the wheels and weights datasets it attaches
    (if any) are on Kaggle; the version number Kaggle gave it."""
    from pipeline.core import kaggle_client
    from pipeline.kernels.client import weights, wheels

    wheels.publish(folder)
    weights.publish(folder)
    meta = read_metadata(folder)
    slug = (meta.get("competition_sources") or [""])[0]
    accelerator = meta.get("machine_shape")  # None for a CPU kernel: the client sends no accelerator
    version = kaggle_client.push_kernel(folder, slug, meta["id"], timeout, accelerator)
    print(
        f"kernel {meta['id']} version {version} pushed ({accelerator or 'CPU'}): "
        f"https://www.kaggle.com/code/{meta['id']}; "
        "`make kernel-status` follows it, `make kernel-output` collects it"
    )
    return version


def status(folder: Path) -> str:
    """One line: the kernel's newest version's state, and Kaggle's failure message if any."""
    from pipeline.core import kaggle_client

    kernel = read_metadata(folder)["id"]
    answer = kaggle_client.kernel_status(kernel)
    failure = f": {text(answer.failure_message)}" if answer.failure_message else ""
    return f"kernel {kernel}: {kernel_state(answer).lower()}{failure}"


KINDS = ("run", "folds", "trials")  # what a kernel's output holds: one run, fold runs, a study's trials


def download(folder: Path, expected: str | None = None) -> tuple[str, Path, str]:
    """The kernel's outputs downloaded into `<folder>/output/` (every name checked); its id, that
    folder, and what the output holds (one of KINDS), read from its summary. `expected`: what the
    caller made the kernel for; an output that holds something else is refused."""
    from pipeline.core import kaggle_outputs

    kernel = read_metadata(folder)["id"]
    target = folder / "output"
    files = kaggle_outputs.kernel_output(kernel, target)
    summary_path = target / SUMMARY
    if not summary_path.is_file():
        raise PetalsError(
            f"kernel {kernel} left no {SUMMARY} ({len(files)} file(s) downloaded to {target}); "
            "`make kernel-status` says whether it finished or failed"
        )
    raw = read_json_object(summary_path)
    kind = "trials" if raw.get("trials") else "folds" if raw.get("folds") else "run"
    print(f"kernel {kernel}: {len(files)} file(s) in {target}")
    if expected is not None and kind != expected:
        raise PetalsError(f"kernel {kernel}'s output holds {kind}, not the {expected} it was made for")
    return kernel, target, kind


def output(
    folder: Path,
    submissions_dir: Path,
    data_dir: Path = Path("data"),
    runs_dir: Path = Path("runs"),
    expected: str | None = None,
    *,
    competition_of: Callable[[str], Competition],
    track: str = TRACK,
) -> None:
    """Download the kernel's outputs into `<folder>/output/` and record its run on the leaderboard;
    a FOLDS kernel's fold runs are merged into `runs_dir` instead (`merge_folds`, tracked as `track`
    says), and a kernel of trials' runs placed there (`place_trials`). `expected` (one of KINDS):
    what the caller made the kernel for; an output that holds something else is refused.
    `competition_of`: the stage's resolver of the competition a downloaded run's config names
    (`merge.merge_output`). Every name Kaggle answers with (the files, the summary's fields) is
    checked before it is used."""
    from pipeline.runs import leaderboard

    kernel, target, kind = download(folder, expected)
    if kind == "trials":  # a share of a study's trials: its runs placed (the fan-out tells the study)
        place_trials(kernel, target, data_dir, runs_dir, submissions_dir, competition_of=competition_of)
        return
    if kind == "folds":
        merge_folds(kernel, target, data_dir, runs_dir, submissions_dir, competition_of, track)
        return
    summary_path = target / SUMMARY
    summary = read_summary(summary_path, kernel)  # Kaggle's file: its names and scores checked
    metrics = summary["metrics"]
    evaluation = metrics["evaluation"]
    entry = f"kaggle-{summary['run_id']}"
    competition = summary["competition"]
    submission = inside(target, summary["submission_file"], "submission_file", summary_path)
    key = f"val_{metrics['metric']}"
    leaderboard.update(
        leaderboard.board_file(submissions_dir, competition),
        entry,
        kind="kaggle",
        time=summary.get("finished"),
        git_commit=summary.get("petals_commit"),
        competition=competition,
        data_source=summary.get("data_source"),
        data_fingerprint=summary.get("data_fingerprint"),
        recipe=metrics.get("recipe"),
        backbone=metrics.get("backbone"),
        image_size=metrics.get("image_size"),
        epochs=metrics.get("epochs"),
        **{
            "val_accuracy": evaluation.get("val_accuracy", metrics.get("val_accuracy")),
            key: evaluation.get(key, metrics.get(key)),  # the same column for an accuracy competition
        },
        tta=evaluation.get("tta"),
        train_seconds=metrics.get("train_seconds"),
        submission=str(submission) if submission.is_file() else None,
    )
    print(f"kernel {kernel}: recorded as {entry} on the leaderboard")


def merge_folds(
    kernel: str,
    target: Path,
    data_dir: Path,
    runs_dir: Path,
    submissions_dir: Path,
    competition_of: Callable[[str], Competition],
    track: str = TRACK,
) -> None:
    """A FOLDS kernel's output: its finished fold runs placed in `runs_dir` and their CV group
    assembled once every fold is there, one line per fold (`pipeline.cv.merge`; `competition_of`
    resolves the competition a fold's config names; `track`: where the fold runs and the group are
    tracked besides their files)."""
    from pipeline.core import device
    from pipeline.cv import merge

    summary = read_folds_summary(target / SUMMARY, kernel)
    merge.merge_output(
        target,
        f"kernel {kernel}",
        data_dir,
        runs_dir,
        submissions_dir,
        trained=summary["fold_runs"],
        competition_of=competition_of,
        tta=summary["tta"],
        platform=device.pick,  # only when a group assembles: a fold whose weights came may predict
        track=track,
    )


def place_trials(
    kernel: str,
    target: Path,
    data_dir: Path,
    runs_dir: Path,
    submissions_dir: Path,
    only: list[int] | None = None,
    report=print,
    *,
    competition_of: Callable[[str], Competition],
) -> tuple[dict[int, str], dict[str, list[str]]]:
    """A kernel of trials' output: each trial's finished run placed in `runs_dir` (with FOLDS, its
    fold runs, and each group assembled once complete). For each trial (those in `only`, the share
    the kernel was made for), what became of it: placed, here, kept (`merge.place`'s words), busy
    (an unfinished local run of its id), or why it has no run here; and the checked `trial_runs`."""
    from pipeline.core.rundir import RunDir, data_identity
    from pipeline.cv import merge
    from pipeline.data.manifest import read_manifest

    summary = read_trials_summary(target / SUMMARY, kernel)
    asked = only if only is not None else sorted(int(n) for n in summary["trial_runs"])
    runs, failed = summary["trial_runs"], summary["trial_failed"]
    unfinished = "the kernel finished no run of it (its time limit?)"
    # the kernel's own words on a failed trial: printed by the sweep, so shown escaped
    outcome = {n: text(failed[str(n)], 300) if failed.get(str(n)) else unfinished for n in asked}
    if summary.get("folds"):
        merge_folds(kernel, target, data_dir, runs_dir, submissions_dir, competition_of)
        for number in asked:
            names = runs.get(str(number))
            if names and all(RunDir(runs_dir / name).finished for name in names):
                outcome[number] = "here"
        return outcome, runs
    identity = data_identity(read_manifest(data_dir) or {})
    for number in asked:
        if str(number) not in runs:
            continue
        run = RunDir(target / merge.RUNS / runs[str(number)][0])
        refused = (
            merge.foreign_data(run, identity, competition_of(run.read_config().competition))
            if run.config_file.is_file()
            else "its run is not there"
        )
        if refused or not run.finished:
            outcome[number] = refused or f"{run.name} is unfinished"
        else:
            outcome[number] = merge.place(run, runs_dir)
        report(f"trial {number}: run {run.name}: {outcome[number]} (kernel {kernel})")
    return outcome, runs


class KernelFailed(PetalsError):
    """A kernel version ended in an error or was cancelled: its output cannot be submitted."""


# What GetKernelSessionStatus answers for the newest version (kagglesdk's KernelWorkerStatus names).
KERNEL_FINISHED = "COMPLETE"
KERNEL_FAILED = ("ERROR", "CANCEL_REQUESTED", "CANCEL_ACKNOWLEDGED")


def kernel_state(answer: Any) -> str:
    """A status answer's state as kagglesdk names it: QUEUED, RUNNING, COMPLETE, ERROR, ..."""
    return str(getattr(answer.status, "name", answer.status)).rsplit(".", 1)[-1]


def wait_for_kernel(
    kernel: str,
    version: int,
    *,
    poll_seconds: float = 60.0,
    limit_seconds: float = 13 * 3600.0,
    report: Callable[[str], None] = print,
) -> None:
    """Poll the kernel's status until its newest version (`version`, just pushed) completes; each
    change of state is reported in one line. PetalsError in one line when it ends in an error or is
    cancelled, or is still not done after `limit_seconds`. How long it has waited goes on a bar on
    a terminal, in a line at every tenth of the limit elsewhere."""
    started, seen = time.monotonic(), None
    what = f"kernel {kernel} version {version}"
    with Progress(what, limit_seconds, "s", bound=True, report=report) as waiting:
        while True:
            state = _poll(kernel, version, seen, waiting.said(report))  # a line clear of the bar
            if state == KERNEL_FINISHED:
                return
            seen = state
            waited = time.monotonic() - started
            waiting.reach(waited)
            if waited >= limit_seconds:
                raise PetalsError(
                    f"kernel {kernel} version {version} is still {state.lower()} after {waited:.0f} s: "
                    "nothing was submitted; rerun `make submit` to go on waiting for this version "
                    "(it is not pushed again)"
                )
            time.sleep(min(poll_seconds, max(limit_seconds - waited, 0.0)))


def _poll(kernel: str, version: int, seen: str | None, report: Callable[[str], None]) -> str:
    """The kernel's state now, reported in a line when it changed; KernelFailed where it failed."""
    from pipeline.core import kaggle_client

    answer = kaggle_client.kernel_status(kernel)
    state = kernel_state(answer)
    if state != seen:
        report(f"kernel {kernel} version {version}: {state.lower().replace('_', ' ')}")
    if state in KERNEL_FAILED:
        why = f" ({text(answer.failure_message)})" if answer.failure_message else ""
        raise KernelFailed(
            f"kernel {kernel} version {version} ended {state.lower().replace('_', ' ')}{why}: "
            f"nothing was submitted; its log is at https://www.kaggle.com/code/{kernel}; "
            "fix, then `make submit` again"
        )
    return state
