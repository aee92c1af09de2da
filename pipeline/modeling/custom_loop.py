"""The custom training loop (`train.loop=custom`), one per backend, with Keras `fit`'s outputs.

- TensorFlow: `strategy.run` over `distribute_datasets_from_function` (each input pipeline
  reads its own share of the shards or examples), a `tf.function` running `steps_per_execution`
  steps per call, and the per-replica step XLA-compiled where the device wants it.
- JAX: one `jax.jit`-compiled step built on Keras's stateless calls (`stateless_call` for the
  forward pass, the optimizer's `stateless_apply`), its state passed in and out explicitly and
  laid out by the `keras.distribution` in force: batches split over the devices, weights
  replicated. The state goes back into the Keras variables after every epoch, where scoring,
  saving and checkpointing read it.

Both take their batches from the same tf.data pipeline and report the epoch's mean loss and
accuracy; the loss and what a right answer is are the competition's task's.
"""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from pipeline.core import hosts
from pipeline.core.errors import PEER_GONE, PetalsError


def for_backend(trainer, loss_fn: keras.losses.Loss) -> Any:
    """The custom loop for the trainer's backend."""
    loop = JaxLoop if trainer.job.platform.backend == "jax" else TensorFlowLoop
    return loop(trainer, loss_fn)


class TensorFlowLoop:
    """`strategy.run` steps over a distributed dataset."""

    def __init__(self, trainer, loss_fn: keras.losses.Loss):
        self.trainer = trainer
        self.loss_fn = loss_fn
        self._steps = None
        self._iterator = None

    def trainability_changed(self) -> None:
        self._steps = None  # the compiled step captured the old trainable variables

    def epoch(self, steps: int) -> dict[str, float]:
        """Up to `steps` steps, fewer when the trainer is asked to stop: the steps done and the
        sums of their losses and right answers."""
        import tensorflow as tf

        trainer, job = self.trainer, self.trainer.job
        strategy = job.platform.strategy
        if self._steps is None:
            self._steps = self._build()
        if self._iterator is None:
            per_replica = job.global_batch // job.platform.replicas

            def dataset_fn(context):
                return job.train.train_dataset(trainer.data_config, per_replica, input_context=context)

            self._iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))
        loss_sum = correct = 0.0
        done = 0
        while done < steps and not (done and trainer.stop()):
            n = min(trainer.steps_per_execution, steps - done)
            try:
                loss, right = self._steps(self._iterator, tf.constant(n))
            except tf.errors.UnavailableError:  # TF_CONFIG workers: one went away mid-collective
                raise PetalsError(f"{PEER_GONE} mid-step; its own output says why") from None
            loss_sum += float(loss)
            correct += float(right)
            done += n
        return {"steps": done, "loss_sum": loss_sum, "right_sum": correct}

    def _build(self):
        import tensorflow as tf

        trainer = self.trainer
        strategy, global_batch = trainer.job.platform.strategy, trainer.job.global_batch
        classifier, optimizer, loss_fn = trainer.classifier, trainer.optimizer, self.loss_fn
        task = trainer.job.task  # what a right answer is: the task's
        trainable = classifier.trainable_variables

        def replica_step(images, labels):
            images, labels = classifier.prepare(images, labels, training=True)
            with tf.GradientTape() as tape:
                probabilities = classifier(images, training=True)
                loss = tf.nn.compute_average_loss(
                    loss_fn(labels, probabilities), global_batch_size=global_batch
                )
                if classifier.losses:
                    loss += tf.nn.scale_regularization_loss(tf.add_n(classifier.losses))
                scaled = optimizer.scale_loss(loss)  # a no-op unless a LossScaleOptimizer (float16)
            optimizer.apply(tape.gradient(scaled, trainable), trainable)
            return loss, task.right_answers(probabilities, labels)

        compiled_step = tf.function(replica_step, jit_compile=trainer.jit_compile)

        @tf.function
        def steps(iterator, n):
            loss_sum = tf.constant(0.0)
            right_sum = tf.constant(0.0)
            for _ in tf.range(n):
                images, labels = next(iterator)
                loss, right = strategy.run(compiled_step, args=(images, labels))
                loss_sum += strategy.reduce("SUM", loss, axis=None)
                right_sum += strategy.reduce("SUM", right, axis=None)
            return loss_sum, right_sum

        return steps


