"""Folds across sessions: a kernel's fold runs (their small files and saved predictions, no
weights) merge into the local runs dir and their CV group, which is the group the same fold runs
make when placed here by hand; a fold of other data is refused in one line, a missing one named."""

from __future__ import annotations

import ast
import json
import re
import shutil

import numpy as np
import pandas as pd
import pytest

from pipeline import cli
from pipeline.core import rundir
from pipeline.core.errors import PetalsError
from pipeline.core.files import write_json
from pipeline.core.rundir import RunDir
from pipeline.cv import held, merge
from pipeline.cv.group import fold_config, group_id
from pipeline.data import folds
from pipeline.data.manifest import read_manifest
from pipeline.modeling.inference import Predictions
from pipeline.runs.submission_files import sample_ids
from pipeline.tasks.competitions import load_competition, size_of
from pipeline.tasks.recipe_config import load_config
from tests.conftest import TINY, kernel_help_recorded
from tests.kaggle_server import Behaviour, KaggleTestServer

K = 2
OVERRIDES = [*TINY, "augment.where=host", f"train.folds={K}"]
SETS = [arg for value in OVERRIDES[:-1] for arg in ("--set", value)]


@pytest.fixture
def data_dir(tiny_data_dir, tmp_path):
    copy = tmp_path / "data"
    shutil.copytree(tiny_data_dir, copy)
    return copy


@pytest.fixture
def table(data_dir, spec):
    return folds.fold_table(data_dir, spec, load_config(overrides=OVERRIDES))


def kernel_output(folder, data_dir, spec, table, folds_trained, manifest=None, overrides=OVERRIDES, lift=0.0):
    """A FOLDS kernel's downloaded outputs, written directly: each fold run's files (its last epoch
    scoring 0.3 + fold / 10 + lift) and its val and test predictions (random, seeded by the fold),
    no weights; and the summary."""
    manifest = manifest or read_manifest(data_dir)
    test_ids = np.array(sample_ids(data_dir, spec))
    trained = {}
    for fold in folds_trained:
        config = fold_config(load_config(overrides=overrides), fold)
        run = RunDir(
            folder
            / merge.RUNS
            / rundir.run_id(
                config, rundir.data_identity(manifest), size_of(config, load_competition(config.competition))
            )
        )
        run.path.mkdir(parents=True)
        run.write_json(RunDir.CONFIG, config.to_dict())
        run.write_json(RunDir.DATA_MANIFEST, manifest)
        run.write_json(
            RunDir.RUN_INFO, {"git_commit": "abc123", "backend": "jax", "fold_table": table.digest}
        )
        key = spec.score_key
        pd.DataFrame({"epoch": [1, 2], key: [0.2, 0.3 + fold / 10 + lift], "val_loss": [3.0, 2.5]}).to_csv(
            run.history_file, index=False
        )
        run.write_json(RunDir.METRICS, {"metric": spec.metric.name, key: 0.3, "best_epoch": 2,
                                        "epochs": 2, "train_seconds": 10.0 + fold})  # fmt: skip
        events = run.file(RunDir.TENSORBOARD) / f"fold{fold}"  # TensorBoard's, in the kernel's output
        events.mkdir(parents=True)
        (events / "events.out.tfevents.1.kaggle.v2").write_bytes(b"events")
        rng = np.random.default_rng(fold)
        rows = table.held_out(fold)
        source = json.dumps(
            {"weights": "0" * 16, "data": manifest.get("fingerprint"), "tta": 1}, sort_keys=True
        )
        for split, ids, labels in (("val", table.ids[rows], table.labels[rows]), ("test", test_ids, None)):
            order = rng.permutation(len(ids))  # saved in the kernel's order, not the table's
            probabilities = rng.dirichlet(np.ones(spec.num_classes), len(ids)).astype(np.float32)
            chosen = labels[order] if labels is not None else None
            Predictions(ids[order], probabilities, chosen, source=source).save(run.predictions(split))
        trained[run.name] = f"2026-11-2{fold}T10:00:00Z"
    summary = {"folds": K, "fold_list": list(folds_trained), "tta": 1, "fold_runs": trained}
    write_json(folder / "petals_summary.json", summary)
    return folder


