"""The ceiling of the feature cache's pass: EfficientNet-Lite0 below the CPU recipe's cut, forward
only, on in-memory pixels (no input pipeline), on this CPU.

The cache pass of `make train` runs exactly this network over every training image and view, so
its examples/s can be no better than the best setting here. Each setting runs in a fresh process
(TensorFlow reads its thread pools, oneDNN and glibc read their variables, once, at start):
- batch: examples per `predict_on_batch` call (the pass's EXTRACT_BATCH);
- threads: TensorFlow's intra-op pool (0: TensorFlow's own choice, the cores);
- processes: that many processes at once, each with its share of the cores (their rates summed);
- workers: that many Python threads in one process, each calling the network on its own batch;
- env: TensorFlow's allocator and oneDNN settings (ENVS): its defaults; its BFC allocator on the
  CPU (`TF_CPU_ALLOCATOR_USE_BFC`: buffers kept, not unmapped by glibc and faulted in again on
  every call); that and oneDNN told the weights are frozen (reordered once); oneDNN off;
- precision: float32, and mixed bfloat16 where the CPU has avx512_bf16 or AMX (skipped otherwise:
  oneDNN emulates bfloat16 there, slower than float32).
Settings are alternated and repeated: this machine's speed swings within minutes.

With `--pass-data DATA_DIR` (a fetched data dir of the flowers, whose recipe the ceiling runs), the
feature cache's own pass (`feature_pass.rows_of`: the tf.data reading, decoding and view, the calls
in flight, the pieces saved) over the first training shards holding `--pass-examples` images runs
instead, alternated with the ceiling's shipped setting (two calls in flight, batch 128, BFC), and
their ratio is the pass's fraction of it (`make bench-pass`).

Usage: python benchmarks/bench_forward.py [--repeats 2] [--examples 512] [--quick] [--only TEXT]
       [--pass-data DATA_DIR [--pass-examples 2048]].
Writes benchmarks/latest.json (the slowest run of each setting, and the best setting's).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.bench_fetch import machine, record  # noqa: E402
from benchmarks.bench_onednn import cpu_flags  # noqa: E402
from benchmarks.bench_train import figure  # noqa: E402

# One setting in its own process: the recipe's network cut as training cuts it, warmed up, then
# `examples` images through the bottom. Prints examples/s.
FORWARD = """
import json, sys, threading, time
import numpy as np
import tensorflow as tf
import keras
threads, workers = {threads}, {workers}
if threads:
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(max(workers, 1))
keras.mixed_precision.set_global_policy("{precision}")
from competition import load_spec
from pipeline import networks
from pipeline.modeling import network_cut
from pipeline.tasks.recipe_config import load_config
config = load_config("cpu", ["competition=flowers"])
net = networks.build(config, load_spec("flowers"), activation="softmax", weights="none")
bottom = network_cut.cut_for(net, config).bottom
size, batch = config.data.image_size, {batch}
pixels = np.random.default_rng(0).uniform(0, 255, (batch, size, size, 3)).astype("float32")
for _ in range(2):
    bottom.predict_on_batch(pixels)
