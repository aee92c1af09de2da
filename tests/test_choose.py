"""CV chooses between a recipe's candidates: every candidate a CV group on the same fold table, the
winner by the one-standard-error rule, and evaluate and predict take the winner's group."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest

from pipeline import api
from pipeline.core import foreign_files
from pipeline.core.errors import PetalsError
from pipeline.core.rundir import RunDir
from pipeline.cv import choose
from pipeline.stages import cv as cv_stage
from tests.conftest import REPO, run_cli
from tests.test_cv import OVERRIDES, cv_args, options


@pytest.fixture
def data_dir(tiny_data_dir, tmp_path):
    copy = tmp_path / "data"
    shutil.copytree(tiny_data_dir, copy)
    return copy


def write(tmp_path, text: str):
    path = tmp_path / "candidates.toml"
    path.write_text(text)
    return path


def test_the_first_candidate_within_one_standard_error_of_the_best_wins():
    # Five folds with a spread of 0.05: one standard error is 0.05 / sqrt(5) = 0.0224.
    rows = [{"score": 0.90, "spread": 0.05}, {"score": 0.94, "spread": 0.05}]
    assert choose.pick(rows, 5, greater_is_better=True) == 1  # 0.04 better: more than one error
    rows[1]["score"] = 0.92
    assert choose.pick(rows, 5, greater_is_better=True) == 0  # 0.02 better: within it, the simpler
    rows = [{"score": 0.30, "spread": 0.01}, {"score": 0.20, "spread": 0.01}, {"score": 0.25, "spread": 0.0}]
    assert choose.pick(rows, 4, greater_is_better=False) == 1  # a loss: lower is better


def test_a_candidate_is_judged_at_its_schedules_end_not_at_its_luckiest_epoch():
    import pandas as pd

    from pipeline.cv.group import last_scores

    # Two folds whose best epochs (0.9, 0.8) are not their last (0.6, 0.7): the choice sees the last.
    histories = [
        pd.DataFrame({"epoch": [1, 2, 3], "val_macro_f1": [0.9, 0.5, 0.6]}),
        pd.DataFrame({"epoch": [1, 2, 3], "val_macro_f1": [0.4, 0.8, 0.7]}),
    ]
    assert last_scores(histories, "val_macro_f1") == [0.6, 0.7]
    score, spread = choose.judged({"fold_scores_last": [0.6, 0.7], "cv_score": 0.85})
    assert score == pytest.approx(0.65) and spread == pytest.approx(0.0707, abs=1e-4)
    unscored = [pd.DataFrame({"epoch": [1], "val_macro_f1": [float("nan")]})]
    assert last_scores(unscored, "val_macro_f1") is None
    with pytest.raises(PetalsError, match=r"scored no epoch on val \(train\.val_every\)"):
        choose.judged({"fold_scores_last": None})


def test_the_shipped_candidates_are_valid_configs_of_their_recipe(data_dir, tmp_path):
    from pipeline.tasks import recipe_config

    path = REPO / "pipeline/tasks/recipes/image_classification/candidates/cpu.toml"
    listed = choose.read_candidates(path)
    assert [c.name for c in listed] == ["trio", "recipe"]  # the simplest first
    for candidate in listed:
        config = recipe_config.load_config("cpu", [*candidate.overrides, "train.folds=5"], device="cpu")
        assert config.train.feature_cache
    trio = recipe_config.load_config("cpu", listed[0].overrides, device="cpu")
    assert trio.train.head_solver == "logistic" and trio.train.frozen_epochs == trio.train.epochs == 1
    assert trio.model.backbone == "efficientnet-lite-trio-taps" and trio.data.image_size == 260


@pytest.mark.parametrize(
    "text, message",
    [
        ("[a.train]\nepochs = 1\n", r"1 candidate\(s\); CV chooses between two or more"),
        ("[a.train]\nepochs = 1\n[b.train]\nepoch = 2\n", r"candidates\.toml \[b\]: .*train\.epoch"),
        (
            "[a.train]\nepochs = 1\n[b.train]\nepochs = [1, 2]\n",
            r"\[b\]: train\.epochs = \[1, 2\]: a candidate",
        ),
        ("a = 1\n[b]\n", r"a = 1: each candidate is a table"),
        ("[a\n", r"candidates\.toml: not valid TOML"),
        (
            "[a.train]\nepochs = 1\n[b.train]\nfold_seed = 3\n",
            r"\[b\]: sets train\.fold_seed: every candidate",
        ),
        (
            "[a]\ncompetition = 'imdb'\n[b]\n",
            r"\[a\]: sets competition: every candidate is judged on the same",
        ),
    ],
)
def test_a_candidates_file_that_cannot_be_one_is_refused_in_one_line(data_dir, tmp_path, text, message):
    opts = options(data_dir, tmp_path, choose=str(write(tmp_path, text)))
    with pytest.raises(PetalsError, match=message):
        choose.train(opts, cv_stage.competition_of(opts), cv_stage.train_folds)
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").glob("*/metrics.json"))


def train_candidates(opts):
    """`choose.train` as the CV stage calls it: on the competition it resolved for the options."""
    return choose.train(opts, cv_stage.competition_of(opts), cv_stage.train_folds)


def test_choose_needs_a_file_or_a_recipe_that_has_one(data_dir, tmp_path):
    with pytest.raises(
        PetalsError, match=r"CHOOSE=1: recipe 'default' has no candidates .*CHOOSE=path\.toml"
    ):
        train_candidates(options(data_dir, tmp_path, choose="1"))
    with pytest.raises(PetalsError, match=r"CHOOSE=.*nothere\.toml: no such file"):
        train_candidates(options(data_dir, tmp_path, choose=str(tmp_path / "nothere.toml")))
    big = tmp_path / "big.toml"  # a shared competition folder's file: its size is read before it is
    big.write_bytes(b"#" * (foreign_files.MAX_BYTES + 1))
    with pytest.raises(PetalsError, match=r"candidates file 'big\.toml' is larger than 1048576 bytes"):
        choose.read_candidates(big)


# On the feature cache, cut where both candidates cut: the frozen bottom runs once for the two.
CACHED = ("train.feature_cache=true", "train.unfrozen_layers=4", "train.feature_views=2")


@pytest.mark.slow
@pytest.mark.heavy  # a whole chain (`make test-heavy`)
def test_cv_chooses_a_candidate_and_predict_submits_its_group(data_dir, tmp_path):
    candidates = write(tmp_path, "[short.train]\nepochs = 1\n\n[recipe]\n")
    chosen = ("--choose", str(candidates), *[a for o in CACHED for a in ("--set", o)])
    # In this process where the command line adds nothing: each command is a fresh TensorFlow, and
    # six of them took this test past its timeout on a loaded machine.
    same = options(data_dir, tmp_path, choose=str(candidates), overrides=(*OVERRIDES, *CACHED))
    with pytest.raises(PetalsError, match="no choice yet; train the candidates first"):
        api.cv_predict(same)

    share = run_cli(*cv_args("train", data_dir, tmp_path, *chosen, "--fold", "0"))
    assert share.returncode == 0 and "no choice made" in share.stderr, share.stderr[-2000:]
    assert len(list((tmp_path / "runs").glob("*/metrics.json"))) == 2  # fold 0 of each candidate
    assert not list((tmp_path / "runs").glob("choose-*/choice.json"))
    trained = run_cli(*cv_args("train", data_dir, tmp_path, *chosen))
    assert trained.returncode == 0, trained.stderr[-2000:]
    passes = (share.stderr + trained.stderr).count("train: cached pooled features:")
    assert passes == 1  # one pass below the cut for both candidates' four folds
    assert not list((tmp_path / "runs").glob("features-*"))  # and gone once the choice is made
    (place,) = (tmp_path / "runs").glob("choose-default-*")
    choice = RunDir(place).read_json(choose.FILE)
    rows = {row["candidate"]: row for row in choice["rows"]}
    assert list(rows) == ["short", "recipe"]
    runs = tmp_path / "runs"
    groups = {name: RunDir(runs / row["group"]) for name, row in rows.items()}
    assert groups["short"].name != groups["recipe"].name
    for name, group in groups.items():  # each a CV group of its own, on the one fold table
        metrics = group.metrics()
        assert metrics["cv_score"] == rows[name]["cv_score"] and metrics["folds"] == 2
        ends = [
            pd.read_csv(RunDir(runs / run).history_file).iloc[-1] for run in metrics["fold_runs"].values()
        ]
        assert rows[name]["score"] == pytest.approx(sum(end["val_macro_f1"] for end in ends) / 2)
    assert len({g.metrics()["fold_table"] for g in groups.values()}) == 1
    assert groups["short"].metrics()["epochs"] == 1 and groups["recipe"].metrics()["epochs"] == 2
    expected = ["short", "recipe"][choose.pick(choice["rows"], 2, greater_is_better=True)]
    assert choice["winner"] == expected and choice["group"] == rows[expected]["group"]
    best = max(row["score"] for row in rows.values())  # the rule, as arithmetic: within one error
    assert (
        best - rows[expected]["score"] <= rows[max(rows, key=lambda n: rows[n]["score"])]["spread"] / 2**0.5
    )
    assert expected == "short" or best - rows["short"]["score"] > rows["recipe"]["spread"] / 2**0.5
    assert f"{expected:<12}" in trained.stderr and "<- chosen" in trained.stderr

    api.cv_train(same)  # all finished: nothing trains, the choice stays
    assert RunDir(place).read_json(choose.FILE) == choice
    assert not list(runs.glob("features-*"))

    predicted = run_cli(*cv_args("predict", data_dir, tmp_path, *chosen))
    assert predicted.returncode == 0, predicted.stderr[-2000:]
    submission = tmp_path / "subs" / f"{choice['group']}.csv"
    assert submission.is_file() and len(pd.read_csv(submission)) > 0
    evaluated = run_cli(*cv_args("evaluate", data_dir, tmp_path, *chosen))
    assert evaluated.returncode == 0 and f"{choice['group']}: CV macro-F1" in evaluated.stdout
