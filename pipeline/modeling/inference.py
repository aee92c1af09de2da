"""Predictions of a trained run: class probabilities for the val or test split, with TTA.

The evaluate and predict stages share this. Probabilities are saved in the run dir
(`val_predictions.npz`, `test_predictions-tta4.npz`) with the ids they belong to, so ensembles
line runs up by id, and a rerun reuses them while the weights, the data and the number of
test-time-augmentation passes are unchanged.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.core.errors import PetalsError
from pipeline.core.files import sha256, write_atomically

log = logging.getLogger(__name__)


def predictions_path(run_dir: Path, split: str, tta: int = 1) -> Path:
    """`val_predictions.npz`, `test_predictions-tta4.npz`: one file per split and TTA setting."""
    return run_dir / f"{split}_predictions{f'-tta{tta}' if tta > 1 else ''}.npz"


@dataclass
class Predictions:
    """One split's probabilities [n, classes] and ids (and labels, for val), padding removed."""

    ids: np.ndarray
    probabilities: np.ndarray
    labels: np.ndarray | None = None
    tta: int = 1
    source: str = ""  # what they were made from: weights and data digests, TTA

    def save(self, path: Path) -> None:
        arrays = {"ids": self.ids.astype(str), "probabilities": self.probabilities.astype(np.float32)}
        if self.labels is not None:
            arrays["labels"] = self.labels.astype(np.int32)

        def write(tmp: Path) -> None:
            with open(tmp, "wb") as f:  # a file object, so numpy adds no `.npz` to the temporary name
                np.savez_compressed(f, tta=self.tta, source=self.source, **arrays)

        write_atomically(path, write)

    @classmethod
    def load(cls, path: Path) -> Predictions:
        try:
            with np.load(path, allow_pickle=False) as saved:
                return cls(
                    ids=saved["ids"],
                    probabilities=saved["probabilities"],
                    labels=saved.get("labels"),
                    tta=int(saved["tta"]),
                    source=str(saved["source"]),
                )
        except (OSError, ValueError, KeyError) as err:
            raise PetalsError(f"{path}: unreadable predictions ({err}); delete it and rerun") from None

    @property
    def predicted(self) -> np.ndarray:
        return self.probabilities.argmax(axis=1)

    def by_ids(self, ids: np.ndarray) -> Predictions:
        """The same predictions in the order of `ids` (which must all be present)."""
        position = {key: i for i, key in enumerate(self.ids)}
        order = np.array([position[key] for key in ids])
        labels = self.labels[order] if self.labels is not None else None
        return dataclasses.replace(
            self, ids=self.ids[order], probabilities=self.probabilities[order], labels=labels
        )


# ----------------------------------------------------------------------------- finding runs


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """train's run arguments, plus the recipe arguments that name a run the way `train` does."""
    from pipeline.core import config as config_module
    from pipeline.stages.train import add_run_arguments as add_train_run_arguments

    add_train_run_arguments(
        parser, "run id or run dir (default: the run `train` makes of the same --recipe and --set)"
    )
    config_module.add_config_arguments(parser)


def find_run(args: argparse.Namespace, device: str) -> Path:
    """The run dir `--run` names, or the one `train` makes of the same recipe, overrides and data."""
    from pipeline.core import config as config_module
    from pipeline.stages.fetch import read_manifest
    from pipeline.stages.train import METRICS, resolve_recipe, run_id

    if args.run_id:
        given = Path(args.run_id)
        run_dir = given if (given / "config.json").is_file() else args.runs_dir / args.run_id
    else:
        config = config_module.load_config(resolve_recipe(args.recipe, device), args.overrides)
        manifest = read_manifest(args.data_dir) or {}
        run_dir = args.runs_dir / run_id(config, manifest.get("fingerprint", ""))
    if not (run_dir / METRICS).is_file():
        hint = "train it first (make train)" if (run_dir / "config.json").is_file() else "no such run"
        raise PetalsError(f"{run_dir}: not a finished run: {hint}")
    return run_dir


