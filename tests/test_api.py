"""`pipeline.api`: the chain as typed functions, and the command line as a thin driver over them."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from pipeline import api, cli
from pipeline.core.errors import PetalsError
from tests.conftest import REPO, TINY


@pytest.mark.slow  # the chain
def test_the_chain_runs_through_the_api(tiny_data_dir, tmp_path, monkeypatch, capsys):
    """train -> evaluate -> predict -> submit's dry run, in one process, with no command line."""
    home = tmp_path / "home"  # no credentials: submit checks the file and says what it would send
    home.mkdir()
    for name, value in {"HOME": str(home), "KAGGLE_CONFIG_DIR": str(home / "kaggle")}.items():
        monkeypatch.setenv(name, value)
    for name in ("KAGGLE_USERNAME", "KAGGLE_KEY", "KAGGLE_API_TOKEN"):
        monkeypatch.setenv(name, "")
    where = {"data_dir": tiny_data_dir, "runs_dir": tmp_path / "runs", "strategy": "cpu"}
    config = {"recipe": "default", "overrides": (*TINY, "train.epochs=1")}

    metrics = api.train(api.TrainOptions(**where, **config))
    assert 0.0 <= metrics["val_macro_f1"] <= 1.0 and metrics["epochs"] == 1
    assert api.train(api.TrainOptions(**where, **config)) is None  # finished: nothing to do

    scoring = api.ScoreOptions(**where, **config, submissions_dir=tmp_path / "subs")
    evaluation = api.evaluate(scoring)
    assert evaluation["val_macro_f1"] == pytest.approx(metrics["val_macro_f1"], abs=1e-6)
    path = api.predict(scoring)
    [run] = [p.name for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    assert path == tmp_path / "subs" / f"{run}.csv"
    api.submit(api.SubmitOptions(data_dir=tiny_data_dir, submissions_dir=tmp_path / "subs"))
    assert f"DRY RUN, NOT UPLOADED: would upload {path}" in capsys.readouterr().out


def test_an_api_error_is_one_line_the_command_line_prints(tmp_path):
    with pytest.raises(PetalsError, match="not one of this competition's"):
        api.fetch("flowers", api.FetchOptions(data_dir=tmp_path / "data", slug="no-such-slug"))
    with pytest.raises(PetalsError, match="no flowers submission CSV"):
        api.submit(api.SubmitOptions(data_dir=tmp_path, submissions_dir=tmp_path))


@pytest.mark.parametrize(
    ("argv", "module", "function", "expected"),
    [
        (
            ["fetch", "--data-dir", "d", "--source", "synthetic", "--sizes", "64", "--competition", "imdb"],
            "fetch",
            "fetch_competition",
            ("imdb", api.FetchOptions(source="synthetic", data_dir=Path("d"), sizes=(64,))),
        ),
        (
            ["train", "--data-dir", "d", "--set", "seed=1", "--set", "train.epochs=2", "--time-limit", "60"],
            "train",
            "train",
            (api.TrainOptions(data_dir=Path("d"), overrides=("seed=1", "train.epochs=2"), time_limit=60.0),),
        ),
        (
            ["evaluate", "--run", "r", "--tta", "4", "--strategy", "cpu"],
            "evaluate",
            "evaluate_run",
            (api.ScoreOptions(run_id="r", tta=4, strategy="cpu"),),
        ),
        (
            ["predict", "--recipe", "cpu", "--submissions-dir", "s"],
            "predict",
            "predict",
            (api.ScoreOptions(recipe="cpu", submissions_dir=Path("s")),),
        ),
        (
            ["cv", "train", "--folds", "5", "--fold", "0,2", "--choose", "1"],
            "cv",
            "train",
            (api.CVOptions(folds=5, fold_list=(0, 2), choose="1"),),
        ),
        (
            ["cv", "evaluate", "--folds", "3", "--set", "seed=1"],
            "cv",
            "evaluate",
            (api.CVOptions(folds=3, overrides=("seed=1",)),),
        ),
        (
            ["cv", "predict", "--folds", "5", "--refit", "--tta", "2"],
            "cv",
            "predict",
            (api.CVOptions(folds=5, refit=True, tta=2),),
        ),
        (
            ["ensemble", "--runs", "a", "b", "--weights", "0.6", "0.4", "--name", "e"],
            "ensemble",
            "ensemble",
            (api.EnsembleOptions(runs=("a", "b"), weights=(0.6, 0.4), name="e"),),
        ),
        (
            ["submit", "--competition", "cassava", "--force", "--poll-seconds", "5"],
            "submit",
            "submit",
            (api.SubmitOptions(competition="cassava", force=True, poll_seconds=5.0),),
        ),
    ],
)
def test_each_stage_command_line_calls_the_api_function_with_typed_options(
    argv, module, function, expected, monkeypatch
):
    """The command line only parses: what it passes on is the options a Python caller would."""
    import importlib

    stage = importlib.import_module(f"pipeline.stages.{module}")
    calls, passed = [], []

    def called(*arguments, **named):
        calls.append(arguments)
        passed.append(named)

    monkeypatch.setattr(stage, function, called)
    assert cli.main(["--quiet", *argv]) == 0
    # Beside the options, only the competition the small-data decision resolved (or None) is passed.
    from pipeline.tasks.competitions import Competition

    assert all(set(named) <= {"competition"} for named in passed), passed
    assert all(isinstance(named.get("competition"), Competition | type(None)) for named in passed)
    # --quiet draws no progress (a bar or lines): the one option the command line sets beyond the given.
    quiet = tuple(
        dataclasses.replace(o, progress=False) if isinstance(o, api.TrainOptions) else o for o in expected
    )
    assert calls == [quiet]


@pytest.mark.parametrize(
    ("argv", "cls", "given"),
    [
        (["fetch"], api.FetchOptions, {}),
        (["train"], api.TrainOptions, {}),
        (["evaluate"], api.ScoreOptions, {}),
        (["predict"], api.ScoreOptions, {}),
        (["cv", "train", "--folds", "5"], api.CVOptions, {"folds": 5}),
        (["ensemble", "--runs", "a", "b"], api.EnsembleOptions, {"runs": ("a", "b")}),
        (["submit"], api.SubmitOptions, {}),
    ],
)
def test_a_command_line_that_says_nothing_gives_the_options_defaults(argv, cls, given):
    """Each default has one home, the options class: the command line's agree with it."""
    from pipeline.core import options

    args = cli.build_parser(only=argv[0]).parse_args(argv)
    assert options.from_args(cls, args) == cls(**given)


def test_cv_and_ensemble_refuse_bad_options_given_in_python_in_one_line(tmp_path):
    """What argparse checked on the command line, the functions check for a Python caller."""
    with pytest.raises(PetalsError, match="FOLDS=1: cross-validation needs at least 2 folds"):
        api.cv_train(api.CVOptions(folds=1, data_dir=tmp_path))
    with pytest.raises(PetalsError, match="--method median: one of equal, search, stack"):
        api.ensemble(api.EnsembleOptions(runs=("a", "b"), method="median"))
    with pytest.raises(PetalsError, match="--weights 1 -1: need weights >= 0"):
        api.ensemble(api.EnsembleOptions(runs=("a", "b"), weights=(1.0, -1.0)))


def test_the_kernel_runs_the_chain_through_the_api_not_argv_lists():
    """One chain: the generated kernel calls `pipeline.api`, as the command line does."""
    tree = ast.parse((REPO / "pipeline/kernels/script/main.py").read_text())
    called = {
        f"{node.func.value.id}.{node.func.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
    }
    assert "cli.main" not in called
    used = {
        f"api.{node.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "api"
    }
    assert {"api.fetch", "api.train", "api.evaluate", "api.predict"} <= used


def test_importing_the_api_imports_no_engine():
    from tests.conftest import run_python

    done = run_python(
        """
        import sys
        from pipeline import api
        print(any(engine in sys.modules for engine in ("tensorflow", "jax", "keras")))
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "False"
