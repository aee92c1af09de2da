"""The backbone registry: every entry builds and predicts; weights are resolved or refused in one line."""

from __future__ import annotations

import dataclasses
import re
import warnings

import keras
import numpy as np
import pytest

from pipeline import networks
from pipeline.core import config
from pipeline.core.errors import PetalsError
from pipeline.networks import registry
from pipeline.tasks import recipe_config
from pipeline.tasks.competitions import check_network, load_competition, task_of


def test_the_registry_lists_what_the_recipes_need():
    names = registry.list_backbones()
    for required in ("cnn", "efficientnet-b0", "efficientnet-b7", "keras-efficientnet-b7", "densenet201"):
        assert required in names
    assert registry.list_backbones("efficientnet-b*") == [f"efficientnet-b{i}" for i in range(8)]
    assert "keras-efficientnetv2-s" in registry.list_backbones("*v2*")


def _larger_sibling(name: str) -> bool:
    """A scaled-up member of a family whose smallest member `make test` builds (B1-B7, V2-B1..L,
    ConvNeXt Small..XLarge): built in the heavy tier, where the whole registry is swept."""
    larger = (
        r"(keras-)?efficientnet-b[1-7]|keras-efficientnetv2-(b[1-3]|s|m|l)|convnext-(small|base|large|xlarge)"
        r"|efficientnet-lite-trio(-taps)?"  # built with its weights in tests/test_lite.py
    )
    return re.fullmatch(larger, name) is not None


# The backbones the shipped CPU and GPU recipes build (`RECIPE=auto` on a first run) and the
# default's: `make test` builds them (flowers' GPU recipe's EfficientNetV2-S, a larger sibling here,
# in the shipped-recipe sweep below); each family's other smallest members are the thorough tier's.
FIRST_RUN_BACKBONES = ("cnn", "efficientnet-lite0", "keras-efficientnet-b0")


def _in_its_tier(name: str):
    if _larger_sibling(name):
        return pytest.param(name, marks=pytest.mark.heavy)
    return name if name in FIRST_RUN_BACKBONES else pytest.param(name, marks=pytest.mark.thorough)


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    [_in_its_tier(n) for n in registry.list_backbones()],
)
def test_every_backbone_builds_headless_and_gives_finite_probabilities_under_the_task(name):
    backbone = registry.get_backbone(name)
    size = max(32, backbone.min_size)
    net = registry.build_classifier(name, size, num_classes=7, weights="none", dropout=0.1)
    assert net.layers[-1].name == "logits"  # headless: the task puts its activation on
    pixels = np.random.default_rng(0).integers(0, 256, (2, size, size, 3), dtype=np.uint8)
    logits = np.asarray(net(pixels, training=False))
    probabilities = np.asarray(networks.with_output(net, "softmax")(pixels, training=False))
    np.testing.assert_allclose(probabilities, np.asarray(keras.ops.softmax(logits)), rtol=1e-5, atol=1e-6)
    assert probabilities.shape == (2, 7) and probabilities.dtype == np.float32
    assert np.isfinite(probabilities).all()
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)


def test_an_unknown_backbone_suggests_close_names():
    with pytest.raises(
        PetalsError, match=r"unknown backbone 'efficientnet-b9' \(did you mean: efficientnet-b0"
    ):
        registry.get_backbone("efficientnet-b9")


def test_weights_a_backbone_does_not_have_are_refused():
    with pytest.raises(PetalsError, match="backbone cnn has no 'imagenet' weights"):
        registry.build_classifier("cnn", 32, 5, weights="imagenet")
    with pytest.raises(PetalsError, match="backbone densenet201 has no 'noisy-student' weights"):
        registry.build_classifier("densenet201", 32, 5, weights="noisy-student")
    with pytest.raises(PetalsError, match=r"model\.weights='/no/such\.h5': not one of imagenet"):
        registry.build_classifier("cnn", 32, 5, weights="/no/such.h5")


def test_offline_pretrained_weights_say_how_to_pass_a_local_file(monkeypatch):
    def offline(*args, **kwargs):
        raise Exception("URL fetch failure on https://example/weights.h5: None -- [Errno -3] name resolution")

    monkeypatch.setattr("keras.utils.get_file", offline)
    monkeypatch.setattr("keras.src.utils.file_utils.get_file", offline)
    with pytest.raises(
        PetalsError, match=r"could not get imagenet weights for resnet50 .*--set model.weights="
    ):
        registry.build_classifier("resnet50", 32, 5, weights="imagenet")