def check_same_data(run_dir: Path, data_dir: Path) -> dict:
    """The data dir's manifest, after checking it is the data the run was trained on."""
    from pipeline.stages.fetch import read_manifest

    manifest = read_manifest(data_dir)
    if manifest is None:
        raise PetalsError(f"{data_dir}: no manifest.json; run `make fetch` (or pass the fetched --data-dir)")
    trained_on = json.loads((run_dir / "data_manifest.json").read_text())
    if trained_on.get("fingerprint") != manifest.get("fingerprint"):
        raise PetalsError(
            f"{run_dir.name} was trained on {trained_on.get('origin')} "
            f"({trained_on.get('fingerprint', '?')[:15]}…), but {data_dir} holds {manifest.get('origin')} "
            f"({manifest.get('fingerprint', '?')[:15]}…): "
            "pass the run's --data-dir"
        )
    return manifest


# ----------------------------------------------------------------------------- predicting


def tta_augment(config):
    """The recipe's geometric and colour augmentation for TTA passes: nothing that hides or mixes."""
    return dataclasses.replace(config.augment, erasing=0.0, gridmask=0.0, cutmix=0.0, mixup=0.0)


def view(images, index: int, aug, num_classes: int, shift_scale: float):
    """Pass `index` of test-time augmentation: 0 the images, 1 mirrored, then random augmentations."""
    import tensorflow as tf

    from pipeline.data import augment

    images = tf.cast(images, tf.float32)
    if index == 0:
        return images
    if index == 1:
        return tf.image.flip_left_right(images)
    labels = tf.zeros(tf.shape(images)[:1], tf.int32)
    return augment.augment_batch(images, labels, aug, num_classes, shift_scale=shift_scale)[0]


def split_files(config, spec, root: str, split: str) -> list[str]:
    """The shards of `split`; for a k-fold run, "val" is the fold it held out of train + val."""
    from pipeline.data import datasets
    from pipeline.stages.train import held_out

    size = config.data.image_size
    if split == "val" and config.train.folds:
        both = datasets.shard_files(root, spec, size, "train") + datasets.shard_files(root, spec, size, "val")
        return held_out(both, config.train.folds, config.train.fold)[1]
    return datasets.shard_files(root, spec, size, split)


def predict_split(run_dir: Path, data_dir: Path, split: str, tta: int, picked) -> Predictions:
    """Class probabilities of `split` (val or test) for the run's best weights, TTA passes averaged."""
    import tensorflow as tf

    from competition import load_spec
    from pipeline.core import config as config_module
    from pipeline.data import datasets
    from pipeline.modeling import loops
    from pipeline.stages.fetch import locate_data

    if tta < 1:
        raise PetalsError(f"--tta {tta}: the number of passes must be at least 1")
    manifest = check_same_data(run_dir, data_dir)
    config = config_module.read_config(run_dir / "config.json")
    spec = load_spec(config.competition)
    weights = run_dir / loops.BEST
    source = json.dumps(
        {"weights": sha256(weights)[:16], "data": manifest.get("fingerprint"), "tta": tta}, sort_keys=True
    )
    path = predictions_path(run_dir, split, tta)
    if path.is_file():
        saved = Predictions.load(path)
        if saved.source == source:
            log.info("%s: %s predictions are up to date", run_dir.name, split)
            return saved
    files = split_files(config, spec, locate_data(data_dir), split)
    labeled = spec.is_labeled(split)
    batch = datasets.global_batch_size(config.data.batch_size, picked.replicas)
    dataset = datasets.eval_dataset(
        files, spec, config, batch, labeled=labeled, pad_to_batch=True, with_ids=True
    )
    with picked.strategy.scope():
        net = loops.load_inference_model(run_dir)
    with datasets.naming_bad_records(files, spec, config.data.image_size, labeled):
        tags = list(dataset.map(lambda images, *tags: tags).as_numpy_iterator())
        ids = np.concatenate([t[-1] for t in tags]).astype(str)
        real = ids != datasets.PAD_ID.decode()
        total = np.zeros((int(real.sum()), spec.num_classes), np.float64)
        aug, scale = tta_augment(config), datasets.shift_scale(config)
        for index in range(tta):
            tf.random.set_seed(config.seed + index)  # the same random views on every rerun
            views = dataset.map(lambda images, *tags, i=index: view(images, i, aug, spec.num_classes, scale))
            total += net.predict(views, verbose=0)[real]
            log.info("%s: %s pass %d/%d done", run_dir.name, split, index + 1, tta)
    labels = np.concatenate([t[0] for t in tags])[real] if labeled else None
    predictions = Predictions(
        ids=ids[real], probabilities=(total / tta).astype(np.float32), labels=labels, tta=tta, source=source
    )
    predictions.save(path)
    return predictions
