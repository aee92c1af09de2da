"""The two training loops, Keras `fit` and a custom `strategy.run` loop, with the same outputs.

Both train epoch by epoch and, after each epoch: score val macro-F1 with scikit-learn, append
a row to `history.csv`, save the last (and, if better, the best) weights and a checkpoint of
weights + optimizer + epoch. A rerun restores that checkpoint and goes on from the next epoch.
With `train.ema`, the optimizer also keeps a moving average of the weights; that average is what
is scored and saved as best and last weights, while training goes on from the trained weights.
"""

from __future__ import annotations

import contextlib
import logging
import time
import warnings
from pathlib import Path

import keras
import numpy as np
import pandas as pd
import tensorflow as tf

from competition import load_spec
from pipeline.core import strategy
from pipeline.core.config import TrainConfig, read_config
from pipeline.core.errors import PetalsError, first_line
from pipeline.core.files import write_atomically
from pipeline.data import augment, datasets
from pipeline.modeling import policy, registry

log = logging.getLogger(__name__)

# Keras warns that a tf.data dataset ignores fit's shuffle flag, and that a finite val set
# "ran out of data" after predict has read all of it: both are what is meant here.
warnings.filterwarnings("ignore", message=r"`shuffle=True` was passed", category=UserWarning)
warnings.filterwarnings("ignore", message=r"Your input ran out of data", category=UserWarning)

HISTORY = "history.csv"
BEST = "best.weights.h5"
LAST = "last.weights.h5"


class Classifier(keras.Model):
    """The classifier for training: labels become (soft) one-hot rows, and with `augment.where=device`
    the batch is augmented here, at the start of the step, on the accelerator."""

    def __init__(
        self, net: keras.Model, num_classes: int, aug, augment_here: bool, shift_scale: float, **kwargs
    ):
        super().__init__(**kwargs)
        self.net = net
        self.num_classes = num_classes
        self.aug = aug
        self.augment_here = augment_here
        self.shift_scale = shift_scale

    def call(self, images, training=False):
        return self.net(tf.cast(images, tf.float32), training=training)

    def one_hot(self, labels):
        """Class indices -> one-hot rows; soft rows (CutMix/MixUp) pass through."""
        if labels is not None and len(labels.shape) == 1:
            return tf.one_hot(tf.cast(labels, tf.int32), self.num_classes)
        return labels

    def prepare(self, images, labels, training: bool):
        images = tf.cast(images, tf.float32)
        if training and self.augment_here:
            images, labels = augment.augment_batch(
                images,
                labels,
                self.aug,
                self.num_classes,
                xla=bool(self.jit_compile),
                shift_scale=self.shift_scale,
            )
        return images, self.one_hot(labels)

    def train_step(self, batch):
        return super().train_step(self.prepare(*batch, training=True))

    def test_step(self, batch):
        return super().test_step(self.prepare(*batch, training=False))

    # Keras also calls these on the raw batch when it builds under a distribution strategy.
    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        return super().compute_loss(x, self.one_hot(y), y_pred, sample_weight, training)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        return super().compute_metrics(x, self.one_hot(y), y_pred, sample_weight)


def save_weights(net: keras.Model, path: Path) -> None:
    """The network's weights, atomically (Keras insists on the `.weights.h5` ending)."""
    write_atomically(path, net.save_weights, tmp_name="partial-" + path.name)


class LogitAdjustedCrossentropy(keras.losses.Loss):
    """Cross-entropy of the logits plus tau x log(class prior) (Menon et al., 2021, "Long-tail
    learning via logit adjustment"): a frequent class must win by its prior's margin, so the
    network learns scores that do not lean towards the frequent classes.

    It takes the classifier's softmax probabilities, whose logs are the logits up to a
    per-example constant that the softmax cancels.
    """

    def __init__(self, prior: np.ndarray, tau: float, label_smoothing: float, reduction: str):
        super().__init__(reduction=reduction, name="logit_adjusted_crossentropy")
        self.shift = tf.constant(tau * np.log(prior), tf.float32)
        self.label_smoothing = label_smoothing

    def call(self, y_true, y_pred):
        epsilon = keras.config.epsilon()  # where Keras clips probabilities for its cross-entropy
        logits = tf.math.log(tf.clip_by_value(tf.cast(y_pred, tf.float32), epsilon, 1.0)) + self.shift
        return keras.losses.categorical_crossentropy(
            y_true, logits, from_logits=True, label_smoothing=self.label_smoothing
        )


