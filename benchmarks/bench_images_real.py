"""The CPU image recipes on real images no one here drew, against a scikit-learn baseline.

Each dataset of `real_images` (scikit-learn's digit scans, Fashion-MNIST, faces from LFW) is
written as a user's own TFRecord competition (192 px JPEGs, a file and a class list), fetched
with `--source dir` as a user would, then each recipe runs the real chain in fresh processes:
train (which picks its best epoch on val), predict the unlabelled test split, and the
submission is scored here against the held-out test labels (macro-F1, scikit-learn's). The test
labels never reach the pipeline, and no recipe was tuned on them. Beside: an SVC on the raw
pixels of the same split (train + val), the 20-line baseline a recipe should beat.

Usage: python benchmarks/bench_images_real.py [--datasets digits fashion faces]
       [--recipes competition/flowers/recipes/cpu.toml competition/flowers/recipes/cnn.toml]
       [--backend tensorflow]
Writes the figures into benchmarks/latest.json (merged with other benchmarks' figures).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks import real_images  # noqa: E402
from benchmarks.bench_fetch import machine, record  # noqa: E402
from benchmarks.bench_train import figure  # noqa: E402

RECIPES = ["competition/flowers/recipes/cpu.toml", "competition/flowers/recipes/cnn.toml"]


def stage(*args: str) -> float:
    """`python -m pipeline <args>` in a fresh process; its wall seconds (exits on failure)."""
    command = [sys.executable, "-m", "pipeline", "--quiet", *args]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"bench_images_real: {' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - started


def baseline(data: real_images.RealImages) -> tuple[float, float]:
    """An SVC (RBF, scaled pixels) on train + val, scored on test: (macro-F1, seconds)."""
    from sklearn.metrics import f1_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC

    def flat(split):
        images, labels = data.splits[split]
        return images.reshape(len(images), -1).astype(np.float32), labels

    started = time.perf_counter()
    (tx, ty), (vx, vy), (sx, sy) = flat("train"), flat("val"), flat("test")
    model = make_pipeline(StandardScaler(), SVC()).fit(np.concatenate([tx, vx]), np.concatenate([ty, vy]))
    return float(f1_score(sy, model.predict(sx), average="macro")), time.perf_counter() - started


def run_recipe(
    spec: Path,
    data_dir: Path,
    work: Path,
    recipe: str,
    backend: str,
    truth: dict,
    tuning: bool,
    sets: list[str],
) -> dict:
    """Train, predict and score one recipe; its figures. `tuning`: val only, the test split untouched."""
    import pandas as pd
    from sklearn.metrics import f1_score

    from pipeline.core.rundir import RunDir

    runs, submissions = work / "runs", work / "submissions"
    common = ["--data-dir", str(data_dir), "--runs-dir", str(runs), "--recipe", recipe]
    common += ["--set", f"competition={spec}", "--backend", backend, "--run", "bench"]
    for override in sets:
        common += ["--set", override]
    train_wall = stage("train", *common)
    metrics = RunDir(runs / "bench").metrics()
    result = {
        "val_macro_f1": round(metrics["val_macro_f1"], 4),
        "train_seconds": round(metrics["train_seconds"], 1),
        "train_command_seconds": round(train_wall, 1),
        "backbone": metrics["backbone"],
    }
    if tuning:
        return result
    predict_wall = stage("predict", *common, "--submissions-dir", str(submissions))
    submission = pd.read_csv(submissions / "bench.csv")
    predicted = submission.set_index("id")["label"]
    ids = sorted(truth)
    test_f1 = float(f1_score([truth[i] for i in ids], predicted.loc[ids].to_numpy(), average="macro"))
    return {**result, "test_macro_f1": round(test_f1, 4), "predict_command_seconds": round(predict_wall, 1)}


def describe(result: dict) -> str:
    test = f"test macro-F1 {result['test_macro_f1']:.4f}  " if "test_macro_f1" in result else ""
    predict = f", predict {result['predict_command_seconds']:.0f} s" if "test_macro_f1" in result else ""
    return (
        f"{result['backbone']:<20} {test}val {result['val_macro_f1']:.4f}"
        f"  training {result['train_seconds']:.0f} s"
        f" (train command {result['train_command_seconds']:.0f} s{predict})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--datasets", nargs="+", default=list(real_images.DATASETS), choices=real_images.DATASETS
    )
    parser.add_argument("--recipes", nargs="+", default=RECIPES, help="recipe files (a user's copies)")
    parser.add_argument("--backend", default="tensorflow", choices=["tensorflow", "jax"])
    parser.add_argument("--size", type=int, default=192, help="the records' size (the recipes read 192)")
    parser.add_argument("--tune", action="store_true", help="val scores only: train, never predict test")
    parser.add_argument(
        "--set", dest="sets", action="append", default=[], help="a config override for every recipe"
    )
    args = parser.parse_args()
    figures = []
    for name in args.datasets:
        data = real_images.DATASETS[name]()
        counts = {split: len(labels) for split, (_, labels) in data.splits.items()}
        svc_f1, svc_seconds = baseline(data)
        print(
            f"{name}: {counts}; SVC on raw pixels: test macro-F1 {svc_f1:.4f} ({svc_seconds:.1f} s)",
            flush=True,
        )
        results = {"svc": {"test_macro_f1": round(svc_f1, 4), "seconds": round(svc_seconds, 1)}}
        with tempfile.TemporaryDirectory() as tmp:
            spec, folder, truth = real_images.write_competition(data, Path(tmp), args.size)
            data_dir = Path(tmp) / "data"
            fetch_wall = stage(
                "fetch", "--source", "dir", "--from", str(folder), "--data-dir", str(data_dir),
                "--competition", str(spec), "--size", str(args.size),
            )  # fmt: skip
            for recipe in args.recipes:
                work = Path(tmp) / Path(recipe).stem
                result = run_recipe(spec, data_dir, work, recipe, args.backend, truth, args.tune, args.sets)
                results[Path(recipe).stem] = result
                print(f"  {Path(recipe).stem:<10} {describe(result)}", flush=True)
        if args.tune:
            continue  # tuning figures are not the benchmark's
        figures.append(
            figure(
                f"real_images_{name}",
                max(r["test_macro_f1"] for k, r in results.items() if k != "svc"),
                "test macro-F1 (best recipe)",
                {
                    "counts": counts,
                    "fetch_seconds": round(fetch_wall, 1),
                    "backend": args.backend,
                    "results": results,
                    "machine": machine(),
                },
            )
        )
    record(figures)


if __name__ == "__main__":
    main()
