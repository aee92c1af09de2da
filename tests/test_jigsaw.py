"""Jigsaw's Toxic Comment Classification Challenge: six labels a comment, one 0/1 column each,
scored by the mean column-wise ROC AUC; its files in Kaggle's layout, its labels co-occurring as
the real ones, its submission a probability per label column, checked as Kaggle would; and a
learning check of the text CPU recipe on the embedded comments."""

from __future__ import annotations

import zipfile

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from competition import load_spec
from competition.submission import SubmissionError
from pipeline.core.errors import PetalsError
from pipeline.data import file_examples, synthetic_comments
from pipeline.stages.fetch import FetchOptions, fetch
from pipeline.tasks import get_task
from pipeline.tasks.competitions import check_submission, load_competition

SPEC = load_spec("jigsaw-toxic")
TASK = get_task(SPEC.task)
LABELS = ("toxic", "severe_toxic", "obscene", "threat", "insult", "identity_hate")


@pytest.fixture(scope="module")
def comments(tmp_path_factory):
    """The embedded comments, fetched: 2,000 train and 500 test."""
    data_dir = tmp_path_factory.mktemp("jigsaw") / "data"
    fetch(FetchOptions(source="synthetic", data_dir=data_dir, progress=False), SPEC)
    return data_dir


def test_six_label_columns_scored_by_their_mean_roc_auc_submitted_a_column_each():
    competition = load_competition(SPEC.name)
    assert (SPEC.task, SPEC.format, SPEC.metric.name) == (
        "multi_label_text_classification",
        "table",
        "mean_column_roc_auc",
    )
    assert SPEC.classes == SPEC.label_columns == LABELS and SPEC.submission_columns == LABELS
    assert (TASK.activation, TASK.label_rank, TASK.modality) == ("sigmoid", 1, "text")
    assert competition.format.label_reading(SPEC, competition.layout).kind == "columns"


def test_the_download_is_kaggles_four_zips_each_holding_its_csv(tmp_path):
    synthetic_comments.write_dataset(tmp_path, {"train": 40, "test": 20}, seed=1)
    headers = {}
    for archive in sorted(tmp_path.iterdir()):
        with zipfile.ZipFile(archive) as opened:
            [member] = opened.namelist()
            assert member == archive.stem  # train.csv.zip holds train.csv
            headers[member] = opened.read(member).decode().splitlines()[0]
    assert headers == {
        "train.csv": "id,comment_text," + ",".join(LABELS),
        "test.csv": "id,comment_text",
        "sample_submission.csv": "id," + ",".join(LABELS),
        "test_labels.csv": "id," + ",".join(LABELS),
    }
    published = pd.read_csv(tmp_path / "test_labels.csv.zip", dtype={"id": str})
    assert set(np.unique(published[list(LABELS)])) <= {-1, 0, 1} and (published["toxic"] == -1).any()


def test_the_labels_co_occur_as_the_real_ones_and_the_ids_are_16_hex(comments):
    train = file_examples.examples(comments, SPEC, "train")
    labels = train.labels
    assert labels.shape == (2000, 6) and all(len(i) == 16 and int(i, 16) >= 0 for i in train.ids)
    toxic = labels[:, 0] == 1
    assert labels[labels[:, 1] == 1, 0].all()  # severe_toxic is always toxic
    for k in range(2, 6):  # the others almost only with toxic
        assert labels[toxic, k].mean() > 5 * labels[~toxic, k].mean(), LABELS[k]
    assert labels[:, 2] @ labels[:, 4] > labels[:, 2].sum() * labels[:, 4].mean() * 1.5  # obscene, insult
    assert 0.2 < toxic.mean() < 0.4 and labels.sum(axis=1).max() >= 3 and (labels.sum(axis=1) == 0).any()


def test_a_label_cell_that_is_not_0_or_1_is_named_with_its_file_and_line(comments, tmp_path):
    table = pd.read_csv(comments / "train.csv", dtype=str, keep_default_na=False)
    table.loc[6, "threat"] = "1.0"
    copy = tmp_path / "copy"
    copy.mkdir()
    table.to_csv(copy / "train.csv", index=False)
    for name in ("test.csv", "sample_submission.csv"):
        (copy / name).write_bytes((comments / name).read_bytes())
    with pytest.raises(PetalsError, match=r"train\.csv: line 8: threat '1\.0' is not 0 or 1$"):
        fetch(FetchOptions(source="dir", data_from=copy, data_dir=tmp_path / "data", progress=False), SPEC)


def test_mean_column_roc_auc_is_scikit_learns_macro_roc_auc_and_has_an_interval():
    rng = np.random.default_rng(0)
    truth = (rng.random((300, 6)) < [0.3, 0.05, 0.15, 0.05, 0.15, 0.06]).astype(np.int32)
    scores = np.clip(truth * 0.3 + rng.random(truth.shape) * 0.7, 0, 1)
    score = SPEC.metric.score(truth, scores)
    assert score == pytest.approx(roc_auc_score(truth, scores, average="macro"), rel=1e-12)
    low, high = SPEC.metric.interval(truth, scores, draws=40)
    assert low < score < high and high - low < 0.2
    # a label all of one value in these rows has no ROC AUC: left out of the mean
    truth[:, 3] = 0
    assert SPEC.metric.score(truth, scores) == pytest.approx(
        roc_auc_score(np.delete(truth, 3, 1), np.delete(scores, 3, 1), average="macro")
    )


