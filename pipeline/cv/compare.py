"""Two runs judged on the rows both held out: is the second ahead of the first beyond what those
rows can tell?

Each run's held-out predictions, as its own score was made: a CV group's out-of-fold rows, a single
run's val rows as evaluate scores them (each part of val at the epoch the other parts chose, where
the run chose its epoch on val). On the rows both held out, matched by id, both scores and the
second's less the first's, with its standard error and 95% interval from one bootstrap that draws
the same rows (whole groups, where the competition names them) for both runs
(`competition.metric.Metric.difference`): what the two get right or wrong together cancels. Two
runs' own intervals overlap long after such a difference is clear of zero; on the embedded flowers
two recipes 0.003 apart, each interval 0.013 wide, were judged so (docs/BENCHMARKS.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.core.errors import PetalsError
from pipeline.core.rundir import RunDir, finished_run
from pipeline.cv.crossfit import crossed_epochs
from pipeline.cv.held import saved_predictions
from pipeline.modeling.inference import Predictions


@dataclass(frozen=True)
class Comparison:
    names: tuple[str, str]
    metric: str  # as people write it, and which way is better where lower is
    rows: int
    groups: int | None
    scores: tuple[float, float]
    difference: float  # the second's score less the first's
    se: float
    interval: tuple[float, float]
    changed: int  # rows whose predicted class differs (0 where the metric reads no class)
    apart: str = ""  # how the two were made on other machines or libraries, where run.json says so

    def line(self) -> str:
        """One line for a terminal. The run names come from folders, which get shared, so the line
        is shown as `foreign.text` shows any foreign value (no escape sequence acts)."""
        from pipeline.core.foreign import text

        over = f"{self.rows:,} rows both held out" + (f" ({self.groups:,} groups)" if self.groups else "")
        low, high = self.interval
        rows = "row" if self.changed == 1 else "rows"
        changed = f"; {self.changed:,} {rows} predicted differently" if self.changed else ""
        apart = f"; trained {self.apart}, which moves a score as a seed does" if self.apart else ""
        said = (
            f"{self.metric} on {over}: {self.names[0]} {self.scores[0]:.4f}, {self.names[1]} "
            f"{self.scores[1]:.4f}; the second less the first {_signed(self.difference)} "
            f"(se {self.se:.4f}, 95% interval {_signed(low)} to {_signed(high)}){changed}{apart}"
        )
        return text(said, 2000)


def _signed(value: float) -> str:
    """`+0.0123`; a difference that rounds to nothing reads +0.0000, never -0.0000."""
    return f"{round(value, 4) + 0.0:+.4f}"


def runs_named(runs_dir: Path, names: tuple[str, str]) -> tuple[list[RunDir], str]:
    """The two finished runs (or CV groups) `names` name, by id under `runs_dir` or by path, and
    their one competition's name (the stage resolves it)."""
    runs = [finished_run(runs_dir, name) for name in names]
    if len(names) != 2 or runs[0].path.resolve() == runs[1].path.resolve():
        raise PetalsError(f"compare {' '.join(names)}: two different runs, each once")
    competitions = {_competition(run) for run in runs}
    if len(competitions) > 1:
        listed = ", ".join(sorted(competitions))
        raise PetalsError(f"compare: the runs belong to different competitions ({listed})")
    return runs, competitions.pop()


def _competition(run: RunDir) -> str:
    """The competition a run's config names, or a CV group's (group.json: a group has no config
    of its own): a name, or a competition file's path."""
    if run.file(RunDir.GROUP).is_file():
        info = run.read_json(RunDir.GROUP)
        found = info.get("competition_given") or info.get("competition")
        if not isinstance(found, str) or not found:
            raise PetalsError(f"{run.file(RunDir.GROUP)}: names no competition; train the group again")
        return found
    return run.competition()


