"""A frozen sentence encoder's vectors kept beside the runs (pipeline/modeling/vector_store.py) come
back into a runs dir from elsewhere: a kernel's earlier version restores its runs, a shared folder
holds them. A file there that is not what the store writes (cut, of another width or type, not
finite, a link, a folder, a name the store does not give) is never read as vectors: said in one
line (a name it does not give, not even said), removed where it is a file or a link (not what the
link names), and its rows computed again."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.modeling import probe, vector_store
from tests.hostile import record
from tests.test_vector_store import _Backbone, _inputs, _Net, _new_process


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    _new_process(monkeypatch)


WHAT = {
    "cut": "a vectors file cut short",
    "width": "a vectors file of another width",
    "dtype": "a vectors file of another type",
    "nan": "a vectors file holding a NaN",
    "link": "a vectors file that is a link to a file elsewhere",
    "folder": "a folder named as a vectors file",
}


@pytest.mark.parametrize(
    "damage",
    ["cut", "width", "dtype", "nan", "link", "folder"],
)
def test_a_file_not_of_this_encoders_vectors_is_said_removed_and_computed_again(
    tmp_path, monkeypatch, caplog, damage
):
    backbone = _Backbone()
    net = _Net(backbone)
    first = probe.sentence_vectors(net, _inputs([1, 2]), tmp_path)
    (path,) = tmp_path.glob(f"{vector_store.PREFIX}*/*.npy")
    kept = np.load(path)
    rows = kept.copy()
    path.unlink()
    if damage == "cut":
        np.save(path, rows)
        path.write_bytes(path.read_bytes()[:-5])
    elif damage == "width":
        np.save(path, rows[:, :-4])
    elif damage == "dtype":
        np.save(path, rows.astype(np.int16))
    elif damage == "nan":
        rows[0, -4:] = np.frombuffer(np.float32(np.nan).tobytes(), np.uint8)
        np.save(path, rows)
    elif damage == "link":
        secret = tmp_path / "secret.npy"
        np.save(secret, rows)
        path.symlink_to(secret)
    else:
        path.mkdir()
    _new_process(monkeypatch)
    caplog.set_level("WARNING")
    again = probe.sentence_vectors(net, _inputs([1, 2]), tmp_path)
    np.testing.assert_array_equal(again, first)
    assert backbone.calls == [1, 1]  # computed again
    (line,) = [r.getMessage() for r in caplog.records if "vectors:" in r.getMessage()]
    assert str(path) in line and "computing its rows again" in line and "\n" not in line
    if damage == "folder":  # not this module's to remove; its rows not kept under that name
        assert path.is_dir()
    else:  # written again, whole (the link removed, not what it named)
        assert path.is_file() and not path.is_symlink()
        np.testing.assert_array_equal(np.load(path), kept)
    if damage == "link":
        assert (tmp_path / "secret.npy").is_file()
    record(f"vectors: {WHAT[damage]}", "runs/vectors-<encoder>/<rows digest>.npy", line, None,
           "the file removed (a link: the link, not what it names), its rows computed again")  # fmt: skip


def test_a_file_of_a_name_the_store_does_not_give_is_never_read(tmp_path, monkeypatch, caplog):
    """Only the names `add` gives (the digest of the rows) are read, so a foreign name is never
    printed either (a name may hold a line break)."""
    net = _Net(_Backbone())
    first = probe.sentence_vectors(net, _inputs([1, 2]), tmp_path)
    (path,) = tmp_path.glob(f"{vector_store.PREFIX}*/*.npy")
    rows = np.load(path)
    rows[0, vector_store.KEY_BYTES :] = 0
    np.save(path.with_name("x\nforged.npy"), rows)
    path.unlink()
    _new_process(monkeypatch)
    caplog.set_level("WARNING")
    np.testing.assert_array_equal(probe.sentence_vectors(net, _inputs([1, 2]), tmp_path), first)
    assert not caplog.records
    record("vectors: a file of a name the store does not give, with forged vectors",
           "runs/vectors-<encoder>/x<newline>forged.npy", "(nothing: never read, never printed)", None,
           "the file as it was; the vectors computed")  # fmt: skip
