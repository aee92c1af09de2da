"""What CV chooses for the data it gets (`make train FOLDS=5 CHOOSE=1`), scored on test parts that
no choice saw, against the linear probe and against always taking the recipe as written.

Each set of `cv_data` (real digit scans, Fashion-MNIST and Tux Paint's photo stamps, subsampled to
30 images a class or whole) is written as a user's own image-CSV competition, its test labels
outside it. In fresh processes, as `make` runs them: `cv train --choose 1` trains every candidate
of the CPU recipe (pipeline/tasks/recipes/image_classification/candidates/cpu.toml) as a CV group
on one fold table and chooses; `cv predict --choose 1` submits the chosen group's fold mean; each
candidate's own group is predicted too, so the table shows what the choice passed over. Only then
are the submissions scored against the held-back labels, and the probe (frozen EfficientNet-Lite0
+ logistic regression, C by CV on the dev part) beside them.

Usage: python benchmarks/bench_choose.py [--sets stamps digits-small fashion-small] [--seed 1]
Each set and seed is one entry of benchmarks/choose.json (`stamps`, `stamps@seed1`) with its
commit; the summary is over every entry there.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks import cv_data  # noqa: E402
from benchmarks.bench_cv import opened_set, probe, run_entries, test_score  # noqa: E402
from benchmarks.bench_images_real import stage  # noqa: E402
from pipeline.cv import choose  # noqa: E402


def run_set(name: str, folds: int, seed: int) -> dict:
    with opened_set(name, folds, seed) as (data, chain, result):
        runs, subs = chain.work / "runs", chain.work / "subs"
        args = ["--folds", str(folds), *chain.common("cpu", runs, subs)]
        result["train_seconds"] = stage("cv", "train", "--choose", "1", *args)
        (place,) = runs.glob("choose-*")
        choice = json.loads((place / choose.FILE).read_text())
        stage("cv", "predict", "--choose", "1", *args)
        chosen = test_score(subs / f"{choice['group']}.csv", chain.truth)
        rows = []
        for row in choice["rows"]:  # every candidate's fold mean on test: what the choice passed over
            own = [*args]
            for override in row["overrides"]:
                own += ["--set", override]
            stage("cv", "predict", *own)
            rows.append({**row, "test_fold_mean": test_score(subs / f"{row['group']}.csv", chain.truth)})
        result.update(
            {"winner": choice["winner"], "rule": choice["rule"], "rows": rows, "test_chosen": chosen}
        )
    result["probe_test"] = probe(data)
    return result


def summary(results: dict) -> dict:
    """Over every entry: the chosen candidate against the probe and against the recipe as written,
    and how far each judge (the schedule's end, the CV score of best epochs) is from the test."""
    chosen = np.array([r["test_chosen"] for r in results.values()])
    probe_scores = np.array([r["probe_test"] for r in results.values()])
    recipe = np.array([next(x for x in r["rows"] if x["candidate"] == "recipe")["test_fold_mean"]
                       for r in results.values()])  # fmt: skip
    rows = [row for r in results.values() for row in r["rows"]]
    return {
        "entries": len(results),
        "chosen_minus_probe_mean": float(np.mean(chosen - probe_scores)),
        "chosen_below_probe": int(np.sum(chosen < probe_scores)),
        "recipe_minus_probe_mean": float(np.mean(recipe - probe_scores)),
        "recipe_below_probe": int(np.sum(recipe < probe_scores)),
        "mae_end_of_schedule_vs_test": float(np.mean([abs(x["score"] - x["test_fold_mean"]) for x in rows])),
        "mae_cv_best_epochs_vs_test": float(
            np.mean([abs(x["cv_score"] - x["test_fold_mean"]) for x in rows])
        ),
        "winners": {key: r["winner"] for key, r in results.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sets", nargs="+", default=["stamps", "digits-small", "fashion-small"],
                        choices=cv_data.SETS)  # fmt: skip
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0, help="the runs' seed and the folds' (default 0)")
    args = parser.parse_args()
    run_entries(
        REPO / "benchmarks" / "choose.json", "choose", args.sets, args.seed,
        lambda name: run_set(name, args.folds, args.seed), summary,
    )  # fmt: skip


if __name__ == "__main__":
    main()
