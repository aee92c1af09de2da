"""Groups: one document's passages never on both sides of a held-out part (issue 65).

A user's own table competition (passages, their class, the document each comes from) is fetched
as a user would, then every held-out part petals makes is checked: the val split it holds out
when the data has none, each of K folds, the stored fold table. Each check would fail on a split
that ignored the groups: the same data dealt without them puts most documents on both sides.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import numpy as np
import pytest

from competition import load_spec
from pipeline import cli
from pipeline.core.config import Config
from pipeline.core.errors import PetalsError
from pipeline.core.overrides import apply_updates
from pipeline.data import folds, groups, splits
from pipeline.data.manifest import locate_data
from pipeline.data.readers import reader_for

DOCUMENTS, PASSAGES, CLASSES = 60, 5, 3
SPEC = """
name = "passages"
title = "Passages grouped by document"
slugs = ["passages"]
task = "text_classification"
metric = "macro_f1"

[data]
format = "table"
splits = ["train", "test"]
labeled_splits = ["train"]
sample_submission = "sample_submission.csv"
{grouping}

[data.counts]
train = {train}
test = 10

[data.table]
separator = ","
id_column = "id"
text_columns = ["text"]
label_column = "label"

[data.table.train]
file = "train.csv"

[data.table.test]
file = "test.csv"

[submission]
id_column = "id"
label_column = "label"

[augment]
keeps_label = []
"""


def _competition(tmp_path: Path, grouping: str, name: str = "comp") -> tuple[Path, Path]:
    """A competition folder and a source folder: DOCUMENTS documents of PASSAGES passages each, a
    document's passages sharing its class (and, with `grouping`, its group)."""
    folder, source = tmp_path / name, tmp_path / "source"
    folder.mkdir()
    (folder / "classes.txt").write_text("".join(f"topic{c}\n" for c in range(CLASSES)))
    spec = folder / "competition.toml"
    spec.write_text(SPEC.format(grouping=grouping, train=DOCUMENTS * PASSAGES))
    if not source.exists():
        source.mkdir()
        rows = [
            f"doc{d}_{p},words of document {d} passage {p} topic {d % CLASSES},{d % CLASSES},doc{d}\n"
            for d in range(DOCUMENTS)
            for p in range(PASSAGES)
        ]
        (source / "train.csv").write_text("id,text,label,doc\n" + "".join(rows))
        (source / "test.csv").write_text(
            "id,text\n" + "".join(f"t{i},a test passage {i}\n" for i in range(10))
        )
        (source / "sample_submission.csv").write_text("id,label\n" + "".join(f"t{i},0\n" for i in range(10)))
    return spec, source


def _fetched(tmp_path: Path, grouping: str, name: str = "comp") -> tuple[object, Path]:
    spec_file, source = _competition(tmp_path, grouping, name)
    data = tmp_path / f"data-{name}"
    code = cli.main(["fetch", "--no-progress", "--competition", str(spec_file), "--source", "dir",
                     "--from", str(source), "--data-dir", str(data)])  # fmt: skip
    assert code == 0
    return load_spec(str(spec_file)), data


def _config(spec, **train) -> Config:
    return apply_updates(Config(), {"competition": str(spec.file), "train": train}, "test", {})


def _document(ids) -> np.ndarray:
    return np.array([str(i).rsplit("_", 1)[0] for i in ids])


def _shared_documents(kept_ids, held_ids) -> set[str]:
    return set(_document(kept_ids)) & set(_document(held_ids))


@pytest.fixture
def grouped(tmp_path):
    return _fetched(tmp_path, 'group_column = "doc"')


