"""Cross-validation on real images no one here drew, the test parts untouched until the end.

Each set of `cv_data` (digit scans, Fashion-MNIST, Tux Paint's photo stamps, subsampled to 30
images a class and whole) is written as a user's own image-CSV competition; its test labels stay
outside it. Each recipe then runs the real chain in fresh processes, as a user's `make` would:
a single split (`train`, `predict`: petals holds a tenth of train out as val), and 5-fold CV
(`cv train`, `cv predict` for the fold mean, `cv predict --refit`). The CV groups of the recipes
are blended three ways (`ensemble --method equal|search|stack`), a student group trains on the
best group's pseudo-labels, and a linear probe (frozen EfficientNet-Lite0 + logistic
regression, C by CV on the train part) is the baseline. Only then are the submissions scored
against the held-back labels. It reports:
  (a) how well CV and single-split val predict the test score (mean absolute error),
  (b) the fold mean and the refit against one model,
  (c) stacking against weight search against equal weights (each judged out of fold),
  (d) pseudo-labels on and off,
  (e) the recipes against the linear probe, and which recipe CV picks against val's pick.

Usage: python benchmarks/bench_cv.py [--sets digits-small stamps fashion-small] [--folds 5] [--seed 1]
`--seed S` trains every run from seed S and deals the folds from it (`seed=S train.fold_seed=S`):
the same set and recipe drawn again. Each set and seed is one entry of benchmarks/cv.json (`stamps`,
`stamps@seed1`), with the commit it was measured at; a run replaces its own entries and keeps the
others, and the summary in cv.json and benchmarks/latest.json is over every entry there.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks import cv_data  # noqa: E402
from benchmarks.bench_fetch import machine, record  # noqa: E402
from benchmarks.bench_images_real import stage  # noqa: E402  (a stage in a fresh process, exits on failure)
from pipeline.core.files import write_json  # noqa: E402  (atomic)

# The recipes compared: the CPU recipe (the last block and a head fine-tuned on cached
# activations) and the same with every epoch frozen (a head on pooled features: petals' own
# linear-probe-like recipe, far fewer weights to fit on a few hundred images).
RECIPES = {
    "cpu": [],
    "head": ["train.frozen_epochs=6"],
}


def newest_csv(folder: Path) -> Path:
    made = [p for p in folder.glob("*.csv") if not p.name.startswith("leaderboard")]  # submissions only
    return max(made, key=lambda p: p.stat().st_mtime_ns)


def test_score(submission: Path, truth: dict) -> float:
    """Macro-F1 of a submission against the held-back labels (scikit-learn's)."""
    import pandas as pd
    from sklearn.metrics import f1_score

    frame = pd.read_csv(submission, dtype=str)
    predicted = dict(zip(frame.iloc[:, 0], frame.iloc[:, 1].astype(int), strict=True))  # id, label
    ids = sorted(truth)
    return float(f1_score([truth[i] for i in ids], [predicted[i] for i in ids], average="macro"))


def one_json(folder: Path, pattern: str) -> dict:
    (path,) = folder.glob(pattern)
    return json.loads(path.read_text())


class Chain:
    """One set's competition, fetched, and the commands every recipe shares."""

    def __init__(self, spec: Path, download: Path, work: Path, truth: dict, folds: int, seed: int):
        self.spec, self.work, self.truth, self.folds = spec, work, truth, folds
        self.seeded = [f"seed={seed}", f"train.fold_seed={seed}"] if seed else []
        self.data = work / "data"
        stage("fetch", "--source", "dir", "--from", str(download), "--data-dir", str(self.data),
              "--competition", str(spec))  # fmt: skip

    def common(self, recipe: str, runs: Path, subs: Path, extra: list[str] = ()) -> list[str]:
        args = ["--data-dir", str(self.data), "--runs-dir", str(runs), "--submissions-dir", str(subs)]
        args += ["--recipe", "cpu", "--set", f"competition={self.spec}", "--backend", "tensorflow"]
        for override in [*RECIPES[recipe], *self.seeded, *extra]:
            args += ["--set", override]
        return args

    def single(self, recipe: str, extra: list[str] = (), name: str | None = None) -> dict:
        name = name or recipe
        runs, subs = self.work / f"single-{name}", self.work / f"single-{name}-subs"
        args = self.common(recipe, runs, subs, list(extra))
        seconds = stage("train", *args[:4], *args[6:], "--run", "one")
        seconds += stage("predict", *args, "--run", "one")
        metrics = json.loads((runs / "one" / "metrics.json").read_text())
        return {
            "val": metrics["val_macro_f1"],
            "test": test_score(newest_csv(subs), self.truth),
            "seconds": seconds,
        }

    def cv(self, recipe: str, extra: list[str] = (), name: str | None = None, refit: bool = True) -> dict:
        name = name or recipe
        runs, subs = self.work / f"cv-{name}", self.work / f"cv-{name}-subs"
        args = ["--folds", str(self.folds), *self.common(recipe, runs, subs, list(extra))]
        seconds = stage("cv", "train", *args)
        seconds += stage("cv", "predict", *args)
        group = max(runs.glob("cv*/metrics.json"), key=lambda p: p.stat().st_mtime_ns).parent  # this one's
        metrics = json.loads((group / "metrics.json").read_text())
        mean = test_score(subs / f"{group.name}.csv", self.truth)
        found = {
            "group": str(group),
            "cv": metrics["cv_score"],
            "fold_std": metrics["fold_std"],
            "cv_epoch": metrics["cv_epoch"],
            "test_fold_mean": mean,
            "seconds": seconds,
        }
        if refit:
            found["refit_seconds"] = stage("cv", "predict", "--refit", *args)
            found["test_refit"] = test_score(newest_csv(subs), self.truth)
        return found

    def blends(self, groups: list[str]) -> dict:
        """The recipes' CV groups blended each way: the blend's OOF score and its test score."""
        found = {}
        for method in ("equal", "search", "stack"):
            runs, subs = self.work / f"blend-{method}", self.work / f"blend-{method}-subs"
            stage("ensemble", "--runs", *groups, "--method", method, "--data-dir", str(self.data),
                  "--runs-dir", str(runs), "--submissions-dir", str(subs))  # fmt: skip
            metrics = one_json(runs, "ensemble-*/metrics.json")
            found[method] = {"oof": metrics["cv_score"], "test": test_score(newest_csv(subs), self.truth)}
        return found


def probe(data: cv_data.LabelledSet) -> float:
    from sklearn.metrics import f1_score

    probabilities = cv_data.linear_probe(data.dev[0], data.dev[1], data.test[0])
    return float(f1_score(data.test[1], probabilities.argmax(axis=1), average="macro"))


def entry(name: str, seed: int) -> str:
    return name if seed == 0 else f"{name}@seed{seed}"


def commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                             capture_output=True, text=True).stdout.splitlines()  # fmt: skip
    code = [line for line in changed if not line[3:].startswith("benchmarks/") or not line.endswith(".json")]
    return done.stdout.strip() + ("+changes" if code else "")  # its own results files are not code


