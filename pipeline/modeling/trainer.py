"""One run's training, epoch by epoch, with Keras `fit` or a custom loop, on either backend.

After each epoch, both loops: score val with the competition's metric (scikit-learn; a single run
keeps each scored epoch's val probabilities, `val_epochs`), append a row to `history.csv`, save the
best weights when better (a CV fold's at each scored epoch; the last ones after the final epoch),
then a checkpoint of weights + optimizer + epoch. A rerun restores it and
goes on from the next epoch. With `train.ema`, the optimizer also keeps a moving average of the
weights: what is scored and saved, while training goes on from the trained weights.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from functools import partial

import keras
import numpy as np
import pandas as pd

from pipeline import networks
from pipeline.core import device, hosts
from pipeline.core.files import write_atomically
from pipeline.core.options import TrainOptions
from pipeline.data import augment, datasets, passes, targets
from pipeline.modeling import custom_loop, cut_predict, features, host_predict, policy, preemption, probe
from pipeline.modeling.checkpoint import Checkpoint
from pipeline.modeling.classifier import Classifier, set_backbone_trainable
from pipeline.modeling.epoch_lines import epoch_header, epoch_line, epoch_progress
from pipeline.modeling.fit_hooks import EpochHooks
from pipeline.modeling.inference import val_probabilities, val_scores
from pipeline.modeling.network_cut import Cut, crossing_layers, cut_for, input_shape
from pipeline.modeling.optimizer import averaged_weights, make_optimizer
from pipeline.modeling.val_epochs import keep as keep_val_epoch

log = logging.getLogger(__name__)
KEPT = TrainOptions.keep_checkpoints
CHECKPOINTS_HINT = "every host must read the same checkpoints: --checkpoint-dir gs://bucket/folder"


def save_weights(net: keras.Model, path) -> None:
    """The network's weights, atomically (Keras insists on the `.weights.h5` ending)."""
    write_atomically(path, net.save_weights, tmp_name="partial-" + path.name)


