"""`--trials N` is N across processes: each counts and starts its next trial in the study's turn."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from tests.conftest import REPO

STUDIES, TRIALS = 6, 3

# Two processes start each study together and their trials take as long, so both end their first
# trial at once and both count one left: without the turn both would start it (4 trials for 3).
SHARE = """
import sys, time
from pathlib import Path
import optuna
from pipeline.sweep import turns
optuna.logging.set_verbosity(optuna.logging.WARNING)
url, folder, me, other = sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4]
def objective(trial):
    trial.set_user_attr("process", me)
    time.sleep(0.05)
    return trial.suggest_float("x", 0.0, 1.0)
for k in range(int(sys.argv[5])):
    found = optuna.load_study(study_name=f"turns-{k}", storage=url)
    (folder / f"ready-{me}-{k}").touch()
    while not (folder / f"ready-{other}-{k}").exists():
        time.sleep(0.001)
    turns.run_share(found, objective, int(sys.argv[6]), None, url)
"""


def _two_shares(url: str, tmp_path) -> list[list]:
    """Each study's trials, after two processes ran their shares of them."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for k in range(STUDIES):
        optuna.create_study(study_name=f"turns-{k}", storage=url)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SHARE, url, str(tmp_path), me, other, str(STUDIES), str(TRIALS)],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        for me, other in ("ab", "ba")
    ]  # fmt: skip
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    return [optuna.load_study(study_name=f"turns-{k}", storage=url).trials for k in range(STUDIES)]


def _exactly_the_trials_asked(studies: list[list]) -> None:
    assert [len(trials) for trials in studies] == [TRIALS] * STUDIES, f"trials run for --trials {TRIALS}"
    assert all(t.state.name == "COMPLETE" for trials in studies for t in trials)
    assert {t.user_attrs["process"] for trials in studies for t in trials} == {"a", "b"}  # both ran
    # and side by side: the turn is let go as a trial starts, not held through it
    assert any(
        one.datetime_start < other.datetime_complete and other.datetime_start < one.datetime_complete
        for trials in studies
        for one in trials
        for other in trials
        if one.user_attrs["process"] == "a" and other.user_attrs["process"] == "b"
    )


@pytest.mark.slow
def test_two_processes_ending_trials_together_run_exactly_the_trials_asked_on_sqlite(tmp_path):
    _exactly_the_trials_asked(_two_shares(f"sqlite:///{tmp_path / 'study.db'}", tmp_path))


@pytest.mark.heavy
@pytest.mark.alone
def test_two_processes_ending_trials_together_run_exactly_the_trials_asked_on_postgresql(
    tmp_path, postgresql
):
    _exactly_the_trials_asked(_two_shares(postgresql, tmp_path))


