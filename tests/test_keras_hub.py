"""keras-hub's families by name: each loads from a preset folder written here by keras-hub's own
`save_to_preset` (tiny random configs, tests/keras_hub_tiny.py), trains a step and predicts through
petals' registry; its preprocessing is its preset's converter; its handles are keras-hub's and
Kaggle's format; a kernel attaches them; every keras-hub backbone is wired or left out with a reason.
Nothing is downloaded."""

from __future__ import annotations

import importlib
import pkgutil

import keras
import numpy as np
import pytest

from competition import load_spec
from pipeline import networks
from pipeline.core.errors import PetalsError
from pipeline.kernels.client.metadata import MODEL_SOURCE
from pipeline.kernels.client.recipe_check import check_recipe, preset_model
from pipeline.networks import keras_hub_text, keras_hub_vision
from pipeline.tasks.recipe_config import load_config
from tests.conftest import competition_of
from tests.keras_hub_tiny import SIZE, write_vision_preset

keras_hub = pytest.importorskip("keras_hub")

VISION = list(keras_hub_vision.BACKBONES)
TEXT = list(keras_hub_text.NETWORKS)
# Per channel, as no family's own values are: a converter misread (scale for offset, one channel for
# another) shows.
SCALE, OFFSET = [1 / 255, 2 / 255, 0.5 / 255], [-0.5, -1.0, 0.25]
VOCABULARY = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "a", "dog", "ran"]
LENGTH = 16  # tokens


@pytest.fixture(scope="module")
def presets(tmp_path_factory):
    """{entry name: a tiny random preset folder of its family}, written once for the module."""
    root = tmp_path_factory.mktemp("presets")
    keras.utils.set_random_seed(0)
    written = {
        name: write_vision_preset(e, root / name, SCALE, OFFSET)
        for name, e in keras_hub_vision.BACKBONES.items()
    }
    for name, entry in keras_hub_text.NETWORKS.items():
        kwargs = {"vocabulary_size": len(VOCABULARY), "num_layers": 1, "num_heads": 2, "hidden_dim": 16,
                  "intermediate_dim": 32, "max_sequence_length": LENGTH}  # fmt: skip
        if entry.family == "Albert":
            kwargs["embedding_dim"] = 8
        getattr(keras_hub.models, f"{entry.family}Backbone")(**kwargs).save_to_preset(str(root / name))
        written[name] = root / name
    # DistilBERT's WordPiece runs here without tensorflow-text: its preset carries its tokenizer.
    keras_hub.models.DistilBertTokenizer(vocabulary=VOCABULARY).save_to_preset(str(root / "distil-bert"))
    return written


def _pixels(size=SIZE, n=2):
    return np.random.default_rng(0).integers(0, 256, (n, size, size, 3)).astype("uint8")


