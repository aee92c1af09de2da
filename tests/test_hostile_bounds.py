"""Hostile input: sizes a file declares are bounded before anything is allocated (issue 42, part E).

A JPEG's header claims its size and a `.pth` declares its tensors' shapes, strides and storage
sizes; none of them may make petals allocate what the bytes in the file do not back. A photo over
MAX_IMAGE_SIDE a side is refused from its header, at fetch (every image's header is read) and in
tf.data (a file put in the data dir since); a `.pth` (the EfficientNet-Lite weights, or a local
copy given as `model.weights=<file>`) is checked against its own bytes, and its pickles still
run no code. Each case: the one line, exit 2 (or the PetalsError that the stage prints as it),
and nothing written.
"""

from __future__ import annotations

import collections
import io
import os
import pickle
import struct
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from competition import load_spec
from pipeline import cli
from pipeline.core.errors import PetalsError
from pipeline.formats.base import MAX_IMAGE_SIDE
from pipeline.formats.records import records_of
from pipeline.networks import torch_file
from tests.hostile import Tree, one_error_line, record

# ----------------------------------------------------------------------------- images


def _jpeg(width: int = 8, height: int = 8, noise: bool = False) -> bytes:
    pixels = np.random.default_rng(0).integers(0, 256, (height, width, 3), np.uint8) if noise else None
    image = Image.fromarray(pixels) if noise else Image.new("RGB", (width, height), (200, 30, 30))
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=95)
    return buffer.getvalue()


def _claiming(width: int, height: int, noise: bool = False) -> bytes:
    """A small real JPEG whose SOF0 header is patched to claim `width` x `height` px."""
    data = bytearray(_jpeg(48, 48, noise) if noise else _jpeg())
    sof = data.index(b"\xff\xc0")  # marker, length (2), precision (1), height (2), width (2)
    data[sof + 5 : sof + 9] = struct.pack(">HH", height, width)
    return bytes(data)


def _copy(folder: Path, bomb: str, data: bytes) -> Path:
    """A dogs-vs-cats copy as `fetch --source dir --from` takes it, its `bomb` image replaced."""
    for name in (
        "train/cat.0.jpg",
        "train/cat.1.jpg",
        "train/dog.0.jpg",
        "train/dog.1.jpg",
        "test/1.jpg",
        "test/2.jpg",
    ):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(_jpeg())
    (folder / "sample_submission.csv").write_text("id,label\n1,0.5\n2,0.5\n")
    (folder / bomb).write_bytes(data)
    return folder


def _fetch_args(copy: Path, data: Path) -> list[str]:
    source = ["--source", "dir", "--from", str(copy), "--data-dir", str(data)]
    return ["fetch", "--no-progress", "--competition", "dogs-vs-cats", *source]


def test_a_first_image_claiming_30000_px_a_side_is_one_line_not_a_traceback(tmp_path, capsys):
    """It was a DecompressionBombError traceback: the first image is decoded whole. (In this
    process, the traceback would fail the test: cli.main turns only petals' errors into a line.)"""
    copy = _copy(tmp_path / "copy", "train/cat.0.jpg", _claiming(30000, 30000))
    tree = Tree(tmp_path)
    code = cli.main(_fetch_args(copy, tmp_path / "data"))
    line = one_error_line(capsys.readouterr().err)
    assert code == 2
    assert f"train/cat.0.jpg: claims 30000 x 30000 px, more than {MAX_IMAGE_SIDE} px a side" in line, line
    assert tree.changes() == []
    record(
        "image: 30000 px a side, first",
        "a 0.6 KB JPEG whose header claims 30000 x 30000",
        line,
        2,
        "nothing written",
    )


def test_a_later_image_claiming_13000_px_a_side_is_refused_from_its_header(tmp_path, capsys):
    """It was accepted (only the first image was decoded) and took 2 GB in tf.data: every header is read."""
    bomb = _claiming(13000, 13000, noise=True)
    assert len(bomb) < 8000
    copy = _copy(tmp_path / "copy", "train/dog.1.jpg", bomb)
    tree = Tree(tmp_path)
    code = cli.main(_fetch_args(copy, tmp_path / "data"))
    line = one_error_line(capsys.readouterr().err)
    assert code == 2
    assert "train/dog.1.jpg: claims 13000 x 13000 px" in line and "not decoded" in line, line
    assert tree.changes() == []
    record(
        "image: 13000 px a side, not first",
        f"a {len(bomb) // 1000} KB JPEG claiming 13000 x 13000, fourth of its split",
        line,
        2,
        "nothing written",
    )


