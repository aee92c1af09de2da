"""The fetch stage: sources, verification, idempotency and atomicity (Kaggle API in test_kaggle_fetch)."""

import json
import os
import shutil
import sys
import types
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline.core.errors import PetalsError
from pipeline.data import layout, records
from pipeline.data import manifest as manifest_module
from pipeline.data.layout import verify_layout
from pipeline.formats.records import records_of
from pipeline.stages import fetch as fetch_stage
from pipeline.stages.fetch import FetchOptions, fetch
from tests.conftest import TINY_SCALE, TINY_SIZE, run_python


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    """No Kaggle credentials anywhere the client looks."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("KAGGLE_CONFIG_DIR", str(home / ".kaggle"))
    for name in ("KAGGLE_API_TOKEN", "KAGGLE_USERNAME", "KAGGLE_KEY"):
        monkeypatch.delenv(name, raising=False)
    return home


def _options(tmp_path, **overrides) -> FetchOptions:
    base = FetchOptions(
        data_dir=tmp_path / "data",
        kaggle_input=tmp_path / "no-kaggle-input",
        synthetic_size=TINY_SIZE,
        scale=TINY_SCALE,
        workers=2,
        progress=False,
        retries=1,
    )
    return replace(base, **overrides)


# ----------------------------------------------------------------------------- synthetic and auto


@pytest.mark.slow  # it trains, or runs a network's pass: out of make test-fast
def test_auto_without_anything_draws_the_synthetic_dataset(tmp_path, spec, no_credentials, tiny_dataset):
    manifest = fetch(_options(tmp_path), spec)
    data = tmp_path / "data"
    assert manifest["source"] == "synthetic" and manifest["root"] == "."
    assert json.loads((data / "manifest.json").read_text()) == manifest
    assert manifest["synthetic"] == {"seed": 0, "size": TINY_SIZE, "scale": TINY_SCALE}
    counts = manifest["sizes"][str(TINY_SIZE)]
    assert counts == {k: v for k, v in verify_layout(str(tiny_dataset), spec)[TINY_SIZE].items()}
    # Same seed, same bytes: the fingerprint equals the session's tiny dataset's.
    assert manifest["fingerprint"] == layout.fingerprint(str(tiny_dataset), spec, [TINY_SIZE])
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("data")) == ["data"]


@pytest.mark.slow  # draws the data
def test_second_fetch_is_a_no_op_unless_forced(tmp_path, spec, no_credentials):
    options = _options(tmp_path, source="synthetic")
    first = fetch(options, spec)
    stamp = (tmp_path / "data" / "manifest.json").stat().st_mtime_ns
    assert fetch(options, spec) == first
    assert (tmp_path / "data" / "manifest.json").stat().st_mtime_ns == stamp
    forced = fetch(replace(options, force=True), spec)
    assert forced["fingerprint"] == first["fingerprint"] and forced["created"] >= first["created"]


def test_existing_data_of_another_kind_is_not_silently_kept(tmp_path, spec, no_credentials):
    fetch(_options(tmp_path, source="synthetic"), spec)
    with pytest.raises(PetalsError, match="already holds synthetic data; pass --force"):
        fetch(_options(tmp_path, source="kaggle"), spec)
    with pytest.raises(PetalsError, match=r"made with .*'seed': 0.*pass --force"):
        fetch(_options(tmp_path, source="synthetic", seed=1), spec)


def test_explicit_kaggle_without_credentials_never_falls_back(tmp_path, spec, no_credentials):
    with pytest.raises(PetalsError, match=r"needs Kaggle credentials: .*kaggle\.json"):
        fetch(_options(tmp_path, source="kaggle"), spec)
    assert not (tmp_path / "data").exists()


def test_auto_prefers_kaggle_input_then_gcs_then_credentials(tmp_path, spec, no_credentials):
    options = _options(tmp_path)
    assert fetch_stage.resolve_source(options, spec)[0] == "synthetic"
    (no_credentials / ".kaggle").mkdir()
    (no_credentials / ".kaggle" / "kaggle.json").write_text('{"username": "u", "key": "k"}')
    source, why = fetch_stage.resolve_source(options, spec)
    assert source == "kaggle" and "kaggle.json" in why and '"k"' not in why
    assert fetch_stage.resolve_source(replace(options, gcs_path="gs://b/flowers"), spec)[0] == "gcs"
    attached = tmp_path / "no-kaggle-input" / "flower-classification-with-tpus"
    (attached / records_of(spec).record_dir(192)).mkdir(parents=True)
    assert fetch_stage.resolve_source(options, spec)[0] == "kaggle"  # no sample: not the competition
    (attached / spec.sample_submission).write_text("id,label\n")
    assert fetch_stage.resolve_source(options, spec)[0] == "kaggle-input"


@pytest.mark.slow  # draws the data
def test_interrupted_fetch_leaves_the_data_dir_as_it_was(tmp_path, spec, no_credentials, monkeypatch):
    options = _options(tmp_path, source="synthetic")
    first = fetch(options, spec)

    def broken_verify(*args, **kwargs):
        raise KeyboardInterrupt  # as if the user pressed Ctrl-C during verification

    monkeypatch.setattr(layout, "verify_layout", broken_verify)
    with pytest.raises(KeyboardInterrupt):
        fetch(replace(options, force=True, seed=3), spec)
    assert json.loads((tmp_path / "data" / "manifest.json").read_text()) == first
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("data")) == ["data"]


# ----------------------------------------------------------------------------- gcs and kaggle-input


def test_gcs_source_copies_and_verifies(tmp_path, spec, tiny_dataset, no_credentials):
    # Any tf.io.gfile path works as a "GCS" path; a local folder exercises the same copy code.
    manifest = fetch(_options(tmp_path, source="gcs", gcs_path=str(tiny_dataset)), spec)
    assert manifest["source"] == "gcs" and manifest["root"] == "." and manifest["origin"] == str(tiny_dataset)
    assert manifest["fingerprint"] == layout.fingerprint(str(tiny_dataset), spec, [TINY_SIZE])


def test_gcs_in_place_points_at_the_remote_data(tmp_path, spec, tiny_dataset, no_credentials):
    manifest = fetch(_options(tmp_path, source="gcs", gcs_path=str(tiny_dataset), gcs_in_place=True), spec)
    assert manifest["root"] == str(tiny_dataset)
    assert manifest_module.data_root(tmp_path / "data", manifest) == str(tiny_dataset)
    assert [p.name for p in (tmp_path / "data").iterdir()] == ["manifest.json"]


def _zip(folder: Path, archive: Path, inside: str = "") -> Path:
    """`folder` zipped as Kaggle serves the competition (its layout at the root, or under `inside`/)."""
    with zipfile.ZipFile(archive, "w") as zf:
        for file in sorted(folder.rglob("*")):
            if file.is_file():
                zf.write(file, f"{inside}{file.relative_to(folder).as_posix()}")
    return archive


def test_your_own_unpacked_folder_is_read_in_place(tmp_path, spec, tiny_dataset, no_credentials):
    wrapper = tmp_path / "downloads" / "tpu-getting-started"  # unpacked into a folder of its own
    shutil.copytree(tiny_dataset, wrapper)
    manifest = fetch(_options(tmp_path, data_from=tmp_path / "downloads"), spec)  # SOURCE=auto
    assert manifest["source"] == "dir" and manifest["root"] == str(wrapper)
    assert manifest["origin"] == str(tmp_path / "downloads")
    assert manifest["fingerprint"] == layout.fingerprint(str(tiny_dataset), spec, [TINY_SIZE])
    assert [p.name for p in (tmp_path / "data").iterdir()] == ["manifest.json"]
    again = fetch(_options(tmp_path, source="dir", data_from=tmp_path / "downloads"), spec)
    assert again == manifest  # nothing to do the second time
    with pytest.raises(PetalsError, match=r"already holds dir data from .*--force"):
        fetch(_options(tmp_path, source="dir", data_from=tiny_dataset), spec)


@pytest.mark.parametrize("inside", ["", "tpu-getting-started/"])
def test_the_competitions_zip_is_unpacked_and_verified(tmp_path, spec, tiny_dataset, no_credentials, inside):
    archive = _zip(tiny_dataset, tmp_path / "tpu-getting-started.zip", inside)
    manifest = fetch(_options(tmp_path, source="dir", data_from=archive, sizes=(TINY_SIZE,)), spec)
    unpacked = sorted(p.name for p in (tmp_path / "data").iterdir())
    assert unpacked == sorted([*(p.name for p in tiny_dataset.iterdir()), "manifest.json"])  # no wrapper left
    assert manifest["source"] == "dir" and manifest["root"] == "." and manifest["origin"] == str(archive)
    assert manifest["fingerprint"] == layout.fingerprint(str(tiny_dataset), spec, [TINY_SIZE])
    assert (tmp_path / "data" / spec.sample_submission).is_file() and archive.is_file()  # yours, kept


def test_a_wrong_copy_is_one_line_exit_2_and_writes_nothing(tmp_path, tiny_dataset, capsys):
    from pipeline import cli

    not_it = tmp_path / "holiday-photos"
    (not_it / "2026").mkdir(parents=True)
    (not_it / "2026" / "beach.jpg").write_bytes(b"\xff\xd8")
    damaged = tmp_path / "flowers.zip"
    damaged.write_bytes(_zip(tiny_dataset, tmp_path / "whole.zip").read_bytes()[:5000])
    for given, says in (
        (not_it, f"--from {not_it}: no folder in it holds sample_submission.csv and tfrecords-jpeg-"),
        (tmp_path / "nowhere", f"--from {tmp_path / 'nowhere'}: no such file or folder"),
        (not_it / "2026" / "beach.jpg", "not a zip archive"),
        (damaged, f"corrupt archive {damaged}"),
    ):
        code = cli.main(
            ["fetch", "--source", "dir", "--from", str(given), "--data-dir", str(tmp_path / "data")]
        )
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and says in err[0], err
        assert not (tmp_path / "data").exists() and not (tmp_path / "data.partial").exists()
    assert damaged.is_file()  # a user's own archive is never deleted


def test_unreachable_gcs_path_is_one_line(tmp_path, spec, no_credentials):
    with pytest.raises(PetalsError, match="cannot read gs://petals-test-no-such-bucket/flowers") as err:
        fetch(_options(tmp_path, source="gcs", gcs_path="gs://petals-test-no-such-bucket/flowers"), spec)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize(
    "mounted",
    [
        "competitions/tpu-getting-started",  # 2026
        "tpu-getting-started",  # before
        "competitions/flower-classification-with-tpus",  # the competition's other slug
        "datasets/someone/flowers-copy",  # neither: found by its marker files
    ],
)
def test_kaggle_input_finds_the_competition_wherever_kaggle_mounted_it(
    tmp_path, spec, tiny_dataset, no_credentials, mounted, caplog
):
    inputs = tmp_path / "kaggle-input"
    (inputs / "datasets" / "someone" / "weights").mkdir(parents=True)  # a decoy without the markers
    (inputs / mounted).parent.mkdir(parents=True, exist_ok=True)
    (inputs / mounted).symlink_to(tiny_dataset)
    with caplog.at_level("INFO"):
        manifest = fetch(_options(tmp_path, kaggle_input=inputs, source="kaggle-input"), spec)
    assert manifest["source"] == "kaggle-input" and manifest["root"] == str(inputs / mounted)
    how = "a search of" if mounted.startswith("datasets") else f"the layout {mounted}"
    assert f"attached at {inputs / mounted} ({how}" in caplog.text


def test_kaggle_input_without_the_competition_is_one_line(tmp_path, spec, no_credentials):
    inputs = tmp_path / "kaggle-input"
    (inputs / "competitions" / "tpu-getting-started").mkdir(parents=True)  # mounted, but empty
    with pytest.raises(
        PetalsError, match=r"no folder under .*kaggle-input holds sample_submission\.csv and "
    ):
        fetch(_options(tmp_path, kaggle_input=inputs, source="kaggle-input"), spec)
    assert not (tmp_path / "data").exists()


def test_inside_a_kernel_kagglehub_says_where_the_competition_is(
    tmp_path, spec, tiny_dataset, no_credentials, monkeypatch
):
    asked = []

    def competition_download(handle):
        asked.append(handle)
        return str(tiny_dataset)  # a mount outside the usual layouts: only kagglehub knows it

    monkeypatch.setitem(
        sys.modules, "kagglehub", types.SimpleNamespace(competition_download=competition_download)
    )
    monkeypatch.setenv("KAGGLE_KERNEL_RUN_TYPE", "Batch")
    manifest = fetch(_options(tmp_path, kaggle_input=tmp_path / "empty", source="kaggle-input"), spec)
    assert asked == ["tpu-getting-started"] and manifest["root"] == str(tiny_dataset)


# ----------------------------------------------------------------------------- verification


def _split_dir(root: Path, spec, split: str) -> Path:
    return root / records_of(spec).record_dir(TINY_SIZE) / split


def test_verify_catches_a_missing_split(tiny_copy, spec):
    shutil.rmtree(_split_dir(tiny_copy, spec, "val"))
    with pytest.raises(PetalsError, match=r"tfrecords-jpeg-32x32/val: split missing"):
        verify_layout(str(tiny_copy), spec)


def test_verify_catches_a_count_that_disagrees_with_the_name(tiny_copy, spec):
    shard = sorted(_split_dir(tiny_copy, spec, "train").glob("*.tfrec"))[3]
    count = records.count_from_name(str(shard))
    shard.rename(shard.with_name(shard.name.replace(f"-{count}.", f"-{count + 1}.")))
    with pytest.raises(PetalsError, match=rf"03-32x32-{count + 1}\.tfrec: its name says {count + 1} records"):
        verify_layout(str(tiny_copy), spec)


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_verify_catches_a_corrupt_shard(tiny_copy, spec, damage):
    shard = sorted(_split_dir(tiny_copy, spec, "test").glob("*.tfrec"))[5]
    data = bytearray(shard.read_bytes())
    if damage == "truncate":
        data = data[: len(data) * 2 // 3]
    else:
        data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(PetalsError, match=rf"corrupt shard .*{shard.name}"):
        verify_layout(str(tiny_copy), spec)


def test_verify_catches_a_train_record_without_class(tiny_copy, spec):
    train = _split_dir(tiny_copy, spec, "train")
    first = sorted(train.glob("*.tfrec"))[0]
    test_shard = sorted(_split_dir(tiny_copy, spec, "test").glob("*.tfrec"))[0]
    n = records.count_from_name(str(test_shard))
    first.unlink()
    shutil.copy(test_shard, train / records_of(spec).shard_name(0, TINY_SIZE, n))
    with pytest.raises(PetalsError, match=r"train record in .*00-32x32-\d+\.tfrec has no 'class' feature"):
        verify_layout(str(tiny_copy), spec)


def test_verify_catches_a_wrong_layout(tmp_path, spec):
    (tmp_path / "flowers").mkdir()
    (tmp_path / "flowers" / "train.csv").write_text("a,b\n")
    with pytest.raises(PetalsError, match=r"no tfrecords-jpeg-<size>x<size> folder: not a flowers data dir"):
        verify_layout(str(tmp_path / "flowers"), spec)


def test_verify_catches_a_sample_submission_that_does_not_match(tiny_copy, spec):
    path = tiny_copy / spec.sample_submission
    path.write_text("\n".join(path.read_text().splitlines()[:-3]) + "\n")
    with pytest.raises(PetalsError, match=r"sample_submission.csv: \d+ rows but the 32px test split holds"):
        verify_layout(str(tiny_copy), spec)


def test_verify_reports_a_missing_resolution(tiny_copy, spec):
    with pytest.raises(
        PetalsError, match=r"no tfrecords-jpeg-512x512 folder \(resolutions present: \[32\]\)"
    ):
        verify_layout(str(tiny_copy), spec, sizes=(512,))


def test_manifest_that_is_not_json_is_named(tmp_path):
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(PetalsError, match=r"manifest.json: not valid JSON .*: delete it and fetch again"):
        manifest_module.read_manifest(tmp_path)
    assert os.path.exists(tmp_path / "manifest.json")


@pytest.mark.slow  # a Python process running the fetch stage
def test_a_fetch_with_nothing_to_do_or_refused_at_once_starts_no_framework(tiny_data_dir, tmp_path):
    """What needs no reading (data already there; a source that is the data dir) is answered
    before TensorFlow starts: a second, not TensorFlow's start-up (5-10 s, a minute under load)."""
    mine = tmp_path / "mine"
    mine.mkdir()
    done = run_python(
        f"""
        import sys
        from pipeline import cli
        codes = [cli.main(["fetch", "--data-dir", {str(tiny_data_dir)!r}]),
                 cli.main(["fetch", "--data-dir", {str(mine)!r}, "--source", "dir", "--from", {str(mine)!r}])]
        print(codes, sorted(m for m in ("keras", "tensorflow", "jax") if m in sys.modules))
        """
    )
    assert done.stdout.strip() == "[0, 2] []", done.stderr[-2000:]
    assert "nothing to do" in done.stderr and "overlap (--from is the data dir)" in done.stderr
