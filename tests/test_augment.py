"""Batch augmentation: shapes, ranges and odd sizes kept; both samplers agree; mixed labels add up."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from pipeline.core.config import AugmentConfig
from pipeline.data import augment

OFF = AugmentConfig(
    flip=False, brightness=0.0, contrast=0.0, saturation=0.0, rotation=0.0, shear=0.0, zoom=0.0, shift=0.0
)


def _images(n: int, size: int, seed: int = 0) -> tf.Tensor:
    return tf.constant(np.random.default_rng(seed).uniform(0, 255, (n, size, size, 3)).astype(np.float32))


@pytest.fixture(autouse=True)
def _seeded():
    tf.random.set_seed(0)


@pytest.mark.parametrize("size", [31, 32, 331])
def test_default_augmentation_keeps_shape_dtype_and_range(size):
    images = tf.cast(_images(2, size), tf.uint8)
    labels = tf.constant([3, 7])
    out, out_labels = augment.augment_batch(images, labels, AugmentConfig(), num_classes=104)
    assert out.shape == (2, size, size, 3) and out.dtype == tf.float32
    assert float(tf.reduce_min(out)) >= 0.0 and float(tf.reduce_max(out)) <= 255.0
    assert out_labels.numpy().tolist() == [3, 7]  # no mixing: labels untouched


def test_everything_off_is_the_identity():
    images = _images(3, 17)
    out, _ = augment.augment_batch(images, tf.constant([0, 1, 2]), OFF, num_classes=104)
    np.testing.assert_array_equal(out.numpy(), images.numpy())


@pytest.mark.parametrize("xla", [False, True])
@pytest.mark.parametrize("key, axis", [("flip", 2), ("flip_vertical", 1)])
@pytest.mark.parametrize("dtype", [tf.float32, tf.uint8])
def test_flip_alone_mirrors_each_image_or_leaves_it(xla, key, axis, dtype):
    images = tf.cast(_images(16, 9), dtype)
    flips = dataclasses.replace(OFF, **{key: True})
    run = tf.function(
        lambda x: augment.augment_batch(x, tf.zeros([16], tf.int32), flips, 104, xla=xla)[0], jit_compile=xla
    )
    out = run(images).numpy()
    assert out.dtype == np.float32
    images = tf.cast(images, tf.float32)
    mirrored = np.flip(images.numpy(), axis)
    same = [np.allclose(o, i, atol=1e-3) for o, i in zip(out, images.numpy(), strict=True)]
    flipped = [np.allclose(o, m, atol=1e-3) for o, m in zip(out, mirrored, strict=True)]
    assert all(s or f for s, f in zip(same, flipped, strict=True))
    assert any(same) and any(flipped)


@pytest.mark.parametrize("size", [31, 32])
@pytest.mark.parametrize("interpolation", ["bilinear", "nearest"])
@pytest.mark.parametrize("fill_mode", ["reflect", "nearest", "constant"])
def test_gather_sampler_matches_the_projective_transform_op(size, interpolation, fill_mode):
    images = _images(4, size)
    transforms = augment.affine_transforms(4, size, AugmentConfig())
    by_op = augment.transform(images, transforms, interpolation, fill_mode, xla=False)
    compiled = tf.function(
        lambda x, t: augment.transform(x, t, interpolation, fill_mode, xla=True), jit_compile=True
    )
    np.testing.assert_allclose(compiled(images, transforms).numpy(), by_op.numpy(), atol=0.05)


def test_affine_transforms_are_centred_identity_at_zero_magnitude():
    transforms = augment.affine_transforms(2, 331, OFF).numpy()
    np.testing.assert_allclose(transforms, [[1, 0, 0, 0, 1, 0, 0, 0]] * 2, atol=1e-6)


def test_saturation_and_hue_leave_grey_pixels_grey():
    grey = tf.fill([4, 8, 8, 3], 100.0)
    colours = dataclasses.replace(OFF, saturation=0.9, hue=0.5)
    out = augment.colour_jitter(grey, colours).numpy()
    np.testing.assert_allclose(out, 100.0, atol=1e-2)


def test_colour_jitter_changes_colour_and_keeps_range():
    images = _images(8, 16)
    out = augment.colour_jitter(
        images, dataclasses.replace(OFF, brightness=0.5, contrast=0.5, saturation=0.5, hue=0.2)
    )
    assert not np.allclose(out.numpy(), images.numpy())
    assert out.numpy().min() >= 0.0 and out.numpy().max() <= 255.0


def test_random_erasing_covers_at_most_its_area_and_only_when_drawn():
    images = tf.fill([32, 33, 33, 3], 7.0)
    erased = augment.random_erasing(images, probability=1.0, max_area=0.25).numpy()
    share = (erased != 7.0).any(axis=-1).mean(axis=(1, 2))
    assert (share > 0).all() and (share <= 0.25 + 0.05).all()
    untouched = augment.random_erasing(images, probability=0.0, max_area=0.25).numpy()
    np.testing.assert_array_equal(untouched, images.numpy())


def test_grid_mask_drops_a_grid_of_about_ratio_squared():
    images = tf.fill([16, 64, 64, 3], 9.0)
    masked = augment.grid_mask(images, probability=1.0, ratio=0.5).numpy()
    share = (masked == 0.0).all(axis=-1).mean(axis=(1, 2))
    assert (share > 0.1).all() and (share < 0.45).all()  # 0.25 on average; cells are whole pixels


@pytest.mark.parametrize("mode", ["cutmix", "mixup", "both"])
def test_mixed_labels_sum_to_one_and_follow_the_pixels(mode):
    n, classes = 16, 20
    values = np.arange(n, dtype=np.float32) * 10.0  # image i is uniformly 10 * i, of class i
    images = tf.constant(np.broadcast_to(values[:, None, None, None], (n, 15, 15, 3)).copy())
    cutmix, mixup = {"cutmix": (1.0, 0.0), "mixup": (0.0, 1.0), "both": (0.5, 0.5)}[mode]
    aug = dataclasses.replace(OFF, cutmix=cutmix, mixup=mixup, mix_alpha=0.7)
    out, soft = augment.augment_batch(images, tf.range(n), aug, num_classes=classes)
    soft = soft.numpy()
    assert soft.shape == (n, classes)
    np.testing.assert_allclose(soft.sum(axis=1), 1.0, atol=1e-5)
    assert (soft >= 0).all()
    # Each image's mean pixel is the label-weighted mean of its sources' values.
    np.testing.assert_allclose(out.numpy().mean(axis=(1, 2, 3)), soft[:, :n] @ values, rtol=1e-4, atol=1e-2)


def test_beta_draws_have_the_right_moments():
    for alpha in (0.4, 2.0):
        draws = augment.sample_beta(40000, alpha).numpy()
        assert draws.min() >= 0 and draws.max() <= 1
        assert abs(draws.mean() - 0.5) < 0.01
        assert abs(draws.var() - 1 / (4 * (2 * alpha + 1))) < 0.01


def test_the_whole_augmentation_compiles_under_xla():
    aug = AugmentConfig(erasing=0.5, gridmask=0.5, cutmix=0.5, mixup=0.3, mix_alpha=0.4, hue=0.1)
    step = tf.function(lambda x, y: augment.augment_batch(x, y, aug, 104, xla=True), jit_compile=True)
    images, soft = step(tf.cast(_images(4, 33), tf.uint8), tf.constant([1, 2, 3, 4]))
    assert images.shape == (4, 33, 33, 3) and soft.shape == (4, 104)
    assert np.isfinite(images.numpy()).all()
