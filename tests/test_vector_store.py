"""A frozen sentence encoder's vectors kept beside the runs (pipeline/modeling/vector_store.py): read
back by any process, whole files only, bounded (a file not the store's own: test_hostile_vectors.py);
and the process's own memo (`probe.sentence_vectors`) past its bound. An encoder of numpy arithmetic stands
for the real one (tests/test_sentence.py runs the packaged encoder through the same store)."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.modeling import probe, vector_store

WIDTH = 3


class _Backbone:
    hidden_dim = WIDTH

    def __init__(self, scale: float = 1.0):
        self.scale = scale
        self.calls: list[int] = []

    def get_weights(self):
        return [np.full(2, self.scale, np.float32)]

    def __call__(self, batch):
        self.calls.append(len(batch["token_ids"]))
        ids = np.asarray(batch["token_ids"], np.float32) * self.scale
        return {"sequence_output": np.stack([ids, ids * 2, ids * 3], axis=-1)}


class _Net:
    def __init__(self, backbone):
        self.layers = {"backbone": backbone, "pool": self._pool}

    @staticmethod
    def _pool(pieces):
        sequence, mask = pieces
        mask = np.asarray(mask, np.float32)[..., None]
        return (sequence * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1.0)

    def get_layer(self, name):
        return self.layers[name]


def _inputs(*texts: list[int]) -> dict[str, np.ndarray]:
    ids = np.zeros((len(texts), 4), np.int32)
    for row, text in enumerate(texts):
        ids[row, : len(text)] = text
    return {"token_ids": ids, "padding_mask": ids > 0}


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.setattr(probe, "_VECTORS", {})
    monkeypatch.setattr(vector_store, "_STORES", {})


def _new_process(monkeypatch):
    monkeypatch.setattr(probe, "_VECTORS", {})
    monkeypatch.setattr(vector_store, "_STORES", {})


def test_each_process_adds_its_own_whole_file_and_reads_the_others_once(tmp_path, monkeypatch):
    backbone = _Backbone()
    net = _Net(backbone)
    first = probe.sentence_vectors(net, _inputs([1, 2], [3]), tmp_path)
    _new_process(monkeypatch)
    second = probe.sentence_vectors(net, _inputs([3], [4, 5, 6]), tmp_path)
    assert backbone.calls == [2, 1]  # the second process encoded [4, 5, 6] alone
    np.testing.assert_array_equal(second[0], first[1])
    files = sorted(tmp_path.glob(f"{vector_store.PREFIX}*/*.npy"))
    assert len(files) == 2 and not list(tmp_path.glob("**/*.partial"))
    _new_process(monkeypatch)
    probe.sentence_vectors(net, _inputs([1, 2], [4, 5, 6]), tmp_path)
    assert backbone.calls == [2, 1]  # both read back
    store = vector_store.store(tmp_path, vector_store.encoder_digest(backbone), WIDTH)
    assert store.new_rows() == {}  # each file read once a process


def test_another_encoders_vectors_are_never_read(tmp_path, monkeypatch):
    """An encoder that trained has weights of its own: its own folder, nothing of the frozen one's."""
    frozen, trained = _Backbone(1.0), _Backbone(2.0)
    probe.sentence_vectors(_Net(frozen), _inputs([1, 2]), tmp_path)
    _new_process(monkeypatch)
    vectors = probe.sentence_vectors(_Net(trained), _inputs([1, 2]), tmp_path)
    assert trained.calls == [1]
    np.testing.assert_allclose(vectors[0], [3.0, 6.0, 9.0])  # mean of 2 x (1, 2) and its multiples
    assert len(list(tmp_path.glob(f"{vector_store.PREFIX}*"))) == 2
    assert vector_store.row_keys(_inputs([1, 2])) != vector_store.row_keys(_inputs([2, 1]))


def test_the_folder_stops_growing_at_its_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(vector_store, "MAX_ROWS", 3)
    net = _Net(_Backbone())
    probe.sentence_vectors(net, _inputs([1], [2]), tmp_path)
    probe.sentence_vectors(net, _inputs([3], [4]), tmp_path)  # 4 rows > 3: not kept
    probe.sentence_vectors(net, _inputs([5]), tmp_path)
    (folder,) = tmp_path.glob(f"{vector_store.PREFIX}*")
    assert sum(len(np.load(path)) for path in folder.glob("*.npy")) == 3


def test_vectors_read_from_the_memo_survive_its_bound(monkeypatch):
    """Past `MEMO_VECTORS` the memo starts again: the texts it held in this call still get their
    vectors, not zeros."""
    monkeypatch.setattr(probe, "MEMO_VECTORS", 3)
    net = _Net(_Backbone())
    expected = probe.sentence_vectors(net, _inputs([1], [2], [3], [4]))
    monkeypatch.setattr(probe, "_VECTORS", {})
    probe.sentence_vectors(net, _inputs([1], [2]))
    got = probe.sentence_vectors(net, _inputs([1], [2], [3], [4]))
    np.testing.assert_array_equal(got, expected)