@contextlib.contextmanager
def opened_set(name: str, folds: int, seed: int):
    """Set `name` as a user's competition in a temporary folder, fetched: (its data, its Chain, the
    entry's result so far: sizes, seed and commit). The folder goes when the block ends."""
    data = cv_data.load(name)
    result: dict = {"classes": len(data.classes), "dev": len(data.dev[1]), "test": len(data.test[1]),
                    "seed": seed, "commit": commit()}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        spec, download, truth = cv_data.write_competition(data, Path(tmp) / "set")
        yield data, Chain(spec, download, Path(tmp) / "work", truth, folds, seed), result


def run_set(name: str, folds: int, pseudo: bool, seed: int = 0) -> dict:
    with opened_set(name, folds, seed) as (data, chain, result):
        for recipe in RECIPES:
            result[f"single-{recipe}"] = chain.single(recipe)
            result[f"cv-{recipe}"] = chain.cv(recipe)
            print(
                f"  {name} {recipe}: {json.dumps(result[f'cv-{recipe}'] | result[f'single-{recipe}'])}",
                flush=True,
            )
        groups = [result[f"cv-{recipe}"]["group"] for recipe in RECIPES]
        result["blends"] = chain.blends(groups)
        if pseudo:
            best = max(RECIPES, key=lambda r: result[f"cv-{r}"]["cv"])
            teacher = Path(result[f"cv-{best}"]["group"]).name
            student = chain.cv(
                best, [f"train.pseudo_labels={teacher}"], best, refit=False
            )  # the teacher's runs dir
            result["pseudo"] = {"teacher": best, **student}
    result["probe_test"] = probe(data)
    return result


def summary(results: dict) -> dict:
    """The five comparisons over every set."""
    val_errors, cv_errors = [], []
    for found in results.values():
        for recipe in RECIPES:
            single, cv = found[f"single-{recipe}"], found[f"cv-{recipe}"]
            val_errors.append(abs(single["val"] - single["test"]))
            cv_errors.append(abs(cv["cv"] - cv["test_fold_mean"]))
    picks = {}
    for name, found in results.items():
        by_cv = max(RECIPES, key=lambda r: found[f"cv-{r}"]["cv"])
        by_val = max(RECIPES, key=lambda r: found[f"single-{r}"]["val"])
        picks[name] = {"cv_picks": by_cv, "val_picks": by_val,
                       "test_of_cv_pick": found[f"cv-{by_cv}"]["test_fold_mean"],
                       "test_of_val_pick": found[f"single-{by_val}"]["test"]}  # fmt: skip
    return {
        "mae_val_vs_test": float(np.mean(val_errors)),
        "mae_cv_vs_test": float(np.mean(cv_errors)),
        "pairs": len(val_errors),
        "picks": picks,
    }


def run_entries(path: Path, name: str, sets: list[str], seed: int, run_one, summarise) -> None:
    """Each set's entry (`set`, `set@seedN`) measured by `run_one` and written to `path` as it
    finishes (other entries kept), then `summarise` over every entry there, also in latest.json."""
    results = json.loads(path.read_text())["sets"] if path.is_file() else {}
    for one in sets:
        started = time.perf_counter()
        key = entry(one, seed)
        results[key] = run_one(one)
        results[key]["seconds"] = round(time.perf_counter() - started, 1)
        print(f"{key}: {json.dumps(results[key])}", flush=True)
        write_json(path, {"machine": machine(), "sets": results})
    figures = summarise(results)
    print(json.dumps(figures, indent=1))
    write_json(path, {"machine": machine(), "sets": results, "summary": figures})
    record([{"name": name, **figures}])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sets", nargs="+", default=["digits-small", "stamps", "fashion-small"], choices=cv_data.SETS
    )
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--no-pseudo", action="store_true")
    parser.add_argument("--seed", type=int, default=0, help="the runs' seed and the folds' (default 0)")
    args = parser.parse_args()
    run_entries(
        REPO / "benchmarks" / "cv.json", "cv", args.sets, args.seed,
        lambda name: run_set(name, args.folds, not args.no_pseudo, args.seed), summary,
    )  # fmt: skip


if __name__ == "__main__":
    main()
