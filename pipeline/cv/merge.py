"""Fold runs trained elsewhere (a Kaggle kernel's outputs, another session) merged into the local
runs dir, and their CV group assembled here from the predictions they saved.

A kernel trains some folds of a group (`make kernel FOLDS=5 FOLD=0,1`) and writes each fold run's
val and test predictions beside its files; `make kernel-output` downloads them and `merge_output`
places every finished fold run under its run id, then assembles the group once all K are here.
A fold run without its weights here is judged by its saved predictions (`pipeline.cv.held`), after
checking it was trained on this data dir's labelled data (its id then names the same fold table
the local config deals) and that its val ids are exactly that table's held-out ids
(`pipeline.cv.group.out_of_fold`). A fold trained on other data is refused, never merged.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
from collections.abc import Callable
from pathlib import Path

from pipeline.core import rundir
from pipeline.core.errors import PetalsError
from pipeline.core.files import copy_plain
from pipeline.core.foreign import text
from pipeline.core.lock import staging_folder
from pipeline.core.options import TRACK
from pipeline.core.paths import check_name, shown
from pipeline.core.rundir import RunDir
from pipeline.tasks.competitions import Competition, size_of

RUNS = "petals_runs"  # where a kernel writes its runs (pipeline/kernels/script/main.py: RUNS)
PREDICTED = ("val", "test")  # the splits a kernel predicts for each fold it trains

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------- placing fold runs


def fold_runs_in(output: Path) -> list[RunDir]:
    """The fold runs a kernel's downloaded outputs hold (runs with train.folds set), by name."""
    runs = output / RUNS
    if runs.is_symlink():  # a shared output folder's runs elsewhere: not the kernel's
        raise PetalsError(f"{output}: {RUNS} is a link; petals merges only the runs a kernel wrote there")
    if not runs.is_dir():
        return []
    found = []
    for path in sorted(runs.iterdir()):
        run = RunDir(path)
        if path.is_dir() and not path.is_symlink() and run.config_file.is_file():
            check_name(path.name, "run id", output)
            if run.read_config().train.folds:
                found.append(run)
    return found


def foreign_data(run: RunDir, identity: str, competition: Competition) -> str | None:
    """Why `run` (on `competition`, its config's) cannot be a fold of this data's group (trained on
    other data, or an id its config and data do not give); None when it can."""
    trained_on = run.trained_on()
    theirs = rundir.data_identity(trained_on)
    config = run.read_config()
    what = f"fold {config.train.fold}" if config.train.folds else "run"
    if theirs != identity:
        # the data manifest came back in a kernel's output: its words are shown, never acted on
        origin = text(trained_on.get("origin") or trained_on.get("source") or "?", 80)
        where = f"{origin} ({text(theirs[:15]) or '?'}…)"
        return f"{what} ({run.name}): trained on {where}, not this data dir's: not merged"
    expected = rundir.run_id(config, identity, size_of(config, competition))
    if expected != run.name:
        return (
            f"{what} ({run.name}): this checkout gives its config the id {expected} (another petals "
            "version's run? regenerate the kernel with `make kernel` and train it again): not merged"
        )
    return None


def _same(ours: RunDir, theirs: RunDir) -> bool:
    """The same finished run: the same config and the same metrics, byte for byte."""
    return all(
        ours.file(name).is_file() and ours.file(name).read_bytes() == theirs.file(name).read_bytes()
        for name in (RunDir.CONFIG, RunDir.METRICS)
    )


def _carried(run: RunDir) -> list[Path]:
    """What a placed fold run keeps: its small files, its saved predictions, its best weights (and
    a text run's tokenizer); never checkpoints or the last weights, which only a resume needs."""
    names = [*RunDir.SMALL_FILES, RunDir.BEST, RunDir.TOKENIZER]
    paths = [run.file(name) for name in names] + sorted(run.path.glob("*_predictions*.npz"))
    return [p for p in paths if p.exists() and not p.is_symlink()]


def place(run: RunDir, runs_dir: Path) -> str:
    """Copy a finished fold run into `runs_dir` under its id (whole, or not at all): `placed`; `here`
    when that run is already there; `kept` when a different run of that id is there (never
    overwritten); `busy` when an unfinished local run of that id is there."""
    local = RunDir(runs_dir / run.name)
    if local.finished:
        return "here" if _same(local, run) else "kept"
    if local.path.exists():
        return "busy"
    # This process's own staging folder: two merges of one output at once (two terminals) each
    # copy into their own, and the first rename wins; the other finds the run there.
    runs_dir.mkdir(parents=True, exist_ok=True)
    partial = staging_folder(runs_dir, f".{run.name}.partial.")  # a killed merge's is removed
    try:
        for path in _carried(run):  # a link inside (a tokenizer's file to a key) is left out
            for left in copy_plain(path, partial / path.name):
                inner = shown(left.relative_to(run.path).as_posix())
                log.warning("merge: %s of %s is not a plain file or folder (a link?); not copied",
                            inner, run.name)  # fmt: skip
        try:  # whole, in one step: a copy cut short leaves no finished run
            partial.rename(local.path)
        except OSError:  # placed by another merge meanwhile (a folder there is never replaced)
            if not local.finished:
                return "busy"
            return "here" if _same(local, run) else "kept"
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return "placed"