def test_an_image_put_in_the_data_dir_after_fetch_is_named_before_it_is_decoded(tmp_path):
    """tf.data reads each header before decoding: a file added since fetch verified the data dir
    stops the stage in one line (or is skipped with data.skip_bad_records)."""
    from pipeline.data import file_examples
    from pipeline.data.readers import FileSplit
    from pipeline.formats.base import Examples

    (tmp_path / "ok.jpg").write_bytes(_jpeg())
    (tmp_path / "bomb.jpg").write_bytes(_claiming(30000, 20000))
    paths = np.array([str(tmp_path / "ok.jpg"), str(tmp_path / "bomb.jpg")])
    split = FileSplit(Examples(np.array(["1", "2"]), (paths,), None), load_spec("dogs-vs-cats"))
    tree = Tree(tmp_path)
    with pytest.raises(PetalsError) as refused, split.naming_bad(labeled=False):
        for _ in file_examples.file_dataset(split.examples, 2, training=False, image_size=16):
            pass
    line = str(refused.value)
    assert line.startswith(f"{tmp_path / 'bomb.jpg'}: does not decode (claims 30000 x 20000 px"), line
    skipped = file_examples.file_dataset(split.examples, 1, training=False, image_size=16, skip_bad=True)
    assert sum(1 for _ in skipped) == 1
    assert tree.changes() == []
    record(
        "image: 30000 px added after fetch",
        "a JPEG claiming 30000 x 20000 in tf.data",
        line,
        None,
        "nothing written",
    )


def _shard(folder: Path, jpegs: list[bytes]) -> str:
    """A flowers train shard at 32 px holding these images, in the competition's schema."""
    from pipeline.data import records

    schema = records_of(load_spec("flowers")).schema
    path = str(folder / f"00-32x32-{len(jpegs)}.tfrec")
    records.write_shard(
        path, [records.serialize_example(schema, j, f"id{i}", 0) for i, j in enumerate(jpegs)]
    )
    return path


def test_a_record_claiming_30000_px_a_side_is_refused_before_it_is_decoded(tmp_path):
    """Fetch decodes a shard's first record only; tf.data checks every record's header before
    its decoder allocates the 2.7 GB it claims (then a 32 px record may only be 32 px)."""
    from pipeline.data import datasets

    good = _jpeg(32, 32)
    path = _shard(tmp_path, [good, _claiming(30000, 30000), good])
    tree = Tree(tmp_path)
    report = datasets.scan_shard(path, load_spec("flowers"), 32, labeled=True)
    line = report.describe()
    assert report.bad == [1] and "1 unreadable record(s), first record 1 (an image not 32 x 32 px" in line, (
        line
    )
    assert tree.changes() == []
    record(
        "record: 30000 px a side, not first",
        "a TFRecord whose 2nd JPEG claims 30000 x 30000",
        line,
        None,
        "nothing written",
    )


def test_a_first_record_claiming_30000_px_a_side_is_one_line_at_fetch(tmp_path):
    from pipeline.data.layout import _check_first_record

    path = _shard(tmp_path, [_claiming(30000, 30000)])
    tree = Tree(tmp_path)
    with pytest.raises(PetalsError, match=r"image is 30000 x 30000 px, expected 32 x 32$") as refused:
        _check_first_record(path, load_spec("flowers"), 32, "train")
    assert tree.changes() == []
    record(
        "record: 30000 px a side, first",
        "a TFRecord whose 1st JPEG claims 30000 x 30000",
        str(refused.value),
        None,
        "nothing written",
    )


# ----------------------------------------------------------------------------- .pth sizes

HEADERS = (torch_file.MAGIC_NUMBER, torch_file.PROTOCOL_VERSION, {"little_endian": True})


