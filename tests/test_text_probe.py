"""The probe for texts: the `tfidf` network fitted as TF-IDF + logistic regression (C by an inner CV
over whole examples and groups), its softmax the fitted model's predict_proba."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.feature_extraction.text import TfidfVectorizer

from pipeline.core.errors import PetalsError
from pipeline.modeling import probe, text_probe
from pipeline.modeling.inference import predict_split
from pipeline.networks.text import Vectorizer
from pipeline.networks.tfidf import tfidf_classifier
from pipeline.stages import train
from pipeline.tasks.recipe_config import load_config

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


def fitted(classes: int, seed: int = 0):
    """A tiny tfidf network fitted on texts of `classes` classes; its encoder, the fitted model and
    the columns it was fitted on."""
    labels = np.repeat(np.arange(classes), 15)
    texts = texts_of(labels, seed)
    vocabulary = Vectorizer.adapt(texts, vocabulary_size=40, sequence_length=LENGTH).vocabulary
    encode = Vectorizer(vocabulary, LENGTH)
    net = tfidf_classifier(len(vocabulary) + 2, LENGTH, classes, ngram_buckets=512)
    found = text_probe.counts(text_probe.feature_ids(net, encode((texts,))), net.get_layer("logits").rows)
    weights = text_probe.idf(found)
    x = text_probe.tfidf(found, weights)
    model, used, folds = text_probe.fit(x, labels, np.arange(len(labels)).astype(str), seed=0)
    table, bias = text_probe.written(model, used, x.shape[1], classes)
    net.get_layer("tfidf").set_weights([weights.astype(np.float32)])
    net.get_layer("logits").set_weights([table.astype(np.float32), bias.astype(np.float32)])
    return net, encode, model, used, folds


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


@pytest.mark.parametrize("classes", [2, 3])
def test_the_fitted_networks_softmax_is_logistic_regressions_predict_proba(classes):
    net, encode, model, used, folds = fitted(classes)
    assert folds == 5 and model.C_[0] in text_probe.CS
    # New texts, with words the training texts never held: out of the vocabulary, as in scikit-learn.
    held_out = texts_of(np.arange(classes).repeat(4), seed=1)
    held_out[0] += " zebra quokka"
    unseen = text_probe.tfidf(
        text_probe.counts(text_probe.feature_ids(net, encode((held_out,))), net.get_layer("logits").rows),
        net.get_layer("tfidf").get_weights()[0].astype(np.float64),
    )
    assert not text_probe.feature_ids(net, encode((held_out,)))[:, 0].any()  # the start id: no feature
    got = softmax(np.asarray(net.predict(encode((held_out,)), verbose=0)))
    np.testing.assert_allclose(got, model.predict_proba(unseen[:, used]), atol=2e-3)
    assert (got.argmax(1) == np.arange(classes).repeat(4)).mean() > 0.8  # it learned the words


def test_a_text_config_the_probe_cannot_run_is_one_line():
    task = type("Task", (), {"activation": "softmax"})()
    probe.check(load_config("cpu", PROBE), task)  # runs as it is
    for overrides, message in (
        (["model.backbone=ngrams"], "model.backbone=tfidf"),
        (["train.epochs=2"], "train.epochs=1"),
    ):
        with pytest.raises(PetalsError, match=rf"^train\.head_solver=logistic fits the network .*{message}"):
            probe.check(load_config("cpu", [*PROBE, *overrides]), task)


def test_a_tfidf_probe_run_scores_on_texts_what_evaluate_and_predict_compute(cpu, tmp_path, caplog):
    from competition import load_spec
    from pipeline.stages.fetch import FetchOptions, fetch

    caplog.set_level("INFO")
    data_dir = tmp_path / "data"
    fetch(FetchOptions(source="synthetic", data_dir=data_dir, scale=0.02, progress=False), load_spec("imdb"))
    job = train.prepare(load_config("cpu", PROBE), cpu, data_dir, tmp_path / "runs", None, None)
    metrics = train.fit(job, progress=False)
    assert (
        "TF-IDF + logistic regression fitted on" in caplog.text
        and "inner CV over whole examples" in caplog.text
    )
    history = pd.read_csv(job.run.history_file)
    assert history["epoch"].tolist() == [1] and metrics["best_epoch"] == 1
    predictions = predict_split(job.run, data_dir, "val", 1, cpu, as_scored=False)
    recorded = history[f"val_{job.spec.metric.name}"].iloc[0]
    assert job.spec.metric.score(predictions.labels, predictions.probabilities) == pytest.approx(
        recorded, abs=1e-4
    )
    assert recorded > 0.7  # the reviews' words tell their sentiment


def test_the_shipped_text_candidates_are_tfidf_first_then_the_recipe_and_the_probe_runs_them():
    from pipeline.cv import choose
    from pipeline.tasks import recipe_config

    path, _ = recipe_config.beside_recipe(choose.FOLDER, "imdb", "cpu", "cpu")
    assert path is not None and path.parts[-3:] == ("text_classification", "candidates", "cpu.toml")
    listed = choose.read_candidates(path)
    assert [c.name for c in listed] == ["tfidf", "recipe"]  # the simplest first
    task = type("Task", (), {"activation": "softmax"})()
    for candidate in listed:
        config = recipe_config.load_config("cpu", ["competition=imdb", *candidate.overrides], device="cpu")
        probe.check(config, task)
        assert config.train.choose_up_to == 20000
    tfidf = recipe_config.load_config("cpu", ["competition=imdb", *listed[0].overrides], device="cpu")
    assert tfidf.model.backbone == "tfidf" and tfidf.train.head_solver == "logistic"


def test_text_pairs_are_refused_in_one_line():
    from competition import load_spec
    from pipeline.tasks.competitions import check_network

    config = load_config("cpu", ["competition=watson", "model.backbone=tfidf", "train.head_solver=logistic"])
    with pytest.raises(PetalsError, match=r"^model\.backbone=tfidf reads one text; competition watson has 2"):
        check_network(config, load_spec("watson"), "tensorflow")
