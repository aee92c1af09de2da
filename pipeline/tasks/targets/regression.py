"""One number an example: what every regression task's target shapes, whatever it reads.

A target is a row of one float (Pawpularity's 1-100 score, CommonLit's readability), the head is
linear and learns the standardised target ((y - mean) / std of the training rows: why, in
pipeline/networks/numbers.py, whose layer turns it back into the target's units and keeps mean
and std with the weights), the loss is the mean squared error of the standardised numbers, and
what the training loop reports beside it is the RMSE in the target's units (the history's
"accuracy" column, titled `rmse` where the epochs are shown). A submission row holds the number,
clipped to the range the competition states or, where it states none, to the labelled rows'
(`regression_submission.py`).
"""

from __future__ import annotations

from typing import ClassVar, NamedTuple

import numpy as np

from pipeline.core.errors import PetalsError
from pipeline.tasks.base import Task


class TargetScale(NamedTuple):
    """The training targets' mean and standard deviation: what the loss and the output layer take."""

    mean: float
    std: float


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
        """The mean and std of the training rows' numbers (a std of 0, one value, taken as 1)."""
        labels = np.asarray(train.training_examples.labels, np.float64)
        std = float(labels.std())
        return TargetScale(float(labels.mean()), std if std > 0 else 1.0)

    def fit_output(self, net, summary: TargetScale) -> None:
        net.get_layer("probabilities").set_scale(summary.mean, summary.std)

    def label_text(self, label, spec) -> str:
        return f"{spec.label_column} {float(np.ravel(label)[0]):.4g}"

    def loss(self, train, class_counts: TargetScale | None = None):
        """The mean squared error of the standardised numbers: the output's error over the std."""
        from pipeline.tasks.targets.regression_loss import standardised_mse

        return standardised_mse(1.0 if class_counts is None else class_counts.std)

    def train_metric(self):
        import keras

        return keras.metrics.RootMeanSquaredError(name="accuracy")  # the history's second column

    def scores(self, outputs, labels) -> dict[str, float]:
        """The loss in the target's units (mean squared error) and the RMSE (the `accuracy` slot)."""
        error = np.ravel(outputs) - np.ravel(np.asarray(labels, np.float64))
        mse = float(np.mean(error**2))
        return {"loss": mse, "accuracy": float(np.sqrt(mse))}

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

        return regression_submission.column(values)

    def check_values(self, spec):
        from functools import partial

        from pipeline.tasks.targets import regression_submission

        return partial(regression_submission.check, spec=spec)

    def describe_submission(self, spec, summary) -> str:
        return f"a number per row ({spec.label_column})"

    def submission_values(self, probabilities, spec, val=None):
        """Each row's number, clipped to the competition's stated range, else to the range of the
        labelled `val` rows (out of fold under CV: every labelled row)."""
        from pipeline.tasks.targets import regression_submission

        return regression_submission.decide(probabilities, spec, val)
