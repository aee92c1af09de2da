"""Keras on JAX, as it runs on a TPU, tested on 8 JAX CPU devices (`--cpu-replicas 8`).

Each test runs the JAX side in a fresh process (pytest's own Keras is TensorFlow's, and a
process's backend cannot change), then checks what it wrote, often from TensorFlow: the
weights and checkpoints a TPU writes under JAX must serve and resume on any machine.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline import cli
from pipeline.core.rundir import RunDir
from pipeline.modeling import policy
from tests.conftest import REPO, TINY, competition_of, foreign_lines, kill_at_first_checkpoint, run_python

JAX_8 = ["--backend", "jax", "--cpu-replicas", "8"]


def start_backend_side(task: str, arguments: dict) -> subprocess.Popen:
    """`tests/backend_side.py` started in a fresh process: one backend's half of a test."""
    env = {k: v for k, v in os.environ.items() if k not in ("KERAS_BACKEND", "ISTPUVM")}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.backend_side", task, json.dumps(arguments)],
        cwd=REPO,
        env={**env, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(side: subprocess.Popen, timeout: float = 300) -> subprocess.CompletedProcess:
    """Wait for a started side; one still running at the timeout is killed, as `subprocess.run` does."""
    try:
        stdout, stderr = side.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        side.kill()
        side.communicate()
        raise
    return subprocess.CompletedProcess(side.args, side.returncode, stdout, stderr)


def run_jax_side(task: str, arguments: dict) -> subprocess.CompletedProcess:
    """`start_backend_side`, waited for: the JAX half of a test."""
    return finish(start_backend_side(task, arguments))


def _train_args(data_dir, runs_dir, name, *overrides):
    args = [
        "train",
        "--data-dir",
        str(data_dir),
        "--runs-dir",
        str(runs_dir),
        "--run",
        name,
        "--recipe",
        "default",
    ]
    for override in [*TINY, *overrides]:
        args += ["--set", override]
    return args


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.alone
def test_jax_trains_in_bfloat16_over_8_devices_and_its_weights_serve_on_tensorflow(
    tiny_data_dir, tmp_path, caplog
):
    """Keras fit on JAX: weights replicated on 8 devices, batches split over them, bfloat16 compute;
    then TensorFlow predicts with those weights at any batch size and resumes the JAX checkpoint."""
    overrides = [*TINY, "data.batch_size=8", "train.epochs=2", "train.frozen_epochs=1", "train.ema=0.9",
                 "train.logit_adjustment=1.0", "train.precision=mixed_bfloat16"]  # fmt: skip
    arguments = {"data_dir": str(tiny_data_dir), "out": str(tmp_path), "run": "jax", "overrides": overrides}
    done = run_jax_side("train_and_inspect", arguments)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    run = RunDir(tmp_path / "jax")
    info = run.read_json(RunDir.RUN_INFO)
    assert (info["backend"], info["devices"], info["replicas"]) == ("jax", 8, 8)
    assert (
        info["precision"] == "mixed_bfloat16"
        and info["global_batch"] == 64
        and info["augment_where"] == "host"
    )
    assert seen["devices"] == [8] and seen["replicated"]  # every weight on all 8 devices
    assert seen["batch_spec"] == "P('batch', None, None, None)" and seen["batch_shards"] == [[8, 32, 32, 3]]
    assert seen["conv_dtypes"] == [["bfloat16", "float32"]] and seen["output_dtype"] == "float32"
    assert seen["resumed_at"] == 2 and np.isfinite(seen["metrics"]["val_macro_f1"])
    assert seen["average_vs_last_weights"] < 1e-6

    # TensorFlow (this process) serves the JAX-trained weights at any batch size, identically.
    from pipeline.modeling.inference import load_inference_model

    net = load_inference_model(run.path, competition_of(run.path))
    pixels, expected = np.load(tmp_path / "pixels.npy"), np.load(tmp_path / "jax_probabilities.npy")
    for batch in (1, 7, 64):
        got = np.concatenate([np.asarray(net(pixels[i : i + batch])) for i in range(0, 64, batch)])
        assert np.abs(got - expected).max() <= 1e-5, batch

    # ... and resumes JAX's checkpoint: a third epoch on TensorFlow after two on JAX.
    run.metrics_file.unlink()  # as if the JAX run had been stopped after its second epoch
    overrides = ["data.batch_size=8", "train.epochs=3", "train.frozen_epochs=1", "train.ema=0.9",
                 "train.logit_adjustment=1.0"]  # fmt: skip
    caplog.set_level(logging.INFO)
    resume = _train_args(tiny_data_dir, tmp_path, "jax", *overrides)
    assert cli.main([*resume, "--backend", "tensorflow"]) == 0
    assert "resuming" in caplog.text and "after epoch 2" in caplog.text
    assert pd.read_csv(run.history_file)["epoch"].tolist() == [1, 2, 3]
    assert run.read_json(RunDir.RUN_INFO)["backend"] == "tensorflow"


@pytest.mark.slow
@pytest.mark.heavy  # 8 JAX devices
@pytest.mark.alone
def test_a_killed_jax_run_resumes_from_its_last_epoch(tiny_data_dir, tmp_path):
    """The custom loop (a jitted stateless step) on 8 devices, killed after its first checkpoint."""
    args = _train_args(
        tiny_data_dir, tmp_path, "killed", "train.epochs=4", "train.steps_per_epoch=6",
        "train.lr_ramp_epochs=2", "train.loop=custom", "train.ema=0.9", "train.val_every=3",
    )  # fmt: skip
    command = [sys.executable, "-m", "pipeline", *args, *JAX_8]
    env = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    env["PYTHONPATH"] = str(REPO)
    kill_at_first_checkpoint(command, env, tmp_path / "killed")

    second = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resuming" in second.stderr
    assert foreign_lines(second.stdout + second.stderr) == []  # no JAX start-up line ("libtpu.so", ...)
    history = pd.read_csv(tmp_path / "killed" / "history.csv")
    assert history["epoch"].tolist() == [1, 2, 3, 4]  # every epoch once, none redone twice
    assert history["val_macro_f1"].notna().tolist() == [True, False, True, True]  # 1st, every 3rd, last
    from pipeline.tasks.recipe_config import load_config

    config = load_config(overrides=[*TINY, "train.epochs=4", "train.lr_ramp_epochs=2"])
    expected = [policy.learning_rate(e, config.train, 8) for e in range(4)]  # the peak x 8 replicas
    assert history["lr"].tolist() == pytest.approx(expected)
    info = RunDir(tmp_path / "killed").read_json(RunDir.RUN_INFO)
    assert (info["backend"], info["replicas"], info["global_batch"]) == ("jax", 8, 64)
    assert any(Path(os.environ["JAX_COMPILATION_CACHE_DIR"]).iterdir())  # what the next process reuses


@pytest.mark.slow
@pytest.mark.heavy  # 8 JAX devices
@pytest.mark.alone
@pytest.mark.parametrize("loop", ["fit", "custom"])
def test_an_epoch_on_8_jax_devices_takes_its_steps_and_reports_their_mean_loss(loop, tiny_data_dir, tmp_path):
    """An epoch of 3 steps with 4 steps a call asked for, as a TPU's 32 a call met a kernel's
    4-step epochs: Keras's `fit` ran whole calls, 4 steps an epoch, and the epoch line read their
    mean loss and accuracy x 4/3 (flowers' 36.8, 8x ln 104, in `make kernel-emulate`). The calls
    now take 3 steps; the optimizer counts 3 per epoch, the line a mean loss near ln(104) for the
    untrained network and an accuracy in [0, 1]."""
    args = _train_args(tiny_data_dir, tmp_path, loop, "train.epochs=2", "train.steps_per_epoch=3",
                       f"train.loop={loop}", "train.steps_per_execution=4", "data.batch_size=4",
                       "train.lr_max=0.0001")  # fmt: skip
    done = run_python(f"from pipeline.cli import leave, main; leave(main(['--quiet', *{[*args, *JAX_8]!r}]))")
    assert done.returncode == 0, done.stderr[-3000:]
    run = RunDir(tmp_path / loop)
    info = run.read_json(RunDir.RUN_INFO)
    assert (info["replicas"], info["global_batch"], info["steps_per_execution"]) == (8, 32, 3)
    with np.load(tmp_path / loop / "checkpoints" / "ckpt-2.npz") as saved:
        assert int(saved["optimizer:0"]) == 2 * 3  # the optimizer's iterations: 3 steps an epoch
    history = pd.read_csv(run.history_file)
    assert history["images"].tolist() == [3 * 32] * 2
    assert history["loss"].between(0.9 * np.log(104), 1.1 * np.log(104)).all(), history["loss"]
    assert history["accuracy"].between(0, 1).all(), history["accuracy"]


@pytest.mark.slow
@pytest.mark.heavy  # 8 JAX devices
@pytest.mark.alone
def test_a_step_on_8_jax_devices_is_the_step_on_one():
    """The same batch of 32 on one device and split over 8 by `keras.distribution.DataParallel` (what
    pick_jax sets): the same loss, accuracy and weights after a step. The gradient is the global
    batch's mean, not the devices' sum, and BatchNorm normalises the whole batch."""
    done = run_python(
        """
        import json
        import jax, keras, numpy as np

        rng = np.random.default_rng(0)
        x, y = rng.normal(size=(32, 8, 8, 3)).astype("float32"), rng.integers(0, 5, 32)
        seen = []
        for distribution in (None, keras.distribution.DataParallel(devices=jax.devices("cpu"))):
            keras.distribution.set_distribution(distribution)
            keras.utils.set_random_seed(0)
            layers = keras.layers
            model = keras.Sequential([keras.Input((8, 8, 3)), layers.Conv2D(4, 3),
                                      layers.BatchNormalization(), layers.GlobalAveragePooling2D(),
                                      layers.Dense(5, activation="softmax")])
            model.compile(keras.optimizers.SGD(0.5), "sparse_categorical_crossentropy", metrics=["accuracy"])
            logs = model.fit(x, y, batch_size=32, epochs=1, shuffle=False, verbose=0).history
            devices = len(model.weights[0].value.sharding.device_set)  # 8: replicated by the distribution
            weights = [w.tolist() for w in model.get_weights()]
            seen.append({"logs": logs, "weights": weights, "devices": devices})
        print(json.dumps(seen))
        """,
        env={"KERAS_BACKEND": "jax", "XLA_FLAGS": "--xla_force_host_platform_device_count=8"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    one, eight = json.loads(done.stdout.strip().splitlines()[-1])
    assert (one["devices"], eight["devices"]) == (1, 8)
    assert eight["logs"]["loss"] == pytest.approx(one["logs"]["loss"], rel=1e-5)
    assert 0 <= eight["logs"]["accuracy"][0] <= 1 and eight["logs"]["accuracy"] == one["logs"]["accuracy"]
    for trained, reference in zip(eight["weights"], one["weights"], strict=True):
        np.testing.assert_allclose(trained, reference, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.heavy  # two training processes side by side
@pytest.mark.alone
def test_the_same_recipe_computes_the_same_on_both_backends(small_data_dir, tmp_path):
    """The CPU recipe (weight average, logit adjustment, label smoothing, frozen BatchNorm, the LR
    schedule) at 32 px, from the same initial weights over the same batches in the same order
    (flips off: tf.data's random draws are seeded differently in each process), on each backend,
    each in a fresh process (what earlier tests leave in pytest's own process stays out).

    The first epoch (25 steps) is the same computation to float rounding; after it, rounding
    differences grow as Adam's training does, faster where TensorFlow's oneDNN kernels round
    differently (a 50-step epoch's loss came out 0.3% apart on a CPU with avx512_bf16), so the
    runs are then compared as two runs of one recipe: their val macro-F1 within 0.03, each run's
    taken as the mean of its last three epochs. The curve is still rising steeply at this budget
    (about 0.03 an epoch), so one epoch's score moves with where the epoch happens to end: single
    epochs of two such runs were up to 0.028 apart (14-epoch runs), their three-epoch means
    within 0.02.
    """
    overrides = ["data.image_size=32", "train.epochs=10", "train.steps_per_epoch=25", "train.ema=0.9",
                 "train.val_every=1", "data.shuffle_buffer=1", "augment.flip=false"]  # fmt: skip
    arguments = {
        "data_dir": str(small_data_dir),
        "out": str(tmp_path),
        "init": str(tmp_path / "init.npz"),  # written by the first side, read by the second
        "overrides": overrides,
    }
    # TensorFlow writes the initial weights; JAX starts as soon as they are there, and both train
    # side by side (each process spends about 7 s importing and building before it trains).
    first = start_backend_side("same_computation", {**arguments, "backend": "tensorflow"})
    deadline = time.monotonic() + 120
    while not Path(arguments["init"]).is_file() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    second = start_backend_side("same_computation", {**arguments, "backend": "jax"})
    histories = []
    for side in (first, second):
        done = finish(side)
        assert done.returncode == 0, done.stderr[-3000:]
        histories.append(json.loads(done.stdout.strip().splitlines()[-1])["history"])
    tensorflow, jax = histories
    assert jax["loss"][0] == pytest.approx(tensorflow["loss"][0], rel=1e-3)
    assert jax["val_loss"][0] == pytest.approx(tensorflow["val_loss"][0], rel=1e-3)  # the weight average
    scores = [float(np.mean(history["val_macro_f1"][-3:])) for history in (tensorflow, jax)]
    assert min(scores) > 0.05, scores  # chance is 0.01
    assert abs(scores[0] - scores[1]) <= 0.03, (tensorflow["val_macro_f1"], jax["val_macro_f1"])
