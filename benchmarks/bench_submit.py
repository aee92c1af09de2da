"""Benchmark the scoring stages on a finished run: evaluate and predict, each in a fresh process.

Times `python -m pipeline evaluate` and `python -m pipeline predict` (TTA 1, then predict with
TTA 4) on a copy of the run without saved predictions, so each one predicts for real; start-up
(TensorFlow import, model build) is included, as a user meets it. Also records the val
macro-F1 evaluate reports.

Usage: python benchmarks/bench_submit.py [--data-dir data] [--run runs/<run-id>]
(default run: the newest finished run under runs/). Writes benchmarks/latest.json.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.bench_fetch import machine, record  # noqa: E402
from benchmarks.bench_train import figure  # noqa: E402
from pipeline.core.rundir import RunDir  # noqa: E402

# What evaluate and predict read of a run.
KEEP = (RunDir.CONFIG, RunDir.DATA_MANIFEST, RunDir.RUN_INFO, RunDir.METRICS, RunDir.BEST)


def newest_run(runs_dir: Path) -> Path:
    runs = [RunDir(p) for p in runs_dir.iterdir() if RunDir(p).finished and RunDir(p).exists]
    if not runs:
        sys.exit(f"bench_submit: no finished run under {runs_dir}; train one first (make train)")
    return max(runs, key=lambda run: run.metrics_file.stat().st_mtime).path


def stage(name: str, *args: str) -> float:
    command = [sys.executable, "-m", "pipeline", "--quiet", name, *args]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"bench_submit: {' '.join(command)} failed:\n{done.stderr[-3000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path, default=REPO / "data")
    parser.add_argument("--run", type=Path, default=None)
    args = parser.parse_args()
    source = args.run or newest_run(REPO / "runs")
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "runs" / source.name
        run_dir.mkdir(parents=True)
        for name in KEEP:
            shutil.copy2(source / name, run_dir / name)
        common = ["--data-dir", str(args.data_dir), "--run", str(run_dir), "--submissions-dir", f"{tmp}/subs"]
        evaluate = stage("evaluate", *common)
        predict = stage("predict", *common)
        predict_tta = stage("predict", *common, "--tta", "4")
        evaluation = RunDir(run_dir).metrics()["evaluation"]
    settings = {"run": source.name, "data_dir": str(args.data_dir), "machine": machine()}
    settings["val_images"] = evaluation["images"]
    figures = [
        figure("evaluate_wall_seconds", round(evaluate, 1), "s", settings),
        figure("predict_wall_seconds", round(predict, 1), "s", settings),
        figure("predict_tta4_wall_seconds", round(predict_tta, 1), "s", settings),
        figure("evaluate_val_macro_f1", round(evaluation["val_macro_f1"], 4), "macro-F1", settings),
    ]
    for f in figures:
        print(f"{f['name']}: {f['value']} {f['unit']}")
    record(figures)


if __name__ == "__main__":
    main()
