"""Evaluate, predict and ensemble on two tiny trained runs: scores, files, TTA and blend shapes, ids."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from sklearn.metrics import f1_score

from pipeline import cli
from pipeline.core.machine import cpu_name
from pipeline.core.rundir import RunDir
from pipeline.cv import crossfit
from pipeline.cv.blend import blend
from pipeline.modeling.inference import Predictions
from pipeline.runs import leaderboard
from pipeline.runs.submission_files import sample_ids
from pipeline.stages import ensemble
from pipeline.tasks import mistakes
from pipeline.tasks.competitions import check_submission
from tests.conftest import competition_of, kept_score

pytestmark = pytest.mark.slow


def _stage(*args: str) -> int:
    return cli.main(["--quiet", *args])


@pytest.fixture
def runs(tiny_runs, tmp_path):
    """Private copies of the two trained runs, and where their submissions and board go."""
    runs_dir = tmp_path / "runs"
    for run_dir in tiny_runs:
        shutil.copytree(run_dir, runs_dir / run_dir.name)
    return runs_dir, [d.name for d in tiny_runs], tmp_path / "submissions"


def test_evaluate_reports_scikit_learns_macro_f1_and_writes_its_files(runs, tiny_data_dir, spec, capsys):
    runs_dir, (name, _), subs = runs
    common = ["--data-dir", str(tiny_data_dir), "--runs-dir", str(runs_dir), "--submissions-dir", str(subs)]
    assert _stage("evaluate", *common, "--run", name) == 0
    run_dir = runs_dir / name
    metrics = json.loads((run_dir / "metrics.json").read_text())
    evaluation = metrics["evaluation"]
    made = RunDir(run_dir).read_json(RunDir.RUN_INFO)  # where its numbers were computed
    assert made["cpu"] == cpu_name() and made["built_with"]["numpy"] == np.__version__
    val = Predictions.load(run_dir / "val_predictions.npz")
    assert val.probabilities.shape == (evaluation["images"], spec.num_classes)
    assert len(set(val.ids.tolist())) == len(val.ids) and val.labels.min() >= 0
    expected = f1_score(val.labels, val.predicted, average="macro")
    assert kept_score(evaluation, "val_macro_f1") == pytest.approx(expected)
    # The best weights again give the val macro-F1 training recorded for its best epoch.
    assert kept_score(evaluation, "val_macro_f1") == pytest.approx(metrics["val_macro_f1"], abs=1e-6)
    per_class = pd.read_csv(run_dir / "per_class.csv")  # of the kept weights, as the confusions are
    assert len(per_class) == spec.num_classes and per_class["support"].sum() == len(val.ids)
    np.testing.assert_allclose(
        per_class.set_index("class").loc[list(spec.classes), "f1"],
        f1_score(val.labels, val.predicted, average=None, labels=range(spec.num_classes), zero_division=0),
        atol=1e-4,
    )
    confusions = pd.read_csv(run_dir / "confusions.csv")
    assert confusions["count"].sum() == int((val.predicted != val.labels).sum())
    assert set(confusions["true"]) <= set(spec.classes)
    assert (run_dir / "confusion.png").stat().st_size > 10_000
    # The most confident mistakes: as many as the grid holds, drawn, and named in the summary.
    wrong = int((val.predicted != val.labels).sum())
    shown = min(wrong, mistakes.MAX_IMAGES)
    assert evaluation["mistakes"] == {
        "wrong": wrong, "of": len(val.ids), "shown": shown, "file": str(run_dir / "mistakes.png")
    }  # fmt: skip
    with Image.open(run_dir / "mistakes.png") as grid:
        assert grid.size[0] <= 1300 and grid.size[1] <= 1600  # 6 x 6 images at most, downscaled
    out = capsys.readouterr().out
    assert f"val macro-F1 {evaluation['val_macro_f1']:.4f}" in out and "top confusions" in out
    assert f"mistakes: the {shown} most confident of {wrong} wrong (of {len(val.ids)}) in {run_dir}" in out
    row = leaderboard.read(subs / leaderboard.BOARD).set_index("entry").loc[name]
    manifest = json.loads((tiny_data_dir / "manifest.json").read_text())
    assert row["kind"] == "run" and row["backbone"] == "cnn"
    assert row["data_source"] == manifest["source"] and row["data_fingerprint"] == manifest["fingerprint"]
    assert row["val_macro_f1"] == pytest.approx(evaluation["val_macro_f1"], abs=1e-5)  # the run's score


def test_predict_with_tta_writes_a_valid_submission_of_every_test_id(runs, tiny_data_dir, spec, caplog):
    runs_dir, (name, _), subs = runs
    common = ["--data-dir", str(tiny_data_dir), "--runs-dir", str(runs_dir), "--submissions-dir", str(subs)]
    assert _stage("predict", *common, "--run", name, "--tta", "3") == 0
    test = Predictions.load(RunDir(runs_dir / name).predictions("test", 3))
    expected_ids = sample_ids(tiny_data_dir, spec)
    assert sorted(test.ids.tolist()) == sorted(expected_ids) and test.tta == 3
    assert test.probabilities.shape == (len(expected_ids), spec.num_classes)
    np.testing.assert_allclose(test.probabilities.sum(axis=1), 1.0, atol=1e-4)
    csv = subs / f"{name}.csv"
    check_submission(csv, spec, expected_ids)
    frame = pd.read_csv(csv, dtype={"id": str})
    assert frame["id"].tolist() == expected_ids  # the sample submission's order
    assert frame["label"].tolist() == test.by_ids(np.array(expected_ids)).predicted.tolist()
    # TTA passes differ from the plain pass; a rerun reuses the saved predictions.
    assert _stage("predict", *common, "--run", name) == 0
    plain = Predictions.load(RunDir(runs_dir / name).predictions("test", 1))
    assert not np.allclose(plain.probabilities, test.by_ids(plain.ids).probabilities)
    caplog.set_level("INFO")
    assert cli.main(["predict", *common, "--run", name]) == 0
    assert "test predictions are up to date" in caplog.text
    meta = json.loads(csv.with_suffix(".json").read_text())
    assert (
        meta["entry"] == name and meta["data_source"] == "kaggle-input" and meta["rows"] == len(expected_ids)
    )


def test_a_split_predicted_from_pixels_reads_untuned(runs, tiny_data_dir, spec, cpu, autotuned_reads):
    """Its tags, then its views, each read to the end and dropped: with autotune on, dropping the
    iterator waited 14-17 s for autotune's thread in about half the flowers' test passes."""
    from pipeline.modeling.inference import predict_split

    tuned = autotuned_reads
    runs_dir, (name, _), _ = runs
    run = RunDir(runs_dir / name)
    predicted = predict_split(run, competition_of(run), tiny_data_dir, "test", 1, cpu)
    assert sorted(predicted.ids.tolist()) == sorted(sample_ids(tiny_data_dir, spec))
    assert len(tuned) >= 2 and all(enabled is False for enabled in tuned)


def test_evaluate_and_predict_in_one_process_write_what_each_writes_alone(runs, tiny_data_dir, capsys):
    """`make train submit` runs `evaluate,predict`: one engine start, the same files as two commands;
    any other pair is one line, and a failed evaluate leaves predict unrun."""
    runs_dir, (name, _), subs = runs
    common = ["--data-dir", str(tiny_data_dir), "--runs-dir", str(runs_dir), "--submissions-dir", str(subs)]
    assert _stage("evaluate,predict", *common, "--run", name) == 0
    metrics = json.loads((runs_dir / name / "metrics.json").read_text())
    assert "evaluation" in metrics and (runs_dir / name / "per_class.csv").is_file()
    assert (subs / f"{name}.csv").is_file()
    capsys.readouterr()
    assert _stage("predict,evaluate", *common, "--run", name) == 2
    assert "stages run together only as evaluate,predict" in capsys.readouterr().err
    assert _stage("evaluate,predict", *common, "--run", "no-such-run") == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert line.startswith("petals evaluate: error:")


def test_an_ensemble_blends_probabilities_and_its_weight_search_beats_each_member(runs, tiny_data_dir, spec):
    runs_dir, names, subs = runs
    common = ["--data-dir", str(tiny_data_dir), "--runs-dir", str(runs_dir), "--submissions-dir", str(subs)]
    assert _stage("ensemble", "--runs", *names, "--weights", "1", "3", "--name", "blend", *common) == 0
    members = [Predictions.load(runs_dir / n / "val_predictions.npz") for n in names]
    blended = Predictions.load(runs_dir / "blend" / "val_predictions.npz")
    second = members[1].by_ids(members[0].ids)
    # The test set is blended with the weights given; val too, each part with each member at the
    # epoch the other parts chose (the test below), which is the kept one wherever all agree.
    tests = [Predictions.load(runs_dir / n / "test_predictions.npz") for n in names]
    test = Predictions.load(runs_dir / "blend" / "test_predictions.npz")
    np.testing.assert_allclose(
        test.probabilities,
        0.25 * tests[0].by_ids(test.ids).probabilities + 0.75 * tests[1].by_ids(test.ids).probabilities,
        atol=1e-6,
    )
    metrics = json.loads((runs_dir / "blend" / "metrics.json").read_text())
    assert metrics["val_macro_f1"] == pytest.approx(
        f1_score(blended.labels, blended.predicted, average="macro")
    )
    check_submission(subs / "blend.csv", spec, sample_ids(tiny_data_dir, spec))
    assert test.probabilities.shape == (len(sample_ids(tiny_data_dir, spec)), spec.num_classes)

    assert _stage("ensemble", "--runs", *names, "--search", "--name", "searched", *common) == 0
    searched = json.loads((runs_dir / "searched" / "metrics.json").read_text())
    # The tiny val holds one image a class: its parts are dealt at random, not stratified, and
    # scored cross-fitted (the tests below); the weights searched on all of val beat each member there.
    assert searched["weights_searched_on_val"] is True
    assert searched["judged"].startswith("on val cross-fitted")
    weights = [searched["members"][n] for n in names]
    on_all = blend([members[0].probabilities, second.probabilities], np.asarray(weights)).argmax(axis=1)
    assert (
        f1_score(members[0].labels, on_all, average="macro")
        >= max(f1_score(m.labels, m.predicted, average="macro") for m in members) - 1e-9
    )
    assert sum(searched["members"].values()) == pytest.approx(1.0)
    board = leaderboard.read(subs / leaderboard.BOARD).set_index("entry")
    assert board.loc["blend", "kind"] == "ensemble" and "searched on val" in board.loc["searched", "members"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--weights", "1"], "--weights: 1 weight(s) for 2 run(s)"),
        (["--weights", "1", "-1"], "need weights >= 0"),
    ],
)
def test_ensemble_bad_input_is_one_line(runs, tiny_data_dir, capsys, extra, message):
    runs_dir, names, subs = runs
    common = ["--data-dir", str(tiny_data_dir), "--runs-dir", str(runs_dir), "--submissions-dir", str(subs)]
    assert cli.main(["ensemble", "--runs", *names, *extra, *common]) == 2
    assert message in capsys.readouterr().err
    assert not subs.exists()


def test_a_blend_named_as_a_run_is_refused_and_the_run_kept(runs, tiny_data_dir, capsys):
    """`--name` naming a trained run would replace its metrics, predictions and board row with the
    blend's (its training lost): refused in one line, the run as it was."""
    runs_dir, names, subs = runs
    metrics = (runs_dir / names[0] / "metrics.json").read_bytes()
    common = ["--data-dir", str(tiny_data_dir), "--runs-dir", str(runs_dir), "--submissions-dir", str(subs)]
    assert cli.main(["ensemble", "--runs", *names, "--name", names[0], *common]) == 2
    assert f"{runs_dir / names[0]}: not a blend (it holds config.json)" in capsys.readouterr().err
    assert (runs_dir / names[0] / "metrics.json").read_bytes() == metrics


