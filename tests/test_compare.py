"""pipeline/cv/compare.py's reading of what each run held out, without training: a CV group is
judged by its out-of-fold rows, as its own score was made, and a group without them is one line.
The comparison of two trained runs, through `make compare`, is in tests/test_evaluate.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

from competition import load_spec
from pipeline.core.errors import PetalsError
from pipeline.core.rundir import RunDir
from pipeline.cv.compare import Comparison, held_out
from pipeline.modeling.inference import Predictions


def _group(folder, with_oof: bool) -> RunDir:
    """A CV group's files as pipeline/cv/experiment.py writes them (no config.json of its own), on
    the data of `_data`."""
    run = RunDir(folder)
    folder.mkdir()
    group = {"kind": "cv", "competition": "flowers", "competition_given": "flowers", "folds": 5}
    group["data"] = "sha256:d"
    (folder / RunDir.GROUP).write_text(json.dumps(group))
    (folder / RunDir.METRICS).write_text(json.dumps({"kind": "cv"}))
    if with_oof:
        rng = np.random.default_rng(0)
        oof = Predictions(np.array(["a", "b", "c"]), rng.dirichlet(np.ones(104), 3), np.array([0, 5, 7]))
        oof.save(run.predictions("oof"))
    return run


def _data(folder, fingerprint="sha256:d"):
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps({"labelled_fingerprint": fingerprint}))
    return folder


def test_a_cv_group_is_judged_by_its_out_of_fold_rows_of_its_own_data(tmp_path):
    from pipeline.cv.compare import runs_named

    run = _group(tmp_path / "cv5-x", with_oof=True)
    found = held_out(run, load_spec("flowers"), _data(tmp_path / "data"))
    saved = Predictions.load(run.predictions("oof"))
    assert found.ids.tolist() == ["a", "b", "c"] and found.labels.tolist() == [0, 5, 7]
    np.testing.assert_array_equal(found.probabilities, saved.probabilities)
    with pytest.raises(PetalsError, match=r"cv5-x was trained on other data than .*other holds"):
        held_out(run, load_spec("flowers"), _data(tmp_path / "other", "sha256:e"))
    (tmp_path / "unfetched").mkdir()  # the same words as a blend of groups says (cv/members.py)
    with pytest.raises(PetalsError, match=r"unfetched: no manifest.json; run `make fetch`"):
        held_out(run, load_spec("flowers"), tmp_path / "unfetched")
    single = tmp_path / "run"
    single.mkdir()
    (single / RunDir.CONFIG).write_text(json.dumps({"competition": "flowers"}))
    (single / RunDir.METRICS).write_text("{}")
    assert runs_named(tmp_path, ("cv5-x", "run"))[1] == "flowers"  # a group's: group.json's


def test_a_group_without_out_of_fold_rows_is_one_line(tmp_path):
    run = _group(tmp_path / "cv5-y", with_oof=False)
    with pytest.raises(PetalsError, match="cv5-y: the CV group has no out-of-fold predictions yet"):
        held_out(run, load_spec("flowers"), _data(tmp_path / "data"))


def test_runs_of_two_competitions_or_one_run_twice_are_one_line(tmp_path):
    from pipeline.cv.compare import runs_named

    for name, competition in (("a", "flowers"), ("b", "dogs-vs-cats")):
        (tmp_path / name).mkdir()
        (tmp_path / name / RunDir.CONFIG).write_text(json.dumps({"competition": competition}))
        (tmp_path / name / RunDir.METRICS).write_text("{}")
    with pytest.raises(PetalsError, match=r"different competitions \(dogs-vs-cats, flowers\)"):
        runs_named(tmp_path, ("a", "b"))
    with pytest.raises(PetalsError, match="compare a a: two different runs, each once"):
        runs_named(tmp_path, ("a", "a"))
    with pytest.raises(PetalsError, match="two different runs, each once"):  # one run, two names
        runs_named(tmp_path, ("a", str(tmp_path / "b" / ".." / "a")))


def test_two_groups_compare_on_common_rows_and_decided_labels_are_refused_saying_why(tmp_path):
    from pipeline.cv.compare import compare, runs_named

    data = _data(tmp_path / "data")
    first, second = _group(tmp_path / "cv5-a", with_oof=True), _group(tmp_path / "cv5-b", with_oof=True)
    found = compare(runs_named(tmp_path, ("cv5-a", "cv5-b"))[0], load_spec("flowers"), data)
    assert (found.rows, found.difference, found.changed) == (3, 0.0, 0)  # the same rows, the same draws
    leaves = load_spec("plant-pathology-2021")
    for run in (first, second):  # rows of labels: a task's thresholds decide them
        rows = Predictions(np.array(["a", "b"]), np.full((2, 6), 0.5), np.eye(6)[[0, 1]])
        rows.save(run.predictions("oof"))
    said = r"mean F1 cannot be drawn again on these rows \(it scores labels decided"
    with pytest.raises(PetalsError, match=said):
        compare([first, second], leaves, data)


def test_a_difference_that_rounds_to_nothing_reads_plus_zero():
    found = Comparison(("a", "b"), "macro-F1", 10, None, (0.5, 0.5), -0.00001, 0.0, (-0.00004, 0.0), 0)
    assert "the second less the first +0.0000 (se 0.0000, 95% interval +0.0000 to +0.0000)" in found.line()