def _pth(
    path: Path, monkeypatch, tensors: dict, values: np.ndarray, numel: int | None = None, count=None
) -> None:
    """A legacy `torch.save` file, every field chosen: `tensors` {name: (offset, size, stride)} over
    one storage "0" holding `values`; `numel` the size the tensors' pickle declares for it and
    `count` its record's element count (both the true size unless given)."""
    torch, utils = types.ModuleType("torch"), types.ModuleType("torch._utils")

    def _rebuild_tensor_v2(*args):  # only pickled by name
        raise AssertionError

    storage_type = type("FloatStorage", (), {"__module__": "torch"})
    _rebuild_tensor_v2.__module__, _rebuild_tensor_v2.__qualname__ = "torch._utils", "_rebuild_tensor_v2"
    utils._rebuild_tensor_v2, torch.FloatStorage, torch._utils = _rebuild_tensor_v2, storage_type, utils
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch._utils", utils)
    storage = object()

    class Tensor:
        def __init__(self, offset, size, stride):
            self.args = (storage, offset, size, stride, False, collections.OrderedDict())

        def __reduce__(self):
            return _rebuild_tensor_v2, self.args

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            declared = len(values) if numel is None else numel
            return ("storage", storage_type, "0", "cpu", declared, None) if obj is storage else None

    with path.open("wb") as handle:
        for header in HEADERS:
            pickle.dump(header, handle, protocol=2)
        Pickler(handle, protocol=2).dump(collections.OrderedDict((n, Tensor(*r)) for n, r in tensors.items()))
        pickle.dump(["0"], handle, protocol=2)
        handle.write(np.int64(len(values) if count is None else count).astype("<i8").tobytes())
        handle.write(values.astype("<f4").tobytes())


TWELVE = np.arange(12, dtype=np.float32)
HUGE = 2**62


@pytest.mark.parametrize(
    ("case", "given", "tensors", "values", "numel", "count", "expected"),
    [
        (
            "stride-0 huge tensor",
            "w: size (10^6, 10^6), stride (0, 0) over 1 value",
            {"w": (0, (10**6, 10**6), (0, 0))},
            np.ones(1, np.float32),
            None,
            None,
            r"w of size \(1000000, 1000000\) holds 1000000000000 values, more than its storage's 1",
        ),
        (
            "storage of 2^62 values",
            "a storage declaring 2^62 values, 4 bytes there",
            {"w": (0, (1,), (1,))},
            np.ones(1, np.float32),
            HUGE,
            HUGE,
            rf"truncated \(storage 0 \(of w\) declares {HUGE} values, {4 * HUGE} bytes; "
            r"the file has 4 bytes left\)",
        ),
        (
            "storage larger than its bytes",
            "a storage declaring 100 values, 12 there",
            {"w": (0, (3, 4), (4, 1))},
            TWELVE,
            100,
            100,
            r"truncated \(storage 0 \(of w\) declares 100 values, 400 bytes; the file has 48 bytes left\)",
        ),
        (
            "storage record unlike its pickle",
            "a record of 2^62 values, the pickle says 12",
            {"w": (0, (3, 4), (4, 1))},
            TWELVE,
            None,
            HUGE,
            rf"corrupt \(storage 0 \(of w\) has {HUGE} values in its record, its tensor's pickle 12\)",
        ),
        (
            "storage record of -5 values",
            "a record of -5 values",
            {"w": (0, (3, 4), (4, 1))},
            TWELVE,
            -5,
            -5,
            r"corrupt \(storage 0 \(of w\) has -5 values in its record",
        ),
        (
            "negative tensor size",
            "w: size (-1, 4)",
            {"w": (0, (-1, 4), (4, 1))},
            TWELVE,
            None,
            None,
            r"w has an invalid view \(offset 0, size \(-1, 4\), stride \(4, 1\)\)",
        ),
        (
            "negative stride",
            "w: stride (-4, 1)",
            {"w": (8, (3, 4), (-4, 1))},
            TWELVE,
            None,
            None,
            r"w has an invalid view",
        ),
        (
            "one storage named 1000 times",
            "1000 tensors, each all of one 12-value storage",
            {f"w{i}": (0, (12,), (1,)) for i in range(1000)},
            TWELVE,
            None,
            None,
            r"its 1000 tensors hold 12000 values, more than 4 times the 12 its storages hold",
        ),
    ],
)
def test_a_pth_declaring_more_than_its_bytes_is_one_line(
    tmp_path, monkeypatch, case, given, tensors, values, numel, count, expected
):
    """Each was a MemoryError or OverflowError (or gigabytes allocated) from a file of bytes."""
    path = tmp_path / "weights.pth"
    _pth(path, monkeypatch, tensors, values, numel, count)
    assert path.stat().st_size < 100_000
    tree = Tree(tmp_path)
    with pytest.raises(PetalsError, match=rf"^{path}: {expected}") as refused:
        torch_file.read_state_dict(path)
    assert tree.changes() == []
    record(
        f"weights .pth: {case}",
        f"`model.weights=<file>`: {given}",
        str(refused.value),
        None,
        "nothing written",
    )


