"""`ensemble` over CV groups: the blend is judged out of fold, and only groups of one fold table blend.

The groups are written directly (group.json, metrics.json, OOF and test predictions) beside a
fetched-looking data dir holding a manifest, a sample submission and the stored fold table, so
nothing here trains or reads images.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from competition import load_spec
from pipeline import cli
from pipeline.core.config import Config
from pipeline.core.rundir import RunDir
from pipeline.cv import blend as cv_blend
from pipeline.data import folds
from pipeline.modeling.inference import Predictions
from pipeline.runs import leaderboard
from pipeline.runs.submission_files import sample_ids
from pipeline.tasks.competitions import check_submission
from tests.conftest import run_cli

K, ROWS, TESTS, USED_CLASSES = 3, 120, 20, 4
DATA = "sha256:labelled-data"
CONFIG = Config(train=dataclasses.replace(Config().train, folds=K))


def config(spec) -> Config:
    return dataclasses.replace(CONFIG, competition=spec.name)


@dataclasses.dataclass
class Setting:
    data_dir: Path
    runs_dir: Path
    subs: Path
    table: folds.FoldTable
    test_ids: np.ndarray

    def args(self) -> list[str]:
        dirs = ["--data-dir", self.data_dir, "--runs-dir", self.runs_dir, "--submissions-dir", self.subs]
        return [str(a) for a in dirs]


@pytest.fixture
def setting(tmp_path, spec) -> Setting:
    return make_setting(tmp_path, spec)


@pytest.fixture
def cassava():
    """A competition of 5 classes: stacking on flowers' 104 takes seconds a fit."""
    return load_spec("cassava")


def make_setting(tmp_path: Path, spec) -> Setting:
    """A data dir (manifest, sample submission, stored fold table of K folds) and empty runs."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    manifest = {"competition": spec.name, "root": ".", "labelled_fingerprint": DATA, "source": "test"}
    (data_dir / "manifest.json").write_text(json.dumps(manifest))
    test_ids = np.array([f"t{i:03d}" for i in range(TESTS)])
    pd.DataFrame({spec.id_column: test_ids, "label": 0}).to_csv(
        data_dir / spec.sample_submission, index=False
    )
    rng = np.random.default_rng(0)
    ids = np.array([f"e{i:03d}" for i in range(ROWS)])
    table = folds.deal(ids, rng.integers(0, USED_CLASSES, ROWS), K, seed=0)
    path = folds.table_path(data_dir, config(spec))
    path.parent.mkdir()
    pd.DataFrame({"id": table.ids, "label": table.labels, "fold": table.folds}).to_csv(path, index=False)
    return Setting(data_dir, tmp_path / "runs", tmp_path / "submissions", table, test_ids)


def padded(probabilities: np.ndarray, classes: int) -> np.ndarray:
    """Probabilities over the first few classes, zero for the competition's others."""
    return np.pad(probabilities, ((0, 0), (0, classes - probabilities.shape[1]))).astype(np.float32)


def write_group(setting: Setting, spec, name: str, seed: int, digest: str | None = None) -> RunDir:
    """A finished CV group of random (noise) OOF and test probabilities, as `cv train/predict` leave it."""
    rng = np.random.default_rng(seed)
    group = RunDir(setting.runs_dir / name)
    group.path.mkdir(parents=True)
    digest = digest or setting.table.digest
    info = {"kind": "cv", "competition": spec.name, "recipe": "default", "folds": K, "fold_seed": 0}
    info |= {"fold_table": digest, "data": DATA, "config": config(spec).to_dict()}
    group.write_json(RunDir.GROUP, info)
    group.write_json(RunDir.METRICS, {"kind": "cv", "fold_table": digest, "folds": K})
    oof = padded(rng.dirichlet(np.ones(USED_CLASSES), ROWS), spec.num_classes)
    Predictions(setting.table.ids, oof, setting.table.labels).save(group.predictions("oof"))
    test = padded(rng.dirichlet(np.ones(USED_CLASSES), TESTS), spec.num_classes)
    Predictions(setting.test_ids[::-1], test[::-1]).save(group.predictions("test"))  # any id order
    return group


