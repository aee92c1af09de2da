"""How many cached views of each training image the CPU recipe needs (`train.feature_views`), judged
on real images no one here drew, at several sizes, on test parts no run saw.

The CPU recipe caches the frozen part's activations of each training image once per view and
trains its top on the cache: view 1 is the image, view 2 its mirror, more views are random
augmentations. Each view is one more forward pass of every training image, the main job's
largest cost. Each set of `cv_data` (Tux Paint's photo stamps, digit scans and Fashion-MNIST at 30
a class, Fashion-MNIST at 300 a class, the digits and Fashion-MNIST whole) is written as a user's
own image-CSV competition, its test labels outside it; each arm (its views exactly, the recipe's
`train.feature_views_up_to` off) runs the real chain in fresh processes (`train`,
which holds a tenth of train out as val and keeps its best epoch there, then `predict`), and only
then is its submission scored against the held-back labels (macro-F1, scikit-learn's).

Usage: python benchmarks/bench_views.py [--sets stamps digits-small] [--views 1 2] [--seed 1]
Each set and seed is one entry of benchmarks/views.json (`stamps`, `stamps@seed1`) with its commit;
the summary, over every entry there, is each arm's test score less the recipe's (2 views).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks import cv_data  # noqa: E402
from benchmarks.bench_cv import opened_set, run_entries  # noqa: E402

# The views the recipe shipped with when this benchmark was written: the arm the others are judged against.
BASE = 2


def run_set(name: str, views: list[int], seed: int) -> dict:
    with opened_set(name, 5, seed) as (_, chain, result):
        for count in views:
            exactly = [f"train.feature_views={count}", "train.feature_views_up_to=0"]  # whatever the size
            arm = chain.single("cpu", exactly, f"views{count}")
            result[f"views{count}"] = {key: round(value, 4) for key, value in arm.items()}
            print(f"  {name} views={count}: {result[f'views{count}']}", flush=True)
    return result


def summary(results: dict) -> dict:
    """Each arm against BASE views on the entries that ran both: the mean and spread of the test
    difference, how often it is below, and the mean share of BASE's seconds it takes."""
    arms = sorted({key for found in results.values() for key in found if key.startswith("views")})
    figures = {}
    for arm in arms:
        pairs = [f for f in results.values() if arm in f and f"views{BASE}" in f]
        if arm == f"views{BASE}" or not pairs:
            continue
        diff = np.array([f[arm]["test"] - f[f"views{BASE}"]["test"] for f in pairs])
        share = np.array([f[arm]["seconds"] / f[f"views{BASE}"]["seconds"] for f in pairs])
        figures[arm] = {
            "entries": len(pairs),
            "test_minus_base_mean": round(float(diff.mean()), 4),
            "test_minus_base_min": round(float(diff.min()), 4),
            "test_minus_base_max": round(float(diff.max()), 4),
            "below_base": int(np.sum(diff < 0)),
            "seconds_share_mean": round(float(share.mean()), 3),
        }
    return {"base_views": BASE, "arms": figures}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sets = ["stamps", "digits-small", "fashion-small", "fashion-medium", "digits", "fashion"]
    parser.add_argument("--sets", nargs="+", default=sets, choices=cv_data.SETS)
    parser.add_argument("--views", nargs="+", type=int, default=[1, BASE])
    parser.add_argument("--seed", type=int, default=0, help="the runs' seed and the val split's (default 0)")
    args = parser.parse_args()
    run_entries(
        REPO / "benchmarks" / "views.json", "views", args.sets, args.seed,
        lambda name: run_set(name, args.views, args.seed), summary,
    )  # fmt: skip


if __name__ == "__main__":
    main()