def test_every_fold_keeps_each_document_whole(grouped):
    spec, data = grouped
    config = _config(spec, folds=5)
    table = folds.fold_table(data, spec, config)
    for fold in range(5):
        held, kept = table.ids[table.held_out(fold)], table.ids[table.kept(fold)]
        assert len(held) and not _shared_documents(kept, held), fold
    # what each fold's run trains on and is scored on, as the trainer reads them
    for fold in range(5):
        train, val = splits.train_and_val(locate_data(data), spec, _config(spec, folds=5, fold=fold), table)
        assert not _shared_documents(train.examples.ids, val.examples.ids), fold
    assert folds.stored_path(data, spec, config).name.startswith("k5-seed0-g")


def test_the_val_split_held_out_of_train_keeps_each_document_whole(grouped):
    spec, data = grouped
    train, val = splits.train_and_val(locate_data(data), spec, _config(spec))
    assert len(val.examples) >= PASSAGES and len(train.examples) + len(val.examples) == DOCUMENTS * PASSAGES
    assert not _shared_documents(train.examples.ids, val.examples.ids)


def test_the_same_data_dealt_without_its_groups_splits_documents(tmp_path, grouped):
    """The checks above have teeth: without the group column, folds and val split documents."""
    spec, data = _fetched(tmp_path, "", name="plain")
    table = folds.fold_table(data, spec, _config(spec, folds=5))
    assert _shared_documents(table.ids[table.kept(0)], table.ids[table.held_out(0)])
    train, val = splits.train_and_val(locate_data(data), spec, _config(spec))
    assert _shared_documents(train.examples.ids, val.examples.ids)


def test_groups_by_the_id_keep_each_document_whole(tmp_path):
    spec, data = _fetched(tmp_path, 'group_by_id = "_"')
    table = folds.fold_table(data, spec, _config(spec, folds=4))
    for fold in range(4):
        assert not _shared_documents(table.ids[table.kept(fold)], table.ids[table.held_out(fold)])
    ids = np.array(["doc1_0", "doc1_1", "plain", "a_b_c"])
    assert groups.group_ids("", spec, ["train"], ids).tolist() == ["doc1", "doc1", "plain", "a_b"]


def test_a_table_dealt_before_the_group_was_named_is_not_taken_for_the_grouped_one(tmp_path):
    spec, data = _fetched(tmp_path, "")
    plain = folds.fold_table(data, spec, _config(spec, folds=5))
    assert _shared_documents(plain.ids[plain.kept(0)], plain.ids[plain.held_out(0)])
    named, _ = _competition(tmp_path, 'group_column = "doc"', name="named")
    spec = load_spec(str(named))
    table = folds.fold_table(data, spec, _config(spec, folds=5))  # the same data dir, its group named
    assert not _shared_documents(table.ids[table.kept(0)], table.ids[table.held_out(0)])
    assert {p.name for p in (data / folds.FOLDER).iterdir()} == {
        "k5-seed0.csv",
        folds.stored_path(data, spec, _config(spec, folds=5)).name,
    }


def test_a_stored_table_that_splits_a_group_is_refused(grouped):
    spec, data = grouped
    config = _config(spec, folds=5)
    table = folds.fold_table(data, spec, config)
    path = folds.stored_path(data, spec, config)
    text = path.read_text().splitlines()
    first, second = text[1].split(","), text[2].split(",")  # doc0_0 and doc0_1: one document
    assert _document([first[0]]) == _document([second[0]])
    second[2] = str((int(first[2]) + 1) % 5)
    path.write_text("\n".join([text[0], text[1], ",".join(second), *text[3:]]) + "\n")
    with pytest.raises(PetalsError, match=r"group 'doc0' has examples in folds \d and \d; delete the table"):
        folds.fold_table(data, spec, config)
    assert len(table) == DOCUMENTS * PASSAGES


def test_rows_that_look_grouped_are_said_in_one_line_when_no_group_is_named(tmp_path, caplog):
    spec, data = _fetched(tmp_path, "")
    root = locate_data(data)
    ids, labels = reader_for(spec).pool(root, spec, _config(spec), ["train"]).ids_and_labels()
    line = groups.suspected(root, spec, ["train"], ids, labels)
    assert line.startswith("the labelled rows look grouped: column 'doc' holds 60 values over 300 rows")
    assert "[data] group_column = 'doc'" in line
    groups._said.cache_clear()
    with caplog.at_level(logging.WARNING, logger="pipeline.data.groups"):
        splits.train_and_val(root, spec, _config(spec))
    assert [r.getMessage() for r in caplog.records] == [line]


