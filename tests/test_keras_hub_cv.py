"""Every wired keras-hub vision family through the feature cache and a 2-fold CV group on the tiny
data: a probe (the head alone on the family's pooled features, `network_cut.cut`), its preset a tiny
random one saved with keras-hub's own `save_to_preset` (tests/keras_hub_tiny.py). One pooled pass
serves both folds; the group's out-of-fold predictions cover every labelled example once. ConvNeXt
(keras.applications, random weights) runs beside them. Heavy tier: 15-25 s a family on two shared
cores, 288 s for the seventeen keras-hub families at b1575a4."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from pipeline import cli
from pipeline.core.rundir import RunDir
from pipeline.modeling import feature_cache
from pipeline.modeling.inference import Predictions
from pipeline.networks import keras_hub_vision
from tests.conftest import TINY
from tests.keras_hub_tiny import write_vision_preset

pytest.importorskip("keras_hub")

PROBE = ("augment.where=host", "train.feature_cache=true", "train.frozen_epochs=2", "train.feature_views=1",
         "train.steps_per_epoch=0")  # fmt: skip


@pytest.fixture(scope="module")
def data_dir(tiny_data_dir, tmp_path_factory):
    return shutil.copytree(tiny_data_dir, tmp_path_factory.mktemp("cv-families") / "data")


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.parametrize("name", [*keras_hub_vision.BACKBONES, "convnext-tiny"])
def test_each_vision_family_probes_its_cached_features_in_a_two_fold_cv_group(
    name, data_dir, tmp_path, monkeypatch
):
    if name in keras_hub_vision.BACKBONES:
        weights = write_vision_preset(keras_hub_vision.BACKBONES[name], tmp_path / "preset")
    else:  # keras.applications' ConvNeXt beside them, random (its ImageNet file: test_kernel_weights.py)
        weights = "none"
    shared, real = [], feature_cache.shared_folder
    monkeypatch.setattr(feature_cache, "shared_folder", lambda *a: shared.append(real(*a)) or shared[-1])
    runs = tmp_path / "runs"
    sets = [*TINY, *PROBE, f"model.backbone={name}", f"model.weights={weights}"]
    args = ["cv", "train", "--folds", "2", "--data-dir", str(data_dir), "--runs-dir", str(runs),
            "--submissions-dir", str(tmp_path / "subs"), "--recipe", "default", "--backend", "tensorflow",
            *(a for value in sets for a in ("--set", value))]  # fmt: skip
    assert cli.main(args) == 0
    assert len(shared) >= 2 and len(set(shared)) == 1  # both folds read one pooled cache
    (group,) = [RunDir(p) for p in runs.glob("cv2-*")]
    metrics = json.loads((group.path / "metrics.json").read_text())
    oof = Predictions.load(group.predictions("oof"))
    ids = oof.ids.tolist()
    assert ids == sorted(set(ids)) and len(ids) == metrics["examples"]  # every labelled example once
    assert np.isfinite(oof.probabilities).all() and np.isfinite(metrics["cv_score"])
    np.testing.assert_allclose(oof.probabilities.sum(axis=1), 1.0, rtol=1e-4)
