"""The feature cache of a cross-validation group: one pooled pass shared by every fold, each fold's
rows taken by id and never its val ones; a pass stopped between pieces keeps them, and the rerun
computes only the rest, to the same rows."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from pipeline.core.errors import Preempted
from pipeline.data import readers, splits
from pipeline.data.manifest import locate_data
from pipeline.modeling import feature_cache, feature_pass, features, network_cut, preemption
from pipeline.networks import registry
from pipeline.tasks.recipe_config import load_config
from tests.conftest import TINY, TINY_SIZE

# The small cnn cut below its last layers; three views: the images, their mirror, a random one.
CACHED = [*TINY, "train.feature_cache=true", "train.unfrozen_layers=4", "train.feature_views=3"]


def fold_config(fold: int, folds: int = 2):  # the tiny data has two examples of some classes
    return load_config(overrides=[*CACHED, f"train.folds={folds}", f"train.fold={fold}"])


@pytest.fixture(scope="module")
def cut(spec):
    net = registry.build_classifier("cnn", TINY_SIZE, spec.num_classes)
    return network_cut.cut(net, 4, True)


@pytest.fixture(scope="module")
def data_dir(tiny_data_dir, tmp_path_factory):
    """The tiny fetched data, copied: the fold tables are written beside it."""
    return Path(shutil.copytree(tiny_data_dir, tmp_path_factory.mktemp("cached") / "data"))


@pytest.fixture
def extractions(monkeypatch) -> list[int]:
    """How many examples went through the network below the cut, piece by piece (the pass makes a
    piece of each few batches' outputs)."""
    calls, real = [], feature_pass._piece

    def counted(outputs, tags):
        rows = real(outputs, tags)
        calls.append(len(rows.ids))
        return rows

    monkeypatch.setattr(feature_pass, "_piece", counted)
    return calls


def fold_splits(cut, config, spec, data_dir, runs_dir, cpu, stop=None):
    table = splits.fold_table(data_dir, spec, config)
    train, val = splits.train_and_val(locate_data(data_dir), spec, config, table)
    cached = features.cache_splits(
        cut, train, val, config, runs_dir / f"fold{config.train.fold}", cpu, "d", stop
    )
    return table, cached


@pytest.mark.slow  # it trains, or runs a network's pass: out of make test-fast
def test_the_folds_of_a_group_compute_one_pooled_pass(
    cut, spec, data_dir, tmp_path, cpu, extractions, caplog
):
    caplog.set_level("INFO")
    table, _ = fold_splits(cut, fold_config(0), spec, data_dir, tmp_path, cpu)
    assert sum(extractions) == 3 * len(table)  # every labelled example, in each view, once
    fold_splits(cut, fold_config(1), spec, data_dir, tmp_path, cpu)
    assert sum(extractions) == 3 * len(table)  # the second fold computed nothing
    assert "pooled features cached already" in caplog.text
    shared = sorted(tmp_path.glob("features-*"))
    assert len(shared) == 1 and sorted(p.name for p in shared[0].iterdir()) == [
        "pooled.npz",
        "users",
    ]  # pieces gone
    assert not any((tmp_path / f"fold{k}").exists() for k in (0, 1))  # nothing in the fold runs
    # Once the group is finished its cache goes; another group's (other examples) stays.
    other = tmp_path / "features-0123456789abcdef-000000000000"
    other.mkdir()
    # Another group (another recipe) on the same examples keeps it until it is finished too.
    other_group = load_config(overrides=[*CACHED, "train.folds=2", "train.fold=0", "train.epochs=5"])
    features.feature_cache.add_user(shared[0], features.group_key(other_group))
    assert features.remove_shared(tmp_path, table, fold_config(0)) == [] and shared[0].is_dir()
    assert features.remove_shared(tmp_path, table, other_group) == shared and sorted(tmp_path.iterdir()) == [
        other
    ]


@pytest.mark.slow  # it trains, or runs a network's pass: out of make test-fast
def test_views_past_the_first_are_cached_only_up_to_the_limit_of_a_groups_examples(
    cut, spec, data_dir, tmp_path, cpu, extractions, caplog
):
    caplog.set_level("INFO")
    pool = len(splits.fold_table(data_dir, spec, fold_config(0)))
    # A fold's own part is about half the pool: the pool's count decides, so each fold reads one cache.
    for limit, views in ((0, 3), (pool, 3), (pool - 1, 1)):
        config = load_config(overrides=[*CACHED, "train.folds=2", "train.fold=0",
                                         f"train.feature_views_up_to={limit}"])  # fmt: skip
        extractions.clear()
        _, (kept, _) = fold_splits(cut, config, spec, data_dir, tmp_path / str(limit), cpu)
        assert sum(extractions) == views * pool and kept.features.shape[0] == views
    assert f"one view of each of {pool} examples" in caplog.text
    # A run without folds counts its own train split.
    single = load_config(overrides=[*CACHED, "train.feature_views_up_to=1"])
    train, val = splits.train_and_val(locate_data(data_dir), spec, single)
    extractions.clear()
    cached, _ = features.cache_splits(cut, train, val, single, tmp_path / "single", cpu, "d")
    assert cached.features.shape[0] == 1 and sum(extractions) == train.count + val.count


def test_folds_in_one_process_read_the_pooled_file_once_and_a_rewritten_one_again(
    cut, spec, data_dir, tmp_path, cpu, monkeypatch
):
    reads, real = [], np.load

    def counted(path, *args, **kwargs):
        reads.append(Path(path).name)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(np, "load", counted)
    _, (first, _) = fold_splits(cut, fold_config(0), spec, data_dir, tmp_path, cpu)
    _, (second, _) = fold_splits(cut, fold_config(1), spec, data_dir, tmp_path, cpu)
    assert "pooled.npz" not in reads  # computed here, then held: no fold read it back
    pooled = next(tmp_path.glob("features-*/pooled.npz"))
    with real(pooled) as file:
        signature = json.loads(str(file["signature"]))
    reads.clear()
    saved = feature_cache.cached(pooled, signature)
    assert saved is not None and set(first.ids) | set(second.ids) == set(saved.ids) and reads == []
    with pytest.raises(ValueError, match="read-only"):  # a fold writing into them would change the next
        saved.features[0, 0] = 0
    # Another process replaced the file (same signature, same size): its rows, not the held ones.
    feature_cache.save(pooled, dataclasses.replace(saved, features=np.ones_like(saved.features)), signature)
    assert feature_cache.cached(pooled, signature).features.min() == 1.0 and reads == ["pooled.npz"]
    # The group done with them (its cache removed), the process lets go of the rows it held.
    feature_pass.rows_of("pooled", None, [], None, None, pooled.parent, cpu, signature, hold=True)
    assert feature_cache._HELD
    features.remove_shared(tmp_path, splits.fold_table(data_dir, spec, fold_config(0)), fold_config(0))
    assert not feature_cache._HELD


def test_a_fold_trains_on_its_table_rows_and_scores_on_its_held_out_fold(cut, spec, data_dir, tmp_path, cpu):
    config = fold_config(1)
    table, (train, val) = fold_splits(cut, config, spec, data_dir, tmp_path, cpu)
    kept, held = table.kept(1), table.held_out(1)
    assert not set(train.ids) & set(val.ids)
    assert set(train.ids) | set(val.ids) == set(table.ids)
    assert train.ids.tolist() == table.ids[kept].tolist() and val.ids.tolist() == table.ids[held].tolist()
    assert np.array_equal(train.labels, table.labels[kept]) and np.array_equal(val.labels, table.labels[held])
    assert train.features.shape[:2] == (3, len(kept)) and val.features.shape[:2] == (1, len(held))
    # Each id's row is that example's: the held-out part passed on its own (in the shards' order)
    # gives the same activations, row for row by id.
    part = splits.train_and_val(locate_data(data_dir), spec, config, table)[1]
    views = features._views(config, spec.num_classes)[:1]
    signature = feature_cache.signature(cut, config, part, "d")
    own = feature_pass.rows_of("own", part, views, cut.bottom, config, tmp_path / "own", cpu, signature)
    assert sorted(own.ids.tolist()) != own.ids.tolist()  # a real reordering to undo
    order = np.argsort(own.ids)
    assert own.ids[order].tolist() == val.ids.tolist()
    np.testing.assert_array_equal(own.features[0, order], val.features[0])


class StopAtLook(preemption.StopRequest):
    """A stop request (as SIGTERM makes one) that fires at its n-th look."""

    def __init__(self, look: int):
        super().__init__()
        self.look, self.seen = look, 0

    def __call__(self):
        self.seen += 1
        if self.seen >= self.look:
            self.reason = self.reason or "a test stop"
        return self.reason


@pytest.mark.slow  # it trains, or runs a network's pass: out of make test-fast
def test_a_pass_stopped_between_pieces_resumes_them_to_the_same_rows(
    cut, spec, data_dir, tmp_path, cpu, extractions, monkeypatch
):
    monkeypatch.setattr(feature_pass, "EXTRACT_BATCH", 16)
    monkeypatch.setattr(feature_pass, "PIECE_BATCHES", 2)  # pieces of 32 examples
    config = fold_config(0)
    examples = len(splits.fold_table(data_dir, spec, config))
    looks = -(-examples // 32) - 1  # a look between each two pieces of a view
    runs = tmp_path / "stopped"
    with pytest.raises(Preempted, match=r"a test stop.*view 3: 3 pieces kept"):  # in the random view
        fold_splits(cut, config, spec, data_dir, runs, cpu, StopAtLook(2 * looks + 3))
    assert sum(extractions) == 2 * examples + 3 * 32
    (folder,) = runs.glob("features-*")
    assert {p.name for p in folder.glob("pooled-2-*.npz")} == {f"pooled-2-{i}.npz" for i in range(3)}
    assert not (folder / "pooled.npz").exists()
    extractions.clear()
    _, (train, val) = fold_splits(cut, config, spec, data_dir, runs, cpu)
    assert sum(extractions) == examples - 3 * 32  # only the rest
    _, (whole_train, whole_val) = fold_splits(cut, config, spec, data_dir, tmp_path / "whole", cpu)
    np.testing.assert_array_equal(train.features, whole_train.features)  # the random view included
    np.testing.assert_array_equal(val.features, whole_val.features)
    assert sorted(p.name for p in folder.iterdir()) == ["pooled.npz", "users"]  # the pieces are gone


def test_a_fold_waits_while_another_computes_the_pooled_pass(tmp_path, monkeypatch, caplog):
    """Two folds started at once: the second waits for the first's lock, then goes on."""
    from pipeline.core import lock

    caplog.set_level("INFO")
    monkeypatch.setattr(feature_cache, "LOCK_POLL_SECONDS", 0.05)
    folder = tmp_path / "features-x"
    folder.mkdir()
    other = subprocess.Popen(["sleep", "1"])  # a live process holding the lock
    threading.Thread(target=other.wait, daemon=True).start()  # reaped when it ends: a zombie lives
    holder = {"pid": other.pid, "host": socket.gethostname(), "time": time.time(), "what": "train",
              "process_start": lock._process_start(other.pid)}  # fmt: skip
    (folder / feature_cache.LOCK_NAME).write_text(json.dumps(holder))
    started = time.monotonic()
    with feature_cache.computing(folder):
        waited = time.monotonic() - started
        assert json.loads((folder / feature_cache.LOCK_NAME).read_text())["pid"] == os.getpid()
    assert waited >= 0.5 and "another process computes these features; waiting" in caplog.text
    assert not (folder / feature_cache.LOCK_NAME).exists()


@pytest.mark.slow
def test_two_fold_runs_train_on_one_pooled_cache_that_outlives_them(cpu, data_dir, tmp_path, caplog):
    from pipeline.stages import train

    caplog.set_level("INFO")
    for fold in (0, 1):
        job = train.prepare(fold_config(fold), cpu, data_dir, tmp_path, None, None)
        metrics = train.fit(job, progress=False)
        assert metrics["epochs"] == 2 and not (job.run_dir / features.FOLDER).exists()
    assert caplog.text.count("cached pooled features: 3 views x") == 1
    assert "pooled features cached already" in caplog.text
    assert len(list(tmp_path.glob("features-*/pooled.npz"))) == 1  # for the group to remove


def test_a_cut_of_another_model_built_in_the_same_process_reads_the_same_rows(spec):
    """The folds of a group train one after another in one process, where Keras numbers the layer
    names of each new model (`global_max_pooling2d_1`): the pooled cache must not see it."""
    config, split = fold_config(0), readers.RecordSplit([], spec, TINY_SIZE, only=np.array(["a"]))
    cuts = [
        network_cut.cut(registry.build_classifier("cnn", TINY_SIZE, spec.num_classes), 4, True)
        for _ in range(2)
    ]
    assert cuts[0].at != cuts[1].at
    signatures = [feature_cache.signature(c, config, split, "d", pooled="x") for c in cuts]
    assert signatures[0] == signatures[1]


@pytest.mark.slow
@pytest.mark.thorough  # 34 s: a variant of the stopped pass above, by a signal (make test at 6 min)
def test_a_sigterm_during_the_pass_keeps_its_pieces_for_the_rerun(cpu, spec, data_dir, tmp_path, monkeypatch):
    """The signal is noted, the piece in hand is saved, the stage ends as preempted (not killed
    outside the training steps), and the rerun computes only the pieces not yet saved."""
    import signal

    from pipeline.stages import train

    monkeypatch.setattr(feature_pass, "EXTRACT_BATCH", 16)
    monkeypatch.setattr(feature_pass, "PIECE_BATCHES", 2)
    calls, real = [], feature_pass._piece

    def signalled_once(outputs, tags):
        calls.append(len(tags))
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGTERM)  # the first piece computed, not yet saved
        return real(outputs, tags)

    monkeypatch.setattr(feature_pass, "_piece", signalled_once)
    config = fold_config(0)
    stopped = r"SIGTERM in the feature cache's pass \(pooled, view 1: 1 pieces kept\)"
    with preemption.watching(preemption.StopRequest()) as stop, pytest.raises(Preempted, match=stopped):
        train.fit(train.prepare(config, cpu, data_dir, tmp_path, None, None), 0, stop=stop)
    assert len(calls) == 1 and len(list(tmp_path.glob("features-*/pooled-0-0.npz"))) == 1
    metrics = train.fit(train.prepare(config, cpu, data_dir, tmp_path, None, None), progress=False)
    pieces = -(-len(splits.fold_table(data_dir, spec, config)) // 32)
    assert metrics["epochs"] == 2 and len(calls) == 3 * pieces  # the first piece was not computed again


@pytest.mark.slow
def test_a_file_competitions_fold_takes_its_rows_of_the_pooled_examples_by_id(tmp_path, cpu):
    """Image folders (FileSplit) pool their examples too: the same guard as the shards'."""
    from competition import load_spec
    from pipeline.core.options import FetchOptions
    from pipeline.stages.fetch import fetch

    spec = load_spec("dogs-vs-cats")
    data_dir = tmp_path / "data"
    fetch(FetchOptions(source="synthetic", data_dir=data_dir, scale=0.05, progress=False), spec)  # 50 photos
    config = load_config(overrides=[*CACHED, "competition=dogs-vs-cats", "train.folds=2", "train.fold=1"])
    cut = network_cut.cut(registry.build_classifier("cnn", TINY_SIZE, spec.num_classes), 4, True)
    table, (train, val) = fold_splits(cut, config, spec, data_dir, tmp_path / "runs", cpu)
    assert train.ids.tolist() == table.ids[table.kept(1)].tolist()
    assert val.ids.tolist() == table.ids[table.held_out(1)].tolist()
    assert np.array_equal(train.labels, table.labels[table.kept(1)])
    part = splits.train_and_val(locate_data(data_dir), spec, config, table)[1]
    signature = feature_cache.signature(cut, config, part, "d")
    views = features._views(config, spec.num_classes)[:1]
    own = feature_pass.rows_of("own", part, views, cut.bottom, config, tmp_path / "own", cpu, signature)
    assert own.ids.tolist() == val.ids.tolist()
    np.testing.assert_array_equal(own.features[0], val.features[0])


def test_cached_training_batches_run_no_autotune_thread_that_fit_would_wait_for():
    """Autotune's model thread sleeps up to a minute late in a long run, and the iterator's end
    waits for it: every fold's `fit` returned 35-39 s after its last epoch. Nothing here is tuned."""
    rows = np.zeros((2, 8, 3), np.float16)
    dataset = features.FeatureSplit(rows, np.arange(8) % 2, 2).train_dataset(fold_config(0), 4)
    assert dataset.options().autotune.enabled is False
    images, labels = next(iter(dataset))
    assert images.shape == (4, 3) and labels.shape == (4,)


def test_the_cache_pass_and_predictions_read_untuned(cut, spec, data_dir, tmp_path, cpu, autotuned_reads):
    """Dropping an autotuned iterator at a long pass's end waited 14-17 s for autotune's thread in
    about half the runs (the flowers' test pass, the cache pass): every pass petals reads to its
    end runs untuned (pipeline/data/passes.py)."""
    import tensorflow as tf

    from pipeline.modeling.inference import predict_batches

    tuned = autotuned_reads
    config = fold_config(1)
    table = splits.fold_table(data_dir, spec, config)
    part = splits.train_and_val(locate_data(data_dir), spec, config, table)[1]
    views = features._views(config, spec.num_classes)[:1]
    signature = feature_cache.signature(cut, config, part, "untuned")
    feature_pass.rows_of("own", part, views, cut.bottom, config, tmp_path / "own", cpu, signature)
    assert tuned and all(enabled is False for enabled in tuned)
    tuned.clear()
    images = tf.data.Dataset.from_tensor_slices(np.zeros((4, TINY_SIZE, TINY_SIZE, 3), np.float32))
    assert predict_batches(cut.bottom, images.batch(2), cpu).shape[0] == 4
    assert tuned and all(enabled is False for enabled in tuned)


@pytest.mark.parametrize("batches", [1, 2, 3, 4])
def test_a_streamed_pass_keeps_each_batchs_ids_and_marks_only_its_last_piece_final(monkeypatch, batches):
    """One process, one replica: the calls stream across pieces of 2 batches; each piece's rows keep
    their own batch's ids and labels, and only the last is final (an exact multiple of 2 included)."""
    from types import SimpleNamespace

    monkeypatch.setattr(feature_pass, "PIECE_BATCHES", 2)
    one = SimpleNamespace(several=False)
    platform = SimpleNamespace(hosts=one, replicas=1, backend="tensorflow", device="CPU")

    def predict_on_batch(x):
        time.sleep(0.02 * (int(x[0, 0]) % 2 == 0))  # an even batch ends after the odd one behind it
        return x * 2.0

    bottom = SimpleNamespace(predict_function=object(), predict_on_batch=predict_on_batch)
    ids = [np.array([f"{b}a", f"{b}b"]) for b in range(batches)]
    data = [(np.full((2, 1), b, np.float32), np.array([b, b]), ids[b]) for b in range(batches)]
    pieces = list(feature_pass._pieces(bottom, iter(data), platform))
    assert [final for _, final in pieces] == [False] * (len(pieces) - 1) + [True]
    assert len(pieces) == -(-batches // 2)
    rows = [row for p, _ in pieces for row in zip(p.features[0][:, 0], p.labels, p.ids, strict=True)]
    assert rows == [(2.0 * b, b, f"{b}{k}") for b in range(batches) for k in "ab"]
    assert all(piece.features.dtype == np.float16 for piece, _ in pieces)


@pytest.mark.parametrize("damage", ["empty", "cut"])
def test_a_damaged_cache_file_is_a_miss_not_a_traceback(tmp_path, caplog, damage):
    """A power cut can leave a cache file empty or cut short (a rename lands before the disk has the
    bytes): it is computed again, said in a line, rather than a traceback on every rerun."""
    rows = feature_cache.Rows(np.ones((4, 3), np.float16), np.arange(4), np.array(["a", "b", "c", "d"]))
    path = tmp_path / "train.npz"
    feature_cache.save(path, rows, {"v": 1})
    assert feature_cache.cached(path, {"v": 1}).features.shape == (4, 3)
    path.write_bytes(b"" if damage == "empty" else path.read_bytes()[:100])
    assert feature_cache.cached(path, {"v": 1}) is None and not path.exists()
    assert f"features: {path} is damaged" in caplog.text
