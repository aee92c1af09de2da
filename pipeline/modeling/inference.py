"""Predictions of a trained run: class probabilities for the val or test split, with TTA.

The evaluate and predict stages share this. Probabilities are saved in the run dir
(`val_predictions.npz`, `test_predictions-tta4.npz`) with the ids they belong to, so ensembles
line runs up by id, and a rerun reuses them while the weights, the data and the number of
test-time-augmentation passes are unchanged.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from pipeline.core import rundir
from pipeline.core.errors import PetalsError, first_line
from pipeline.core.files import sha256, write_atomically
from pipeline.core.progress import Progress
from pipeline.core.rundir import RunDir
from pipeline.data import targets
from pipeline.modeling import host_predict
from pipeline.tasks.competitions import size_of, task_of

if TYPE_CHECKING:
    import keras

    from pipeline.core.options import ScoreOptions
    from pipeline.tasks.competitions import Competition

log = logging.getLogger(__name__)


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
            arrays["labels"] = targets.stored(self.labels)  # class ids, rows of labels, or numbers

        def write(tmp: Path) -> None:
            with open(tmp, "wb") as f:  # a file object, so numpy adds no `.npz` to the temporary name
                np.savez_compressed(f, tta=self.tta, source=self.source, **arrays)

        write_atomically(path, write)

    @classmethod
    def load(cls, path: Path) -> Predictions:
        """The predictions saved at `path`: they may come back in a kernel's downloaded output, so
        each array's size is read from its header and bounded before it is read (a 200-byte file
        may declare 10^12 cells, a 2 MB one inflate to gigabytes), and their shapes must agree."""
        try:
            _check_sizes(path)
            with np.load(path, allow_pickle=False) as saved:
                found = cls(
                    ids=saved["ids"],
                    probabilities=saved["probabilities"],
                    labels=saved.get("labels"),
                    tta=int(saved["tta"]),
                    source=str(saved["source"]),
                )
        except (OSError, ValueError, KeyError, TypeError, OverflowError, zipfile.BadZipFile) as err:
            raise PetalsError(f"{path}: unreadable predictions ({err}); delete it and rerun") from None
        rows = len(found.ids)
        if found.ids.ndim != 1 or found.probabilities.ndim != 2 or len(found.probabilities) != rows:
            raise PetalsError(
                f"{path}: ids {found.ids.shape} and probabilities {found.probabilities.shape} disagree"
            )
        if found.labels is not None and len(found.labels) != rows:
            raise PetalsError(f"{path}: {len(found.labels)} labels for {rows} rows")
        return found

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


# A split's saved predictions, every array of them: a million rows of 104 classes are 0.4 GiB.
MAX_PREDICTION_BYTES = 4 * 2**30
HEADERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def _check_sizes(path: Path) -> None:
    """Each array of the .npz at `path` within MAX_PREDICTION_BYTES by its zip entry and by the
    shape its header declares (read before any array is), and no larger than its entry holds."""
    total = 0
    with zipfile.ZipFile(path) as archive:
        for entry in archive.infolist():
            with archive.open(entry) as member:
                version = np.lib.format.read_magic(member)
                read = HEADERS.get(version)
                if read is None:
                    raise ValueError(f"{entry.filename}: .npy format {version}, not one numpy writes here")
                shape, _, dtype = read(member)
            cells = int(np.prod(shape, dtype=object))
            declared = cells * dtype.itemsize
            total += max(entry.file_size, declared)
            if declared > entry.file_size or total > MAX_PREDICTION_BYTES:
                raise ValueError(
                    f"{entry.filename} declares {cells:,} cells of {dtype} in {entry.file_size:,} bytes"
                    if declared > entry.file_size
                    else f"larger than {MAX_PREDICTION_BYTES:,} bytes"
                )


# ----------------------------------------------------------------------------- finding runs


def find_run(opts: ScoreOptions, config, competition: Competition) -> RunDir:
    """The finished run `train` makes of `config` (the options' recipe and overrides, on the
    competition it names) and the options' data."""
    from pipeline.data.manifest import read_manifest

    manifest = read_manifest(opts.data_dir) or {}
    return rundir.finished_run(
        opts.runs_dir, rundir.run_id(config, rundir.data_identity(manifest), size_of(config, competition))
    )


def check_same_data(run: RunDir, data_dir: Path) -> dict:
    """The data dir's manifest, after checking it is the data the run was trained on."""
    from pipeline.data.manifest import read_manifest

    manifest = read_manifest(data_dir)
    run.check_same_data(manifest, data_dir)
    return manifest


# ----------------------------------------------------------------------------- inference model


