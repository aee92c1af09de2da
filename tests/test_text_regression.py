"""Text regression in CommonLit Readability's layout: a competition folder written here (its file
and no class list), excerpts whose target is a function of their words, the target read as a
number (a bad one named in one line), and a learning check: the text CPU recipe, trained tiny,
under predicting the training mean in RMSE."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipeline.core.errors import PetalsError
from pipeline.stages.fetch import FetchOptions, fetch
from pipeline.tasks.competitions import load_competition
from tests.conftest import kept_score

COMPETITION = """
name = "commonlit"
title = "CommonLit Readability Prize"
slugs = ["commonlitreadabilityprize"]
task = "text_regression"
metric = "rmse"

[data]
format = "table"
splits = ["train", "test"]
labeled_splits = ["train"]
sample_submission = "sample_submission.csv"

[data.counts]
train = {train}
test = {test}

[data.table]
separator = ","
id_column = "id"
text_columns = ["excerpt"]
label_column = "target"
labels_are = "numbers"

[data.table.train]
file = "train.csv"

[data.table.test]
file = "test.csv"

[submission]
id_column = "id"
label_column = "target"
value = "number"

[augment]
keeps_label = []
"""
EASY = ["the", "cat", "sat", "on", "a", "mat", "and", "ran", "to", "see", "sun", "with", "his", "dog", "in",
        "big", "red", "box"]  # fmt: skip
HARD = ["notwithstanding", "epistemological", "perspicacious", "juxtaposition", "magnanimous",
        "obfuscation", "idiosyncratic", "quintessential", "ubiquitous", "ephemeral", "recalcitrant",
        "surreptitious"]  # fmt: skip


def excerpts(rng: np.random.Generator, n: int) -> tuple[list[str], np.ndarray]:
    """Texts of 30-60 words whose readability falls with their share of hard words (CommonLit's
    -3.7 to 1.7: lower is harder), plus noise."""
    texts, targets = [], []
    for _ in range(n):
        hard = rng.uniform(0, 0.6)
        words = [
            str(rng.choice(HARD if rng.random() < hard else EASY)) for _ in range(int(rng.integers(30, 61)))
        ]
        texts.append(" ".join(words).capitalize() + ".")
        targets.append(1.5 - 8 * hard + rng.normal(0, 0.25))
    return texts, np.round(np.array(targets), 6)


def write_competition(folder, train: int = 400, test: int = 20, seed: int = 0):
    """The competition file and its data in CommonLit's layout under `folder`; the toml's path."""
    rng = np.random.default_rng(seed)
    data = folder / "download"
    data.mkdir(parents=True)
    texts, targets = excerpts(rng, train + test)
    ids = [f"{k:09x}" for k in rng.choice(16**9, train + test, replace=False)]
    train_table = pd.DataFrame({"id": ids[:train], "url_legal": "", "license": "", "excerpt": texts[:train],
                                "target": targets[:train], "standard_error": 0.48})  # fmt: skip
    train_table.to_csv(data / "train.csv", index=False)
    pd.DataFrame({"id": ids[train:], "url_legal": "", "license": "", "excerpt": texts[train:]}).to_csv(
        data / "test.csv", index=False
    )
    pd.DataFrame({"id": ids[train:], "target": 0.0}).to_csv(data / "sample_submission.csv", index=False)
    toml = folder / "competition" / "competition.toml"
    toml.parent.mkdir()
    toml.write_text(COMPETITION.format(train=train, test=test))
    return toml, data


def test_commonlits_layout_reads_its_target_as_a_number_with_no_class_list(tmp_path):
    from pipeline.data import file_examples

    toml, download = write_competition(tmp_path, train=30, test=5)
    competition = load_competition(str(toml))
    assert competition.task.name == "text_regression" and competition.spec.classes == ("target",)
    fetch(
        FetchOptions(source="dir", data_from=download, data_dir=tmp_path / "data", progress=False),
        competition.spec,
    )
    train = file_examples.examples(tmp_path / "data", competition.spec, "train")
    written = pd.read_csv(download / "train.csv")
    assert train.labels.shape == (30, 1) and np.allclose(train.labels[:, 0], written["target"])


def test_a_target_that_is_not_a_finite_number_is_named_with_its_line(tmp_path):
    toml, download = write_competition(tmp_path, train=30, test=5)
    table = pd.read_csv(download / "train.csv", dtype=str, keep_default_na=False)
    table.loc[6, "target"] = "hard"
    table.to_csv(download / "train.csv", index=False)
    spec = load_competition(str(toml)).spec
    with pytest.raises(PetalsError, match=r"train\.csv: line 8: target 'hard' is not a finite number$"):
        fetch(
            FetchOptions(source="dir", data_from=download, data_dir=tmp_path / "data", progress=False), spec
        )


def test_a_classification_task_over_numbers_is_refused_in_one_line(tmp_path):
    toml, _ = write_competition(tmp_path, train=30, test=5)
    toml.write_text(toml.read_text().replace('task = "text_regression"', 'task = "text_classification"'))
    (toml.parent / "classes.txt").write_text("easy\nhard\n")
    with pytest.raises(
        PetalsError, match="task text_classification reads classes; the data's labels give numbers"
    ):
        load_competition(str(toml))


@pytest.mark.slow
def test_the_text_cpu_recipe_learns_readability_well_under_the_mean(cpu, tmp_path):
    from pipeline import api

    toml, download = write_competition(tmp_path)
    data_dir = tmp_path / "data"
    spec = load_competition(str(toml)).spec
    fetch(FetchOptions(source="dir", data_from=download, data_dir=data_dir, progress=False), spec)
    overrides = (f"competition={toml}", "data.sequence_length=256", "train.epochs=6")
    where = {"runs_dir": tmp_path / "runs", "strategy": "cpu", "recipe": "cpu"}
    api.train(api.TrainOptions(data_dir=data_dir, overrides=overrides, **where))
    scored = api.ScoreOptions(data_dir=data_dir, overrides=overrides, submissions_dir=tmp_path / "s", **where)
    evaluation = api.evaluate(scored)
    [run] = list((tmp_path / "runs").iterdir())
    val = np.load(run / "val_predictions.npz")
    train = pd.read_csv(download / "train.csv", dtype={"id": str}).set_index("id")["target"]
    mean = float(train.drop(index=val["ids"].astype(str)).mean())  # the training rows' mean
    baseline = float(np.sqrt(np.mean((val["labels"].ravel() - mean) ** 2)))
    assert kept_score(evaluation, "val_rmse") == pytest.approx(
        spec.metric.score(val["labels"], val["probabilities"])
    )
    assert evaluation["val_rmse"] <= 0.8 * baseline, (evaluation, baseline)
    written = pd.read_csv(api.predict(scored), dtype={"id": str})  # numbers, within the labelled range
    assert written["target"].between(train.min(), train.max()).all() and len(written) == 20
