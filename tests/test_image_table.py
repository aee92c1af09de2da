"""An image and its row's numeric columns (`input = "image_table"`): the network takes both by name,
standardises the columns by the training rows' statistics kept with its weights, augmentation
changes the pixels alone, the feature cache's cut keeps the columns above it, and what cannot
serve is refused in one line."""

from __future__ import annotations

import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf

from competition import load_spec
from pipeline.core.config import AugmentConfig, Config
from pipeline.core.errors import PetalsError
from pipeline.networks import columns, registry, with_output

SIZE = 32


def _net(count: int = 3):
    return with_output(
        columns.with_columns(registry.build_classifier("cnn", SIZE, 2, input_dtype="float32"), count),
        "linear",  # the logits themselves: an untrained softmax saturates on random pixels
    )


def _inputs(rows: int = 4, count: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    return {
        "image": rng.uniform(0, 255, (rows, SIZE, SIZE, 3)).astype(np.float32),
        "columns": rng.normal(5, 3, (rows, count)).astype(np.float32),
    }


def test_the_columns_are_standardised_by_the_training_rows_and_kept_with_the_weights(tmp_path):
    net = _net()
    train = np.array([[0.0, 10.0, 1.0], [2.0, 30.0, 1.0]], np.float32)  # a constant column too
    columns.fit_scale(net, train)
    scale = net.get_layer(columns.COLUMNS_SCALE)
    assert np.allclose(np.ravel(scale(train)), [-1, -1, 0, 1, 1, 0])  # (x - mean) / std, 0 for a constant
    x = _inputs()
    before = np.asarray(net(x))
    net.save_weights(tmp_path / "w.weights.h5")
    again = _net()
    again.load_weights(tmp_path / "w.weights.h5")  # an untrained scale until the weights load
    assert np.allclose(np.asarray(again(x)), before, atol=1e-6)
    changed = dict(x, columns=x["columns"] + 1.0)
    assert not np.allclose(np.asarray(net(changed)), before)  # the head reads the columns


@pytest.mark.parametrize(("unfrozen", "train_backbone"), [(0, False), (4, True)])
def test_the_feature_caches_cut_is_the_whole_network_with_the_columns_above_it(unfrozen, train_backbone):
    from pipeline.modeling import network_cut

    net = _net()
    cut = network_cut.cut(net, unfrozen, train_backbone)
    assert cut.bottom.input.shape[1:] == (SIZE, SIZE, 3)  # pixels alone below the cut
    x = _inputs()
    above = cut.top({"image": np.asarray(cut.bottom(x["image"])), "columns": x["columns"]})
    assert np.allclose(np.asarray(above), np.asarray(net(x)), atol=1e-5)
    head = {id(w) for w in net.get_layer("logits").trainable_weights}
    assert head <= {id(w) for w in cut.top.trainable_weights}  # training the top trains the net's head


def test_cached_rows_meet_their_own_columns_in_every_batch():
    from pipeline.modeling.features import FeatureSplit

    rows = 12
    activations = np.broadcast_to(np.arange(rows, dtype=np.float16)[None, :, None], (2, rows, 3)).copy()
    split = FeatureSplit(
        activations,
        np.arange(rows, dtype=np.int64) % 2,
        2,
        ids=np.array([f"r{k}" for k in range(rows)]),
        columns=np.arange(rows, dtype=np.float32)[:, None] * 10,
    )
    config = Config()
    inputs, labels = next(iter(split.train_dataset(config, 4)))
    assert np.allclose(inputs["columns"][:, 0], inputs["image"][:, 0] * 10)  # shuffled together
    assert np.array_equal(labels.numpy(), inputs["image"].numpy()[:, 0].astype(int) % 2)
    val = [batch for batch in split.eval_dataset(config, 5, labeled=True, pad_to_batch=True)]
    assert [tuple(b[0]["columns"].shape) for b in val] == [(5, 1), (5, 1), (5, 1)]  # the last padded


def test_augmentation_changes_the_pixels_alone():
    from pipeline.data import augment

    x = _inputs()
    aug = AugmentConfig(brightness=0.5, zoom=0.2, rotation=10.0)
    out, _ = augment.augment_inputs(
        {k: tf.constant(v) for k, v in x.items()}, tf.zeros([4], tf.int32), aug, num_classes=2
    )
    assert np.array_equal(out["columns"].numpy(), x["columns"])
    assert not np.allclose(out["image"].numpy(), x["image"])


def test_a_mixing_augmentation_is_refused_for_an_image_table():
    from pipeline.tasks import get_task

    spec = load_spec("petfinder-pawpularity")
    config = dataclasses.replace(Config(), model=dataclasses.replace(Config().model, backbone="cnn"))
    task = get_task("image_table_regression")
    task.check_network(config, spec, "tensorflow")  # as it is: served
    mixing = dataclasses.replace(config, augment=dataclasses.replace(config.augment, mixup=0.2))
    with pytest.raises(PetalsError, match=r"augment.mixup=0.2 mixes two images under one row's"):
        task.check_network(mixing, spec, "tensorflow")


def test_an_unlabelled_split_naming_no_table_is_refused_in_one_line(tmp_path):
    from competition.spec import SPEC_DIR
    from pipeline.formats.base import format_of

    text = (SPEC_DIR / "petfinder-pawpularity" / "competition.toml").read_text()
    path = tmp_path / "paw.toml"
    path.write_text(text.replace('table = "test.csv"', ""))
    spec = load_spec(str(path))
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "a.jpg").write_bytes(b"")
    with pytest.raises(PetalsError, match=r"\[data\.image_csv\.test\] names no table") as err:
        format_of(spec).examples(tmp_path, spec, "test")
    assert "\n" not in str(err.value)


def test_keras_takes_the_two_inputs_by_name():
    net = _net()
    assert isinstance(net.input, dict) and set(net.input) == {"image", "columns"}
    assert keras.tree.map_structure(lambda t: t.shape, net.input)["columns"] == (None, 3)