def merged(output, data_dir, tmp_path, cpu, source="kernel petals-user/folds"):
    lines = []
    results = merge.merge_output(
        output, source, data_dir, tmp_path / "runs", tmp_path / "subs", trained=_trained(output),
        competition_of=load_competition, platform=cpu, report=lines.append,
    )  # fmt: skip
    return lines, results


def _trained(output):
    return json.loads((output / "petals_summary.json").read_text())["fold_runs"]


@pytest.mark.slow  # it trains, or runs a network's pass: out of make test-fast
def test_folds_from_two_sessions_make_the_group_the_same_fold_runs_make_placed_here(
    data_dir, table, spec, tmp_path, cpu
):
    first = kernel_output(tmp_path / "session-1", data_dir, spec, table, [0])
    second = kernel_output(tmp_path / "session-2", data_dir, spec, table, [1])
    lines, results = merged(first, data_dir, tmp_path, cpu)
    assert lines == [
        "fold 0: from kernel petals-user/folds (trained 2026-11-20T10:00:00Z)",
        f"fold 1: missing: train it (FOLDS={K} FOLD=1)",
    ]
    assert results == [None]
    lines, (metrics,) = merged(second, data_dir, tmp_path, cpu)
    assert lines[:2] == [
        f"fold 0: already in {tmp_path / 'runs'} ({_names(first)[0]})",
        "fold 1: from kernel petals-user/folds (trained 2026-11-21T10:00:00Z)",
    ]
    assert "CV macro-F1" in lines[2]
    # Placed whole, with no weights, checkpoints or partial folders.
    placed = sorted(p.name for p in (tmp_path / "runs").iterdir())
    identity = rundir.data_identity(read_manifest(data_dir))
    group = group_id(load_config(overrides=OVERRIDES), identity)
    assert placed == sorted([*_names(first), *_names(second), group])
    assert not list((tmp_path / "runs").glob("*/*.weights.h5"))
    assert len(list((tmp_path / "runs").glob("*/tensorboard/fold*/events.out.tfevents.*"))) == K  # carried

    # The same fold runs placed here by hand, assembled by the CV stage: the same group.
    by_hand = tmp_path / "by-hand"
    for output in (first, second):
        shutil.copytree(output / merge.RUNS, by_hand, dirs_exist_ok=True)
    code = cli.main(["cv", "evaluate", "--folds", str(K), "--data-dir", str(data_dir), "--runs-dir",
                     str(by_hand), "--submissions-dir", str(tmp_path / "subs2"), "--recipe", "default",
                     "--backend", "tensorflow", "--strategy", "cpu", *SETS])  # fmt: skip
    assert code == 0
    ours = Predictions.load(tmp_path / "runs" / group / "oof_predictions.npz")
    theirs = Predictions.load(by_hand / group / "oof_predictions.npz")
    assert ours.ids.tolist() == theirs.ids.tolist() == table.ids.tolist()  # every example once, id order
    assert np.array_equal(ours.probabilities, theirs.probabilities)
    assert metrics["cv_score"] == RunDir(by_hand / group).metrics()["cv_score"]
    for fold in range(K):  # each row from the fold run that held it out
        output = (first, second)[fold]
        held = Predictions.load(RunDir(output / merge.RUNS / _names(output)[0]).predictions("val"))
        rows = table.held_out(fold)
        assert np.array_equal(ours.probabilities[rows], held.by_ids(table.ids[rows]).probabilities)


def _names(output) -> list[str]:
    return sorted(p.name for p in (output / merge.RUNS).iterdir())