def test_exact_repeats_of_a_text_are_said_too(tmp_path):
    spec, data = _fetched(tmp_path, "")
    root = locate_data(data)
    table = root_table = Path(root) / "train.csv"
    rows = table.read_text().splitlines()
    body = [
        ",".join([r.split(",")[0], "the same words", *r.split(",")[2:3], f"x{i}"])
        for i, r in enumerate(rows[1:])
    ]
    root_table.write_text("id,text,label,doc\n" + "\n".join(body) + "\n")
    ids, labels = reader_for(spec).pool(root, spec, _config(spec), ["train"]).ids_and_labels()
    line = groups.suspected(root, spec, ["train"], ids, labels)
    assert line.startswith("the labelled rows look grouped: 300 of 300 texts repeat another's exactly")


@pytest.mark.parametrize(
    ("grouping", "said"),
    [
        ('group_column = "doc"\ngroup_by_id = "_"', "name one way the rows are grouped"),
        ('group_by_id = "__________"', "group_by_id '__________' is not a separator of 1 to 8 characters"),
        ("group_column = {a = 1}", "[data] group_column \"{'a': 1}\" is not a string"),
    ],
)
def test_a_grouping_petals_cannot_use_is_one_line(tmp_path, grouping, said):
    spec_file, _ = _competition(tmp_path, grouping)
    with pytest.raises(PetalsError) as refused:
        load_spec(str(spec_file))
    assert said in str(refused.value)


def test_a_group_column_the_csv_lacks_is_one_line(tmp_path):
    spec, data = _fetched(tmp_path, 'group_column = "patient"')
    with pytest.raises(PetalsError, match=r"train.csv: no column 'patient' \(\[data\] group_column\)"):
        folds.fold_table(data, spec, _config(spec, folds=5))


# ----------------------------------------------------------------------------- what a score is worth