def test_members_scored_on_different_images_are_refused(tmp_path):
    a = Predictions(np.array(["x", "y"]), np.eye(2, dtype=np.float32), np.array([0, 1]))
    b = Predictions(np.array(["x", "z"]), np.eye(2, dtype=np.float32), np.array([0, 1]))
    swapped = Predictions(np.array(["y", "x"]), np.eye(2, dtype=np.float32)[::-1], np.array([1, 0]))
    _, second = ensemble.aligned([a, swapped], [tmp_path / "a", tmp_path / "s"], "val")
    np.testing.assert_array_equal(second.probabilities, a.probabilities)  # lined up by id
    with pytest.raises(Exception, match="a and b predicted different val images"):
        ensemble.aligned([a, b], [tmp_path / "a", tmp_path / "b"], "val")


def test_predicting_on_other_data_than_the_run_was_trained_on_is_refused(
    runs, tiny_data_dir, tmp_path, capsys
):
    runs_dir, (name, _), _ = runs
    other = tmp_path / "other-data"
    other.mkdir()
    (other / "manifest.json").write_text(json.dumps({"fingerprint": "sha256:0000", "origin": "elsewhere"}))
    code = cli.main(["predict", "--data-dir", str(other), "--runs-dir", str(runs_dir), "--run", name])
    assert code == 2
    origin = json.loads((tiny_data_dir / "manifest.json").read_text())["origin"]
    err = capsys.readouterr().err
    assert f"{name} was trained on {origin}" in err and "holds elsewhere" in err
    assert not RunDir(runs_dir / name).predictions("test").exists()


