"""The GPU defaults (`RECIPE=auto` on a GPU) on the families Kaggle is won with: flowers'
EfficientNetV2-S at 384 px read from the 512 px records, watson's XLM-RoBERTa, imdb's DeBERTa-v3; the
recipes they replaced keep a name, each idea in one file; `make kernel` on a GPU attaches what each
loads. The choices are argued from published figures in each recipe's header and not run on real
weights here (no accelerator; weights and presets are downloads): the networks build from tiny
weights here and train from tiny presets in tests/test_keras_hub_tokenizers.py."""

from __future__ import annotations

import dataclasses
import json
import re
import tomllib

import numpy as np
import pytest

from competition import load_spec
from competition.spec import known_competitions
from pipeline import networks
from pipeline.core.errors import PetalsError
from pipeline.formats.base import resolutions_of
from pipeline.kernels.client.recipe_check import check_recipe, preset_model
from pipeline.networks import registry
from pipeline.tasks.recipe_config import RECIPES, load_config
from tests.conftest import REPO

# competition: the GPU recipe's (backbone, weights, the Kaggle model a kernel attaches)
GPU = {
    "flowers": ("keras-efficientnetv2-s", "imagenet", None),
    "watson": ("xlm-roberta", "xlm_roberta_base_multi", "keras/xlm_roberta/keras/xlm_roberta_base_multi/3"),
    "imdb": ("deberta-v3", "deberta_v3_base_en", "keras/deberta_v3/keras/deberta_v3_base_en/3"),
}
BEFORE = {"flowers": ("efficientnet-b0", "keras-efficientnet-b0"), "watson": ("mbert", "bert"),
          "imdb": ("bert", "bert")}  # fmt: skip


def test_on_a_gpu_auto_trains_the_modern_family_and_the_recipe_before_keeps_a_name():
    for competition, (backbone, weights, handle) in GPU.items():
        config = load_config("auto", [f"competition={competition}"], device="GPU")
        assert (config.recipe, config.model.backbone, config.model.weights) == ("gpu", backbone, weights)
        assert preset_model(config) == handle
        recipe, before = BEFORE[competition]
        assert load_config(recipe, [f"competition={competition}"]).model.backbone == before
    # The TPU defaults (each tpu.toml says why): watson's XLM-R large, its SentencePiece carried by the
    # kernel (tests/kernel_emulate.py runs it in the TPU image's pins); imdb's BERT, as DeBERTa-v3 is
    # slow on TPUs; the multilingual BERT before keeps a name.
    assert load_config("tpu", ["competition=flowers"]).model.backbone == "keras-efficientnet-b7"
    watson = load_config("tpu", ["competition=watson"])
    assert (watson.model.backbone, watson.model.weights) == ("xlm-roberta", "xlm_roberta_large_multi")
    assert preset_model(watson) == "keras/xlm_roberta/keras/xlm_roberta_large_multi/3"
    assert (watson.data.batch_size, watson.data.sequence_length) == (16, 128)
    assert watson.train.lr_max * 8 == pytest.approx(1e-5)  # a peak of 1e-5 a step on 8 cores
    assert load_config("mbert-tpu", ["competition=watson"]).model.backbone == "bert"
    assert load_config("tpu", ["competition=imdb"]).model.backbone == "bert"


def _values(path) -> str:
    return json.dumps(tomllib.loads(path.read_text()), sort_keys=True)


def test_no_two_recipe_files_of_a_competition_set_the_same_values():
    """One home per idea: a recipe that moved to gpu.toml left no twin under its old name."""
    for competition in known_competitions():
        seen: dict[str, str] = {}
        for path in sorted((load_spec(competition).file.parent / RECIPES).glob("*.toml")):
            assert _values(path) not in seen, f"{competition}: {path.name} repeats {seen.get(_values(path))}"
            seen[_values(path)] = path.name


def test_a_tasks_recipe_is_the_competition_recipe_its_header_names():
    """A task's cpu/gpu/tpu recipe says whose it is (`It is imdb's (competition/imdb/recipes/gpu.toml)`):
    it sets that file's values, so a competition's recipe that moves takes its task's along."""
    copies = sorted((REPO / "pipeline/tasks/recipes").glob("*/*.toml"))
    header = re.compile(r"It is \S+'s \((competition/\S+\.toml)\)")
    named = {copy: header.search(copy.read_text().replace("\n# ", " ")) for copy in copies}
    assert sum(map(bool, named.values())) >= 9  # image, text and text-pair tasks' cpu, gpu and tpu
    for copy, source in named.items():
        if source:
            assert _values(copy) == _values(REPO / source.group(1)), copy


