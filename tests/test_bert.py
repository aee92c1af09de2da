"""BERT on sentence pairs (watson): Keras `fit` and the custom loop on the same loss trend, resume
after kill -9 with the tokenizer kept in the run, pairs tokenized as BERT reads them, bad input.
(A preset loaded from disk runs the whole chain in tests/test_competitions.py.)"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from competition import load_spec
from pipeline.core.errors import PetalsError
from pipeline.networks import bert
from pipeline.stages import train
from pipeline.stages.fetch import FetchOptions, fetch
from pipeline.tasks.competitions import check_network
from pipeline.tasks.recipe_config import load_config

TINY = [  # BERT-Tiny's shape on 32-token pairs, a few steps
    "competition=watson",
    "data.batch_size=8",
    "data.sequence_length=32",
    "data.vocabulary_size=300",
    "train.epochs=3",
    "train.steps_per_epoch=8",
    "train.lr_ramp_epochs=0",
    "train.lr_max=0.001",
]


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("watson") / "data"
    fetch(FetchOptions(source="synthetic", data_dir=data_dir, scale=0.2, progress=False), load_spec("watson"))
    return data_dir


@pytest.mark.slow
@pytest.mark.thorough  # 11 s: BERT is no CPU recipe; watson's custom loop is in make test (test_competitions)
def test_fit_and_the_custom_loop_follow_the_same_loss_trend(pairs, cpu, tmp_path):
    losses = {}
    for loop in ("fit", "custom"):
        config = load_config(
            "cpu",
            [
                *TINY,
                "data.batch_size=16",
                "train.steps_per_epoch=12",
                "train.lr_max=0.002",
                f"train.loop={loop}",
            ],
        )
        job = train.prepare(config, cpu, pairs, tmp_path / loop, None, None)
        train.fit(job, progress=False)
        losses[loop] = pd.read_csv(job.run_dir / "history.csv")["loss"].to_numpy()
    for loop, trend in losses.items():
        assert trend[-1] < np.log(3) - 0.1, (loop, trend)  # each learns: below a uniform guess
    # Same data order, same start: the two loops' epoch losses stay close.
    np.testing.assert_allclose(losses["fit"], losses["custom"], atol=0.08)


def test_bert_without_a_preset_directory_is_refused_in_one_line(tmp_path):

    config = load_config("cpu", ["competition=watson", "model.backbone=bert", f"model.weights={tmp_path}"])
    with pytest.raises(
        PetalsError, match=r"^model.weights='.*': model.backbone=bert loads a keras-hub preset"
    ):
        check_network(config, load_spec("watson"), "jax")
    config = load_config("cpu", ["competition=watson", "model.weights=imagenet"])
    with pytest.raises(PetalsError, match=r"^model.weights='imagenet': bert-tiny starts from random weights"):
        check_network(config, load_spec("watson"), "tensorflow")


def test_pairs_become_cls_premise_sep_hypothesis_sep_with_segment_ids():
    tokenizer = bert.new_tokenizer(
        load_config("cpu", ["competition=watson", "data.vocabulary_size=50"]),
        (np.array(["the cat sat"]), np.array(["a dog ran"])),
    )
    encoded = bert.Encoder(tokenizer, 12)((np.array(["The cat sat."]), np.array(["A dog ran"])))
    ids = tokenizer.token_to_id
    expected = [ids("[CLS]"), ids("the"), ids("cat"), ids("sat"), ids("."), ids("[SEP]")]
    expected += [ids("a"), ids("dog"), ids("ran"), ids("[SEP]"), 0, 0]
    assert encoded["token_ids"][0].tolist() == expected
    assert encoded["segment_ids"][0].tolist() == [0] * 6 + [1] * 4 + [0, 0]
    assert encoded["padding_mask"][0].tolist() == [1] * 10 + [0, 0]


def test_each_text_is_tokenized_once_per_tokenizer_and_the_folds_share_it():
    config = load_config("cpu", ["competition=watson", "data.vocabulary_size=50"])
    premises = np.array([f"the cat sat {i}" for i in range(12)])
    hypotheses = np.array([f"a dog ran {i % 3}" for i in range(12)])
    tokenizer = bert.new_tokenizer(config, (premises, hypotheses))
    bert._ENCODED.clear()
    everything = bert.Encoder(tokenizer, 12)((premises, hypotheses))
    # Another fold's encoder, of a tokenizer built again from the same vocabulary (a preset's).
    fold = bert.Encoder(bert.new_tokenizer(config, (premises, hypotheses)), 12)
    rows = np.array([7, 2, 2, 11])
    share = fold((premises[rows], hypotheses[rows]))
    assert fold.tokenized == 0  # every text came from memory
    for name in bert.INPUTS:
        assert np.array_equal(share[name], everything[name][rows])
    bert._ENCODED.clear()
    fresh = bert.Encoder(tokenizer, 12)((premises[rows], hypotheses[rows]))
    for name in bert.INPUTS:  # what memory gave is what the tokenizer gives
        assert np.array_equal(share[name], fresh[name])
    # A fold's own vocabulary (fitted on its training texts) is another tokenizer: tokenized again.
    other = bert.new_tokenizer(config, (premises[:6], hypotheses[:6]))
    again = bert.Encoder(other, 12)
    again((premises[rows], hypotheses[rows]))
    assert again.tokenized == 3 and bert.Encoder(tokenizer, 16).key != bert.Encoder(tokenizer, 12).key


@pytest.mark.slow
@pytest.mark.thorough  # 7 CPU-s: gs:// checkpoints are a TPU run's; make test resumes from local files
def test_a_bert_run_checkpoints_to_a_tf_gfile_path_and_resumes_from_it(pairs, cpu, tmp_path, caplog):
    """Checkpoints on a `tf.io.gfile` filesystem (TensorFlow's in-memory `ram://`, standing in for
    `gs://`): a longer run of the same config resumes from the last one there."""
    folder = f"ram://petals-test-{tmp_path.name}/checkpoints"
    config = load_config("cpu", [*TINY, "train.epochs=2"])
    job = train.prepare(config, cpu, pairs, tmp_path / "runs", "remote", folder)
    train.fit(job, progress=False)
    import tensorflow as tf

    assert tf.io.gfile.exists(f"{folder}/latest.json") and not (job.run_dir / "checkpoints").exists()
    vocabulary = (job.run_dir / "tokenizer" / "assets" / "tokenizer" / "vocabulary.txt").read_text()
    longer = load_config("cpu", [*TINY, "train.epochs=3"])
    again = train.prepare(longer, cpu, pairs, tmp_path / "runs", "remote", folder)
    (again.run_dir / "metrics.json").unlink()  # the same run, asked for one epoch more
    with caplog.at_level("INFO"):
        train.fit(again, progress=False)
    assert "resuming" in caplog.text and "after epoch 2" in caplog.text
    assert pd.read_csv(again.run_dir / "history.csv")["epoch"].tolist() == [1, 2, 3]
    # The resumed run tokenizes with the tokenizer it started with.
    assert (again.run_dir / "tokenizer" / "assets" / "tokenizer" / "vocabulary.txt").read_text() == vocabulary