def test_the_weight_search_never_ends_below_its_best_member():
    # From equal weights, coordinate ascent first moves to the second member's corner (better than
    # the equal blend), and from a corner no single weight reaches the first member, which is best.
    labels = np.array([2, 1, 2, 2, 2, 0])
    first = np.array(
        [[0.2, 0, 0.8], [0, 0.1, 0.8], [0, 0.3, 0.7], [0, 0.2, 0.8], [0.4, 0.3, 0.3], [0.5, 0.2, 0.2]],
        np.float32,
    )
    second = np.array(
        [[0.2, 0.2, 0.6], [0.1, 0.5, 0.4], [0.3, 0.7, 0], [0.6, 0.2, 0.2], [0.1, 0.7, 0.2], [0.3, 0.1, 0.7]],
        np.float32,
    )
    weights = ensemble.search_weights([first, second], labels, np.ones(2))
    blended = ensemble.blend([first, second], weights).argmax(axis=1)
    best_member = max(f1_score(labels, p.argmax(axis=1), average="macro") for p in (first, second))
    assert f1_score(labels, blended, average="macro") >= best_member - 1e-9


def test_a_val_score_whose_epoch_these_rows_chose_says_so_and_what_the_end_scored(
    runs, tiny_data_dir, capsys
):
    """The weights evaluate scores are the epoch that scored best on val: where that is not the
    schedule's end, the evaluation and its line say which epoch, of how many, and what the end
    scored. A run that kept no epoch's val predictions (trained before they were kept) scores the
    choice on its own rows and says so."""
    runs_dir, (name, _), subs = runs
    history = pd.read_csv(runs_dir / name / "history.csv")
    history.loc[0, "val_macro_f1"] = 0.99  # as if the first epoch had scored best on these rows
    history.to_csv(runs_dir / name / "history.csv", index=False)
    shutil.rmtree(runs_dir / name / RunDir.VAL_EPOCHS)
    common = ["--data-dir", str(tiny_data_dir), "--runs-dir", str(runs_dir), "--submissions-dir", str(subs)]
    assert _stage("evaluate", *common, "--run", name) == 0
    evaluation = json.loads((runs_dir / name / "metrics.json").read_text())["evaluation"]
    last = float(history["val_macro_f1"].iloc[-1])
    assert evaluation["chosen_epoch"] == {"epoch": 1, "scored": 3, "last": pytest.approx(last)}
    assert evaluation["cross_fitted"] is None
    assert f"; epoch 1, the best of 3 on these rows (the last: {last:.4f}), TTA 1" in capsys.readouterr().out


