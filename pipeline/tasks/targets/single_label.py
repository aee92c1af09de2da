"""One class an example: what every such task's label shapes, whatever it reads.

The targets are one-hot rows (soft rows under CutMix and MixUp), the network's logits go through a
softmax, the loss is cross-entropy (label-smoothed, logit-adjusted for long tails: losses.py), a
right answer is the largest output on the target's class, and a submission row holds the class id
or, for a probability submission, P(class 1). Image and text classification are such tasks.
"""

from __future__ import annotations

from typing import ClassVar

from pipeline.core.foreign import EACH, text
from pipeline.tasks.base import Task


class SingleLabel(Task):
    """A task whose examples each have one class of the competition's."""

    activation: ClassVar[str] = "softmax"
    probe: ClassVar[str] = "logistic"  # multinomial: its predict_proba is the softmax
    label_rank: ClassVar[int] = 0
    submission_kinds: ClassVar[tuple[str, ...]] = ("class", "probability")

    def label_text(self, label, spec) -> str:
        """The class name; for a CutMix/MixUp soft label, its two largest shares."""
        import numpy as np

        label = np.asarray(label)
        if label.ndim == 0:
            return spec.classes[int(label)]
        top = np.argsort(label)[::-1][:2]
        return "\n".join(f"{spec.classes[i]} {label[i]:.0%}" for i in top if label[i] > 0.005)

    def loss(self, train, class_counts=None):
        from pipeline.tasks.targets.losses import loss_function

        return loss_function(train, class_counts)

    def labels_summary(self, labeled, spec, config):
        """Examples per class in each labelled split (`make inspect`)."""
        from pipeline.tasks.targets import class_counts

        return class_counts.summary(labeled, spec, config)

    def train_metric(self, summary=None):
        import keras

        return keras.metrics.CategoricalAccuracy(name="accuracy")

    def scores(self, outputs, labels) -> dict[str, float]:
        """Cross-entropy (outputs clipped at 1e-7, as Keras clips) and accuracy of class ids `labels`."""
        import numpy as np

        losses = -np.log(np.clip(outputs[np.arange(len(labels)), labels], 1e-7, 1.0))
        return {"loss": float(losses.mean()), "accuracy": float((outputs.argmax(axis=1) == labels).mean())}

    def evaluate(self, labels, probabilities, spec, groups=None):
        """Per-class scores, the confusion matrix and the top confusions (single_label_report.py)."""
        from pipeline.tasks.targets import single_label_report

        return single_label_report.evaluation(labels, probabilities, spec)

    def mistakes(self, labels, probabilities, spec):
        """Rows whose largest probability is on another class, ranked by that probability."""
        from pipeline.tasks.targets import single_label_report

        return single_label_report.mistakes(labels, probabilities, spec.classes)

    def summary_lines(self, evaluation: dict) -> list[str]:
        from pipeline.tasks.targets import single_label_report

        return single_label_report.summary_lines(evaluation)

    def submission_column(self, values, spec) -> list:
        from pipeline.tasks.targets import single_label_submission

        return single_label_submission.column(values, spec)

    def check_values(self, spec):
        from pipeline.tasks.targets import single_label_submission

        return single_label_submission.checker(spec)

    def describe_submission(self, spec, summary) -> str:
        if spec.submission_value == "probability":
            return f"P({text(spec.classes[1], EACH)}) per row"  # a class name, from the competition's files
        return f"{summary.classes_used} classes predicted"

    def submission_values(self, probabilities, spec, val=None):
        """The class id, or P(class 1) for a probability submission."""
        if spec.submission_value == "probability":
            return probabilities[:, 1]
        return probabilities.argmax(axis=1)