def compare(runs: list[RunDir], spec, data_dir: Path) -> Comparison:
    """The two runs of the competition `spec` on the rows both held out of `data_dir`'s labelled
    data."""
    from pipeline.data.groups import held_out_grouping

    groups_of = held_out_grouping(data_dir, spec)  # the group column read once for both runs
    first, second = (held_out(run, spec, data_dir, groups_of) for run in runs)
    ids = np.intersect1d(first.ids, second.ids)
    if not len(ids):
        raise PetalsError(f"compare: {runs[0].name} and {runs[1].name} held out no row in common")
    first, second = first.by_ids(ids), second.by_ids(ids)
    if not np.array_equal(first.labels, second.labels):
        raise PetalsError(f"compare: {runs[0].name} and {runs[1].name} hold other labels for the same ids")
    groups = groups_of(ids)
    paired = spec.metric.difference(first.labels, first.probabilities, second.probabilities, groups)
    if paired is None:  # labels decided by thresholds chosen on these rows, or no draw scorable
        decided = spec.metric.reads == "labels"
        why = " (it scores labels decided by thresholds chosen on them)" if decided else ""
        raise PetalsError(f"compare: {spec.metric.title} cannot be drawn again on these rows{why}")
    difference, se, low, high = paired
    changed = first.probabilities.argmax(1) != second.probabilities.argmax(1)
    return Comparison(
        names=(runs[0].name, runs[1].name),
        metric=spec.metric.title + ("" if spec.metric.greater_is_better else " (lower is better)"),
        rows=len(ids),
        groups=None if groups is None else len(set(groups.tolist())),
        scores=(
            spec.metric.score(first.labels, first.probabilities),
            spec.metric.score(second.labels, second.probabilities),
        ),
        difference=difference,
        se=se,
        interval=(low, high),
        changed=int(changed.sum()) if spec.metric.reads == "class" else 0,
        apart=apart(*(made_on(run) for run in runs)),
    )


def made_on(run: RunDir) -> dict:
    """What a run's run.json says it was trained on (`cpu`, `built_with`); a CV group's, its first
    fold's. {} where it says nothing (a run trained before petals recorded it)."""
    from pipeline.core.paths import check_name

    if run.file(RunDir.GROUP).is_file():
        folds = run.metrics().get("fold_runs")
        if not isinstance(folds, dict) or not folds:
            return {}
        name = check_name(folds[min(folds)], "fold_runs", run.metrics_file)  # a name, never a path
        run = RunDir(run.path.parent / name)
    info = run.read_json(RunDir.RUN_INFO, default={})
    return info if isinstance(info, dict) else {}


def apart(first: dict, second: dict) -> str:
    """`on other CPUs (X; Y)` and/or `with other libraries (tensorflow 2.20.0; 2.21.0)` where both
    runs recorded theirs and they differ: oneDNN's round-off follows the CPU's instruction set, and
    one fine-tune moved 0.006-0.009 between two at one commit and seed (docs/BENCHMARKS.md)."""
    said = []
    cpus = first.get("cpu"), second.get("cpu")
    if all(isinstance(c, str) and c for c in cpus) and cpus[0] != cpus[1]:
        said.append(f"on other CPUs ({cpus[0]}; {cpus[1]})")
    ours, theirs = first.get("built_with"), second.get("built_with")
    if isinstance(ours, dict) and isinstance(theirs, dict):
        changed = sorted(k for k in set(ours) & set(theirs) if ours[k] != theirs[k])
        if changed:
            listed = ", ".join(f"{k} {ours[k]}; {theirs[k]}" for k in changed)
            said.append(f"with other libraries ({listed})")
    return " and ".join(said)


def held_out(run: RunDir, spec, data_dir: Path, groups_of=None) -> Predictions:
    """What `run`'s score was made of: a CV group's out-of-fold predictions; a single run's val
    predictions (saved by evaluate, of this data), each part at the epoch the other parts chose,
    its parts whole groups (`groups_of(ids)`: the data's groups, read where not given)."""
    from pipeline.data.groups import held_out_grouping

    if run.file(RunDir.GROUP).is_file():
        from pipeline.cv.members import check_data
        from pipeline.data.manifest import read_manifest

        path = run.predictions("oof")
        if not path.is_file():
            raise PetalsError(f"{run.name}: the CV group has no out-of-fold predictions yet; train its folds")
        check_data(run.name, run.read_json(RunDir.GROUP).get("data"), read_manifest(data_dir), data_dir)
        return Predictions.load(path)
    if not run.predictions("val", 1).is_file():
        raise PetalsError(f"{run.name}: no val predictions yet; `make evaluate RUN={run.name}` writes them")
    val = saved_predictions(run, data_dir, "val", 1)
    if val.labels is None:
        raise PetalsError(f"{run.predictions('val', 1)}: val predictions without labels")
    groups_of = groups_of or held_out_grouping(data_dir, spec)
    crossed = crossed_epochs(run, val, spec, groups_of(val.ids))
    return val if crossed is None else Predictions(val.ids, crossed["probabilities"], val.labels, val.tta)
