"""Evaluate stage: a run's val score (the competition's metric), accuracy, per-class scores and
confusions, optionally with TTA.

Predicts the val split with the run's best weights and writes, into the run dir:
`val_predictions.npz` (ids, labels, probabilities; `val_predictions-ttaN.npz` with TTA),
`per_class.csv` (precision, recall, F1 and support of every class), `confusion.png` (the
row-normalised confusion matrix, every class named) and `confusions.csv` (the most frequent
mistakes by name); `metrics.json` gains an `evaluation` section, and the run gets its row on
the offline leaderboard.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.core import options
from pipeline.core.errors import PetalsError
from pipeline.core.files import pyplot, save_figure, write_atomically
from pipeline.core.options import ScoreOptions
from pipeline.core.rundir import RunDir
from pipeline.stages import arguments

log = logging.getLogger(__name__)

TOP_CONFUSIONS = 10


def add_arguments(parser: argparse.ArgumentParser) -> None:
    arguments.add_run_arguments(parser)
    arguments.add_tta(parser)
    arguments.add_submissions_dir(parser, help="the leaderboard's folder")


def run(args: argparse.Namespace) -> None:
    evaluate_run(options.from_args(ScoreOptions, args))


def evaluate_run(opts: ScoreOptions) -> dict:
    """Score the finished run `opts` names on its val split; print and return the evaluation."""
    from pipeline.core import device
    from pipeline.modeling.inference import find_run

    platform = device.pick_from_args(opts)  # before Keras is imported: it fixes the backend
    log.info("device: %s", platform.describe("float32"))
    run = find_run(opts, platform)
    report = evaluate(run, opts.data_dir, opts.tta, platform, opts.submissions_dir)
    print(summary_text(run.name, report))
    return report


def evaluate(run: RunDir, data_dir: Path, tta: int, platform, submissions_dir: Path) -> dict:
    """Score the run on its val split, write the report files, record it; return the evaluation."""
    from sklearn.metrics import confusion_matrix

    from competition import load_spec
    from pipeline.modeling.inference import predict_split
    from pipeline.runs import leaderboard

    config = run.read_config()
    if config.train.merge_val:
        raise PetalsError(
            f"{run.name} trained on the val split (train.merge_val=true): it has no held-out images to score"
        )
    spec = load_spec(config.competition)
    val = predict_split(run, data_dir, "val", tta, platform)
    predicted = val.predicted
    matrix = confusion_matrix(val.labels, predicted, labels=np.arange(spec.num_classes))
    per_class = per_class_table(val.labels, predicted, spec.classes)
    confusions = top_confusions(matrix, spec.classes)
    evaluation = {
        "metric": spec.metric.name,
        spec.score_key: spec.metric.score(val.labels, val.probabilities),
        "val_accuracy": float((predicted == val.labels).mean()),
        "images": len(val.labels),
        "tta": tta,
        "evaluated_at": leaderboard.now(),
        "worst_classes": per_class.nsmallest(5, "f1")["class"].tolist(),
        "top_confusions": confusions.head(TOP_CONFUSIONS).to_dict(orient="records"),
    }
    if not platform.hosts.writer:  # every process scored the same predictions; process 0 writes
        return evaluation
    write_atomically(run.file(RunDir.PER_CLASS), lambda tmp: per_class.to_csv(tmp, index=False))
    write_atomically(run.file(RunDir.CONFUSIONS), lambda tmp: confusions.to_csv(tmp, index=False))
    plot_confusion(matrix, spec.classes, run.file(RunDir.CONFUSION_PLOT))
    run.write_json(RunDir.METRICS, {**run.metrics(), "evaluation": evaluation})
    leaderboard.update(
        leaderboard.board_file(submissions_dir, spec.name),
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
    return evaluation


def per_class_table(labels: np.ndarray, predicted: np.ndarray, classes: tuple[str, ...]) -> pd.DataFrame:
    """Precision, recall, F1 and support of every class, scikit-learn's numbers."""
    from sklearn.metrics import precision_recall_fscore_support

    precision, recall, f1, support = precision_recall_fscore_support(
        labels, predicted, labels=np.arange(len(classes)), zero_division=0
    )
    return pd.DataFrame(
        {
            "label": np.arange(len(classes)),
            "class": classes,
            "precision": precision.round(4),
            "recall": recall.round(4),
            "f1": f1.round(4),
            "support": support,
        }
    )


def top_confusions(matrix: np.ndarray, classes: tuple[str, ...]) -> pd.DataFrame:
    """Every (true, predicted) mistake of a confusion matrix (counts) by name, most frequent first,
    with its share of the true class."""
    support = matrix.sum(axis=1)
    mistakes = matrix.copy()
    np.fill_diagonal(mistakes, 0)
    true, wrong = np.nonzero(mistakes)
    counts = mistakes[true, wrong]
    table = pd.DataFrame(
        {
            "true": [classes[i] for i in true],
            "predicted": [classes[j] for j in wrong],
            "count": counts,
            "share_of_true": (counts / np.maximum(support[true], 1)).round(3),
        }
    )
    return table.sort_values(["count", "share_of_true"], ascending=False, kind="stable").reset_index(
        drop=True
    )


def plot_confusion(matrix: np.ndarray, classes: tuple[str, ...], path: Path) -> None:
    """The confusion matrix (counts) normalised by row, large enough that 104 class names stay legible."""
    plt = pyplot()

    n = len(classes)
    shares = matrix / np.maximum(matrix.sum(axis=1, keepdims=True), 1)
    side = max(6.0, n * 0.16)  # ~0.16 inch per class: 6-point names do not overlap
    fig, axis = plt.subplots(figsize=(side + 1.5, side))
    shown = np.ma.masked_equal(shares, 0)  # empty cells stay white, so mistakes stand out
    image = axis.imshow(shown, cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
    axis.set_xticks(np.arange(n), [f"{c} {i}" for i, c in enumerate(classes)], rotation=90, fontsize=6)
    axis.set_yticks(np.arange(n), [f"{i} {c}" for i, c in enumerate(classes)], fontsize=6)
    axis.set_xlabel("predicted")
    axis.set_ylabel("true")
    axis.set_title("confusion matrix (share of each true class)")
    fig.colorbar(image, ax=axis, fraction=0.03)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)


def summary_text(name: str, evaluation: dict) -> str:
    """A few lines for the terminal: the scores, the weakest classes, the top confusions."""
    from competition.metric import get_metric

    metric = get_metric(evaluation.get("metric", "macro_f1"))
    accuracy = "" if metric.name == "accuracy" else f", accuracy {evaluation['val_accuracy']:.4f}"
    lines = [
        f"{name}: val {metric.title} {evaluation[f'val_{metric.name}']:.4f}{accuracy} "
        f"on {evaluation['images']} examples (TTA {evaluation['tta']})",
        "  weakest classes: " + ", ".join(evaluation["worst_classes"]),
        "  top confusions (true -> predicted, count):",
    ]
    lines += [f"    {c['true']} -> {c['predicted']}: {c['count']}" for c in evaluation["top_confusions"][:5]]
    return "\n".join(lines)