def members(setting: Setting, names: list[str]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The groups' OOF probabilities and their test probabilities in the sample's id order."""
    runs = [RunDir(setting.runs_dir / n) for n in names]
    oof = [Predictions.load(r.predictions("oof")).probabilities for r in runs]
    tests = [Predictions.load(r.predictions("test")).by_ids(setting.test_ids).probabilities for r in runs]
    return oof, tests


@pytest.mark.slow  # the ensemble stage over fold runs
def test_a_searched_blend_of_groups_reports_its_out_of_fold_score_not_the_in_sample_one(
    tmp_path, cassava, capsys
):
    setting, spec = make_setting(tmp_path, cassava), cassava
    names = ["cv3-a", "cv3-b"]
    for seed, name in enumerate(names):
        write_group(setting, spec, name, seed)
    argv = ["--quiet", "ensemble", "--runs", *names, "--search", "--name", "searched", *setting.args()]
    assert cli.main(argv) == 0
    oof, tests = members(setting, names)
    labels, fold = setting.table.labels, setting.table.folds
    compared = cv_blend.compare(oof, labels, fold, spec.metric, tests)
    expected = compared["search"]  # weight_search_oof's result
    in_sample = spec.metric.score(labels, cv_blend.blend(oof, expected.weights))
    assert abs(in_sample - expected.score) > 0.01  # noise members: the in-sample search flatters
    out = RunDir(setting.runs_dir / "searched")
    metrics = out.metrics()
    assert metrics["judged"] == "out of fold" and metrics["method"] == "search"
    assert metrics[spec.score_key] == pytest.approx(expected.score) == metrics["cv_score"]
    assert metrics["fold_scores"] == pytest.approx(expected.fold_scores)
    assert list(metrics["members"].values()) == pytest.approx(expected.weights)
    assert len(metrics["fold_weights"]) == K
    assert metrics["methods"] == pytest.approx({kind: r.score for kind, r in compared.items()})
    saved = Predictions.load(out.predictions("oof"))
    np.testing.assert_array_equal(saved.ids, setting.table.ids)
    np.testing.assert_allclose(saved.probabilities, expected.oof, atol=1e-6)
    test = Predictions.load(out.predictions("test")).by_ids(setting.test_ids)
    np.testing.assert_allclose(test.probabilities, expected.test, atol=1e-6)
    check_submission(setting.subs / "searched.csv", spec, sample_ids(setting.data_dir, spec))
    row = leaderboard.read(leaderboard.board_file(setting.subs, spec.name)).set_index("entry").loc["searched"]
    assert row["kind"] == "ensemble" and int(row["folds"]) == K and "judged out of fold" in row["members"]
    assert float(row["cv_score"]) == pytest.approx(expected.score, abs=1e-5)
    assert float(row["cv_spread"]) == pytest.approx(np.std(expected.fold_scores, ddof=1), abs=1e-5)
    printed = capsys.readouterr().out
    assert f"OOF {spec.metric.title} {expected.score:.4f}" in printed and "a choice on those rows" in printed


@pytest.mark.thorough  # a further refusal (two CV groups trained here): make test proves the blend once
def test_groups_dealt_different_fold_tables_are_refused(setting, spec, capsys):
    write_group(setting, spec, "cv3-a", 0)
    write_group(setting, spec, "cv3-b", 1, digest="0123456789abcdef")
    assert cli.main(["ensemble", "--runs", "cv3-a", "cv3-b", *setting.args()]) == 2
    err = capsys.readouterr().err
    assert "cv3-a and cv3-b were dealt different fold tables" in err
    assert "blend groups of one FOLDS and fold seed" in err and not setting.subs.exists()


def test_a_stored_fold_table_that_is_not_the_groups_is_refused(setting, spec, capsys):
    for seed, name in enumerate(["cv3-a", "cv3-b"]):
        write_group(setting, spec, name, seed)
    path = folds.table_path(setting.data_dir, config(spec))
    frame = pd.read_csv(path, dtype={"id": str})
    frame["fold"] = np.roll(frame["fold"].to_numpy(), 1)  # the same examples dealt otherwise
    frame.to_csv(path, index=False)
    assert cli.main(["ensemble", "--runs", "cv3-a", "cv3-b", *setting.args()]) == 2
    assert f"not the {setting.table.digest} cv3-a was dealt" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("runs", "extra", "message"),
    [
        (["cv3-a", "some-run"], [], "cv3-a is a CV group and some-run a single run"),
        (["run-a", "run-b"], ["--method", "stack"], "blends CV groups (FOLDS=K), not single runs"),
        (["cv3-a", "cv3-b"], ["--search", "--method", "stack"], "--search and --method stack: pick one"),
        (["cv3-a", "cv3-b"], ["--weights", "1", "2", "--method", "search"], "--weights with --method search"),
        (["cv3-a", "cv3-nopredict"], [], "cv3-nopredict: no test predictions yet; run `make predict FOLDS=3"),
    ],
)
def test_bad_group_ensembles_are_one_line(setting, spec, capsys, runs, extra, message):
    write_group(setting, spec, "cv3-a", 0)
    write_group(setting, spec, "cv3-b", 1)
    write_group(setting, spec, "cv3-nopredict", 2).predictions("test").unlink()
    assert cli.main(["ensemble", "--runs", *runs, *extra, *setting.args()]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not setting.subs.exists()


@pytest.mark.slow  # the ensemble stage over fold runs
def test_given_weights_blend_groups_with_nothing_fitted(tmp_path, cassava):
    setting, spec = make_setting(tmp_path, cassava), cassava
    for seed, name in enumerate(["cv3-a", "cv3-b"]):
        write_group(setting, spec, name, seed)
    argv = ["--quiet", "ensemble", "--runs", "cv3-a", "cv3-b", "--weights", "1", "3", "--name", "w"]
    assert cli.main([*argv, *setting.args()]) == 0
    oof, _ = members(setting, ["cv3-a", "cv3-b"])
    metrics = RunDir(setting.runs_dir / "w").metrics()
    expected = spec.metric.score(setting.table.labels, 0.25 * oof[0] + 0.75 * oof[1])
    assert metrics["method"] == "weights" and metrics["cv_score"] == pytest.approx(expected)
    assert set(metrics["methods"]) == {"equal", "search", "stack"}


@pytest.mark.slow  # the ensemble stage over fold runs
def test_the_cli_stacks_groups_and_records_every_methods_out_of_fold_score(tmp_path, cassava):
    setting, spec = make_setting(tmp_path, cassava), cassava
    for seed, name in enumerate(["cv3-a", "cv3-b"]):
        write_group(setting, spec, name, seed)
    result = run_cli("ensemble", "--runs", "cv3-a", "cv3-b", "--method", "stack", *setting.args())
    assert result.returncode == 0, result.stderr
    (name,) = [p.name for p in setting.runs_dir.iterdir() if p.name.startswith("ensemble-")]
    metrics = RunDir(setting.runs_dir / name).metrics()
    assert metrics["method"] == "stack" and metrics["stack_c"] > 0 and len(metrics["fold_c"]) == K
    assert metrics["cv_score"] == pytest.approx(metrics["methods"]["stack"])
    assert set(metrics["methods"]) == {"equal", "search", "stack"}
    assert set(metrics["members"]) == {"cv3-a", "cv3-b"} and None in metrics["members"].values()
    assert f"{name}: OOF {spec.metric.title}" in result.stdout and "by stack" in result.stdout
    check_submission(setting.subs / f"{name}.csv", spec, sample_ids(setting.data_dir, spec))


@pytest.mark.slow
@pytest.mark.thorough  # the optional tracker (MLflow's store takes seconds to make): the blend above
def test_a_blend_tracked_in_mlflow_is_a_run_of_its_members_and_its_leaderboard_row(
    tmp_path, cassava, monkeypatch
):
    from mlflow.tracking import MlflowClient

    from pipeline.runs import mlflow_runs

    monkeypatch.delenv(mlflow_runs.URI_VARIABLE, raising=False)  # the default: SQLite in the runs dir
    setting, spec = make_setting(tmp_path, cassava), cassava
    for seed, name in enumerate(["cv3-a", "cv3-b"]):
        write_group(setting, spec, name, seed)
    argv = ["--quiet", "ensemble", "--runs", "cv3-a", "cv3-b", "--weights", "1", "3", "--name", "w"]
    assert cli.main([*argv, "--track", "mlflow", *setting.args()]) == 0
    client = MlflowClient(mlflow_runs.tracking_uri(setting.runs_dir))
    experiment = client.get_experiment_by_name(f"petals-{spec.name}").experiment_id
    [found] = client.search_runs([experiment], f"tags.`{mlflow_runs.KIND_TAG}` = 'ensemble'")
    assert found.data.tags[mlflow_runs.RUN_TAG] == "w" and found.data.tags["members"] == "cv3-a cv3-b"
    assert found.data.tags["method"] == "weights"
    assert found.data.params == {"member.cv3-a": "0.25", "member.cv3-b": "0.75"}
    board = leaderboard.read(leaderboard.board_file(setting.subs, spec.name))
    row = board[board["entry"] == "w"].iloc[0]
    for column in (spec.score_key, "cv_score", "cv_spread", "val_accuracy", "folds"):
        assert found.data.metrics[column] == pytest.approx(float(row[column]), abs=0), column
    assert [a.path for a in client.list_artifacts(found.info.run_id, "submission")] == ["submission/w.csv"]


@pytest.mark.slow  # the ensemble stage over fold runs
def test_a_blend_of_groups_hands_the_datas_groups_to_the_stacks_inner_cv(tmp_path, cassava, monkeypatch):
    """Where the competition names groups, the OOF rows' groups reach `compare` (the stack's inner CV
    deals them whole: tests/test_cv_blend.py); nowhere else would a stack learn of them."""
    from pipeline.data import groups as data_groups

    setting, spec = make_setting(tmp_path, cassava), cassava
    for seed, name in enumerate(["cv3-a", "cv3-b"]):
        write_group(setting, spec, name, seed)
    named = np.array([f"p{i // 4}" for i in range(ROWS)])
    asked, handed = [], []
    monkeypatch.setattr(data_groups, "held_out_groups", lambda d, s, ids: asked.append(list(ids)) or named)
    real = cv_blend.compare
    monkeypatch.setattr(cv_blend, "compare", lambda *a, **k: handed.append(k["groups"]) or real(*a, **k))
    assert cli.main(["--quiet", "ensemble", "--runs", "cv3-a", "cv3-b", *setting.args()]) == 0
    assert asked == [list(setting.table.ids)] and handed[0] is named