def test_a_fold_trained_on_other_data_is_refused_in_one_line_and_not_merged(
    data_dir, table, spec, tmp_path, cpu
):
    other = {**read_manifest(data_dir), "origin": "other-data", "labelled_fingerprint": "sha256:0ther"}
    output = kernel_output(tmp_path / "session", data_dir, spec, table, [1], manifest=other)
    lines, results = merged(output, data_dir, tmp_path, cpu)
    (name,) = _names(output)
    assert lines == [
        f"fold 1 ({name}): trained on other-data (sha256:0ther…), not this data dir's: not merged",
        f"fold 0: missing: train it (FOLDS={K} FOLD=0)",
        f"fold 1: missing: train it (FOLDS={K} FOLD=1)",
    ]
    assert results == [None] and not (tmp_path / "runs" / name).exists()


def test_a_different_local_run_of_the_same_id_is_kept_and_said_so(data_dir, table, spec, tmp_path, cpu):
    output = kernel_output(tmp_path / "session", data_dir, spec, table, [0])
    (name,) = _names(output)
    local = RunDir(tmp_path / "runs" / name)
    shutil.copytree(output / merge.RUNS / name, local.path)
    local.write_json(RunDir.METRICS, {**local.metrics(), "train_seconds": 99.0})
    lines, _ = merged(output, data_dir, tmp_path, cpu)
    assert lines[0].startswith(f"fold 0 ({name}): {tmp_path / 'runs'} holds a different finished run")
    assert local.metrics()["train_seconds"] == 99.0


def test_saved_test_predictions_of_another_test_set_are_refused(data_dir, table, spec, tmp_path):
    output = kernel_output(tmp_path / "session", data_dir, spec, table, [0])
    run = RunDir(output / merge.RUNS / _names(output)[0])
    assert held.saved_predictions(run, data_dir, "val", 1).tta == 1
    saved = Predictions.load(run.predictions("test"))
    saved.source = json.dumps({"weights": "0" * 16, "data": "sha256:hidden", "tta": 1})
    saved.save(run.predictions("test"))
    with pytest.raises(Exception, match="test predictions of other data"):
        held.saved_predictions(run, data_dir, "test", 1)
    with pytest.raises(Exception, match="no weights here and no saved val predictions at TTA 4"):
        held.saved_predictions(run, data_dir, "val", 4)


def _a_folds_kernel(tmp_path, data_dir, spec, table, folds):
    """A folds kernel's output (the folds given trained), its files as the server serves them, the
    kernel's folder here, and the `kernel output` command line that collects it."""
    output = kernel_output(tmp_path / "made", data_dir, spec, table, folds)
    files = {p.relative_to(output).as_posix(): p.read_bytes() for p in output.rglob("*") if p.is_file()}
    folder = tmp_path / "kernels" / "petals-folds"
    folder.mkdir(parents=True)
    write_json(folder / "kernel-metadata.json", {"id": "petals-user/petals-folds"})
    args = ["kernel", "output", "--kernels-dir", str(tmp_path / "kernels"), "--name", "petals-folds",
            "--data-dir", str(data_dir), "--runs-dir", str(tmp_path / "runs"),
            "--submissions-dir", str(tmp_path / "subs")]  # fmt: skip
    return output, files, args


def test_kernel_output_downloads_a_folds_kernel_and_merges_its_folds(
    data_dir, table, spec, tmp_path, in_kaggle_env, capsys
):
    output, files, args = _a_folds_kernel(tmp_path, data_dir, spec, table, [0])
    with KaggleTestServer(Behaviour(kernel_files=files)):
        assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "fold 0: from kernel petals-user/petals-folds (trained 2026-11-20T10:00:00Z)" in out
    assert f"fold 1: missing: train it (FOLDS={K} FOLD=1)" in out
    assert RunDir(tmp_path / "runs" / _names(output)[0]).finished


