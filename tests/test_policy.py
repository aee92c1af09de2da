"""Training policy: the learning-rate schedule, steps per epoch, the frozen warm-up."""

from __future__ import annotations

import itertools

import pytest

from pipeline.core.config import TrainConfig
from pipeline.modeling import policy

PUBLIC_TPU = TrainConfig(
    lr_start=1e-5, lr_max=5e-5, lr_min=1e-5, lr_ramp_epochs=5, lr_sustain_epochs=0, lr_decay=0.8
)


def test_the_public_tpu_schedule_ramps_then_decays():
    lrs = [policy.learning_rate(e, PUBLIC_TPU, replicas=8) for e in range(20)]
    assert lrs[0] == pytest.approx(1e-5)
    assert lrs[1] == pytest.approx(1e-5 + (4e-4 - 1e-5) / 5)
    assert lrs[5] == pytest.approx(4e-4)  # the peak: 5e-5 x 8 replicas
    assert lrs[6] == pytest.approx(1e-5 + (4e-4 - 1e-5) * 0.8)
    assert all(a < b for a, b in itertools.pairwise(lrs[:6]))
    assert all(a > b for a, b in itertools.pairwise(lrs[5:]))
    assert 1e-5 < lrs[-1] < 3e-5  # approaches lr_min from above
    assert policy.learning_rate(80, PUBLIC_TPU, replicas=8) == pytest.approx(1e-5, rel=1e-3)


def test_sustain_holds_the_peak_and_replicas_scale_it():
    train = TrainConfig(lr_max=1e-3, lr_ramp_epochs=2, lr_sustain_epochs=3)
    assert [policy.learning_rate(e, train, 1) for e in (2, 3, 4)] == [1e-3] * 3
    assert policy.learning_rate(3, train, 4) == pytest.approx(4e-3)


def test_no_ramp_starts_at_the_peak():
    train = TrainConfig(lr_max=2e-3, lr_ramp_epochs=0)
    assert policy.learning_rate(0, train, 1) == pytest.approx(2e-3)


def test_steps_per_epoch_covers_the_data_once_and_can_be_fixed():
    assert policy.steps_per_epoch(TrainConfig(), images=2404, global_batch=128) == 18
    assert policy.steps_per_epoch(TrainConfig(), images=10, global_batch=128) == 1
    assert policy.steps_per_epoch(TrainConfig(steps_per_epoch=7), images=2404, global_batch=128) == 7


def test_a_floor_of_steps_is_bounded_in_passes_over_small_data():
    floored = TrainConfig(min_steps_per_epoch=100, max_passes_per_epoch=4)
    assert policy.steps_per_epoch(floored, images=187, global_batch=64) == 12  # 4 passes, not 34
    assert policy.steps_per_epoch(floored, images=1077, global_batch=64) == 68  # 4 passes of 16.8
    assert policy.steps_per_epoch(floored, images=9607, global_batch=64) == 150  # one pass: above the floor
    assert policy.steps_per_epoch(floored, images=30, global_batch=64) == 2  # under a batch: 4 passes
    unbounded = TrainConfig(min_steps_per_epoch=100)
    assert policy.steps_per_epoch(unbounded, images=187, global_batch=64) == 100


def test_backbone_is_frozen_only_for_the_warm_up_epochs():
    train = TrainConfig(frozen_epochs=2)
    assert [policy.backbone_trainable(e, train) for e in range(4)] == [False, False, True, True]
