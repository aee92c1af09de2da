"""Hostile input: every size is bounded before memory is (issue 64, item 2).

A size an untrusted file declares (a TFRecord's record length, a competition's class count, a
label CSV's rows and fields) or a recipe value a user types (`data.image_size=8192`) is checked
against a declared bound before anything of that size is allocated. Each case: the one line the
user sees, exit 2 (or None where the refusing function is called), nothing written, and where the
input was a memory bomb, the memory or time it took bounded.
"""

from __future__ import annotations

import os
import struct
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from competition import load_spec
from competition.spec import MAX_CLASSES, SPEC_DIR
from pipeline import cli
from pipeline.core.errors import PetalsError
from pipeline.data import records
from pipeline.formats.records import records_of
from tests.conftest import TINY_SIZE
from tests.hostile import CHECKOUT, Tree, one_error_line, record, run_measured

# ----------------------------------------------------------------------------- TFRecord lengths


def _crafted_header(length: int) -> bytes:
    """A TFRecord header declaring `length` bytes, with the length's checksum valid."""
    declared = struct.pack("<Q", length)
    return declared + struct.pack("<I", records.masked_crc32c(declared))


@pytest.mark.slow  # the fetch stage's process
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


@pytest.mark.parametrize(
    ("option", "refused"),
    [
        (["--size", "8192"], "--size=8192: must be in 1..1024"),
        (["--scale", "1000"], "synthetic scale 1000.0: must be in (0, 16]"),
    ],
)
def test_an_embedded_dataset_past_its_size_is_refused_before_it_is_drawn(tmp_path, capsys, option, refused):
    """`make fetch SIZE=8192` would draw every flower at 8192 px: the size recipes read is bounded
    where the embedded dataset is drawn too, and so is its scale."""
    tree = Tree(tmp_path)
    code = cli.main(
        ["fetch", "--no-progress", "--source", "synthetic", "--data-dir", str(tmp_path / "data"), *option]
    )
    line = one_error_line(capsys.readouterr().err)
    assert code == 2 and refused in line, line
    assert tree.changes() == []
    record(f"fetch: {' '.join(option)}", f"make fetch {' '.join(option)}", line, 2, "nothing written")


# ----------------------------------------------------------------------------- classes

_REPORT_OF_1500_CLASSES = """
import pathlib, sys, types
import numpy as np
from competition import load_spec
from pipeline.tasks.targets import single_label_report
n, examples = 1500, 6000
rng = np.random.default_rng(0)
labels = rng.integers(0, n, examples)
probabilities = rng.random((examples, n), dtype=np.float32)
classes = tuple(f"class {i}" for i in range(n))
spec = types.SimpleNamespace(classes=classes, metric=load_spec("flowers").metric)
evaluation = single_label_report.evaluation(labels, probabilities, spec)
for name, write in evaluation.files.items():
    write(pathlib.Path(sys.argv[1]) / name)
print(evaluation.fields["confusions_kept"] if "confusions_kept" in evaluation.fields else "all kept")
"""


