"""Past one machine: the processes of one training (pipeline/core/hosts.py) and the local launcher
(pipeline/launch.py), on loopback: two processes of four JAX CPU devices each as one mesh."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.core import hosts
from pipeline.core.errors import PetalsError
from tests.conftest import REPO, TINY

CLUSTER = {"chief": ["a:1"], "worker": ["b:1", "c:1"]}
KERAS = {hosts.ADDRESSES: "10.0.0.1:8476,10.0.0.2:8476", hosts.INDEX: "1"}


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, hosts.Hosts()),
        (KERAS, hosts.Hosts(2, 1, "10.0.0.1:8476", f"{hosts.ADDRESSES} and {hosts.INDEX}")),
        (
            {hosts.ADDRESSES: "127.0.0.1:1234", hosts.COUNT: "4", hosts.INDEX: "3"},
            hosts.Hosts(4, 3, "127.0.0.1:1234", f"{hosts.ADDRESSES} and {hosts.INDEX}"),
        ),
        (
            {"TPU_WORKER_HOSTNAMES": "t1k-0,t1k-1,t1k-2,t1k-3", "TPU_WORKER_ID": "2"},
            hosts.Hosts(4, 2, None, "the TPU slice's TPU_WORKER_HOSTNAMES"),
        ),
        ({"TPU_WORKER_HOSTNAMES": "t1k-0", "TPU_WORKER_ID": "0"}, hosts.Hosts()),  # one host: v5e-8
        ({hosts.SLICE: "slice"}, hosts.Hosts(0, 0, None, f"{hosts.SLICE}=slice")),  # JAX counts them
        (
            {"TF_CONFIG": json.dumps({"cluster": CLUSTER, "task": {"type": "worker", "index": 1}})},
            hosts.Hosts(3, 2, None, "TF_CONFIG"),
        ),
    ],
)
def test_which_process_this_is_comes_from_keras_a_tpu_slice_or_tf_config(env, expected):
    assert hosts.from_environment(env) == expected
    assert expected.writer == (expected.index == 0)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({hosts.ADDRESSES: "a:1,b:1", hosts.INDEX: "one"}, f"{hosts.INDEX}='one': expected a whole number"),
        (
            {hosts.ADDRESSES: "a:1,b:1", hosts.INDEX: "2"},
            "process 2 of 2 .*: the index must be below the count",
        ),
        ({"TF_CONFIG": '{"cluster": {"worker": ["a:1"]}, "task": {"index": 5}}'}, "TF_CONFIG: not a cluster"),
        ({hosts.SLICE: "4"}, f"{hosts.SLICE}='4': the only value is slice"),
    ],
)
def test_bad_settings_are_one_line_naming_the_variable(env, message):
    with pytest.raises(PetalsError, match=message) as err:
        hosts.from_environment(env)
    assert "\n" not in str(err.value)


def test_keras_variables_under_tensorflow_are_refused_not_trained_alone(monkeypatch):
    """Each process would train alone and all of them would write: refused in one line."""
    from pipeline.core import device

    for name, value in KERAS.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(PetalsError, match="several processes under TensorFlow need a TF_CONFIG cluster"):
        device.pick.__wrapped__("tensorflow", "cpu")  # not the answer this process cached


# Per engine: the launcher's and the stage's arguments, and what process 0's device line says.
ENGINES = {
    # Two JAX CPU devices a process: the same code as four, half the threads beside other tests.
    "jax": ([], ["--backend", "jax", "--cpu-replicas", "2"], "4 CPUs, 4 replicas"),
    # A TF_CONFIG worker has one CPU replica; Keras' fit fails under the strategy (custom loop).
    "tensorflow": (
        ["--backend", "tensorflow"],
        ["--backend", "tensorflow", "--set", "train.loop=custom"],
        "2 CPUs, 2 replicas",
    ),
}


def _launch(tiny_data_dir, runs, logs, engine: str, *extra: str) -> subprocess.Popen:
    """`make train HOSTS=2` on the tiny data: 6 epochs of 4 steps."""
    launcher, stage, _ = ENGINES[engine]
    overrides = [*TINY, "train.epochs=6", "train.steps_per_epoch=4", "train.min_steps_per_epoch=1"]
    command = [
        sys.executable, "-m", "pipeline.launch", "--hosts", "2", "--log-dir", str(logs), *launcher, "--",
        "train", "--data-dir", str(tiny_data_dir), "--runs-dir", str(runs), *stage,
        "--recipe", "default", *[a for o in overrides for a in ("--set", o)], *extra,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("KERAS_BACKEND", None)
    return subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _epochs_written(runs) -> int:
    histories = list(runs.glob("*/history.csv"))
    if not histories:
        return 0
    with histories[0].open() as f:
        return len(list(csv.DictReader(f)))


def _kill_process_1(tiny_data_dir, runs, logs, engine: str) -> int:
    """Start a 2-process run, kill process 1 after two epochs: the launcher ends the job within
    60 s with one line naming it, exit 137. The epochs written before."""
    job = _launch(tiny_data_dir, runs, logs, engine)
    deadline = time.monotonic() + 240
    while _epochs_written(runs) < 2 and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert job.poll() is None, job.communicate()  # still training: 6 epochs
    killed = time.monotonic()
    os.kill(int((logs / "host-1.pid").read_text()), signal.SIGKILL)
    _, err = job.communicate(timeout=60)
    assert time.monotonic() - killed < 60
    assert job.returncode == 137, err
    log = logs / "host-1.log"
    assert err.strip().splitlines()[-1] == (
        f"petals launch: process 1 of 2 was killed by SIGKILL; stopped the other; its output: {log}"
    )
    assert "process 0 of 2" in err and ENGINES[engine][2] in err  # one mesh of both hosts' devices
    return _epochs_written(runs)


@pytest.mark.slow  # it trains: make test, not test-fast
@pytest.mark.parametrize("engine", ["jax", "tensorflow"])
@pytest.mark.heavy  # runs alone in `make test-heavy`: a whole chain or several processes
@pytest.mark.alone
def test_two_processes_train_as_one_a_killed_one_ends_the_job_in_one_line_and_the_rerun_resumes(
    tiny_data_dir, tmp_path, engine
):
    runs, logs = tmp_path / "runs", tmp_path / "logs"
    done_before = _kill_process_1(tiny_data_dir, runs, logs, engine)

    rerun = _launch(tiny_data_dir, runs, logs, engine)
    out, err = rerun.communicate(timeout=240)
    assert rerun.returncode == 0, err
    [run] = [p for p in runs.iterdir() if p.is_dir()]  # process 0 alone wrote here, the same run
    # Both processes resume from the checkpoint process 0 wrote last (its history may hold one
    # epoch more: the kill can land between the history row and the checkpoint).
    [here] = re.findall(rf"train: resuming {re.escape(str(run))} after epoch (\d+) ", out + err)
    [there] = re.findall(r"train: resuming \S+ after epoch (\d+) ", (logs / "host-1.log").read_text())
    assert here == there and int(here) in (done_before, done_before - 1) and int(here) >= 1
    with (run / "history.csv").open() as f:
        assert [int(row["epoch"]) for row in csv.DictReader(f)] == list(range(1, 7))
    assert (run / "metrics.json").is_file() and (run / "best.weights.h5").is_file()


@pytest.mark.slow
@pytest.mark.heavy  # two JAX runs of two processes
@pytest.mark.alone
@pytest.mark.parametrize("notice", ["SIGTERM", "time limit"])
def test_a_preemption_notice_stops_every_process_at_one_step_and_the_rerun_resumes_it(
    tiny_data_dir, tmp_path, notice
):
    """A SIGTERM to the launcher reaches every process, or one process's time limit becomes a
    notice to all (JAX's preemption notifier); they stop at the step JAX names, process 0 saves
    it, and the launcher says so in one line, exit 75. The rerun resumes both from that step."""
    runs, logs = tmp_path / "runs", tmp_path / "logs"
    # A time limit lands where the clock says, and may land on an epoch's first step (a heavy-tier
    # run here: "epoch 4, step 0"). A SIGTERM is sent 1 s into the second epoch and must land mid-
    # epoch: JAX's agreement on the step took over a second under load (CI: "epoch 3, step 0" with
    # epochs of 40 steps, 2 s), so its epochs are 100 steps, about 5 s here.
    if notice == "SIGTERM":
        epochs, steps, extra = 3, 100, []
    else:
        epochs, steps, extra = 6, 40, ["--time-limit", "12"]
    settings = ["--set", f"train.epochs={epochs}", "--set", f"train.steps_per_epoch={steps}"]
    job = _launch(tiny_data_dir, runs, logs, "jax", *extra, *settings)
    if notice == "SIGTERM":
        deadline = time.monotonic() + 240
        while _epochs_written(runs) < 1 and job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)  # into the second epoch
        job.send_signal(signal.SIGTERM)
    _, err = job.communicate(timeout=120)
    assert job.returncode == 75, err
    assert err.strip().splitlines()[-1] == (
        "petals launch: all 2 processes stopped at the step they agreed on and saved it; "
        "rerun the same command to resume"
    )
    stopped = re.compile(rf"petals train: stopped by .* at epoch (\d+), step (\d+) of {steps}")
    [here] = stopped.findall(err)
    [there] = stopped.findall((logs / "host-1.log").read_text())
    assert here == there, (here, there)  # the same step in both processes
    assert notice != "SIGTERM" or int(here[1]) > 0, here  # mid-epoch

    rerun = _launch(tiny_data_dir, runs, logs, "jax", *settings)
    out, err = rerun.communicate(timeout=240)
    assert rerun.returncode == 0, err
    epoch, step = int(here[0]) - 1, here[1]
    if int(step) > 0:  # mid-epoch: both processes say where they resumed
        for text in (out + err, (logs / "host-1.log").read_text()):
            assert f"after epoch {epoch} and step {step} of the next" in text
    [run] = [p for p in runs.iterdir() if p.is_dir()]
    with (run / "history.csv").open() as f:
        assert [int(row["epoch"]) for row in csv.DictReader(f)] == list(range(1, epochs + 1))


@pytest.mark.slow
@pytest.mark.heavy  # EfficientNet-Lite0 in two JAX processes
@pytest.mark.alone
def test_the_cpu_recipe_trains_in_two_processes_each_batch_of_its_feature_pass_predicted_once(
    tiny_data_dir, tmp_path
):
    """`make train HOSTS=2` with the shipped CPU recipe (pretrained Lite0, the feature cache): the
    cache's pass and val both go through the processes' shared predicting."""
    command = [
        sys.executable, "-m", "pipeline.launch", "--hosts", "2", "--log-dir", str(tmp_path / "logs"), "--",
        "train", "--data-dir", str(tiny_data_dir), "--runs-dir", str(tmp_path / "runs"), "--backend", "jax",
        "--cpu-replicas", "2", "--recipe", "cpu", "--set", "data.image_size=32", "--set", "data.batch_size=8",
        "--set", "train.epochs=2",
        "--set", "train.steps_per_epoch=2", "--set", "train.min_steps_per_epoch=1",
        "--set", "train.choose_up_to=0",  # the recipe itself, not small data's CV choice
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("KERAS_BACKEND", None)
    done = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "cached train features" in done.stderr
    rows = {
        name: re.findall(r"train:\s+2/2 .*", text)
        for name, text in {"0": done.stderr, "1": (tmp_path / "logs" / "host-1.log").read_text()}.items()
    }
    assert rows["0"] and rows["0"][0].split()[:7] == rows["1"][0].split()[:7]  # the same val scores


@pytest.mark.slow
@pytest.mark.heavy  # two JAX processes, and JAX's 10 s heartbeat
@pytest.mark.alone
def test_on_a_slice_a_host_whose_peer_died_ends_in_one_line_within_the_heartbeat(tiny_data_dir, tmp_path):
    """`make train HOSTS=slice` on each host of a real slice: no launcher sees the other hosts, so
    each host's own one-process launcher supervises its process. When another host dies, JAX's
    coordination service aborts this one within its heartbeat, and the line says what that means."""
    from pipeline.launch import free_ports

    [port] = free_ports(1)
    overrides = [*TINY, "train.epochs=50", "train.steps_per_epoch=4", "train.min_steps_per_epoch=1"]
    jobs, logs = [], [tmp_path / f"host{i}" for i in range(2)]
    for i in range(2):  # two hosts, each with its own launcher, as `make train HOSTS=slice` starts them
        env = {**os.environ, "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu",
               hosts.ADDRESSES: f"127.0.0.1:{port}", hosts.COUNT: "2", hosts.INDEX: str(i)}  # fmt: skip
        env.pop("KERAS_BACKEND", None)
        command = [
            sys.executable, "-m", "pipeline.launch", "--hosts", "1", "--log-dir", str(logs[i]), "--",
            "train", "--data-dir", str(tiny_data_dir), "--runs-dir", str(tmp_path / f"runs{i}"),
            "--backend", "jax", "--recipe", "default", *[a for o in overrides for a in ("--set", o)],
        ]  # fmt: skip
        jobs.append(subprocess.Popen(command, cwd=REPO, env=env, stderr=subprocess.PIPE, text=True))
    deadline = time.monotonic() + 240
    while _epochs_written(tmp_path / "runs0") < 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    killed = time.monotonic()
    os.kill(int((logs[1] / "host-0.pid").read_text()), signal.SIGKILL)  # host 1's process dies
    _, err = jobs[0].communicate(timeout=120)
    jobs[1].communicate(timeout=60)
    assert time.monotonic() - killed < 60
    assert (
        err.strip()
        .splitlines()[-1]
        .startswith(
            "petals launch: this host's process was killed by SIGABRT; JAX aborts every process once one "
            f"has died or not answered for {hosts.HEARTBEAT_SECONDS} s"
        )
    ), err[-2000:]
    assert jobs[0].returncode == 134


def test_the_launch_names_the_process_that_said_why_and_repeats_its_error():
    from pipeline.launch import first_failure, last_error

    output = b"step 3\npetals train: error: first\nmore\npetals train: error: --cpu-replicas 4: no\n"
    assert last_error(output) == "petals train: error: --cpu-replicas 4: no"
    assert last_error(b"Traceback ...\nKeyError: 'x'\n") is None
    # Process 0 said why, process 1 was aborted by JAX on its account in the same poll.
    assert first_failure([2, -signal.SIGABRT], ["petals train: error: bad", None]) == 0
    # A TF_CONFIG worker killed from outside, before the survivor that failed on losing it.
    gone = "petals train: error: another worker went away mid-step; its own output says why"
    assert first_failure([2, -signal.SIGKILL], [gone, None]) == 1
    assert first_failure([1, -signal.SIGKILL], [None, None]) == 1
    # One said why, the other only that it went on without it.
    assert first_failure([2, 2], [gone, "petals train: error: disk full"]) == 1
    assert first_failure([None, 0], [None, None]) is None
    assert first_failure([2, 2], ["a", "b"]) == 0


@pytest.mark.slow  # two processes start TensorFlow
@pytest.mark.thorough  # 8 CPU-s, a multi-host launch's: make test keeps first_failure's choice (above)
def test_a_stages_one_line_error_in_a_process_is_the_launchs_last_line(tmp_path):
    """Under TF_CONFIG `--cpu-replicas` is refused in every process: the launch's last line names
    the process and repeats what it said, so the cause is on screen, not in a log."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("KERAS_BACKEND", None)
    done = subprocess.run(
        [sys.executable, "-m", "pipeline.launch", "--hosts", "2", "--backend", "tensorflow",
         "--log-dir", str(tmp_path / "logs"), "--", "train", "--data-dir", str(tmp_path / "none"),
         "--backend", "tensorflow", "--cpu-replicas", "4"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=200, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert re.fullmatch(
        r"petals launch: process [01] of 2 exited with 2; stopped the other(; its output: \S+)?; "
        r"it said: petals train: error: --cpu-replicas 4: TF_CONFIG's workers train with one CPU .*",
        last,
    ), last


@pytest.mark.slow
@pytest.mark.heavy  # runs alone in `make test-heavy`: a whole chain or several processes
@pytest.mark.alone
def test_a_killed_tensorflow_worker_ends_the_job_in_one_line(tiny_data_dir, tmp_path):
    """TF_CONFIG workers: the survivor fails within 0.1 s of losing its peer, in the same poll of
    the launcher; the launcher still names the killed one. (The rerun: the heavy tier, above.)"""
    _kill_process_1(tiny_data_dir, tmp_path / "runs", tmp_path / "logs", "tensorflow")


# One process of all the devices against two of half as many each: 1 x 8 against 2 x 4 JAX CPU
# devices; under TensorFlow a TF_CONFIG worker has one CPU replica, so 1 x 2 against 2 x 1.
LAYOUTS = {"jax": {"one": (1, 8), "two": (2, 4)}, "tensorflow": {"one": (1, 2), "two": (2, 1)}}


def _run_layout(engine: str, layout: str, stage: list[str], tmp_path) -> subprocess.CompletedProcess:
    hosts_, devices = LAYOUTS[engine][layout]
    stage = [*stage, "--backend", engine, *(["--set", "train.loop=custom"] if engine == "tensorflow" else [])]
    if devices > 1:
        stage += ["--cpu-replicas", str(devices)]
    logs = str(tmp_path / "logs")
    launch = ["-m", "pipeline.launch", "--hosts", "2", "--backend", engine, "--log-dir", logs, "--"]
    command = [sys.executable, *(launch if hosts_ > 1 else ["-m", "pipeline"]), *stage]
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_DETERMINISTIC_OPS": "1"}
    env.pop("KERAS_BACKEND", None)
    return subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def _train(tiny_data_dir, tmp_path, engine: str, layout: str) -> tuple[list[float], Path]:
    """Train the tiny recipe at `layout`; its losses and its run dir."""
    # TINY's learning rate without its warm-up diverges at first, and chance-level losses would
    # compare nothing: one epoch of warm-up, then a rate at which the cnn learns a little.
    tiny = [o for o in TINY if not o.startswith(("train.lr_", "train.epochs", "train.steps"))]
    overrides = [*tiny, "train.epochs=6", "train.steps_per_epoch=4", "train.min_steps_per_epoch=1",
                 "train.lr_max=0.003", "train.lr_ramp_epochs=1"]  # fmt: skip
    runs = tmp_path / layout
    stage = ["train", "--data-dir", str(tiny_data_dir), "--runs-dir", str(runs), "--recipe", "default",
             *[a for o in overrides for a in ("--set", o)]]  # fmt: skip
    done = _run_layout(engine, layout, stage, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    [history] = runs.glob("*/history.csv")
    with history.open() as f:
        return [float(row["loss"]) for row in csv.DictReader(f)], history.parent


@pytest.mark.slow
@pytest.mark.heavy  # four runs of two processes or one: the figure is `make bench-hosts`'s
@pytest.mark.alone
@pytest.mark.parametrize("engine", LAYOUTS)
def test_two_processes_learn_as_one_of_all_the_devices_and_score_each_example_once(
    tiny_data_dir, tmp_path, engine
):
    """Each process reads its own half of the shards, so its batches are not one process's (and
    the cnn's dropout falls on other examples): the losses agree as another data order's do. On this
    data, under JAX, a second seed of 1 x 8 ends 0.12 from the first; 2 x 4 ended 0.026 from it, and
    the epochs' largest gap was 0.16, at the second epoch's jump (`make bench-hosts` has the figures
    on more data). Then the two-process run's val, predicted by both processes (each batch by one),
    is what one process predicts, every example once and in order."""
    import numpy as np

    one, _ = _train(tiny_data_dir, tmp_path, engine, "one")
    two, run = _train(tiny_data_dir, tmp_path, engine, "two")
    gaps = [abs(a - b) for a, b in zip(one, two, strict=True)]
    assert len(gaps) == 6 and max(gaps) < 0.3 and gaps[-1] < 0.1, (one, two)
    predictions = {}
    for layout in ("one", "two"):
        copy = tmp_path / f"evaluate-{layout}"
        shutil.copytree(run.parent, copy)
        stage = ["evaluate", "--data-dir", str(tiny_data_dir), "--runs-dir", str(copy), "--run", run.name,
                 "--submissions-dir", str(copy / "submissions")]  # fmt: skip
        done = _run_layout(engine, layout, stage, tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]
        predictions[layout] = np.load(copy / run.name / "val_predictions.npz")
    a, b = predictions["one"], predictions["two"]
    assert a["ids"].tolist() == b["ids"].tolist() and len(set(a["ids"].tolist())) == len(a["ids"])
    np.testing.assert_allclose(a["probabilities"], b["probabilities"], atol=1e-5)


def test_processes_that_resumed_from_different_epochs_stop_in_one_line():
    """One host that cannot read process 0's checkpoints would start over and run other steps;
    the processes compare their epochs (the engine's all-gather) and stop, naming each one's."""
    two = hosts.Hosts(2, 0, "127.0.0.1:1", "test")
    with pytest.raises(
        PetalsError, match=r"disagree on the epoch \(process 0: 2, process 1: 0\); every host"
    ) as err:
        hosts.agree(two, "the epoch", 2, "every host must read the same checkpoints", lambda _: [[2], [0]])
    assert "\n" not in str(err.value)
    hosts.agree(two, "the epoch", 2, "unused", lambda _: [[2], [2]])  # the same: nothing to say


def test_each_process_reads_its_own_share_and_the_global_batch_is_the_hosts_batches():
    """Process i of n reads every n-th shard (or row) at the global batch / n; JAX joins the
    hosts' batches into the global one. Alone, a process reads everything at the global batch."""
    from pipeline.data import datasets

    assert hosts.input_share(hosts.Hosts(), 64, 8) == (64, None)
    files = [f"train/{i:02d}.tfrec" for i in range(5)]
    shares = []
    for index in range(2):
        batch, context = hosts.input_share(hosts.Hosts(2, index, "127.0.0.1:1", "test"), 64, 8)
        assert batch == 32 and (context.input_pipeline_id, context.num_input_pipelines) == (index, 2)
        shares.append(datasets.files_for_pipeline(files, context))
    assert shares == [files[0::2], files[1::2]]  # no shard read twice, none left out
    with pytest.raises(PetalsError, match="global batch of 30 cannot be split between 4 processes"):
        hosts.input_share(hosts.Hosts(4, 0, "127.0.0.1:1", "test"), 30, 8)


def test_outputs_predicted_by_several_processes_come_back_in_the_datasets_order():
    """7 batches of 2 rows dealt to 3 processes (0: batches 0, 3, 6; 1: 1, 4; 2: 2, 5): once
    gathered, every process holds every row once, in order."""
    import numpy as np

    from pipeline.modeling import host_predict

    rows, count = 2, 3
    batches = np.arange(14).reshape(7, rows)
    shares = [batches[i::count].reshape(-1, 1).astype(np.float32) for i in range(count)]

    def allgather(value):  # what the engine's all-gather gives each process: every process's value
        if value.shape == (1,):
            return np.asarray([[len(s)] for s in shares])
        padded = np.zeros((count, *value.shape), value.dtype)
        for i, share in enumerate(shares):
            padded[i, : len(share)] = share
        return padded

    for index in range(count):
        here = hosts.Hosts(count, index, "127.0.0.1:1", "test")
        gathered = host_predict.in_order(shares[index], here, rows, allgather)
        assert gathered.ravel().tolist() == list(range(14))
