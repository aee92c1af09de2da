"""Small data chooses by CV whatever the target: on a regression and on a multi-label competition
`make train` trains the probe candidate (TF-IDF + ridge regression, TF-IDF + a logistic regression
per label) beside the recipe and takes the one CV prefers, where it used to train the recipe alone;
and the image probe's run on a number and on labels scores on val what predict computes from it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from competition import load_spec
from pipeline.cli import build_parser
from pipeline.core.rundir import RunDir
from pipeline.cv import choose
from pipeline.modeling import text_probe
from pipeline.stages import cv as cv_stage
from pipeline.stages.fetch import FetchOptions, fetch
from pipeline.tasks.competitions import load_competition
from tests.test_text_regression import write_competition

RECIPE = """[data]
batch_size = 16
sequence_length = 32
vocabulary_size = 300

[model]
backbone = "ngrams"

[train]
epochs = 1
steps_per_epoch = 3
choose_up_to = 10000
"""
# Two of the shipped text candidates (recipes/text_classification/candidates/cpu.toml), tiny; the
# first, `joined`, fits labels and numbers the same way (tests/test_joined.py) on a 22.7 M encoder.
CANDIDATES = """[tfidf.model]
backbone = "tfidf"

[tfidf.train]
head_solver = "logistic"

[recipe]
"""


def readability(tmp_path) -> tuple[str, object]:
    """CommonLit's layout (tests/test_text_regression.py): 60 excerpts, a number each (5 folds)."""
    toml, download = write_competition(tmp_path, train=60, test=10)
    spec = load_competition(str(toml)).spec
    fetch(FetchOptions(source="dir", data_from=download, data_dir=tmp_path / "data", progress=False), spec)
    return str(toml), tmp_path / "data"


def comments(tmp_path) -> tuple[str, object]:
    """Jigsaw's embedded comments at a twentieth: 100, six labels each (the rarest on a few: fewer folds)."""
    fetch(
        FetchOptions(source="synthetic", data_dir=tmp_path / "data", scale=0.05, progress=False),
        load_spec("jigsaw-toxic"),
    )
    return "jigsaw-toxic", tmp_path / "data"


@pytest.mark.slow
@pytest.mark.thorough  # two candidates' folds on two competitions: the image tasks' path, on texts
@pytest.mark.parametrize(
    ("data", "fitted"),
    [
        (readability, "TF-IDF + ridge regression fitted on"),
        (comments, "TF-IDF + a logistic regression per label"),
    ],
)
def test_small_data_trains_the_probe_beside_the_recipe_and_chooses(
    data, fitted, tmp_path, caplog, monkeypatch
):
    monkeypatch.setattr(
        text_probe, "CS", np.array([0.1, 1.0, 10.0])
    )  # a short grid: the same path, fewer fits
    competition, data_dir = data(tmp_path)
    recipes = tmp_path / "recipes"
    (recipes / "candidates").mkdir(parents=True)
    (recipes / "mine.toml").write_text(RECIPE)
    (recipes / "candidates" / "mine.toml").write_text(CANDIDATES)
    args = build_parser(only="train").parse_args([
        "train", "--data-dir", str(data_dir), "--runs-dir", str(tmp_path / "runs"), "--backend", "tensorflow",
        "--recipe", str(recipes / "mine.toml"), "--set", f"competition={competition}",
    ])  # fmt: skip
    caplog.set_level("INFO")
    opts, resolved = cv_stage.small_data("train", args)
    assert opts is not None and opts.choose == "1" and opts.folds >= 2, caplog.text
    assert "cannot train here" not in caplog.text
    choice = cv_stage.train(opts, resolved)
    assert [row["candidate"] for row in choice["rows"]] == ["tfidf", "recipe"]
    assert all(np.isfinite(row["score"]) for row in choice["rows"])
    assert caplog.text.count(fitted) == opts.folds  # the probe fitted once a fold
    probe_group = RunDir(tmp_path / "runs" / choice["rows"][0]["group"]).metrics()
    assert probe_group["folds"] == opts.folds and np.isfinite(probe_group["cv_score"])
    (written,) = (tmp_path / "runs").glob(f"choose-mine-*/{choose.FILE}")
    assert RunDir(written.parent).read_json(choose.FILE)["winner"] == choice["winner"]


@pytest.mark.slow
@pytest.mark.thorough  # a probe on cached features of a number and of labels (test_probe.py's, on classes)
@pytest.mark.parametrize(
    ("competition", "fitted"),
    [
        ("petfinder-pawpularity", "ridge regression"),
        ("plant-pathology-2021", "a logistic regression per label"),
    ],
)
def test_an_image_probe_run_on_numbers_or_labels_scores_what_predict_computes(
    competition, fitted, cpu, tmp_path, caplog
):
    from pipeline.modeling.inference import predict_split
    from pipeline.stages import train
    from pipeline.tasks.recipe_config import load_config
    from tests.conftest import competition_of
    from tests.test_probe import PROBE

    spec = load_spec(competition)
    fetch(FetchOptions(source="synthetic", data_dir=tmp_path / "data", scale=0.1, progress=False), spec)
    caplog.set_level("INFO")
    config = load_config(overrides=[*PROBE, f"competition={competition}"])
    job = train.prepare(config, cpu, tmp_path / "data", tmp_path / "runs", None, None)
    train.fit(job, progress=False)
    assert f"the head fitted by {fitted} on " in caplog.text and "inner CV over whole examples" in caplog.text
    predictions = predict_split(
        job.run, competition_of(job.run), tmp_path / "data", "val", 1, cpu, as_scored=False
    )
    score = spec.metric.score(predictions.labels, predictions.probabilities)
    history = pd.read_csv(job.run.history_file)
    assert score == pytest.approx(history[f"val_{spec.metric.name}"].iloc[0], abs=1e-3)
