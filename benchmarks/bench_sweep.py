"""`make sweep` on real labelled images, with its test part held out: a 20-trial sweep of the CPU
recipe's search space (pipeline/tasks/recipes/image_classification/spaces/cpu.toml) with the
median pruner against the same sweep without pruning (wall seconds, trials pruned, the best
trial's judged val score), and the best trial's test score against the recipe as written.

Each set of `cv_data` (real digit scans, Fashion-MNIST, Tux Paint's photo stamps) is written as a
user's own image-CSV competition, its test labels outside it. In fresh processes, as `make` runs
them: `sweep --pruner median` and `sweep --pruner none` (two studies, two runs dirs: nothing is
shared between the arms), then `predict --run <best trial's run>` of each, and `train` + `predict`
of the recipe as written; only then are the submissions scored against the held-back labels. The
sampler is seeded per trial number, so both arms try the same values for their first trials.

Usage: python benchmarks/bench_sweep.py [--sets digits-small] [--trials 20] [--seed 0]
Each set and seed is one entry of benchmarks/sweep.json with its commit.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks import cv_data  # noqa: E402
from benchmarks.bench_cv import newest_csv, opened_set, run_entries, test_score  # noqa: E402
from benchmarks.bench_images_real import stage  # noqa: E402


def arm(chain, pruner: str, trials: int) -> dict:
    """One sweep in its own runs dir: its seconds, its trials' states, the best trial and its test score."""
    runs, subs = chain.work / f"sweep-{pruner}", chain.work / f"sweep-{pruner}-subs"
    args = chain.common("cpu", runs, subs)
    started = time.perf_counter()
    stage("sweep", "--space", "1", "--trials", str(trials), "--pruner", pruner, *args)
    seconds = time.perf_counter() - started
    import optuna

    (db,) = (runs / "sweeps").glob("*.db")
    found = optuna.load_study(study_name=db.stem, storage=f"sqlite:///{db}")
    states = [t.state.name.lower() for t in found.trials]
    best = found.best_trial
    stage("predict", *args, "--run", best.user_attrs["run"])
    return {
        "seconds": round(seconds, 1),
        "trials": {s: states.count(s) for s in sorted(set(states))},
        "best_trial": best.number,
        "best_judged_val": round(best.value, 4),
        "best_params": best.params,
        "best_test": round(test_score(newest_csv(subs), chain.truth), 4),
    }


def run_set(name: str, trials: int, seed: int) -> dict:
    with opened_set(name, 5, seed) as (_, chain, result):
        for pruner in ("median", "none"):
            result[pruner] = arm(chain, pruner, trials)
            print(f"  {name} {pruner}: {json.dumps(result[pruner])}", flush=True)
        result["recipe"] = chain.single("cpu")  # the recipe as written: val, test, seconds
    return result


def summary(results: dict) -> dict:
    return {
        "entries": len(results),
        **{
            key: {
                "pruned_seconds": r["median"]["seconds"],
                "unpruned_seconds": r["none"]["seconds"],
                "time_saved": round(1 - r["median"]["seconds"] / r["none"]["seconds"], 3),
                "pruned_trials": r["median"]["trials"].get("pruned", 0),
                "best_test_pruned": r["median"]["best_test"],
                "best_test_unpruned": r["none"]["best_test"],
                "recipe_test": round(r["recipe"]["test"], 4),
                "best_judged_val_pruned": r["median"]["best_judged_val"],
            }
            for key, r in results.items()
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sets", nargs="+", default=["digits-small"], choices=cv_data.SETS)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    path = REPO / "benchmarks" / "sweep.json"
    measured = lambda one: run_set(one, args.trials, args.seed)  # noqa: E731
    run_entries(path, "sweep", args.sets, args.seed, measured, summary)


if __name__ == "__main__":
    main()
