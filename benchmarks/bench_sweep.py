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

With `--folds 5` each trial is a CV group judged out of fold (its folds' mean at the schedule's
end), the pruner sees each fold's score, and the best trial's test score is its folds' mean
submission's (`cv predict`); the recipe as written is then its 5-fold CV group too.

Usage: python benchmarks/bench_sweep.py [--sets digits-small] [--trials 20] [--seed 0] [--folds 5]
[--pruners median none hyperband]. Each set, seed and K is one entry of benchmarks/sweep.json; a
run measures the pruners asked for and keeps the entry's other arms, each with its commit.
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
from benchmarks.bench_cv import entry, newest_csv, opened_set, test_score  # noqa: E402
from benchmarks.bench_fetch import machine, record  # noqa: E402
from benchmarks.bench_images_real import stage  # noqa: E402
from pipeline.core.files import write_json  # noqa: E402

PRUNERS = ("median", "hyperband", "none")


def arm(chain, pruner: str, trials: int, folds: int) -> dict:
    """One sweep in its own runs dir: its seconds, its trials' states, the best trial and its test
    score (folds: the best trial's CV group's fold-mean submission)."""
    runs, subs = chain.work / f"sweep-{pruner}", chain.work / f"sweep-{pruner}-subs"
    args = chain.common("cpu", runs, subs)
    cv = ["--folds", str(folds)] if folds else []
    started = time.perf_counter()
    stage("sweep", "--space", "1", "--trials", str(trials), "--pruner", pruner, *cv, *args)
    seconds = time.perf_counter() - started
    import optuna

    from pipeline.sweep import space

    (db,) = (runs / "sweeps").glob("*.db")
    found = optuna.load_study(study_name=db.stem, storage=f"sqlite:///{db}")
    states = [t.state.name.lower() for t in found.trials]
    best = found.best_trial
    if folds:  # the group's fold mean, as `make predict FOLDS=5` submits it
        values = [a for k, v in best.params.items() for a in ("--set", space.override(k, v))]
        stage("cv", "predict", *cv, *args, *values)
        submission = subs / f"{best.user_attrs['run']}.csv"
    else:
        stage("predict", *args, "--run", best.user_attrs["run"])
        submission = newest_csv(subs)
    return {
        "seconds": round(seconds, 1),
        "trials": {s: states.count(s) for s in sorted(set(states))},
        "best_trial": best.number,
        "best_judged_val": round(best.value, 4),  # with folds: the folds' mean at the schedule's end
        "judged_by": f"{folds}-fold CV" if folds else "val",
        "best_params": best.params,
        "best_test": round(test_score(submission, chain.truth), 4),
    }


def run_set(name: str, trials: int, seed: int, folds: int, pruners: list[str], before: dict) -> dict:
    """The set's entry: each pruner's arm (other arms measured before are kept) and the recipe."""
    result = {k: v for k, v in before.items() if k in (*PRUNERS, "recipe")}
    with opened_set(name, folds or 5, seed) as (_, chain, opened):
        result.update(opened)  # sizes, seed, this commit
        for pruner in pruners:
            result[pruner] = {**arm(chain, pruner, trials, folds), "commit": opened["commit"]}
            print(f"  {name} {pruner}: {json.dumps(result[pruner])}", flush=True)
        if "recipe" not in result:  # the recipe as written: val (or CV), test, seconds
            if folds:
                found = chain.cv("cpu", refit=False)
                result["recipe"] = {
                    "cv": found["cv"],
                    "test": found["test_fold_mean"],
                    "seconds": found["seconds"],
                }
            else:
                result["recipe"] = chain.single("cpu")
    return result


def summary(results: dict) -> dict:
    figures = {}
    for key, r in results.items():
        unpruned = r.get("none", {}).get("seconds")  # an entry may hold pruned arms only
        figures[key] = {
            "recipe_test": round(r["recipe"]["test"], 4),
            **{
                pruner: {
                    "seconds": r[pruner]["seconds"],
                    "time_saved": round(1 - r[pruner]["seconds"] / unpruned, 3) if unpruned else None,
                    "trials": r[pruner]["trials"],
                    "best_judged_val": r[pruner]["best_judged_val"],
                    "best_test": r[pruner]["best_test"],
                }
                for pruner in PRUNERS
                if pruner in r
            },
        }
    return {"entries": len(results), **figures}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sets", nargs="+", default=["digits-small"], choices=cv_data.SETS)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pruners", nargs="+", default=["median", "none"], choices=PRUNERS)
    parser.add_argument("--folds", type=int, default=0, help="K: each trial a K-fold CV group (0: one run)")
    args = parser.parse_args()
    path = REPO / "benchmarks" / "sweep.json"
    results = json.loads(path.read_text())["sets"] if path.is_file() else {}
    for name in args.sets:
        key = entry(name, args.seed) + (f"-cv{args.folds}" if args.folds else "")
        results[key] = run_set(name, args.trials, args.seed, args.folds, args.pruners, results.get(key, {}))
        write_json(path, {"machine": machine(), "sets": results})
    figures = summary(results)
    print(json.dumps(figures, indent=1))
    write_json(path, {"machine": machine(), "sets": results, "summary": figures})
    record([{"name": "sweep", **figures}])


if __name__ == "__main__":
    main()
