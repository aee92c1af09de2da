"""`python -m pipeline inspect`: the batch grid and the class-count table, and its bad-input lines."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from pipeline import cli
from pipeline.formats.records import records_of
from tests.conftest import TINY_SIZE, error_lines, run_cli
from tests.test_data import _rewrite_with_corrupt_jpeg


def _inspect(data_dir, out, *extra):
    return run_cli(
        "inspect", "--data-dir", str(data_dir), "--out", str(out), "--images", "6",
        "--set", f"data.image_size={TINY_SIZE}", *extra,
    )  # fmt: skip


@pytest.mark.slow
def test_inspect_writes_a_grid_and_counts_matching_the_data(tiny_data_dir, spec, tmp_path):
    done = _inspect(tiny_data_dir, tmp_path, "--recipe", "cnn", "--set", "augment.cutmix=0.5")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "batch.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    counts = pd.read_csv(tmp_path / "class_counts.csv", index_col="class")
    assert len(counts) == spec.num_classes and counts["name"].tolist() == list(spec.classes)
    manifest = json.loads((tiny_data_dir / "manifest.json").read_text())
    for split in spec.labeled_splits:
        assert counts[split].sum() == manifest["sizes"][str(TINY_SIZE)][split]["images"]
    assert "rarest in train" in done.stdout
    assert not list(tmp_path.glob("*.partial"))


def _damaged_data_dir(tiny_copy, tmp_path, spec):
    victim = sorted((tiny_copy / records_of(spec).record_dir(TINY_SIZE) / "train").glob("*.tfrec"))[2]
    _rewrite_with_corrupt_jpeg(victim, spec, 0)
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "manifest.json").write_text(json.dumps({"root": str(tiny_copy)}))
    return data_dir, victim


@pytest.mark.slow
@pytest.mark.thorough  # bad records named and skipped: test_data's skipping_bad_records; inspect's run: above
def test_a_corrupt_image_stops_inspect_naming_the_shard_unless_skipped(
    tiny_copy, spec, tmp_path, capsys, caplog
):
    data_dir, victim = _damaged_data_dir(tiny_copy, tmp_path, spec)
    failed = _inspect_here(capsys, data_dir, tmp_path / "out", "--set", "data.shuffle_buffer=10000")
    assert failed[0] == 2 and len(failed) == 2, failed
    assert failed[1].startswith(f"petals inspect: error: {victim}: 1 unreadable record(s), first record 0 (")
    assert "skip_bad_records=true" in failed[1]
    skipped = _inspect_here(capsys, data_dir, tmp_path / "out", "--set", "data.skip_bad_records=true")
    assert skipped == [0], skipped
    assert f"{victim}: 1 skipped" in caplog.text


def _inspect_here(capsys, data_dir, out, *extra) -> list[str]:
    """The stage in this process (cheaper than a subprocess): its exit code and error lines."""
    argv = [
        "inspect",
        "--data-dir",
        str(data_dir),
        "--out",
        str(out),
        "--set",
        f"data.image_size={TINY_SIZE}",
    ]
    code = cli.main([*argv, *extra])
    return [code, *error_lines(capsys.readouterr().err)]


def test_inspect_without_fetched_data_says_to_fetch(tmp_path, capsys):
    assert _inspect_here(capsys, tmp_path / "nothing", tmp_path / "out") == [
        2,
        f"petals inspect: error: {tmp_path / 'nothing'}: no manifest.json; run `make fetch` "
        "(or pass the fetched --data-dir)",
    ]


def test_inspect_refuses_a_bad_override(tiny_data_dir, tmp_path, capsys):
    assert _inspect_here(capsys, tiny_data_dir, tmp_path, "--set", "augment.mixup=lots") == [
        2,
        "petals inspect: error: --set: augment.mixup: expected a number, got 'lots'",
    ]


def test_inspect_names_a_missing_resolution(tiny_data_dir, tmp_path, capsys):
    code, line = _inspect_here(capsys, tiny_data_dir, tmp_path, "--set", "data.image_size=512")
    assert code == 2 and "no tfrecords-jpeg-512x512/train shards (resolutions present: [32])" in line