def loss_function(
    train: TrainConfig, class_counts: np.ndarray | None = None, reduction: str = "sum_over_batch_size"
) -> keras.losses.Loss:
    """The training loss: cross-entropy with label smoothing, logit-adjusted by the class counts
    when `train.logit_adjustment` > 0 (a class without images counts as one)."""
    if not train.logit_adjustment:
        return keras.losses.CategoricalCrossentropy(
            label_smoothing=train.label_smoothing, reduction=reduction
        )
    if class_counts is None:
        raise ValueError("train.logit_adjustment needs the training shards' class counts")
    counts = np.maximum(class_counts, 1)
    return LogitAdjustedCrossentropy(
        counts / counts.sum(), train.logit_adjustment, train.label_smoothing, reduction
    )


def _layers_within(layer: keras.layers.Layer):
    for inner in getattr(layer, "layers", []):
        yield inner
        yield from _layers_within(inner)


def set_backbone_trainable(net: keras.Model, trainable: bool, freeze_batchnorm: bool) -> None:
    """Freeze or unfreeze the backbone; fine-tuning keeps BatchNorm statistics frozen if asked."""
    backbone = net.get_layer("backbone")
    backbone.trainable = trainable
    if trainable and freeze_batchnorm:
        for layer in _layers_within(backbone):
            if isinstance(layer, keras.layers.BatchNormalization):
                layer.trainable = False


class _EpochHooks(keras.callbacks.Callback):
    """Keras `fit`'s side of the per-epoch work the custom loop does inline."""

    def __init__(self, trainer: Trainer):
        super().__init__()
        self.trainer = trainer

    def on_epoch_begin(self, epoch, logs=None):
        self.trainer._begin_epoch(epoch)

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        self.trainer._finish_epoch(epoch, {k: float(logs[k]) for k in ("loss", "accuracy") if k in logs})


class AveragingAdam(keras.optimizers.Adam):
    """Adam whose weight average (`use_ema`) stays in the optimizer when a Keras `fit` call ends.

    Keras copies the average into the network at the end of `fit`; petals scores and saves the
    average every epoch itself (`Trainer._averaged_weights`) and trains on from the trained
    weights, across `fit` calls (warm-up, then fine-tuning) and across an interrupted run's resume.
    """

    def finalize_variable_values(self, var_list):
        pass


