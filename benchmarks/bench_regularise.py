"""Whether the CPU recipe's regularisation should scale with the data size, judged on real images no
one here drew, at several sizes, on test parts no run saw.

The CPU image recipe trains the same head dropout (0.2), no label smoothing and no weight decay on
118 images as on 13,319. Each arm changes one of them (or all three) over the recipe as shipped:
dropout 0.5, label smoothing 0.1, and decoupled weight decay 1.0 (Keras's form: each step a kernel
shrinks by weight_decay x lr; at the recipe's lr 1e-3 decaying by 0.55 an epoch over 6 epochs of
100 steps, the learning rates sum to 0.22, so a weight its gradients do not hold shrinks to
exp(-0.22) = 0.80 of itself. AdamW's usual 0.01-0.05 is for schedules of ~100k steps: here it
would shrink such a weight by 0.2-1%, nothing a test part of a few hundred images could see).
Each set of `cv_data` is written as a user's own image-CSV competition, its test labels outside
it, and each arm runs the real chain in fresh processes (`train`, a tenth of train held out as
val, its best epoch kept; then `predict`); only then is its submission scored against the
held-back labels (macro-F1, scikit-learn's).

Usage: python benchmarks/bench_regularise.py [--sets stamps digits-small] [--arms base smoothing] [--seed 1]
Each set and seed is one entry of benchmarks/regularise.json (`stamps`, `stamps@seed1`) with its
commit; the summary, over every entry there, is each arm's test score less the base's, per entry
and over them, beside the noise of a test part that size.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks import cv_data  # noqa: E402
from benchmarks.bench_cv import opened_set, run_entries  # noqa: E402

WEIGHT_DECAY = 1.0  # see the docstring: the smallest round value that shrinks anything here
ARMS = {
    "base": [],  # the recipe as shipped
    "dropout": ["model.dropout=0.5"],
    "smoothing": ["train.label_smoothing=0.1"],
    "decay": [f"train.weight_decay={WEIGHT_DECAY:g}"],
    "all": ["model.dropout=0.5", "train.label_smoothing=0.1", f"train.weight_decay={WEIGHT_DECAY:g}"],
}


def run_set(name: str, arms: list[str], seed: int) -> dict:
    with opened_set(name, 5, seed) as (_, chain, result):
        for arm in arms:
            found = chain.single("cpu", ARMS[arm], arm)
            result[arm] = {key: round(value, 4) for key, value in found.items()}
            print(f"  {name} {arm}: {result[arm]}", flush=True)
    return result


def noise(score: float, count: int) -> float:
    """One standard deviation of the difference of two runs' scores on a test part of `count`
    images, were each an accuracy near `score` (macro-F1 is near it on these balanced sets)."""
    return math.sqrt(2 * score * (1 - score) / count)


def by_entry(found: dict, difference: float) -> dict:
    noisy = noise(found["base"]["test"], found["test"])
    return {"dev": found["dev"], "test_minus_base": round(difference, 4), "noise_sd": round(noisy, 4)}


def summary(results: dict) -> dict:
    """Each arm against the base on the entries that ran both: per entry (by its train size) the
    test difference beside one noise deviation, and over entries the mean, min and max difference,
    |val - test| and the share of the base's seconds."""
    figures = {}
    for arm in [a for a in ARMS if a != "base"]:
        pairs = {k: f for k, f in results.items() if arm in f and "base" in f}
        if not pairs:
            continue
        diff = {k: f[arm]["test"] - f["base"]["test"] for k, f in pairs.items()}
        spread = np.array(list(diff.values()))
        gap = [abs(f[arm]["val"] - f[arm]["test"]) for f in pairs.values()]
        share = [f[arm]["seconds"] / f["base"]["seconds"] for f in pairs.values()]
        figures[arm] = {
            "entries": len(pairs),
            "by_entry": {k: by_entry(f, diff[k]) for k, f in pairs.items()},
            "test_minus_base_mean": round(float(spread.mean()), 4),
            "test_minus_base_min": round(float(spread.min()), 4),
            "test_minus_base_max": round(float(spread.max()), 4),
            "val_test_gap_mean": round(float(np.mean(gap)), 4),
            "seconds_share_mean": round(float(np.mean(share)), 3),
        }
    return {"base": "base", "arms": figures}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sets = ["stamps", "digits-small", "fashion-small", "digits", "fashion-medium"]
    parser.add_argument("--sets", nargs="+", default=sets, choices=cv_data.SETS)
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    parser.add_argument("--seed", type=int, default=0, help="the runs' seed and the val split's (default 0)")
    args = parser.parse_args()
    run_entries(
        REPO / "benchmarks" / "regularise.json", "regularise", args.sets, args.seed,
        lambda name: run_set(name, args.arms, args.seed), summary,
    )  # fmt: skip


if __name__ == "__main__":
    main()
