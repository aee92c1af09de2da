"""Fetching the competitions whose data is files (an image folder, tables): the embedded datasets,
your copy (Kaggle's zip, nested zips, a folder), `/kaggle/input`, and bad input in one line."""

from __future__ import annotations

import json
import re
import zipfile
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from competition import load_spec
from pipeline import cli
from pipeline.core.errors import PetalsError
from pipeline.data import competition_files, embedded
from pipeline.stages.fetch import FetchOptions, fetch
from tests.conftest import error_lines

SMALL = 0.05  # of each embedded dataset's default size: 50 pets, 100 reviews, 60 pairs to train on


def _options(tmp_path, **overrides) -> FetchOptions:
    base = FetchOptions(
        source="synthetic",
        data_dir=tmp_path / "data",
        kaggle_input=tmp_path / "no-kaggle-input",
        scale=SMALL,
        progress=False,
        retries=1,
    )
    return replace(base, **overrides)


@pytest.fixture(scope="module")
def kaggle_copies(tmp_path_factory) -> dict[str, Path]:
    """Each competition's embedded dataset as its Kaggle download holds it (inner zips kept)."""
    root = tmp_path_factory.mktemp("downloads")
    copies = {}
    for name in embedded.BY_COMPETITION:
        copies[name] = root / name
        embedded.draw(load_spec(name), copies[name], size=0, seed=1, scale=SMALL)
    return copies


def _download_zip(folder: Path, archive: Path) -> Path:
    """The competition's zip as the Kaggle API serves it: its files at the top level."""
    with zipfile.ZipFile(archive, "w") as opened:
        for path in sorted(folder.iterdir()):
            opened.write(path, path.name)
    return archive


@pytest.mark.parametrize("name", sorted(embedded.BY_COMPETITION))
def test_the_embedded_dataset_is_fetched_unpacked_and_verified(tmp_path, name):
    spec = load_spec(name)
    manifest = fetch(_options(tmp_path), spec)
    data = tmp_path / "data"
    assert manifest["competition"] == name and manifest["source"] == "synthetic"
    assert manifest["synthetic"] == {"seed": 0, "scale": SMALL} and "sizes" not in manifest
    assert json.loads((data / "manifest.json").read_text()) == manifest
    assert set(manifest["splits"]) == set(spec.splits)
    assert not list(data.glob("*.zip"))  # every split unpacked, the zips gone
    assert manifest["splits"] == competition_files.verify(data, spec)
    assert manifest["fingerprint"] == competition_files.fingerprint(data, spec)
    again = fetch(_options(tmp_path), spec)  # a second fetch finds it and does nothing
    assert again == manifest


def test_the_competitions_zip_with_zips_inside_is_unpacked(tmp_path, kaggle_copies):
    """word2vec-nlp-tutorial's download holds each table zipped again."""
    spec = load_spec("imdb")
    download = _download_zip(kaggle_copies["imdb"], tmp_path / "word2vec-nlp-tutorial.zip")
    with zipfile.ZipFile(download) as opened:
        assert "labeledTrainData.tsv.zip" in opened.namelist()
    manifest = fetch(_options(tmp_path, source="dir", data_from=download), spec)
    data = tmp_path / "data"
    assert sorted(p.name for p in data.iterdir()) == [
        "labeledTrainData.tsv", "manifest.json", "sampleSubmission.csv", "testData.tsv",
    ]  # fmt: skip
    assert manifest["splits"] == {"train": {"rows": 100}, "test": {"rows": 100}}
    assert manifest["origin"] == str(download) and download.is_file()  # your zip is kept


def test_an_image_folder_from_your_unpacked_copy_or_kaggle_input(tmp_path, kaggle_copies):
    spec = load_spec("dogs-vs-cats")
    copy = tmp_path / "mine"
    copy.mkdir()
    for archive in kaggle_copies["dogs-vs-cats"].glob("*.zip"):  # train/ and test/ unpacked by hand
        with zipfile.ZipFile(archive) as opened:
            opened.extractall(copy)
    (copy / "sample_submission.csv").write_bytes(
        (kaggle_copies["dogs-vs-cats"] / "sample_submission.csv").read_bytes()
    )
    manifest = fetch(_options(tmp_path, source="auto", data_from=copy), spec)
    assert manifest["source"] == "dir" and manifest["splits"] == {
        "train": {"images": 50},
        "test": {"images": 25},
    }
    assert sorted(p.name for p in (tmp_path / "data" / "train").iterdir())[:2] == ["cat.0.jpg", "cat.1.jpg"]

    attached = tmp_path / "input" / "competitions" / "dogs-vs-cats-redux-kernels-edition"
    attached.parent.mkdir(parents=True)
    attached.symlink_to(kaggle_copies["dogs-vs-cats"])  # read-only there: train.zip is unpacked here
    inside = fetch(
        _options(tmp_path, source="auto", data_dir=tmp_path / "k", kaggle_input=tmp_path / "input"), spec
    )
    assert inside["source"] == "kaggle-input" and inside["splits"] == manifest["splits"]
    assert (kaggle_copies["dogs-vs-cats"] / "train.zip").is_file()  # the input is left as it was


