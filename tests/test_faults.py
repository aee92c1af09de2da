"""Faults, one at a time: what the user sees, the exit code, what is left on disk, what the rerun does.

Each test injects one fault into a real stage (a second writer, a damaged checkpoint, a full disk,
a read-only or forbidden folder, data files that vanish, SIGTERM, the time limit, kill -9 at a
random moment, a failing Kaggle server) and asserts one line, the exit code, nothing half-written,
and a rerun that finishes. With PETALS_FAULT_TABLE set, each also writes its row of the fault
table: `make fault-table` runs this module and writes docs/FAULTS.md from the rows.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline import cli
from pipeline.core import lock
from pipeline.core.errors import Preempted
from pipeline.modeling import policy, preemption
from pipeline.stages import train
from pipeline.tasks.recipe_config import load_config
from tests.conftest import REPO, TINY, error_lines, foreign_lines, run_python
from tests.faults import (
    in_private_mount,
    kill_during,
    leftovers,
    namespaces_work,
    petals_lines,
    record,
    seeds,
)

pytestmark = pytest.mark.slow


def _train_args(data_dir, runs_dir, *extra) -> list[str]:
    args = ["train", "--data-dir", str(data_dir), "--runs-dir", str(runs_dir), "--recipe", "default"]
    for override in TINY:
        args += ["--set", override]
    return [*args, *extra]


def _here(capsys, *args: str) -> tuple[int, list[str], str]:
    """A stage in this process: its exit code, its own error lines and all it wrote to stderr."""
    code = cli.main(list(args))
    err = capsys.readouterr().err
    return code, error_lines(err), err


def _tiny_fetch(data_dir: Path) -> list[str]:
    """`fetch` of the embedded flowers at 32 px, a twentieth of their number: a few seconds."""
    return [
        "fetch",
        "--source",
        "synthetic",
        "--data-dir",
        str(data_dir),
        "--size",
        "32",
        "--scale",
        "0.05",
        "--no-progress",
    ]


def _history(run_dir: Path) -> list[int]:
    return pd.read_csv(run_dir / "history.csv")["epoch"].tolist()


def _index(run_dir: Path) -> dict:
    return json.loads((run_dir / "checkpoints" / "latest.json").read_text())


# ----------------------------------------------------------------------------- one writer


@pytest.fixture
def live_holder():
    """A process of this host that stays alive while the test runs: the holder of a lock."""
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    yield holder
    holder.kill()
    holder.wait()


def _lock_file(path: Path, pid: int, what: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    held = {
        "pid": pid,
        "host": socket.gethostname(),
        "time": time.time(),
        "what": what,
        "process_start": lock._process_start(pid),
    }
    path.write_text(json.dumps(held))


def test_a_second_train_of_a_run_is_refused_and_a_dead_holder_is_taken_over(
    tiny_data_dir, tmp_path, capsys, caplog, live_holder
):
    runs = tmp_path / "runs"
    args = _train_args(tiny_data_dir, runs, "--run", "busy")
    _lock_file(runs / "busy" / "writer.lock", live_holder.pid, "train")

    code, lines, _ = _here(capsys, *args)
    assert code == 2 and len(lines) == 1, lines
    assert f"in use by pid {live_holder.pid} on {socket.gethostname()} (train, since" in lines[0]
    assert sorted(p.name for p in (runs / "busy").iterdir()) == ["writer.lock"]  # nothing else written
    record(
        "a second writer (lock held by a live process)",
        "train",
        lines[0],
        code,
        "the holder's lock only",
        "refused again while the holder lives",
        [tmp_path],
    )

    live_holder.kill()
    live_holder.wait()
    code, lines, err = _here(capsys, *args)
    assert code == 0, err
    assert "taking over the lock of pid" in caplog.text and "no longer running" in caplog.text
    assert (runs / "busy" / "metrics.json").is_file() and not (runs / "busy" / "writer.lock").exists()
    seen = next(r.getMessage() for r in caplog.records if "taking over" in r.getMessage())
    record(
        "a stale lock (its holder killed)",
        "train",
        seen,
        0,
        "nothing: the lock is released",
        "(this run) takes the lock over and trains",
        [tmp_path],
    )


def test_a_killed_processs_staging_folder_is_removed_by_the_next_and_no_other(tmp_path):
    """A `kill -9` mid-download leaves `.petals-download-*` (up to Kaggle's 20 GB of outputs) in the
    output folder: the next download removes it, never a live process's or another host's."""
    dead = subprocess.Popen([sys.executable, "-c", "import os; print(os.getpid())"], stdout=subprocess.PIPE)
    pid = int(dead.communicate()[0])
    host = lock.process_name().split(".")[0]
    left = tmp_path / f".petals-download-{host}.{pid}.123.abc"
    mine = lock.staging_folder(tmp_path, ".petals-download-")
    theirs = tmp_path / f".petals-download-another-host.{pid}.123.abc"
    for folder in (left, theirs):
        (folder / "0").mkdir(parents=True)
    (left / "0" / "big").write_bytes(b"x" * 1000)
    again = lock.staging_folder(tmp_path, ".petals-download-")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([mine.name, theirs.name, again.name])
    assert mine.name.startswith(f".petals-download-{lock.process_name()}.")


def test_a_second_fetch_of_a_data_dir_is_refused(tmp_path, capsys, live_holder):
    data_dir = tmp_path / "data"
    _lock_file(tmp_path / "data.lock", live_holder.pid, "fetch")
    code, lines, _ = _here(capsys, *_tiny_fetch(data_dir))
    assert code == 2 and len(lines) == 1 and f"in use by pid {live_holder.pid}" in lines[0], lines
    assert not data_dir.exists() and not (tmp_path / "data.partial").exists()
    record(
        "a second writer (lock held by a live process)",
        "fetch",
        lines[0],
        code,
        "nothing: the data dir is untouched",
        "refused again while the holder lives",
        [tmp_path],
    )


@pytest.mark.heavy  # two training processes side by side
@pytest.mark.alone
def test_two_real_trains_of_one_run_at_once_leave_one_writer(tiny_data_dir, tmp_path):
    """Two processes started together: exactly one trains, the other is refused in one line."""
    args = _train_args(tiny_data_dir, tmp_path, "--run", "twice", "--set", "train.steps_per_epoch=40")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    both = [
        subprocess.Popen(
            [sys.executable, "-m", "pipeline", *args],
            cwd=REPO,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    results = [(p.wait(timeout=200), p.communicate()[1]) for p in both]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], [err[-2000:] for _, err in results]
    refused = next(err for code, err in results if code == 2)
    assert len(petals_lines(refused)) == 1 and "in use by pid" in petals_lines(refused)[0]
    assert _history(tmp_path / "twice") == [1, 2] and leftovers(tmp_path) == []


# ----------------------------------------------------------------------------- checkpoints


def test_the_last_two_checkpoints_are_kept_and_a_damaged_one_falls_back(
    tiny_data_dir, tmp_path, capsys, caplog
):
    caplog.set_level("INFO")
    runs = tmp_path / "runs"
    args = _train_args(tiny_data_dir, runs, "--run", "ckpt", "--set", "train.epochs=3")
    assert _here(capsys, *args)[0] == 0
    run = runs / "ckpt"
    index = _index(run)
    assert [c["name"] for c in index["checkpoints"]] == ["ckpt-2.npz", "ckpt-3.npz"]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [
        "ckpt-2.npz",
        "ckpt-3.npz",
        "latest.json",
    ]
    assert all(len(c["sha256"]) == 64 for c in index["checkpoints"])

    newest = run / "checkpoints" / "ckpt-3.npz"
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])  # a copy cut in half
    (run / "metrics.json").unlink()  # as if stopped after its last checkpoint
    code, lines, err = _here(capsys, *args)
    assert code == 0, err
    warned = [r.getMessage() for r in caplog.records if "is damaged" in r.getMessage()]
    assert len(warned) == 1 and "ckpt-3.npz" in warned[0] and "trying the one before it" in warned[0]
    assert "resuming" in caplog.text and "after epoch 2" in caplog.text
    assert _history(run) == [1, 2, 3]
    record(
        "the newest checkpoint cut short (an interrupted copy)",
        "train",
        warned[0],
        0,
        "the last 2 checkpoints, each with its sha256 in latest.json",
        "(this run) resumes from the one before it and finishes",
        [tmp_path],
    )

    (run / "metrics.json").unlink()
    for path in (run / "checkpoints").glob("ckpt-*.npz"):
        path.write_bytes(b"\0" * 100)
    code, lines, _ = _here(capsys, *args)
    assert code == 2 and len(lines) == 1, lines
    assert "no usable checkpoint" in lines[0] and "ckpt-3.npz" in lines[0] and "ckpt-2.npz" in lines[0]
    assert "--force" in lines[0]
    record(
        "every checkpoint damaged",
        "train",
        lines[0],
        code,
        "the damaged files, untouched",
        "with --force (RETRAIN=1) trains from scratch",
        [tmp_path],
    )


# ----------------------------------------------------------------------------- stopping early


class StopAfter(preemption.StopRequest):
    """A stop request that turns true at its n-th question from the training loops."""

    def __init__(self, calls: int):
        super().__init__()
        self.calls = calls

    def __call__(self):
        self.calls -= 1
        if self.calls <= 0 and self.reason is None:
            self.reason = "a test stop"
        return self.reason


# The custom loop's stop: the thorough tier (test_bert proves that loop trains like fit).
@pytest.mark.parametrize("loop", ["fit", pytest.param("custom", marks=pytest.mark.thorough)])
def test_a_stop_mid_epoch_saves_the_step_and_the_rerun_finishes_the_epoch(cpu, tiny_data_dir, tmp_path, loop):
    overrides = [*TINY, "train.epochs=3", "train.steps_per_epoch=6", f"train.loop={loop}"]
    job = train.prepare(load_config(overrides=overrides), cpu, tiny_data_dir, tmp_path, "stopped", None)
    # fit asks once before its phase and after each step; the custom loop before each epoch and
    # between steps: the 9th question falls after step 2 of epoch 2 in both.
    with pytest.raises(Preempted, match=r"stopped by a test stop at epoch 2, step 2 of 6"):
        train.fit(job, progress=False, stop=StopAfter(9))
    index = _index(tmp_path / "stopped")
    assert (index["epoch"], index["step"]) == (1, 2)
    assert [c["name"] for c in index["checkpoints"]] == ["ckpt-1.npz", "ckpt-1-step2.npz"]
    assert _history(tmp_path / "stopped") == [1]

    job = train.prepare(load_config(overrides=overrides), cpu, tiny_data_dir, tmp_path, "stopped", None)
    metrics = train.fit(job, progress=False)
    history = pd.read_csv(tmp_path / "stopped" / "history.csv")
    assert history["epoch"].tolist() == [1, 2, 3] and metrics["epochs"] == 3
    assert history["images"].tolist() == [6 * 8] * 3  # the stopped epoch counts its steps once
    assert np.isfinite(history["loss"]).all() and 0 <= history["accuracy"].min() <= 1


@pytest.mark.heavy  # runs alone in `make test-heavy`: a whole chain or several processes
@pytest.mark.alone
def test_sigterm_saves_a_checkpoint_at_the_step_and_exits_75(tiny_data_dir, tmp_path):
    args = _train_args(
        tiny_data_dir,
        tmp_path,
        "--run",
        "term",
        "--set",
        "train.epochs=2",
        "--set",
        "train.steps_per_epoch=200",
    )
    command = [sys.executable, "-m", "pipeline", *args]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    first = subprocess.Popen(
        command, cwd=REPO, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    index = tmp_path / "term" / "checkpoints" / "latest.json"
    deadline = time.monotonic() + 200
    while not index.is_file() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)  # into epoch 2
    sent = time.monotonic()
    first.send_signal(signal.SIGTERM)
    _, err = first.communicate(timeout=120)
    took = time.monotonic() - sent
    lines = petals_lines(err)
    assert first.returncode == 75, err[-3000:]
    assert len(lines) == 1 and re.search(r"stopped by SIGTERM at epoch 2, step \d+ of 200", lines[0]), lines
    assert took < preemption.GRACE_SECONDS, took
    step = int(re.search(r"step (\d+) of", lines[0])[1])
    assert (_index(tmp_path / "term")["epoch"], _index(tmp_path / "term")["step"]) == (1, step)
    assert leftovers(tmp_path) == [] and not (tmp_path / "term" / "writer.lock").exists()
    record(
        "SIGTERM mid-epoch (a preempted VM)",
        "train",
        lines[0],
        75,
        "a checkpoint at the step reached, beside the last epoch's",
        "resumes from that step; every epoch in history.csv once",
        [tmp_path],
    )

    second = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=200, check=False
    )
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"after epoch 1 and step {step} of the next" in second.stderr
    assert _history(tmp_path / "term") == [1, 2]


@pytest.mark.thorough  # a stop at a step and its resume: proven by the mid-epoch stop above
def test_the_time_limit_stops_with_a_checkpoint_and_the_rerun_resumes(tiny_data_dir, tmp_path, capsys):
    args = _train_args(tiny_data_dir, tmp_path, "--run", "limited", "--set", "train.epochs=3")
    code, _, err = _here(capsys, *args, "--time-limit", "0.000001")
    lines = [line for line in err.splitlines() if line.startswith("petals train:")]
    assert code == 75 and len(lines) == 1 and "stopped by the time limit at epoch 1" in lines[0], err
    record(
        "the time limit (a kernel's session)",
        "train",
        lines[0],
        75,
        "the checkpoints so far (none before the first step)",
        "resumes; finishes",
        [tmp_path],
    )
    code, _, err = _here(capsys, *args)
    assert code == 0, err
    assert _history(tmp_path / "limited") == [1, 2, 3]


@pytest.mark.heavy  # JAX's convolutions on this CPU; the same stops on TensorFlow run in make test
@pytest.mark.alone
def test_both_loops_stop_and_resume_mid_epoch_on_jax(tiny_data_dir, tmp_path):
    done = run_python(
        f"""
        import json
        from pathlib import Path
        from pipeline.core import device
        from pipeline.tasks.recipe_config import load_config
        from pipeline.core.errors import Preempted
        from pipeline.stages import train
        from tests.test_faults import StopAfter

        platform = device.pick("jax", "cpu")
        data, runs = Path({str(tiny_data_dir)!r}), Path({str(tmp_path)!r})
        out = {{}}
        for loop in ("fit", "custom"):
            overrides = {TINY!r} + ["train.epochs=2", "train.steps_per_epoch=6", "train.loop=" + loop]
            job = train.prepare(load_config(overrides=overrides), platform, data, runs, loop, None)
            try:
                train.fit(job, progress=False, stop=StopAfter(9))
            except Preempted as err:
                stopped = str(err)
            job = train.prepare(load_config(overrides=overrides), platform, data, runs, loop, None)
            out[loop] = [stopped, train.fit(job, progress=False)["epochs"]]
        print(json.dumps(out))
        """,
        env={"KERAS_BACKEND": "jax"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    for loop in ("fit", "custom"):
        stopped, epochs = out[loop]
        assert "stopped by a test stop at epoch 2, step 2 of 6" in stopped, (loop, stopped)
        assert epochs == 2 and _history(tmp_path / loop) == [1, 2], loop


# ----------------------------------------------------------------------------- the file system


needs_namespaces = pytest.mark.skipif(not namespaces_work(), reason="no user and mount namespaces here")


@needs_namespaces
@pytest.mark.heavy  # runs alone in `make test-heavy`: a whole chain or several processes
@pytest.mark.alone
def test_a_full_disk_mid_run_is_one_line_leaves_no_partial_and_the_rerun_resumes(tiny_data_dir, tmp_path):
    """The runs dir on a 32 MiB tmpfs that is filled up as soon as the first checkpoint is written."""
    args = _train_args(
        tiny_data_dir,
        tmp_path / "disk" / "runs",
        "--run",
        "full",
        "--set",
        "train.epochs=2",
        "--set",
        "train.steps_per_epoch=10",
    )
    result = in_private_mount(
        textwrap.dedent(f"""
        import json, os, subprocess, sys, time
        from pathlib import Path
        from tests.faults import leftovers
        disk = Path({str(tmp_path / "disk")!r}); disk.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(disk)], check=True)
        command = [sys.executable, "-m", "pipeline", *{args!r}]
        train = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
        index = disk / "runs" / "full" / "checkpoints" / "latest.json"
        while not index.is_file() and train.poll() is None:
            time.sleep(0.02)
        try:  # the rest of the disk, as another job would take it (closing may say it is full too)
            with open(disk / "filler", "wb") as f:
                while True:
                    f.write(b"\\0" * 65536); f.flush()
        except OSError:
            pass
        err = train.communicate()[1]
        first = {{"code": train.returncode, "lines": [l for l in err.splitlines() if l.startswith("petals ")],
                 "left": leftovers(disk)}}
        (disk / "filler").unlink()
        again = subprocess.run(command, capture_output=True, text=True)
        print(json.dumps({{"first": first, "rerun": [again.returncode, again.stderr[-2000:]],
                          "history": (disk / "runs" / "full" / "history.csv").read_text()}}))
        """)
    )
    first = result["first"]
    assert first["code"] == 2 and len(first["lines"]) == 1, first
    line = first["lines"][0]
    assert "no space left on the device" in line and "MiB free in" in line, line
    assert re.search(r"(weights\.h5|ckpt-\d+\.npz|history\.csv|latest\.json|epoch-\d+\.npy)", line), line
    assert first["left"] == []
    assert result["rerun"][0] == 0, result["rerun"][1]
    assert "resuming" in result["rerun"][1]
    assert [int(r.split(",")[0]) for r in result["history"].splitlines()[1:]] == [1, 2]
    record(
        "a full disk mid-run",
        "train",
        line,
        2,
        "no .partial file; the last complete checkpoint",
        "resumes from it once there is space",
        [tmp_path],
    )


@needs_namespaces
def test_a_read_only_runs_dir_is_one_line_and_writes_nothing(tiny_data_dir, tmp_path):
    args = _train_args(tiny_data_dir, tmp_path / "ro" / "runs", "--run", "ro")
    result = in_private_mount(
        textwrap.dedent(f"""
        import json, subprocess, sys
        from pathlib import Path
        ro = Path({str(tmp_path / "ro")!r}); ro.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(ro)], check=True)
        (ro / "runs").mkdir()
        subprocess.run(["mount", "-o", "remount,ro", str(ro)], check=True)
        done = subprocess.run([sys.executable, "-m", "pipeline", *{args!r}], capture_output=True, text=True)
        print(json.dumps({{"code": done.returncode, "stderr": done.stderr,
                          "files": [str(p) for p in ro.rglob("*")]}}))
        """)
    )
    lines = petals_lines(result["stderr"])
    assert result["code"] == 2 and len(lines) == 1, result["stderr"][-2000:]
    assert "Read-only file system" in lines[0] and "choose a writable folder" in lines[0], lines[0]
    assert result["files"] == [str(tmp_path / "ro" / "runs")]
    record(
        "a read-only runs dir",
        "train",
        lines[0],
        2,
        "nothing",
        "trains once the folder is writable",
        [tmp_path],
    )


@pytest.mark.skipif(not shutil.which("unshare"), reason="no unshare here")
@pytest.mark.thorough  # a folder petals may not write: proven on the runs dir above
def test_a_data_dir_this_user_may_not_write_is_one_line(tmp_path):
    """fetch as an unprivileged user (root ignores permissions) into a folder it may not write."""
    shared = Path(tempfile.mkdtemp(prefix="petals-perm-"))
    try:
        (shared / "locked").mkdir()
        (shared / "home").mkdir()
        for path, mode in ((shared, 0o755), (shared / "locked", 0o555), (shared / "home", 0o777)):
            path.chmod(mode)
        data_dir = shared / "locked" / "data"
        command = [sys.executable, "-m", "pipeline", *_tiny_fetch(data_dir)]
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "HOME": str(shared / "home"),
            "JAX_COMPILATION_CACHE_DIR": str(shared / "home"),
        }
        done = subprocess.run(
            ["unshare", "--user", *command],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if "Operation not permitted" in done.stderr and "unshare" in done.stderr:
            pytest.skip("no user namespaces here")
        lines = petals_lines(done.stderr)
        assert done.returncode == 2 and len(lines) == 1, done.stderr[-2000:]
        assert lines[0].startswith(f"petals fetch: error: {shared / 'locked'}: Permission denied"), lines[0]
        assert list((shared / "locked").iterdir()) == []
        record(
            "a data dir this user may not write",
            "fetch",
            lines[0],
            2,
            "nothing",
            "fetches once the folder is writable",
            [shared],
        )
    finally:
        shutil.rmtree(shared, ignore_errors=True)


@pytest.mark.heavy  # runs alone in `make test-heavy`: a whole chain or several processes
@pytest.mark.alone
def test_data_files_that_vanish_mid_run_are_named_and_the_rerun_resumes(
    tiny_data_dir, tmp_path, capsys, caplog, monkeypatch
):
    """The records' folder moved away (a data disk unmounted) as soon as the first epoch's
    checkpoint is written, from inside the run: the next pass over the files finds them gone."""
    caplog.set_level("INFO")
    data = tmp_path / "data"
    shutil.copytree(tiny_data_dir, data)
    manifest = json.loads((data / "manifest.json").read_text())
    copy, moved = tmp_path / "records", tmp_path / "unmounted"
    shutil.copytree(manifest["root"], copy)
    (data / "manifest.json").write_text(json.dumps({**manifest, "root": str(copy)}))
    overrides = ["train.epochs=2", "train.steps_per_epoch=20"]  # 160 images an epoch, 150 in the files
    args = _train_args(
        data, tmp_path / "runs", "--run", "gone", *[a for o in overrides for a in ("--set", o)]
    )
    index = tmp_path / "runs" / "gone" / "checkpoints" / "latest.json"

    class Unmounting(preemption.StopRequest):  # asked between steps: the moment to pull the disk
        def __call__(self):
            if index.is_file() and copy.exists():
                copy.rename(moved)
            return super().__call__()

    monkeypatch.setattr(preemption, "StopRequest", Unmounting)
    code, lines, _ = _here(capsys, *args)
    assert code == 2 and len(lines) == 1, lines
    assert "gone while the stage read it" in lines[0] and str(copy) in lines[0], lines[0]
    record(
        "data files gone mid-run (a disk unmounted)",
        "train",
        lines[0],
        2,
        "the last complete checkpoint",
        "resumes from it once the data is back",
        [tmp_path],
    )

    monkeypatch.undo()
    moved.rename(copy)
    code, _, err = _here(capsys, *args)
    assert code == 0, err
    assert "resuming" in caplog.text and _history(tmp_path / "runs" / "gone") == [1, 2]


# ----------------------------------------------------------------------------- kill -9 anywhere


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "pipeline", *args]


ENV = {**os.environ, "PYTHONPATH": str(REPO)}


@pytest.fixture(scope="module")
def undisturbed_fetch(tmp_path_factory, spec) -> str:
    from pipeline.stages.fetch import FetchOptions, fetch

    data_dir = tmp_path_factory.mktemp("undisturbed") / "data"
    options = FetchOptions(
        source="synthetic", data_dir=data_dir, synthetic_size=32, scale=0.05, progress=False
    )
    return fetch(options, spec)["fingerprint"]


@pytest.mark.parametrize("seed", seeds())
@pytest.mark.heavy  # runs alone in `make test-heavy`: a whole chain or several processes
@pytest.mark.alone
def test_a_fetch_killed_at_a_random_moment_reruns_to_the_same_data(tmp_path, seed, undisturbed_fetch):
    data_dir = tmp_path / "data"
    command = _cli(*_tiny_fetch(data_dir))
    delay = np.random.default_rng(seed).uniform(0.0, 1.5)
    kill_during(command, ENV, "fetch: source synthetic", delay)
    again = subprocess.run(
        command, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=200, check=False
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads((data_dir / "manifest.json").read_text())["fingerprint"] == undisturbed_fetch
    assert leftovers(tmp_path) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["data"]
    record(
        "kill -9 at a random moment",
        "fetch",
        "(nothing: the process is gone)",
        -9,
        "data.partial/ (the staging folder) and a stale data.lock, or nothing",
        f"fetches again; the same fingerprint as an undisturbed fetch ({len(seeds())} seeds)",
        [tmp_path],
    )


def _started(pid: int) -> tuple[int, str] | None:
    """(parent pid, start time) of a live process from /proc; None once it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # after the name, which may hold spaces
    return None if fields[0] in "ZX" else (int(fields[1]), fields[19])


