"""Where petals' reported CV and its test score part, and why (issue 65): `bench_realdata --seeds`.

One split of a set gives one gap between the CV score a run reports and the test score of its
submission. That gap holds three things, measured apart here:
- the test score's own noise: its 95% bootstrap interval over test rows, or over whole test groups
  for a grouped set (`Metric.interval`, the draw petals' own reports make);
- the split's luck and any shift between the parts: the set dealt again into dev and test with
  other seeds (`resplit`), the signed gap (reported - test) of each, its mean and spread over the
  seeds (`over_seeds`): a mean near 0 with a wide spread is luck; a mean away from 0 by more than
  its standard error is a bias of CV on that data;
- CV's learning curve: each fold model trains on (K-1)/K of dev; the default submits the folds'
  mean; a refit (`--refit`) trains one model on all of dev. The fold models' own test scores
  (`fold_models`, from the test predictions each fold run saved) against the refit's and the
  mean's, all on the same test part, split the gap into "dev reads differently from test" (CV -
  the fold models on test) and "more training data" (refit - fold models on test).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from benchmarks import realdata


def resplit(data: realdata.RealSet, seed: int) -> realdata.RealSet:
    """`data`'s rows dealt again into dev and test by `seed` (whole groups, stratified, one of as
    many parts as the loader's split made): seed realdata.SEED is the loader's own split, as is."""
    if seed == realdata.SEED:
        return data
    grouped = data.grouped
    everything = realdata.Part(
        data.dev.items + data.test.items,
        np.concatenate([data.dev.labels, data.test.labels]),
        np.concatenate([data.dev.groups, data.test.groups]) if grouped else None,
    )
    parts = round(len(everything.labels) / len(data.test.labels))
    dev, test = realdata.split_once(everything.labels, everything.groups, parts, seed)
    return realdata.check_sizes(replace(data, dev=everything.take(dev), test=everything.take(test)))


def test_score(
    labels: np.ndarray, predicted: np.ndarray, classes: int, groups: np.ndarray | None, draws: int = 1000
) -> dict:
    """Test macro-F1 and its 95% bootstrap interval: over test rows, or whole test groups where
    the set has them (rows of one group move together between one draw of a test part and another)."""
    from competition.metric import get_metric

    metric = get_metric("macro_f1")
    one_hot = np.eye(classes)[np.asarray(predicted, int)]
    low, high = metric.interval(np.asarray(labels), one_hot, groups, draws)
    return {
        "test_macro_f1": round(metric.score(labels, one_hot), 4),
        "test_95": [round(low, 3), round(high, 3)],
        "test_95_over": "groups" if groups is not None else "rows",
    }


def fold_models(runs: Path, metrics: dict, ids: list[str], labels: np.ndarray, classes: int) -> dict | None:
    """Each fold model of the submitted CV group scored on the test part (its saved test
    predictions), and their mean; None where the run is no CV group."""
    from competition.metric import macro_f1
    from pipeline.core.rundir import RunDir
    from pipeline.modeling.inference import Predictions

    names = metrics.get("fold_runs")
    if not names:
        return None
    scores = []
    for name in (names[k] for k in sorted(names, key=int)):
        saved = Predictions.load(RunDir(runs / name).predictions("test")).by_ids(np.asarray(ids))
        scores.append(macro_f1(labels, saved.probabilities[:, :classes].argmax(axis=1)))
    return {"fold_test": [round(s, 4) for s in scores], "fold_test_mean": round(float(np.mean(scores)), 4)}


def seed_row(found: dict) -> dict:
    """What one seed's run says about the gap: sizes, reported CV, test and its interval, the signed
    gap, and where measured, the fold models' and the refit's test scores and the parts they make."""
    run = found["default"]
    said = run["reported"]["score"]
    row = {k: found[k] for k in ("dev", "test", "groups") if k in found}
    row.update(
        {"winner": run.get("backbone"), "reported": round(said, 4), "reported_kind": run["reported"]["kind"]}
    )
    scored = ("test_macro_f1", "test_95", "test_95_over", "test_confusion")  # the last since 2026-11-30
    row.update({k: run[k] for k in scored if k in run})
    row["cv_minus_test"] = round(said - run["test_macro_f1"], 4)
    if run["reported"].get("interval"):  # the report's own 95% interval (since 2026-12-04)
        row["reported_95"] = [round(bound, 4) for bound in run["reported"]["interval"]]
    if "baseline" in found:  # measured at seed 0 only
        row["baseline_test"] = found["baseline"]["test_macro_f1"]
    folds = run.get("folds_on_test")
    if folds:
        row.update(folds)
        row["cv_minus_folds_on_test"] = round(said - folds["fold_test_mean"], 4)  # dev vs test, same models
        row["fold_mean_gain"] = round(
            run["test_macro_f1"] - folds["fold_test_mean"], 4
        )  # the mean's ensemble
    if run.get("refit_test") is not None:
        row["refit_test"] = run["refit_test"]
        if folds:  # (K-1)/K of dev -> all of dev, same test part
            row["learning_curve"] = round(run["refit_test"] - folds["fold_test_mean"], 4)
    row.update({"seconds": run["seconds"], "commit": run["commit"]})
    return row


def over_seeds(rows: dict[str, dict]) -> dict:
    """The seeds' figures summed up: each one's mean, sample spread (sd) and the mean's standard
    error; the test interval's mean width. Only figures every seed has are summed."""
    found = {"seeds": sorted(rows, key=int), "commits": sorted({r["commit"] for r in rows.values()})}
    keys = ("cv_minus_test", "reported", "test_macro_f1", "baseline_test", "cv_minus_folds_on_test",
            "fold_mean_gain", "learning_curve")  # fmt: skip
    for key in keys:
        values = [r[key] for r in rows.values() if r.get(key) is not None]
        if values and len(values) == len(rows):
            sd = float(np.std(values, ddof=1)) if len(values) > 1 else None
            found[key] = {
                "mean": round(float(np.mean(values)), 4),
                "sd": None if sd is None else round(sd, 4),
                "se": None if sd is None else round(sd / np.sqrt(len(values)), 4),
                "min": round(min(values), 4),
                "max": round(max(values), 4),
            }
    widths = [r["test_95"][1] - r["test_95"][0] for r in rows.values()]
    found["test_95_width_mean"] = round(float(np.mean(widths)), 3)
    return found


def seeds_table(stored: dict, names: list[str]) -> str:
    """One line a set: seeds, the mean signed gap +- its sd, the test interval's width, the parts."""

    def shown(summary: dict, key: str) -> str:
        got = summary.get(key)
        return (
            "-"
            if not got
            else f"{got['mean']:+.3f}" + (f" +-{got['sd']:.3f}" if got["sd"] is not None else "")
        )

    lines = [f"{'set':<10} {'seeds':>5} {'CV - test':>16} {'test 95% width':>14} "
             f"{'CV - folds on test':>19} {'fold mean gain':>15} {'refit - folds':>15}"]  # fmt: skip
    for name in names:
        summary = stored.get(name, {}).get("over_seeds")
        if summary:
            lines.append(
                f"{name:<10} {len(summary['seeds']):>5} {shown(summary, 'cv_minus_test'):>16} "
                f"{summary['test_95_width_mean']:>14} {shown(summary, 'cv_minus_folds_on_test'):>19} "
                f"{shown(summary, 'fold_mean_gain'):>15} {shown(summary, 'learning_curve'):>15}"
            )
    return "\n".join(lines)
