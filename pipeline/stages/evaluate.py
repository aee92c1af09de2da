"""Evaluate stage: a run's val score (the competition's metric), accuracy, and what its task
reports of the predictions, optionally with TTA.

Predicts the val split with the run's best weights. A single run's are the epoch that scored best
on val, so its score (and interval) is that choice cross-fitted
(`pipeline.cv.crossfit.crossed_epochs`): each part of val at the epoch the other parts chose; what
the task reports besides is of the kept weights. Writes, into the run dir:
`val_predictions.npz` (ids, labels, probabilities; `val_predictions-ttaN.npz` with TTA) and the
task's files (one class an example: `per_class.csv`, precision, recall, F1 and support of every
class; `confusion.png`, the row-normalised confusion matrix, every class named (past 200 classes,
those with the most mistakes); `confusions.csv`, the most frequent mistakes by name:
pipeline/tasks/targets/single_label_report.py); the examples it gets most confidently wrong
(`mistakes.png`, a grid of images; `mistakes.csv`, a table of texts: pipeline/tasks/mistakes.py);
`metrics.json` gains an `evaluation` section, and the run gets its row on the offline leaderboard.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.core import options
from pipeline.core.errors import PetalsError
from pipeline.core.options import ScoreOptions
from pipeline.core.rundir import RunDir
from pipeline.stages import arguments

if TYPE_CHECKING:
    from pipeline.tasks.competitions import Competition

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    arguments.add_run_arguments(parser)
    arguments.add_tta(parser)
    arguments.add_submissions_dir(parser, help="the leaderboard's folder")


def run(args: argparse.Namespace, competition: Competition | None = None) -> None:
    evaluate_run(options.from_args(ScoreOptions, args), competition=competition)


def evaluate_run(opts: ScoreOptions, competition: Competition | None = None) -> dict:
    """Score the finished run `opts` names on its val split; print and return the evaluation.
    `competition`: the options' config's, where the caller resolved it (`arguments.named_run`)."""
    from pipeline.core import device

    platform = device.pick_from_args(opts)  # before Keras is imported: it fixes the backend
    log.info("device: %s", platform.describe("float32"))
    run, competition = arguments.named_run(opts, platform, competition)
    report = evaluate(run, competition, opts.data_dir, opts.tta, platform, opts.submissions_dir, opts.track)
    print(summary_text(run.name, report, competition.task))
    return report


def evaluate(
    run: RunDir,
    competition: Competition,
    data_dir: Path,
    tta: int,
    platform,
    submissions_dir: Path,
    track: str = ScoreOptions.track,
) -> dict:
    """Score the run (on `competition`, its config's) on its val split, write the report files,
    record it (the leaderboard; the run's TensorBoard events; MLflow with `track`); return the
    evaluation."""
    from pipeline.cv import crossfit
    from pipeline.data.groups import held_out_groups
    from pipeline.modeling.inference import predict_split
    from pipeline.runs import leaderboard, report, tracking
    from pipeline.tasks import mistakes

    config = run.read_config()
    if config.train.merge_val:
        raise PetalsError(
            f"{run.name} trained on the val split (train.merge_val=true): it has no held-out images to score"
        )
    spec = competition.spec
    val = predict_split(run, competition, data_dir, "val", tta, platform)
    grouped = held_out_groups(data_dir, spec, val.ids)
    # The task's report (its fields, per-class files, mistakes) is of the kept weights, the model a
    # submission is made from, as val_predictions.npz is. A single run's weights are the epoch its
    # val rows chose, so its score and interval are that choice, cross-fitted.
    found = competition.task.evaluate(val.labels, val.probabilities, spec, grouped)
    crossed = crossfit.crossed_epochs(run, val, spec, grouped)
    judged = val.probabilities if crossed is None else crossed.pop("probabilities")
    headline = found if crossed is None else competition.task.evaluate(val.labels, judged, spec, grouped)
    if crossed is not None:
        crossed["kept"] = found.score
    interval = spec.metric.interval(val.labels, judged, grouped)
    evaluation = {
        "metric": spec.metric.name,
        spec.score_key: headline.score,  # what the submission decides (a multi-label run: thresholded)
        "val_accuracy": headline.fields["val_accuracy"],
        "images": len(val.labels),
        # What the score is worth: the groups held out (where the competition names them) and a
        # 95% bootstrap interval over the held-out rows (whole groups drawn).
        "groups": None if grouped is None else len(set(grouped)),
        "interval": None if interval is None else [round(v, 5) for v in interval],
        "tta": tta,
        # Its weights are the epoch that scored best on these rows: say so, and the schedule's end.
        "chosen_epoch": report.chosen_epoch(run, spec.score_key, spec.metric.greater_is_better),
        # The choice scored: the epoch each part of val was scored at, each chosen on the others,
        # and what the kept weights score on all of val, the rows that chose them.
        "cross_fitted": crossed,
        "evaluated_at": leaderboard.now(),
        **{name: value for name, value in found.fields.items() if name != "val_accuracy"},
    }
    if not platform.hosts.writer:  # every process scored the same predictions; process 0 writes
        return evaluation
    found.write(run)
    evaluation["mistakes"] = mistakes.write(run.path, data_dir, config, spec, val)
    run.write_json(RunDir.METRICS, {**run.metrics(), "evaluation": evaluation})
    board = leaderboard.board_file(submissions_dir, spec.name)
    leaderboard.update(
        board,
        run.name,
        **leaderboard.run_fields(run),
        time=evaluation["evaluated_at"],
        # The metric's column, and accuracy beside it (the same column for an accuracy competition).
        **{
            "val_accuracy": round(evaluation["val_accuracy"], 5),
            spec.score_key: round(evaluation[spec.score_key], 5),
        },
        tta=tta,
    )
    tracking.evaluated(run, spec.name, evaluation, board, track)
    return evaluation


def summary_text(name: str, evaluation: dict, task) -> str:
    """A few lines for the terminal: the scores, then what the task says of them (for one class an
    example: the weakest classes, the top confusions), and where its mistakes are shown."""
    from competition.metric import get_metric
    from pipeline.runs import report
    from pipeline.tasks import mistakes

    metric = get_metric(evaluation.get("metric", "macro_f1"))
    # the accuracy slot beside the metric; a regression's is its RMSE, the metric already (or MAE's)
    shown = metric.name == "accuracy" or metric.reads == "number"
    accuracy = "" if shown else f", accuracy {evaluation['val_accuracy']:.4f}"
    first = (
        f"{name}: val {metric.title} {evaluation[f'val_{metric.name}']:.4f}{accuracy} "
        f"{report.worth(evaluation)}, TTA {evaluation['tta']}"
    )
    return "\n".join(
        [first, *task.summary_lines(evaluation), *mistakes.summary_line(evaluation.get("mistakes"))]
    )