@pytest.mark.slow
@pytest.mark.thorough  # ~30 s loaded: MLflow's SQLite store made, the group assembled twice
def test_fold_runs_collected_with_track_mlflow_are_their_groups_children_once(
    data_dir, table, spec, tmp_path, in_kaggle_env, monkeypatch, capsys
):
    """`make kernel-output TRACK=mlflow`: each fold run collected is an MLflow run under its group's
    run, as a fold trained here is (its config, its epochs, finished), and collecting again adds none."""
    from mlflow.tracking import MlflowClient

    from pipeline.runs import mlflow_runs
    from pipeline.runs.tensorboard import scalar_tag

    monkeypatch.delenv(mlflow_runs.URI_VARIABLE, raising=False)  # the default: SQLite in the runs dir
    _, files, args = _a_folds_kernel(tmp_path, data_dir, spec, table, [0, 1])
    args += ["--track", "mlflow"]
    with KaggleTestServer(Behaviour(kernel_files=files)):
        assert cli.main(args) == 0
        assert cli.main(args) == 0  # collected again: "already in" the runs dir, and in MLflow
    assert "fold 1: already in" in capsys.readouterr().out
    client = MlflowClient(mlflow_runs.tracking_uri(tmp_path / "runs"))
    experiment = client.get_experiment_by_name("petals-flowers").experiment_id
    [parent] = client.search_runs([experiment], f"tags.`{mlflow_runs.KIND_TAG}` = 'cv_group'")
    group = group_id(load_config(overrides=OVERRIDES), rundir.data_identity(read_manifest(data_dir)))
    assert parent.data.tags["cv_group"] == group and "cv_score" in parent.data.metrics
    folds = client.search_runs([experiment], f"tags.`{mlflow_runs.PARENT_TAG}` = '{parent.info.run_id}'")
    assert sorted(f.data.tags["fold"] for f in folds) == ["0", "1"]  # each once
    assert len(client.search_runs([experiment], "")) == 3  # the group and its two folds, nothing else
    for fold in folds:
        run = RunDir(tmp_path / "runs" / fold.data.tags[mlflow_runs.RUN_TAG])
        history = run.read_history()
        logged = client.get_metric_history(fold.info.run_id, scalar_tag(spec.score_key))
        assert [(m.step, m.value) for m in logged] == list(
            zip(history["epoch"], history[spec.score_key], strict=True)
        )
        assert fold.data.params["train.folds"] == str(K) and fold.data.tags["cv_group"] == group
        assert fold.data.metrics["run/train_seconds"] == run.metrics()["train_seconds"]
        assert fold.info.status == "FINISHED"


def test_a_folds_kernel_is_generated_with_its_folds_and_bad_folds_are_refused(tmp_path, capsys):
    recipe = [arg for o in TINY if not o.startswith("data.image_size") for arg in ("--set", o)]
    base = ["kernel", "generate", "--kernels-dir", str(tmp_path), "--recipe", "default", "--owner", "me",
            "--name", "folds", *recipe]  # fmt: skip
    for extra, message in (
        (["--folds", "1"], "FOLDS=1: cross-validation needs at least 2 folds"),
        (["--folds", "3", "--fold", "0,3"], "FOLD=0,3: folds are 0..2"),
        (["--fold", "1"], "--fold 1 needs --folds K"),
    ):
        assert cli.main([*base, *extra]) == 2
        assert message in capsys.readouterr().err
        assert not (tmp_path / "folds").exists()
    with kernel_help_recorded():  # the settings are what this test is about
        assert cli.main([*base, "--folds", "3", "--fold", "0,2"]) == 0
    text = (tmp_path / "folds" / "petals_kernel.py").read_text()
    settings = ast.literal_eval(re.search(r"^SETTINGS = (.*?)\nBUNDLE = ", text, re.S | re.M).group(1))
    assert settings["folds"] == 3 and settings["fold_list"] == [0, 2]


