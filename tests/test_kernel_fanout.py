"""`make kernel-fanout`: one kernel per fold, through the real `kaggle` client against the loopback
server. Kernels fail, run slowly or complete between two commands; the group the kernels' outputs
assemble is the one the same folds make trained here; Kaggle's limits hold shares back."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from pipeline import cli
from pipeline.core.rundir import RunDir
from pipeline.cv import merge
from pipeline.modeling.inference import Predictions, predict_split
from tests.conftest import TINY, competition_of
from tests.kaggle_server import Behaviour, KaggleTestServer, KernelPlan

pytestmark = pytest.mark.slow  # each test generates kernels (6-9 s each) or trains folds
K = 5
OVERRIDES = [*TINY, "augment.where=host"]
# The kernels are generated at a resolution Kaggle ships (the tiny data's 32 px is not one); what
# they bring back is the fold runs trained here, so the group is theirs either way.
KERNEL_SETS = [a for o in OVERRIDES if not o.startswith("data.image_size") for a in ("--set", o)]
BASE = "petals-fan"


def _fanout(tmp_path, data_dir, *extra: str) -> int:
    return cli.main([
        "kernel", "fanout", "--kernels-dir", str(tmp_path / "kernels"), "--name", BASE, "--recipe", "default",
        "--owner", "petals-user", "--accelerator", "None", "--folds", str(K), "--data-dir", str(data_dir),
        "--runs-dir", str(tmp_path / "runs"), "--submissions-dir", str(tmp_path / "subs"),
        "--poll-seconds", "0.05", *KERNEL_SETS, *extra,
    ])  # fmt: skip


def _kernel(fold: int) -> str:
    return f"petals-user/{BASE}-fold{fold}"


@pytest.fixture
def data_dir(tiny_data_dir, tmp_path):
    return shutil.copytree(tiny_data_dir, tmp_path / "data")


@pytest.fixture
def five_fold_data(small_data_dir, tmp_path):
    """Data every class of which has 5 labelled examples or more (the tiny set's rarest has 2)."""
    return shutil.copytree(small_data_dir, tmp_path / "data")


@pytest.fixture
def trained_here(five_fold_data, tmp_path, cpu):
    """The K folds trained here, fold by fold, each with its val and test predictions saved as a
    FOLDS kernel saves them; the group's metrics and each fold's run."""
    sets = [a for o in OVERRIDES for a in ("--set", o)]
    code = cli.main(["cv", "train", "--folds", str(K), "--data-dir", str(five_fold_data), "--runs-dir",
                     str(tmp_path / "local"), "--submissions-dir", str(tmp_path / "local-subs"),
                     "--recipe", "default", "--strategy", "cpu", *sets])  # fmt: skip
    assert code == 0
    [group] = [p for p in (tmp_path / "local").iterdir() if (p / "oof_predictions.npz").is_file()]
    runs = {}
    folders = [p for p in (tmp_path / "local").iterdir() if (p / "config.json").is_file() and p != group]
    for run in map(RunDir, folders):
        runs[run.read_config().train.fold] = run
        predict_split(run, competition_of(run), five_fold_data, "test", 1, cpu)
    return RunDir(group), runs


def _outputs(run: RunDir, fold: int) -> dict[str, bytes]:
    """What fold `fold`'s kernel leaves: its fold run's files (no weights) and the summary."""
    files = {
        f"{merge.RUNS}/{run.name}/{path.name}": path.read_bytes()
        for path in run.path.iterdir()
        if path.is_file() and not path.name.endswith(".h5") and not path.name.startswith("ckpt")
    }
    summary = {"folds": K, "fold_list": [fold], "tta": 1, "fold_runs": {run.name: "2026-11-27T10:00:00Z"}}
    return {**files, "petals_summary.json": json.dumps(summary).encode()}


@pytest.mark.heavy  # 5 folds trained here on data whose every class has 5 examples: about 3 minutes
@pytest.mark.alone
def test_five_fold_kernels_one_failing_one_slow_make_the_group_trained_here(
    five_fold_data, trained_here, tmp_path, in_kaggle_env, capsys
):
    local_group, runs = trained_here
    plans = {_kernel(f): KernelPlan(versions=[["QUEUED", "RUNNING", "COMPLETE"]], files=_outputs(runs[f], f))
             for f in range(K)}  # fmt: skip
    plans[_kernel(1)].versions = [["RUNNING", "ERROR"], ["RUNNING", "COMPLETE"]]  # fails once
    plans[_kernel(2)].versions = [["RUNNING"]]  # still running when the first command stops
    behaviour = Behaviour(plans=plans)
    with KaggleTestServer(behaviour):
        assert _fanout(tmp_path, five_fold_data, "--concurrent", "3", "--wait-seconds", "8") == 2
        first = capsys.readouterr()
        plans[_kernel(2)].versions = [["COMPLETE"]]  # it completes while no command follows it
        assert _fanout(tmp_path, five_fold_data, "--concurrent", "3") == 0
        second = capsys.readouterr()
    lines = first.out.splitlines()
    assert f"fold 1 ({_kernel(1)}) version 1: error: test kernel failed; to be pushed again" in lines
    assert f"fold 1 ({_kernel(1)}) version 2: pushed again" in lines
    assert "still queued or running" in first.err and "rerun `make kernel-fanout`" in first.err
    # Never more than 3 at once: folds 3 and 4 are pushed only after a kernel ended.
    pushed_at = {f: lines.index(f"fold {f} ({_kernel(f)}) version 1: pushed") for f in range(K)}
    ended = min(i for i, line in enumerate(lines) if "complete; collecting" in line or "error" in line)
    assert max(pushed_at[0], pushed_at[1], pushed_at[2]) < ended < min(pushed_at[3], pushed_at[4])
    assert (
        "kernel-fanout: 5 fold kernel(s): 0 waiting, 0 queued, 1 running, 0 complete, 4 collected, 0 failed"
        in lines
    )
    # The rerun pushes nothing: it collects the kernel that completed meanwhile, and the group assembles.
    assert [p["slug"] for p in behaviour.pushed].count(_kernel(1)) == 2 and len(behaviour.pushed) == K + 1
    assert "pushed" not in second.out
    assert f"fold 2 ({_kernel(2)}) version 1: complete; collecting" in second.out
    assert (
        "kernel-fanout: 5 fold kernel(s): 0 waiting, 0 queued, 0 running, 0 complete, 5 collected, 0 failed"
        in second.out
    )
    state = json.loads((tmp_path / "kernels" / f"{BASE}.fanout.json").read_text())
    assert [s["state"] for s in state["shares"]] == ["collected"] * K

    group = RunDir(tmp_path / "runs" / local_group.name)  # the same group id: same config, data, folds
    ours, theirs = (Predictions.load(g.path / "oof_predictions.npz") for g in (group, local_group))
    assert ours.ids.tolist() == theirs.ids.tolist()
    assert np.array_equal(ours.probabilities, theirs.probabilities)
    assert group.metrics()["cv_score"] == local_group.metrics()["cv_score"]
    assert group.metrics()["fold_table"] == local_group.metrics()["fold_table"]


@pytest.mark.thorough  # a fan-out repeated over two commands: the failing-twice and quota tests prove one
def test_two_fold_kernels_across_two_commands_assemble_their_group(
    data_dir, spec, tmp_path, in_kaggle_env, capsys
):
    """The same states on two folds whose outputs are written directly (no training): fold 0 fails
    once and completes when pushed again; fold 1 is still running when the first command stops and
    complete when the second asks, which collects it without a push and assembles the group."""
    from pipeline.data import folds
    from pipeline.tasks.recipe_config import load_config
    from tests import test_kernel_folds as made

    table = folds.fold_table(data_dir, spec, load_config(overrides=made.OVERRIDES))
    plans = {}
    for fold in range(made.K):
        output = made.kernel_output(tmp_path / f"made-{fold}", data_dir, spec, table, [fold])
        files = {p.relative_to(output).as_posix(): p.read_bytes() for p in output.rglob("*") if p.is_file()}
        plans[_kernel(fold)] = KernelPlan(files=files)
    plans[_kernel(0)].versions = [["RUNNING", "ERROR"], ["QUEUED", "COMPLETE"]]
    plans[_kernel(1)].versions = [["QUEUED", "RUNNING"]]
    behaviour = Behaviour(plans=plans)
    # Fold 0's five states take a handful of rounds; 10 s leaves a loaded machine room for them.
    args = ("--folds", str(made.K), "--wait-seconds", "10")
    with KaggleTestServer(behaviour):
        assert _fanout(tmp_path, data_dir, *args) == 2
        first = capsys.readouterr()
        plans[_kernel(1)].versions = [["COMPLETE"]]
        assert _fanout(tmp_path, data_dir, *args) == 0
        second = capsys.readouterr()
    said = [line for line in first.out.splitlines() if line.startswith(("fold ", "kernel-fanout:"))]
    assert said[:4] == [
        f"fold 0 ({_kernel(0)}) version 1: pushed",
        f"fold 1 ({_kernel(1)}) version 1: pushed",
        "kernel-fanout: 2 fold kernel(s): 0 waiting, 2 queued, 0 running, 0 complete, 0 collected, 0 failed",
        f"fold 0 ({_kernel(0)}) version 1: running",
    ]
    assert f"fold 0 ({_kernel(0)}) version 1: error: test kernel failed; to be pushed again" in first.out
    assert f"fold 0 ({_kernel(0)}) version 2: complete; collecting" in first.out
    assert "fold 0: from kernel petals-user/petals-fan-fold0" in first.out
    assert "1 kernel(s) still queued or running, 0 waiting, after 10 s" in first.err
    assert [p["slug"] for p in behaviour.pushed] == [_kernel(0), _kernel(1), _kernel(0)]
    assert "pushed" not in second.out and "CV macro-F1" in second.out
    group = [p for p in (tmp_path / "runs").iterdir() if (p / "oof_predictions.npz").is_file()]
    assert len(group) == 1 and RunDir(group[0]).metrics()["fold_table"] == table.digest


def test_a_kernel_failing_twice_is_named_and_a_rerun_pushes_it_again(
    data_dir, tmp_path, in_kaggle_env, capsys
):
    plans = {_kernel(0): KernelPlan(versions=[["ERROR"]], failure_message="CUDA out of memory")}
    behaviour = Behaviour(plans=plans)
    with KaggleTestServer(behaviour):
        assert _fanout(tmp_path, data_dir, "--fold", "0") == 2
        out, err = capsys.readouterr()
        assert f"fold 0 ({_kernel(0)}) version 2: error: CUDA out of memory; failed twice" in out
        said = f"1 fold kernel(s) not collected: fold 0 ({_kernel(0)}) version 2: error: CUDA out of memory"
        assert said in err
        assert [p["slug"] for p in behaviour.pushed] == [_kernel(0)] * 2
        state = json.loads((tmp_path / "kernels" / f"{BASE}.fanout.json").read_text())
        assert [(s["number"], s["state"], s["pushes"]) for s in state["shares"]] == [(0, "failed", 2)]
        plans[_kernel(0)].versions.append(["COMPLETE"])  # fixed: its third version completes
        assert _fanout(tmp_path, data_dir, "--fold", "0") == 2  # its output is no fold run
        out = capsys.readouterr().out
    assert (
        f"fold 0 ({_kernel(0)}) version 2: failed last time (error: CUDA out of memory); pushed again" in out
    )
    assert f"version 3: its output was not collected: kernel {_kernel(0)} left no petals_summary.json" in out
    assert f"fold 0 ({_kernel(0)}) version 3: pushed" in out and len(behaviour.pushed) == 3


@pytest.mark.thorough  # a further limit of the fan-out: the session limit below and the failing-twice test
def test_the_weekly_quota_holds_back_what_it_cannot_cover(data_dir, tmp_path, in_kaggle_env, capsys):
    """A GPU fan-out with 2 h of the weekly quota unreserved and 3 h kernels pushes nothing."""
    behaviour = Behaviour(quota={"gpu": (20.0, 8.0, 30.0), "tpu": (0.0, 0.0, 20.0)})
    with KaggleTestServer(behaviour):
        code = _fanout(
            tmp_path, data_dir, "--accelerator", "NvidiaTeslaT4", "--timeout", str(3 * 3600), "--fold", "3"
        )
    assert code == 2 and behaviour.pushed == []
    err = capsys.readouterr().err
    assert (
        "kernel-fanout: fold 3 wait for the weekly GPU quota: 2.0 h unreserved, each kernel "
        "may take its 3.0 h limit (TIMEOUT= lowers it); it resets 2026-11-30" in err
    )
    # A fan-out of other folds (FOLD=1) keeps the shares of those it was not asked for.
    with KaggleTestServer(behaviour):
        code = _fanout(
            tmp_path, data_dir, "--accelerator", "NvidiaTeslaT4", "--timeout", str(3 * 3600), "--fold", "1"
        )
    state = json.loads((tmp_path / "kernels" / f"{BASE}.fanout.json").read_text())
    assert code == 2 and [(s["number"], s["state"]) for s in state["shares"]] == [
        (1, "waiting"),
        (3, "waiting"),
    ]


def test_a_push_past_kaggles_session_limit_waits_and_a_bad_state_file_is_one_line(
    data_dir, tmp_path, in_kaggle_env, capsys
):
    """A push refused for the session count waits (other kernels of the user's hold the sessions):
    at the wait's end, one line; followed longer, it is tried again each round until Kaggle takes
    it (counted in refusals, not seconds: a loaded machine makes a round slower, not fewer)."""
    behaviour = Behaviour(push_errors=["Maximum batch CPU session count of 5 reached."] * 3)
    with KaggleTestServer(behaviour):
        assert _fanout(tmp_path, data_dir, "--fold", "0", "--wait-seconds", "0") == 2
        err = capsys.readouterr().err
        assert "0 kernel(s) still queued or running, 1 waiting, after 0 s; Kaggle holds fold 0 back" in err
        assert "session count of 5 reached" in err and behaviour.pushed == []
        assert len(behaviour.push_errors) == 2  # one refusal, then the wait was over
        assert _fanout(tmp_path, data_dir, "--fold", "0") == 2  # pushed once a session freed up
    assert behaviour.push_errors == [] and [p["slug"] for p in behaviour.pushed] == [_kernel(0)]
    assert "left no petals_summary.json" in capsys.readouterr().out  # it completed with no output
    state = tmp_path / "kernels" / f"{BASE}.fanout.json"
    settings = {k: v for k, v in json.loads(state.read_text()).items() if k != "shares"}
    overrides = [o for o in KERNEL_SETS if o != "--set"]
    assert settings == {"folds": K, "recipe": "default", "overrides": overrides, "accelerator": "None",
                        "timeout": None, "tta": 1}  # fmt: skip
    state.write_text(json.dumps({**settings, "shares": [{"number": 0, "name": "../x", "state": "waiting"}]}))
    with KaggleTestServer(Behaviour()):
        assert _fanout(tmp_path, data_dir, "--fold", "0") == 2
    assert "share name '../x' is not a plain name" in capsys.readouterr().err
    state.write_text(json.dumps({**settings, "folds": 3, "shares": []}))
    assert _fanout(tmp_path, data_dir) == 2
    assert "a fan-out of folds '3', not '5'; move it aside" in capsys.readouterr().err
    state.write_text(json.dumps({**settings, "recipe": "cpu", "shares": []}))
    assert _fanout(tmp_path, data_dir) == 2
    assert "a fan-out of recipe 'cpu', not 'default'; move it aside" in capsys.readouterr().err
    state.write_text("[" * 100_000)  # the state file is a foreign file: nested past reason
    assert _fanout(tmp_path, data_dir) == 2
    assert "nested deeper than 32 levels" in capsys.readouterr().err
    state.unlink()
    os.mkfifo(state)  # a pipe: read, it would block forever
    assert _fanout(tmp_path, data_dir) == 2
    assert "is not a regular file" in capsys.readouterr().err


def test_a_state_file_written_before_trials_could_be_fanned_out_still_reads(data_dir, tmp_path, capsys):
    """Its shares named their number `fold`: a fold collected then is not pushed again."""
    state = tmp_path / "kernels" / f"{BASE}.fanout.json"
    state.parent.mkdir()
    overrides = [o for o in KERNEL_SETS if o != "--set"]
    settings = {"folds": K, "recipe": "default", "overrides": overrides, "accelerator": "None",
                "timeout": None, "tta": 1}  # fmt: skip
    share = {"fold": 0, "name": f"{BASE}-fold0", "kernel": _kernel(0), "state": "collected", "pushes": 1,
             "version": 1, "why": ""}  # fmt: skip
    state.write_text(json.dumps({**settings, "shares": [share]}))
    assert _fanout(tmp_path, data_dir, "--fold", "0") == 0
    said = "1 fold kernel(s): 0 waiting, 0 queued, 0 running, 0 complete, 1 collected"
    assert said in capsys.readouterr().out
    assert json.loads(state.read_text())["shares"][0]["number"] == 0
