"""The one lookup of networks by name: every entry, image or text, answers the same questions."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from pipeline import networks
from pipeline.core.errors import PetalsError
from pipeline.networks import bert, joined, keras_hub_text, keras_hub_vision, registry, text_networks
from pipeline.networks.base import Network
from pipeline.tasks.competitions import check_network
from pipeline.tasks.recipe_config import load_config


def test_the_lookup_holds_every_image_backbone_and_text_network_once():
    kinds = (
        registry.BACKBONES,
        keras_hub_vision.BACKBONES,
        text_networks.NETWORKS,
        keras_hub_text.NETWORKS,
        joined.NETWORKS,
    )
    assert len(networks.NETWORKS) == sum(map(len, kinds))
    assert networks.TEXT_NETWORKS[:4] == ("bilstm", "ngrams", "tfidf", "tfidf-chars")
    assert networks.TEXT_NETWORKS[4:] == (*bert.NAMES, *keras_hub_text.NETWORKS, "tfidf-sentence")
    assert {networks.get(name).modality for name in networks.IMAGE_BACKBONES} == {"image"}
    assert {networks.get(name).modality for name in networks.TEXT_NETWORKS} == {"text"}


@pytest.mark.parametrize("name", list(networks.NETWORKS))
def test_every_entry_says_what_it_is(name):
    entry = networks.get(name)
    assert entry.name == name and entry.modality in ("image", "text")
    assert entry.backends and set(entry.backends) <= {"tensorflow", "jax"}
    assert isinstance(entry.weights, tuple) and isinstance(entry.preprocess, str) and entry.preprocess
    for weights in ("none", *entry.weights):
        needed = entry.packages(weights)
        assert isinstance(needed, dict)
        assert all(isinstance(pip, list) and pip for pip in needed.values())
    line = entry.describe()
    assert line.startswith(f"{name} ") and "\n" not in line
    # One shape: every entry is a Network, and the lookup asks it, never which kind it is.
    assert isinstance(entry, Network)
    config = load_config(overrides=["data.image_size=64", "data.sequence_length=12"])
    shape = entry.input_shape(config, 3)
    shapes = shape.values() if isinstance(shape, dict) else [shape]
    assert all(one[0] == 3 for one in shapes)
    assert all(one[1] == (64 if entry.modality == "image" else 12) for one in shapes)
    if entry.modality == "image":
        with pytest.raises(ValueError, match=f"{name} reads images, not texts"):
            entry.text_inputs(config, Path("nowhere"), None)


def test_describe_all_gives_one_line_an_entry():
    lines = networks.describe_all()
    assert len(lines) == len(networks.NETWORKS)
    assert any(line.startswith("bert ") and "keras-hub preset" in line for line in lines)


def test_an_unknown_network_suggests_close_names():
    with pytest.raises(PetalsError, match=r"unknown backbone 'bert-huge' \(did you mean: bert, bert-tiny"):
        networks.get("bert-huge")
    with pytest.raises(
        PetalsError, match=r"unknown backbone 'zzz' \(python -m pipeline train --list-backbones"
    ):
        networks.get("zzz")


def test_the_text_entries_say_how_they_tokenize_and_what_they_read():
    entries = text_networks.NETWORKS
    assert {name: e.preprocess for name, e in entries.items()} == {
        "bilstm": "words",
        "ngrams": "subwords",
        "tfidf": "words",
        "tfidf-chars": "subwords",
        **dict.fromkeys(bert.NAMES, "wordpiece"),
    }
    assert [name for name, e in entries.items() if e.reads_pairs] == list(bert.NAMES)
    assert [name for name, e in entries.items() if e.has_backbone] == list(bert.NAMES)
    assert [name for name, e in entries.items() if e.fitted] == ["tfidf", "tfidf-chars"]
    assert entries[bert.PRESET].weights and not entries["bert-tiny"].weights
    assert entries["bert-tiny"].packages("none") == {"keras_hub": list(bert.PIP_INSTALL)}
    assert entries["ngrams"].packages("none") == {}


def _text_config(backbone: str):
    config = load_config("cpu", ["competition=imdb"])
    return dataclasses.replace(
        config,
        model=dataclasses.replace(config.model, backbone=backbone),
        data=dataclasses.replace(config.data, sequence_length=16),
    )


@pytest.mark.parametrize("name", ["bilstm", "ngrams"])
def test_a_word_model_keeps_its_vocabulary_and_builds_from_its_size(name, tmp_path):
    from competition import load_spec

    config = _text_config(name)
    texts = (np.array(["a good film", "a bad film", "good good"]),)
    inputs = networks.text_inputs(config, tmp_path, texts)
    inputs.save(tmp_path)
    kept = networks.text_inputs(config, tmp_path)  # what inference reads back
    assert kept.vocabulary_size == inputs.vocabulary_size
    np.testing.assert_array_equal(kept.encode(texts), inputs.encode(texts))
    spec = load_spec("imdb")
    assert networks.input_shape(config, 2) == (2, 16)
    net = networks.build(config, spec, activation="softmax", vocabulary_size=inputs.vocabulary_size)
    assert net.output.shape[-1] == spec.num_classes
    networks.keep_architecture(config, net, tmp_path)  # nothing for a word model
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vocabulary.txt"]


def test_a_text_task_checks_the_network_through_its_entry():
    from competition import load_spec

    pairs = load_config("cpu", ["competition=watson", "model.backbone=bilstm"])
    with pytest.raises(
        PetalsError,
        match=r"reads pairs: bert, bert-tiny, bert-small, deberta-v3, roberta, xlm-roberta, distil-bert, "
        r"albert, sentence-bert\)$",
    ):
        check_network(pairs, load_spec("watson"), "tensorflow")
    warm_up = load_config("cpu", ["competition=watson", "model.backbone=bert-tiny", "train.frozen_epochs=1"])
    check_network(warm_up, load_spec("watson"), "jax")  # BERT reads pairs and has a part to freeze
    with pytest.raises(PetalsError, match=r"^model.backbone=bert-tiny builds on tensorflow, jax only"):
        check_network(warm_up, load_spec("watson"), "torch")


def test_a_kernel_of_a_sentencepiece_family_carries_the_pinned_package_and_no_other_family_does():
    """keras-hub's own classes decide: a family whose tokenizer is a SentencePieceTokenizer (XLM-R,
    DeBERTa-v3, ALBERT) needs the `sentencepiece` package where keras-hub is installed --no-deps;
    WordPiece (BERT, DistilBERT) and byte-pair (RoBERTa) do not."""
    keras_hub = pytest.importorskip("keras_hub")

    carried = {}
    for name, entry in keras_hub_text.NETWORKS.items():
        runs_sentencepiece = issubclass(
            entry._class("Tokenizer"), keras_hub.tokenizers.SentencePieceTokenizer
        )
        needed = entry.packages(entry.weights[1])  # its first Kaggle handle, or packaged model
        assert needed["keras_hub"] == list(bert.PIP_INSTALL)
        assert ("sentencepiece" in needed) == runs_sentencepiece == (entry.preprocess == "sentencepiece"), (
            name
        )
        carried[name] = needed.get("sentencepiece")
    assert {n for n, pip in carried.items() if pip} == {"deberta-v3", "xlm-roberta", "albert"}
    assert set(map(tuple, filter(None, carried.values()))) == {keras_hub_text.SENTENCEPIECE_INSTALL}
    assert re.fullmatch(r"sentencepiece==\d+\.\d+\.\d+", keras_hub_text.SENTENCEPIECE_INSTALL[-1])
    assert "sentencepiece" not in text_networks.NETWORKS[bert.PRESET].packages("none")
