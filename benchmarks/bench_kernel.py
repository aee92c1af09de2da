"""Benchmark the kernel stage: generate + check time, script size, and the kernel run locally on CPU.

Generates the kernel for --recipe (default cpu) into a temporary folder, then runs the
generated script outside the repo (no PYTHONPATH) on the data dir with `--strategy cpu` and
`--set train.epochs=N`, and reads its per-stage timings and val macro-F1 from
petals_summary.json. Nothing is pushed.

Usage: python benchmarks/bench_kernel.py [--data-dir data] [--recipe cpu] [--epochs 3]
Writes benchmarks/latest.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.bench_fetch import machine, record  # noqa: E402
from benchmarks.bench_train import figure  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path, default=REPO / "data")
    parser.add_argument("--recipe", default="cpu")
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", "pipeline", "--quiet", "kernel", "generate", "--owner", "bench"]
        command += ["--recipe", args.recipe, "--kernels-dir", tmp, "--accelerator", "None"]
        started = time.perf_counter()
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
        generate = time.perf_counter() - started
        if done.returncode != 0:
            sys.exit(f"bench_kernel: {' '.join(command)} failed:\n{done.stderr[-3000:]}")
        script = Path(tmp) / f"petals-flowers-{args.recipe}" / "petals_kernel.py"
        working = Path(tmp) / "working"
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        run = [
            sys.executable,
            str(script),
            "--working",
            str(working),
            "--data-dir",
            str(args.data_dir.resolve()),
        ]
        run += ["--strategy", "cpu", "--set", f"train.epochs={args.epochs}"]
        started = time.perf_counter()
        done = subprocess.run(run, cwd=tmp, env=env, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - started
        if done.returncode != 0:
            sys.exit(f"bench_kernel: the kernel failed:\n{done.stderr[-3000:]}")
        summary = json.loads((working / "petals_summary.json").read_text())
        size = script.stat().st_size
    settings = {
        "recipe": args.recipe,
        "epochs": args.epochs,
        "data_dir": str(args.data_dir),
        "machine": machine(),
    }
    timings = summary["timings_seconds"]
    figures = [
        figure("kernel_generate_and_check_seconds", round(generate, 1), "s", settings),
        figure("kernel_script_bytes", size, "bytes", settings),
        figure("kernel_local_cpu_wall_seconds", round(wall, 1), "s", settings),
        figure("kernel_local_cpu_stage_seconds", timings, "s", settings),
        figure(
            "kernel_local_cpu_val_macro_f1",
            round(summary["metrics"]["evaluation"]["val_macro_f1"], 4),
            "",
            settings,
        ),
    ]
    for f in figures:
        print(f"{f['name']}: {f['value']} {f['unit']}")
    record(figures)


if __name__ == "__main__":
    main()
