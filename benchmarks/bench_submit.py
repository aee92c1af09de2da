"""Benchmark the scoring stages on a finished run: evaluate and predict, each in a fresh process.

Times `python -m pipeline evaluate` and `python -m pipeline predict` (TTA 1, then predict with
TTA 4) on a copy of the run without saved predictions, so each one predicts for real; start-up
(TensorFlow import, model build) is included, as a user meets it. Also records the val
macro-F1 evaluate reports.

With `--repeats N` the whole round runs N times, each on a fresh copy of the run (the test pass
was bimodal across processes: 25 or 42 s on the flowers, docs/BENCHMARKS.md, "A pass's end"), and
each figure is the slowest of its runs, with every run's in its settings; `--tta 1` leaves out
the TTA 4 pass.

Usage: python benchmarks/bench_submit.py [--data-dir data] [--run runs/<run-id>] [--repeats 1]
[--tta 1 4] (default run: the newest finished run under runs/). Writes benchmarks/latest.json.
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
    parser.add_argument("--repeats", type=int, default=1, help="rounds, each on a fresh copy (default: 1)")
    parser.add_argument("--tta", type=int, nargs="+", default=[1, 4], help="predict's TTA passes (1 4)")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats}: at least 1")
    args.tta = sorted(set(args.tta))  # a second pass at one TTA would find the first's saved
    source = args.run or newest_run(REPO / "runs")
    runs: dict[str, list[float]] = {}
    for _ in range(args.repeats):
        seconds, val, images = one_round(source, args.data_dir, args.tta)
        for name, value in seconds.items():
            runs.setdefault(name, []).append(value)
        print("  ".join(f"{name} {value:.1f} s" for name, value in seconds.items()), flush=True)
    settings = {"run": source.name, "data_dir": str(args.data_dir), "machine": machine(), "runs": runs}
    settings["val_images"] = images
    figures = [figure(f"{name}_wall_seconds", round(max(v), 1), "s", settings) for name, v in runs.items()]
    figures.append(figure("evaluate_val_macro_f1", round(val, 4), "macro-F1", settings))
    for f in figures:
        print(f"{f['name']}: {f['value']} {f['unit']}")
    record(figures)


def one_round(source: Path, data_dir: Path, ttas: list[int]) -> tuple[dict[str, float], float, int]:
    """Evaluate, then predict at each TTA, on a fresh copy of the run: the wall seconds of each,
    and the val score evaluate reports and its images."""
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "runs" / source.name
        run_dir.mkdir(parents=True)
        for name in KEEP:
            shutil.copy2(source / name, run_dir / name)
        common = ["--data-dir", str(data_dir), "--run", str(run_dir), "--submissions-dir", f"{tmp}/subs"]
        seconds = {"evaluate": stage("evaluate", *common)}
        for tta in ttas:
            name = "predict" if tta == 1 else f"predict_tta{tta}"
            seconds[name] = stage("predict", *common, "--tta", str(tta))
        evaluation = RunDir(run_dir).metrics()["evaluation"]
    return seconds, evaluation["val_macro_f1"], evaluation["images"]


if __name__ == "__main__":
    main()