def load_inference_model(run: RunDir | Path, competition: Competition, weights: str = "best") -> keras.Model:
    """The trained classifier of `run` (on `competition`, its config's) with a variable batch
    dimension, in float32, on whatever backend and device is here (the CPU included): weights
    trained at a static batch on a TPU under JAX serve at any batch under TensorFlow."""
    import keras

    from pipeline import networks
    from pipeline.networks import backbone

    run = run if isinstance(run, RunDir) else RunDir(run)
    config = run.read_config()
    spec = competition.spec
    keras.mixed_precision.set_global_policy("float32")
    # The first values, overwritten below, are still laid out on a multi-host mesh, which wants
    # the same values from every process.
    keras.utils.set_random_seed(config.seed)
    vocabulary_size = networks.vocabulary_size(config, run.path)
    net = networks.build(
        config,
        spec,
        activation=competition.task.activation,
        vocabulary_size=vocabulary_size,
        run_dir=run.path,
    )
    path = run.weights(weights)
    if not path.is_file():
        raise PetalsError(f"{path}: missing; train the run first")
    try:
        with backbone.misfit_weights_raise():
            net.load_weights(path)
    except ValueError as err:
        raise PetalsError(f"{path}: does not fit this run's model ({first_line(err)[:200]})") from None
    return net


# ----------------------------------------------------------------------------- predicting


def check_tta(spec, tta: int) -> None:
    """The views `tta` passes take exist for the competition's task; else one line."""
    task_of(spec).check_views(spec, tta)


