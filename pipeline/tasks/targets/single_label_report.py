"""What evaluate reports of a single-label run's val predictions: scikit-learn's per-class
precision, recall, F1 and support, the confusion matrix drawn with every class named, and the most
frequent mistakes by name (`SingleLabel.evaluate`).

What grows with the classes is bounded: mistakes are counted by pair, never in a classes x classes
matrix (100,000 classes would be 80 GB of counts); past MAX_PLOTTED_CLASSES the plot draws only
the classes with the most mistakes, and the table keeps the MAX_CONFUSION_ROWS most frequent
pairs, each cut said in its title or in the terminal's lines."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.core.files import plain_text, pyplot, save_figure, write_atomically
from pipeline.core.foreign import EACH, listed, safe_cells, text
from pipeline.core.rundir import RunDir
from pipeline.tasks.base import Evaluation

TOP_CONFUSIONS = 10
# The plot's side grows 0.16 inch a class (names stay legible): 1,500 classes drew a 24,000 px
# square, 2.3 GB of pixels, and took evaluate past 6 GB; 200 classes are 3,200 px, 40 MB. Flowers'
# 104 classes are all drawn.
MAX_PLOTTED_CLASSES = 200
NAME_CHARS, NAME_POINTS = 40, 6  # a class name on the plot: cut (a 1,000-character name would
# squeeze the matrix away), in 6-point type
# The (true, predicted) pairs confusions.csv lists, most frequent first: a reader's table, and
# a few MB however many classes and val examples there are.
MAX_CONFUSION_ROWS = 10_000


def evaluation(labels: np.ndarray, probabilities: np.ndarray, spec) -> Evaluation:
    classes = spec.classes
    predicted = probabilities.argmax(axis=1)
    per_class = per_class_table(labels, predicted, classes)
    pairs = mistaken_pairs(labels, predicted, len(classes))
    confusions = top_confusions(pairs, classes, per_class["support"].to_numpy())
    fields = {
        "val_accuracy": float((predicted == labels).mean()),
        "worst_classes": per_class.nsmallest(5, "f1")["class"].tolist(),
        "top_confusions": confusions.head(TOP_CONFUSIONS).to_dict(orient="records"),
    }
    if len(pairs[0]) > MAX_CONFUSION_ROWS:
        fields["confusions_kept"] = (
            f"the {MAX_CONFUSION_ROWS} most frequent of {len(pairs[0])} mistaken pairs"
        )
    files = {
        RunDir.PER_CLASS: lambda path: write_atomically(
            path, lambda tmp: safe_cells(per_class).to_csv(tmp, index=False)
        ),
        RunDir.CONFUSIONS: lambda path: write_atomically(
            path, lambda tmp: safe_cells(confusions).to_csv(tmp, index=False)
        ),
        RunDir.CONFUSION_PLOT: lambda path: plot_confusion(labels, predicted, classes, path),
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
    lines += [
        f"    {text(c['true'], EACH)} -> {text(c['predicted'], EACH)}: {c['count']}"
        for c in evaluation["top_confusions"][:5]
    ]
    if "confusions_kept" in evaluation:
        lines.append(f"  confusions.csv lists {evaluation['confusions_kept']}")
    return lines


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


def mistaken_pairs(labels: np.ndarray, predicted: np.ndarray, n: int) -> tuple[np.ndarray, ...]:
    """(true, predicted, count) of every mistaken pair, counted per pair: memory grows with the
    examples, never with the square of the classes."""
    wrong = labels != predicted
    codes, counts = np.unique(labels[wrong].astype(np.int64) * n + predicted[wrong], return_counts=True)
    return codes // n, codes % n, counts


def top_confusions(
    pairs: tuple[np.ndarray, ...], classes: tuple[str, ...], support: np.ndarray
) -> pd.DataFrame:
    """The most frequent (true, predicted) mistakes by name (MAX_CONFUSION_ROWS at most), with each
    one's share of the true class."""
    true, wrong, counts = pairs
    share = (counts / np.maximum(support[true], 1)).round(3)
    kept = np.lexsort((-share, -counts))[:MAX_CONFUSION_ROWS]  # count, then share, descending
    return pd.DataFrame(
        {
            "true": [classes[i] for i in true[kept]],
            "predicted": [classes[j] for j in wrong[kept]],
            "count": counts[kept],
            "share_of_true": share[kept],
        }
    )


