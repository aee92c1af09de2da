"""Cross-validated experiments: a CV group's setup, its assembly from finished folds, and the
submission of the fold average.

Each fold is a run as any other (`pipeline.stages.train`: resumable, checkpointed, locked), its
config the group's with `train.fold` set, so folds trained in other processes, sessions or Kaggle
kernels are found by their run ids and assemble into the same group. Once every fold is finished,
`assemble` writes the group's out-of-fold predictions and scores (`pipeline.cv.group`) and its
leaderboard row; `predict_mean` writes the submission of the fold average. Training the folds and
the refit on all the data run the train and predict stages: the CV stage does that
(pipeline/stages/cv.py), above them.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from pipeline.core import rundir
from pipeline.core.errors import PetalsError
from pipeline.core.options import CVOptions
from pipeline.core.rundir import RunDir
from pipeline.tasks.competitions import Competition, size_of, task_of

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Setup:
    """The group as the options name it: its config, fold table and run dirs."""

    config: object  # Config with train.folds = K
    competition: Competition  # the config's, as the stage resolved it
    manifest: dict
    table: object  # FoldTable
    group: RunDir
    platform: object

    @property
    def spec(self):
        return self.competition.spec

    def fold_run(self, fold: int) -> RunDir:
        from pipeline.cv.group import fold_config

        name = rundir.run_id(
            fold_config(self.config, fold),
            rundir.data_identity(self.manifest),
            size_of(self.config, self.competition),
        )
        return RunDir(self.group.path.parent / name)


def _overrides(opts: CVOptions) -> tuple[str, ...]:
    return (*opts.overrides, f"train.folds={opts.folds}")


def group_config(opts: CVOptions):
    """The group's config: the options' recipe and overrides with `train.folds`, for this device."""
    from pipeline.core import device
    from pipeline.tasks import recipe_config

    platform = device.pick_from_args(opts)  # before Keras is imported: it fixes the backend
    return recipe_config.config_from_args(
        dataclasses.replace(opts, overrides=_overrides(opts)), platform.device
    )


def setup(opts: CVOptions, competition: Competition) -> Setup:
    """Everything checked before a fold trains: the config (on `competition`, the one the stage
    resolved for the options: `group_config`'s), the data and its fold table."""
    from pipeline.core import device
    from pipeline.cv.group import group_id
    from pipeline.data import folds
    from pipeline.data.manifest import read_manifest

    platform = device.pick_from_args(opts)  # the same as group_config's: made once per process
    config = group_config(opts)
    if config.train.merge_val:
        raise PetalsError(
            "train.merge_val=true trains on every example: no fold is held out (REFIT=1 refits)"
        )
    bad = [f for f in opts.fold_list if not 0 <= f < opts.folds]
    if bad:
        raise PetalsError(f"FOLD={','.join(map(str, opts.fold_list))}: folds are 0..{opts.folds - 1}")
    spec = competition.spec
    manifest = read_manifest(opts.data_dir)
    if manifest is None:
        raise PetalsError(
            f"{opts.data_dir}: no manifest.json; run `make fetch` (or pass the fetched --data-dir)"
        )
    table = folds.fold_table(opts.data_dir, spec, config)
    group = RunDir(opts.runs_dir / group_id(config, rundir.data_identity(manifest)))
    return Setup(config, competition, manifest, table, group, platform)


def assemble(found: Setup, opts: CVOptions) -> dict | None:
    """The group's out-of-fold predictions, scores and leaderboard row from its finished folds."""
    from pipeline.cv.group import check_dealt, out_of_fold
    from pipeline.cv.held import held_predictions  # saved ones for a fold whose weights stayed away
    from pipeline.tasks import mistakes

    runs = {fold: found.fold_run(fold) for fold in range(opts.folds)}
    _write_group(found, runs)
    if not _all_finished(found, opts, runs):
        return None
    for fold, run in runs.items():
        check_dealt(run, fold, found.table)
    held = {
        fold: held_predictions(run, found.competition, opts.data_dir, "val", opts.tta, found.platform)
        for fold, run in runs.items()
    }
    oof = out_of_fold(found.table, held)
    metrics = _group_metrics(found, opts, runs, oof)
    if not found.platform.hosts.writer:
        return metrics
    oof.save(found.group.predictions("oof"))
    metrics["mistakes"] = mistakes.write(found.group.path, opts.data_dir, found.config, found.spec, oof)
    found.group.write_json(RunDir.METRICS, metrics)
    # Every fold is trained: the pooled activations are done with (CHOOSE: once every candidate is,
    # since the next candidate may cut the network where this one did).
    if found.config.train.feature_cache and not opts.choose:
        from pipeline.modeling import features

        features.remove_shared(opts.runs_dir, found.table, found.config)
    _board_row(found, opts, runs, metrics)
    _tracked(found, opts, runs[0])
    log.info("cv: %s", summary_line(found.group.name, found.spec, metrics))
    return metrics


def _all_finished(found: Setup, opts: CVOptions, runs: dict) -> bool:
    """Whether every fold is finished; else one line naming those missing and how to train them."""
    finished = [fold for fold, run in runs.items() if run.finished]
    absent = [fold for fold in runs if fold not in finished]
    if absent:
        log.info(
            "cv: %s: folds %s of %d finished; missing %s (train them: FOLDS=%d FOLD=%s)",
            found.group.name,
            ",".join(map(str, finished)) or "none",
            opts.folds,
            ",".join(map(str, absent)),
            opts.folds,
            ",".join(map(str, absent)),
        )
    return not absent


def _group_metrics(found: Setup, opts: CVOptions, runs: dict, oof) -> dict:
    """The group's metrics.json: the out-of-fold scores, each fold's, and the epoch CV chose."""

    from pipeline.cv.group import KIND, cv_epoch, last_scores, score_at_epoch, scores
    from pipeline.data.groups import held_out_groups
    from pipeline.tasks.competitions import task_of

    spec, key = found.spec, found.spec.score_key
    # What evaluate reports of a run's val, of the out-of-fold rows: a multi-label group's thresholds
    # chosen on them (what its fold mean's submission uses) and the score they earn cross-fitted,
    # which is the CV score, as a run's evaluation is its board score.
    grouped = held_out_groups(opts.data_dir, spec, found.table.ids)
    evaluation = task_of(spec).evaluate(found.table.labels, oof.probabilities, spec, grouped)
    judged = {**scores(spec, found.table, oof), "cv_score": evaluation.score}
    interval = spec.metric.interval(found.table.labels, oof.probabilities, grouped)
    evaluated = evaluation.fields
    histories = [run.read_history() for run in runs.values()]
    fold_metrics = [run.metrics() for run in runs.values()]
    chosen = cv_epoch(histories, key, spec.metric.greater_is_better)
    return {
        "kind": KIND,
        "metric": spec.metric.name,
        key: judged["cv_score"],  # the board's score column: the CV score
        "val_accuracy": judged["cv_accuracy"],
        **judged,
        "folds": opts.folds,
        "fold_seed": found.config.train.fold_seed,
        "fold_table": found.table.digest,
        "examples": len(found.table),
        # what the CV score is worth: its rows' groups, and a 95% bootstrap interval (whole groups)
        "groups": None if grouped is None else len(set(grouped)),
        "interval": None if interval is None else [round(v, 5) for v in interval],
        "tta": opts.tta,
        "cv_epoch": chosen,
        "fold_mean_at_cv_epoch": score_at_epoch(histories, key, chosen),
        "best_epochs": [m.get("best_epoch") for m in fold_metrics],
        # each fold at its schedule's end: nothing chosen on its val rows
        "fold_scores_last": last_scores(histories, key),
        "fold_runs": {str(fold): run.name for fold, run in runs.items()},
        "oof_evaluation": evaluated,
        "recipe": found.config.recipe,
        "backbone": found.config.model.backbone,
        "epochs": found.config.train.epochs,
        "train_seconds": float(sum(m.get("train_seconds", 0.0) for m in fold_metrics)),
    }


def _board_row(found: Setup, opts: CVOptions, runs: dict, metrics: dict) -> None:
    """The group's row on the offline leaderboard."""
    from pipeline.cv.group import KIND
    from pipeline.runs import leaderboard

    key = found.spec.score_key
    leaderboard.update(
        leaderboard.board_file(opts.submissions_dir, found.spec.name),
        found.group.name,
        **{
            **leaderboard.run_fields(runs[0]),
            "kind": KIND,
            "train_seconds": round(metrics["train_seconds"], 1),
        },
        time=leaderboard.now(),
        members=f"{opts.folds} folds: " + " ".join(r.name for r in runs.values()),
        **{key: round(metrics["cv_score"], 5), "val_accuracy": round(metrics["cv_accuracy"], 5)},
        cv_score=round(metrics["cv_score"], 5),
        cv_spread=round(metrics["fold_std"], 5),
        folds=opts.folds,
        tta=opts.tta,
    )


def _tracked(found: Setup, opts: CVOptions, first: RunDir) -> None:
    """With TRACK=mlflow, the group's run (its folds' parent) gets its leaderboard row."""
    from pipeline.runs import leaderboard, tracking

    tags = {
        "competition": found.spec.name,
        "recipe": found.config.recipe,
        "backbone": found.config.model.backbone,
        "git_commit": first.read_json(RunDir.RUN_INFO, default={}).get("git_commit"),
        "data_fingerprint": found.manifest.get("fingerprint"),
        "cv_group": found.group.name,
        "folds": opts.folds,
    }
    board = leaderboard.board_file(opts.submissions_dir, found.spec.name)
    tracking.group_assembled(found.group, board, opts.track, tags)


def summary_line(name: str, spec, metrics: dict) -> str:
    """One line: the CV score, what it is worth (its rows, groups, interval; the fold models it
    scores against the submission), each fold's, their spread, and the epoch CV chose."""
    from pipeline.runs.report import fold_models

    folds = " ".join(f"{s:.4f}" for s in metrics["fold_scores"])
    at = metrics.get("fold_mean_at_cv_epoch")
    at = "not scored" if at is None else f"{at:.4f}"
    # A group trained before folds kept their schedule's end: each fold's best epoch, chosen on its rows.
    last = metrics.get("fold_scores_last")
    chosen = any(b not in (None, metrics.get("epochs")) for b in metrics.get("best_epochs") or [])
    end = f"; at the schedule's end {sum(last) / len(last):.4f}" if last and chosen else ""
    # A multi-label group's CV score is its decisions' (thresholds chosen on the rows, cross-fitted);
    # each fold's score and the epochs' are the metric's own reading, at 0.5.
    at_half = metrics.get("oof_evaluation", {}).get(f"{spec.score_key}_at_half")
    thresholded = (
        f", thresholds chosen on them and cross-fitted (at 0.5: {at_half:.4f}, as the folds' scores)"
        if at_half is not None
        else ""
    )
    groups = f" of {metrics['groups']:,} groups" if metrics.get("groups") else ""
    interval = metrics.get("interval")
    interval = f" (95% interval {interval[0]:.3f}-{interval[1]:.3f})" if interval else ""
    trained = f"; {fold_models(metrics['folds'])}" if metrics.get("folds", 0) >= 2 else ""
    return (
        f"{name}: CV {spec.metric.title} {metrics['cv_score']:.4f} on {metrics['examples']:,} out-of-fold "
        f"examples{groups}{interval}{thresholded}{trained}; folds {folds} "
        f"(mean {metrics['fold_mean']:.4f} +- {metrics['fold_std']:.4f}); "
        f"CV's epoch {metrics['cv_epoch']} (the folds' mean there {at}{end})"
    )


def _write_group(found: Setup, runs: dict[int, RunDir]) -> None:
    """group.json: what the group is (rewritten as folds finish), so any process can find its folds."""
    if not found.platform.hosts.writer:
        return
    found.group.path.mkdir(parents=True, exist_ok=True)
    found.group.write_json(
        RunDir.GROUP,
        {
            "kind": "cv",
            "competition": found.spec.name,
            "competition_given": found.config.competition,  # the name, or a competition file's path
            "recipe": found.config.recipe,
            "folds": found.config.train.folds,
            "fold_seed": found.config.train.fold_seed,
            "folds_keep_val": found.config.train.folds_keep_val,
            "fold_table": found.table.digest,
            "data": rundir.data_identity(found.manifest),
            "fold_runs": {str(fold): run.name for fold, run in runs.items()},
            "finished": sorted(fold for fold, run in runs.items() if run.finished),
            "config": found.config.to_dict(),
        },
    )


def finished_group(found: Setup) -> dict:
    """The group's metrics, or one line saying which folds are missing."""
    if not found.group.finished:
        raise PetalsError(
            f"{found.group.name}: the CV group is not complete; train its folds first (make train FOLDS=...)"
        )
    return found.group.metrics()


def predict_mean(opts: CVOptions, found: Setup, metrics: dict) -> Path:
    """The submission of the fold average: each fold run predicts the test set, the mean is written
    and recorded (the refit, which trains, is the CV stage's: pipeline/stages/cv.py)."""
    from pipeline.cv.group import averaged
    from pipeline.cv.held import held_predictions
    from pipeline.modeling import cut_predict
    from pipeline.modeling.inference import Predictions, check_same_data
    from pipeline.runs.submission_files import write_submission

    runs = [found.fold_run(fold) for fold in range(opts.folds)]
    manifest = check_same_data(runs[0], opts.data_dir)
    # The frozen network below the cut runs over the test set once for every fold, not K times.
    through = {}
    if opts.tta == 1:
        folder = found.group.path / cut_predict.FOLDER
        through = cut_predict.test_through_cut(runs, found.competition, opts.data_dir, folder, found.platform)
    test = averaged([
        through[k] if k in through
        else held_predictions(run, found.competition, opts.data_dir, "test", opts.tta, found.platform)
        for k, run in enumerate(runs)
    ])  # fmt: skip
    if not found.platform.hosts.writer:
        return opts.submissions_dir / f"{found.group.name}.csv"
    test.save(found.group.predictions("test"))
    spec = found.spec
    task = task_of(spec)
    oof = Predictions.load(found.group.predictions("oof")) if task.decides_on_val else None
    path = write_submission(
        opts.submissions_dir,
        found.group.name,
        test.ids,
        task.submission_values(test.probabilities, spec, oof),
        spec,
        opts.data_dir,
        manifest,
        metrics["cv_score"],
        found.group.path,
    )
    record_submission(opts, found.spec, found.group.name, path)
    print(f"{found.group.name}: the mean of {opts.folds} folds' test predictions (TTA {opts.tta}) -> {path}")
    return path


def record_submission(opts: CVOptions, spec, entry: str, path: Path, **fields) -> None:
    from pipeline.runs import leaderboard

    leaderboard.update(
        leaderboard.board_file(opts.submissions_dir, spec.name), entry, submission=str(path), **fields
    )


def refit_overrides(opts: CVOptions, found: Setup, metrics: dict) -> tuple[str, ...]:
    """The group's config on every labelled example it dealt, trained to the epoch CV chose.
    Pseudo-labels stay off: fold k's come from the teacher's fold k, and a refit has no fold."""
    epochs = metrics.get("cv_epoch") or found.config.train.epochs
    # What the folds dealt: a competition's labelled val stays out only if they left it out.
    kept_out = found.config.train.folds_keep_val and "val" in found.spec.labeled_splits
    merge = "false" if kept_out else "true"
    return (
        *opts.overrides,
        "train.folds=0",
        f"train.merge_val={merge}",
        f"train.epochs={epochs}",
        # The first epochs of the same schedule: as many of them frozen as were, up to the last.
        f"train.frozen_epochs={min(found.config.train.frozen_epochs, epochs)}",
        "train.pseudo_labels=",
    )