def test_a_processs_turn_is_let_go_when_it_dies(tmp_path):
    """A sweep killed while it held the turn leaves no lock: the next process takes it at once."""
    from pipeline.sweep import turns

    url = f"sqlite:///{tmp_path / 'study.db'}"
    hold = f"from pipeline.sweep import turns\nimport time\nwith turns.turns({url!r}, 's') as t:\n"
    hold += "    t.take(); print('held', flush=True); time.sleep(60)"
    holder = subprocess.Popen([sys.executable, "-c", hold], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    holder.kill()
    holder.wait(timeout=30)
    taken = threading.Event()

    def take() -> None:
        with turns.turns(url, "s") as turn:
            turn.take()
            taken.set()

    threading.Thread(target=take, daemon=True).start()
    assert taken.wait(timeout=30), "the dead process's turn was never let go"


def test_a_database_that_fails_under_the_turn_is_one_line_naming_it(tmp_path):
    import socket

    from pipeline.core.errors import PetalsError
    from pipeline.sweep import turns

    pytest.importorskip("psycopg2")
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"postgresql+psycopg2://me:secret@127.0.0.1:{port}/petals"
    with pytest.raises(PetalsError) as raised, turns.turns(url, "s") as turn:
        turn.take()
    line = str(raised.value)
    where = f"postgresql+psycopg2://me:***@127.0.0.1:{port}/petals"
    assert line.startswith(f"study s in {where}: its lock fails (")
    assert "\n" not in line and "secret" not in line


def test_a_trial_whose_process_died_is_not_counted_as_running(tmp_path):
    """Its heartbeat stopped: the turn marks it failed before counting, and its place is run here
    (counted as running, the share would end at once with the study one trial short)."""
    import warnings

    import optuna

    from pipeline.sweep import turns

    url = f"sqlite:///{tmp_path / 'study.db'}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        storage = optuna.storages.RDBStorage(url, heartbeat_interval=1, grace_period=1)
    found = optuna.create_study(study_name="s", storage=storage)
    with warnings.catch_warnings():  # Optuna warns of a heartbeat outside optimize: as a dead one was
        warnings.filterwarnings("ignore", "Heartbeat of storage", UserWarning)
        dead = found.ask()  # a process that asked, beat once and was killed
    storage.record_heartbeat(dead._trial_id)
    time.sleep(2.5)
    turns.run_share(found, lambda trial: trial.suggest_float("x", 0.0, 1.0), 1, None, url)
    assert [t.state.name for t in found.trials] == ["FAIL", "COMPLETE"]


def _study(tmp_path):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    return optuna.create_study(study_name="s", storage=url), url


def test_trials_that_never_score_a_number_stop_the_sweep_in_one_line(tmp_path):
    """Optuna fails a trial that returns nan and the count of trials run leaves it out: without a
    limit, a recipe that diverges at every value drawn would be trained again and again, forever."""
    from pipeline.core.errors import PetalsError
    from pipeline.sweep import turns

    found, url = _study(tmp_path)
    with pytest.raises(PetalsError) as raised:
        turns.run_share(found, lambda trial: trial.suggest_float("x", 0.0, 1.0) * float("nan"), 20, None, url)
    assert [t.state.name for t in found.trials] == ["FAIL"] * turns.GIVE_UP
    line = str(raised.value)
    assert line.startswith(f"study s: {turns.GIVE_UP} trials in a row (0, 1, 2, 3, 4) scored no number")
    assert "\n" not in line
    # a rerun (after a fix) tries again; with a recipe that scores, its trials run
    turns.run_share(found, lambda trial: 1.0, 2, None, url)
    assert [t.state.name for t in found.trials] == ["FAIL"] * turns.GIVE_UP + ["COMPLETE"] * 2


def test_a_trial_that_scores_no_number_now_and_then_is_replaced_not_given_up_on(tmp_path):
    """A scored or pruned trial breaks the run of failures; a trial failed for another reason (a
    killed process, values another process runs: an exception the sweep catches) neither breaks
    nor lengthens it. The trials asked are all run."""
    import optuna

    from pipeline.sweep import turns

    found, url = _study(tmp_path)
    nan_at = {0, 1, 2, 3, 6, 8, 9, 10, 11}  # 4 in a row, then 4 again: never GIVE_UP

    def objective(trial):
        if trial.number == 4:
            raise KeyError("caught")  # had it counted as no number, 5 in a row
        if trial.number == 5:
            raise optuna.TrialPruned()  # had it not broken the run, trials 0-3 and 6 are 5 in a row
        return float("nan") if trial.number in nan_at else 0.5

    turns.run_share(found, objective, 4, None, url, catch=(KeyError,))
    states = [t.state.name for t in found.trials]
    assert states == ["FAIL"] * 5 + ["PRUNED", "FAIL", "COMPLETE"] + ["FAIL"] * 4 + ["COMPLETE"] * 2


def test_a_killed_trials_values_are_run_again_so_its_run_resumes(tmp_path, monkeypatch):
    """A trial whose process was killed (its heartbeat stopped) is failed and its values queued
    again: the next trial takes them, and with them the same run (an id of its config), which
    resumes from its checkpoint instead of being left behind for values drawn anew."""
    import warnings

    import optuna

    from pipeline.sweep import study, turns

    monkeypatch.setattr(study, "HEARTBEAT", 1)
    monkeypatch.setattr(study, "GRACE", 1)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    found = study.open_study("s", url, "maximize", 0, "none")
    with warnings.catch_warnings():  # Optuna warns of a heartbeat outside optimize: as a dead one was
        warnings.filterwarnings("ignore", "Heartbeat of storage", UserWarning)
        dead = found.ask({"x": optuna.distributions.FloatDistribution(0.0, 1.0)})
    found._storage.record_heartbeat(dead._trial_id)
    time.sleep(2.5)
    drawn = []
    turns.run_share(
        found, lambda trial: drawn.append(trial.suggest_float("x", 0.0, 1.0)) or 1.0, 1, None, url
    )
    assert [t.state.name for t in found.trials] == ["FAIL", "COMPLETE"] and drawn == [dead.params["x"]]


def test_a_trial_stopped_by_a_signal_queues_its_values_again(tmp_path, monkeypatch):
    """SIGTERM or the time limit stops the sweep: the trial fails (the sweep stops), and the rerun's
    next trial takes its values, so its run resumes rather than staying at the epoch it was stopped."""
    import optuna

    from pipeline.core.options import SweepOptions
    from pipeline.modeling.preemption import Preempted
    from pipeline.stages import sweep as sweep_stage
    from pipeline.stages import train as train_stage

    found, _ = _study(tmp_path)
    trial = found.ask({"x": optuna.distributions.FloatDistribution(0.0, 1.0)})

    def stopped(*_, **__):
        raise Preempted("SIGTERM")

    monkeypatch.setattr(train_stage, "train", stopped)
    judged = sweep_stage.Trial(trial, "val_macro_f1", last=2)
    with pytest.raises(Preempted):
        sweep_stage._run_trial(SweepOptions(), None, judged)
    (queued,) = found.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert queued.system_attrs["fixed_params"] == trial.params  # what the next trial suggests