def _command_line(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _children_of(pid: int) -> dict[int, str]:
    """{pid: start time} of the live processes whose parent is `pid`."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (seen := _started(int(entry.name))) and seen[0] == pid:
            found[int(entry.name)] = seen[1]
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="finds processes in /proc (Linux)")
@pytest.mark.thorough  # children dying with their stage: proven by the launcher killed with -9 below
def test_a_fetch_killed_mid_drawing_takes_its_drawing_workers_with_it(tmp_path):
    """kill -9 of a stage (an OOM kill, Ctrl-\\) must not leave its spawn workers running, children
    of init: each dies with the stage. A worker still starting (importing, before its initializer
    ties it to the stage) goes when it gets there: seconds here, longer under a loaded suite (one
    was still starting 5 s after the kill), so the test waits up to 30 s; an orphan would stay."""
    # At 192 px, a quarter of the flowers: enough drawing for worker processes (a tiny fetch draws
    # in its own process, synthetic.POOL_FROM_SECONDS); killed as soon as they are seen.
    fetch = _tiny_fetch(tmp_path / "data")
    fetch[fetch.index("--size") + 1], fetch[fetch.index("--scale") + 1] = "192", "0.25"
    proc = subprocess.Popen(
        _cli(*fetch),
        cwd=REPO,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    children: dict[int, str] = {}
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        children = _children_of(proc.pid)
        workers = [c for c in children if b"--multiprocessing-fork" in _command_line(c)]
        if len(workers) >= min(os.cpu_count() or 1, 2):  # the drawing has begun
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the fetch ended before its drawing workers were seen"
    time.sleep(0.5)  # some workers past their initializer, some maybe not yet
    children.update(_children_of(proc.pid))
    proc.kill()
    proc.wait()
    left, deadline = list(children), time.monotonic() + 30
    while time.monotonic() < deadline:
        left = [pid for pid, start in children.items() if (_started(pid) or (0, ""))[1] == start]
        if not left:
            break
        time.sleep(0.1)
    assert left == [], [_command_line(pid) for pid in left]
    record(
        "kill -9 mid-drawing: its worker processes",
        "fetch",
        "(nothing: the process is gone)",
        -9,
        f"no process of its {len(children)} children (drawing workers, multiprocessing's tracker)",
        "(not rerun: the fetch is killed at a random moment above)",
        [tmp_path],
    )


def test_a_worker_whose_stage_died_before_it_started_exits_at_once():
    """The race PR_SET_PDEATHSIG leaves open: the stage killed while its worker was starting."""
    done = run_python(
        "from pipeline.core.children import die_with_parent; import os\n"
        "die_with_parent(os.getppid() + 1)  # not its parent: as if the stage were gone\n"
        "print('still running')"
    )
    assert done.returncode == 1 and "still running" not in done.stdout, done.stdout + done.stderr


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="finds processes in /proc (Linux)")
def test_a_host_process_dies_with_its_launcher_killed_with_minus_9(tmp_path):
    """pipeline/launch.py puts its host processes in their own sessions (to stop each with what it
    started); killed with -9 it cannot stop them, so each is bound to it by PETALS_DIE_WITH."""
    ready = tmp_path / "ready"
    host = (
        "import pathlib, time\n"
        "from pipeline import cli\n"
        "cli.die_with_launcher()\n"
        f"pathlib.Path({str(ready)!r}).touch()\n"
        "time.sleep(120)\n"
    )
    launcher = (
        "import os, subprocess, sys, time\n"
        "from pipeline.core.children import PARENT_VARIABLE\n"
        f"child = subprocess.Popen([sys.executable, '-c', {host!r}], start_new_session=True,\n"
        "    env={**os.environ, PARENT_VARIABLE: str(os.getpid())})\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", launcher],
        cwd=REPO,
        env={**ENV, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        text=True,
    )
    child = int(proc.stdout.readline())
    deadline = time.monotonic() + 60
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # the host is past die_with_launcher, as a stage is once cli.main starts
    start = _started(child)
    assert start is not None and start[0] == proc.pid
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 5
    while _started(child) == start and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _started(child) != start, "the host process outlived its launcher"


def test_the_half_written_files_of_a_killed_run_go_when_its_rerun_takes_the_lock(tmp_path):
    """kill -9 during a weights write leaves Keras's `partial-best.weights.h5` (seen once in 20
    random kills); the rerun, holding the lock, removes it and every `.partial`, and nothing else."""
    from pipeline.core.rundir import RunDir

    run = RunDir(tmp_path / "killed")
    (run.path / "checkpoints").mkdir(parents=True)
    half = [run.path / "partial-best.weights.h5", run.path / "checkpoints" / "ckpt-2.npz.partial"]
    kept = [run.path / "best.weights.h5", run.path / "checkpoints" / "ckpt-1.npz"]
    for path in half + kept:
        path.write_bytes(b"x")
    with run.writing():
        assert [p for p in half if p.exists()] == []
    assert all(p.exists() for p in kept) and leftovers(tmp_path) == []


def test_two_writers_of_one_file_at_once_each_rename_a_whole_file(tmp_path):
    """Two sweep processes drew the study's plot at once: with one temporary name for both, the
    first rename took the file the second was writing, and that sweep stopped on "No such file"
    (seen once in `make test`). Each writer now has its own; the last whole file stays."""
    from pipeline.core.files import write_atomically

    path, both_written, failed = tmp_path / "study-history.png", threading.Barrier(2), []

    def writer(text: str) -> None:
        def write(tmp):
            tmp.write_text(text)
            both_written.wait(timeout=30)  # both temporary files exist before either is renamed

        try:
            write_atomically(path, write)
        except Exception as err:  # whatever either writer raised, the assert below shows
            failed.append(err)

    threads = [threading.Thread(target=writer, args=(text,)) for text in ("first", "second")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert failed == [] and path.read_text() in ("first", "second")
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left


@pytest.mark.parametrize("seed", seeds())
@pytest.mark.heavy  # runs alone in `make test-heavy`: a whole chain or several processes
@pytest.mark.alone
def test_a_train_killed_at_a_random_moment_resumes_from_its_last_epoch(tiny_data_dir, tmp_path, seed):
    overrides = ["train.epochs=4", "train.steps_per_epoch=10", "train.lr_ramp_epochs=2"]
    args = _train_args(
        tiny_data_dir, tmp_path, "--run", "killed", *[a for o in overrides for a in ("--set", o)]
    )
    command = _cli(*args)
    # The epoch lines' header comes after the first epoch's checkpoint: kill -9 somewhere after it.
    kill_during(command, ENV, "val loss", np.random.default_rng(seed).uniform(0.0, 1.5))
    assert (tmp_path / "killed" / "checkpoints" / "latest.json").is_file()
    again = subprocess.run(
        command, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=200, check=False
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert foreign_lines(again.stdout + again.stderr) == []  # the default output is petals' own
    history = pd.read_csv(tmp_path / "killed" / "history.csv")
    assert history["epoch"].tolist() == [1, 2, 3, 4]  # every epoch once, none redone twice
    config = load_config(overrides=[*TINY, *overrides])
    assert history["lr"].tolist() == pytest.approx(
        [policy.learning_rate(e, config.train, 1) for e in range(4)]
    )
    assert json.loads((tmp_path / "killed" / "metrics.json").read_text())["epochs"] == 4
    assert leftovers(tmp_path) == [] and not (tmp_path / "killed" / "writer.lock").exists()
    record(
        "kill -9 at a random moment",
        "train",
        "(nothing: the process is gone)",
        -9,
        "the last complete checkpoint (maybe a .partial and a stale writer.lock)",
        f"takes the lock over, resumes after the last complete epoch; every epoch once in history.csv "
        f"({len(seeds())} seeds)",
        [tmp_path],
    )


@pytest.mark.parametrize("seed", seeds())
@pytest.mark.heavy  # runs alone in `make test-heavy`: a whole chain or several processes
@pytest.mark.alone
def test_a_predict_killed_at_a_random_moment_reruns_to_the_same_csv(tiny_runs, tiny_data_dir, tmp_path, seed):
    def fresh_run(name: str) -> Path:
        run = Path(shutil.copytree(tiny_runs[0], tmp_path / name))
        for old in run.glob("*_predictions*.npz"):
            old.unlink()
        return run

    def predict(run: Path, subs: Path) -> list[str]:
        return _cli(
            "predict", "--run", str(run), "--data-dir", str(tiny_data_dir), "--submissions-dir", str(subs)
        )

    reference, killed_run = fresh_run("reference"), fresh_run("killed")
    assert cli.main(predict(reference, tmp_path / "subs-reference")[3:]) == 0
    command = predict(killed_run, tmp_path / "subs")
    delay = np.random.default_rng(seed).uniform(0.0, 3.0)
    kill_during(command, ENV, "device:", delay)
    again = subprocess.run(
        command, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=200, check=False
    )
    assert again.returncode == 0, again.stderr[-3000:]
    expected = (tmp_path / "subs-reference" / "reference.csv").read_bytes()
    assert (tmp_path / "subs" / "killed.csv").read_bytes() == expected
    assert leftovers(tmp_path) == []
    record(
        "kill -9 at a random moment",
        "predict",
        "(nothing: the process is gone)",
        -9,
        "nothing half-written (every file is renamed into place whole)",
        f"predicts again; the same CSV, byte for byte ({len(seeds())} seeds)",
        [tmp_path],
    )


@pytest.mark.parametrize("seed", seeds())
@pytest.mark.thorough  # a submit's rerun after a kill: test_submit's recorded upload and rerun tests
def test_a_submit_killed_at_a_random_moment_reruns_to_one_recorded_upload(
    tiny_data_dir, spec, tmp_path, kaggle_env, seed
):
    from competition.submission import submission_frame
    from pipeline.runs import leaderboard
    from pipeline.runs.submission_files import sample_ids
    from tests.kaggle_server import Behaviour, KaggleTestServer

    subs = tmp_path / "submissions"
    subs.mkdir()
    ids = sample_ids(tiny_data_dir, spec)
    csv = subs / "tiny-run.csv"
    submission_frame(spec, ids, [i % spec.num_classes for i in range(len(ids))]).to_csv(csv, index=False)
    command = _cli(
        "submit",
        "--data-dir",
        str(tiny_data_dir),
        "--submissions-dir",
        str(subs),
        "--slug",
        "tpu-getting-started",
    )
    env = {**ENV, **kaggle_env}
    behaviour = Behaviour()
    with KaggleTestServer(behaviour):
        kill_during(command, env, "is a valid submission", np.random.default_rng(seed).uniform(0.0, 0.6))
        again = subprocess.run(
            command, cwd=REPO, env=env, capture_output=True, text=True, timeout=200, check=False
        )
    assert again.returncode == 0, again.stderr[-3000:]
    assert len(behaviour.created) == 1, behaviour.created  # sent once, however the kill fell
    assert all(upload in (b"", csv.read_bytes()) for upload in behaviour.uploads.values())
    board = leaderboard.read(subs / leaderboard.BOARD)
    assert board["entry"].tolist() == ["tiny-run"] and board["submission_ref"].notna().all()
    assert leftovers(tmp_path) == []
    record(
        "kill -9 at a random moment",
        "submit",
        "(nothing: the process is gone)",
        -9,
        "the leaderboard as it was, or with the upload recorded; maybe the intent file written "
        "before the upload (.<file>.submitting.json)",
        "uploads and records it, once: a kill after Kaggle accepted it finds it listed on Kaggle "
        f"and records it without sending it again ({len(seeds())} seeds)",
        [tmp_path],
    )


def test_a_kaggle_server_failing_is_retried_then_one_line(tmp_path, capsys, caplog, in_kaggle_env, backoff):
    from tests.kaggle_server import Behaviour, KaggleTestServer

    args = [
        "fetch",
        "--source",
        "kaggle",
        "--data-dir",
        str(tmp_path / "data"),
        "--no-progress",
        "--retries",
        "2",
    ]
    with KaggleTestServer(Behaviour(fail_with=[503, 503])):
        code, lines, _ = _here(capsys, *args)
    assert code == 2 and len(lines) == 1 and "answered 503" in lines[0], lines
    assert "HTTP 503, retrying" in caplog.text and backoff == [2.0]
    assert not (tmp_path / "data").exists() and leftovers(tmp_path) == []
    record(
        "the Kaggle API answering 5xx",
        "fetch",
        lines[0],
        2,
        "nothing",
        "retried with backoff first (--retries); a later rerun downloads",
        [tmp_path],
    )


@pytest.mark.thorough  # retried then one line: proven by the failing server above
def test_a_kaggle_server_that_stops_answering_times_out_is_retried_then_one_line(
    tmp_path, capsys, caplog, in_kaggle_env, monkeypatch
):
    from tests.kaggle_server import Behaviour, KaggleTestServer

    monkeypatch.setenv("PETALS_KAGGLE_TIMEOUT", "0.5")
    args = [
        "fetch",
        "--source",
        "kaggle",
        "--data-dir",
        str(tmp_path / "data"),
        "--no-progress",
        "--retries",
        "2",
    ]
    with KaggleTestServer(Behaviour(stall_seconds=1.5, stalls=10)):
        started = time.monotonic()
        code, lines, _ = _here(capsys, *args)
        took = time.monotonic() - started
    assert code == 2 and len(lines) == 1, lines
    assert "cannot reach Kaggle" in lines[0] and "Timeout" in lines[0], lines[0]
    assert "retrying" in caplog.text and took < 30, took
    assert not (tmp_path / "data").exists() and leftovers(tmp_path) == []
    record(
        "the Kaggle API not answering (a stalled server)",
        "fetch",
        lines[0],
        2,
        "nothing",
        "each request gives up after PETALS_KAGGLE_TIMEOUT s (120) and is retried; a later rerun downloads",
        [tmp_path],
    )


def test_sigint_is_noted_while_the_loops_run_and_stops_at_once_outside_them():
    """Ctrl-C takes the same path as SIGTERM: noted between steps, at once elsewhere, at once again
    on a second signal; the watchdog stands down once the stop is saved."""
    stop = preemption.StopRequest(grace=0.2)
    with pytest.raises(Preempted, match="stopped by SIGINT outside the training steps"):
        stop.signalled(signal.SIGINT, None)
    stop = preemption.StopRequest(grace=0.2)
    stop.deferring = True
    stop.signalled(signal.SIGINT, None)  # noted: the loops save at their step
    assert stop() == "SIGINT"
    stop.finished.set()  # the checkpoint was saved in time: the watchdog must not end the process
    time.sleep(0.4)
    with pytest.raises(Preempted, match="stopped by a second SIGINT"):
        stop.signalled(signal.SIGINT, None)