class Trainer:
    """One run: builds everything on the platform, restores, trains the remaining epochs."""

    def __init__(self, job, progress: bool = True, restart: bool = False, stop=None, keep_checkpoints=KEPT):
        self.job = job
        self.stop = stop or preemption.StopRequest()  # asked between steps: SIGTERM, the time limit
        self.keep_checkpoints = keep_checkpoints
        self.config = job.config
        self.progress, self.restart = progress, restart  # progress: of each epoch's steps (epoch_progress)
        self.run = job.run
        platform, train = job.platform, self.config.train
        self.precision = device.pick_precision(platform, train.precision)
        self.jit_compile = device.pick_jit_compile(platform, train.jit_compile)
        self.steps = policy.steps_per_epoch(train, job.train_images, job.global_batch)
        self.size = datasets.input_size(self.config)
        # Where augmentation runs here (host or device); the datasets read it from this config.
        where = augment.placement(self.config.augment.where, platform.backend, platform.device)
        aug = dataclasses.replace(self.config.augment, where=where)
        self.data_config = dataclasses.replace(self.config, augment=aug)
        self._custom = None  # the custom loop's compiled steps and data, made when first needed

    # ------------------------------------------------------------------ building

    def build(self) -> None:
        """Build the model (pretrained or local weights loaded), optimizer and checkpoint; writes nothing.
        An interrupted run's last checkpoint is restored here, so one that does not fit fails early."""
        config, job = self.config, self.job
        keras.mixed_precision.set_global_policy(self.precision)
        keras.utils.set_random_seed(config.seed)
        ids = networks.get(config.model.backbone).reads_ids  # token ids, or pixels
        self.text_inputs = self._text_inputs() if ids else None
        with job.platform.scope():
            self.net = networks.build(
                config,
                job.spec,
                activation=job.task.activation,
                weights=config.model.weights,
                # Texts train at one static batch (a TPU's shapes): the replica's under TensorFlow's
                # strategies, the whole batch under JAX, whose jitted step sees the global array.
                batch_size=self.static_batch if ids else None,
                vocabulary_size=self.text_inputs.vocabulary_size if ids else None,
            )
            # With the feature cache, what trains is the part above the cut, on cached activations.
            self.cut = self._cut() if config.train.feature_cache else None
            self.classifier = Classifier(
                self.net if self.cut is None else self.cut.top,
                job.spec.num_classes,
                config.augment,
                augment_here=self.data_config.augment.where == "device" and not ids and self.cut is None,
                shift_scale=datasets.shift_scale(config),
                images=not ids,
            )
            shape = networks.input_shape(config, spec=job.spec)  # stateless calls need it built:
            self.classifier.build(input_shape(self.cut) if self.cut else shape)
            self.optimizer = make_optimizer(
                config.train.lr_start, config.train.ema, self.precision,
                self.net.trainable_variables,  # every variable that will ever train
                training=lambda: self.classifier.trainable_variables,
                weight_decay=config.train.weight_decay,
            )  # fmt: skip
        self.checkpoint = Checkpoint(
            job.checkpoint_dir,
            {"net": self.net.weights, "optimizer": self.optimizer.variables},
            keep=self.keep_checkpoints,
            writes=job.platform.hosts.writer,  # every process restores it; process 0 writes it
        )
        # The best val score so far, greater is better (a lower-is-better metric negated; no val: -loss).
        self.best_score = -np.inf
        # A CV fold keeps its latest scored epoch, not its best: its val rows are its group's
        # out-of-fold rows, and an epoch chosen on them made the CV score lean high (0.00-0.04).
        self.keeps_latest = config.train.folds > 0
        # The class counts a logit-adjusted loss weighs by (a regression's target scale); the columns'.
        self.target_summary = job.task.target_summary(job.train, config)
        job.task.fit_output(self.net, self.target_summary)
        job.task.fit_input(self.net, job.train)
        if config.train.logit_adjustment:
            counts, tau = self.target_summary, config.train.logit_adjustment
            log.info("train: logit adjustment tau=%g over %d..%d training images per class",
                     tau, counts.min(), counts.max())  # fmt: skip
        self.start = self._restore()  # a checkpoint that does not fit fails here, before any write
        gather = partial(host_predict.allgather, job.platform)  # each process restored on its own:
        hosts.agree(job.platform.hosts, "the epoch to resume from", self.start, CHECKPOINTS_HINT, gather)

    def _cut(self) -> Cut:
        cut = cut_for(self.net, self.config)
        upper = f"the backbone's last {cut.layers} layers and the head train" if cut.layers else ""
        log.info("train: feature cache: the network below %s runs once per example and view, %s on its "
                 "outputs", cut.at, upper or "the head trains")  # fmt: skip
        return cut

    @property
    def unfrozen_layers(self) -> int:
        """The backbone's last layers that fine-tune, rounded up to a block boundary; 0: all."""
        wanted = self.config.train.unfrozen_layers
        if not wanted or not networks.has_backbone(self.net):
            return 0
        return crossing_layers(self.net.get_layer("backbone"), wanted)

    @property
    def static_batch(self) -> int:
        job = self.job
        return (
            job.global_batch if job.platform.backend == "jax" else job.global_batch // job.platform.replicas
        )

    def _text_inputs(self) -> networks.TextInputs:
        """The run's tokenization: the one it trained with (resuming), else one of its training texts."""
        job = self.job
        inputs = networks.text_inputs(self.config, self.run.path, job.train.examples.inputs, self.restart)
        job.train = job.train.with_encoder(inputs.encode)
        if job.val is not None:
            job.val = job.val.with_encoder(inputs.encode)
        return inputs

    def _restore(self) -> int:
        """The first epoch still to train: 0, or the one after the last checkpoint. A checkpoint
        taken mid-epoch (a preemption) also gives the steps of that epoch already done. The steps per
        call are chosen here: every call ends where an epoch, or the rest of a resumed one, ends."""
        saved = None if self.restart else self.checkpoint.restore()
        self.start_step, self.partial = (saved.step, saved.partial) if saved else (0, {})
        self.steps_per_execution = device.pick_steps_per_execution(
            self.job.platform, self.config.train.steps_per_execution, self.steps, self.start_step
        )
        if saved is None:
            return 0
        self.best_score = saved.best_score
        at = f"epoch {saved.epoch}" + (f" and step {saved.step} of the next" if saved.step else "")
        log.info("train: resuming %s after %s (checkpoint %s)", self.run, at, saved.path)
        return saved.epoch

    def _val_dataset(self):
        job = self.job
        if job.val is None:
            return None
        val = job.val.eval_dataset(self.data_config, job.global_batch, labeled=True, pad_to_batch=True)
        return passes.untuned(val)  # read to its end at each scoring

    # ------------------------------------------------------------------ scoring

    def _score(self, val, epoch: int) -> dict[str, float]:
        """Loss, accuracy and the competition's metric on val after (0-based) `epoch`, unpadded."""
        spec = self.job.spec
        if self._val_labels is None:
            with self.job.val.naming_bad(labeled=True):
                self._val_labels = np.concatenate([tags for _, tags in val.as_numpy_iterator()])
        inputs = val.map(lambda inputs, _: inputs)
        platform = self.job.platform
        model = self.classifier.net if platform.hosts.several else self.classifier
        probabilities = val_probabilities(model, self.net, inputs, platform, self.config, self.run.path)
        real = targets.real(self._val_labels)
        self._scored_probabilities, labels = probabilities[real], self._val_labels[real]  # kept with the best
        if not self.keeps_latest and platform.hosts.writer:  # the epoch a single run keeps is a choice
            keep_val_epoch(self.run, epoch + 1, self._scored_probabilities, labels)
        return val_scores(spec, self._scored_probabilities, labels)

    # ------------------------------------------------------------------ the loop

    def run_epochs(self) -> pd.DataFrame:
        """Train the epochs still to do; the history of every epoch, the restored ones included."""
        start = self.start
        self.history = self._history(start)
        self._header_due = True  # the epoch lines' column names, before the first of them
        if self.cut is not None and start < self.config.train.epochs:
            self._use_feature_cache()
        self._val = self._val_dataset()
        self._val_labels = None
        self._trainable = None
        self.stop.deferring = True  # from here a signal is noted, and the loops save at their step
        try:
            loops = {"fit": self._fit, "custom": self._custom_loop, "probe": partial(probe.train_head, self)}
            loops["probe" if self.config.train.head_solver == probe.SOLVER else self.config.train.loop](start)
        finally:
            self.stop.deferring = False
        return self.history

    def _first_step(self, epoch: int) -> int:
        """Where the epoch starts: past the steps a preempted run did (for the epoch it resumes)."""
        return self.start_step if epoch == self.start else 0

    def _end_steps(self, epoch: int, steps: int, means: dict[str, float]) -> None:
        """After a run of `steps` steps (both loops) whose loss and accuracy averaged `means`:
        finish the epoch, or, stopped short of its end, checkpoint the step reached and stop."""
        self.bar.close()
        done = self._first_step(epoch) + steps
        sums = {  # what a preempted epoch's checkpoint carries to the rerun that finishes it
            "loss_sum": float(means.get("loss", 0.0)) * steps,
            "right_sum": float(means.get("accuracy", 0.0)) * steps * self.job.global_batch,
        }
        carried = self.partial if epoch == self.start else {}
        totals = {k: carried.get(k, 0.0) + sums[k] for k in ("loss_sum", "right_sum")}
        seconds_before = carried.get("seconds", 0.0)
        if done < self.steps:
            seconds = seconds_before + time.perf_counter() - self._started
            partial = {**totals, "seconds": seconds}
            path = self.checkpoint.save(epoch, self.best_score, step=done, partial=partial)
            self._raise_stopped(epoch, done, path)
        logs = {
            "loss": totals["loss_sum"] / self.steps,
            "accuracy": totals["right_sum"] / (self.steps * self.job.global_batch),
        }
        self._finish_epoch(epoch, logs, seconds_before)

    def _stop_if_asked(self, epoch: int, step: int) -> None:
        """Between epochs: the last checkpoint is at this point already."""
        if self.stop():
            self._raise_stopped(epoch, step, self.checkpoint.latest)

    def _raise_stopped(self, epoch: int, step: int, path: str | None) -> None:
        seconds = time.monotonic() - self.stop.started
        saved = f"checkpoint {path}" if path else "before the first checkpoint"
        raise preemption.Preempted(
            f"stopped by {self.stop.reason} at epoch {epoch + 1}, step {step} of {self.steps}, after "
            f"{seconds:.0f} s ({saved}); rerun the same command to resume"
        )

    def _use_feature_cache(self) -> None:
        """Train and val become the cut's cached outputs (computed now, or read from the run dir)."""
        job = self.job
        # One pass per view: decoded images need no cache of their own.
        config = dataclasses.replace(
            self.data_config, data=dataclasses.replace(self.data_config.data, cache=False)
        )
        job.train, job.val = features.cache_splits(
            self.cut,
            job.train,
            job.val,
            config,
            self.run.path,
            job.platform,
            job.manifest.get("fingerprint", ""),
            stop=self.stop,  # a signal during the pass stops it after the piece in hand
        )

    def _phases(self, start: int) -> list[tuple[int, int]]:
        """[first, end) epoch ranges with one backbone setting each: the frozen warm-up, then the rest."""
        cut = min(max(self.config.train.frozen_epochs, start), self.config.train.epochs)
        return [(a, b) for a, b in ((start, cut), (cut, self.config.train.epochs)) if a < b]

    def _begin_epoch(self, epoch: int) -> None:
        self._set_trainable(policy.backbone_trainable(epoch, self.config.train))
        self._lr = policy.learning_rate(epoch, self.config.train, self.job.platform.replicas)
        self.optimizer.learning_rate.assign(self._lr)
        self._started = time.perf_counter()
        self.bar = epoch_progress(self, epoch)  # the loops count their steps on it

    def _finish_epoch(self, epoch: int, logs: dict[str, float], seconds_before: float = 0.0, images: int = 0):
        """Score, record and checkpoint one finished epoch (all loops; `images`: the examples seen)."""
        seconds = seconds_before + time.perf_counter() - self._started
        images = images or self.steps * self.job.global_batch
        row = {"epoch": epoch + 1, "lr": self._lr, **logs, "seconds": seconds, "images": images}
        row["images_per_second"] = images / seconds
        with averaged_weights(self.optimizer):  # what is scored and saved; training goes on from its own
            if self._val is not None and self._scored(epoch):
                row.update(self._score(self._val, epoch))
            self._save_weights(row)
        self.history = pd.concat([self.history, pd.DataFrame([row])], ignore_index=True)
        self._end_epoch(epoch, row, self.history)

    def _scored(self, epoch: int) -> bool:
        """Whether val is scored after this (0-based) epoch: the first, every val_every-th, the last."""
        train = self.config.train
        return epoch == 0 or (epoch + 1) % train.val_every == 0 or epoch + 1 == train.epochs

    def _set_trainable(self, trainable: bool) -> None:
        if trainable == self._trainable or not networks.has_backbone(self.net):  # the LSTM has none
            return
        set_backbone_trainable(self.net, trainable, self.config.train.freeze_batchnorm, self.unfrozen_layers)
        if not trainable or self._trainable is not None:
            log.info("train: backbone %s", "fine-tuning" if trainable else "frozen (training the head)")
        self._trainable = trainable
        if self._custom is not None:
            self._custom.trainability_changed()

    def _history(self, start: int) -> pd.DataFrame:
        if start and self.run.history_file.is_file():
            return self.run.read_history().query("epoch <= @start")  # rows past the checkpoint are redone
        return pd.DataFrame()

    def _save_weights(self, row: dict) -> None:
        if row["epoch"] == self.config.train.epochs:  # a resume reads the checkpoint, not these
            save_weights(self.net, self.run.last_weights)
        metric, key = self.job.spec.metric, self.job.spec.score_key
        sign = 1 if metric.greater_is_better else -1
        score = (
            -row["loss"] if self._val is None else sign * row[key] if key in row else None
        )  # None: unscored
        if score is not None and (score > self.best_score or self.keeps_latest):
            self.best_score = score
            save_weights(self.net, self.run.best_weights)
            if self.cut is not None and self._val is not None:
                # The val predictions as scored now (a fold's OOF ones): evaluate reads them.
                cut_predict.save_scored(self.run, self.job.val, self._scored_probabilities,
                                        self.job.manifest, self.job.platform.hosts.writer)  # fmt: skip

    def _end_epoch(self, epoch: int, row: dict, history: pd.DataFrame) -> None:
        write_atomically(self.run.history_file, lambda tmp: history.to_csv(tmp, index=False))
        if self.job.tracker is not None:  # TensorBoard's events, MLflow's metrics (pipeline/runs/tracking.py)
            self.job.tracker.epoch(history)
        self.checkpoint.save(epoch + 1, self.best_score)  # last, so a checkpoint implies its outputs
        spec, task = self.job.spec, self.job.task
        titles = (spec.metric.title, task.unit, task.metric_title(spec))  # the header's and the lines'
        if self._header_due:
            log.info("train: %s", epoch_header(*titles))
            self._header_due = False
        log.info("train: %s", epoch_line(row, self.config.train.epochs, spec.score_key, *titles))
        self.stop.epoch_ended(epoch + 1, row)  # a sweep's judge may stop the run here

    # ------------------------------------------------------------------ Keras fit

    def compile_classifier(self) -> None:
        """The one training step, `fit`'s and the custom loops': the task's loss and metric."""
        self.classifier.compile(
            optimizer=self.optimizer,
            loss=self.job.task.loss(self.config.train, self.target_summary),
            metrics=[self.job.task.train_metric(self.target_summary)],
            jit_compile=self.jit_compile,
            steps_per_execution=self.steps_per_execution,
        )

    def _fit(self, start: int) -> None:
        """One Keras `fit` per backbone setting, so the data iterator and the compiled step live
        across epochs; the per-epoch work runs in a callback."""
        job = self.job
        train = job.train.train_dataset(
            self.data_config, *hosts.input_share(job.platform.hosts, job.global_batch, job.platform.replicas)
        )
        epochs = EpochHooks(self)
        for first, end in self._phases(start):
            self._stop_if_asked(first, self._first_step(first))
            self._set_trainable(policy.backbone_trainable(first, self.config.train))
            self.compile_classifier()  # a trainability change needs a fresh compile
            # A preempted epoch's remaining steps are one `fit` of their own, then the epochs after.
            skip = self._first_step(first)
            calls = [(first, end, self.steps)]
            if skip:
                calls = [(first, first + 1, self.steps - skip), (first + 1, end, self.steps)]
            for a, b, steps in calls:
                if a >= b:
                    continue
                # verbose=0: petals' own progress (epoch_progress) and epoch lines
                self.classifier.fit(train, epochs=b, initial_epoch=a, steps_per_epoch=steps,
                                    callbacks=[epochs], verbose=0)  # fmt: skip
                # Stopped at an epoch's end (`fit` returns early): that epoch's checkpoint is written.
                self._stop_if_asked(int(self.history["epoch"].max()) if len(self.history) else a, 0)

    # ------------------------------------------------------------------ custom loop

    def _custom_loop(self, start: int) -> None:
        """The same step as `fit`'s, driven by custom_loop.py: each epoch's steps, then its end."""
        self._custom = custom_loop.for_backend(self)
        for epoch in range(start, self.config.train.epochs):
            self._stop_if_asked(epoch, self._first_step(epoch))
            self._begin_epoch(epoch)
            self._end_steps(epoch, *self._custom.epoch(self.steps - self._first_step(epoch)))
