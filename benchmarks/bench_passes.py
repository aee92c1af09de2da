"""How many passes over its training images one epoch of the CPU recipe may make, judged on real
images no one here drew, at several sizes, on test parts no run saw.

The CPU recipe trains at least `train.min_steps_per_epoch` (100) steps an epoch, so that its six
epochs train a few hundred images as long as thousands; on 187 real photos that floor made an
epoch 34 passes, and the run memorised them in the first (train loss 0.0002 at epoch 2). Each
arm bounds an epoch at `train.max_passes_per_epoch` passes (0: the floor alone, as shipped
before): each set of `cv_data` is written as a user's own image-CSV competition, its test labels
outside it, and each arm runs the real chain in fresh processes (`train`, a tenth of train held
out as val, its best epoch kept; then `predict`); only then is its submission scored against the
held-back labels (macro-F1, scikit-learn's). Val against test shows what each arm's report is worth.

Usage: python benchmarks/bench_passes.py [--sets stamps digits-small] [--passes 0 1 4] [--seed 1]
Each set and seed is one entry of benchmarks/passes.json (`stamps`, `stamps@seed1`) with its
commit; the summary, over every entry there, is each arm's test score less the floor's.
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

BASE = 0.0  # the floor alone: what the recipe did before the bound


def run_set(name: str, passes: list[float], seed: int) -> dict:
    with opened_set(name, 5, seed) as (_, chain, result):
        for bound in passes:
            arm = chain.single("cpu", [f"train.max_passes_per_epoch={bound}"], f"passes{bound:g}")
            result[f"passes{bound:g}"] = {key: round(value, 4) for key, value in arm.items()}
            print(f"  {name} passes={bound:g}: {result[f'passes{bound:g}']}", flush=True)
    return result


def summary(results: dict) -> dict:
    """Each arm against the floor on the entries that ran both: the test difference (mean, min,
    max), |val - test|, and the share of the floor's seconds."""
    arms = sorted({key for found in results.values() for key in found if key.startswith("passes")})
    base = f"passes{BASE:g}"
    figures = {}
    for arm in arms:
        pairs = [f for f in results.values() if arm in f and base in f]
        if not pairs:
            continue
        diff = np.array([f[arm]["test"] - f[base]["test"] for f in pairs])
        gap = np.array([abs(f[arm]["val"] - f[arm]["test"]) for f in pairs])
        share = np.array([f[arm]["seconds"] / f[base]["seconds"] for f in pairs])
        figures[arm] = {
            "entries": len(pairs),
            "test_minus_floor_mean": round(float(diff.mean()), 4),
            "test_minus_floor_min": round(float(diff.min()), 4),
            "test_minus_floor_max": round(float(diff.max()), 4),
            "val_test_gap_mean": round(float(gap.mean()), 4),
            "seconds_share_mean": round(float(share.mean()), 3),
        }
    return {"base": base, "arms": figures}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sets = ["stamps", "digits-small", "fashion-small", "digits", "fashion-medium"]
    parser.add_argument("--sets", nargs="+", default=sets, choices=cv_data.SETS)
    parser.add_argument("--passes", nargs="+", type=float, default=[BASE, 1.0, 4.0])
    parser.add_argument("--seed", type=int, default=0, help="the runs' seed and the val split's (default 0)")
    args = parser.parse_args()
    run_entries(
        REPO / "benchmarks" / "passes.json", "passes", args.sets, args.seed,
        lambda name: run_set(name, args.passes, args.seed), summary,
    )  # fmt: skip


if __name__ == "__main__":
    main()
