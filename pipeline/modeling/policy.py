"""Training policy as pure functions: the learning-rate schedule, batch scaling, fine-tuning."""

from __future__ import annotations

import math

from pipeline.core.config import TrainConfig


def learning_rate(epoch: int, train: TrainConfig, replicas: int) -> float:
    """LR of a 0-based epoch: ramp from lr_start to lr_max x replicas, hold, decay exponentially to lr_min.

    The public TPU recipe: 1e-5 ramping over 5 epochs to 5e-5 x 8, then x0.8 per epoch down to 1e-5.
    """
    peak = train.lr_max * replicas
    if epoch < train.lr_ramp_epochs:
        return train.lr_start + (peak - train.lr_start) * epoch / train.lr_ramp_epochs
    if epoch < train.lr_ramp_epochs + train.lr_sustain_epochs:
        return peak
    decayed = epoch - train.lr_ramp_epochs - train.lr_sustain_epochs
    return train.lr_min + (peak - train.lr_min) * train.lr_decay**decayed


def steps_per_epoch(train: TrainConfig, images: int, global_batch: int) -> int:
    """Steps that see every training image about once, at least `train.min_steps_per_epoch`, and
    at most `train.max_passes_per_epoch` passes over the training images (0: no such bound)."""
    if train.steps_per_epoch:
        return train.steps_per_epoch
    one_pass = max(1, images // global_batch)
    steps = max(one_pass, train.min_steps_per_epoch)
    if train.max_passes_per_epoch:
        steps = min(steps, max(one_pass, math.ceil(train.max_passes_per_epoch * images / global_batch)))
    return steps


def backbone_trainable(epoch: int, train: TrainConfig) -> bool:
    """Whether the backbone trains in this epoch: frozen for the warm-up epochs, then fine-tuned."""
    return epoch >= train.frozen_epochs
