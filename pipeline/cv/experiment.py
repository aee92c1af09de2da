"""Cross-validated experiments: train K fold runs, assemble their CV group, predict the test set
by the fold average or by a refit on all the data.

Each fold is a run as any other (`pipeline.stages.train`: resumable, checkpointed, locked), its
config the group's with `train.fold` set, so folds trained in other processes, sessions or Kaggle
kernels are found by their run ids and assemble into the same group. `train` trains the folds
asked for (all by default) and, once every fold is finished, writes the group's out-of-fold
predictions and scores (`pipeline.cv.group`) and its leaderboard row; `predict` writes the
submission of the fold average, or with `refit` trains one model on every labelled example to
the epoch CV chose and submits its predictions.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from pipeline.core import rundir
from pipeline.core.errors import PetalsError
from pipeline.core.options import CVOptions, TrainOptions
from pipeline.core.rundir import RunDir

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Setup:
    """The group as the options name it: its config, fold table and run dirs."""

    config: object  # Config with train.folds = K
    spec: object  # CompetitionSpec
    manifest: dict
    table: object  # FoldTable
    group: RunDir
    platform: object

    def fold_run(self, fold: int) -> RunDir:
        from pipeline.cv.group import fold_config

        name = rundir.run_id(fold_config(self.config, fold), rundir.data_identity(self.manifest))
        return RunDir(self.group.path.parent / name)


def _overrides(opts: CVOptions) -> tuple[str, ...]:
    return (*opts.overrides, f"train.folds={opts.folds}")


def setup(opts: CVOptions) -> Setup:
    """Everything checked before a fold trains: the config, the data and its fold table."""
    from pipeline.core import config as config_module
    from pipeline.core import device
    from pipeline.core.competitions import load_competition
    from pipeline.cv.group import group_id
    from pipeline.data import folds
    from pipeline.data.manifest import read_manifest

    platform = device.pick_from_args(opts)  # before Keras is imported: it fixes the backend
    config = config_module.config_from_args(
        dataclasses.replace(opts, overrides=_overrides(opts)), platform.device
    )
    if config.train.merge_val:
        raise PetalsError(
            "train.merge_val=true trains on every example: no fold is held out (REFIT=1 refits)"
        )
    bad = [f for f in opts.fold_list if not 0 <= f < opts.folds]
    if bad:
        raise PetalsError(f"FOLD={','.join(map(str, opts.fold_list))}: folds are 0..{opts.folds - 1}")
    spec = load_competition(config.competition)
    manifest = read_manifest(opts.data_dir)
    if manifest is None:
        raise PetalsError(
            f"{opts.data_dir}: no manifest.json; run `make fetch` (or pass the fetched --data-dir)"
        )
    table = folds.fold_table(opts.data_dir, spec, config)
    group = RunDir(opts.runs_dir / group_id(config, rundir.data_identity(manifest)))
    return Setup(config, spec, manifest, table, group, platform)


def train_folds(opts: CVOptions) -> dict | None:
    """Train the folds asked for (each resumes where it stopped), then the group's scores once every
    fold is finished; the group's metrics, or None while folds are missing."""
    from pipeline.stages import train as train_stage

    found = setup(opts)
    for fold in opts.fold_list or range(opts.folds):
        log.info("cv: fold %d of %d (%s)", fold, opts.folds, found.fold_run(fold).name)
        fold_opts = TrainOptions(
            **{f.name: getattr(opts, f.name) for f in dataclasses.fields(TrainOptions)},
        )
        train_stage.train(
            dataclasses.replace(fold_opts, overrides=(*_overrides(opts), f"train.fold={fold}"), run_id=None)
        )
    return assemble(found, opts)