def test_a_single_runs_score_is_its_epoch_choice_cross_fitted_never_a_part_scored_by_its_own_choice(
    runs, tiny_data_dir, capsys
):
    """A single run keeps the epoch that scored best on val. Its score is each part of val at the
    epoch the other parts chose: an epoch that is right on one part and wrong on the rest wins on
    all of val, and must not score that part (it would, were a part's own rows in its choice)."""
    from pipeline.cv.crossfit import val_parts

    runs_dir, (name, _), subs = runs
    run = RunDir(runs_dir / name)
    kept = run.metrics()["best_epoch"]
    folder = run.file(RunDir.VAL_EPOCHS)
    labels = np.load(folder / "labels.npy")
    common = ["--data-dir", str(tiny_data_dir), "--runs-dir", str(runs_dir), "--submissions-dir", str(subs)]
    assert _stage("evaluate", *common, "--run", name) == 0
    val = Predictions.load(run.predictions("val"))
    # Training's val rows are evaluate's, in its order: the kept epoch's probabilities are the same.
    np.testing.assert_array_equal(labels, val.labels)
    np.testing.assert_allclose(np.load(folder / f"epoch-{kept}.npy"), val.probabilities, atol=1e-5)
    part = val_parts(val.ids, val.labels, None)
    assert part is not None and len(set(part)) >= 2

    # An epoch (not the kept one) right on part 0's rows and sure of a wrong class everywhere else.
    forged = max(e for e in (1, 2, 3) if e != kept)  # past the first: equals choose the first
    right = np.eye(val.probabilities.shape[1], dtype=np.float32)[val.labels]
    wrong = np.roll(right, 1, axis=1)
    np.save(folder / f"epoch-{forged}.npy", np.where((part == 0)[:, None], right, wrong))
    chosen_on_all = f1_score(val.labels, np.where(part == 0, val.labels, -1), average="macro")
    assert chosen_on_all > f1_score(val.labels, val.probabilities.argmax(axis=1), average="macro")

    assert _stage("evaluate", *common, "--run", name) == 0
    evaluation = run.metrics()["evaluation"]
    epochs = evaluation["cross_fitted"]["epochs"]
    assert len(epochs) == len(set(part)) and epochs[0] != forged  # part 0 scored by another epoch
    stored = {e: np.load(folder / f"epoch-{e}.npy") for e in (1, 2, 3)}
    stored[kept] = val.probabilities
    judged = np.concatenate([stored[e][part == p] for p, e in enumerate(epochs)])
    truth = np.concatenate([val.labels[part == p] for p in range(len(epochs))])
    crossed = f1_score(truth, judged.argmax(axis=1), average="macro")
    assert evaluation["val_macro_f1"] == pytest.approx(crossed)
    assert evaluation["cross_fitted"]["kept"] == pytest.approx(
        f1_score(val.labels, val.probabilities.argmax(axis=1), average="macro")
    )
    assert f"scored cross-fitted: each of {len(epochs)} parts at the epoch the others chose" in (
        capsys.readouterr().out
    )