def test_the_flowers_gpu_recipe_reads_the_512_records_and_feeds_its_network_384(tmp_path):
    import tensorflow as tf

    from pipeline.data import datasets

    config = load_config("gpu", ["competition=flowers"])
    spec = load_spec("flowers")
    assert config.data.image_size == 512 and config.data.image_size in resolutions_of(spec)
    assert datasets.input_size(config) == 384 == registry.get_backbone(config.model.backbone).native_size
    assert networks.input_shape(config, 2) == (2, 384, 384, 3)
    records = tf.data.Dataset.from_tensors((tf.fill([1, 512, 512, 3], tf.constant(200, tf.uint8)), [3]))
    ((images, labels),) = list(datasets.resized(records, config))
    assert images.shape == (1, 384, 384, 3) and labels.numpy().tolist() == [3]
    np.testing.assert_allclose(images.numpy(), 200.0, atol=1e-3)  # resized, not rescaled: 0..255 in
    check_recipe(config, spec, "gpu", internet=True, datasets=[])  # Keras downloads the weights there


@pytest.mark.slow  # builds EfficientNetV2-S three times (about 20 s on two busy cores)
@pytest.mark.thorough  # the recipe's network from random weights: test_model's shipped-recipe sweep
def test_the_flowers_gpu_network_loads_a_weights_file_and_an_offline_kernel_says_how_to_get_one(tmp_path):
    config = load_config("gpu", ["competition=flowers", "data.input_size=32"])
    spec = load_spec("flowers")
    donor = registry.get_backbone(config.model.backbone).build((32, 32, 3), None)
    path = tmp_path / "efficientnetv2-s_notop.weights.h5"  # as a kernel's shipped file is passed
    donor.save_weights(path)
    net = networks.build(config, spec, activation="softmax", weights=str(path))
    loaded = net.get_layer("backbone")
    assert len(loaded.weights) == len(donor.weights)
    for mine, theirs in zip(loaded.weights[::50], donor.weights[::50], strict=True):
        np.testing.assert_array_equal(np.asarray(mine), np.asarray(theirs))
    pixels = np.random.default_rng(0).integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
    probabilities = np.asarray(net(pixels, training=False))
    assert probabilities.shape == (2, spec.num_classes) and np.isfinite(probabilities).all()
    offline = dataclasses.replace(config, data=dataclasses.replace(config.data, input_size=384))
    with pytest.raises(
        PetalsError, match=r"downloads the imagenet weights file of keras-efficientnetv2-s, but"
    ):
        check_recipe(offline, spec, "gpu", internet=False, datasets=[])


@pytest.fixture
def unchecked(monkeypatch):
    """`make kernel` places its folder without running the script's --help (seconds a kernel)."""
    from pipeline.kernels.client import generate
    from pipeline.kernels.client.metadata import METADATA

    def place(folder, text, meta):
        folder.mkdir(parents=True)
        (folder / METADATA).write_text(json.dumps(meta))
        (folder / meta["code_file"]).write_text(text)
        return folder

    monkeypatch.setattr(generate, "place_checked", place)


def test_make_kernel_on_a_gpu_attaches_the_preset_each_gpu_recipe_names(unchecked, capsys, tmp_path):
    from pipeline import cli
    from pipeline.kernels.client.metadata import METADATA

    for competition, (_, _, handle) in GPU.items():
        args = ["kernel", "generate", "--owner", "me", "--kernels-dir", str(tmp_path), "--accelerator",
                "NvidiaTeslaT4", "--set", f"competition={competition}"]  # fmt: skip
        assert cli.main(args) == 0, capsys.readouterr().err
        folder = tmp_path / f"petals-{competition}-gpu"  # the recipe `auto` resolved to on a GPU
        meta = json.loads((folder / METADATA).read_text())
        assert meta["enable_gpu"] and meta["enable_internet"] and meta["machine_shape"] == "NvidiaTeslaT4"
        assert meta["model_sources"] == ([handle] if handle else []) and meta["dataset_sources"] == []
        script = (folder / meta["code_file"]).read_text()
        assert "'recipe': 'gpu'" in script and "'strategy': 'mirrored'" in script
        if competition == "flowers":  # the kernel fetches the 512 px records; Keras downloads the weights
            assert "'image_size': 512" in script and "'shipped_weights': None" in script