def test_a_folds_kernel_carries_the_fold_table_dealt_here(tmp_path, data_dir, table, spec):
    # 192 px records on Kaggle; the tiny data here is 32 px: the table, of ids, is the same.
    recipe = [arg for o in TINY if not o.startswith("data.image_size") for arg in ("--set", o)]
    base = ["kernel", "generate", "--kernels-dir", str(tmp_path / "k"), "--recipe", "default",
            "--owner", "me",
            "--name", "folds", *recipe, "--folds", str(K), "--data-dir", str(data_dir)]  # fmt: skip
    with kernel_help_recorded():
        assert cli.main(base) == 0
    text = (tmp_path / "k" / "folds" / "petals_kernel.py").read_text()
    settings = ast.literal_eval(re.search(r"^SETTINGS = (.*?)\nBUNDLE = ", text, re.S | re.M).group(1))
    carried = settings["fold_table"]
    assert carried["name"] == "k2-seed0.csv" and carried["digest"] == table.digest

    # On Kaggle: a fresh copy of the same data, whose scikit-learn would deal otherwise (here: the
    # deal of another seed under this name); the carried table is what the folds use.
    kaggle = tmp_path / "kaggle-data"
    shutil.copytree(data_dir, kaggle, ignore=shutil.ignore_patterns(folds.FOLDER))
    other = folds.deal(table.ids, table.labels, K, seed=7)
    assert other.digest != table.digest
    folds._write(kaggle / folds.FOLDER / "k2-seed0.csv", other)
    carried_other, _ = folds.carried_table(kaggle, spec, load_config(overrides=OVERRIDES))
    (kaggle / folds.FOLDER / "k2-seed0.csv").unlink()
    folds.receive_table(kaggle, carried_other)
    used = folds.fold_table(kaggle, spec, load_config(overrides=OVERRIDES))
    assert used.digest == other.digest  # the carried deal, stored as this data's table
    assert (kaggle / folds.FOLDER / "k2-seed0.csv").is_file()


def test_a_carried_fold_table_of_other_data_is_not_used_and_a_bad_name_is_refused(
    tmp_path, data_dir, table, spec, caplog
):
    kaggle = tmp_path / "kaggle-data"
    shutil.copytree(data_dir, kaggle, ignore=shutil.ignore_patterns(folds.FOLDER))
    carried, _ = folds.carried_table(data_dir, spec, load_config(overrides=OVERRIDES))
    fewer = folds.FoldTable(table.ids[1:], table.labels[1:], table.folds[1:], K, 0)  # another copy's
    folds._write(tmp_path / "fewer.csv", fewer)
    import base64
    import gzip

    carried["gzip_base64"] = base64.b64encode(gzip.compress((tmp_path / "fewer.csv").read_bytes())).decode()
    folds.receive_table(kaggle, carried)
    with caplog.at_level("WARNING"):
        dealt = folds.fold_table(kaggle, spec, load_config(overrides=OVERRIDES))
    assert dealt.digest == table.digest  # dealt here, as before
    assert "carried from where the kernel was made is of other data" in caplog.text
    assert not list((kaggle / folds.FOLDER).glob("*" + folds.CARRIED))  # considered once, then gone
    # A stale table here (of other data) is not carried: the reason is said instead.
    stale = tmp_path / "stale"
    shutil.copytree(data_dir, stale, ignore=shutil.ignore_patterns(folds.FOLDER))
    folds._write(stale / folds.FOLDER / "k2-seed0.csv", fewer)
    none, why = folds.carried_table(stale, spec, load_config(overrides=OVERRIDES))
    assert none is None and "a fold table of other data" in why
    for name in ("../k2-seed0.csv", "k2-seed0.csv/x", "evil.sh"):
        with pytest.raises(PetalsError, match="not a fold table's name"):
            folds.receive_table(kaggle, {**carried, "name": name})
    with pytest.raises(PetalsError, match="not gzip and base64"):
        folds.receive_table(kaggle, {**carried, "gzip_base64": "bm90IGd6aXA="})