class JaxLoop:
    """A jitted stateless step under the `keras.distribution` in force."""

    def __init__(self, trainer, loss_fn: keras.losses.Loss):
        self.trainer = trainer
        self.loss_fn = loss_fn
        self._step = None
        self._batches = None

    def trainability_changed(self) -> None:
        self._step = None  # the state's split into trainable and frozen variables changed

    def epoch(self, steps: int) -> dict[str, float]:
        """Up to `steps` steps, fewer when the trainer is asked to stop: the steps done and the
        sums of their losses and right answers (the state back in the Keras variables)."""
        trainer, job = self.trainer, self.trainer.job
        classifier, optimizer = trainer.classifier, trainer.optimizer
        if self._step is None:
            self._step = self._build()
        if self._batches is None:
            share = hosts.input_share(job.platform.hosts, job.global_batch, job.platform.replicas)
            dataset = job.train.train_dataset(trainer.data_config, *share)
            self._batches = dataset.as_numpy_iterator()
        variables = (classifier.trainable_variables, classifier.non_trainable_variables, optimizer.variables)
        state = tuple([v.value for v in group] for group in variables)
        losses, rights = [], []
        while len(losses) < steps and not (losses and trainer.stop()):
            images, labels = (
                keras.tree.map_structure(self._on_devices, part) for part in next(self._batches)
            )
            state, loss, right = self._step(state, images, labels)
            losses.append(loss)  # device values: no host round trip per step
            rights.append(right)
        for group, values in zip(variables, state, strict=True):
            for variable, value in zip(group, values, strict=True):
                variable.assign(value)
        return {
            "steps": len(losses),
            "loss_sum": float(sum(ops.convert_to_numpy(x) for x in losses)),
            "right_sum": float(sum(ops.convert_to_numpy(x) for x in rights)),
        }

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

        trainer = self.trainer
        classifier, optimizer, loss_fn = trainer.classifier, trainer.optimizer, self.loss_fn
        task = trainer.job.task  # what a right answer is: the task's
        global_batch = trainer.job.global_batch
        optimizer_variables = optimizer.variables

        def loss_and_updates(trainable, non_trainable, optimizer_values, images, labels):
            probabilities, non_trainable, losses = classifier.stateless_call(
                trainable, non_trainable, images, training=True, return_losses=True
            )
            loss = ops.sum(loss_fn(labels, probabilities)) / global_batch
            if losses:
                loss = loss + ops.sum(ops.stack(losses)) / trainer.job.platform.replicas
            # A loss-scale optimizer (float16) scales with its own variable: read it from the state.
            with keras.StatelessScope(
                state_mapping=list(zip(optimizer_variables, optimizer_values, strict=True))
            ):
                scaled = optimizer.scale_loss(loss)
            return scaled, (loss, probabilities, non_trainable)

        def step(state, images, labels):
            trainable, non_trainable, optimizer_values = state
            images, labels = classifier.prepare(images, labels, training=True)
            gradient = jax.value_and_grad(loss_and_updates, has_aux=True)
            (_, (loss, probabilities, non_trainable)), grads = gradient(
                trainable, non_trainable, optimizer_values, images, labels
            )
            trainable, optimizer_values = optimizer.stateless_apply(optimizer_values, grads, trainable)
            right = task.right_answers(probabilities, labels)
            return (trainable, non_trainable, optimizer_values), loss, right

        out_shardings = None
        if trainer.job.platform.distribution is not None:  # keep every variable where Keras laid it out

            def layout(variables):
                return [v.value.sharding for v in variables]

            state = (
                layout(classifier.trainable_variables),
                layout(classifier.non_trainable_variables),
                layout(optimizer_variables),
            )
            out_shardings = (state, None, None)
        return jax.jit(step, donate_argnums=0, out_shardings=out_shardings)
