"""Hostile input: every size is bounded before memory is (issue 64, item 2).

A size an untrusted file declares (a TFRecord's record length, a competition's class count, a
label CSV's rows and fields) or a recipe value a user types (`data.image_size=8192`) is checked
against a declared bound before anything of that size is allocated. Each case: the one line the
user sees, exit 2 (or None where the refusing function is called), nothing written, and where the
input was a memory bomb, the memory or time it took bounded.
"""

from __future__ import annotations

import struct

import pytest

from pipeline import cli
from pipeline.data import records
from pipeline.formats.records import records_of
from tests.conftest import TINY_SIZE
from tests.hostile import Tree, one_error_line, record

# ----------------------------------------------------------------------------- TFRecord lengths


def _crafted_header(length: int) -> bytes:
    """A TFRecord header declaring `length` bytes, with the length's checksum valid."""
    declared = struct.pack("<Q", length)
    return declared + struct.pack("<I", records.masked_crc32c(declared))


def test_a_record_declaring_an_exabyte_is_refused_by_fetch_before_tensorflow_reads_it(
    tiny_copy, spec, tmp_path, capsys
):
    """It was a segmentation fault, no message: TensorFlow's reader allocates the declared length.
    (A regression here ends this test's process: the header scan is what stands in between.)"""
    shard = sorted((tiny_copy / records_of(spec).record_dir(TINY_SIZE) / "test").glob("*.tfrec"))[2]
    offset = shard.stat().st_size
    with shard.open("ab") as f:
        f.write(_crafted_header(1 << 60) + bytes(16))
    tree = Tree(tmp_path)
    source = ["--source", "dir", "--from", str(tiny_copy), "--data-dir", str(tmp_path / "data")]
    code = cli.main(["fetch", "--no-progress", "--competition", "flowers", *source])
    line = one_error_line(capsys.readouterr().err)
    assert code == 2
    refused = f"{shard.name}: the record at byte {offset} declares {1 << 60} bytes, more than 64 MiB"
    assert refused in line, line
    assert tree.changes() == []
    record(
        "record: declares 2**60 bytes",
        "a TFRecord header claiming 2**60 bytes, its length's crc valid",
        line,
        2,
        "nothing written",
    )


# ----------------------------------------------------------------------------- recipe values


@pytest.mark.parametrize(
    ("overrides", "refused"),
    [
        (
            ["data.image_size=8192"],
            "data.image_size=8192: must be in 1..1024 (twice Kaggle's largest TFRecords)",
        ),
        (["data.batch_size=5000"], "data.batch_size=5000: must be in 1..4096"),
        (["train.feature_views=1000"], "train.feature_views=1000: must be in 1..32"),
        (
            ["data.image_size=1024", "data.batch_size=512"],
            "data.batch_size=512 at 1024 px: 6.0 GiB of float32 images a batch, more than 1 GiB",
        ),
    ],
)
def test_a_size_past_its_bound_is_refused_before_the_stage_starts(tmp_path, capsys, overrides, refused):
    """data.image_size=8192 took make train past 6 GB in 53 s: every size key has a declared range."""
    tree = Tree(tmp_path)
    sets = [arg for value in overrides for arg in ("--set", value)]
    code = cli.main(["train", "--print-config", "--data-dir", str(tmp_path / "data"), *sets])
    line = one_error_line(capsys.readouterr().err)
    assert code == 2 and refused in line, line
    assert tree.changes() == []
    record(f"recipe: {' '.join(overrides)}", f"--set {' --set '.join(overrides)}", line, 2, "nothing written")