@pytest.mark.slow
@pytest.mark.heavy  # the generated script trains a fold in a process of its own
def test_a_folds_kernel_run_as_kaggle_runs_it_leaves_its_fold_run_and_predictions(data_dir, tmp_path):
    """Outside the repo, from its own bundle: the fold asked for, trained and its val and test
    predicted into its run; a summary naming it for `make kernel-output`; no submission."""
    import os
    import subprocess
    import sys

    from pipeline.kernels.client import metadata

    recipe = [arg for o in TINY if not o.startswith("data.image_size") for arg in ("--set", o)]
    args = ["kernel", "generate", "--kernels-dir", str(tmp_path / "k"), "--recipe", "default",
            "--owner", "me", "--name", "folds", "--accelerator", "None", *recipe,
            "--set", "augment.where=host", "--folds", str(K), "--fold", "1",
            "--data-dir", str(data_dir)]  # fmt: skip
    assert cli.main(args) == 0
    working = tmp_path / "working"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, str(tmp_path / "k" / "folds" / metadata.SCRIPT), "--working", str(working),
         "--data-dir", str(data_dir), "--strategy", "cpu", "--set", "data.image_size=32"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((working / metadata.SUMMARY).read_text())
    assert summary["folds"] == K and summary["fold_list"] == [1] and len(summary["fold_runs"]) == 1
    [name] = summary["fold_runs"]
    run = RunDir(working / merge.RUNS / name)
    assert run.finished and run.read_config().train.fold == 1
    assert run.predictions("val").is_file() and run.predictions("test").is_file()
    assert not (working / "submission.csv").exists()


def test_two_merges_placing_one_fold_at_once_leave_it_whole(tmp_path, monkeypatch):
    """Two `make kernel-output` of one output at once: each copies into its own staging folder and
    the first rename wins; the other finds the same run there. (One shared staging folder let each
    delete the other's copy: a fold placed without its metrics, stuck as `busy`.)"""
    from pipeline.cv import merge

    fold = RunDir(tmp_path / "output" / "petals_runs" / "fold-run")
    fold.path.mkdir(parents=True)
    for name, text in ((RunDir.CONFIG, "{}"), (RunDir.METRICS, '{"epochs": 1}'), (RunDir.BEST, "w")):
        (fold.path / name).write_text(text)
    runs, real = tmp_path / "runs", merge._carried

    def another_merge_places_it_meanwhile(run):
        monkeypatch.setattr(merge, "_carried", real)
        assert merge.place(run, runs) == "placed"
        return real(run)

    monkeypatch.setattr(merge, "_carried", another_merge_places_it_meanwhile)
    assert merge.place(fold, runs) == "here"
    assert sorted(p.name for p in runs.iterdir()) == ["fold-run"]
    assert sorted(p.name for p in (runs / "fold-run").iterdir()) == sorted(
        [RunDir.CONFIG, RunDir.METRICS, RunDir.BEST]
    )


def test_a_link_inside_a_downloaded_folds_tokenizer_is_not_copied(tmp_path, caplog):
    """A kernel's output can be shared, and a folder copied whole follows its links: the tokenizer's
    `vocab.txt` linking to a key would land in runs/ as the key's bytes (and travel in a kernel
    bundle from there). Only plain files and folders are placed; the link is said and left out."""
    from pipeline.cv import merge

    secret = tmp_path / "kaggle.json"
    secret.write_text('{"key": "secret"}')
    fold = RunDir(tmp_path / "output" / "petals_runs" / "fold-run")
    (fold.path / RunDir.TOKENIZER).mkdir(parents=True)
    for name, text in ((RunDir.CONFIG, "{}"), (RunDir.METRICS, '{"epochs": 1}'), (RunDir.BEST, "w")):
        (fold.path / name).write_text(text)
    (fold.path / RunDir.TOKENIZER / "config.json").write_text("{}")
    (fold.path / RunDir.TOKENIZER / "vocab.txt").symlink_to(secret)
    (fold.path / RunDir.TOKENIZER / "assets").symlink_to(tmp_path, target_is_directory=True)
    assert merge.place(fold, tmp_path / "runs") == "placed"
    placed = tmp_path / "runs" / "fold-run" / RunDir.TOKENIZER
    assert sorted(p.name for p in placed.iterdir()) == ["config.json"]
    assert "tokenizer/vocab.txt' of fold-run is not a plain file" in caplog.text
    assert not any("secret" in p.read_text() for p in (tmp_path / "runs").rglob("*") if p.is_file())


def test_a_downloaded_outputs_runs_folder_that_is_a_link_is_refused(tmp_path):
    from pipeline.cv import merge

    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "output").mkdir()
    (tmp_path / "output" / "petals_runs").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(PetalsError, match="petals_runs is a link"):
        merge.fold_runs_in(tmp_path / "output")
