"""What evaluate reports of a regression run's val numbers: scikit-learn's RMSE, MAE and R^2, a
plot of predicted against true (`predicted_vs_true.png`), and the rows with the largest absolute
errors as the mistakes (`Regression.evaluate`, `Regression.mistakes`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.core.files import pyplot, save_figure
from pipeline.core.rundir import RunDir
from pipeline.tasks.base import Evaluation

PLOTTED = 5_000  # points the plot draws at most (a random draw of them past that): a readable cloud


def _columns(labels, outputs) -> tuple[np.ndarray, np.ndarray]:
    return np.ravel(np.asarray(labels, np.float64)), np.ravel(np.asarray(outputs, np.float64))


def evaluation(labels: np.ndarray, outputs: np.ndarray, spec) -> Evaluation:
    from sklearn.metrics import mean_absolute_error, r2_score, root_mean_squared_error

    true, predicted = _columns(labels, outputs)
    rmse = float(root_mean_squared_error(true, predicted))
    fields = {
        "val_accuracy": rmse,  # the training metric's slot: RMSE (Regression.train_metric)
        "val_rmse_units": rmse,
        "val_mae": float(mean_absolute_error(true, predicted)),
        "val_r2": float(r2_score(true, predicted)) if len(true) > 1 else float("nan"),
        # What predicting the labelled rows' mean would score: the bar any model must clear.
        "val_rmse_of_the_mean": float(np.std(true)),
        "val_range": [float(true.min()), float(true.max())],
    }
    files = {RunDir.PREDICTED_PLOT: lambda path: plot(true, predicted, spec.label_column, path)}
    return Evaluation(fields, files, score=spec.metric.score(labels, outputs))


def summary_lines(evaluation: dict) -> list[str]:
    return [
        f"  RMSE {evaluation['val_rmse_units']:.4f} (the mean's: {evaluation['val_rmse_of_the_mean']:.4f}),"
        f" MAE {evaluation['val_mae']:.4f}, R^2 {evaluation['val_r2']:.4f}"
    ]


def plot(true: np.ndarray, predicted: np.ndarray, name: str, path: Path) -> None:
    """Predicted against true, with the line where they are equal."""
    plt = pyplot()
    if len(true) > PLOTTED:
        drawn = np.random.default_rng(0).choice(len(true), PLOTTED, replace=False)
        true, predicted = true[drawn], predicted[drawn]
    fig, axis = plt.subplots(figsize=(5, 5))
    axis.scatter(true, predicted, s=6, alpha=0.5)
    low, high = float(min(true.min(), predicted.min())), float(max(true.max(), predicted.max()))
    axis.plot([low, high], [low, high], color="grey", linewidth=1)
    axis.set_xlabel(f"true {name}")
    axis.set_ylabel(f"predicted {name}")
    axis.set_title("val: predicted against true", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path, dpi=80)


def mistakes(labels: np.ndarray, outputs: np.ndarray) -> pd.DataFrame:
    """Every row predicted off its number, the largest absolute error first: its row, true and
    predicted numbers (as text, for the grid's titles) and the error."""
    true, predicted = _columns(labels, outputs)
    error = np.abs(predicted - true)
    rows = np.flatnonzero(error > 0)
    rows = rows[np.argsort(-error[rows], kind="stable")]
    return pd.DataFrame(
        {
            "row": rows,
            "true": [f"{v:.4g}" for v in true[rows]],
            "predicted": [f"{v:.4g}" for v in predicted[rows]],
            "error": error[rows].round(4),
        }
    )