def val_scores(spec, probabilities: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """Loss and accuracy (the competition's task's) and the competition's metric of val predictions
    (padding already dropped)."""
    scores = task_of(spec).scores(probabilities, labels)
    return {
        **{f"val_{name}": value for name, value in scores.items()},
        spec.score_key: spec.metric.score(labels, probabilities),
    }


# One replica on a CPU under TensorFlow: two calls in flight, so that one call's serial stretches
# (Python, op dispatch, the small ops between convolutions) are filled by the other's work.
# EfficientNet-Lite0 below the CPU recipe's cut on 2 cores: 101-114 examples/s against 72-87 for
# one call at a time (`make bench-forward`). Each call is the same computation as alone: the
# outputs are equal.
CALLS_IN_FLIGHT = 2


def val_probabilities(model, net, inputs, platform, config, run_dir: Path) -> np.ndarray:
    """Training's val outputs of `model` (`net` inside it) in the run `run_dir`: a probe's frozen
    sentence encoder through its vectors (`vector_predict`: cut batches, and kept beside the runs
    for evaluate to read), any other network whole (`predict_batches`)."""
    from pipeline.modeling import vector_predict

    kept = vector_predict.kept(config, run_dir.parent)
    head = vector_predict.above(net) if kept is not None and streams(platform) else None
    if head is None:
        return predict_batches(model, inputs, platform)
    return vector_predict.predict(net, head, inputs.as_numpy_iterator(), Progress("", 0), kept)


def predict_batches(model, batches, platform, bar: Progress | None = None) -> np.ndarray:
    """The model's outputs for every batch of a dataset of inputs, in order (each batch counted on
    `bar` as its outputs come, where one is given).

    One replica: batch by batch with `predict_on_batch`, about twice Keras `predict`'s images/s
    on 2 CPU cores (EfficientNet-Lite0 at 192 px: 141-173 against 75-92; `predict` feeds its own
    tf.data pipeline, which competes for the cores), CALLS_IN_FLIGHT at a time on a CPU under
    TensorFlow (`streamed`). Under a strategy of several replicas `predict_on_batch` would run the
    whole batch on each, so `predict` splits it there. Across several processes each predicts its
    share of the batches (`host_predict`).
    """
    from pipeline.data.passes import untuned

    batches = untuned(batches)
    bar = bar or Progress("", 0)  # counts nothing
    if platform.hosts.several:
        return host_predict.predict_shared(model, batches, platform, bar)
    if platform.replicas > 1:
        outputs = np.asarray(model.predict(batches, verbose=0))
        bar.advance(len(outputs))
        return outputs
    outputs = []
    for out in streamed(model, batches.as_numpy_iterator(), platform):
        outputs.append(out)
        bar.advance(len(out))
    return np.concatenate(outputs)


def streams(platform) -> bool:
    """Whether `streamed` serves this platform: one process, one replica."""
    return not platform.hosts.several and platform.replicas == 1


def streamed(model, inputs, platform) -> Iterator[np.ndarray]:
    """`model.predict_on_batch(x)` for each of `inputs`, yielded in order as the calls end, with
    CALLS_IN_FLIGHT calls at once on a CPU under TensorFlow (one process, one replica: `streams`).
    A caller that saves as the outputs come keeps the calls going across its saves."""
    # TensorFlow only: Keras on JAX hands the variables' buffers to each call (donated) and writes
    # them back after, so a second call in flight could read deleted arrays.
    calls = CALLS_IN_FLIGHT if platform.backend == "tensorflow" and platform.device == "CPU" else 1
    built = getattr(model, "predict_function", None) is not None  # Keras builds it in the first call
    return in_flight(model.predict_on_batch, inputs, calls, built)


def in_flight(call, inputs, calls: int, built: bool = False) -> Iterator[np.ndarray]:
    """`call(x)` for each of `inputs`, yielded in order, up to `calls` at once (and no more inputs
    held); unless `built`, the first call runs alone (it builds what the others share). Closing
    the generator early waits for the calls in flight."""
    inputs = iter(inputs)
    if not built:
        first = next(inputs, None)
        if first is None:
            return
        yield np.asarray(call(first))
    if calls <= 1:
        for x in inputs:
            yield np.asarray(call(x))
        return
    with ThreadPoolExecutor(calls, thread_name_prefix="petals-predict") as pool:
        pending: collections.deque = collections.deque()
        for x in inputs:
            pending.append(pool.submit(call, x))
            if len(pending) >= calls:
                yield np.asarray(pending.popleft().result())
        while pending:
            yield np.asarray(pending.popleft().result())


THROUGH = "feature cache: float16 activations below the cut"  # the `through` of such predictions


def made_from(run: RunDir, manifest: dict, tta: int, through: str = "") -> str:
    """What a run's saved predictions were made from: its best weights, the data and the TTA, and
    `through` the feature cache's cut when not by the whole network from pixels."""
    made = {"weights": sha256(run.best_weights)[:16], "data": manifest.get("fingerprint"), "tta": tta}
    return json.dumps({**made, **({"through": through} if through else {})}, sort_keys=True)


def scored(run: RunDir, manifest: dict) -> Predictions | None:
    """The val predictions training kept (`cut_predict.save_scored`), if they are of the run's
    best weights and this data."""
    path = run.predictions("val", 1)
    if not path.is_file() or not run.best_weights.is_file():
        return None
    saved = Predictions.load(path)
    return saved if saved.source == made_from(run, manifest, 1, THROUGH) else None


def predict_split(
    run: RunDir,
    competition: Competition,
    data_dir: Path,
    split: str,
    tta: int,
    platform,
    as_scored: bool = True,
) -> Predictions:
    """Class probabilities of `split` (val or test) for the run's best weights (the run is on
    `competition`, its config's), TTA passes averaged.

    A feature-cache run's val split at TTA 1 is not predicted again (`as_scored=False` asks for the
    whole network): training scored it through its cut with the weights it saved as best and kept
    the probabilities (`cut_predict.save_scored`), from float16 activations below the cut (the
    flowers' probabilities within 0.0006 of the whole network's: docs/BENCHMARKS.md;
    tests/test_cut_predict.py bounds it). A CV group's out-of-fold rows are made the same way.
    A sentence encoder's texts (one process, one replica) go through their vectors, each encoded
    once a process (`vector_predict`)."""
    import tensorflow as tf

    from pipeline import networks
    from pipeline.data import datasets, passes, splits
    from pipeline.data.manifest import locate_data
    from pipeline.modeling import vector_predict

    run = run if isinstance(run, RunDir) else RunDir(run)
    manifest = check_same_data(run, data_dir)
    config = run.read_config()
    spec = competition.spec
    check_tta(spec, tta)
    source = made_from(run, manifest, tta)
    path = run.predictions(split, tta)
    if split == "val" and tta == 1 and as_scored:  # as training scored them through its cut
        kept = scored(run, manifest)
        if kept is not None:
            log.info("%s: val predictions as training scored them with its best weights", run.name)
            return kept
    if path.is_file():
        saved = Predictions.load(path)
        if saved.source == source:
            log.info("%s: %s predictions are up to date", run.name, split)
            return saved
    table = splits.fold_table(data_dir, spec, config) if split == "val" else None
    examples = splits.split_for(locate_data(data_dir), spec, config, split, table)
    examples = networks.encoded(config, examples, run.path)
    labeled = spec.is_labeled(split) or split == "val"
    batch = datasets.global_batch_size(config.data.batch_size, platform.replicas)
    dataset = examples.eval_dataset(config, batch, labeled=labeled, pad_to_batch=True, with_ids=True)
    dataset = passes.untuned(dataset)  # read twice below: its tags, then its views
    with platform.scope():
        net = load_inference_model(run, competition)
    head = vector_predict.above(net) if streams(platform) else None
    kept = vector_predict.kept(config, run.path.parent)
    with examples.naming_bad(labeled):
        tags = list(dataset.map(lambda images, *tags: tags).as_numpy_iterator())
        ids = np.concatenate([t[-1] for t in tags]).astype(str)
        real = ids != datasets.PAD_ID.decode()
        total = np.zeros((int(real.sum()), spec.num_classes), np.float64)
        view = task_of(spec).test_view(config, spec)
        what = f"{run.name}: predicting {split}"
        with Progress(what, tta * len(ids), task_of(spec).unit, enabled=platform.hosts.writer) as bar:
            for index in range(tta):
                tf.random.set_seed(config.seed + index)  # the same random views on every rerun
                views = dataset.map(lambda inputs, *_, i=index: view(inputs, i))
                if head is not None:  # a sentence encoder's texts encoded once in the process
                    total += vector_predict.predict(net, head, views.as_numpy_iterator(), bar, kept)[real]
                else:
                    total += predict_batches(net, views, platform, bar)[real]
                log.info("%s: %s pass %d/%d done", run.name, split, index + 1, tta)
    labels = np.concatenate([t[0] for t in tags])[real] if labeled else None
    predictions = Predictions(
        ids=ids[real], probabilities=(total / tta).astype(np.float32), labels=labels, tta=tta, source=source
    )
    if platform.hosts.writer:  # every process holds them; one writes
        predictions.save(path)
    return predictions