def plotted_classes(labels: np.ndarray, predicted: np.ndarray, n: int) -> np.ndarray:
    """The classes the plot draws: all of them up to MAX_PLOTTED_CLASSES, else those in the most
    mistakes (as the true class or the predicted one), in label order."""
    if n <= MAX_PLOTTED_CLASSES:
        return np.arange(n)
    wrong = labels != predicted
    involved = np.bincount(labels[wrong], minlength=n) + np.bincount(predicted[wrong], minlength=n)
    return np.sort(np.argsort(-involved, kind="stable")[:MAX_PLOTTED_CLASSES])


@plain_text
def plot_confusion(labels: np.ndarray, predicted: np.ndarray, classes: tuple[str, ...], path: Path) -> None:
    """The confusion matrix (counts) normalised by row, large enough that 200 class names stay
    legible; past MAX_PLOTTED_CLASSES, only the classes with the most mistakes (the title says so)."""
    plt = pyplot()

    drawn = plotted_classes(labels, predicted, len(classes))
    n = len(drawn)
    position = np.full(len(classes), -1)
    position[drawn] = np.arange(n)
    support = np.bincount(labels, minlength=len(classes))[drawn]
    matrix = np.zeros((n, n), np.int64)
    both = (position[labels] >= 0) & (position[predicted] >= 0)
    np.add.at(matrix, (position[labels[both]], position[predicted[both]]), 1)
    shares = matrix / np.maximum(support[:, None], 1)  # of the whole true class, drawn or not
    names = [text(classes[i], NAME_CHARS) for i in drawn]
    x_names = [f"{c} {i}" for i, c in zip(drawn, names, strict=True)]
    y_names = [f"{i} {c}" for i, c in zip(drawn, names, strict=True)]
    title = "confusion matrix (share of each true class)"
    if n < len(classes):
        title += f"\nthe {n} of {len(classes)} classes with the most mistakes"
    # Laid out by hand, around the widest name as measured: tight_layout measured every label
    # again and left savefig to draw the whole figure twice, a quarter of the plot's seconds.
    side = max(4.0, n * 0.16)  # ~0.16 inch per class: 6-point names do not overlap
    fig = plt.figure()
    names_inch = _widest(fig, x_names + y_names, NAME_POINTS) + 0.1  # and the ticks' 7 points
    left = bottom = names_inch + 0.35  # and the axis's label
    top, right = 0.3 + 0.2 * title.count("\n"), 0.9  # the title; the colour bar and its numbers
    width, height = left + side + right, bottom + side + top
    fig.set_size_inches(width, height)
    axis = fig.add_axes((left / width, bottom / height, side / width, side / height))
    bar = fig.add_axes(((left + side + 0.15) / width, bottom / height, 0.2 / width, side / height))
    shown = np.ma.masked_equal(shares, 0)  # empty cells stay white, so mistakes stand out
    image = axis.imshow(shown, cmap="viridis", vmin=0, vmax=1, interpolation="nearest", aspect="auto")
    axis.set_xticks(np.arange(n), x_names, rotation=90, fontsize=NAME_POINTS)
    axis.set_yticks(np.arange(n), y_names, fontsize=NAME_POINTS)
    axis.set_xlabel("predicted")
    axis.set_ylabel("true")
    axis.set_title(title)
    fig.colorbar(image, cax=bar)
    save_figure(fig, path, dpi=100)


def _widest(fig, labels: list[str], points: float) -> float:
    """The widest of `labels` in inches at `points`, as the figure's renderer draws it."""
    from matplotlib.font_manager import FontProperties

    renderer, font = fig.canvas.get_renderer(), FontProperties(size=points)
    wide = (renderer.get_text_width_height_descent(label, font, ismath=False)[0] for label in labels)
    return max(wide, default=0) / fig.dpi


def mistakes(labels: np.ndarray, probabilities: np.ndarray, classes: tuple[str, ...]) -> pd.DataFrame:
    """Every row whose largest probability is on another class than its own, the most confident
    first: its row, true and predicted classes, and the probability given to the wrong one."""
    predicted = probabilities.argmax(axis=1)
    rows = np.flatnonzero(predicted != labels)
    given = probabilities[rows, predicted[rows]]
    order = np.argsort(-given, kind="stable")
    rows, given = rows[order], given[order]
    return pd.DataFrame(
        {
            "row": rows,
            "true": [classes[i] for i in labels[rows]],
            "predicted": [classes[j] for j in predicted[rows]],
            "probability": given.astype(np.float64).round(4),
        }
    )
