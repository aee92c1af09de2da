"""keras-hub's SentencePiece (DeBERTa-v3, XLM-R, ALBERT) and byte-pair (RoBERTa) tokenizers through
petals' path, from real texts: a tiny SentencePiece model trained in memory by `sentencepiece`, a tiny
byte-level BPE vocabulary trained by `tokenizers`, each saved with keras-hub's own tokenizer class into
a preset beside a tiny random backbone. Petals' ids are the family's own preprocessor's, before and
after the run keeps the tokenizer; then a training step. keras-hub 0.32 runs both outside tf.data in
Python (no tensorflow-text). Nothing is downloaded."""

from __future__ import annotations

import importlib.util
import json

import keras
import numpy as np
import pytest

from competition import load_spec
from pipeline import networks
from pipeline.core.errors import PetalsError
from pipeline.networks import keras_hub_text
from pipeline.tasks.recipe_config import load_config
from tests import keras_hub_tiny

keras_hub = pytest.importorskip("keras_hub")

LENGTH = 16  # tokens
TEXTS = ["the cat sat on the mat", "a dog ran in the park", "the quick brown fox jumps", "hello world"] * 8
PREMISES, HYPOTHESES = np.array(["the cat sat", "a dog ran in the park"]), np.array(["a cat", "the fox"])
SENTENCEPIECE = [n for n, e in keras_hub_text.NETWORKS.items() if e.preprocess == "sentencepiece"]
HAS_SENTENCEPIECE = importlib.util.find_spec("sentencepiece") is not None  # setup.cfg lists it


def _sentencepiece_proto() -> bytes:
    """A unigram model of TEXTS with every family's special pieces (ALBERT's <pad>, DeBERTa's [PAD])."""
    pytest.importorskip("sentencepiece")
    return keras_hub_tiny.sentencepiece_proto(TEXTS)