def _fetch_copy(capsys, name: str, copy: Path, data: Path) -> tuple[int, list[str]]:
    """`petals fetch` of your copy, in this process: its exit code and its error lines."""
    args = ["--competition", name, "--source", "dir", "--from", str(copy), "--data-dir", str(data)]
    code = cli.main(["fetch", "--no-progress", *args])
    return code, error_lines(capsys.readouterr().err)


def _damaged(tmp_path, copies, name: str, damage) -> Path:
    copy = tmp_path / "copy"
    for path in copies[name].iterdir():
        if path.suffix == ".zip":
            with zipfile.ZipFile(path) as opened:
                opened.extractall(copy)
        else:
            copy.mkdir(exist_ok=True)
            (copy / path.name).write_bytes(path.read_bytes())
    damage(copy)
    return copy


def _corrupt_jpeg(copy: Path) -> None:
    (copy / "train" / "dog.3.jpg").write_bytes(b"GIF89a not a jpeg")


def _unknown_label(copy: Path) -> None:
    (copy / "train" / "dog.3.jpg").rename(copy / "train" / "horse.3.jpg")


def _stray_file(copy: Path) -> None:
    (copy / "test" / "notes.txt").write_text("a stray file")


def _garbled_review(copy: Path) -> None:
    path = copy / "labeledTrainData.tsv"
    lines = path.read_text().splitlines()
    lines[2] = lines[2].replace('\\"', '"', 1) if '\\"' in lines[2] else lines[2][:-1]  # an unescaped quote
    path.write_text("\n".join(lines) + "\n")


def _missing_column(copy: Path) -> None:
    path = copy / "train.csv"
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    frame.drop(columns="hypothesis").to_csv(path, index=False)


def _label_outside(copy: Path) -> None:
    path = copy / "train.csv"
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    frame.loc[4, "label"] = "3"
    frame.to_csv(path, index=False)


@pytest.mark.parametrize(
    ("name", "damage", "message"),
    [
        ("dogs-vs-cats", _corrupt_jpeg, r"train/dog\.3\.jpg: not a JPEG$"),
        ("dogs-vs-cats", _unknown_label, r"train/horse\.3\.jpg: label 'horse' is not a class \(cat, dog\)$"),
        ("dogs-vs-cats", _stray_file, r"test/notes\.txt: not a test image name \(test/\{id\}\.jpg\)$"),
        ("imdb", _garbled_review, r"labeledTrainData\.tsv: "),
        ("watson", _missing_column, r"train\.csv: no column 'hypothesis'"),
        ("watson", _label_outside, r"train\.csv: line 6: label '3' is not a class id \(0 to 2\)$"),
    ],
)
def test_bad_files_are_one_line_exit_2_and_nothing_is_written(
    tmp_path, kaggle_copies, capsys, name, damage, message
):
    copy = _damaged(tmp_path, kaggle_copies, name, damage)
    data = tmp_path / "data"
    code, lines = _fetch_copy(capsys, name, copy, data)
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("petals fetch: error: ") and re.search(message, lines[0]), lines[0]
    assert not data.exists() and not data.with_name("data.partial").exists()


def test_a_copy_without_the_competitions_files_is_named(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    code, lines = _fetch_copy(capsys, "dogs-vs-cats", empty, tmp_path / "d")
    wanted = "no folder in it holds train.zip, test.zip and sample_submission.csv"
    assert code == 2 and lines == [f"petals fetch: error: --from {empty}: {wanted}"]


def test_a_data_dir_of_another_competition_is_not_reused(tmp_path):
    fetch(_options(tmp_path), load_spec("watson"))
    with pytest.raises(PetalsError, match="holds the data of competition watson, not imdb"):
        fetch(_options(tmp_path), load_spec("imdb"))
