"""Predictions of feature-cache runs through their cut: the frozen network below it runs once.

A run trained on cached activations (`pipeline.modeling.features`) is `top(bottom(pixels))`, and
`bottom` never trained: every fold of a CV group has the same one. On a CPU most of a prediction
is `bottom` (EfficientNet-Lite0 at 192 px: all but the last block), so a group's K folds
predicting the test set each from pixels do the same work K times. Here `bottom` runs over the
test set once (saved in pieces, as the training cache is) and each fold's `top` reads its outputs;
a fold whose `bottom` differs (its weights' digest) is left to the whole network.

A fold's out-of-fold predictions cost nothing: training scored its held-out part through the cut
at every epoch, and `save_scored` keeps the probabilities of the epoch whose weights it saved as
best. Both kinds use float16 activations below the cut, as training's val scores do (the top
runs in training's precision for the OOF rows, in float32 for the test set: the same on a CPU),
so a group's CV score and its test predictions are made alike; they differ from the whole
network's by that rounding (`tests/test_cut_predict.py` bounds it; on the flowers: 0.0006).
With `train.ema`, TensorFlow's optimizer also averages the frozen bottom's weights (by rounding
only): each fold's bottom digest then differs and its test set is predicted from pixels.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from pipeline import networks
from pipeline.core.rundir import RunDir
from pipeline.modeling import feature_cache, feature_pass, network_cut
from pipeline.modeling.inference import THROUGH, Predictions, made_from

if TYPE_CHECKING:
    from pipeline.tasks.competitions import Competition

log = logging.getLogger(__name__)

FOLDER = "features"  # inside a CV group's dir while its folds predict the test set


def weights_digest(model) -> str:
    """The values of every weight of `model`, as a short hash: two bottoms that compute the same."""
    digest = hashlib.sha256()
    for value in model.get_weights():
        digest.update(np.ascontiguousarray(value).tobytes())
    return digest.hexdigest()[:16]


def save_scored(run: RunDir, val, probabilities: np.ndarray, manifest: dict, writer: bool) -> None:
    """A run's val probabilities (a fold's held-out ones) as training scored them with the weights
    just saved as best (`val`: its FeatureSplit, in the same order), kept as its val predictions
    at TTA 1 (`inference.scored` reads them)."""
    if not writer:
        return
    Predictions(
        ids=np.asarray(val.ids).astype(str),
        probabilities=np.asarray(probabilities, np.float32),
        labels=np.asarray(val.labels),
        tta=1,
        source=made_from(run, manifest, 1, THROUGH),
    ).save(run.predictions("val", 1))


def test_through_cut(
    runs: list[RunDir], competition: Competition, data_dir: Path, folder: Path, platform
) -> dict[int, Predictions]:
    """Test predictions (TTA 1) of the runs (all on `competition`) that can be predicted through
    their shared cut, by their index in `runs`: each run's saved ones when up to date, else its
    `top` over `bottom`'s outputs, computed once in `folder` (removed after). Runs without weights,
    or whose `bottom` is not the first's, are left out for the caller to predict otherwise."""
    from pipeline.modeling.inference import check_same_data, load_inference_model, predict_batches

    config = runs[0].read_config()
    spec = competition.spec
    # An image_table's top reads its rows' columns too: its runs predict the test set whole.
    if (
        not config.train.feature_cache
        or networks.get(config.model.backbone).reads_ids
        or spec.feature_columns
    ):
        return {}
    done: dict[int, Predictions] = {}
    rows, bottom = None, None
    for index, run in enumerate(runs):
        if not run.best_weights.is_file():
            continue
        manifest = check_same_data(run, data_dir)
        source = made_from(run, manifest, 1, THROUGH)
        path = run.predictions("test", 1)
        saved = Predictions.load(path) if path.is_file() else None
        # The processes predict together: every one reuses its saved predictions, or none does.
        if feature_pass.agreed(platform, int(saved is not None and saved.source == source)):
            done[index] = saved
            continue
        with platform.scope():
            cut_ = network_cut.cut_for(load_inference_model(run, competition), config)
        digest = weights_digest(cut_.bottom)
        if rows is None:
            bottom = digest
            rows = _test_rows(cut_, digest, config, spec, data_dir, manifest, folder, platform)
        if digest != bottom:
            log.info("%s: its network below the cut is not the first fold's: predicted whole", run.name)
            continue
        batches = _batches(rows.features[0])
        probabilities = predict_batches(cut_.top, batches, platform).astype(np.float32)
        done[index] = Predictions(rows.ids, probabilities, tta=1, source=source)
        if platform.hosts.writer:
            done[index].save(path)
        log.info("%s: test predicted through the cut (%d examples)", run.name, len(rows.ids))
    shutil.rmtree(folder, ignore_errors=True)  # each process's copy, where runs dirs are not shared
    return done


def _batches(activations: np.ndarray):
    return feature_cache.float32_batches(activations, feature_pass.EXTRACT_BATCH)


def _test_rows(cut_, digest: str, config, spec, data_dir: Path, manifest: dict, folder: Path, platform):
    """`bottom`'s outputs over the test set (float16, one view: the images), computed in pieces."""
    from pipeline.data import splits
    from pipeline.data.manifest import locate_data
    from pipeline.tasks.competitions import task_of

    split = splits.split_for(locate_data(data_dir), spec, config, "test", None)
    signature = {
        **feature_cache.signature(cut_, config, split, manifest.get("fingerprint", "")),
        "bottom": digest,
    }
    view = task_of(spec).test_view(config, spec)
    plain = [lambda images: view(images, 0)]
    return feature_pass.rows_of(
        "test", split, plain, cut_.bottom, config, folder, platform, signature, labeled=False
    )
