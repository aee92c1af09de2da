"""What a run tells the tools a competitor already runs: TensorBoard always, MLflow when asked.

`train` opens a `Tracker` once the run dir is written: the config as hyperparameters, then each
epoch's history row (the trainer calls `epoch`), then the run's metrics and curves. `evaluate` adds
its scores, the confusion matrix and the per-class scores; `predict` the submission (MLflow). The
run's tags (its CV group and fold, its sweep's study and trial) are written once, to
`runs/<run-id>/tags.json`, so the later stages tag what they add the same way. A run trained
elsewhere (a Kaggle kernel's fold) is logged as train logs one once it is collected (`collected`).
Nothing here decides a score: every number is one the run dir or the leaderboard already holds.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from pipeline.core.csv_bounds import CsvBounds, check_csv
from pipeline.core.errors import PetalsError
from pipeline.core.foreign_files import present, read_small_bytes
from pipeline.core.options import TRACKS
from pipeline.core.paths import check_name, shown
from pipeline.core.rundir import RunDir
from pipeline.runs import tensorboard

log = logging.getLogger(__name__)
MAX_PNG_BYTES = 64 << 20  # a confusion matrix of 1,500 classes is a few MB
REPORT_CSV = CsvBounds(64 << 20, 64 << 10)  # per_class.csv: a row a class, short cells


def mlflow_asked(track: str) -> bool:
    """Whether `track` asks for MLflow; a value that is none of TRACKS (the API's options are not
    parsed: a typo would track nothing) is one line."""
    if track not in TRACKS:
        raise PetalsError(f"track={track!r}: one of {', '.join(TRACKS)}")
    return track == "mlflow"


def place_label(tags: dict[str, Any], source: object = None) -> str:
    """The event folder's name: where the run stands, so TensorBoard's run filter groups it. The
    tags name a folder and come back in a run's tags.json from kernels and shared runs folders, so
    a study's and a group's names must be plain names and a trial's and a fold's numbers whole, or
    one line says which (`source`: where they were read)."""

    def number(key: str) -> int:
        value = tags.get(key)
        if type(value) is not int or value < 0:
            raise PetalsError(f"{source or 'tags'}: {key} {shown(value)} is not a whole number")
        return value

    parts = []
    if tags.get("study") is not None:
        parts.append(f"{check_name(tags['study'], 'study', source)}-trial{number('trial')}")
    if tags.get("cv_group") is not None:
        parts.append(f"{check_name(tags['cv_group'], 'cv_group', source)}-fold{number('fold')}")
    return "-".join(parts) or "run"


def event_folder(run: RunDir, tags: dict[str, Any]) -> Path:
    return run.file(RunDir.TENSORBOARD) / place_label(tags, run.file(RunDir.TAGS))


def _mlflow_tags(run: RunDir, competition: str, tags: dict[str, Any]) -> dict[str, str]:
    """The MLflow run's tags: what the leaderboard says of the run's data and code, and its place.
    `competition`: the run's competition by its name (its config may hold a competition file's
    path), as the stage resolved it."""
    from pipeline.runs import mlflow_runs

    config = run.read_json(RunDir.CONFIG, default={})
    manifest = run.read_json(RunDir.DATA_MANIFEST, default={})
    found = {
        "competition": competition,
        "recipe": config.get("recipe"),
        "backbone": config.get("model", {}).get("backbone"),
        "git_commit": run.read_json(RunDir.RUN_INFO, default={}).get("git_commit"),
        "data_fingerprint": manifest.get("fingerprint"),
        "cv_group": tags.get("cv_group"),
        "fold": tags.get("fold"),
        mlflow_runs.STUDY_TAG: tags.get("study"),
        "trial": tags.get("trial"),
    }
    return {key: str(value) for key, value in found.items() if value is not None}


class Tracker:
    """One `train` process's tracking of its run (on the competition named `competition`)."""

    def __init__(
        self, run: RunDir, competition: str, config: dict, tags: dict[str, Any], track: str, new: bool
    ):
        asked = mlflow_asked(track)
        self.run, self.tags = run, tags
        run.write_json(RunDir.TAGS, tags)
        self.events = tensorboard.EventLog(event_folder(run, tags), restart=True)
        params = tensorboard.flat_params(config, tags)
        self.events.hparams(params, run.name)
        self.mlflow = None
        if asked:
            from pipeline.runs import mlflow_runs

            self.mlflow = mlflow_runs.MlflowRun(run.path.parent, competition, run.name,
                                                _mlflow_tags(run, competition, tags), new=new)  # fmt: skip
            self.mlflow.training(resumed=not new)
            self.mlflow.params(params)
        self.logged = 0  # the last epoch MLflow has
        self.done = False

    def epoch(self, history) -> None:
        """The history rows not written yet (on a resume, the restored ones first)."""
        self.events.epochs(history)
        if self.mlflow is not None:
            self.logged = _epochs(self.mlflow, history, self.logged)

    def trained(self, metrics: dict[str, Any]) -> None:
        """The run's own numbers and its curves (`_trained`); the event file closed."""
        self.events.close()
        self.done = True
        if self.mlflow is not None:
            _trained(self.mlflow, self.run, metrics)

    def stopped(self, err: BaseException) -> None:
        """Training ended early: KILLED where it stopped with a checkpoint (a signal, its time limit,
        Ctrl-C: the rerun resumes it), FAILED on an error. Once trained, nothing changes."""
        from pipeline.core.errors import Preempted

        if self.done:
            return
        self.events.close()
        if self.mlflow is not None:
            self.mlflow.finished("KILLED" if isinstance(err, (Preempted, KeyboardInterrupt)) else "FAILED")