# ----------------------------------------------------------------------------- merging a kernel's output


def merge_output(
    output: Path,
    source: str,
    data_dir: Path,
    runs_dir: Path,
    submissions_dir: Path,
    trained: dict[str, str],
    competition_of: Callable[[str], Competition],
    tta: int = 1,
    platform: Callable[[], object] | None = None,
    report: Callable[[str], None] = print,
    track: str = TRACK,
) -> list[dict | None]:
    """Place the finished fold runs `output` holds into `runs_dir` and assemble each group that is
    then complete; one line per fold of each group. `trained` maps run ids to when they finished
    (from the kernel's summary); `competition_of` is the stage's resolver of the competition a
    downloaded config names (each group's resolved once); `platform` makes the device platform,
    only if a group assembles; `track` (mlflow): each fold run here tracked once, as a fold trained
    here is, and the group too. The metrics of each group (None for one still missing folds)."""
    from pipeline.cv.group import fold_tags
    from pipeline.data.manifest import read_manifest
    from pipeline.runs import tracking

    manifest = read_manifest(data_dir)
    if manifest is None:
        raise PetalsError(f"{data_dir}: no manifest.json; run `make fetch` (or pass the fetched --data-dir)")
    identity = rundir.data_identity(manifest)
    arrived, configs, competitions = {}, {}, {}
    for run in fold_runs_in(output):
        config = run.read_config()
        group = _group_name(config, identity)
        configs.setdefault(group, config)
        if group not in competitions:  # a group's folds share its config, so its competition
            competitions[group] = competition_of(config.competition)
        refused = foreign_data(run, identity, competitions[group])
        if refused:
            report(refused)
        elif not run.finished:
            arrived[run.name] = "unfinished"
        else:
            arrived[run.name] = place(run, runs_dir)
            if arrived[run.name] in ("placed", "here"):  # this run, here now: "kept" is another
                here, name = RunDir(runs_dir / run.name), competitions[group].name
                tracking.collected(here, name, track, fold_tags(config, identity))
    results = []
    for group, config in configs.items():
        found = _setup(config, competitions[group], manifest, data_dir, runs_dir, platform)
        complete = _report_folds(found, arrived, source, trained, runs_dir, report)
        results.append(
            _assemble(found, data_dir, runs_dir, submissions_dir, tta, report, track) if complete else None
        )
    return results


def _group_name(config, identity: str) -> str:
    from pipeline.cv.group import group_id

    return group_id(config, identity)


def _setup(config, competition: Competition, manifest: dict, data_dir: Path, runs_dir: Path, platform):
    """The group of the fold runs' config (on `competition`) on this data dir, as `experiment.setup`
    makes it."""
    from pipeline.cv.experiment import Setup
    from pipeline.data import folds

    config = dataclasses.replace(config, train=dataclasses.replace(config.train, fold=0))
    table = folds.fold_table(data_dir, competition.spec, config)
    group = RunDir(runs_dir / _group_name(config, rundir.data_identity(manifest)))
    return Setup(config, competition, manifest, table, group, platform)


def _report_folds(found, arrived: dict, source: str, trained: dict, runs_dir: Path, report) -> bool:
    """One line per fold of the group; whether every fold is finished here."""
    k = found.config.train.folds
    complete = True
    for fold in range(k):
        run = found.fold_run(fold)
        state = arrived.get(run.name)
        if state == "placed":
            report(f"fold {fold}: from {source} (trained {trained.get(run.name) or 'time unknown'})")
        elif state == "kept":
            report(
                f"fold {fold} ({run.name}): {runs_dir} holds a different finished run of this id; kept "
                f"it, {source}'s not merged (delete {run.path} to take {source}'s)"
            )
        elif state == "busy":
            report(f"fold {fold} ({run.name}): an unfinished run of this id is in {runs_dir}; not merged "
                   f"(finish or delete {run.path})")  # fmt: skip
        elif run.finished:
            report(f"fold {fold}: already in {runs_dir} ({run.name})")
        elif state == "unfinished":
            report(f"fold {fold}: unfinished in {source} (stopped at its time limit): push it again "
                   f"with RESUME_FROM=self (FOLDS={k} FOLD={fold})")  # fmt: skip
        else:
            report(f"fold {fold}: missing: train it (FOLDS={k} FOLD={fold})")
        complete = complete and run.finished
    return complete


def _assemble(found, data_dir: Path, runs_dir: Path, submissions_dir: Path, tta: int, report, track: str):
    """The complete group's OOF, scores and leaderboard row (`experiment.assemble`)."""
    from pipeline.core.options import CVOptions
    from pipeline.cv import experiment

    if callable(found.platform):
        found.platform = found.platform()
    opts = CVOptions(
        recipe=found.config.recipe,
        folds=found.config.train.folds,
        data_dir=data_dir,
        runs_dir=runs_dir,
        submissions_dir=submissions_dir,
        tta=tta,
        track=track,
    )
    metrics = experiment.assemble(found, opts)
    report(experiment.summary_line(found.group.name, found.spec, metrics))
    return metrics
