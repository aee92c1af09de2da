"""The linear probe as a run: the head fitted by logistic regression with C by an inner CV that
keeps an example's views and a group's examples together, written into an ordinary network."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LogisticRegression

from pipeline.core.errors import PetalsError
from pipeline.modeling import probe
from pipeline.modeling.inference import predict_split
from pipeline.stages import train
from pipeline.tasks.recipe_config import load_config
from tests.conftest import TINY

PROBE = [
    *TINY,
    "model.backbone=efficientnet-lite0",
    "model.weights=imagenet",
    "train.epochs=1",
    "train.frozen_epochs=1",
    "train.feature_cache=true",
    "train.feature_views=2",
    "train.head_solver=logistic",
]


def softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    return np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)


def blobs(classes: int, per_class: int, views: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 3, (classes, 6)) * rng.uniform(0.1, 10, 6)  # unequal scales
    labels = np.repeat(np.arange(classes), per_class)
    features = np.stack([centres[labels] + rng.normal(0, 2, (len(labels), 6)) for _ in range(views)])
    return features, labels


@pytest.mark.parametrize("classes", [2, 4])
def test_the_written_head_gives_logistic_regressions_probabilities(classes):
    features, labels = blobs(classes, 12, views=2)
    ids = np.array([f"e{i}" for i in range(len(labels))])
    kernel, bias, c, folds = probe.fit(features, labels, ids, classes, seed=0)
    assert folds == 5 and c in probe.CS
    x, y = features.reshape(-1, 6), np.tile(labels, 2)
    mean, scale = x.mean(0), x.std(0)
    standardised = (x - mean) / scale
    reference = LogisticRegression(C=c, max_iter=2000).fit(standardised, y)
    np.testing.assert_allclose(softmax(x @ kernel + bias), reference.predict_proba(standardised), atol=2e-3)


def test_a_class_the_training_part_lacks_gets_no_probability():
    features, labels = blobs(3, 10, views=1)
    kernel, bias, _, _ = probe.fit(features, labels, np.arange(30).astype(str), num_classes=5, seed=0)
    p = softmax(features[0] @ kernel + bias)
    assert p[:, 3:].max() < 1e-9 and np.allclose(p.sum(1), 1)


def test_inner_folds_keep_an_examples_views_and_a_groups_examples_together():
    labels = np.repeat([0, 1], 20)
    groups = np.array([f"g{i // 4}" for i in range(40)])  # ten groups of four, one class each
    splits = probe.inner_folds(labels, groups, views=3, seed=0)
    assert len(splits) == 5
    held_everywhere = np.concatenate([held for _, held in splits])
    assert sorted(held_everywhere) == list(range(120))  # every row of every view held out once
    for kept, held in splits:
        assert not set(kept) & set(held)
        assert not {i % 40 for i in kept} & {i % 40 for i in held}  # no example on both sides
        assert not set(groups[kept % 40]) & set(groups[held % 40])  # no group on both sides
    # Two groups of the rarest class: two inner folds at most; one group: no inner CV (C = 1).
    assert len(probe.inner_folds(labels, np.where(labels == 0, "a", groups), 1, 0)) == 0
    rare = np.where(labels == 0, np.where(np.arange(40) < 10, "a", "b"), groups)
    assert len(probe.inner_folds(labels, rare, 1, 0)) == 2


def test_grouped_inner_cv_does_not_reward_memorising_a_group():
    # Each group carries its own signature feature and one class: a small penalty memorises the
    # signatures. Held out by example, those signatures are seen in training and C runs high; held
    # out by group they are new, and the chosen penalty is no weaker.
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(20), 5)
    labels = groups % 2
    signature = np.eye(20)[groups] * 5
    noise = rng.normal(0, 1, (100, 4)) + labels[:, None] * 0.3
    features = np.concatenate([signature, noise], axis=1)[None]
    _, _, c_rows, _ = probe.fit(features, labels, np.arange(100).astype(str), 2, seed=0)
    _, _, c_groups, _ = probe.fit(features, labels, groups.astype(str), 2, seed=0)
    assert c_groups < c_rows


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["train.feature_cache=false"], "train.feature_cache=true"),
        (["train.epochs=3", "train.frozen_epochs=3"], "train.epochs=1"),
        (["train.frozen_epochs=0", "train.unfrozen_layers=11"], "the backbone frozen"),
    ],
)
def test_a_config_the_probe_cannot_run_is_one_line(overrides, message):
    config = load_config(overrides=[*PROBE, *overrides])
    task = type("Task", (), {"activation": "softmax"})()
    with pytest.raises(PetalsError, match=rf"train\.head_solver=logistic .*{message}"):
        probe.check(config, task)
    multi = type("Task", (), {"activation": "sigmoid"})()
    with pytest.raises(PetalsError, match="one class per example"):
        probe.check(load_config(overrides=PROBE), multi)


@pytest.mark.slow
@pytest.mark.thorough  # a probe on cached features: test_keras_hub's DINOv2 probe, test_features'
def test_a_probe_run_scores_on_images_what_it_scored_on_its_cache(cpu, tiny_data_dir, tmp_path, caplog):
    caplog.set_level("INFO")
    job = train.prepare(load_config(overrides=PROBE), cpu, tiny_data_dir, tmp_path, None, None)
    metrics = train.fit(job, progress=False)
    # 128 tiny images of 104 classes: too few of any class for an inner CV, and it says so.
    assert "the head fitted by logistic regression on 128 examples x 2 views (C=1: too few" in caplog.text
    history = pd.read_csv(job.run.history_file)
    assert history["epoch"].tolist() == [1] and metrics["best_epoch"] == 1
    assert history["images"].tolist() == [2 * 128]  # the rows fitted: two views of each example
    predictions = predict_split(job.run, tiny_data_dir, "val", 1, cpu, as_scored=False)
    assert job.spec.metric.score(predictions.labels, predictions.probabilities) == pytest.approx(
        history["val_macro_f1"].iloc[0], abs=1e-3
    )


@pytest.mark.slow
@pytest.mark.heavy  # JAX compiles Lite0 below the cut
def test_a_probe_run_under_jax_scores_on_images_what_it_scored_on_its_cache(tiny_data_dir, tmp_path):
    from tests.conftest import run_python

    done = run_python(
        f"""
        from pathlib import Path
        from pipeline.core import device
        from pipeline.modeling.inference import predict_split
        from pipeline.tasks.recipe_config import load_config
        from pipeline.stages import train
        platform = device.pick("jax", "cpu")
        job = train.prepare(load_config(overrides={PROBE!r}), platform, Path("{tiny_data_dir}"),
                            Path("{tmp_path}"), "jax", None)
        metrics = train.fit(job, progress=False)
        seen = predict_split(job.run, Path("{tiny_data_dir}"), "val", 1, platform, as_scored=False)
        print("scores", metrics["val_macro_f1"], job.spec.metric.score(seen.labels, seen.probabilities))
        """,
        env={"KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    cached, on_images = map(float, done.stdout.split()[-2:])
    assert on_images == pytest.approx(cached, abs=1e-3)