def _one_step_then_predict(net, x, y):
    # networks.build puts the task's softmax on: probabilities, not logits.
    net.compile(optimizer=keras.optimizers.SGD(0.01), loss=keras.losses.SparseCategoricalCrossentropy())
    history = net.fit(x, y, batch_size=2, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    return np.asarray(net.predict(x, verbose=0))


def test_every_keras_hub_backbone_is_wired_or_left_out_with_a_reason():
    families = {n.removesuffix("Backbone") for n in dir(keras_hub.models) if n.endswith("Backbone")}
    wired = {e.family for e in [*keras_hub_vision.BACKBONES.values(), *keras_hub_text.NETWORKS.values()]}
    wired.add("Bert")  # pipeline/networks/bert.py
    unaccounted = families - wired - set(keras_hub_vision.LEFT_OUT)
    assert not unaccounted, f"keras-hub backbones neither wired nor in LEFT_OUT: {sorted(unaccounted)}"
    assert not wired & set(keras_hub_vision.LEFT_OUT)
    assert set(keras_hub_vision.LEFT_OUT) <= families  # no stale name
    assert all(len(reason) >= 5 for reason in keras_hub_vision.LEFT_OUT.values())  # "audio" at least
    # Every vision family with an ImageClassifier task in keras-hub is wired, but SegFormer's MiT.
    tasks = {
        n.removesuffix("ImageClassifier") for n in dir(keras_hub.models) if n.endswith("ImageClassifier")
    }
    assert tasks - wired == {"", "MiT"}


def _keras_hub_handles() -> dict[str, str]:
    """{preset: handle} from keras-hub's own preset tables (keras_hub/src/models/*/*_presets.py)."""
    import keras_hub.src.models as models

    handles = {}
    for package in pkgutil.iter_modules(models.__path__):
        for module in pkgutil.iter_modules([f"{models.__path__[0]}/{package.name}"]):
            if module.name.endswith("_presets"):
                table = importlib.import_module(f"keras_hub.src.models.{package.name}.{module.name}")
                for preset, spec in getattr(table, "backbone_presets", {}).items():
                    handles[preset] = spec["kaggle_handle"].removeprefix("kaggle://")
    return handles


def test_each_presets_handle_is_keras_hubs_own_in_kaggles_format():
    theirs = _keras_hub_handles()
    for entry in [*keras_hub_vision.BACKBONES.values(), *keras_hub_text.NETWORKS.values()]:
        assert entry.handles or entry.packaged, entry.name  # sentence-bert: a wheel, no Kaggle model
        for preset, handle in entry.handles.items():
            assert handle == theirs[preset], (entry.name, preset)
            assert MODEL_SOURCE.fullmatch(handle), handle  # owner/model/framework/variation/version
            owner, _, framework, variation, _ = handle.split("/")
            # The variation is the preset itself: not the efficientnet_el/em/es trap (b1_ft's handle).
            assert (owner, framework, variation) == ("keras", "keras", preset), handle
    assert theirs["efficientnet_el_ra_imagenet"].split("/")[3] != "efficientnet_el_ra_imagenet"
    assert "efficientnet_el_ra_imagenet" not in keras_hub_vision.BACKBONES["hub-efficientnet"].handles


@pytest.mark.parametrize("name", VISION)
@pytest.mark.slow  # builds a keras-hub network from each preset (their folders written once, about 12 s)
def test_the_preprocessing_is_the_presets_own_converter(name, presets):
    entry = keras_hub_vision.BACKBONES[name]
    config = load_config(overrides=[f"data.image_size={SIZE}", f"model.backbone={name}",
                                    f"model.weights={presets[name]}"])  # fmt: skip
    net = entry.build_classifier(config, 3, weights=str(presets[name]))
    converter = getattr(keras_hub.layers, f"{entry.family}ImageConverter").from_preset(str(presets[name]))
    pixels = _pixels().astype("float32")
    ours = np.asarray(net.get_layer("converter_scaling")(pixels))
    np.testing.assert_allclose(ours, np.asarray(converter(pixels)), rtol=1e-5, atol=1e-5)
    assert net.get_layer("backbone").name == "backbone" and net.layers[-1].name == "logits"


@pytest.mark.slow  # builds a keras-hub network from each preset (their folders written once, about 12 s)
def test_a_family_that_fixes_its_size_resizes_as_its_converter_does(presets):
    entry = keras_hub_vision.BACKBONES["vit"]
    config = load_config(overrides=["data.image_size=48", "model.backbone=vit"])
    net = entry.build_classifier(config, 3, weights=str(presets["vit"]))
    converter = keras_hub.layers.ViTImageConverter.from_preset(str(presets["vit"]))
    pixels = _pixels(48).astype("float32")
    ours = net.get_layer("converter_scaling")(net.get_layer("to_native_size")(pixels))
    np.testing.assert_allclose(np.asarray(ours), np.asarray(converter(pixels)), rtol=1e-4, atol=1e-4)
    assert net(pixels).shape == (2, 3)
    # A convnet takes any size: no resizing, the pipeline's resolution reaches it.
    convnet = keras_hub_vision.BACKBONES["hub-resnet"].build_classifier(
        config, 3, weights=str(presets["hub-resnet"])
    )
    assert "to_native_size" not in [layer.name for layer in convnet.layers]


@pytest.mark.slow  # about 2-6 s a family
# `make test` trains one family's step (VGG, the cheapest); the others are the thorough tier's.
@pytest.mark.parametrize(
    "name", [n if n == "vgg" else pytest.param(n, marks=pytest.mark.thorough) for n in VISION]
)
def test_each_vision_family_trains_a_step_and_predicts_from_its_preset_and_from_its_run(
    name, presets, tmp_path
):
    config = load_config(overrides=[f"data.image_size={SIZE}", f"model.backbone={name}",
                                    f"model.weights={presets[name]}"])  # fmt: skip
    spec = load_spec("flowers")
    net = networks.build(
        config, spec, activation="softmax", weights=config.model.weights, input_dtype="uint8"
    )
    x, y = _pixels(), np.array([0, 1])
    probabilities = _one_step_then_predict(net, x, y)
    assert probabilities.shape == (2, spec.num_classes)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)
    # The run keeps the architecture: inference rebuilds it without the preset.
    networks.keep_architecture(config, net, tmp_path)
    again = networks.build(config, spec, activation="softmax", run_dir=tmp_path, input_dtype="uint8")
    again.set_weights(net.get_weights())
    np.testing.assert_allclose(np.asarray(again.predict(x, verbose=0)), probabilities, atol=1e-5)
    assert networks.has_backbone(net)