def test_a_kernel_of_watsons_xlm_r_installs_or_ships_sentencepiece_and_berts_does_not(
    unchecked, monkeypatch, capsys, tmp_path
):
    """XLM-R tokenizes with SentencePiece, which keras-hub (installed --no-deps) runs through the
    `sentencepiece` package: online the kernel installs it, pinned, where the image lacks it; offline
    `make kernel` downloads its wheels into the petals-wheels dataset the kernel attaches. Multilingual
    BERT's WordPiece needs neither. pip download stands aside: it writes the file it was asked for."""
    from pipeline import cli
    from pipeline.kernels.client import wheels
    from pipeline.kernels.client.metadata import METADATA
    from pipeline.networks.keras_hub_text import SENTENCEPIECE_INSTALL

    def download(pip, python, into):
        tag = "cp" + python.replace(".", "")
        (into / f"{pip[-1].replace('==', '-')}-{tag}-{tag}-manylinux_2_28_x86_64.whl").write_bytes(b"")

    monkeypatch.setattr(wheels, "_download", download)
    carried = f"'sentencepiece': {list(SENTENCEPIECE_INSTALL)!r}"
    for recipe, accelerator, internet, needs in (
        ("gpu", "NvidiaTeslaT4", "on", True), ("gpu", "NvidiaTeslaT4", "off", True),
        ("tpu", "TpuV5E8", "off", True), ("mbert-tpu", "TpuV5E8", "off", False),
    ):  # fmt: skip
        kernels = tmp_path / f"{recipe}-{internet}"
        args = ["kernel", "generate", "--owner", "me", "--kernels-dir", str(kernels), "--accelerator",
                accelerator, "--recipe", recipe, "--internet", internet,
                "--set", "competition=watson"]  # fmt: skip
        if recipe == "mbert-tpu":
            args += ["--model", "keras/bert/keras/bert_base_multi/2"]
        assert cli.main(args) == 0, capsys.readouterr().err
        (folder,) = [p for p in kernels.iterdir() if p.name.startswith("petals-watson")]
        meta = json.loads((folder / METADATA).read_text())
        assert (carried in (folder / meta["code_file"]).read_text()) == needs, recipe
        shipped = sorted(p.name for p in wheels.folder_for(kernels).glob("*.whl"))
        assert bool(shipped) == (needs and internet == "off"), (recipe, internet)
        assert (f"me/{wheels.SLUG}" in meta["dataset_sources"]) == bool(shipped)
        if shipped:  # one wheel for each of Kaggle's Pythons: 3.12 on the TPU image
            assert [name.split("-")[2] for name in shipped] == ["cp312", "cp313"]


@pytest.mark.slow
@pytest.mark.heavy  # a registry's larger sibling trains two steps and scores val: 70 s on two busy cores
def test_the_flowers_gpu_recipe_trains_resized_records_with_augmentation_in_the_step(
    cpu, tiny_data_dir, tmp_path
):
    """The recipe as shipped but for its sizes (the tiny records' 32 px read, fed at 48), random
    weights and two steps: the records resized in tf.data, augmented inside the train step as on a
    GPU under TensorFlow, EfficientNetV2-S trained and scored."""
    from pipeline.stages import train

    sizes = ["data.image_size=32", "data.input_size=48", "data.batch_size=4"]
    short = ["model.weights=none", "augment.where=device", "train.epochs=1", "train.steps_per_epoch=2"]
    overrides = ["competition=flowers", *sizes, *short]
    config = load_config("gpu", overrides)
    assert config.model.backbone == "keras-efficientnetv2-s" and config.train.lr_max == 5e-5
    job = train.prepare(config, cpu, tiny_data_dir, tmp_path, None, None)
    assert np.isfinite(train.fit(job, progress=False)["val_macro_f1"])
