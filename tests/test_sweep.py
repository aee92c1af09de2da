"""`make sweep`: a search space checked like a recipe, trials seeded by their number, a study that a
killed sweep continues and several processes split, and trials the pruner stops at an epoch's end."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.core.errors import PetalsError
from pipeline.core.options import SweepOptions
from pipeline.sweep import space, study
from pipeline.tasks.competitions import load_competition
from tests.conftest import REPO, TINY

OVERRIDES = (*TINY, "augment.where=host", "train.epochs=3")
SPACE = """
[train.lr_max]
low = 1e-4
high = 1e-2
log = true

[model.dropout]
choices = [0.0, 0.3]
"""


@pytest.fixture
def data_dir(tiny_data_dir, tmp_path):
    copy = tmp_path / "data"
    shutil.copytree(tiny_data_dir, copy)
    return copy


def options(data_dir, tmp_path, **given) -> SweepOptions:
    path = tmp_path / "space.toml"
    if not path.exists():
        path.write_text(SPACE)
    return SweepOptions(
        **{
            "data_dir": data_dir, "runs_dir": tmp_path / "runs", "submissions_dir": tmp_path / "subs",
            "recipe": "default", "overrides": OVERRIDES, "backend": "tensorflow", "strategy": "cpu",
            "space": str(path), "trials": 3, **given,
        }
    )  # fmt: skip


@pytest.mark.parametrize(
    ("text", "refused"),
    [
        (
            "[train.lr_maxx]\nlow = 1e-4\nhigh = 1e-2",
            r"\[train\.lr_maxx\] = 0\.0001: --set: unknown key",
        ),
        ("[train.lr_max]\nlow = 1e-2\nhigh = 1e-4", r"\[train\.lr_max\]: low = 0\.01, high = 0\.0001: two"),
        ("[train.lr_max]\nlow = 0.0\nhigh = 1e-2\nlog = true", r"log = true over 0\.0\.\.0\.01"),
        ("[model.dropout]\nchoices = []", r"choices = '\[\]': a non-empty list"),
        ("[model.dropout]\nchoices = [0.1, 'a']", r"plain values of one type"),
        ("[model.dropout]\nlow = 0.0\nhigh = 0.5\nwidth = 2", r"\[model\.dropout\]: width is not one of"),
        ("[train.folds]\nchoices = [2, 3]", r"searches train\.folds: every trial is judged on the same data"),
        (
            "[train.label_smoothing]\nlow = 0.0\nhigh = 1.5",
            r"label_smoothing\] = 1\.5: .*in \[0, 1\)",
        ),
        ("train = 3", r"train = 3: each key is a table"),
        ("[model]", r"no parameter to search"),
    ],
)
def test_a_bad_space_is_one_line_naming_the_file_and_the_key(tmp_path, text, refused):
    from pipeline.tasks import recipe_config

    path = tmp_path / "space.toml"
    path.write_text(text)

    def build(extra):
        return recipe_config.load_config("default", (*OVERRIDES, *extra))

    with pytest.raises(PetalsError, match=refused) as err:
        space.check(space.read_space(path), path, build)
    assert "\n" not in str(err.value) and (str(path) in str(err.value) or "SPACE" in str(err.value))


def test_the_shipped_space_builds_into_the_cpu_recipe_at_every_extreme():
    from pipeline.tasks import recipe_config

    path, folder = space.space_file("1", load_competition("flowers"), "cpu", "cpu")
    assert folder == path.parents[1] and folder.name == "image_classification"  # the recipes folder
    params = space.read_space(path, folder)
    assert {p.key for p in params} >= {"train.lr_max", "train.frozen_epochs", "model.dropout"}
    space.check(params, path, lambda extra: recipe_config.load_config("cpu", extra, "cpu"))
    no_space = r"SPACE=1: recipe .cnn. has no search space.*to start from: .*cpu\.toml"
    with pytest.raises(PetalsError, match=no_space):
        space.space_file("1", load_competition("flowers"), "cnn", "cnn")


def test_a_trials_values_depend_on_its_number_alone():
    import optuna

    def first(seed: int, trials: int) -> list[dict]:
        found = optuna.create_study(sampler=study.sampler(seed), direction="maximize")
        for _ in range(trials):
            trial = found.ask()
            lr = trial.suggest_float("lr", 1e-4, 1e-2, log=True)
            trial.suggest_int("d", 0, 9)
            found.tell(trial, lr)
        return [t.params for t in found.trials]

    assert first(0, 4) == first(0, 4)  # reproducible
    assert first(0, 4)[:2] == first(0, 2)  # trial n's values do not depend on how many follow
    assert first(0, 4) != first(1, 4)  # the seed matters
    assert len({tuple(p.values()) for p in first(0, 8)}) == 8  # no two trials alike


@pytest.mark.parametrize(
    "url", ["sqlite:///x.db; rm -rf ~", "file:///etc/passwd", "postgresql://u@h/db`id`", "x", "ftp://h/db"]
)
def test_a_storage_that_is_no_database_url_is_refused(tmp_path, url):
    with pytest.raises(PetalsError, match=r"STORAGE=.* is not a database URL"):
        study.storage_url(url, tmp_path, "s")


def test_the_default_storage_is_sqlite_inside_the_runs_dir(tmp_path):
    assert study.storage_url(None, tmp_path / "runs", "flowers-cpu-cpu") == (
        f"sqlite:///{(tmp_path / 'runs' / 'sweeps' / 'flowers-cpu-cpu.db').resolve()}"
    )
    given = "postgresql+psycopg2://petals@127.0.0.1:5432/petals"
    assert study.storage_url(given, tmp_path, "s") == given  # a driver named is kept


@pytest.mark.slow
def test_a_pruned_trial_stops_at_its_epochs_end_with_a_checkpoint_there(data_dir, tmp_path):
    import optuna
    import pandas as pd

    from pipeline.core.rundir import RunDir
    from pipeline.stages import sweep

    always = optuna.create_study(pruner=optuna.pruners.ThresholdPruner(upper=-1.0), direction="maximize")
    judged = sweep.Trial(always.ask(), "val_macro_f1", last=3)
    opts = options(data_dir, tmp_path)
    assert sweep._run_trial(opts, load_competition("flowers"), judged) == {}
    assert judged.pruned.startswith("the sweep's pruner (trial 0, step 1")
    (run,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    history = pd.read_csv(RunDir(run).history_file)
    assert history["epoch"].tolist() == [1]  # stopped at the first epoch's end, not a step later
    assert not RunDir(run).finished and Path(RunDir(run).checkpoints).is_dir()


@pytest.mark.slow
@pytest.mark.thorough  # three sweeps in a row: one trial's run is proven above, the count in test_sweep_turns
def test_a_sweep_records_its_trials_and_its_rerun_continues_the_study(data_dir, tmp_path):
    import optuna
    import pandas as pd

    from pipeline.stages import sweep

    first = sweep.sweep(options(data_dir, tmp_path, trials=2))
    assert sum(first["trials"].values()) == 2 and first["best"]["run"]
    again = sweep.sweep(options(data_dir, tmp_path, trials=3))  # the same study: one more trial
    found = optuna.load_study(study_name=again["study"], storage=again["storage"])
    assert len(found.trials) == 3 and [t.number for t in found.trials] == [0, 1, 2]
    assert all(t.state.name in ("COMPLETE", "PRUNED") for t in found.trials)
    board = pd.read_csv(tmp_path / "subs" / "leaderboard-flowers.csv")
    trials = board[board["kind"] == "trial"]
    finished = [t for t in found.trials if t.state.name == "COMPLETE"]
    assert sorted(trials["entry"]) == sorted({t.user_attrs["run"] for t in finished})
    assert set(trials["sweep"]) == {
        f"{again['study']} #{t.number}" for t in finished if "same_as" not in t.user_attrs
    }
    assert again["plots"][0].endswith("-history.png")
    done = sweep.sweep(options(data_dir, tmp_path, trials=3))  # nothing left: no trial runs
    assert len(optuna.load_study(study_name=done["study"], storage=done["storage"]).trials) == 3


@pytest.mark.heavy  # two sweeps training side by side; the count itself: test_sweep_turns.py
@pytest.mark.alone
def test_two_processes_split_one_studys_trials_and_run_none_twice(data_dir, tmp_path):
    import optuna

    opts = options(data_dir, tmp_path, trials=6)  # each process's share outlasts the other's start
    _sweep_processes(opts, data_dir)
    (db,) = (opts.runs_dir / "sweeps").glob("flowers-default-space-*.db")
    _split_and_none_twice(optuna.load_study(study_name=db.stem, storage=f"sqlite:///{db}"), 6)


def _sweep_processes(opts: SweepOptions, data_dir, *more: str) -> list[str]:
    """Two `python -m pipeline sweep` processes on one study, run to their end; their outputs."""
    args = [
        sys.executable, "-m", "pipeline", "sweep", "--space", opts.space, "--trials", str(opts.trials),
        "--data-dir", str(data_dir), "--runs-dir", str(opts.runs_dir), "--submissions-dir",
        str(opts.submissions_dir), "--recipe", "default", "--backend", "tensorflow", "--strategy", "cpu",
        *[arg for value in OVERRIDES for arg in ("--set", value)], *more,
    ]  # fmt: skip
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    both = {"cwd": REPO, "env": env, "stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True}
    procs = [subprocess.Popen(args, **both) for _ in range(2)]
    outputs = [p.communicate(timeout=200)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs[0][-2000:] + outputs[1][-2000:]
    return outputs


def _split_and_none_twice(found, trials: int) -> None:
    assert len(found.trials) == trials and all(t.state.name in ("COMPLETE", "PRUNED") for t in found.trials)
    assert len({t.user_attrs["pid"] for t in found.trials}) == 2  # both processes ran trials
    assert len({tuple(sorted(t.params.items())) for t in found.trials}) == trials  # none twice


@pytest.mark.heavy
@pytest.mark.alone
def test_two_processes_split_a_study_on_a_real_postgresql_server(data_dir, tmp_path, postgresql):
    import optuna

    opts = options(data_dir, tmp_path, trials=6)  # each process's share outlasts the other's start
    _sweep_processes(opts, data_dir, "--storage", postgresql)
    (name,) = optuna.get_all_study_names(storage=postgresql)
    _split_and_none_twice(optuna.load_study(study_name=name, storage=postgresql), 6)


def test_a_sweep_refuses_what_it_cannot_run_before_any_trial(data_dir, tmp_path):
    from pipeline.stages import sweep

    with pytest.raises(PetalsError, match=r"TRIALS=0: a sweep runs at least one trial"):
        sweep.sweep(options(data_dir, tmp_path, trials=0))
    with pytest.raises(PetalsError, match=r"FOLDS=1: cross-validation needs at least 2 folds"):
        sweep.sweep(options(data_dir, tmp_path, folds=1))
    with pytest.raises(PetalsError, match=r"train\.merge_val=true: a trial would keep no val split"):
        sweep.sweep(options(data_dir, tmp_path, overrides=(*OVERRIDES, "train.merge_val=true")))
    with pytest.raises(PetalsError, match=r"SPACE=.*nothing\.toml: no such file"):
        sweep.sweep(dataclasses.replace(options(data_dir, tmp_path), space=str(tmp_path / "nothing.toml")))
    assert not (tmp_path / "runs").exists()


def test_what_the_trials_share_names_the_study(data_dir, tmp_path):
    from pipeline.sweep import setup as setups

    def setup(opts, device):  # as the sweep stage calls it: on the competition it resolved
        return setups.setup(opts, device, load_competition(setups.base_config(opts, device).competition))

    name = setup(options(data_dir, tmp_path), "CPU").name
    assert (
        name.startswith("flowers-default-space-") and name == setup(options(data_dir, tmp_path), "CPU").name
    )
    other = setup(options(data_dir, tmp_path, overrides=(*OVERRIDES, "train.epochs=4")), "CPU").name
    assert other != name  # another SET= is another study, not the first one's trials counted as done
    searched = setup(options(data_dir, tmp_path, overrides=(*OVERRIDES, "model.dropout=0.1")), "CPU").name
    assert searched == name  # a value the space sets in every trial changes nothing the trials share


def test_a_trial_with_the_values_of_another_is_not_trained_twice():
    import optuna

    from pipeline.stages import sweep

    found = optuna.create_study(direction="maximize")
    for _ in range(4):
        found.enqueue_trial({"model.dropout": 0.3})  # four trials drawing the same value

    def drawn():
        trial = found.ask()
        trial.suggest_categorical("model.dropout", [0.0, 0.3])
        return trial

    first = drawn()
    first.set_user_attr("run", "a-run")
    assert sweep._same_values(found, first) is None  # the first of its values: trained
    found.tell(first, 0.5)
    again = drawn()
    assert sweep._same_values(found, again) == 0.5 and again.user_attrs["run"] == "a-run"
    found.tell(again, 0.5)
    other = optuna.create_study(direction="maximize")
    other.enqueue_trial({"model.dropout": 0.0})
    other.enqueue_trial({"model.dropout": 0.0})
    busy = other.ask()
    busy.suggest_categorical("model.dropout", [0.0, 0.3])
    late = other.ask()
    late.suggest_categorical("model.dropout", [0.0, 0.3])
    with pytest.raises(sweep.Duplicate, match=r"trial 1: trial 0 is running the same values"):
        sweep._same_values(other, late)


def shipped_recipes() -> list[tuple[str, str]]:
    from competition.spec import known_competitions
    from pipeline.tasks import recipe_config

    return [
        (competition, recipe)
        for competition in known_competitions()
        for recipe in recipe_config.recipe_names(load_competition(competition))
        if recipe != "default"
    ]


@pytest.mark.parametrize(("competition", "recipe"), shipped_recipes())
def test_every_shipped_recipe_has_a_space_that_builds_or_refuses_with_the_way_out(competition, recipe):
    """`make sweep RECIPE=<recipe> COMPETITION=<competition>`: its space (the competition's or the
    task's) builds into the recipe at every extreme; a recipe without one is one line naming a
    shipped space to start from. The cpu, gpu and tpu recipes (what RECIPE=auto trains) have one."""
    from pipeline.tasks import recipe_config

    try:
        path, folder = space.space_file("1", load_competition(competition), recipe, recipe)
    except PetalsError as err:
        assert recipe not in ("cpu", "gpu", "tpu") and "\n" not in str(err)
        assert "SPACE=path.toml (to start from: " in str(err) and "spaces/" in str(err)
        return
    device = recipe.upper() if recipe in ("cpu", "gpu", "tpu") else "CPU"
    build = lambda extra: recipe_config.load_config(recipe, (f"competition={competition}", *extra), device)  # noqa: E731
    space.check(space.read_space(path, folder), path, build)


def test_a_trials_line_says_the_time_left_for_the_trials_not_ended_at_this_processs_pace():
    import optuna

    from pipeline.stages import sweep as sweep_stage

    found = optuna.create_study()
    found.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=0.5))  # one ended
    assert sweep_stage._time_left(found, 4, []) == ""  # no trial trained here yet: no pace
    assert sweep_stage._time_left(found, 4, [60.0, 120.0]) == "; about 4 min 30 s left (1 min 30 s a trial)"
