"""Small data's choice judges the candidates' equal blend last: chosen where it beats every candidate
by more than one standard error out of fold, not within it, and then predict submits the blend.

The candidates' groups are made here without training (their OOF and test rows written as a
trained group's would be), so each test runs in seconds."""

from __future__ import annotations

import shutil
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from competition.metric import METRICS
from pipeline.core.errors import PetalsError
from pipeline.core.rundir import RunDir
from pipeline.cv import blend, choice_blend, choose, experiment
from pipeline.modeling.inference import Predictions
from pipeline.runs.submission_files import sample_ids
from pipeline.stages import cv as cv_stage
from tests.test_cv import options

SPEC = SimpleNamespace(metric=METRICS["macro_f1"])
CANDIDATES = "[one.train]\nepochs = 1\n\n[two.train]\nepochs = 2\n"


@pytest.fixture
def data_dir(tiny_data_dir, tmp_path):
    copy = tmp_path / "data"
    shutil.copytree(tiny_data_dir, copy)
    return copy


def half_right(labels: np.ndarray, classes: int, even: bool) -> np.ndarray:
    """Sure and right on every other row, unsure and wrong on the rest: two of these, each right
    where the other is wrong, are each half right and their mean is right everywhere."""
    probabilities = np.full((len(labels), classes), 0.0, np.float32)
    sure = (np.arange(len(labels)) % 2 == 0) == even
    rows, wrong = np.arange(len(labels)), (labels + 1) % classes
    probabilities[rows, labels] = np.where(sure, 0.9, 0.4)
    probabilities[rows, wrong] = np.where(sure, 0.1, 0.6)
    return probabilities


def fake_groups(made: dict):
    """A `train_folds` that writes each candidate's group as assemble would (group.json, OOF rows,
    metrics) from `made[epochs](labels, classes)`, scoring it as a group's metrics do."""

    def train_folds(opts, competition):
        found = experiment.setup(opts, competition)
        experiment._write_group(found, {k: found.fold_run(k) for k in range(opts.folds)})
        table, spec = found.table, found.spec
        probabilities = made[found.config.train.epochs](table.labels, spec.num_classes)
        Predictions(table.ids, probabilities, table.labels).save(found.group.predictions("oof"))
        folds = blend.fold_scores(probabilities, table.labels, table.folds, spec.metric)
        metrics = {"kind": "cv", "cv_score": float(spec.metric.score(table.labels, probabilities)),
                   "fold_scores": folds, "fold_scores_last": folds, "fold_mean": float(np.mean(folds)),
                   "fold_std": float(np.std(folds, ddof=1)), "cv_epoch": 1, "fold_mean_at_cv_epoch": None,
                   "folds": opts.folds, "examples": len(table)}  # fmt: skip
        found.group.write_json(RunDir.METRICS, metrics)
        return {**metrics, "group": found.group.name}

    return train_folds


def fake_setups(tmp_path, members: list[np.ndarray], labels: np.ndarray, k: int = 3) -> list:
    """What `choice_blend.row` reads of each candidate's setup: the fold table and the group's OOF rows."""
    from pipeline.data.folds import FoldTable

    ids = np.array([f"{i:03d}" for i in range(len(labels))])
    table = FoldTable(ids, labels, np.arange(len(labels)) % k, k, 0)
    setups = []
    for n, probabilities in enumerate(members):
        group = RunDir(tmp_path / f"cv{k}-candidate{n}")
        group.path.mkdir()
        Predictions(ids, probabilities, labels).save(group.predictions("oof"))
        setups.append(SimpleNamespace(table=table, group=group))
    return setups


def test_the_blends_row_scores_the_mean_of_the_candidates_oof_rows_fold_by_fold(tmp_path):
    labels = np.arange(60) % 3
    members = [half_right(labels, 3, True), half_right(labels, 3, False)]
    setups = fake_setups(tmp_path, members, labels)
    row = choice_blend.row(setups, SPEC)
    assert row["fold_scores"] == pytest.approx([1.0, 1.0, 1.0]) and row["score"] == pytest.approx(1.0)
    assert row["candidate"] == "blend" and row["groups"] == [s.group.name for s in setups]
    # fold 0's blended rows are the candidates' fold-0 rows alone: the other folds' rows move nothing there
    changed = members[0].copy()
    changed[setups[0].table.folds != 0] = half_right(labels, 3, False)[setups[0].table.folds != 0]
    Predictions(setups[0].table.ids, changed, labels).save(setups[0].group.predictions("oof"))
    again = choice_blend.row(setups, SPEC)
    assert again["fold_scores"][0] == pytest.approx(1.0) and again["fold_scores"][1] < 0.7


def test_the_rule_takes_the_blend_only_beyond_one_standard_error_of_every_candidate():
    # 5 folds, spread 0.05: one standard error is 0.0224, on the candidates' out-of-fold folds
    rows = [{"fold_mean": 0.80, "fold_std": 0.05}, {"fold_mean": 0.82, "fold_std": 0.05}]
    blend = {"score": 0.85, "spread": 0.05}
    assert choose.pick([*choice_blend.basis(rows), blend], 5, greater_is_better=True) == 2
    blend["score"] = 0.84  # 0.02 over the better candidate: within one error, that candidate keeps it
    assert choose.pick([*choice_blend.basis(rows), blend], 5, greater_is_better=True) == 1


