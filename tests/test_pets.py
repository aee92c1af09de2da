"""The embedded dataset of `dogs-vs-cats-redux-kernels-edition`: Kaggle's layout, real JPEGs."""

from __future__ import annotations

import io
import re
import zipfile

import pandas as pd
import pytest
from PIL import Image

from pipeline.data import synthetic_pets


@pytest.fixture(scope="module")
def pets(tmp_path_factory):
    root = tmp_path_factory.mktemp("pets")
    counts = synthetic_pets.write_dataset(root, {"train": 40, "test": 12}, seed=0)
    return root, counts


def test_the_files_are_laid_out_as_kaggle_serves_them(pets):
    root, counts = pets
    assert counts == {"train": 40, "test": 12}
    assert sorted(p.name for p in root.iterdir()) == ["sample_submission.csv", "test.zip", "train.zip"]
    train = zipfile.ZipFile(root / "train.zip").namelist()
    assert all(re.fullmatch(r"train/(cat|dog)\.\d+\.jpg", name) for name in train)
    for kind in ("cat", "dog"):  # half each, numbered from 0 per kind
        numbers = sorted(int(n.split(".")[1]) for n in train if n.startswith(f"train/{kind}."))
        assert numbers == list(range(20))
    assert zipfile.ZipFile(root / "test.zip").namelist() == [f"test/{n}.jpg" for n in range(1, 13)]
    sample = pd.read_csv(root / "sample_submission.csv")
    assert list(sample.columns) == ["id", "label"] and sample["id"].tolist() == list(range(1, 13))
    assert (sample["label"] == 0.5).all()


def test_every_image_is_a_jpeg_of_its_own_size(pets):
    root, _ = pets
    shapes = set()
    for archive in ("train.zip", "test.zip"):
        with zipfile.ZipFile(root / archive) as members:
            for name in members.namelist():
                image = Image.open(io.BytesIO(members.read(name)))
                assert image.format == "JPEG" and image.mode == "RGB"
                assert min(image.size) >= 150 and max(image.size) <= 320
                shapes.add(image.size)
    assert len(shapes) > 10  # photos of many shapes, as the real ones


def test_the_same_seed_draws_the_same_files(tmp_path):
    for name in ("a", "b"):
        synthetic_pets.write_dataset(tmp_path / name, {"train": 4, "test": 2}, seed=5)
    for file_name in ("train.zip", "test.zip", "sample_submission.csv"):
        assert (tmp_path / "a" / file_name).read_bytes() == (tmp_path / "b" / file_name).read_bytes()
    synthetic_pets.write_dataset(tmp_path / "c", {"train": 4, "test": 2}, seed=6)
    assert (tmp_path / "c" / "train.zip").read_bytes() != (tmp_path / "a" / "train.zip").read_bytes()
