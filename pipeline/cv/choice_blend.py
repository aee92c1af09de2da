"""The blend as small data's last candidate: the equal mean of every candidate's out-of-fold
probabilities, judged fold by fold, and taken only where it beats them all by more than one
standard error.

On real texts CV's candidates (TF-IDF + LR and the bag of n-grams) are a fold's noise apart, and
their equal mean scored above the better one out of fold and on held-out test parts
(`benchmarks/bench_blend_choice.py`, docs/BENCHMARKS.md). Nothing is fitted: fold f's blended rows
are the candidates' own fold-f rows, each from a model that never saw them, averaged.

Its basis: a blend's rows are its members' out-of-fold rows, and those come from each fold's best
epoch (chosen on them), so it cannot be judged at the schedule's end as a candidate is. It is
judged against the candidates on the basis it shares with them: each fold's out-of-fold score
(`fold_scores`), listed last in the one-standard-error rule, so it wins only where it beats every
candidate's out-of-fold folds by more than its folds' spread over sqrt(K). That basis flatters a
candidate trained for several epochs as much as it flatters the blend through it, never less.
"""

from __future__ import annotations

import numpy as np

from pipeline.core.errors import PetalsError

NAME = "blend"


def blendable(labels: np.ndarray) -> bool:
    """One class an example, or numbers: a multi-label group's CV score is its thresholds', which a
    plain mean of rows does not carry."""
    return np.ndim(labels) == 1 or np.asarray(labels).dtype.kind == "f"


def row(setups: list, spec) -> dict:
    """The blend's row of the choice: its folds' mean out-of-fold score and their spread, its CV score
    (every OOF row at once), and the groups it averages. Every group was dealt the one fold table
    (`choose.SHARED`), and its OOF rows are that table's examples in order: else one line."""
    from pipeline.cv.blend import equal_weights
    from pipeline.modeling.inference import Predictions

    table = setups[0].table
    members = []
    for one in setups:
        oof = Predictions.load(one.group.predictions("oof"))
        if one.table.digest != table.digest or not np.array_equal(oof.ids.astype(str), table.ids):
            raise PetalsError(
                f"{one.group.name}: its OOF rows are not fold table {table.digest}'s examples in order; "
                "the candidates' blend needs one table for all"
            )
        members.append(oof.probabilities)
    blended = equal_weights(members, table.labels, table.folds, spec.metric)
    folds = blended.fold_scores
    return {
        "candidate": NAME,
        "overrides": [],
        "group": None,
        "groups": [one.group.name for one in setups],
        "score": float(np.mean(folds)),
        "spread": float(np.std(folds, ddof=1)) if len(folds) > 1 else 0.0,
        "cv_score": blended.score,
        "fold_scores": folds,
        "cv_epoch": None,
    }


def basis(rows: list[dict]) -> list[dict]:
    """The candidates' rows on the basis the blend's own rows have: their out-of-fold folds
    (`fold_mean`, `fold_std`), for the one-standard-error rule with the blend listed last."""
    return [{"score": r["fold_mean"], "spread": r["fold_std"]} for r in rows]


def report_line(blend: dict, rows: list[dict], chosen: bool) -> str:
    mark = "  <- chosen" if chosen else ""
    against = ", ".join(f"{r['candidate']} {r['fold_mean']:.4f}" for r in rows)
    return (
        f"choose:   {NAME:<12} {blend['score']:.4f} +- {blend['spread']:.4f}  (CV {blend['cv_score']:.4f}; "
        f"the equal mean of their OOF rows, judged on their OOF folds: {against}){mark}"
    )


def summary_line(blend: dict, spec) -> str:
    """evaluate's line where the blend was chosen: its OOF score, each fold's, and what it averages."""
    folds = " ".join(f"{s:.4f}" for s in blend["fold_scores"])
    spread = f"mean {blend['score']:.4f} +- {blend['spread']:.4f}"
    return (
        f"{NAME} of {' + '.join(blend['groups'])}: CV {spec.metric.title} {blend['cv_score']:.4f} "
        f"out of fold, the equal mean of their OOF rows; folds {folds} ({spread})"
    )