@pytest.mark.slow  # builds two networks
def test_a_local_weights_file_loads_and_a_misfit_one_is_named(tmp_path):
    source = registry.build_classifier("cnn", 32, 5)
    backbone = source.get_layer("backbone")
    good = tmp_path / "cnn.weights.h5"
    backbone.save_weights(good)
    rebuilt = registry.build_classifier("cnn", 32, 5, weights=str(good))
    for a, b in zip(backbone.weights, rebuilt.get_layer("backbone").weights, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    other = tmp_path / "other.weights.h5"
    registry.build_classifier("efficientnet-b0", 32, 5).get_layer("backbone").save_weights(other)
    with (
        warnings.catch_warnings(record=True) as caught,
        pytest.raises(PetalsError, match=f"{other}: does not fit backbone cnn"),
    ):
        warnings.simplefilter("always")
        registry.build_classifier("cnn", 32, 5, weights=str(other))
    # Keras's own warnings about the parts it skipped stay out: petals' line says it
    assert not [w for w in caught if "Skipping" in str(w.message)], [str(w.message)[:80] for w in caught]


def test_the_cnn_reads_every_pixel_of_192_px_at_the_cost_of_64_px():
    def pooled_maps(size):
        backbone = registry.build_classifier("cnn", size, 5).get_layer("backbone")
        maps = [
            tuple(layer.output.shape[1:])
            for layer in backbone.layers
            if isinstance(layer, keras.layers.MaxPooling2D)
        ]
        return maps, backbone

    small, _ = pooled_maps(64)
    large, backbone = pooled_maps(192)
    assert small == large == [(32, 32, 32), (16, 16, 64), (8, 8, 128)]
    stem = next(layer for layer in backbone.layers if isinstance(layer, keras.layers.Conv2D))
    assert stem.strides == (3, 3) and stem.kernel_size == (5, 5)  # wider than its stride: no pixel skipped


def test_the_cnn_finds_a_flower_wherever_it_is():
    backbone = registry.build_classifier("cnn", 192, 5).get_layer("backbone")
    images = np.zeros((3, 192, 192, 3), np.float32)
    patch = np.random.default_rng(0).uniform(0, 1, (24, 24, 3))
    images[1, 48:72, 48:72] = patch
    images[2, 120:144, 120:144] = patch  # moved 72 px: a whole number of the blocks' 24 px steps
    empty, here, there = np.asarray(backbone(images, training=False))
    assert np.abs(here - empty).max() > 1e-3  # the patch shows in the features...
    np.testing.assert_allclose(here, there, rtol=1e-4, atol=1e-5)  # ...wherever it is


def _on_a_named_preset(competition: str, recipe: str) -> bool:
    """A recipe whose weights are a keras-hub preset by name (a download here): its family builds,
    trains and predicts from a tiny preset, and the recipe attaches its preset and passes the kernel
    checks, in tests/test_keras_hub.py."""
    from pipeline.kernels.client.recipe_check import preset_model

    loaded = recipe_config.load_config(recipe, [f"competition={competition}"])
    return loaded.model.backbone != "bert" and preset_model(loaded) is not None


SHIPPED = [
    (competition, recipe)
    for competition in ("flowers", "dogs-vs-cats", "imdb", "watson")
    for recipe in recipe_config.recipe_names(load_competition(competition))
    if recipe != config.DEFAULT_RECIPE and not _on_a_named_preset(competition, recipe)
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("competition", "recipe"),
    [pytest.param(*r, marks=pytest.mark.thorough) if r[1] in ("tpu", "densenet201") else r for r in SHIPPED],
)  # the TPU recipes (checked by the kernel's recipe checks too) and DenseNet: the thorough tier
def test_every_shipped_recipe_loads_and_builds_its_model(competition, recipe, tmp_path):
    """Each competition's recipes validate, name a network for its inputs that builds on the
    backends they will meet, and build it (tiny input, random weights; a recipe that loads a
    BERT preset gets a tiny one)."""
    from competition import load_spec
    from pipeline.networks import bert

    loaded = recipe_config.load_config(recipe, [f"competition={competition}"])
    spec = load_spec(competition)
    assert loaded.recipe == recipe and loaded.competition == competition
    if loaded.model.backbone == bert.PRESET:
        with pytest.raises(PetalsError, match=r"loads a keras-hub preset directory"):
            check_network(loaded, spec, "jax")  # no such folder here: one line, the way out
        preset = bert.write_tiny_preset(tmp_path / "preset", [*bert.SPECIAL_TOKENS, "a", "b"], 16)
        weights = dataclasses.replace(loaded.model, weights=str(preset))
        loaded = dataclasses.replace(loaded, model=weights)
    for backend in ("tensorflow", "jax") if recipe == "tpu" else ("tensorflow",):
        check_network(loaded, spec, backend)  # today's TPUs run JAX: the TPU recipes must build there
    if task_of(spec).modality == "text":
        small = dataclasses.replace(loaded, data=dataclasses.replace(loaded.data, sequence_length=16))
        net = networks.build(small, spec, activation=task_of(spec).activation, vocabulary_size=7)
        inputs = np.random.default_rng(0).integers(0, 7, (2, 16), dtype=np.int32)
        if loaded.model.backbone in bert.NAMES:  # token ids, segment ids, padding mask
            inputs = {"token_ids": inputs, "segment_ids": 0 * inputs, "padding_mask": 1 + 0 * inputs}
    else:
        backbone = registry.get_backbone(loaded.model.backbone)
        assert loaded.model.weights in ("none", *backbone.weights)
        size = max(32, backbone.min_size)
        net = registry.build_classifier(
            loaded.model.backbone, size, spec.num_classes, weights="none", dropout=loaded.model.dropout
        )
        net = networks.with_output(net, task_of(spec).activation)
        inputs = np.random.default_rng(0).integers(0, 256, (2, size, size, 3), dtype=np.uint8)
    probabilities = np.asarray(net(inputs, training=False))
    assert probabilities.shape == (2, spec.num_classes) and np.isfinite(probabilities).all()