class Trainer:
    """One run: builds everything under the strategy, restores, trains the remaining epochs."""

    def __init__(self, job, verbose: int = 1, restart: bool = False):
        self.job = job
        self.config = job.config
        self.verbose = verbose
        self.restart = restart
        self.run_dir: Path = job.run_dir
        picked = job.picked
        train = self.config.train
        self.precision = strategy.pick_precision(picked.device, train.precision)
        self.jit_compile = strategy.pick_jit_compile(picked.device, train.jit_compile)
        self.steps_per_execution = strategy.pick_steps_per_execution(picked.device, train.steps_per_execution)
        self.steps = policy.steps_per_epoch(train, job.train_images, job.global_batch)
        self.size = datasets.input_size(self.config)
        self._iterator = None  # the custom loop's distributed training data, made once

    # ------------------------------------------------------------------ building

    def build(self) -> None:
        """Build the model (pretrained or local weights loaded), optimizer and checkpoint; writes nothing.

        An interrupted run's last checkpoint is restored here, so one that does not fit fails early.
        """
        config, job = self.config, self.job
        keras.mixed_precision.set_global_policy(self.precision)
        keras.utils.set_random_seed(config.seed)
        with job.picked.strategy.scope():
            net = registry.build_classifier(
                config.model.backbone,
                self.size,
                job.spec.num_classes,
                weights=config.model.weights,
                dropout=config.model.dropout,
                input_dtype="float32",
            )
            self.net = net
            self.classifier = Classifier(
                net,
                job.spec.num_classes,
                config.augment,
                augment_here=config.augment.where == "device",
                shift_scale=datasets.shift_scale(config),
            )
            ema = config.train.ema  # 0: no average
            self.optimizer = AveragingAdam(config.train.lr_start, use_ema=ema > 0, ema_momentum=ema)
            if self.precision == "mixed_float16":
                self.optimizer = keras.optimizers.LossScaleOptimizer(self.optimizer)
            self.optimizer.build(net.trainable_variables)  # every variable that will ever train
            self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
            # The best val macro-F1 so far (minus the training loss when there is no val split).
            self.best_score = tf.Variable(-np.inf, dtype=tf.float64, trainable=False, name="best_score")
        self.checkpoint = tf.train.Checkpoint(
            net=net, optimizer=self.optimizer, epoch=self.epoch, best_score=self.best_score
        )
        self.manager = tf.train.CheckpointManager(self.checkpoint, job.checkpoint_dir, max_to_keep=1)
        self.class_counts = None
        if config.train.logit_adjustment:
            self.class_counts = datasets.class_counts(
                job.train_files, job.spec, config.data.image_size, config.data.skip_bad_records
            )
            log.info(
                "train: logit adjustment tau=%g over %d..%d training images per class",
                config.train.logit_adjustment,
                self.class_counts.min(),
                self.class_counts.max(),
            )
        self.start = self._restore()  # a checkpoint that does not fit fails here, before any write

    def _restore(self) -> int:
        """The first epoch still to train: 0, or the one after the last checkpoint."""
        if self.restart or not self.manager.latest_checkpoint:
            return 0
        latest = self.manager.latest_checkpoint
        try:
            self.checkpoint.restore(latest).assert_existing_objects_matched()
        except (ValueError, AssertionError) as err:  # saved by another model: an older petals, say
            tf.get_logger().setLevel(logging.ERROR)  # not TF's warning about the values left unrestored
            raise PetalsError(
                f"{latest}: does not fit this run's model ({first_line(err)[:200]}); "
                "--force trains the run again from scratch"
            ) from None
        done = int(self.epoch.numpy())
        log.info(
            "train: resuming %s after epoch %d (checkpoint %s)",
            self.run_dir,
            done,
            self.manager.latest_checkpoint,
        )
        return done

    def _val_dataset(self):
        job = self.job
        if not job.val_files:
            return None
        return datasets.eval_dataset(
            job.val_files, job.spec, self.config, job.global_batch, labeled=True, pad_to_batch=True
        )

    # ------------------------------------------------------------------ scoring

    def _score(self, val) -> dict[str, float]:
        """Loss, accuracy and the competition's macro-F1 on the val split, padding dropped."""
        from competition.metric import macro_f1

        if self._val_labels is None:
            self._val_labels = np.concatenate([tags for _, tags in val.as_numpy_iterator()])
        probabilities = self.classifier.predict(val.map(lambda images, _: images), verbose=0)
        real = self._val_labels != datasets.PAD_LABEL
        probabilities, labels = probabilities[real], self._val_labels[real]
        predicted = probabilities.argmax(axis=1)
        losses = -np.log(np.clip(probabilities[np.arange(len(labels)), labels], 1e-7, 1.0))
        return {
            "val_loss": float(losses.mean()),
            "val_accuracy": float((predicted == labels).mean()),
            "val_macro_f1": macro_f1(labels, predicted),
        }

    # ------------------------------------------------------------------ the loop

    def run(self) -> pd.DataFrame:
        """Train the epochs still to do; the history of every epoch, the restored ones included."""
        start = self.start
        self.history = self._history(start)
        self._val = self._val_dataset()
        self._val_labels = None
        self._trainable = None
        train_config = self.config.train
        if train_config.loop == "fit":
            self._fit(start)
        else:
            for epoch in range(start, train_config.epochs):
                self._begin_epoch(epoch)
                self._finish_epoch(epoch, self._custom_epoch())
        return self.history

    def _phases(self, start: int) -> list[tuple[int, int]]:
        """[first, end) epoch ranges with one backbone setting each: the frozen warm-up, then the rest."""
        cut = min(max(self.config.train.frozen_epochs, start), self.config.train.epochs)
        return [(a, b) for a, b in ((start, cut), (cut, self.config.train.epochs)) if a < b]

    def _begin_epoch(self, epoch: int) -> None:
        self._set_trainable(policy.backbone_trainable(epoch, self.config.train))
        self._lr = policy.learning_rate(epoch, self.config.train, self.job.picked.replicas)
        self.optimizer.learning_rate.assign(self._lr)
        self._started = time.perf_counter()

    def _finish_epoch(self, epoch: int, logs: dict[str, float]) -> None:
        """Score, record and checkpoint one finished epoch (both loops)."""
        seconds = time.perf_counter() - self._started
        images = self.steps * self.job.global_batch
        row = {"epoch": epoch + 1, "lr": self._lr, **logs, "seconds": seconds, "images": images}
        row["images_per_second"] = images / seconds
        with self._averaged_weights():  # what is scored and saved; training goes on from its own
            if self._val is not None:
                row.update(self._score(self._val))
            self._save_weights(row)
        self.history = pd.concat([self.history, pd.DataFrame([row])], ignore_index=True)
        self._end_epoch(epoch, row, self.history)

    @contextlib.contextmanager
    def _averaged_weights(self):
        """With `train.ema`, the weights' moving average in the network for the block, then the
        trained weights back (as Keras's SwapEMAWeights does, for both loops)."""
        if not self.config.train.ema:
            yield
            return
        optimizer = getattr(self.optimizer, "inner_optimizer", self.optimizer)
        averages = optimizer._model_variables_moving_average  # Keras's own SwapEMAWeights reads it too
        pairs = list(zip(optimizer._trainable_variables, averages, strict=True))
        trained = [variable.numpy() for variable, _ in pairs]
        for variable, average in pairs:
            variable.assign(average)
        try:
            yield
        finally:
            for (variable, _), value in zip(pairs, trained, strict=True):
                variable.assign(value)

    def _set_trainable(self, trainable: bool) -> None:
        if trainable == self._trainable:
            return
        set_backbone_trainable(self.net, trainable, self.config.train.freeze_batchnorm)
        if not trainable or self._trainable is not None:
            log.info("train: backbone %s", "fine-tuning" if trainable else "frozen (training the head)")
        self._trainable = trainable
        self._custom_step = None

    def _history(self, start: int) -> pd.DataFrame:
        path = self.run_dir / HISTORY
        if start and path.is_file():
            return pd.read_csv(path).query("epoch <= @start")  # rows past the checkpoint are redone
        return pd.DataFrame()

    def _save_weights(self, row: dict) -> None:
        save_weights(self.net, self.run_dir / LAST)
        score = row.get("val_macro_f1", -row["loss"])
        if score > float(self.best_score.numpy()):
            self.best_score.assign(score)
            save_weights(self.net, self.run_dir / BEST)

    def _end_epoch(self, epoch: int, row: dict, history: pd.DataFrame) -> None:
        write_atomically(self.run_dir / HISTORY, lambda tmp: history.to_csv(tmp, index=False))
        self.epoch.assign(epoch + 1)
        self.manager.save(checkpoint_number=epoch + 1)  # last, so a checkpoint implies its outputs
        shown = {k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}
        log.info("train: epoch %d/%d %s", epoch + 1, self.config.train.epochs, shown)

    # ------------------------------------------------------------------ Keras fit

    def _fit(self, start: int) -> None:
        """One Keras `fit` per backbone setting, so the data iterator and the compiled step live
        across epochs; the per-epoch work runs in a callback."""
        job = self.job
        train = datasets.train_dataset(job.train_files, job.spec, self.config, job.global_batch)
        epochs = _EpochHooks(self)
        for first, end in self._phases(start):
            self._set_trainable(policy.backbone_trainable(first, self.config.train))
            self.classifier.compile(  # a trainability change needs a fresh compile; the optimizer is kept
                optimizer=self.optimizer,
                loss=loss_function(self.config.train, self.class_counts),
                metrics=[keras.metrics.CategoricalAccuracy(name="accuracy")],
                jit_compile=self.jit_compile,
                steps_per_execution=self.steps_per_execution,
            )
            self.classifier.fit(
                train,
                epochs=end,
                initial_epoch=first,
                steps_per_epoch=self.steps,
                callbacks=[epochs],
                verbose=self.verbose,
            )

    # ------------------------------------------------------------------ custom loop

    def _custom_epoch(self) -> dict[str, float]:
        picked, job = self.job.picked, self.job
        if self._custom_step is None:
            self._build_custom_step()
        if self._iterator is None:
            per_replica = job.global_batch // picked.replicas

            def dataset_fn(context):
                return datasets.train_dataset(
                    job.train_files, job.spec, self.config, per_replica, input_context=context
                )

            self._iterator = iter(picked.strategy.distribute_datasets_from_function(dataset_fn))
        loss_sum = correct = 0.0
        calls = -(-self.steps // self.steps_per_execution)
        done = 0
        for _ in range(calls):
            n = min(self.steps_per_execution, self.steps - done)
            loss, right = self._custom_step(self._iterator, tf.constant(n))
            loss_sum += float(loss)
            correct += float(right)
            done += n
        return {"loss": loss_sum / self.steps, "accuracy": correct / (self.steps * job.global_batch)}

    def _build_custom_step(self) -> None:
        picked, job, config = self.job.picked, self.job, self.config
        classifier, optimizer = self.classifier, self.optimizer
        loss_fn = loss_function(config.train, self.class_counts, reduction="none")
        trainable = self.net.trainable_variables

        def replica_step(images, labels):
            images, labels = classifier.prepare(images, labels, training=True)
            with tf.GradientTape() as tape:
                probabilities = classifier(images, training=True)
                per_example = loss_fn(labels, probabilities)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=job.global_batch)
                if classifier.losses:
                    loss += tf.nn.scale_regularization_loss(tf.add_n(classifier.losses))
                scaled = optimizer.scale_loss(loss)  # a no-op unless a LossScaleOptimizer (float16)
            gradients = tape.gradient(scaled, trainable)
            optimizer.apply(gradients, trainable)
            right = tf.reduce_sum(
                tf.cast(tf.equal(tf.argmax(probabilities, 1), tf.argmax(labels, 1)), tf.float32)
            )
            return loss, right

        compiled_step = tf.function(replica_step, jit_compile=self.jit_compile)

        @tf.function
        def steps(iterator, n):
            loss_sum = tf.constant(0.0)
            right_sum = tf.constant(0.0)
            for _ in tf.range(n):
                images, labels = next(iterator)
                loss, right = picked.strategy.run(compiled_step, args=(images, labels))
                loss_sum += picked.strategy.reduce("SUM", loss, axis=None)
                right_sum += picked.strategy.reduce("SUM", right, axis=None)
            return loss_sum, right_sum

        self._custom_step = steps


def load_inference_model(run_dir: Path, weights: str = BEST) -> keras.Model:
    """The trained classifier with a variable batch dimension, on whatever device is here (CPU included)."""
    config_path = Path(run_dir) / "config.json"
    if not config_path.is_file():
        raise PetalsError(f"{run_dir}: not a run directory (no config.json)")
    config = read_config(config_path)
    spec = load_spec(config.competition)
    keras.mixed_precision.set_global_policy("float32")
    net = registry.build_classifier(
        config.model.backbone,
        datasets.input_size(config),
        spec.num_classes,
        weights="none",
        input_dtype="float32",
    )
    path = Path(run_dir) / weights
    if not path.is_file():
        raise PetalsError(f"{path}: missing; train the run first")
    try:
        net.load_weights(path)
    except ValueError as err:
        raise PetalsError(f"{path}: does not fit this run's model ({first_line(err)[:200]})") from None
    return net