def assemble(found: Setup, opts: CVOptions) -> dict | None:
    """The group's out-of-fold predictions, scores and leaderboard row from its finished folds."""
    import pandas as pd

    from pipeline.core import leaderboard
    from pipeline.cv.group import (
        KIND,
        check_dealt,
        cv_epoch,
        last_scores,
        out_of_fold,
        score_at_epoch,
        scores,
    )
    from pipeline.cv.held import held_predictions  # saved ones for a fold whose weights stayed away

    runs = {fold: found.fold_run(fold) for fold in range(opts.folds)}
    finished = {fold: run for fold, run in runs.items() if run.finished}
    _write_group(found, runs)
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
        return None
    for fold, run in runs.items():
        check_dealt(run, fold, found.table)
    held = {
        fold: held_predictions(run, opts.data_dir, "val", opts.tta, found.platform)
        for fold, run in runs.items()
    }
    oof = out_of_fold(found.table, held)
    spec, key = found.spec, found.spec.score_key
    judged = scores(spec.metric, found.table, oof)
    histories = [pd.read_csv(run.history_file) for run in runs.values()]
    fold_metrics = [run.metrics() for run in runs.values()]
    chosen = cv_epoch(histories, key, spec.metric.greater_is_better)
    last = last_scores(histories, key)
    metrics = {
        "kind": KIND,
        "metric": spec.metric.name,
        key: judged["cv_score"],  # the board's score column: the CV score
        "val_accuracy": judged["cv_accuracy"],
        **judged,
        "folds": opts.folds,
        "fold_seed": found.config.train.fold_seed,
        "fold_table": found.table.digest,
        "examples": len(found.table),
        "tta": opts.tta,
        "cv_epoch": chosen,
        "fold_mean_at_cv_epoch": score_at_epoch(histories, key, chosen),
        "best_epochs": [m.get("best_epoch") for m in fold_metrics],
        "fold_scores_last": last,  # each fold at its schedule's end: nothing chosen on its val rows
        "fold_runs": {str(fold): run.name for fold, run in runs.items()},
        "recipe": found.config.recipe,
        "backbone": found.config.model.backbone,
        "epochs": found.config.train.epochs,
        "train_seconds": float(sum(m.get("train_seconds", 0.0) for m in fold_metrics)),
    }
    if not found.platform.hosts.writer:
        return metrics
    oof.save(found.group.predictions("oof"))
    found.group.write_json(RunDir.METRICS, metrics)
    # Every fold is trained: the pooled activations are done with (CHOOSE: once every candidate is,
    # since the next candidate may cut the network where this one did).
    if found.config.train.feature_cache and not opts.choose:
        from pipeline.modeling import features

        features.remove_shared(opts.runs_dir, found.table, found.config)
    first = runs[0]
    leaderboard.update(
        leaderboard.board_file(opts.submissions_dir, spec.name),
        found.group.name,
        **{
            **leaderboard.run_fields(first),
            "kind": KIND,
            "train_seconds": round(metrics["train_seconds"], 1),
        },
        time=leaderboard.now(),
        members=f"{opts.folds} folds: " + " ".join(r.name for r in runs.values()),
        **{key: round(judged["cv_score"], 5), "val_accuracy": round(judged["cv_accuracy"], 5)},
        cv_score=round(judged["cv_score"], 5),
        cv_spread=round(judged["fold_std"], 5),
        folds=opts.folds,
        tta=opts.tta,
    )
    log.info("cv: %s", summary_line(found.group.name, spec, metrics))
    return metrics


