"""What evaluate reports of a single-label run's val predictions: scikit-learn's per-class
precision, recall, F1 and support, the confusion matrix drawn with every class named, and the most
frequent mistakes by name (`SingleLabel.evaluate`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.core.files import pyplot, save_figure, write_atomically
from pipeline.core.foreign import EACH, listed, safe_cells, text
from pipeline.core.rundir import RunDir
from pipeline.tasks.base import Evaluation

TOP_CONFUSIONS = 10


def evaluation(labels: np.ndarray, probabilities: np.ndarray, spec) -> Evaluation:
    from sklearn.metrics import confusion_matrix

    classes = spec.classes
    predicted = probabilities.argmax(axis=1)
    matrix = confusion_matrix(labels, predicted, labels=np.arange(len(classes)))
    per_class = per_class_table(labels, predicted, classes)
    confusions = top_confusions(matrix, classes)
    fields = {
        "val_accuracy": float((predicted == labels).mean()),
        "worst_classes": per_class.nsmallest(5, "f1")["class"].tolist(),
        "top_confusions": confusions.head(TOP_CONFUSIONS).to_dict(orient="records"),
    }
    files = {
        RunDir.PER_CLASS: lambda path: write_atomically(
            path, lambda tmp: safe_cells(per_class).to_csv(tmp, index=False)
        ),
        RunDir.CONFUSIONS: lambda path: write_atomically(
            path, lambda tmp: safe_cells(confusions).to_csv(tmp, index=False)
        ),
        RunDir.CONFUSION_PLOT: lambda path: plot_confusion(matrix, classes, path),
    }
    return Evaluation(fields, files, score=spec.metric.score(labels, probabilities))  # argmax decides


def _csv(table: pd.DataFrame):
    return lambda path: write_atomically(path, lambda tmp: safe_cells(table).to_csv(tmp, index=False))


def summary_lines(evaluation: dict) -> list[str]:
    """The weakest classes and the top confusions, for the terminal."""
    lines = [
        "  weakest classes: " + listed(evaluation["worst_classes"]),
        "  top confusions (true -> predicted, count):",
    ]
    return lines + [
        f"    {text(c['true'], EACH)} -> {text(c['predicted'], EACH)}: {c['count']}"
        for c in evaluation["top_confusions"][:5]
    ]


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