@pytest.mark.slow  # about 2-3 s a family
# `make test` trains DistilBERT's (its own tokenizer too); the others are the thorough tier's.
@pytest.mark.parametrize(
    "name", [n if n == "distil-bert" else pytest.param(n, marks=pytest.mark.thorough) for n in TEXT]
)
def test_each_text_family_trains_a_step_on_pairs_and_predicts(name, presets, tmp_path):
    entry = keras_hub_text.NETWORKS[name]
    config = load_config(overrides=["competition=watson", f"data.sequence_length={LENGTH}",
                                    f"model.backbone={name}", f"model.weights={presets[name]}"])  # fmt: skip
    spec = load_spec("watson")
    premises, hypotheses = np.array(["the cat sat", "a dog ran"]), np.array(["a cat", "the dog"])
    if name == "distil-bert":  # its own tokenizer, from the preset: [CLS] a [SEP] b [SEP]
        inputs = networks.text_inputs(config, tmp_path, (premises, hypotheses))
        x = inputs.encode((premises, hypotheses))
        assert x["token_ids"][0][:8].tolist() == [2, 5, 6, 7, 3, 8, 6, 3]
        vocabulary = inputs.vocabulary_size
    else:  # ids given: their tokenizers from real texts in tests/test_keras_hub_tokenizers.py
        x = {n: np.ones((2, LENGTH), "int32") for n in entry.inputs}
        vocabulary = len(VOCABULARY)
    assert set(x) == set(entry.inputs)
    net = networks.build(config, spec, activation="softmax", vocabulary_size=vocabulary, batch_size=2)
    probabilities = _one_step_then_predict(net, x, np.array([0, 2]))
    assert probabilities.shape == (2, spec.num_classes)
    networks.keep_architecture(config, net, tmp_path)
    again = networks.build(config, spec, activation="softmax", vocabulary_size=vocabulary, run_dir=tmp_path)
    again.set_weights(net.get_weights())
    np.testing.assert_allclose(np.asarray(again.predict(x, verbose=0)), probabilities, atol=1e-5)