calls = max(1, {examples} // batch // workers)
def work():
    for _ in range(calls):
        bottom.predict_on_batch(pixels)
pool = [threading.Thread(target=work) for _ in range(workers)]
start = time.perf_counter()
for thread in pool:
    thread.start()
for thread in pool:
    thread.join()
print(json.dumps({{"examples_per_second": workers * calls * batch / (time.perf_counter() - start)}}))
"""


# The feature cache's pass as `make train` runs it, on a fetched data dir's first training images,
# in its own process with petals' own settings (the BFC allocator: `pipeline.core.native_log`).
PASS = """
import json, tempfile, time
from pathlib import Path
import numpy as np
import tensorflow as tf
from competition import load_spec
from pipeline import networks
from pipeline.core import device
from pipeline.data import datasets, records
from pipeline.data.manifest import locate_data
from pipeline.data.readers.shards import ShardPool
from pipeline.modeling import feature_cache, feature_pass, features, network_cut
from pipeline.tasks.recipe_config import load_config
config, spec = load_config("cpu", ["competition=flowers"]), load_spec("flowers")
platform, size = device.pick("tensorflow", "cpu"), config.data.image_size
files = datasets.shard_files(locate_data(Path({data!r})), spec, size, "train")
# The first shards holding `examples` images, whole: a part of them by id would read every shard.
counts = np.cumsum([records.count_images([f]) for f in files])
split = ShardPool(files[: int(np.searchsorted(counts, {examples})) + 1], spec, size).whole()
net = networks.build(config, spec, activation="softmax", weights="none")
cut = network_cut.cut_for(net, config)
views = [lambda images: tf.cast(images, tf.float32)]  # the first view: the images themselves
# Warmed at the pass's batch: another shape would trace again.
cut.bottom.predict_on_batch(np.zeros((feature_pass.EXTRACT_BATCH, size, size, 3), "float32"))
with tempfile.TemporaryDirectory() as folder:
    signature = feature_cache.signature(cut, config, split, "bench")
    start = time.perf_counter()
    rows = feature_pass.rows_of("train", split, views, cut.bottom, config, Path(folder), platform, signature)
    seconds = time.perf_counter() - start
print(json.dumps({{"examples_per_second": rows.features.shape[1] / seconds}}))
"""
SHIPPED = dict(batch=128, threads=0, processes=1, workers=2, env="bfc", precision="float32")

ENVS = {
    "default": {},
    "bfc": {"TF_CPU_ALLOCATOR_USE_BFC": "true"},
    "bfc-frozen": {"TF_CPU_ALLOCATOR_USE_BFC": "true", "TF_ONEDNN_ASSUME_FROZEN_WEIGHTS": "true"},
    "onednn-off": {"TF_ENABLE_ONEDNN_OPTS": "0"},
}


def settings(quick: bool, flags: list[str]) -> list[dict]:
    """The grid: each a dict of batch, threads, processes, env, precision."""
    precisions = ["float32"] + (["mixed_bfloat16"] if {"avx512_bf16", "amx_bf16"} & set(flags) else [])
    cores = os.cpu_count() or 1
    grid = []
    batches = (32, 128) if quick else (16, 32, 64, 128)
    for batch, env, precision in itertools.product(batches, ENVS, precisions):
        grid.append(dict(batch=batch, threads=0, processes=1, workers=1, env=env, precision=precision))
    if cores > 1:  # a process a core, each on one thread; or one process, a call in flight a core
        for env in ("default", "bfc"):
            grid.append(dict(batch=32, threads=1, processes=cores, workers=1, env=env, precision="float32"))
        for batch, threads, precision in itertools.product((32, 64, 128), (0, 1), precisions):
            grid.append(
                dict(batch=batch, threads=threads, processes=1, workers=cores, env="bfc", precision=precision)
            )
    return grid


def name_of(setting: dict) -> str:
    return "forward_b{batch}_t{threads}_p{processes}_w{workers}_{env}_{precision}".format(**setting)


def _env(setting: dict) -> dict:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(REPO)}
    for name in {key for values in ENVS.values() for key in values}:
        env.pop(name, None)  # each setting is its own: not what the shell or a test set
    return {**env, **ENVS[setting["env"]]}


def one_pass(data_dir: Path, examples: int) -> float:
    """Examples/s of the feature cache's own pass over a data dir's first `examples` training images."""
    code = PASS.format(data=str(data_dir.resolve()), examples=examples)
    done = subprocess.run(
        [sys.executable, "-c", code], env=_env(SHIPPED), cwd=REPO, capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    if done.returncode:
        tail = done.stderr.strip()[-300:]
        raise SystemExit(f"bench_forward: the pass exited with {done.returncode}: {tail}")
    return json.loads(done.stdout.strip().splitlines()[-1])["examples_per_second"]


def one_run(setting: dict, examples: int) -> float:
    """Examples/s of one setting: its processes started together, their rates summed."""
    env = _env(setting)
    code = FORWARD.format(
        threads=setting["threads"],
        workers=setting["workers"],
        precision=setting["precision"],
        batch=setting["batch"],
        examples=examples,
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(setting["processes"])
    ]
    rates = []
    for proc in procs:
        out, _ = proc.communicate()
        if proc.returncode:
            raise SystemExit(f"bench_forward: {name_of(setting)} exited with {proc.returncode}")
        rates.append(json.loads(out.strip().splitlines()[-1])["examples_per_second"])
    return sum(rates)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--repeats", type=int, default=2, help="runs of each setting, alternated (default: 2)"
    )
    parser.add_argument("--examples", type=int, default=512, help="timed examples per run (default: 512)")
    parser.add_argument("--quick", action="store_true", help="batches 32 and 128 only")
    parser.add_argument("--only", default="", help="the settings whose name holds this text")
    parser.add_argument("--pass-data", type=Path, help="a fetched flowers data dir: time the cache's pass")
    parser.add_argument("--pass-examples", type=int, default=2048, help="its training images (2048)")
    args = parser.parse_args()
    if args.pass_data:
        return compare_pass(args.pass_data, args.pass_examples, args.examples, args.repeats)
    flags = cpu_flags()
    grid = [s for s in settings(args.quick, flags) if args.only in name_of(s)]
    runs: dict[str, list[float]] = {name_of(s): [] for s in grid}
    started = time.perf_counter()
    for _ in range(args.repeats):
        for setting in grid:
            rate = one_run(setting, args.examples)
            runs[name_of(setting)].append(rate)
            print(f"{name_of(setting)}: {rate:.1f} examples/s", flush=True)
    context = {"machine": machine(), "cpu_flags": flags, "examples": args.examples, "runs": runs}
    best = max(runs, key=lambda name: min(runs[name]))
    record(
        [
            figure(f"{name}_ex_per_s", min(values), "examples/s (slowest run)", context)
            for name, values in runs.items()
        ]
        # The ceiling is the whole grid's best: a run of some settings (--only) leaves it as it was.
        + [figure("forward_ceiling_ex_per_s", min(runs[best]), f"examples/s ({best}, slowest run)", context)]
        * (not args.only)
    )
    print(f"bench_forward: {len(grid)} settings x {args.repeats} in {time.perf_counter() - started:.0f} s")
    for name, values in runs.items():
        print(f"  {name}: {min(values):.1f}-{max(values):.1f} examples/s")
    print(
        f"  ceiling: {best}, {min(runs[best]):.1f} examples/s (slowest of its runs); "
        f"cpu flags: {flags or 'none'}"
    )


def compare_pass(data_dir: Path, pass_examples: int, examples: int, repeats: int) -> None:
    """The cache's pass against the ceiling's shipped setting, alternated: each run's fraction."""
    pairs = []
    for _ in range(repeats):
        ceiling, done = one_run(SHIPPED, examples), one_pass(data_dir, pass_examples)
        pairs.append((ceiling, done))
        print(f"shipped setting {ceiling:.1f}, the pass {done:.1f} examples/s: {done / ceiling:.2f}x")
    context = {"machine": machine(), "examples": examples, "pass_examples": pass_examples, "runs": pairs}
    fractions = [done / ceiling for ceiling, done in pairs]
    slowest = min(done for _, done in pairs)
    record(
        [
            figure("cache_pass_ex_per_s", slowest, "examples/s (slowest run)", context),
            figure("cache_pass_fraction_of_ceiling", min(fractions), "x shipped setting (lowest)", context),
        ]
    )
    print(f"bench_forward: the pass at {min(fractions):.2f}-{max(fractions):.2f}x of the shipped setting")


if __name__ == "__main__":
    main()
