"""What evaluate reports of a multi-label run's val predictions: per label, the threshold chosen on
all of val (what the submission uses), and scikit-learn's precision, recall, F1 and support of
decisions cross-fitted over two halves of val (each half decided by the other half's thresholds),
so no row judges a threshold it chose; the competition's metric over those decisions; and micro
F1 at 0.5 beside it (`MultiLabel.evaluate`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from pipeline.core.files import write_atomically
from pipeline.core.foreign import EACH, listed, safe_cells, text
from pipeline.core.rundir import RunDir
from pipeline.tasks.base import Evaluation
from pipeline.tasks.targets import multi_label_decision


def evaluation(labels: np.ndarray, probabilities: np.ndarray, spec, groups=None) -> Evaluation:
    from sklearn.metrics import f1_score

    truth = (np.asarray(labels) > 0.5).astype(np.int32)
    decision = multi_label_decision.choose(truth, probabilities)
    judged = multi_label_decision.cross_fitted(truth, probabilities, groups)
    per_label = per_label_table(truth, judged, decision["thresholds"], spec.classes)
    at_half = (probabilities >= 0.5).astype(np.int32)
    fields = {
        "val_accuracy": float((at_half == truth).mean()),  # labels decided right at 0.5
        "thresholds": dict(zip(spec.classes, decision["thresholds"], strict=True)),
        "fill_empty": decision["fill_empty"],
        "val_micro_f1": float(f1_score(truth, at_half, average="micro", zero_division=0)),
        "worst_classes": per_label.nsmallest(3, "f1")["class"].tolist(),
    }
    files = {
        RunDir.PER_CLASS: lambda path: write_atomically(
            path, lambda tmp: safe_cells(per_label).to_csv(tmp, index=False)
        )
    }
    if spec.metric.reads == "label_probabilities":  # scored on the probabilities: nothing decided
        per_label["roc_auc"] = column_roc_auc(truth, probabilities).round(4)
        fields["worst_classes"] = per_label.nsmallest(3, "roc_auc")["class"].tolist()
        return Evaluation(fields, files, score=spec.metric.score(truth, probabilities))
    fields[f"{spec.score_key}_thresholded"] = spec.metric.score_decided(truth, judged)
    fields[f"{spec.score_key}_at_half"] = spec.metric.score_decided(truth, at_half)  # training's reading
    return Evaluation(fields, files, score=fields[f"{spec.score_key}_thresholded"])


def column_roc_auc(truth: np.ndarray, probabilities: np.ndarray) -> np.ndarray:
    """Each label's ROC AUC (scikit-learn's); NaN for a label all of one value in these rows."""
    from sklearn.metrics import roc_auc_score

    both = truth.any(axis=0) & ~truth.all(axis=0)
    return np.array(
        [roc_auc_score(truth[:, k], probabilities[:, k]) if both[k] else np.nan for k in range(len(both))]
    )


def per_label_table(truth: np.ndarray, decided: np.ndarray, thresholds, classes) -> pd.DataFrame:
    """Threshold, precision, recall, F1 and support of every label, scikit-learn's numbers."""
    from sklearn.metrics import precision_recall_fscore_support

    precision, recall, f1, support = precision_recall_fscore_support(truth, decided, zero_division=0)
    return pd.DataFrame(
        {
            "label": np.arange(len(classes)),
            "class": classes,
            "threshold": thresholds,
            "precision": precision.round(4),
            "recall": recall.round(4),
            "f1": f1.round(4),
            "support": support,
        }
    )


def summary_lines(evaluation: dict) -> list[str]:
    """The thresholds, the score they give out of fold, and the weakest labels, for the terminal."""
    scored = next((k for k in evaluation if k.endswith("_thresholded")), None)
    chosen = ", ".join(f"{text(name, EACH)} {t:.2f}" for name, t in evaluation["thresholds"].items())
    judged = (
        f"  with them, cross-fitted over two halves of val: {evaluation[scored]:.4f}"
        f" (at 0.5: {evaluation[scored.replace('_thresholded', '_at_half')]:.4f};"
        f" micro F1 at 0.5: {evaluation['val_micro_f1']:.4f})"
        if scored  # the metric scores decided labels; else it scores the probabilities themselves
        else f"  micro F1 at 0.5: {evaluation['val_micro_f1']:.4f}"
    )
    return [
        f"  thresholds chosen on val (each label's best F1): {chosen}",
        judged,
        "  weakest labels: " + listed(evaluation["worst_classes"]),
    ]


def mistakes(labels: np.ndarray, probabilities: np.ndarray, classes: tuple[str, ...]) -> pd.DataFrame:
    """Every row whose decision at the thresholds chosen on val (what a submission holds) differs
    from its labels on some label, ranked by its error: the largest |probability - truth| over its
    labels, how sure the model was of its worst label (1.0: certain and wrong)."""
    truth = (np.asarray(labels) > 0.5).astype(np.int32)
    decided = multi_label_decision.decide(probabilities, multi_label_decision.choose(truth, probabilities))
    rows = np.flatnonzero((decided != truth).any(axis=1))
    error = np.abs(probabilities - truth).max(axis=1)[rows]
    order = np.argsort(-error, kind="stable")
    rows, error = rows[order], error[order]

    def names(row) -> str:
        return " ".join(classes[k] for k in np.flatnonzero(row)) or "(none)"

    return pd.DataFrame(
        {
            "row": rows,
            "true": [names(truth[r]) for r in rows],
            "predicted": [names(decided[r]) for r in rows],
            "error": error.astype(np.float64).round(4),
        }
    )