def _submission(tmp_path, values: np.ndarray):
    ids = [f"{k:016x}" for k in range(len(values))]
    path = tmp_path / "submission.csv"
    rows = TASK.submission_column(values, SPEC)
    frame = pd.DataFrame(rows, columns=list(LABELS))
    frame.insert(0, "id", ids)
    frame.to_csv(path, index=False)
    return path, ids


def test_a_submission_is_the_id_and_a_probability_per_label_column(tmp_path):
    probabilities = np.array([[0.9, 0.2, 0.6, 0.0, 0.7, 0.1], [0.01, 0.0, 0.0, 0.0, 0.02, 0.0]])
    assert TASK.submission_values(probabilities, SPEC) is probabilities  # nothing decided
    path, ids = _submission(tmp_path, probabilities)
    assert (
        path.read_text().splitlines()[1] == f"{ids[0]},0.900000,0.200000,0.600000,0.000000,0.700000,0.100000"
    )
    summary = check_submission(path, SPEC, ids)
    assert (summary.rows, summary.classes_used) == (2, 3)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda f: f.assign(threat="1.2"), r"threat '1\.2' for id '0{15}0' \(line 2\) is not a probability"),
        (lambda f: f.assign(insult=""), r"insult '' for id '0{15}0' \(line 2\) is not a probability"),
        (
            lambda f: f.drop(columns="threat"),
            r"header is 'id,toxic,severe_toxic,obscene,insult,identity_hate'",
        ),
        (lambda f: f[["id", *reversed(LABELS)]], r"expected 'id,toxic,severe_toxic,obscene,threat,insult,"),
    ],
)
def test_a_submission_kaggle_would_reject_is_named_in_one_line(tmp_path, edit, message):
    path, ids = _submission(tmp_path, np.full((2, 6), 0.5))
    edit(pd.read_csv(path, dtype=str, keep_default_na=False)).to_csv(path, index=False)
    with pytest.raises(SubmissionError, match=message) as raised:
        check_submission(path, SPEC, ids)
    assert "\n" not in str(raised.value)


@pytest.mark.slow  # it trains, or runs a network's pass: out of make test-fast
def test_the_cpu_recipe_learns_every_label_above_chance(comments, cpu, tmp_path):
    """The text CPU recipe (a bag of words, bigrams and character n-grams), 2 epochs of 256 ids on
    the 1,800 embedded comments it trains on: every label's ROC AUC on val well above chance (0.82
    to 0.97 measured), and a submission of a probability per label column."""
    from pipeline import api

    where = {"runs_dir": tmp_path / "runs", "strategy": "cpu", "recipe": "cpu"}
    overrides = (f"competition={SPEC.name}", "train.epochs=2", "data.sequence_length=256")
    metrics = api.train(api.TrainOptions(data_dir=comments, overrides=overrides, **where))
    path = api.predict(
        api.ScoreOptions(data_dir=comments, overrides=overrides, submissions_dir=tmp_path / "s", **where)
    )
    [run] = list((tmp_path / "runs").iterdir())
    val = np.load(run / "val_predictions.npz")  # predicted again by predict, as training scored it
    per_label = [roc_auc_score(val["labels"][:, k], val["probabilities"][:, k]) for k in range(6)]
    assert min(per_label) > 0.6, dict(zip(LABELS, per_label, strict=True))
    assert metrics[SPEC.score_key] == pytest.approx(np.mean(per_label), abs=1e-4)
    written = pd.read_csv(path, dtype={"id": str})
    assert list(written.columns) == ["id", *LABELS] and len(written) == 500
    assert written[list(LABELS)].to_numpy().min() >= 0 and written[list(LABELS)].to_numpy().max() <= 1


def test_evaluate_reports_each_labels_roc_auc_and_scores_the_probabilities_undecided(tmp_path):
    rng = np.random.default_rng(2)
    truth = (rng.random((200, 6)) < 0.2).astype(np.int32)
    scores = np.clip(truth * rng.uniform(0.0, 0.6, 6) + rng.random(truth.shape) * 0.5, 0, 1)
    evaluation = TASK.evaluate(truth, scores, SPEC)
    assert evaluation.score == pytest.approx(roc_auc_score(truth, scores, average="macro"))
    assert not any(key.endswith("_thresholded") for key in evaluation.fields)  # nothing decided
    evaluation.files["per_class.csv"](tmp_path / "per_class.csv")
    table = pd.read_csv(tmp_path / "per_class.csv")
    expected = [roc_auc_score(truth[:, k], scores[:, k]) for k in range(6)]
    assert table["roc_auc"].tolist() == pytest.approx(expected, abs=1e-4)
    assert evaluation.fields["worst_classes"] == [LABELS[k] for k in np.argsort(expected)[:3]]
    assert "micro F1 at 0.5" in TASK.summary_lines(evaluation.fields)[1]


def test_the_competitions_zip_of_zips_is_fetched_and_test_labels_left_out(tmp_path):
    """Kaggle's download holds the four zips; petals unpacks the three it reads."""
    synthetic_comments.write_dataset(tmp_path / "download", {"train": 50, "test": 20}, seed=2)
    archive = tmp_path / "jigsaw-toxic-comment-classification-challenge.zip"
    with zipfile.ZipFile(archive, "w") as opened:
        for path in sorted((tmp_path / "download").iterdir()):
            opened.write(path, path.name)
    manifest = fetch(
        FetchOptions(source="dir", data_from=archive, data_dir=tmp_path / "data", progress=False), SPEC
    )
    assert manifest["splits"] == {"train": {"rows": 50}, "test": {"rows": 20}}
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == [
        "manifest.json", "sample_submission.csv", "test.csv", "train.csv",
    ]  # fmt: skip