def _roberta_tokenizer():
    """A byte-level BPE vocabulary and merges of TEXTS, in RoBERTa's tokenizer class."""
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(TEXTS, vocab_size=300, min_frequency=1, show_progress=False,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])  # fmt: skip
    model = json.loads(bpe._tokenizer.to_str())["model"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    return keras_hub.models.RobertaTokenizer(vocabulary=model["vocab"], merges=merges)


def _tokenizer(entry):
    if entry.preprocess == "byte-pair":
        return _roberta_tokenizer()
    return entry._class("Tokenizer")(proto=_sentencepiece_proto())


@pytest.fixture(scope="module")
def presets(tmp_path_factory):
    """{entry name: a preset folder with a tiny random backbone and the family's trained tokenizer}."""
    root = tmp_path_factory.mktemp("tokenizer-presets")
    keras.utils.set_random_seed(0)
    written = {}
    for name in [*(SENTENCEPIECE if HAS_SENTENCEPIECE else []), "roberta"]:
        entry = keras_hub_text.NETWORKS[name]
        written[name] = keras_hub_tiny.write_text_preset(entry, root / name, _tokenizer(entry), LENGTH)
    return written


def _config(name, presets):
    return load_config(overrides=["competition=watson", f"data.sequence_length={LENGTH}",
                                  f"model.backbone={name}", f"model.weights={presets[name]}"])  # fmt: skip


def _own_ids(entry, folder) -> dict[str, np.ndarray]:
    """What the family's own preprocessor, on the preset's tokenizer, makes of the pairs."""
    tokenizer = entry._class("Tokenizer").from_preset(str(folder))
    preprocessor = entry._class("TextClassifierPreprocessor")(tokenizer, LENGTH)
    made = preprocessor(x=(PREMISES.tolist(), HYPOTHESES.tolist()))
    return {name: keras.ops.convert_to_numpy(made[name]).astype(np.int32) for name in entry.inputs}


def test_a_sentencepiece_tokenizer_says_what_it_runs_on_its_own_ids_and_sentencepieces():
    """The keras-hub tokenizer's ids are the SentencePiece model's own (DeBERTa-v3 adds no offset)."""
    spm = pytest.importorskip("sentencepiece")
    proto = _sentencepiece_proto()
    ours = keras_hub.models.DebertaV3Tokenizer(proto=proto)(PREMISES.tolist())
    assert [list(map(int, ids)) for ids in ours] == spm.SentencePieceProcessor(model_proto=proto).encode(
        PREMISES.tolist()
    )


@pytest.mark.slow  # about 3-6 s a family
@pytest.mark.parametrize("name", [*SENTENCEPIECE, "roberta"])
def test_each_family_tokenizes_texts_through_petals_as_its_own_preprocessor_does_and_trains(
    name, presets, tmp_path
):
    entry = keras_hub_text.NETWORKS[name]
    if entry.preprocess == "sentencepiece":
        pytest.importorskip("sentencepiece")
    config = _config(name, presets)
    inputs = networks.text_inputs(config, tmp_path, (PREMISES, HYPOTHESES))
    x = inputs.encode((PREMISES, HYPOTHESES))
    own = _own_ids(entry, presets[name])
    assert set(x) == set(entry.inputs)
    for key in entry.inputs:
        np.testing.assert_array_equal(x[key], own[key])
    assert len(set(x["token_ids"][0].tolist())) > 5  # words, not padding
    inputs.save(tmp_path)  # the run keeps the tokenizer: the same ids without the preset
    again = networks.text_inputs(config, tmp_path).encode((PREMISES, HYPOTHESES))
    np.testing.assert_array_equal(again["token_ids"], x["token_ids"])
    spec = load_spec("watson")
    net = networks.build(
        config, spec, activation="softmax", vocabulary_size=inputs.vocabulary_size, batch_size=2
    )
    net.compile(optimizer=keras.optimizers.SGD(0.01), loss=keras.losses.SparseCategoricalCrossentropy())
    assert np.isfinite(net.fit(x, np.array([0, 2]), epochs=1, verbose=0).history["loss"][0])
    assert net.predict(x, verbose=0).shape == (2, spec.num_classes)


@pytest.mark.slow  # about 3-6 s a recipe
@pytest.mark.parametrize(
    ("competition", "recipe", "columns"),
    [
        ("watson", "gpu", (PREMISES, HYPOTHESES)),
        ("imdb", "gpu", (PREMISES,)),
        # watson's TPU recipe is the same family (XLM-R large): a variant here; on JAX's 8 devices in
        # the TPU image's pins, `make kernel-emulate` runs it
        pytest.param("watson", "tpu", (PREMISES, HYPOTHESES), marks=pytest.mark.thorough),
    ],
)
def test_the_accelerator_recipes_train_their_family_from_a_tiny_preset_through_petals(
    competition, recipe, columns, presets, tmp_path
):
    """`RECIPE=auto` on a GPU: watson's XLM-RoBERTa, imdb's DeBERTa-v3 (tests/test_gpu_recipes.py), and
    on a TPU watson's XLM-RoBERTa large, the recipe as shipped but for its preset (a tiny one of the
    same family: the real one is a download) and the length: tokenized by the preset's SentencePiece,
    built, one step, predicted."""
    pytest.importorskip("sentencepiece")
    shipped = load_config(recipe, [f"competition={competition}"])
    name = shipped.model.backbone
    config = load_config(recipe, [f"competition={competition}", f"model.weights={presets[name]}",
                                  f"data.sequence_length={LENGTH}"])  # fmt: skip
    assert config.train == shipped.train and config.model.dropout == shipped.model.dropout
    inputs = networks.text_inputs(config, tmp_path, columns)
    x = inputs.encode(columns)
    assert set(x) == set(keras_hub_text.NETWORKS[name].inputs) and len(set(x["token_ids"][0].tolist())) > 3
    spec = load_spec(competition)
    net = networks.build(
        config, spec, activation="softmax", weights=config.model.weights,
        vocabulary_size=inputs.vocabulary_size, batch_size=2,
    )  # fmt: skip
    net.compile(optimizer=keras.optimizers.SGD(0.01), loss=keras.losses.SparseCategoricalCrossentropy())
    assert np.isfinite(net.fit(x, np.array([0, 1]), epochs=1, verbose=0).history["loss"][0])
    assert net.predict(x, verbose=0).shape == (2, spec.num_classes)


def test_a_missing_sentencepiece_package_is_one_line_naming_it(presets, monkeypatch):
    from keras_hub.src.tokenizers import sentence_piece_tokenizer

    pytest.importorskip("sentencepiece")  # the preset is written with it
    monkeypatch.setattr(sentence_piece_tokenizer, "spm", None)
    entry = keras_hub_text.NETWORKS["deberta-v3"]
    with pytest.raises(PetalsError, match="through the sentencepiece package here") as raised:
        keras_hub_text.tokenizer_from(entry, presets["deberta-v3"])
    assert "\n" not in str(raised.value)
