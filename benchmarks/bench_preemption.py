"""Work lost to a SIGTERM mid-epoch: seconds of training the rerun does again, before and after.

Trains a recipe in a fresh process, sends SIGTERM at a random moment of a random epoch after the
first, waits for the process to end, then reruns the same command to the end. Per sample:
- `redone`: training seconds the rerun repeats: from the newest checkpoint the rerun resumes from
  (its file's time) to the signal;
- `exit`: seconds from the signal to the process's end.
`--code` runs another checkout (e.g. a `git worktree` of the commit before preemption handling,
where SIGTERM ends Python at once and the rerun resumes from the last epoch's checkpoint).

    python benchmarks/bench_preemption.py --data-dir data --samples 5
    python benchmarks/bench_preemption.py --data-dir data --samples 5 --code /tmp/petals-before
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parent.parent
RECIPE = [
    "--recipe",
    "cnn",
    "--set",
    "data.input_size=64",
    "--set",
    "train.epochs=4",
    "--set",
    "train.steps_per_epoch=60",
    "--set",
    "train.val_every=10",
]


def one_sample(code: Path, data_dir: Path, runs: Path, rng: np.random.Generator) -> dict:
    command = [
        sys.executable,
        "-m",
        "pipeline",
        "train",
        "--data-dir",
        str(data_dir),
        "--runs-dir",
        str(runs),
        "--run",
        "bench",
        *RECIPE,
    ]
    env = {**os.environ, "PYTHONPATH": str(code)}
    checkpoints = runs / "bench" / "checkpoints"
    proc = subprocess.Popen(
        command, cwd=code, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    # Wait for the first epoch's checkpoint, then signal somewhere in a later epoch.
    while not (checkpoints / "ckpt-1.npz").is_file() and proc.poll() is None:
        time.sleep(0.02)
    if proc.poll() is not None:
        raise SystemExit(f"train ended before its first checkpoint: {proc.communicate()[1][-2000:]}")
    epoch_seconds = float(pd.read_csv(runs / "bench" / "history.csv")["seconds"].iloc[0])
    time.sleep(rng.uniform(0.1, 1.9) * epoch_seconds)
    signalled = time.time()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate()
    ended = time.time()
    newest = max(checkpoints.glob("ckpt-*.npz"), key=lambda p: p.stat().st_mtime)
    redone = max(0.0, signalled - newest.stat().st_mtime)
    rerun = subprocess.run(command, cwd=code, env=env, capture_output=True, text=True)
    if rerun.returncode:
        raise SystemExit(f"the rerun failed: {rerun.stderr[-2000:]}")
    return {
        "code": proc.returncode,
        "redone": redone,
        "exit": ended - signalled,
        "epoch_seconds": epoch_seconds,
        "resumed_from": newest.name,
        "line": [line for line in err.splitlines() if line.startswith("petals ")],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path, default=REPO / "data")
    parser.add_argument("--code", type=Path, default=REPO, help="the checkout to run")
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    samples = []
    for _ in range(args.samples):
        with tempfile.TemporaryDirectory(prefix="petals-preempt-") as runs:
            sample = one_sample(args.code.resolve(), args.data_dir.resolve(), Path(runs), rng)
        samples.append(sample)
        print(json.dumps(sample), flush=True)
    redone = [s["redone"] for s in samples]
    exits = [s["exit"] for s in samples]
    print(
        json.dumps(
            {
                "code": str(args.code),
                "samples": len(samples),
                "redone_seconds": {
                    "median": statistics.median(redone),
                    "min": min(redone),
                    "max": max(redone),
                },
                "exit_seconds": {"median": statistics.median(exits), "min": min(exits), "max": max(exits)},
                "epoch_seconds": statistics.median(s["epoch_seconds"] for s in samples),
                "exit_codes": sorted({s["code"] for s in samples}),
            }
        )
    )


if __name__ == "__main__":
    main()