def test_the_blend_refuses_oof_rows_that_are_not_the_one_fold_tables_in_order(tmp_path):
    labels = np.arange(60) % 3
    setups = fake_setups(tmp_path, [half_right(labels, 3, True), half_right(labels, 3, False)], labels)
    saved = Predictions.load(setups[1].group.predictions("oof"))
    order = np.random.default_rng(0).permutation(len(saved.ids))  # its rows in another order
    Predictions(saved.ids[order], saved.probabilities[order], saved.labels[order]).save(
        setups[1].group.predictions("oof")
    )
    with pytest.raises(PetalsError, match=r"cv3-candidate1: its OOF rows are not fold table .* in order"):
        choice_blend.row(setups, SPEC)


def chose(data_dir, tmp_path, made: dict) -> tuple[dict, object]:
    candidates = tmp_path / "candidates.toml"
    candidates.write_text(CANDIDATES)
    opts = options(data_dir, tmp_path, choose=str(candidates))
    return choose.train(opts, cv_stage.competition_of(opts), fake_groups(made)), opts


@pytest.mark.slow  # each CV setup reads the tiny records' labels again: seconds each on a loaded machine
def test_the_blend_is_judged_last_and_chosen_where_it_beats_every_candidate(data_dir, tmp_path):
    made = {1: lambda y, c: half_right(y, c, True), 2: lambda y, c: half_right(y, c, False)}
    choice, opts = chose(data_dir, tmp_path, made)
    rows = {row["candidate"]: row for row in choice["rows"]}
    assert list(rows) == ["one", "two", "blend"]  # last: the rule prefers the candidates before it
    assert rows["blend"]["score"] == pytest.approx(1.0) and rows["one"]["score"] < 0.7
    assert choice["winner"] == "blend" and choice["group"] is None
    assert rows["blend"]["groups"] == [rows["one"]["group"], rows["two"]["group"]]
    (place,) = (tmp_path / "runs").glob("choose-*")
    assert RunDir(place).read_json(choose.FILE) == choice
    assert any(
        "blend" in line and "<- chosen" in line
        for line in choose.report(choice, cv_stage.competition_of(opts).spec)
    )


@pytest.mark.slow
def test_a_blend_within_one_standard_error_of_a_candidate_is_not_chosen(data_dir, tmp_path):
    same = {1: lambda y, c: half_right(y, c, True), 2: lambda y, c: half_right(y, c, True)}
    choice, _ = chose(data_dir, tmp_path, same)  # the blend of two alike is either: no better
    assert choice["rows"][-1]["candidate"] == "blend" and choice["winner"] == "one"
    assert choice["group"] == choice["rows"][0]["group"]


@pytest.mark.slow
def test_predict_writes_the_blends_submission_the_mean_of_the_groups_test_rows(
    data_dir, tmp_path, monkeypatch, capsys
):
    made = {1: lambda y, c: half_right(y, c, True), 2: lambda y, c: half_right(y, c, False)}
    choice, opts = chose(data_dir, tmp_path, made)
    ids = np.array(sample_ids(data_dir, cv_stage.competition_of(opts).spec))
    tests = {}

    def predict_mean(one, found, metrics):  # each group's fold mean on test, as predict_mean saves it
        rng = np.random.default_rng(len(tests))
        tests[found.group.name] = rng.dirichlet(np.ones(found.spec.num_classes), len(ids)).astype(np.float32)
        Predictions(ids, tests[found.group.name]).save(found.group.predictions("test"))

    monkeypatch.setattr(experiment, "predict_mean", predict_mean)
    path = cv_stage.predict(opts)
    assert set(tests) == set(choice["rows"][-1]["groups"])
    written = pd.read_csv(path, dtype=str)
    expected = np.mean(list(tests.values()), axis=0).argmax(axis=1)
    by_id = dict(zip(ids, expected, strict=True))
    assert [int(v) for v in written.iloc[:, 1]] == [by_id[i] for i in written.iloc[:, 0]]
    ensemble = RunDir(path.parent.parent / "runs" / path.stem).metrics()
    assert ensemble["method"] == "equal" and ensemble["cv_score"] == pytest.approx(
        choice["rows"][-1]["cv_score"]
    )
    # evaluate: each candidate's group (as assembled), then the blend's OOF line and scores
    monkeypatch.setattr(experiment, "assemble", lambda found, one: found.group.metrics())
    evaluated = cv_stage.evaluate(opts)
    assert evaluated["kind"] == "blend" and evaluated["cv_score"] == pytest.approx(ensemble["cv_score"])
    assert "blend of " in capsys.readouterr().out
    with pytest.raises(PetalsError, match="REFIT=1: the choice is the candidates' blend"):
        cv_stage.predict(options(data_dir, tmp_path, choose=opts.choose, refit=True))


def test_a_candidate_named_blend_is_refused(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[one]\n\n[blend]\n")
    with pytest.raises(PetalsError, match=r"\[blend\]: that name is the candidates' blend"):
        choose.read_candidates(path)
