"""One process of 8 JAX CPU devices against 2 processes of 4 (`make train HOSTS=2 CPU_REPLICAS=4`):
images/s and the loss of every epoch, side by side. `--engine tensorflow`: one process of 2 CPU
replicas against 2 TF_CONFIG workers of one (`make train HOSTS=2 BACKEND=tensorflow`).

Each layout trains the same config (the `cnn` on the embedded flowers drawn at 64 px, a quarter of
them: `make fetch DATA=data-hosts SIZE=64 SCALE=0.25`) in fresh processes, `--repeats` times,
alternating, so the machine's load falls on both alike. Repeat r uses seed r for both layouts.
Each process of 2 x 4 reads its own half of the shards, so the two layouts see other batches:
what a layout changes is measured against what another seed (another order of the same data)
changes. TensorFlow's op determinism (TF_DETERMINISTIC_OPS=1, TensorFlow's own switch) fixes the
input order of one seed. Writes `benchmarks/hosts.json` and `benchmarks/hosts.png` (the loss
curves; `hosts-tensorflow.*` for TensorFlow) and prints a table.

    python benchmarks/bench_hosts.py --data-dir data-hosts [--repeats 3] [--epochs 6] [--engine tensorflow]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# Per engine, one process of all the devices against two of half as many: under TensorFlow a
# TF_CONFIG worker has one CPU replica (MultiWorkerMirroredStrategy), and trains with the custom
# loop (Keras 3's fit fails under that strategy).
ENGINES = {
    "jax": {"1x8": (1, 8), "2x4": (2, 4)},
    "tensorflow": {"1x2": (1, 2), "2x1": (2, 1)},
}


def train(
    layout: str, data_dir: Path, runs: Path, epochs: int, steps: int, size: int, seed: int, engine: str
) -> dict:
    hosts, devices = ENGINES[engine][layout]
    overrides = [
        "competition=flowers", "model.backbone=cnn", f"data.image_size={size}", "data.batch_size=8",
        f"train.epochs={epochs}", f"train.steps_per_epoch={steps}", "train.min_steps_per_epoch=1",
        "train.lr_max=0.001", "train.lr_ramp_epochs=1",  # learns steadily: 4.64 -> 3.4-3.9 (1x8, seeds 0-2)
        "train.val_every=1000",  # scored once, after the last epoch: the figure is training's
        f"seed={seed}",
    ]  # fmt: skip
    settings = [a for o in overrides for a in ("--set", o)]
    if engine == "tensorflow":
        settings += ["--set", "train.loop=custom"]
    if devices > 1:
        settings += ["--cpu-replicas", str(devices)]
    stage = ["train", "--data-dir", str(data_dir), "--runs-dir", str(runs), "--backend", engine,
             "--recipe", "default", *settings]  # fmt: skip
    if hosts == 1:
        command = [sys.executable, "-m", "pipeline", *stage]
    else:
        logs = Path(tempfile.mkdtemp(prefix="bench-hosts-"))
        command = [
            sys.executable,
            "-m",
            "pipeline.launch",
            "--hosts",
            str(hosts),
            "--log-dir",
            str(logs),
            "--backend",
            engine,
            "--",
            *stage,
        ]
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_DETERMINISTIC_OPS": "1"}
    started = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"{layout}: exit {done.returncode}\n{done.stderr[-2000:]}")
    [history] = runs.glob("*/history.csv")
    with history.open() as f:
        rows = list(csv.DictReader(f))
    shutil.rmtree(runs)
    return {
        "layout": layout,
        "wall_seconds": round(wall, 1),
        "loss": [float(r["loss"]) for r in rows],
        "images_per_second": [float(r["images_per_second"]) for r in rows],
    }


def kill_latency(data_dir: Path, size: int, engine: str) -> dict:
    """Seconds from SIGKILL of process 1 (a second into training) to the launcher's exit, its line."""
    import signal

    logs, runs = (
        Path(tempfile.mkdtemp(prefix="bench-hosts-kill-")),
        Path(tempfile.mkdtemp(prefix="bench-runs-")),
    )
    overrides = ["competition=flowers", "model.backbone=cnn", f"data.image_size={size}", "data.batch_size=8",
                 "train.epochs=50", "train.steps_per_epoch=4", "train.min_steps_per_epoch=1"]  # fmt: skip
    command = [sys.executable, "-m", "pipeline.launch", "--hosts", "2", "--log-dir", str(logs),
               "--backend", engine, "--", "train", "--data-dir", str(data_dir), "--runs-dir", str(runs),
               "--backend", engine, "--recipe", "default"]  # fmt: skip
    if engine == "jax":
        command += ["--cpu-replicas", "2"]
    else:
        overrides.append("train.loop=custom")
    command += [a for o in overrides for a in ("--set", o)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    job = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    while not list(runs.glob("*/history.csv")) and job.poll() is None:
        time.sleep(0.05)
    time.sleep(1.0)
    killed = time.perf_counter()
    os.kill(int((logs / "host-1.pid").read_text()), signal.SIGKILL)
    _, err = job.communicate(timeout=120)
    seconds = time.perf_counter() - killed
    shutil.rmtree(runs, ignore_errors=True)
    return {"seconds": round(seconds, 2), "exit": job.returncode, "line": err.strip().splitlines()[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=Path("data-hosts"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--steps", type=int, default=20, help="steps per epoch (global batch 8 x devices)")
    parser.add_argument("--size", type=int, default=64, help="the data dir's image size")
    parser.add_argument("--engine", choices=tuple(ENGINES), default="jax")
    parser.add_argument(
        "--only", choices=("all", "kill", "train"), default="all", help="the launcher's stop or training only"
    )
    args = parser.parse_args()
    suffix = "" if args.engine == "jax" else f"-{args.engine}"
    if args.only != "train":
        kills = []
        for _ in range(args.repeats):
            kills.append(kill_latency(args.data_dir, args.size, args.engine))
            print(f"kill: the launcher ended {kills[-1]['seconds']} s after it, exit {kills[-1]['exit']}: "
                  f"{kills[-1]['line']}", flush=True)  # fmt: skip
        (REPO / f"benchmarks/hosts-kill{suffix}.json").write_text(json.dumps(kills, indent=1))
    if args.only == "kill":
        return
    runs = Path(tempfile.mkdtemp(prefix="bench-hosts-runs-"))
    results = []
    one, two = ENGINES[args.engine]
    for repeat in range(args.repeats):
        for layout in (one, two):
            result = train(layout, args.data_dir, runs / f"{layout}-{repeat}", args.epochs, args.steps,
                           args.size, repeat, args.engine)  # fmt: skip
            results.append({**result, "repeat": repeat})
            print(f"{layout} #{repeat}: loss {result['loss']}, img/s {result['images_per_second']}, "
                  f"{result['wall_seconds']} s", flush=True)  # fmt: skip
    (REPO / f"benchmarks/hosts{suffix}.json").write_text(json.dumps(results, indent=1))
    _plot(results, REPO / f"benchmarks/hosts{suffix}.png", one, args.engine)
    by = {(r["layout"], r["repeat"]): np.asarray(r["loss"]) for r in results}
    layouts = [by[two, r] - by[one, r] for r in range(args.repeats)]
    seeds = [by[one, r] - by[one, 0] for r in range(1, args.repeats)]
    print(f"{two} - {one}, the same seed: at most {max(np.abs(d).max() for d in layouts):.4f} an epoch, "
          f"last epoch {max(abs(d[-1]) for d in layouts):.4f}; another seed of {one}: up to "
          f"{max((np.abs(d).max() for d in seeds), default=0):.4f}, last epoch "
          f"{max((abs(d[-1]) for d in seeds), default=0):.4f}")  # fmt: skip
    for layout in (one, two):
        mine = [r for r in results if r["layout"] == layout]
        speeds = [sum(r["images_per_second"][1:]) / max(1, len(r["images_per_second"]) - 1) for r in mine]
        last = [r["loss"][-1] for r in mine]
        print(f"{layout}: img/s after the first epoch {min(speeds):.0f}-{max(speeds):.0f}, "
              f"last loss {min(last):.4f}-{max(last):.4f}")  # fmt: skip


def _plot(results: list[dict], path: Path, one: str, engine: str) -> None:
    from pipeline.core.files import pyplot, save_figure

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for r in results:
        style = "-" if r["layout"] == one else "--"
        ax.plot(range(1, len(r["loss"]) + 1), r["loss"], style, label=f"{r['layout']} seed {r['repeat']}")
    ax.set_xlabel("epoch")
    ax.set_ylabel("training loss")
    ax.set_title(f"{engine}: one process of all the devices (solid) against two (dashed)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=80)


if __name__ == "__main__":
    main()