def test_a_runs_kept_epoch_predictions_are_read_only_when_they_fit_val(tmp_path):
    """A run's folder may come back from a kernel's output: an epoch file whose header declares
    more rows than val, or labels that are not val's, is one line naming the file, read no further."""
    from pipeline.core.errors import PetalsError
    from pipeline.modeling import val_epochs

    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    labels, probabilities = np.array([0, 1, 2, 1]), np.full((4, 3), 1 / 3, np.float32)
    for epoch in (1, 2):
        val_epochs.keep(run, epoch, probabilities, labels)
    found = val_epochs.read(run, [1, 2], labels, probabilities.shape)
    np.testing.assert_array_equal(found[2], probabilities)
    assert val_epochs.read(run, [1, 2, 3], labels, probabilities.shape) is None  # an epoch not kept
    with pytest.raises(PetalsError, match=r"labels\.npy: not the val rows evaluate reads"):
        val_epochs.read(run, [1, 2], labels[::-1], probabilities.shape)
    big = RunDir(tmp_path / "big")
    big.path.mkdir()
    val_epochs.keep(big, 1, np.zeros((val_epochs.MAX_VALUES // 4 + 1, 4), np.float32), np.zeros(4))
    assert not big.file(RunDir.VAL_EPOCHS).exists()  # a val too large to keep an epoch of is not kept
    huge = run.file(RunDir.VAL_EPOCHS) / "epoch-2.npy"
    header = np.lib.format.header_data_from_array_1_0(probabilities)
    with open(huge, "wb") as f:  # declares 10^12 rows in a few hundred bytes
        np.lib.format.write_array_header_1_0(f, {**header, "shape": (10**12, 3)})
    with pytest.raises(PetalsError, match=r"epoch-2\.npy"):
        val_epochs.read(run, [1, 2], labels, probabilities.shape)


def _noise_val(seed: int, n: int = 200, members: int = 3, grouped: bool = False):
    """Val predictions of `members` runs that know nothing (random probabilities, random labels of
    4 classes), and groups of 4 rows of one class with `grouped`."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(rng.integers(0, 4, n // 4), 4) if grouped else rng.integers(0, 4, n)
    ids = np.array([f"v{i:04d}" for i in range(n)])
    val = [Predictions(ids, rng.dirichlet(np.ones(4), n).astype(np.float32), labels) for _ in range(members)]
    return val, (np.array([f"g{i // 4}" for i in range(n)]) if grouped else None)


def test_a_searched_blend_of_runs_is_scored_cross_fitted_not_on_the_rows_it_chose_on():
    """Weights searched on val flatter the blend on val: on members that know nothing the search
    finds weights that score above chance on their own rows, while each fifth blended by weights
    searched on the rest scores about chance. The test set gets the weights searched on all of val."""
    from competition.metric import METRICS
    from pipeline.cv.blend import search_weights

    f1, flattered = METRICS["macro_f1"], []
    for seed in (0, 1, 3):
        val, _ = _noise_val(seed, n=120, members=4)
        labels, members = val[0].labels, [v.probabilities for v in val]
        weights, crossed = ensemble.cross_fitted_blend(val, np.ones(4), f1, None)
        np.testing.assert_allclose(weights, search_weights(members, labels, np.ones(4), f1))
        in_sample = f1.score(labels, blend(members, weights))
        assert f1.score(labels, crossed) < in_sample - 0.04, (
            seed
        )  # what the cross-fitted score does not report
        flattered.append(in_sample)
    assert np.mean(flattered) > 0.25 + 0.03  # the search fits noise on the rows it chose on (chance: 0.25)


def crossfit_metric():
    from competition.metric import METRICS

    return METRICS["macro_f1"]


def test_a_blend_of_runs_crosses_each_members_epoch_choice_never_a_part_blended_by_its_own(
    runs, tiny_data_dir
):
    """A single run keeps the epoch its val rows chose, so a blend of runs scored on val carries
    that choice: each part of val is blended with every member at the epoch the other parts chose.
    A member's epoch right on part 0 and wrong elsewhere wins on all of val and must not blend part
    0 (it would, were a part's own rows in its members' choices); even unsearched weights cross it."""
    runs_dir, names, subs = runs
    common = ["--data-dir", str(tiny_data_dir), "--runs-dir", str(runs_dir), "--submissions-dir", str(subs)]
    members = [RunDir(runs_dir / n) for n in names]
    assert _stage("ensemble", "--runs", *names, "--name", "first", *common) == 0  # each member's val
    val = [Predictions.load(m.predictions("val")) for m in members]
    val = [val[0], val[1].by_ids(val[0].ids)]  # in the blend's row order
    labels, part = val[0].labels, crossfit.val_parts(val[0].ids, val[0].labels, None)
    kept = members[0].metrics()["best_epoch"]
    forged = max(e for e in (1, 2, 3) if e != kept)  # past the first: equals choose the first
    folder = members[0].file(RunDir.VAL_EPOCHS)
    order = [
        int(np.flatnonzero(val[0].ids == i)[0]) for i in Predictions.load(members[0].predictions("val")).ids
    ]
    right = np.eye(val[0].probabilities.shape[1], dtype=np.float32)[labels]
    made = np.where((part == 0)[:, None], right, np.roll(right, 1, axis=1))
    np.save(folder / f"epoch-{forged}.npy", made[order])  # the run's own row order
    assert f1_score(labels, made.argmax(1), average="macro") > f1_score(
        labels, val[0].predicted, average="macro"
    )

    assert _stage("ensemble", "--runs", *names, "--name", "crossed", *common) == 0
    metrics = json.loads((runs_dir / "crossed" / "metrics.json").read_text())
    assert metrics["judged"] == (
        f"on val cross-fitted: each of {crossfit.CROSS_FOLDS} parts blended with "
        "members' epochs chosen on the others"
    )
    written = Predictions.load(runs_dir / "crossed" / "val_predictions.npz")
    np.testing.assert_array_equal(written.ids, val[0].ids)

    def epochs(m: int) -> list[np.ndarray]:  # every epoch member m scored, in the blend's order
        stored = Predictions.load(members[m].predictions("val")).ids
        at = [int(np.flatnonzero(stored == i)[0]) for i in val[m].ids]
        found = {e: np.load(members[m].file(RunDir.VAL_EPOCHS) / f"epoch-{e}.npy")[at] for e in (1, 2, 3)}
        found[members[m].metrics()["best_epoch"]] = val[m].probabilities
        return [found[e] for e in (1, 2, 3)]

    expected = np.zeros_like(written.probabilities)
    for p in range(int(part.max()) + 1):
        held = part == p
        chosen = [max(epochs(m), key=lambda c: f1_score(labels[~held], c[~held].argmax(1), average="macro"))
                  for m in (0, 1)]  # fmt: skip
        expected[held] = blend([c[held] for c in chosen], np.array([0.5, 0.5]))
        if p == 0:
            assert not np.allclose(chosen[0][held], made[held])  # part 0 never blends the forged epoch
    np.testing.assert_allclose(written.probabilities, expected, atol=1e-5)
    assert metrics["val_macro_f1"] == pytest.approx(f1_score(labels, expected.argmax(1), average="macro"))
    # The members beside it are scored alike: each part at the epoch the others chose.
    alone = crossfit.pick_oof(epochs(0), labels, part, crossfit_metric())[1]
    assert metrics["member_val_macro_f1"][names[0]] == pytest.approx(
        f1_score(labels, alone.argmax(1), average="macro")
    )
    assert metrics["member_val_macro_f1"][names[0]] < f1_score(labels, made.argmax(1), average="macro")


def test_a_searched_blends_parts_keep_each_group_whole(monkeypatch):
    from competition.metric import METRICS

    val, grouped = _noise_val(1, grouped=True)
    seen = []
    real = crossfit.blend_oof
    monkeypatch.setattr(
        crossfit, "blend_oof", lambda c, y, part, *a, **k: seen.append(part) or real(c, y, part, *a, **k)
    )
    ensemble.cross_fitted_blend(val, np.ones(3), METRICS["macro_f1"], grouped)
    [part] = seen
    assert len(set(part)) == crossfit.CROSS_FOLDS
    assert all(len(set(part[grouped == g])) == 1 for g in set(grouped))  # each group in one part


def test_a_cross_fitted_blend_is_what_the_ensemble_writes_and_scores(runs, tiny_data_dir, monkeypatch):
    """The blend of runs scores, writes and labels val as cross_fitted_blend blended it."""
    runs_dir, names, subs = runs
    made = {}

    def crossed(val, start, metric, grouped, *choices):
        made["val"] = np.flip(val[0].probabilities, axis=1).copy()  # any blend it could have made
        return np.array([0.5, 0.5]), made["val"]

    monkeypatch.setattr(ensemble, "cross_fitted_blend", crossed)
    common = ["--data-dir", str(tiny_data_dir), "--runs-dir", str(runs_dir), "--submissions-dir", str(subs)]
    assert _stage("ensemble", "--runs", *names, "--search", "--name", "crossed", *common) == 0
    metrics = json.loads((runs_dir / "crossed" / "metrics.json").read_text())
    written = Predictions.load(runs_dir / "crossed" / "val_predictions.npz")
    np.testing.assert_allclose(written.probabilities, made["val"], atol=1e-6)
    assert metrics["judged"].startswith("on val cross-fitted")
    assert metrics["val_macro_f1"] == pytest.approx(
        f1_score(written.labels, written.predicted, average="macro")
    )
    board = leaderboard.read(subs / leaderboard.BOARD).set_index("entry")
    assert "(searched on val, scored cross-fitted)" in board.loc["crossed", "members"]


def test_make_compare_pairs_two_runs_on_the_rows_both_held_out_each_as_evaluate_scored_it(
    runs, tiny_data_dir, capsys
):
    """`make compare RUNS="a b"`: each run's score is its evaluate's (the epoch choice cross-fitted),
    and the difference, B's less A's, is drawn on the same rows for both; a run with nothing
    evaluated yet, or named twice, is one line."""
    from pipeline.cv.compare import compare, runs_named

    runs_dir, names, subs = runs
    where = ["--data-dir", str(tiny_data_dir), "--runs-dir", str(runs_dir)]
    assert _stage("leaderboard", "--compare", *names, *where) == 2
    assert f"{names[0]}: no val predictions yet; `make evaluate RUN={names[0]}`" in capsys.readouterr().err
    scores = []
    for name in names:
        assert _stage("evaluate", *where, "--submissions-dir", str(subs), "--run", name) == 0
        evaluation = json.loads((runs_dir / name / "metrics.json").read_text())["evaluation"]
        scores.append(evaluation["val_macro_f1"])
    both, _ = runs_named(runs_dir, tuple(names))
    found = compare(both, competition_of(both[0]).spec, tiny_data_dir)
    assert found.scores == pytest.approx(tuple(scores))  # what evaluate reported of each
    assert found.rows == len(Predictions.load(runs_dir / names[0] / "val_predictions.npz").ids)
    assert found.difference == pytest.approx(scores[1] - scores[0])
    assert found.interval[0] <= found.difference <= found.interval[1]
    capsys.readouterr()
    assert _stage("leaderboard", "--compare", *names, *where) == 0
    assert capsys.readouterr().out == found.line() + "\n"
    assert found.line().startswith(f"macro-F1 on {found.rows:,} rows both held out: {names[0]} ")
    assert _stage("leaderboard", "--compare", names[0], names[0], *where) == 2
    assert "two different runs, each once" in capsys.readouterr().err