@pytest.mark.slow  # a stage's process, plots of 1,500 classes
def test_a_report_of_1500_classes_plots_200_and_stays_under_a_gigabyte(tmp_path):
    """classes.txt of 1,500 names (9 KB) took make evaluate past 6 GB: the plot grew with the
    square of the classes. Now it draws the 200 classes with the most mistakes. The report runs in
    a child (`run_measured`), so its peak memory is its own: 0.6 GB and 4 s, where the
    whole matrix drawn took 21.7 GB and 108 s."""
    out = tmp_path / "run"
    out.mkdir()
    done, peak_mb = run_measured(
        [sys.executable, "-c", _REPORT_OF_1500_CLASSES, str(out)],
        cwd=CHECKOUT,
        env={**os.environ, "PYTHONPATH": CHECKOUT},  # this checkout's petals, not an installed one
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert peak_mb < 1024, f"{peak_mb:.0f} MB"
    assert sorted(p.name for p in out.iterdir()) == ["confusion.png", "confusions.csv", "per_class.csv"]
    with Image.open(out / "confusion.png") as plot:
        assert max(plot.size) < 4000, plot.size  # 200 classes at 0.16 inch and 100 dpi
    record(
        "classes: 1,500 in the report",
        "val predictions of 1,500 classes (6,000 examples)",
        "the plot's title: the 200 of 1500 classes with the most mistakes (the report under 1 GB)",
        None,
        "the run's report",
    )


def test_a_class_list_of_100001_names_is_refused(tmp_path, capsys):
    folder = tmp_path / "evil"
    folder.mkdir()
    (folder / "competition.toml").write_text((SPEC_DIR / "flowers" / "competition.toml").read_text())
    (folder / "classes.txt").write_text("".join(f"c{i}\n" for i in range(MAX_CLASSES + 1)))
    tree = Tree(tmp_path)
    source = ["--source", "dir", "--from", str(tmp_path / "source"), "--data-dir", str(tmp_path / "data")]
    code = cli.main(["fetch", "--no-progress", "--competition", str(folder / "competition.toml"), *source])
    line = one_error_line(capsys.readouterr().err)
    assert code == 2
    assert f"classes.txt: {MAX_CLASSES + 1} classes, more than {MAX_CLASSES} (no Kaggle competition" in line
    assert tree.changes() == []
    record("classes: 100,001", "a classes.txt of 100,001 names (0.8 MB)", line, 2, "nothing written")


# ----------------------------------------------------------------------------- label CSVs


def _cassava_source(folder: Path, train_csv: bytes) -> Path:
    """A cassava download as `fetch --source dir --from` takes it, with this train.csv."""
    for name in ("train_images/1.jpg", "train_images/2.jpg", "test_images/3.jpg"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(folder / name)
    (folder / "train.csv").write_bytes(train_csv)
    (folder / "sample_submission.csv").write_text("image_id,label\n3.jpg,4\n")
    return folder


def _cassava_fetch(source: Path, data: Path) -> list[str]:
    return ["fetch", "--no-progress", "--competition", "cassava", "--source", "dir", "--from", str(source),
            "--data-dir", str(data)]  # fmt: skip


@pytest.mark.slow  # a stage's process reading two million rows
def test_a_label_csv_of_two_million_rows_is_refused_after_its_declared_count(tmp_path):
    """It took 4 minutes and 2 GB before its refusal: now the rows are counted as they stream, and
    the file is refused after twice cassava's declared 21,397 (and a thousand). The stage runs as
    make runs it, in a child (`run_measured`), so its peak memory and time are its own: about 1 GB (most
    of it TensorFlow's import) and 4 s."""
    rows = b"".join(b"%d.jpg,%d\n" % (i, i % 5) for i in range(2_000_000))
    source = _cassava_source(tmp_path / "source", b"image_id,label\n" + rows)
    tree = Tree(tmp_path)
    started = time.monotonic()
    done, peak_mb = run_measured(
        [sys.executable, "-m", "pipeline", *_cassava_fetch(source, tmp_path / "data")],
        cwd=CHECKOUT,
        env={**os.environ, "PYTHONPATH": CHECKOUT},
        capture_output=True,
        text=True,
    )
    seconds, stderr, status = time.monotonic() - started, done.stderr, done.returncode
    line = one_error_line(stderr)
    assert status == 2
    assert "train.csv: more than 43794 rows, where its split declares 21397 ([data.counts])" in line, line
    assert peak_mb < 2048 and seconds < 60, (peak_mb, seconds)  # the bar; TensorFlow alone is 0.75 GB
    assert tree.changes() == []
    record(
        "label CSV: 2 million rows",
        f"cassava's train.csv of 2,000,000 rows ({len(rows) >> 20} MB; 21,397 declared)",
        line,  # the stage under 2 GB and a minute (about 1 GB, most of it TensorFlow, and 5 s)
        2,
        "nothing written",
    )


def test_an_id_of_5000_characters_is_refused_in_one_line(tmp_path, capsys):
    """It ended in a traceback: the id, a file name, was longer than the file system allows."""
    long_id = "a" * 4996 + ".jpg"
    source = _cassava_source(tmp_path / "source", f"image_id,label\n1.jpg,0\n{long_id},1\n".encode())
    tree = Tree(tmp_path)
    code = cli.main(_cassava_fetch(source, tmp_path / "data"))
    line = one_error_line(capsys.readouterr().err)
    assert code == 2
    assert (
        "train.csv: line 3: image_id 'aaaa" in line
        and "is longer than 255 bytes (a file name's limit)" in line
    )
    assert len(line) < 400, line  # the value cut short
    assert tree.changes() == []
    record(
        "label CSV: a 5,000-character id", "one train.csv id of 5,000 characters", line, 2, "nothing written"
    )


def test_a_text_of_300_mb_is_refused_before_it_is_read(tmp_path):
    """One 300 MB field took 2.3 GB: the stream stops a line at twice a text's bound (16 MiB). The
    field is a hole in a sparse file: 300 MB to read, nothing on disk."""
    from pipeline.formats.base import layout_of
    from pipeline.formats.tables import read_table

    table = layout_of(load_spec("imdb")).splits["train"]
    path = tmp_path / table.file
    with path.open("wb") as f:
        f.write(b'"id"\t"sentiment"\t"review"\n"1_1"\t1\t"')
        f.seek(300 << 20, os.SEEK_CUR)  # the hole reads as NUL characters
        f.write(b'"\n')
    tree = Tree(tmp_path, allowed=(path,))  # a snapshot would read the 300 MB whole
    tracemalloc.start()
    with pytest.raises(PetalsError) as refused:
        read_table(path, table.layout, None, 25000)
    peak_mb = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    line = str(refused.value)
    assert f"{path}: line 2 is longer than 32 MiB (a field may hold 16 MiB); not read further" == line
    assert peak_mb < 300, peak_mb
    assert tree.changes() == []
    record("table: a 300 MB text", "one review of 300 MB (a sparse file)", line, None, "nothing written")


def test_a_crafted_record_put_in_the_data_dir_after_fetch_is_refused_before_tf_data_reads_it(tiny_copy, spec):
    """tf.data would read it at train, predict or evaluate: the split's shards are scanned as they
    are listed."""
    from pipeline.data import datasets

    shard = sorted((tiny_copy / records_of(spec).record_dir(TINY_SIZE) / "train").glob("*.tfrec"))[0]
    offset = shard.stat().st_size
    with shard.open("ab") as f:
        f.write(_crafted_header(1 << 40) + bytes(16))
    tree = Tree(tiny_copy)
    with pytest.raises(PetalsError) as refused:
        datasets.shard_files(str(tiny_copy), spec, TINY_SIZE, "train")
    line = str(refused.value)
    refusal = f"{shard.name}: the record at byte {offset} declares {1 << 40} bytes, more than 64 MiB a record"
    assert line.endswith(f"{refusal}; not read (a crafted or damaged shard)"), line
    assert tree.changes() == []
    record(
        "record: 2**40 bytes, after fetch",
        "a shard in the data dir given a header claiming 2**40 bytes",
        line,
        None,
        "nothing written",
    )