def _epochs(found, history, logged: int) -> int:
    """The history rows after epoch `logged` as the MLflow run's metrics, each at its epoch; the
    last epoch it has now."""
    for row in history[history["epoch"] > logged].to_dict("records"):
        logged = int(row["epoch"])
        found.metrics({tensorboard.scalar_tag(k): v for k, v in row.items()
                       if k != "epoch" and tensorboard.finite(v)}, logged)  # fmt: skip
    return logged


def _trained(found, run: RunDir, metrics: dict[str, Any]) -> None:
    """The run's own numbers (metrics.json's, as `run/<key>`: the plain names are the leaderboard's)
    and its curves; the MLflow run finished."""
    numbers = {f"run/{k}": v for k, v in metrics.items() if tensorboard.finite(v)}
    found.metrics(numbers, int(metrics.get("epochs", 0)))
    found.artifacts([run.file(RunDir.CURVES), run.history_file])
    found.finished()


def collected(run: RunDir, competition: str, track: str, tags: dict[str, Any]) -> None:
    """With MLflow: a finished run trained elsewhere (a Kaggle kernel's fold, collected into the runs
    dir) as `train` would have tracked it: its config, each epoch's row, its numbers and curves,
    tagged with `tags` (a fold's group and fold: a child of its group's run). Once: a run the store
    holds already (collected before, or trained here) is left as it is."""
    if not mlflow_asked(track):
        return
    from pipeline.runs import mlflow_runs

    tags = {**_tags(run), **tags}
    found = mlflow_runs.MlflowRun(
        run.path.parent, competition, run.name, _mlflow_tags(run, competition, tags)
    )
    if not found.made:
        return
    found.params(tensorboard.flat_params(run.read_json(RunDir.CONFIG, default={}), tags))
    _epochs(found, run.read_history(), 0)
    _trained(found, run, run.metrics())


def _tags(run: RunDir) -> dict[str, Any]:
    return run.read_json(RunDir.TAGS, default={})


def _mirror_row(
    run: RunDir, competition: str, board: Path, files: list[Path], folder: str | None = None
) -> None:
    """The run's leaderboard row, its numbers as the MLflow run's metrics under the board's column
    names (read back from the board: the same values, rounded as it rounds them), and `files`."""
    from pipeline.runs import mlflow_runs

    found = mlflow_runs.MlflowRun(
        run.path.parent, competition, run.name, _mlflow_tags(run, competition, _tags(run))
    )
    _board_metrics(found, board, run.name)
    found.artifacts(files, folder)


def evaluated(run: RunDir, competition: str, evaluation: dict[str, Any], board: Path, track: str) -> None:
    """Evaluate's scores (at step = the run's epochs) and its pictures in the run's events; with
    MLflow, the run's leaderboard row and the report files (the run is on `competition`, by name)."""
    import pandas as pd

    asked = mlflow_asked(track)
    epochs = run.metrics().get("epochs")
    step = epochs if type(epochs) is int and 0 <= epochs < 1 << 31 else 0  # a kernel's file says anything
    events = tensorboard.EventLog(event_folder(run, _tags(run)))
    scores = {k: v for k, v in evaluation.items() if k.startswith("val_") and tensorboard.finite(v)}
    events.scalars({f"evaluate/{k[4:]}": v for k, v in scores.items()}, step)
    pngs = {}
    # The run's pictures: one carried in from a kernel's output (a regression never writes its own)
    # is a foreign file, read bounded (`EventLog.images` draws only a PNG of a sane size).
    if present(run.file(RunDir.CONFUSION_PLOT)):
        pngs["evaluate/confusion_matrix"] = read_small_bytes(
            run.path, RunDir.CONFUSION_PLOT, "the run's picture", run.path, MAX_PNG_BYTES
        )
    if run.file(RunDir.PER_CLASS).is_file():
        check_csv(run.file(RunDir.PER_CLASS), REPORT_CSV)
        try:
            drawn = tensorboard.per_class_png(pd.read_csv(run.file(RunDir.PER_CLASS)))
        except (ValueError, KeyError, TypeError):  # not the table evaluate writes
            drawn = None
        if drawn is not None:
            pngs["evaluate/per_class_scores"] = drawn
    events.images(pngs, step)
    events.close()
    if asked:
        _mirror_row(
            run,
            competition,
            board,
            [run.file(n) for n in (RunDir.CONFUSION_PLOT, RunDir.PER_CLASS, RunDir.CONFUSIONS)],
        )


