"""The strategy picker: fallbacks without accelerators, overrides, logical CPU replicas."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from pipeline.core import strategy
from pipeline.core.errors import PetalsError
from tests.conftest import REPO


def test_without_accelerators_auto_falls_back_to_the_cpu_and_says_why(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    for variable in strategy.TPU_ADDRESS_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    picked = strategy.pick_strategy("auto")
    assert picked.kind == "cpu" and picked.replicas == 1 and not picked.accelerated
    assert "no TPU, no GPU" in picked.reason


def test_asking_for_a_missing_tpu_or_gpu_is_one_line():
    with pytest.raises(PetalsError, match="--strategy tpu: no TPU found"):
        strategy.pick_strategy("tpu")
    with pytest.raises(PetalsError, match="--strategy gpu: no GPU found"):
        strategy.pick_strategy("gpu")
    with pytest.raises(PetalsError, match="unknown strategy 'tpus'"):
        strategy.pick_strategy("tpus")


def test_precision_and_compile_defaults_follow_the_hardware():
    assert strategy.pick_precision("TPU") == "mixed_bfloat16"
    assert strategy.pick_precision("GPU") == "mixed_float16"
    assert strategy.pick_precision("CPU") == "float32"  # logical CPU replicas included
    assert strategy.pick_precision("GPU", "float32") == "float32"
    assert strategy.pick_jit_compile("TPU", "off") is True  # TPUs always compile
    assert strategy.pick_jit_compile("CPU") is False and strategy.pick_jit_compile("CPU", "on") is True
    assert strategy.pick_jit_compile("GPU") is True
    assert strategy.pick_steps_per_execution("TPU") == 32 and strategy.pick_steps_per_execution("CPU") == 1
    assert strategy.pick_steps_per_execution("TPU", 4) == 4


def test_cpu_replicas_give_a_mirrored_strategy_over_logical_devices():
    # A fresh process: logical devices must be set before TensorFlow starts.
    code = textwrap.dedent(
        """
        from pipeline.core import strategy
        picked = strategy.pick_strategy("auto", cpu_replicas=8)
        print(picked.kind, picked.replicas, picked.reason)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "mirrored 8 8 logical CPU replicas asked for"


def test_auto_recipe_follows_what_the_replicas_run_on():
    from pipeline.stages.train import resolve_recipe

    assert [resolve_recipe("auto", d) for d in ("TPU", "GPU", "CPU")] == ["tpu", "gpu", "cpu"]
    assert resolve_recipe("densenet201", "TPU") == "densenet201"
