"""The custom training loop (`train.loop=custom`), one per backend, around the one training step.

The step is Keras's own `train_step`, the one `fit` runs (with the classifier's labels and
on-device augmentation, pipeline/modeling/classifier.py): the task's loss and metric, the model's
own losses, the optimizer (its loss scale in float16) and the metrics' running means. What the
loops add is how the step is driven:

- TensorFlow: `strategy.run` over `distribute_datasets_from_function` (each input pipeline
  reads its own share of the shards or examples), a `tf.function` running `steps_per_execution`
  steps per call, and the per-replica step XLA-compiled where the device wants it.
- JAX: the stateless step `jax.jit`-compiled, its state (weights, optimizer and metrics
  variables) passed in and out explicitly and laid out by the `keras.distribution` in force:
  batches split over the devices (across processes, each one's share joined into the global
  array), weights replicated. The state goes back into the Keras variables after every run of
  steps, where scoring, saving and checkpointing read it.

Both take their batches from the same tf.data pipeline and report what `fit` reports: the
epoch's mean loss and accuracy.
"""

from __future__ import annotations

from typing import Any

import keras

from pipeline.core import hosts
from pipeline.core.errors import PEER_GONE, PetalsError


def for_backend(trainer) -> Any:
    """The custom loop for the trainer's backend."""
    loop = JaxLoop if trainer.job.platform.backend == "jax" else TensorFlowLoop
    return loop(trainer)


def _ready(trainer, batch_spec) -> None:
    """The classifier compiled as `fit` compiles it, and the compiled loss and metric built from
    the shapes of a batch: their variables exist before the step is traced."""
    trainer.compile_classifier()
    with trainer.job.platform.scope():
        trainer.classifier._symbolic_build(data_batch=batch_spec)  # what `fit` does before its first step


def _symbolic(element_spec):
    return keras.tree.map_structure(lambda s: keras.KerasTensor(tuple(s.shape), s.dtype.name), element_spec)


class TensorFlowLoop:
    """`strategy.run` steps over a distributed dataset."""

    def __init__(self, trainer):
        self.trainer = trainer
        self._steps = None
        self._iterator = None

    def trainability_changed(self) -> None:
        self._steps = None  # the compiled step captured the old trainable variables

    def _dataset(self, context=None):
        job = self.trainer.job
        per_replica = job.global_batch // job.platform.replicas
        return job.train.train_dataset(self.trainer.data_config, per_replica, input_context=context)

    def epoch(self, steps: int) -> tuple[int, dict[str, float]]:
        """Up to `steps` steps, fewer when the trainer is asked to stop: the steps done and their
        mean loss and accuracy."""
        import tensorflow as tf

        trainer, job = self.trainer, self.trainer.job
        if self._steps is None:
            _ready(trainer, _symbolic(self._dataset().element_spec))
            self._steps = self._build()
        if self._iterator is None:
            distributed = job.platform.strategy.distribute_datasets_from_function(self._dataset)
            self._iterator = iter(distributed)
        trainer.classifier.reset_metrics()
        done = 0
        while done < steps and not (done and trainer.stop()):
            n = min(trainer.steps_per_execution, steps - done)
            try:
                self._steps(self._iterator, tf.constant(n))
            except tf.errors.UnavailableError:  # TF_CONFIG workers: one went away mid-collective
                raise PetalsError(f"{PEER_GONE} mid-step; its own output says why") from None
            done += n
            trainer.bar.reach(done)
        return done, trainer.classifier.get_metrics_result()  # the steps' mean loss and accuracy

    def _build(self):
        import tensorflow as tf

        trainer = self.trainer
        strategy, classifier = trainer.job.platform.strategy, trainer.classifier
        compiled_step = tf.function(classifier.train_step, jit_compile=trainer.jit_compile)

        @tf.function
        def steps(iterator, n):
            for _ in tf.range(n):
                strategy.run(compiled_step, args=(next(iterator),))

        return steps


class JaxLoop:
    """The jitted stateless step under the `keras.distribution` in force."""

    def __init__(self, trainer):
        self.trainer = trainer
        self._step = None
        self._dataset = None
        self._batches = None

    def trainability_changed(self) -> None:
        self._step = None  # the state's split into trainable and frozen variables changed

    def _variables(self) -> tuple[list, ...]:
        classifier = self.trainer.classifier
        return (
            classifier.trainable_variables,
            classifier.non_trainable_variables,
            self.trainer.optimizer.variables,
            classifier.metrics_variables,
        )

    def epoch(self, steps: int) -> tuple[int, dict[str, float]]:
        """Up to `steps` steps, fewer when the trainer is asked to stop: the steps done and their
        mean loss and accuracy (the state back in the Keras variables)."""
        trainer, job = self.trainer, self.trainer.job
        if self._dataset is None:
            share = hosts.input_share(job.platform.hosts, job.global_batch, job.platform.replicas)
            self._dataset = job.train.train_dataset(trainer.data_config, *share)
            self._batches = self._dataset.as_numpy_iterator()
        if self._step is None:
            _ready(trainer, _symbolic(self._dataset.element_spec))
            self._step = self._build()
        trainer.classifier.reset_metrics()
        variables = self._variables()
        state = tuple([v.value for v in group] for group in variables)
        done = 0
        while done < steps and not (done and trainer.stop()):
            batch = keras.tree.map_structure(self._on_devices, next(self._batches))
            _, state = self._step(state, batch)  # device values: no host round trip per step
            done += 1
            trainer.bar.reach(done)
        for group, values in zip(variables, state, strict=True):
            for variable, value in zip(group, values, strict=True):
                variable.assign(value)
        return done, trainer.classifier.get_metrics_result()  # the steps' mean loss and accuracy

    def _on_devices(self, array):
        """A host batch laid out as the distribution wants it (split over the devices' batch axis);
        across processes, this one's share of the global batch, which JAX joins to the others'."""
        import jax

        platform = self.trainer.job.platform
        if platform.distribution is None:
            return jax.device_put(array)
        layout = platform.distribution.get_data_layout(array.shape)
        if platform.hosts.several:
            return jax.make_array_from_process_local_data(layout.backend_layout, array)
        return keras.distribution.distribute_tensor(array, layout)

    def _build(self):
        import jax

        out_shardings = None
        if self.trainer.job.platform.distribution is not None:  # keep every variable where Keras laid it out
            state = tuple([v.value.sharding for v in group] for group in self._variables())
            out_shardings = (None, state)
        return jax.jit(self.trainer.classifier.train_step, donate_argnums=0, out_shardings=out_shardings)
