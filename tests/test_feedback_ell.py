"""Feedback Prize - English Language Learning: six scores an essay, one number column each, scored
by MCRMSE; its files in Kaggle's layout, each score following a feature drawn into the text, the
scores read as six numbers (a bad one named in one line), `make inspect` summarising them, and a
learning check of its CPU recipe (thorough tier)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from competition import load_spec
from pipeline.core.errors import PetalsError
from pipeline.data import file_examples, synthetic_essays
from pipeline.stages.fetch import FetchOptions, fetch
from pipeline.tasks import get_task
from pipeline.tasks.competitions import load_competition
from tests.conftest import kept_score

SPEC = load_spec("feedback-prize-ell")
SCORES = ["cohesion", "syntax", "vocabulary", "phraseology", "grammar", "conventions"]


def test_six_scores_an_essay_scored_by_mcrmse_and_submitted_a_column_each():
    competition = load_competition(SPEC.name)
    assert (SPEC.task, SPEC.format, SPEC.metric.name, SPEC.submission_value) == (
        "text_regression", "table", "mcrmse", "number",
    )  # fmt: skip
    assert SPEC.classes == SPEC.label_columns == SPEC.submission_columns == tuple(SCORES)
    assert SPEC.column_per_label and SPEC.value_range == (1.0, 5.0) and SPEC.code_competition
    reading = competition.format.label_reading(SPEC, competition.layout)
    assert (reading.kind, reading.numeric, reading.rank) == ("numbers", True, 1)
    assert get_task(SPEC.task).numeric_target


def test_the_download_is_kaggles_three_csvs_with_half_point_scores(tmp_path):
    assert synthetic_essays.write_dataset(tmp_path, {"train": 60, "test": 3}, seed=1) == {
        "train": 60,
        "test": 3,
    }
    headers = {p.name: p.read_text().splitlines()[0] for p in sorted(tmp_path.iterdir())}
    assert headers == {
        "train.csv": "text_id,full_text," + ",".join(SCORES),
        "test.csv": "text_id,full_text",
        "sample_submission.csv": "text_id," + ",".join(SCORES),
    }
    train = pd.read_csv(tmp_path / "train.csv", dtype={"text_id": str})
    scores = train[SCORES].to_numpy()
    assert set(np.unique(scores)) <= set(np.arange(1.0, 5.01, 0.5)) and scores.std() > 0.3
    assert all(re.fullmatch(r"[0-9A-F]{12}", i) for i in train["text_id"])
    assert train["full_text"].str.contains("\n\n").all()  # paragraphs, as the essays have
    again = tmp_path / "again"
    synthetic_essays.write_dataset(again, {"train": 60, "test": 3}, seed=1)
    assert (again / "train.csv").read_bytes() == (tmp_path / "train.csv").read_bytes()


def test_each_score_follows_the_feature_drawn_into_the_text(tmp_path):
    synthetic_essays.write_dataset(tmp_path, {"train": 400, "test": 3}, seed=2)
    train = pd.read_csv(tmp_path / "train.csv")
    text = train["full_text"].str.lower()
    sentences = text.str.count(r"\.")
    shares = {
        "vocabulary": text.str.count("|".join(w for ws in synthetic_essays._WORDS.values() for w in ws)),
        "grammar": text.str.count("|".join(right for right, _ in synthetic_essays._AGREEMENT)),
        "conventions": -text.str.count("|".join(synthetic_essays._SPELLING.values())),
    }
    for score, count in shares.items():
        # the feature's share of the sentences explains most of its score, and little of another's
        assert np.corrcoef(count / sentences, train[score])[0, 1] > 0.7, score
    others = np.corrcoef(shares["vocabulary"] / sentences, train["grammar"])[0, 1]
    assert 0.1 < others < 0.75  # the writer's level: correlated, as the real scores are


def test_the_scores_are_read_as_six_numbers_and_a_bad_one_is_named_with_its_line(tmp_path):
    download = tmp_path / "download"
    synthetic_essays.write_dataset(download, {"train": 30, "test": 3}, seed=3)
    fetch(FetchOptions(source="dir", data_from=download, data_dir=tmp_path / "data", progress=False), SPEC)
    train = file_examples.examples(tmp_path / "data", SPEC, "train")
    written = pd.read_csv(download / "train.csv")
    assert train.labels.dtype == np.float32 and np.array_equal(
        train.labels, written[SCORES].to_numpy(np.float32)
    )
    table = pd.read_csv(download / "train.csv", dtype=str, keep_default_na=False)
    table.loc[6, "grammar"] = "n/a"
    table.to_csv(download / "train.csv", index=False)
    with pytest.raises(PetalsError, match=r"train\.csv: line 8: grammar 'n/a' is not a finite number$"):
        fetch(
            FetchOptions(source="dir", data_from=download, data_dir=tmp_path / "data2", progress=False), SPEC
        )


def test_inspect_shows_each_scores_statistics_not_class_counts(tmp_path, capsys):
    from pipeline import cli

    fetch(FetchOptions(source="synthetic", data_dir=tmp_path / "data", scale=0.1, progress=False), SPEC)
    argv = ["inspect", "--data-dir", str(tmp_path / "data"), "--out", str(tmp_path / "out"), "--images", "3"]
    assert cli.main([*argv, "--set", f"competition={SPEC.name}"]) == 0
    shown = capsys.readouterr().out
    assert "rarest" not in shown and re.search(r"^train\s+conventions\s+108\s", shown, re.M), shown
    table = pd.read_csv(tmp_path / "out" / "number_summary.csv")
    assert table[["split", "column"]].values.tolist()[:2] == [["train", "cohesion"], ["train", "syntax"]]
    assert len(table) == 12 and not (tmp_path / "out" / "class_counts.csv").exists()


@pytest.mark.slow
@pytest.mark.thorough  # 40-50 s of training: the text regression's learning check in make test is CommonLit's
def test_the_cpu_recipe_learns_the_six_scores_well_under_each_columns_mean(cpu, tmp_path):
    """The competition's CPU recipe (the bag of n-grams, 8 epochs) on the 1,080 embedded essays it
    trains on: val MCRMSE at most 0.8 x predicting each column's training mean (0.70 x measured),
    and a submission of six clipped columns."""
    from pipeline import api

    data_dir = tmp_path / "data"
    fetch(FetchOptions(source="synthetic", data_dir=data_dir, progress=False), SPEC)
    where = {"runs_dir": tmp_path / "runs", "strategy": "cpu", "recipe": "cpu"}
    overrides = (f"competition={SPEC.name}",)
    api.train(api.TrainOptions(data_dir=data_dir, overrides=overrides, **where))
    scored = api.ScoreOptions(data_dir=data_dir, overrides=overrides, submissions_dir=tmp_path / "s", **where)
    evaluation = api.evaluate(scored)
    [run] = list((tmp_path / "runs").iterdir())
    val = np.load(run / "val_predictions.npz")
    train = pd.read_csv(data_dir / "train.csv", dtype={"text_id": str}).set_index("text_id")[SCORES]
    means = train.drop(index=val["ids"].astype(str)).mean().to_numpy()  # the training rows' means
    baseline = SPEC.metric.score(val["labels"], np.tile(means, (len(val["labels"]), 1)))
    assert kept_score(evaluation, "val_mcrmse") == pytest.approx(
        SPEC.metric.score(val["labels"], val["probabilities"])
    )
    assert evaluation["val_mcrmse"] <= 0.8 * baseline, (evaluation, baseline)
    written = pd.read_csv(api.predict(scored), dtype={"text_id": str})
    assert list(written.columns) == ["text_id", *SCORES] and len(written) == 3
    assert written[SCORES].to_numpy().min() >= 1 and written[SCORES].to_numpy().max() <= 5
