"""Numbers an example: what every regression task's target shapes, whatever it reads.

A target is a row of one float (Pawpularity's 1-100 score, CommonLit's readability) or of several,
one a column (`[data] label_columns`: Feedback Prize ELL's six scores). The head is linear, one
output a column, and learns the standardised target ((y - mean) / std of the training rows, each
column its own: why, in pipeline/networks/numbers.py, whose layer turns it back into the target's
units and keeps mean and std with the weights); the loss is the mean squared error of the
standardised numbers, and what the training loop reports beside it is the RMSE in the target's
units (of several columns, their mean column-wise RMSE, MCRMSE: the history's "accuracy" column,
titled `rmse` where the epochs are shown). A submission row holds the numbers, each clipped to the
range the competition states or, where it states none, to its column's range in the labelled rows
(`regression_submission.py`).
"""

from __future__ import annotations

from typing import ClassVar, NamedTuple

import numpy as np

from pipeline.core.errors import PetalsError
from pipeline.tasks.base import Task


class TargetScale(NamedTuple):
    """The training targets' mean and standard deviation: what the loss and the output layer take.
    Floats for one column; arrays, one entry a column, for several."""

    mean: float | np.ndarray
    std: float | np.ndarray

    @property
    def columns(self) -> int:
        return int(np.size(self.mean))


def _column_scale(numbers: np.ndarray) -> tuple[float, float]:
    """One column's mean and std (a std of 0, one value, taken as 1)."""
    std = float(numbers.std())
    return float(numbers.mean()), std if std > 0 else 1.0


def rows(numbers) -> np.ndarray:
    """Numbers as rows of float64 [n, columns], however they came ([n] or [n, columns])."""
    numbers = np.asarray(numbers, np.float64)
    return numbers.reshape(len(numbers), -1)


class Regression(Task):
    """A task whose examples each have one number to predict."""

    activation: ClassVar[str] = "standardised"  # pipeline/networks/numbers.py's ACTIVATION
    probe: ClassVar[str] = "ridge"  # of the standardised numbers: the linear head's own output
    label_rank: ClassVar[int] = 1  # a row of one number
    numeric_target: ClassVar[bool] = True
    decides_on_val: ClassVar[bool] = True  # clipped to the labelled rows' range, where none is stated
    submission_kinds: ClassVar[tuple[str, ...]] = ("number",)
    train_metric_title: ClassVar[str] = "rmse"

    def check_recipe(self, config, spec) -> None:
        """What this task does not train, refused in one line before any work."""
        refused = {
            "train.logit_adjustment": config.train.logit_adjustment,  # a softmax's prior shift
            "train.label_smoothing": config.train.label_smoothing,  # of classes, not of numbers
            "train.pseudo_labels": config.train.pseudo_labels,  # pseudo-labels are argmax classes
            # no val rows to take the range from where the competition states none
            "train.merge_val": config.train.merge_val and spec.value_range is None,
        }
        for key, value in refused.items():
            if value:
                raise PetalsError(
                    f"{key}={value}: competition {spec.name} predicts a number an example, "
                    "which this does not serve; leave it out"
                )

    def target_summary(self, train, config) -> TargetScale:
        """Each column's mean and std in the training rows (a std of 0, one value, taken as 1)."""
        scales = [_column_scale(column) for column in rows(train.training_examples.labels).T]
        if len(scales) == 1:
            return TargetScale(*scales[0])
        means, stds = zip(*scales, strict=True)
        return TargetScale(np.array(means), np.array(stds))

    def fit_output(self, net, summary: TargetScale) -> None:
        net.get_layer("probabilities").set_scale(summary.mean, summary.std)

    def label_text(self, label, spec) -> str:
        return ", ".join(f"{name} {v:.4g}" for name, v in zip(spec.classes, np.ravel(label), strict=True))

    def loss(self, train, class_counts: TargetScale | None = None):
        """The mean squared error of the standardised numbers: the output's error over the std."""
        from pipeline.tasks.targets.regression_loss import standardised_mse

        return standardised_mse(1.0 if class_counts is None else class_counts.std)

    def labels_summary(self, labeled, spec, config):
        """Each target column's count, mean, std, quartiles and range a labelled split (`make inspect`)."""
        from pipeline.tasks.targets import regression_summary

        return regression_summary.summary(labeled, spec, config)

    def metric_title(self, spec) -> str:
        """RMSE of one column; the mean of each column's (MCRMSE) of several."""
        return "mcrmse" if len(spec.label_columns) > 1 else self.train_metric_title

    def train_metric(self, summary: TargetScale | None = None):
        """RMSE in the target's units; of several columns (`summary` says how many), MCRMSE."""
        import keras

        if summary is None or summary.columns == 1:
            return keras.metrics.RootMeanSquaredError(name="accuracy")  # the history's second column
        from pipeline.tasks.targets.regression_loss import MeanColumnwiseRMSE

        return MeanColumnwiseRMSE(summary.columns, name="accuracy")

    def scores(self, outputs, labels) -> dict[str, float]:
        """The loss in the target's units (mean squared error over every cell) and the RMSE (the
        `accuracy` slot; of several columns, the mean of each column's RMSE: MCRMSE)."""
        error = rows(outputs) - rows(labels)
        mse = float(np.mean(error**2))
        if error.shape[1] == 1:
            return {"loss": mse, "accuracy": float(np.sqrt(mse))}
        return {"loss": mse, "accuracy": float(np.mean(np.sqrt(np.mean(error**2, axis=0))))}

    def evaluate(self, labels, probabilities, spec, groups=None):
        """RMSE, MAE and R^2 of the val numbers, and a plot of predicted against true."""
        from pipeline.tasks.targets import regression_report

        return regression_report.evaluation(labels, probabilities, spec)

    def mistakes(self, labels, probabilities, spec):
        """Every row, the largest absolute error first."""
        from pipeline.tasks.targets import regression_report

        return regression_report.mistakes(labels, probabilities)

    def summary_lines(self, evaluation: dict) -> list[str]:
        from pipeline.tasks.targets import regression_report

        return regression_report.summary_lines(evaluation)

    def submission_column(self, values, spec) -> list:
        from pipeline.tasks.targets import regression_submission

        return regression_submission.column(values, spec)

    def check_values(self, spec):
        from functools import partial

        from pipeline.tasks.targets import regression_submission

        return partial(regression_submission.check, spec=spec)

    def describe_submission(self, spec, summary) -> str:
        from pipeline.core.foreign import listed, text

        if len(spec.submission_columns) == 1:  # names from a shared competition file: shown as text
            return f"a number per row ({text(spec.label_column, 40)})"
        return f"{len(spec.submission_columns)} numbers per row ({listed(spec.submission_columns)})"

    def submission_values(self, probabilities, spec, val=None):
        """Each row's numbers, clipped to the competition's stated range, else to each column's
        range in the labelled `val` rows (out of fold under CV: every labelled row)."""
        from pipeline.tasks.targets import regression_submission

        return regression_submission.decide(probabilities, spec, val)
