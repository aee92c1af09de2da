"""Several labels an example: what every such task's label shapes, whatever it reads.

A target is a row of 0/1 over the labels (soft under CutMix and MixUp), the network's logits go
through a sigmoid each, the loss is binary cross-entropy (label-smoothed), and a submission row
lists the labels whose probability clears that label's threshold, separated by spaces, the way
Kaggle's multi-label competitions take them (Plant Pathology 2021's `scab frog_eye_leaf_spot`);
or, where the metric scores probabilities (Jigsaw's mean column ROC AUC), a submission row holds
each label's probability in its own column (`submission.value = "label_probabilities"`).

The thresholds are chosen on the val predictions (`multi_label_decision.py`, out of fold under
CV); evaluate judges them cross-fitted, each half of val decided by thresholds chosen on the other.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from pipeline.core.errors import PetalsError
from pipeline.tasks.base import Task


class MultiLabel(Task):
    """A task whose examples each carry any number of the competition's labels."""

    activation: ClassVar[str] = "sigmoid"
    probe: ClassVar[str] = "one_vs_rest"  # a logistic regression per label: a sigmoid each
    label_rank: ClassVar[int] = 1
    decides_on_val: ClassVar[bool] = True
    submission_kinds: ClassVar[tuple[str, ...]] = ("labels", "label_probabilities")

    def check_recipe(self, config, spec) -> None:
        """What this task does not train yet, refused in one line before any work."""
        refused = {
            "train.logit_adjustment": config.train.logit_adjustment,  # a softmax's prior shift
            "train.pseudo_labels": config.train.pseudo_labels,  # pseudo-labels are argmax classes
            # no val split to choose the thresholds on (a refit, REFIT=1, trains on everything)
            "train.merge_val": config.train.merge_val,
        }
        for key, value in refused.items():
            if value:
                raise PetalsError(
                    f"{key}={value}: competition {spec.name} has several labels an example, "
                    "which this does not serve yet; leave it out"
                )

    def label_text(self, label, spec) -> str:
        """The labels held, space-separated; a mixed row's shares beside them."""
        label = np.asarray(label, np.float64)
        held = [k for k in np.argsort(label)[::-1] if label[k] > 0.005]
        if not held:
            return "(no label)"
        if all(label[k] == 1.0 for k in held):
            return " ".join(spec.classes[k] for k in sorted(held))
        return "\n".join(f"{spec.classes[k]} {label[k]:.0%}" for k in held)  # mixed: each share

    def loss(self, train, class_counts=None):
        import keras

        return keras.losses.BinaryCrossentropy(label_smoothing=train.label_smoothing)

    def labels_summary(self, labeled, spec, config):
        """Examples per class in each labelled split (`make inspect`)."""
        from pipeline.tasks.targets import class_counts

        return class_counts.summary(labeled, spec, config)

    def train_metric(self, summary=None):
        import keras

        return keras.metrics.BinaryAccuracy(name="accuracy")  # over every label of every example

    def scores(self, outputs, labels) -> dict[str, float]:
        """Binary cross-entropy (outputs clipped at 1e-7, as Keras clips) and the labels decided
        right at 0.5."""
        p = np.clip(outputs, 1e-7, 1 - 1e-7)
        losses = -(labels * np.log(p) + (1 - labels) * np.log(1 - p)).mean(axis=1)
        return {"loss": float(losses.mean()), "accuracy": float(((outputs > 0.5) == (labels > 0.5)).mean())}

    def evaluate(self, labels, probabilities, spec, groups=None):
        """Per-label scores at the chosen thresholds and the score they give out of fold (out of
        group too: the thresholds are judged on the other half's groups)."""
        from pipeline.tasks.targets import multi_label_report

        return multi_label_report.evaluation(labels, probabilities, spec, groups)

    def mistakes(self, labels, probabilities, spec):
        """Rows decided wrong on some label at the thresholds chosen on val, ranked by their largest
        error on one label (multi_label_report.mistakes)."""
        from pipeline.tasks.targets import multi_label_report

        return multi_label_report.mistakes(labels, probabilities, spec.classes)

    def summary_lines(self, evaluation: dict) -> list[str]:
        from pipeline.tasks.targets import multi_label_report

        return multi_label_report.summary_lines(evaluation)

    def submission_column(self, values, spec) -> list:
        """Each row's labels, their names separated by spaces (values: rows of 0/1); or each row's
        probabilities, one a label column, with 6 decimals."""
        if spec.submission_value == "label_probabilities":
            return [[f"{p:.6f}" for p in row] for row in np.asarray(list(values), np.float64)]
        return [" ".join(c for c, on in zip(spec.classes, row, strict=True) if on) for row in values]

    def check_values(self, spec):
        from functools import partial

        from pipeline.tasks.targets import multi_label_submission

        if spec.submission_value == "label_probabilities":
            return partial(multi_label_submission.check_columns, spec=spec)
        return partial(multi_label_submission.check, spec=spec)

    def describe_submission(self, spec, summary) -> str:
        if spec.submission_value == "label_probabilities":
            return f"a probability for each of {len(spec.submission_columns)} labels per row"
        return f"{summary.classes_used} labels predicted"

    def submission_values(self, probabilities, spec, val=None):
        """Rows of 0/1: the labels over their thresholds, chosen on `val` (predictions with labels);
        a row left empty takes its likeliest label when no val example was without one. Where a
        label has a column, its probabilities as they are (nothing is decided)."""
        from pipeline.tasks.targets import multi_label_decision

        if spec.submission_value == "label_probabilities":
            return probabilities
        if val is None or val.labels is None:
            raise ValueError("a multi-label submission needs the val predictions to choose its thresholds")
        decision = multi_label_decision.choose(val.labels, val.probabilities)
        return multi_label_decision.decide(probabilities, decision)
