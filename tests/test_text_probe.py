"""The probe for texts: the `tfidf` and `tfidf-chars` networks fitted as TF-IDF + logistic regression
(C by an inner CV over whole examples and groups), their softmax the fitted model's predict_proba."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.pipeline import make_union

from pipeline.core.errors import PetalsError
from pipeline.modeling import probe, text_probe
from pipeline.modeling.inference import predict_split
from pipeline.networks.text import SubwordVectorizer, Vectorizer
from pipeline.networks.tfidf import chars_classifier, counts_in_text, tfidf_classifier
from pipeline.stages import train
from pipeline.tasks.competitions import load_competition
from pipeline.tasks.recipe_config import load_config
from tests.conftest import competition_of, run_python

LENGTH = 24
WORDS = {0: ["dull", "slow", "bad"], 1: ["fine", "good", "warm"], 2: ["odd", "new", "wild"]}
FILLERS = ["the", "a", "film", "plot", "cast", "and", "it", "was"]
PROBE = [
    "competition=imdb",
    "model.backbone=tfidf",
    "data.batch_size=8",
    "data.sequence_length=32",
    "data.vocabulary_size=300",
    "train.epochs=1",
    "train.head_solver=logistic",
]


def texts_of(labels: np.ndarray, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.array(
        [
            " ".join([*rng.choice(FILLERS, 5), *rng.choice(WORDS[int(y)], 2), *rng.choice(FILLERS, 3)])
            for y in labels
        ]
    )


def fitted(classes: int, seed: int = 0, chars: bool = False):
    """A tiny tfidf network (`chars`: tfidf-chars) fitted on texts of `classes` classes; its encoder,
    the fitted model and the columns it was fitted on."""
    labels = np.repeat(np.arange(classes), 15)
    texts = texts_of(labels, seed)
    vocabulary = Vectorizer.adapt(texts, vocabulary_size=40, sequence_length=LENGTH).vocabulary
    build, vectorizer, length = (
        (chars_classifier, SubwordVectorizer, 4 * LENGTH) if chars else (tfidf_classifier, Vectorizer, LENGTH)
    )
    encode = vectorizer(vocabulary, length)
    net = build(len(vocabulary) + 2, length, classes, ngram_buckets=512)
    found = text_probe.counts(text_probe.feature_ids(net, encode((texts,))), net.get_layer("logits").rows)
    weights = text_probe.idf(found)
    x = text_probe.tfidf(found, weights, net.get_layer("tfidf").block)
    fitted, used = text_probe.fit(x, labels, np.arange(len(labels)).astype(str), 0, "logistic", classes)
    table = text_probe.written(fitted, used, x.shape[1])
    net.get_layer("tfidf").set_weights([weights.astype(np.float32)])
    net.get_layer("logits").set_weights([table.astype(np.float32), fitted.bias.astype(np.float32)])
    return net, encode, fitted.models[0], used, fitted.said


def softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    return np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)


def test_the_features_are_scikit_learns_sublinear_tfidf_of_the_networks_ids():
    ids = np.array([[1, 5, 5, 5, 9, 0, 0], [1, 9, 7, 0, 0, 0, 0], [1, 5, 0, 0, 0, 0, 0]])
    found = text_probe.counts(ids, rows=12)
    x = text_probe.tfidf(found, text_probe.idf(found)).toarray()
    reference = TfidfVectorizer(analyzer=lambda row: [str(i) for i in row if i], sublinear_tf=True)
    expected = reference.fit_transform(list(ids)).toarray()
    columns = [int(name) for name in reference.get_feature_names_out()]
    np.testing.assert_allclose(x[:, columns], expected, atol=1e-12)
    assert not x[:, [c for c in range(12) if c not in columns]].any()


def test_two_blocks_are_each_of_unit_length_as_scikit_learns_union_of_two_vectorizers():
    ids = np.array([[1, 2, 2, 5, 6, 0], [3, 1, 7, 5, 0, 0], [2, 6, 0, 0, 0, 0], [4, 4, 4, 0, 0, 0]])
    found = text_probe.counts(ids, rows=9)
    x = text_probe.tfidf(found, text_probe.idf(found), block=(5, 8)).toarray()
    words = TfidfVectorizer(
        analyzer=lambda row: [str(i) for i in row if 0 < i < 5 or i >= 8], sublinear_tf=True
    )
    chars = TfidfVectorizer(analyzer=lambda row: [str(i) for i in row if 5 <= i < 8], sublinear_tf=True)
    expected = make_union(words, chars).fit_transform(list(ids)).toarray()
    columns = [
        int(name.split("__")[1]) for name in make_union(words, chars).fit(list(ids)).get_feature_names_out()
    ]
    np.testing.assert_allclose(x[:, columns], expected, atol=1e-12)
    assert np.linalg.norm(x[3]) == pytest.approx(1.0)  # a text without character n-grams: one block


def _counts_and_compares() -> tuple[list, list]:
    """The network's count of each id in its text, on this process's backend, compiled, beside
    a compare of every pair of positions."""
    import keras

    ids = np.random.default_rng(0).integers(0, 6, size=(5, 40)).astype(np.int32)
    ids[0] = 3  # one id everywhere
    ids[1] = np.arange(40)  # every id once
    tokens = keras.Input(shape=(40,), dtype="int32")
    counted = keras.Model(tokens, keras.layers.Lambda(counts_in_text)(tokens)).predict(ids, verbose=0)
    return np.asarray(counted).tolist(), (ids[:, :, None] == ids[:, None, :]).sum(axis=2).tolist()


@pytest.mark.parametrize(
    "backend", ["tensorflow", pytest.param("jax", marks=[pytest.mark.slow, pytest.mark.heavy])]
)
def test_the_networks_count_of_each_id_in_its_text_is_every_pairs_compare(backend):
    if backend == "tensorflow":
        counted, expected = _counts_and_compares()
    else:
        done = run_python(
            "import json\nfrom tests.test_text_probe import _counts_and_compares\n"
            "print(json.dumps(_counts_and_compares()))",
            env={"KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"},
        )
        assert done.returncode == 0, done.stderr[-3000:]
        counted, expected = json.loads(done.stdout.strip().splitlines()[-1])
    assert counted == expected


@pytest.mark.parametrize("chars", [False, True], ids=["tfidf", "tfidf-chars"])
@pytest.mark.parametrize("classes", [2, 3])
def test_the_fitted_networks_softmax_is_logistic_regressions_predict_proba(classes, chars):
    net, encode, model, used, said = fitted(classes, chars=chars)
    assert "by a 5-fold inner CV" in said and model.C_[0] in text_probe.CS
    # New texts, with words the training texts never held: out of the vocabulary, as in scikit-learn.
    held_out = texts_of(np.arange(classes).repeat(4), seed=1)
    held_out[0] += " zebra quokka"
    unseen = text_probe.tfidf(
        text_probe.counts(text_probe.feature_ids(net, encode((held_out,))), net.get_layer("logits").rows),
        net.get_layer("tfidf").get_weights()[0].astype(np.float64),
        net.get_layer("tfidf").block,
    )
    assert not text_probe.feature_ids(net, encode((held_out,)))[:, 0].any()  # the start id: no feature
    got = softmax(np.asarray(net.predict(encode((held_out,)), verbose=0)))
    np.testing.assert_allclose(got, model.predict_proba(unseen[:, used]), atol=2e-3)
    assert (got.argmax(1) == np.arange(classes).repeat(4)).mean() > 0.8  # it learned the words


def test_a_text_config_the_probe_cannot_run_is_one_line():
    task = type("Task", (), {"probe": "logistic"})()
    probe.check(load_config("cpu", PROBE), task)  # runs as it is
    for overrides, message in (
        (["model.backbone=ngrams"], "model.backbone=tfidf or tfidf-chars"),
        (["train.epochs=2"], "train.epochs=1"),
    ):
        with pytest.raises(PetalsError, match=rf"^train\.head_solver=logistic fits the network .*{message}"):
            probe.check(load_config("cpu", [*PROBE, *overrides]), task)


def probe_run(overrides: list[str], cpu, tmp_path, scale: float, between=None) -> tuple[float, float]:
    """A probe run on drawn imdb reviews (`scale` of the set): its recorded val score, and the score
    evaluate's prediction of val computes (after `between()`, if given: a new process, say); the run
    itself trains one epoch, its best."""
    from competition import load_spec
    from pipeline.stages.fetch import FetchOptions, fetch

    data_dir = tmp_path / "data"
    fetch(FetchOptions(source="synthetic", data_dir=data_dir, scale=scale, progress=False), load_spec("imdb"))
    job = train.prepare(load_config("cpu", overrides), cpu, data_dir, tmp_path / "runs", None, None)
    metrics = train.fit(job, progress=False)
    history = pd.read_csv(job.run.history_file)
    assert history["epoch"].tolist() == [1] and metrics["best_epoch"] == 1
    if between is not None:
        between()
    predictions = predict_split(job.run, competition_of(job.run), data_dir, "val", 1, cpu, as_scored=False)
    recorded = history[f"val_{job.spec.metric.name}"].iloc[0]
    return recorded, job.spec.metric.score(predictions.labels, predictions.probabilities)


def test_a_tfidf_probe_run_scores_on_texts_what_evaluate_and_predict_compute(cpu, tmp_path, caplog):
    caplog.set_level("INFO")
    recorded, predicted = probe_run(PROBE, cpu, tmp_path, 0.02)
    assert (
        "TF-IDF + logistic regression fitted on" in caplog.text
        and "inner CV over whole examples" in caplog.text
    )
    assert predicted == pytest.approx(recorded, abs=1e-4)
    assert recorded > 0.7  # the reviews' words tell their sentiment


def test_the_shipped_text_candidates_are_the_joined_probe_tfidf_then_the_recipe_and_the_probe_runs_them():
    from pipeline.cv import choose
    from pipeline.tasks import recipe_config

    path, _ = recipe_config.beside_recipe(choose.FOLDER, load_competition("imdb"), "cpu", "cpu")
    assert path is not None and path.parts[-3:] == ("text_classification", "candidates", "cpu.toml")
    listed = choose.read_candidates(path)
    assert [c.name for c in listed] == ["joined", "tfidf", "recipe"]  # the order of preference
    task = type("Task", (), {"probe": "logistic"})()
    for candidate in listed:
        config = recipe_config.load_config("cpu", ["competition=imdb", *candidate.overrides], device="cpu")
        probe.check(config, task)
        assert config.train.choose_up_to == 20000
    for candidate, backbone in zip(listed[:2], ("tfidf-sentence", "tfidf"), strict=True):
        config = recipe_config.load_config("cpu", ["competition=imdb", *candidate.overrides], device="cpu")
        assert config.model.backbone == backbone and config.train.head_solver == "logistic"


def test_text_pairs_are_refused_in_one_line():
    from competition import load_spec
    from pipeline.tasks.competitions import check_network

    config = load_config("cpu", ["competition=watson", "model.backbone=tfidf", "train.head_solver=logistic"])
    with pytest.raises(PetalsError, match=r"^model\.backbone=tfidf reads one text; competition watson has 2"):
        check_network(config, load_spec("watson"), "tensorflow")
