"""`make bench-probe-splits` (benchmarks/bench_probe_splits.py), on tiny fake data: its splits are
bench-realdata's, and its `trio` arms read each image as petals reads the competition
bench-realdata writes. Without both, its figures would not speak for the default. Nothing is
downloaded and no network is built."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import bench_probe_splits, cv_data, realdata, realdata_gaps


def _fake(grouped: bool, sides=(12, 20)) -> realdata.RealSet:
    """180 random images of 3 classes and two sizes (120 dev: the bench's lower bound is 100); with
    `grouped`, 60 groups of 3 rows of one class."""
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(60) % 3, 3)
    groups = np.repeat([f"g{g}" for g in range(60)], 3) if grouped else None
    items = [rng.integers(0, 255, (sides[i % 2],) * 2 + (3,), dtype=np.uint8) for i in range(len(labels))]
    return realdata.made("fake", "image", ["a", "b", "c"], items, labels, groups, 3, ("flip",))


@pytest.mark.parametrize("grouped", [False, True])
def test_each_split_is_the_one_bench_realdata_deals_for_that_seed(grouped):
    data = _fake(grouped)
    everything = data.dev.items + data.test.items
    for seed, dev, test in bench_probe_splits.splits_of(data, 4):
        dealt = realdata_gaps.resplit(data, seed)
        assert [everything[i].tobytes() for i in dev] == [item.tobytes() for item in dealt.dev.items]
        assert [everything[i].tobytes() for i in test] == [item.tobytes() for item in dealt.test.items]


def test_the_trio_reads_each_image_as_petals_reads_the_written_competition(tmp_path):
    """Each arm's pixels are what pipeline/data/file_examples.read_image makes of the file
    bench-realdata writes: at the image's own size now, squared to 192 px before."""
    from pipeline.data.file_examples import read_image

    data = _fake(grouped=False)
    _, download, _ = realdata.write_competition(data, tmp_path / "set")
    train = pd.read_csv(download / "train.csv")
    for row, name in enumerate(train["image_id"][:4]):
        path = download / "train_images" / name
        image = data.dev.items[row]
        petals = np.asarray(read_image(str(path), 260))
        np.testing.assert_array_equal(bench_probe_splits.as_petals_reads(image, 260, None), petals)
        assert cv_data.rgb(image).shape[:2] == _side(path)  # written at its own size
        before = bench_probe_splits.as_petals_reads(image, 260, cv_data.SIZE)
        assert before.shape == petals.shape and not np.array_equal(before, petals)  # the arms differ


def _side(path: Path) -> tuple[int, int]:
    from PIL import Image

    with Image.open(path) as image:
        return image.height, image.width


def test_a_difference_over_splits_is_its_mean_standard_error_and_the_splits_each_side():
    rows = [{"a": 0.9, "b": 0.8}, {"a": 0.8, "b": 0.85}, {"a": 0.7, "b": 0.7}, {"a": 0.95, "b": 0.85}]
    found = bench_probe_splits.difference(rows, "a", "b")
    values = np.array([0.1, -0.05, 0.0, 0.1])
    assert found == {
        "mean": round(values.mean(), 4),
        "se": round(values.std(ddof=1) / 2, 4),
        "ahead": 2,
        "behind": 1,
    }


@pytest.mark.parametrize("grouped", [False, True])
def test_the_fold_mean_arm_averages_five_fits_each_blind_to_its_held_out_fold(grouped, monkeypatch):
    """`trio-folds` predicts as the default does: the mean of FOLDS fits' probabilities, each fit on
    the dev rows outside one fold (whole groups with `grouped`)."""
    from pipeline.modeling import probe

    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(3), 20)
    # pairs of one class; ungrouped, each row its own group, as the bench gives an ungrouped set
    groups = np.array([f"g{i // 2 if grouped else i}" for i in range(len(labels))])
    views = np.stack([np.eye(3)[labels] * 3 + rng.normal(size=(60, 3))] * 2)
    fitted_on = []
    real_fit = probe.fit

    def spy(x, y, g, *args):
        fitted_on.append(set(g))
        return real_fit(x, y, g, *args)

    monkeypatch.setattr(probe, "fit", spy)
    predicted = bench_probe_splits.fold_mean_probe(views, labels, groups, views[0], grouped)
    assert len(fitted_on) == bench_probe_splits.FOLDS
    left_out = [set(groups) - kept for kept in fitted_on]
    assert set().union(*left_out) == set(groups) and sum(map(len, left_out)) == len(set(groups))
    if grouped:  # a group is either in a fit or out of it, whole
        for kept in fitted_on:
            rows = np.isin(groups, list(kept))
            assert set(groups[rows]) == kept and not set(groups[~rows]) & kept
    assert (predicted == labels).mean() > 0.9


def test_the_trio_reads_the_mirror_only_where_an_arm_asks_for_it():
    """`views_of`: the image's features and its mirror's, or the image's alone (a `trio-1`-only run
    on a large set skips half the passes), the first view the same either way."""

    class Columns:  # a stand-in network: each image's left and right halves' mean, so a mirror shows
        def predict_on_batch(self, batch):
            half = batch.shape[2] // 2
            sides = batch[:, :, :half], batch[:, :, half:]
            return np.stack([side.mean(axis=(1, 2, 3)) for side in sides], 1)

    rng = np.random.default_rng(0)
    images = [rng.integers(0, 255, (20, 20, 3), dtype=np.uint8) for _ in range(5)]
    both = bench_probe_splits.views_of(Columns(), images)
    alone = bench_probe_splits.views_of(Columns(), images, mirror=False)
    assert both.shape == (2, 5, 2) and alone.shape == (1, 5, 2)
    np.testing.assert_array_equal(alone[0], both[0])
    np.testing.assert_allclose(both[1], both[0][:, ::-1], rtol=1e-5)  # the mirror swaps the halves