@pytest.mark.slow  # builds a keras-hub network from each preset (their folders written once, about 12 s)
def test_a_preset_named_by_name_is_found_where_kaggle_mounts_it_and_never_downloaded(presets, tmp_path):
    import shutil

    entry = keras_hub_vision.BACKBONES["dinov2"]
    root = tmp_path / "input"
    with pytest.raises(
        PetalsError, match=r"the Kaggle model keras/dinov2/keras/dinov2_small/1 is not attached"
    ):
        keras_hub_vision.preset_folder(entry, "dinov2_small", root)
    # Another family's preset attached is not taken for it.
    shutil.copytree(presets["vit"], root / "vit_base" / "keras" / "vit_base_patch16_224_imagenet" / "4")
    with pytest.raises(PetalsError, match="not attached"):
        keras_hub_vision.preset_folder(entry, "dinov2_small", root)
    # 2026's layout, models/<owner>/<model>/<framework>/<variation>/<version>, and the older one, found.
    for mount in ("models/keras/dinov2/keras/dinov2_small/1", "dinov2/keras/dinov2_small/1"):
        shutil.rmtree(root / "models", ignore_errors=True)
        shutil.rmtree(root / "dinov2", ignore_errors=True)
        shutil.copytree(presets["dinov2"], root / mount)
        assert keras_hub_vision.preset_folder(entry, "dinov2_small", root) == root / mount
    # Two presets of the family attached: each found under its own variation.
    shutil.copytree(presets["dinov2"], root / "dinov2/keras/dinov2_base/1")
    assert keras_hub_vision.preset_folder(entry, "dinov2_base", root) == root / "dinov2/keras/dinov2_base/1"
    assert keras_hub_vision.preset_folder(entry, "dinov2_small", root) == root / mount
    with pytest.raises(PetalsError, match=r"loads a keras-hub preset: a folder holding its config.json"):
        keras_hub_vision.preset_folder(entry, str(tmp_path / "nowhere"))
    with pytest.raises(PetalsError, match=r"loads a keras-hub preset"):
        keras_hub_vision.preset_folder(entry, "none")


@pytest.mark.parametrize(
    ("competition", "session", "backbone", "preset", "handle"),
    [
        ("flowers", "tpu", "dinov2", "dinov2_small", "keras/dinov2/keras/dinov2_small/1"),
        ("imdb", "gpu", "deberta-v3", "deberta_v3_small_en", "keras/deberta_v3/keras/deberta_v3_small_en/3"),
        ("watson", "tpu", "xlm-roberta", "xlm_roberta_base_multi",
         "keras/xlm_roberta/keras/xlm_roberta_base_multi/3"),
    ],
)  # fmt: skip
def test_a_recipe_on_a_keras_hub_preset_names_the_kaggle_model_a_kernel_attaches(
    competition, session, backbone, preset, handle
):
    config = load_config(session, [f"competition={competition}", f"model.backbone={backbone}",
                                   f"model.weights={preset}"])  # fmt: skip
    spec = load_spec(competition)
    assert preset_model(config) == handle and MODEL_SOURCE.fullmatch(handle)
    check_recipe(config, spec, session, internet=False, datasets=[handle])
    with pytest.raises(PetalsError, match="no model or dataset is attached to hold it"):
        check_recipe(config, spec, session, internet=False, datasets=[])


@pytest.mark.slow  # generates two kernels (each runs its script's --help)
@pytest.mark.thorough  # a kernel attaching a preset: test_competitions'; each family's handle: below
def test_a_kernel_on_a_keras_hub_family_attaches_its_preset(capsys, tmp_path):
    import json

    from pipeline import cli

    base = ["kernel", "generate", "--owner", "me", "--kernels-dir", str(tmp_path)]
    for competition, accelerator, backbone, preset, handle in (
        ("flowers", "TpuV5E8", "swin", "swin_tiny_patch4_window7_224",
         "keras/swin-transformer/keras/swin_tiny_patch4_window7_224/1"),
        ("imdb", "NvidiaTeslaT4", "roberta", "roberta_base_en", "keras/roberta/keras/roberta_base_en/3"),
    ):  # fmt: skip
        overrides = [f"competition={competition}", f"model.backbone={backbone}", f"model.weights={preset}"]
        args = [*base, "--accelerator", accelerator, *(a for o in overrides for a in ("--set", o))]
        assert cli.main(args) == 0, capsys.readouterr().err
        folder = next(p for p in tmp_path.iterdir() if competition in p.name)
        meta = json.loads((folder / "kernel-metadata.json").read_text())
        assert meta["model_sources"] == [handle]
        assert f"kernel: attaches the Kaggle model {handle}" in capsys.readouterr().out