def summary_line(name: str, spec, metrics: dict) -> str:
    """One line: the CV score, each fold's, their spread, and the epoch CV chose."""
    folds = " ".join(f"{s:.4f}" for s in metrics["fold_scores"])
    at = metrics.get("fold_mean_at_cv_epoch")
    at = "not scored" if at is None else f"{at:.4f}"
    last = metrics.get("fold_scores_last")  # each fold's best epoch was chosen on its own rows
    end = f"; at the schedule's end {sum(last) / len(last):.4f}" if last else ""
    return (
        f"{name}: CV {spec.metric.title} {metrics['cv_score']:.4f} on {metrics['examples']} out-of-fold "
        f"examples; folds {folds} (mean {metrics['fold_mean']:.4f} +- {metrics['fold_std']:.4f}); "
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


def predict_group(opts: CVOptions) -> Path:
    """The submission of the fold average (each fold run predicts the test set), or with
    `opts.refit` of one model refit on all the labelled data to CV's epoch."""
    from pipeline.core.submission_files import write_submission
    from pipeline.cv.group import averaged
    from pipeline.cv.held import held_predictions
    from pipeline.modeling.inference import check_same_data

    found = setup(opts)  # the backend, before anything imports Keras
    from pipeline.modeling import cut_predict

    metrics = finished_group(found)
    if opts.refit:
        return refit(opts, found, metrics)
    runs = [found.fold_run(fold) for fold in range(opts.folds)]
    manifest = check_same_data(runs[0], opts.data_dir)
    # The frozen network below the cut runs over the test set once for every fold, not K times.
    through = {}
    if opts.tta == 1:
        through = cut_predict.test_through_cut(runs, opts.data_dir, found.group.path / cut_predict.FOLDER,
                                               found.platform)  # fmt: skip
    test = averaged([
        through[k] if k in through else held_predictions(run, opts.data_dir, "test", opts.tta, found.platform)
        for k, run in enumerate(runs)
    ])  # fmt: skip
    if not found.platform.hosts.writer:
        return opts.submissions_dir / f"{found.group.name}.csv"
    test.save(found.group.predictions("test"))
    spec = found.spec
    path = write_submission(
        opts.submissions_dir,
        found.group.name,
        test.ids,
        spec.task.submission_values(test.probabilities, spec),
        spec,
        opts.data_dir,
        manifest,
        metrics["cv_score"],
        found.group.path,
    )
    _record_submission(opts, found.spec, found.group.name, path)
    print(f"{found.group.name}: the mean of {opts.folds} folds' test predictions (TTA {opts.tta}) -> {path}")
    return path


def _record_submission(opts: CVOptions, spec, entry: str, path: Path, **fields) -> None:
    from pipeline.core import leaderboard

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


def refit(opts: CVOptions, found: Setup, metrics: dict) -> Path:
    """Train (or resume) the refit run, record which group justifies it, and submit its predictions."""
    from pipeline.core.options import ScoreOptions
    from pipeline.stages import predict as predict_stage
    from pipeline.stages import train as train_stage

    overrides = refit_overrides(opts, found, metrics)
    fields = {f.name: getattr(opts, f.name) for f in dataclasses.fields(TrainOptions)}
    train_stage.train(dataclasses.replace(TrainOptions(**fields), overrides=overrides, run_id=None))
    scoring = {f.name: getattr(opts, f.name) for f in dataclasses.fields(ScoreOptions)}
    score_opts = dataclasses.replace(ScoreOptions(**scoring), overrides=overrides, run_id=None)
    from pipeline.modeling.inference import find_run

    run = find_run(score_opts, found.platform)
    if found.platform.hosts.writer:
        run.write_json(
            RunDir.REFIT,
            {
                "cv_group": found.group.name,
                "cv_score": metrics["cv_score"],
                "cv_spread": metrics["fold_std"],
                "epochs": metrics.get("cv_epoch"),
                "fold_table": found.table.digest,
            },
        )
    path = predict_stage.predict(score_opts)
    if found.platform.hosts.writer:  # the refit has no val: its row carries the CV that chose it
        _record_submission(
            opts,
            found.spec,
            run.name,
            path,
            kind="refit",
            cv_score=round(metrics["cv_score"], 5),
            cv_spread=round(metrics["fold_std"], 5),
            folds=opts.folds,
            members=f"refit of {found.group.name} to epoch {metrics.get('cv_epoch')}",
        )
    return path