def test_a_scores_interval_holds_it_and_widens_when_rows_of_a_group_move_together():
    """Passages of one document are right or wrong together: drawing whole documents gives the
    honest spread, wider than drawing rows as if each were independent."""
    from competition.metric import get_metric

    rng = np.random.default_rng(0)
    documents = np.repeat(np.arange(60), 10)
    labels = documents % CLASSES
    right = rng.random(60) < 0.7  # a document's passages are all right, or all wrong
    predicted = np.where(right[documents], labels, (labels + 1) % CLASSES)
    probabilities = np.eye(CLASSES)[predicted]
    metric = get_metric("macro_f1")
    score = metric.score(labels, probabilities)
    rows = metric.interval(labels, probabilities)
    whole = metric.interval(labels, probabilities, documents.astype(str))
    assert rows[0] < score < rows[1] and whole[0] < score < whole[1]
    assert whole[1] - whole[0] > 2 * (rows[1] - rows[0])  # ten rows a document: about sqrt(10) wider
    assert metric.interval(labels, probabilities) == rows  # the same draws for the same predictions
    assert get_metric("mean_f1").interval(np.eye(3)[labels], probabilities) is None  # a task's thresholds
    # Sixteen val rows all right: not [1, 1], but what sixteen rows can rule out (1 - 3/16).
    perfect = np.eye(4)[np.arange(16) % 4]
    assert metric.interval(np.arange(16) % 4, perfect) == (pytest.approx(1 - 3 / 16), 1.0)
    pairs = (np.arange(16) // 2).astype(str)  # eight groups of two
    assert metric.interval(np.arange(16) % 4, perfect, pairs)[0] == pytest.approx(1 - 3 / 8)


def test_what_a_score_is_worth_reads_in_the_summary():
    from pipeline.runs.report import worth

    assert worth({"images": 2797, "interval": [0.9512, 0.9655]}) == "on 2,797 rows (95% interval 0.951-0.966)"
    grouped = {"images": 300, "groups": 60, "interval": [0.5, 0.7]}
    assert worth(grouped) == "on 300 rows of 60 groups (95% interval 0.500-0.700)"
    assert worth({"images": 10, "interval": None}) == "on 10 rows"
    chosen = {"images": 120, "chosen_epoch": {"epoch": 3, "scored": 10, "last": 0.725}}
    assert worth(chosen) == "on 120 rows; epoch 3, the best of 10 on these rows (the last: 0.7250)"
    for bad in ({"epoch": "3", "scored": 10, "last": 0.7}, {"epoch": 3, "scored": True, "last": 0.7},
                {"epoch": 3, "scored": 10, "last": float("nan")}, [3, 10, 0.7]):  # fmt: skip
        assert worth({"images": 120, "chosen_epoch": bad}) == "on 120 rows"  # a kernel's output says anything
    crossed = {**chosen, "cross_fitted": {"epochs": [3, 3, 2, 3, 10], "kept": 0.7583}}
    assert worth(crossed) == (
        "on 120 rows; scored cross-fitted: each of 5 parts at the epoch the others chose (3 3 2 3 10); "
        "the weights: epoch 3, the best of 10 on all of val (0.7583; the last: 0.7250)"
    )
    for bad in ({"epochs": [3, "2"], "kept": 0.7}, {"epochs": [3, 2], "kept": True},
                {"epochs": [], "kept": 0.7}, {"epochs": [3] * 101, "kept": 0.7},
                {"epochs": [3, 2], "kept": float("inf")}):  # fmt: skip
        assert worth({**chosen, "cross_fitted": bad}) == worth(chosen)
    # The end kept, yet a part chose another epoch: the headline is not the kept weights', so say both.
    ended = {"images": 200, "metric": "roc_auc", "val_roc_auc": 0.89213}
    ended["cross_fitted"] = {"epochs": [7, 8, 7, 8, 8], "kept": 0.89721}
    assert worth(ended) == (
        "on 200 rows; scored cross-fitted: each of 5 parts at the epoch the others chose (7 8 7 8 8); "
        "the kept weights: 0.8972 on all of val"
    )
    ended["cross_fitted"] = {"epochs": [8] * 5, "kept": 0.89213}  # every part at the kept epoch
    assert worth(ended).endswith("the others chose (8 8 8 8 8)")


@pytest.mark.parametrize(
    ("scores", "greater", "chosen"),
    [
        ([0.34, 0.67, 0.758, 0.675, 0.725], True, {"epoch": 3, "scored": 5, "last": 0.725}),
        ([12.2, 11.04, 11.3, 11.33], False, {"epoch": 2, "scored": 4, "last": 11.33}),  # RMSE: lower
        ([0.5, None, 0.9, None, 0.7], True, {"epoch": 3, "scored": 3, "last": 0.7}),  # val_every = 2
        ([0.5, 0.7, 0.9], True, None),  # the end is the best: nothing chosen over it
        ([0.9, 0.7, 0.9], True, None),  # the end as good as the best
        ([None, None, 0.8], True, None),  # one epoch scored
    ],
)
def test_a_runs_epoch_chosen_on_its_val_rows_over_the_schedules_end(tmp_path, scores, greater, chosen):
    import pandas as pd

    from pipeline.core.rundir import RunDir
    from pipeline.runs.report import chosen_epoch

    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    pd.DataFrame({"epoch": range(1, len(scores) + 1), "loss": 1.0, "val_x": scores}).to_csv(
        run.history_file, index=False
    )
    assert chosen_epoch(run, "val_x", greater) == chosen
    assert chosen_epoch(RunDir(tmp_path / "none"), "val_x", greater) is None  # no history: none chosen


def test_the_main_jobs_summary_and_the_cv_line_say_what_a_score_is_worth(tmp_path):
    import json

    from pipeline.cv.experiment import summary_line
    from pipeline.runs import leaderboard
    from pipeline.runs.report import closing_summary

    run = tmp_path / "runs" / "cpu-run"
    run.mkdir(parents=True)
    evaluation = {"images": 2797, "groups": None, "interval": [0.9512, 0.9655]}
    (run / "metrics.json").write_text(json.dumps({"evaluation": evaluation}))
    leaderboard.update(tmp_path / leaderboard.BOARD, "cpu-run", kind="run", val_macro_f1=0.958)
    provenance = {"entry": "cpu-run", "run_dir": str(run)}
    flowers = load_spec("flowers")
    summary = closing_summary(tmp_path, "flowers", flowers, provenance, tmp_path / "s.csv", 3, None, False)
    lines = summary.splitlines()
    assert lines[3] == (
        "  scored   val macro-F1 0.9580 on 2,797 rows (95% interval 0.951-0.966), rank 1 of 1 on the "
        "offline leaderboard"
    )
    spec = load_spec("flowers")
    metrics = {"cv_score": 0.9, "examples": 300, "groups": 60, "interval": [0.85, 0.94], "fold_scores": [0.9],
               "fold_mean": 0.9, "fold_std": 0.0, "cv_epoch": 3}  # fmt: skip
    assert summary_line("cv5-x", spec, metrics).startswith(
        "cv5-x: CV macro-F1 0.9000 on 300 out-of-fold examples of 60 groups (95% interval 0.850-0.940); "
    )
    # what a CV score scores (fold models on 4/5 of the rows) against what is submitted (their mean)
    assert (
        "; each row scored by a fold model trained on the other 4/5; submitted: the 5 fold models' mean;"
        in (summary_line("cv5-x", spec, {**metrics, "folds": 5}))
    )
    # folds that kept their schedule's end need no second figure; a group trained earlier, whose folds
    # kept an epoch chosen on their rows, gives the end beside it
    ended = {**metrics, "epochs": 6, "fold_scores_last": [0.8, 0.9]}
    assert "schedule's end" not in summary_line("cv5-x", spec, {**ended, "best_epochs": [6, 6]})
    assert "; at the schedule's end 0.8500" in summary_line("cv5-x", spec, {**ended, "best_epochs": [4, 6]})
    group = tmp_path / "runs" / "cv5-x"
    group.mkdir()
    (group / "metrics.json").write_text(json.dumps(metrics))
    board, members = (
        tmp_path / leaderboard.BOARD,
        {"cv": "5 folds: a b c d e", "refit": "refit of cv5-x to epoch 3"},
    )
    for entry, kind in (("cv5-x", "cv"), ("refit-x", "refit")):
        leaderboard.update(
            board, entry, kind=kind, cv_score=0.9, cv_spread=0.01, folds=5, members=members[kind]
        )
    said = {}
    for entry in ("cv5-x", "refit-x"):
        provenance = {"entry": entry, "run_dir": str(group)}
        said[entry] = closing_summary(
            tmp_path, "flowers", flowers, provenance, tmp_path / "s.csv", 3, None, False
        )
    assert (
        "  scored   macro-F1 0.9000 ± 0.0100 by 5-fold CV on 300 rows of 60 groups "
        "(95% interval 0.850-0.940), each row scored by a fold model trained on the other 4/5; "
        "submitted: the 5 fold models' mean, rank"
    ) in said["cv5-x"]
    refit = "by refit (CV of cv5-x), each row scored by a fold model trained on the other 4/5; submitted:"
    assert f"{refit} one model refitted on all of them, rank" in said["refit-x"]


def test_thresholds_are_judged_on_other_groups_than_they_were_chosen_on(monkeypatch):
    """A multi-label task chooses its thresholds on one half of the held-out rows and judges them
    on the other: with groups, each half is whole groups, so no group judges a threshold it chose."""
    from pipeline.tasks.targets import multi_label_decision

    halves: list[np.ndarray] = []
    choose = multi_label_decision.choose

    def recorded(labels, probabilities):
        halves.append(probabilities[:, 0].copy())  # which rows chose: their first probability
        return choose(labels, probabilities)

    monkeypatch.setattr(multi_label_decision, "choose", recorded)
    rng = np.random.default_rng(0)
    groups_ = np.repeat(np.arange(20), 3).astype(str)
    rng.shuffle(groups_)  # a group's rows are not next to each other
    probabilities = rng.random((60, 4))
    labels = (rng.random((60, 4)) < 0.5).astype(np.int32)
    multi_label_decision.cross_fitted(labels, probabilities, groups_)
    chose = [np.isin(probabilities[:, 0], half) for half in halves]
    assert not set(groups_[chose[0]]) & set(groups_[chose[1]])  # no group in both halves
    halves.clear()
    multi_label_decision.cross_fitted(labels, probabilities)  # without: alternate rows split groups
    chose = [np.isin(probabilities[:, 0], half) for half in halves]
    assert set(groups_[chose[0]]) & set(groups_[chose[1]])


def test_a_competitions_own_val_split_sharing_a_group_with_train_is_refused(tmp_path):
    """Kaggle's val split is the competition's to give: where it shares a named group with train,
    its score counts groups the model trained on, and petals says so before training."""
    spec_file, source = _competition(tmp_path, 'group_column = "doc"')
    text = spec_file.read_text().replace('splits = ["train", "test"]', 'splits = ["train", "val", "test"]')
    text = text.replace('labeled_splits = ["train"]', 'labeled_splits = ["train", "val"]')
    text = text.replace("test = 10\n", "test = 10\nval = 2\n")
    text = text.replace("[data.table.test]", '[data.table.val]\nfile = "val.csv"\n\n[data.table.test]')
    spec_file.write_text(text)
    (source / "val.csv").write_text("id,text,label,doc\nv1,more of document 0,0,doc0\nv2,another,1,docX\n")
    spec, data = load_spec(str(spec_file)), tmp_path / "data-val"
    assert cli.main(["fetch", "--no-progress", "--competition", str(spec_file), "--source", "dir",
                     "--from", str(source), "--data-dir", str(data)]) == 0  # fmt: skip
    with pytest.raises(PetalsError, match=r"val split shares 1 groups with train \(e\.g\. 'doc0'\)"):
        splits.train_and_val(locate_data(data), spec, _config(spec))


def test_what_a_score_is_worth_is_said_only_of_values_of_its_shape():
    """A run's metrics.json may come from a kernel's output: odd values are not shown, never a crash."""
    from pipeline.runs.report import _worth_shaped

    assert _worth_shaped({"images": 10, "groups": None, "interval": [0.1, 0.2]})
    for odd in ({"images": "12"}, {"images": 10, "interval": [0.5]}, {"images": 10, "groups": True},
                {"images": 10, "interval": [0.1, float("nan")]}, ["images"], None):  # fmt: skip
        assert not _worth_shaped(odd), odd


def test_an_interval_of_no_rows_is_none_and_one_of_rows_all_right_is_what_they_rule_out():
    from competition.metric import get_metric

    metric = get_metric("macro_f1")
    assert metric.interval(np.array([], np.int64), np.zeros((0, 3))) is None
    labels = np.arange(2_000)  # 2,000 classes, each row right: every draw scores 1
    assert metric.interval(labels, np.eye(2_000, dtype=np.float32), draws=4) == (1 - 3 / 2_000, 1.0)


def _with_doc(data: Path, change) -> None:
    """The fetched train.csv with its `doc` column changed by `change(row number, value)`."""
    import pandas as pd

    [path] = [p for p in data.rglob("train.csv")]
    table = pd.read_csv(path, dtype=str, keep_default_na=False)
    table["doc"] = [change(i, value) for i, value in enumerate(table["doc"])]
    table.to_csv(path, index=False)


@pytest.mark.parametrize(("value", "said"), [("", "an empty"), ("   ", "an empty"),
                                             ("NA", "a missing value's marker ('NA') as its"),
                                             ("nan", "a missing value's marker ('nan') as its")])  # fmt: skip
def test_a_group_value_that_says_none_is_refused_not_taken_for_one_group(tmp_path, value, said):
    spec, data = _fetched(tmp_path, 'group_column = "doc"')
    _with_doc(data, lambda i, doc: value if i in (7, 12) else doc)  # would merge two documents' rows
    with pytest.raises(PetalsError, match=rf"train.csv: 'doc1_2' has {re.escape(said)} 'doc': name each"):
        folds.fold_table(data, spec, _config(spec, folds=5))


def test_spaces_around_a_group_value_keep_the_group_whole(tmp_path):
    spec, data = _fetched(tmp_path, 'group_column = "doc"')
    _with_doc(data, lambda i, doc: f" {doc}  " if i % 2 else doc)  # half of each document's rows
    table = folds.fold_table(data, spec, _config(spec, folds=5))
    for fold in range(5):
        held = table.folds == fold
        assert not _shared_documents(table.ids[~held], table.ids[held])


def test_the_text_probe_chooses_its_penalty_on_whole_documents(grouped, cpu, tmp_path, caplog, monkeypatch):
    """A TF-IDF probe run on the grouped passages: the inner CV that chooses its C is handed each
    passage's document and keeps each document on one side, and its line says so."""
    from pipeline.modeling import head_fits
    from pipeline.stages import train
    from pipeline.tasks.recipe_config import load_config

    spec, data = grouped
    handed = []
    real = head_fits.inner_folds

    def spy(labels, groups, views, seed):
        splits = real(labels, groups, views, seed)
        handed.append((np.asarray(groups), splits))
        return splits

    monkeypatch.setattr(head_fits, "inner_folds", spy)
    caplog.set_level("INFO")
    overrides = [f"competition={spec.file}", "model.backbone=tfidf", "data.batch_size=8",
                 "data.sequence_length=32", "data.vocabulary_size=300", "train.epochs=1",
                 "train.head_solver=logistic"]  # fmt: skip
    job = train.prepare(load_config("cpu", overrides), cpu, data, tmp_path / "runs", None, None)
    train.fit(job, progress=False)
    [(documents, splits)] = handed
    assert set(documents) <= {f"doc{d}" for d in range(DOCUMENTS)} and len(splits) >= 2
    for kept, held in splits:
        assert not set(documents[kept]) & set(documents[held])
    assert "over whole groups" in caplog.text


def test_the_groups_of_several_sets_of_held_out_rows_come_from_one_read_of_the_column(grouped, monkeypatch):
    """`make compare` asks the groups of each run's val rows and of the rows both hold: one read of
    the group column (it was three), the same groups as reading it each time."""
    spec, data = grouped
    reads = []
    column = groups._column
    monkeypatch.setattr(groups, "_column", lambda *a: reads.append(a[2]) or column(*a))
    ids = np.array([f"doc{d}_{p}" for d in range(DOCUMENTS) for p in range(PASSAGES)])
    groups_of = groups.held_out_grouping(data, spec)
    found = [groups_of(ids[:7]), groups_of(ids[3:]), groups_of(ids[3:7])]
    assert reads == list(spec.labeled_splits)
    for part, got in zip((ids[:7], ids[3:], ids[3:7]), found, strict=True):
        assert got.tolist() == groups.held_out_groups(data, spec, part).tolist() == _document(part).tolist()
    with pytest.raises(PetalsError, match="example 'nope' has no 'doc'"):
        groups_of(np.array(["nope"]))