def group_assembled(group: RunDir, board: Path, track: str, tags: dict[str, Any]) -> None:
    """With MLflow: the CV group's run (its folds' parent) gets the group's leaderboard row, the CV
    score in the board's score column and as `cv_score`, and its out-of-fold mistakes. `tags`: the
    group's competition, recipe, data and commit, as its folds' say them."""
    if not mlflow_asked(track):
        return
    from pipeline.runs import mlflow_runs

    shown = {key: str(value) for key, value in tags.items() if value is not None}
    found = mlflow_runs.MlflowRun(group.path.parent, shown["competition"], group.name,
                                  {**shown, mlflow_runs.KIND_TAG: "cv_group"})  # fmt: skip
    found.tags(shown)  # a group run its first fold made has the fold's tags: the group's added
    _board_metrics(found, board, group.name)
    found.artifacts([group.file(RunDir.MISTAKES_PLOT), group.file(RunDir.MISTAKES)], "evaluate")
    found.finished()


def ensemble_written(
    out: RunDir, board: Path, submission: Path, track: str, competition: str, fingerprint: str | None
) -> None:
    """With MLflow: the blend as a run (tagged `petals.kind=ensemble`), its members' weights as params
    (`member.<run-id>`; a stack's as `stacked`) and their ids as the `members` tag, its method, its
    leaderboard row's numbers as metrics and its submission."""
    if not mlflow_asked(track):
        return
    from pipeline.runs import mlflow_runs

    metrics = out.metrics()
    members = metrics.get("members", {})
    tags = {"competition": competition, "data_fingerprint": fingerprint, mlflow_runs.KIND_TAG: "ensemble",
            "members": " ".join(members), "method": metrics.get("method", "weights"),
            "judged": metrics.get("judged")}  # fmt: skip
    found = mlflow_runs.MlflowRun(out.path.parent, competition, out.name,
                                  {k: str(v) for k, v in tags.items() if v is not None})  # fmt: skip
    found.params(
        {f"member.{name}": "stacked" if weight is None else weight for name, weight in members.items()}
    )
    _board_metrics(found, board, out.name)
    found.artifacts([submission], "submission")
    found.finished()


def _board_metrics(found, board: Path, entry: str) -> None:
    """The entry's leaderboard row's numbers as the MLflow run's metrics, under the board's names."""
    from pipeline.runs import leaderboard

    table = leaderboard.read(board)
    rows = table[table["entry"] == entry].to_dict("records")
    if rows:
        found.metrics({k: v for k, v in rows[0].items() if tensorboard.finite(v)})


def study_finished(runs_dir: Path, competition: str, summary: dict[str, Any], track: str) -> None:
    """With MLflow: the study's run (its trials' parent) gets the best trial's score, number, run and
    values, as the sweep's closing line says them."""
    best = summary.get("best")
    if not mlflow_asked(track) or best is None:
        return
    from pipeline.runs import mlflow_runs

    study = summary["study"]
    found = mlflow_runs.MlflowRun(runs_dir, competition, study, {mlflow_runs.STUDY_TAG: study,
                                                                 mlflow_runs.KIND_TAG: "study"})  # fmt: skip
    found.metrics({"best_score": best["score"], "best_trial": best["trial"]})
    found.tags({"best_run": best.get("run"), **{f"best.{k}": v for k, v in best["params"].items()}})


def predicted(run: RunDir, competition: str, submission: Path, board: Path, track: str) -> None:
    """With MLflow: the run's leaderboard row again (predict may have made it) and the submission
    (the run is on `competition`, by name)."""
    if mlflow_asked(track):
        _mirror_row(run, competition, board, [submission], "submission")