def _after_headers(path: Path, body: bytes) -> Path:
    with path.open("wb") as handle:
        for header in HEADERS:
            pickle.dump(header, handle, protocol=2)
        handle.write(body)
    return path


@pytest.mark.parametrize(
    ("case", "body", "expected"),
    [
        (
            "a byte string claiming 2^40 bytes",
            b"\x80\x04\x8e" + struct.pack("<Q", 2**40) + b"abc.",
            r"not a PyTorch state dict in the legacy format \(expected 1099511627776 bytes in a bytes8, "
            r"but only 4 remain\)",
        ),
        (
            "a memo entry at 2^26",
            b"\x80\x02Nr" + struct.pack("<I", 2**26) + b".",
            r"a pickle puts memo entry 67108864 after 2 opcodes: not a state dict",
        ),
    ],
)
def test_a_pth_pickle_claiming_memory_is_refused_before_the_unpickler_allocates_it(
    tmp_path, case, body, expected
):
    """The C unpickler allocates a byte string's declared length (MemoryError) and grows its memo to
    a PUT's index (1 GB from 10 bytes) before reading anything."""
    path = _after_headers(tmp_path / "weights.pth", body)
    tree = Tree(tmp_path)
    with pytest.raises(PetalsError, match=rf"^{path}: {expected}") as refused:
        torch_file.read_state_dict(path)
    assert tree.changes() == []
    record(
        f"weights .pth: {case}",
        f"`model.weights=<file>`: a pickle with {case}",
        str(refused.value),
        None,
        "nothing written",
    )


# ----------------------------------------------------------------------------- .pth code (already held)


class _Reduce:
    """An object whose unpickling would call `function(*args)`."""

    def __init__(self, function, *args):
        self.function, self.args = function, args

    def __reduce__(self):
        return self.function, self.args


def _code_cases(marker: Path) -> list[tuple[str, bytes, str]]:
    touch = f"touch {marker}"

    def reduced(function, *args) -> bytes:
        return pickle.dumps(collections.OrderedDict(w=_Reduce(function, *args)), protocol=2)

    def stack_global(
        module: str, name: str
    ) -> bytes:  # protocol 4: a dotted name, resolved attribute by attribute
        unicode = b"".join(b"\x8c" + bytes([len(s)]) + s.encode() for s in (module, name))
        return b"\x80\x04" + unicode + b"\x93" + b")R."

    return [
        ("os.system via __reduce__", reduced(os.system, touch), r"refusing posix\.system"),
        ("eval via __reduce__", reduced(eval, f"open({str(marker)!r}, 'w')"), r"refusing __builtin__\.eval"),
        (
            "subprocess via __reduce__",
            reduced(subprocess.Popen, ["touch", str(marker)]),
            r"refusing (subprocess|commands)\.Popen",  # protocol 2 writes Python 2 names
        ),
        ("getattr via __reduce__", reduced(getattr, int, "real"), r"refusing __builtin__\.getattr"),
        ("INST opcode (protocol 0)", f"(S'{touch}'\nios\nsystem\n.".encode(), r"refusing os\.system"),
        (
            "dotted global",
            stack_global("torch._utils", "_rebuild_tensor_v2.__globals__"),
            r"refusing torch\._utils\._rebuild_tensor_v2\.__globals__",
        ),
    ]


@pytest.mark.parametrize("index", range(6))
def test_a_pth_whose_pickle_asks_to_run_code_runs_none(tmp_path, index):
    """What held before issue 42 and must keep holding: the unpickler knows four names."""
    marker = tmp_path / "pwned"
    case, body, expected = _code_cases(marker)[index]
    path = _after_headers(tmp_path / "weights.pth", body)
    tree = Tree(tmp_path)
    with pytest.raises(PetalsError, match=rf"^{path}: not a PyTorch state dict .*{expected}") as refused:
        torch_file.read_state_dict(path)
    assert not marker.exists() and tree.changes() == []
    record(
        f"weights .pth: {case}",
        f"`model.weights=<file>`: a pickle with {case}",
        str(refused.value),
        None,
        "nothing written, nothing run",
    )