@pytest.mark.slow  # the train stage on the tiny flowers, about 10 s each
@pytest.mark.parametrize(
    ("name", "policy"),
    [
        pytest.param(  # warm-up, then its last stage: test_train's frozen warm-up proves the policy
            "hgnetv2", ["train.frozen_epochs=1", "train.unfrozen_layers=1"], marks=pytest.mark.thorough
        ),
        # A probe: the head alone on DINOv2's cached features (`network_cut.cut`).
        ("dinov2", ["train.feature_cache=true", "train.frozen_epochs=2", "train.feature_views=2",
                    "train.steps_per_epoch=0"]),
    ],
)  # fmt: skip
def test_the_train_stage_fine_tunes_a_keras_hub_family_and_inference_rebuilds_it_from_the_run(
    name, policy, presets, cpu, tiny_data_dir, tmp_path
):
    from pipeline.modeling.inference import load_inference_model
    from pipeline.stages import train
    from tests.conftest import TINY

    overrides = [*TINY, f"model.backbone={name}", f"model.weights={presets[name]}", *policy]
    job = train.prepare(load_config(overrides=overrides), cpu, tiny_data_dir, tmp_path, None, None)
    metrics = train.fit(job, progress=False)
    assert np.isfinite(metrics["val_macro_f1"])
    moved = presets[name].rename(presets[name].with_name("moved"))  # inference needs no preset
    try:
        net = load_inference_model(job.run_dir, competition_of(job.run_dir), weights="best")
        probabilities = np.asarray(net(_pixels().astype("float32")))
    finally:
        moved.rename(presets[name])
    assert probabilities.shape == (2, 104) and np.isfinite(probabilities).all()


@pytest.mark.heavy  # a JAX process compiling a transformer, about 25 s
def test_a_keras_hub_family_trains_on_jax_and_its_run_predicts_on_tensorflow(
    presets, tiny_data_dir, tmp_path
):
    import subprocess
    import sys

    from pipeline.modeling.inference import load_inference_model
    from tests.conftest import REPO, TINY

    overrides = [*TINY, "model.backbone=swin", f"model.weights={presets['swin']}", "train.epochs=1"]
    sets = [a for o in overrides for a in ("--set", o)]
    folders = ["--data-dir", str(tiny_data_dir), "--runs-dir", str(tmp_path)]
    command = [
        sys.executable,
        "-m",
        "pipeline",
        "train",
        "--backend",
        "jax",
        *folders,
        "--recipe",
        "default",
        *sets,
    ]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    net = load_inference_model(run_dir, competition_of(run_dir), weights="best")  # pytest's Keras: TensorFlow
    assert np.asarray(net(_pixels().astype("float32"))).shape == (2, 104)


@pytest.mark.parametrize(
    ("competition", "recipe", "session", "handle"),
    [
        ("flowers", "swin", "tpu", "keras/swin-transformer/keras/swin_base_patch4_window12_384/1"),
        ("flowers", "dinov2-probe", "gpu", "keras/dinov2/keras/dinov2_base/1"),
        ("watson", "gpu", "gpu", "keras/xlm_roberta/keras/xlm_roberta_base_multi/3"),  # XLM-R base
        ("watson", "tpu", "tpu", "keras/xlm_roberta/keras/xlm_roberta_large_multi/3"),  # XLM-R large
        ("imdb", "gpu", "gpu", "keras/deberta_v3/keras/deberta_v3_base_en/3"),  # DeBERTa-v3 base
    ],
)
def test_the_shipped_recipes_on_keras_hub_families_attach_their_presets_and_pass_the_kernel_checks(
    competition, recipe, session, handle
):
    config = load_config(recipe, [f"competition={competition}"])
    assert preset_model(config) == handle
    check_recipe(config, load_spec(competition), session, internet=False, datasets=[handle])


@pytest.mark.slow  # builds a keras-hub network from each preset (their folders written once, about 12 s)
def test_each_family_says_what_unfrozen_layers_unfreezes_and_it_does(presets):
    from pipeline.modeling.classifier import set_backbone_trainable

    assert all(entry.unfreeze for entry in keras_hub_vision.BACKBONES.values())
    config = load_config(overrides=[f"data.image_size={SIZE}"])
    for name, last in (("vit", "ViTEncoder"), ("dinov2", "LayerNormalization")):
        net = keras_hub_vision.BACKBONES[name].build_classifier(config, 3, weights=str(presets[name]))
        set_backbone_trainable(net, True, freeze_batchnorm=False, unfrozen_layers=1)
        trainable = [layer for layer in net.get_layer("backbone").layers if layer.trainable]
        assert [type(layer).__name__ for layer in trainable if layer.weights] == [last], name
