"""What evaluate reports of a regression run's val numbers: scikit-learn's RMSE, MAE and R^2, a
plot of predicted against true (`predicted_vs_true.png`), and the rows with the largest absolute
errors as the mistakes (`Regression.evaluate`, `Regression.mistakes`). Several numbers a row
(Feedback Prize ELL's six scores): each column's RMSE, MAE and R^2 (`per_class.csv`, a panel of
the plot each) and their mean (RMSE's mean is the competition's MCRMSE)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.core.files import plain_text, pyplot, save_figure, write_atomically
from pipeline.core.foreign import safe_cells, text
from pipeline.core.rundir import RunDir
from pipeline.tasks.base import Evaluation

PLOTTED = 5_000  # points the plot draws at most (a random draw of them past that): a readable cloud


def _columns(labels, outputs) -> tuple[np.ndarray, np.ndarray]:
    """True and predicted numbers as rows [n, columns] of float64."""
    true = np.asarray(labels, np.float64)
    return true.reshape(len(true), -1), np.asarray(outputs, np.float64).reshape(len(true), -1)


def per_column(true: np.ndarray, predicted: np.ndarray, names) -> pd.DataFrame:
    """Each column's RMSE, MAE and R^2, and what predicting its val mean scores (its std)."""
    from sklearn.metrics import mean_absolute_error, r2_score, root_mean_squared_error

    return pd.DataFrame(
        {
            "name": list(names),
            "rmse": root_mean_squared_error(true, predicted, multioutput="raw_values"),
            "mae": mean_absolute_error(true, predicted, multioutput="raw_values"),
            "r2": r2_score(true, predicted, multioutput="raw_values") if len(true) > 1 else np.nan,
            "rmse_of_the_mean": true.std(axis=0),
        }
    )


def evaluation(labels: np.ndarray, outputs: np.ndarray, spec) -> Evaluation:
    true, predicted = _columns(labels, outputs)
    if true.shape[1] > 1:
        return _columns_evaluation(true, predicted, labels, outputs, spec)
    from sklearn.metrics import mean_absolute_error, r2_score, root_mean_squared_error

    true, predicted = true[:, 0], predicted[:, 0]
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


def _columns_evaluation(true, predicted, labels, outputs, spec) -> Evaluation:
    """Several numbers a row: each column's figures and their means (the RMSEs' mean: MCRMSE)."""
    table = per_column(true, predicted, spec.classes)
    means = table[["rmse", "mae", "r2", "rmse_of_the_mean"]].mean()
    fields = {
        "val_accuracy": float(means["rmse"]),  # the training metric's slot: MCRMSE
        "val_rmse_units": float(means["rmse"]),
        "val_mae": float(means["mae"]),
        "val_r2": float(means["r2"]),
        "val_rmse_of_the_mean": float(means["rmse_of_the_mean"]),
        "val_range": [float(true.min()), float(true.max())],
        "val_columns": {
            row.name: {"rmse": row.rmse, "mae": row.mae, "r2": row.r2} for row in table.itertuples()
        },
    }
    files = {  # the column names are a shared competition file's: no cell a spreadsheet would run
        RunDir.PER_CLASS: lambda path: write_atomically(
            path, lambda tmp: safe_cells(table).to_csv(tmp, index=False)
        ),
        RunDir.PREDICTED_PLOT: lambda path: plot(true, predicted, spec.classes, path),
    }
    return Evaluation(fields, files, score=spec.metric.score(labels, outputs))


def summary_lines(evaluation: dict) -> list[str]:
    title = "MCRMSE" if "val_columns" in evaluation else "RMSE"
    mean = evaluation["val_rmse_of_the_mean"]
    lines = [
        f"  {title} {evaluation['val_rmse_units']:.4f} (the mean's: {mean:.4f}),"
        f" MAE {evaluation['val_mae']:.4f}, R^2 {evaluation['val_r2']:.4f}"
    ]
    for name, scores in evaluation.get("val_columns", {}).items():
        shown = text(name, 40)  # a name from a shared competition file: nothing a terminal runs
        lines.append(
            f"    {shown}: RMSE {scores['rmse']:.4f}, MAE {scores['mae']:.4f}, R^2 {scores['r2']:.4f}"
        )
    return lines


@plain_text
def plot(true: np.ndarray, predicted: np.ndarray, names, path: Path) -> None:
    """Predicted against true, with the line where they are equal: one panel a column."""
    plt = pyplot()
    true, predicted = true.reshape(len(true), -1), predicted.reshape(len(true), -1)
    names = [names] if isinstance(names, str) else list(names)
    if len(true) > PLOTTED:
        drawn = np.random.default_rng(0).choice(len(true), PLOTTED, replace=False)
        true, predicted = true[drawn], predicted[drawn]
    wide = min(len(names), 3)
    high = -(-len(names) // wide)
    fig, axes = plt.subplots(high, wide, figsize=(5 * wide, 5 * high), squeeze=False)
    for k, (axis, name) in enumerate(zip(axes.flat, names, strict=False)):
        _panel(axis, true[:, k], predicted[:, k], name)
        axis.set_title("val: predicted against true" if len(names) == 1 else name, fontsize=10)
    for axis in list(axes.flat)[len(names) :]:
        axis.set_visible(False)
    fig.tight_layout()
    save_figure(fig, path, dpi=80)


def _panel(axis, true: np.ndarray, predicted: np.ndarray, name: str) -> None:
    axis.scatter(true, predicted, s=6, alpha=0.5)
    low, high = float(min(true.min(), predicted.min())), float(max(true.max(), predicted.max()))
    axis.plot([low, high], [low, high], color="grey", linewidth=1)
    axis.set_xlabel(f"true {name}")
    axis.set_ylabel(f"predicted {name}")


def mistakes(labels: np.ndarray, outputs: np.ndarray) -> pd.DataFrame:
    """Every row predicted off its numbers, the largest absolute error first (of several columns,
    the mean over them): its row, true and predicted numbers (as text, for the grid's titles,
    space-separated where there are several) and the error."""
    true, predicted = _columns(labels, outputs)
    error = np.abs(predicted - true).mean(axis=1)
    rows = np.flatnonzero(error > 0)
    rows = rows[np.argsort(-error[rows], kind="stable")]
    return pd.DataFrame(
        {
            "row": rows,
            "true": [" ".join(f"{v:.4g}" for v in true[r]) for r in rows],
            "predicted": [" ".join(f"{v:.4g}" for v in predicted[r]) for r in rows],
            "error": error[rows].round(4),
        }
    )
