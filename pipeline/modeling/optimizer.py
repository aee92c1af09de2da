"""The optimizer: Adam that keeps a moving average of the weights, on both backends.

Two things Keras's Adam does not do for petals:
- It keeps the weight average (`use_ema`) in the optimizer when a Keras `fit` call ends, where
  Keras would copy it into the network. petals scores and saves the average every epoch
  (`averaged_weights`) and trains on from the trained weights, across `fit` calls (warm-up,
  then fine-tuning) and across an interrupted run's resume.
- It is built once on every variable that will ever train, so its state (and a checkpoint's
  layout) is the same whether the backbone is frozen or not. TensorFlow's `apply` takes a
  subset of those variables; JAX's `stateless_apply` does not, so this one applies a subset
  inside a `StatelessScope`, and averages only the variables that trained (the others keep
  their values, and so their averages, which start at those values).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

import keras
from keras import ops


class AveragingAdam(keras.optimizers.Adam):
    """Adam with a weight average that stays put, and stateless updates of a subset of its variables."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # The variables training now, in the order of the values `stateless_apply` gets (the
        # model's `trainable_variables`); set by the trainer. Kept off Keras's attribute tracking,
        # which would count these variables as the optimizer's own.
        object.__setattr__(self, "training_variables", None)
        object.__setattr__(self, "_subset", None)

    def finalize_variable_values(self, var_list):
        pass  # the average stays in the optimizer (see the module docstring)

    def stateless_apply(self, optimizer_variables, grads, trainable_variables):
        if len(trainable_variables) == len(self._trainable_variables):
            return super().stateless_apply(optimizer_variables, grads, trainable_variables)
        training: Sequence = self.training_variables() if self.training_variables else ()
        if len(training) != len(trainable_variables):
            raise ValueError(
                f"stateless_apply got {len(trainable_variables)} values; the optimizer knows "
                f"{len(self._trainable_variables)} variables and {len(training)} are training now"
            )
        mapping = list(zip(training, trainable_variables, strict=True))
        mapping += list(zip(self.variables, optimizer_variables, strict=True))
        object.__setattr__(self, "_subset", list(training))
        try:
            with keras.StatelessScope(state_mapping=mapping) as scope:
                self.apply(grads, training)
        finally:
            object.__setattr__(self, "_subset", None)
        return [scope.get_current_value(v) for v in training], [
            scope.get_current_value(v) for v in self.variables
        ]

    def _update_model_variables_moving_average(self, trainable_variables):
        """Average the variables that trained this step (all of them unless a subset is applied)."""
        if self._subset is None:
            return super()._update_model_variables_moving_average(trainable_variables)
        averages = self._model_variables_moving_average
        for variable in self._subset:
            average = averages[self._get_variable_index(variable)]
            momentum = ops.cast(ops.not_equal(self.iterations, 0), variable.dtype) * self.ema_momentum
            average.assign(momentum * average + (1.0 - momentum) * variable)


def make_optimizer(
    lr: float,
    ema: float,
    precision: str,
    variables: Sequence,
    training: Callable,
    weight_decay: float = 0.0,
) -> keras.Optimizer:
    """The optimizer for a run, built on every variable that will ever train.

    `training()` returns the variables training at the moment (the backbone may be frozen).
    Mixed float16 wraps it in a loss-scale optimizer. `weight_decay` is AdamW's decoupled decay
    (Keras's: `var -= var x weight_decay x lr` each step, before the gradient's update), on the
    matrices and kernels only: biases and scales (ndim <= 1) keep theirs, as timm's AdamW groups do.
    """
    inner = AveragingAdam(lr, use_ema=ema > 0, ema_momentum=ema or 0.99, weight_decay=weight_decay or None)
    object.__setattr__(inner, "training_variables", training)
    if weight_decay:
        inner.exclude_from_weight_decay(var_list=[v for v in variables if len(v.shape) <= 1])
    optimizer = keras.optimizers.LossScaleOptimizer(inner) if precision == "mixed_float16" else inner
    optimizer.build(list(variables))
    if inner.use_ema:
        # Keras starts each average at zero and sets it to its variable at the first step that
        # variable trains; a variable that has not trained yet (a frozen backbone, frozen
        # BatchNorm) is averaged at the value it has, so the average starts there.
        for variable, average in zip(
            inner._trainable_variables, inner._model_variables_moving_average, strict=True
        ):
            average.assign(variable.numpy())
    return optimizer


def averaging(optimizer: keras.Optimizer) -> AveragingAdam:
    """The AveragingAdam inside a loss-scale optimizer (or the optimizer itself)."""
    return getattr(optimizer, "inner_optimizer", optimizer)


@contextlib.contextmanager
def averaged_weights(optimizer: keras.Optimizer) -> Iterator[None]:
    """The weights' moving average in the network for the block, then the trained weights back
    (as Keras's SwapEMAWeights does, for both loops and both backends). A no-op without `use_ema`."""
    inner = averaging(optimizer)
    if not inner.use_ema:
        yield
        return
    pairs = list(zip(inner._trainable_variables, inner._model_variables_moving_average, strict=True))
    trained = [variable.numpy() for variable, _ in pairs]
    for variable, average in pairs:
        # A copy: on JAX, assigning the average itself would share its buffer, and the next jitted
        # call that donates the network's state would delete the optimizer's average with it.
        variable.assign(average.numpy())
    try:
        yield
    finally:
        for (variable, _), value in zip(pairs, trained, strict=True):
            variable.assign(value)
