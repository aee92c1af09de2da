"""The backend and device picker: choices, refusals, logical CPU replicas on both backends."""

from __future__ import annotations

import os

import pytest

from pipeline.core import device, machine
from pipeline.core.config import resolve_recipe
from pipeline.core.errors import PetalsError
from pipeline.core.machine import Platform
from tests.conftest import error_lines, run_cli, run_python


@pytest.fixture
def plain_machine(monkeypatch):
    """No TPU signs in the environment (this machine has no /dev/accel or /dev/vfio devices)."""
    for variable in ("ISTPUVM", "TF_CONFIG", machine.TPU_STANDIN_VARIABLE, *machine.TPU_ADDRESS_VARIABLES):
        monkeypatch.delenv(variable, raising=False)
    assert device.tpu_signs() == []


def test_without_accelerators_auto_takes_tensorflow_on_the_cpu_and_says_why(plain_machine):
    picked = device.pick("auto", "auto")
    assert (picked.backend, picked.kind, picked.device, picked.replicas) == ("tensorflow", "cpu", "CPU", 1)
    assert not picked.accelerated and "no TPU, no GPU" in picked.reason
    line = picked.describe("float32")
    assert line.startswith("backend tensorflow, 1 CPU, 1 replica, float32: ") and "\n" not in line


def test_unknown_names_and_missing_devices_are_one_line(plain_machine):
    with pytest.raises(PetalsError, match="--strategy gpu: no GPU found"):
        device.pick("tensorflow", "gpu")
    with pytest.raises(PetalsError, match="unknown strategy 'tpus'"):
        device.pick("auto", "tpus")
    with pytest.raises(PetalsError, match="unknown backend 'torch'"):
        device.pick("torch")
    with pytest.raises(PetalsError, match="Keras was already imported with the tensorflow backend"):
        device.pick("jax", "cpu")  # this process's Keras is TensorFlow's: the backend cannot change


def test_the_backend_is_chosen_from_the_machine_before_anything_is_imported(plain_machine, monkeypatch):
    assert device.choose_backend("auto", "auto", None)[0] == "tensorflow"
    monkeypatch.setenv("ISTPUVM", "1")  # Kaggle's TPU image: tensorflow-cpu, jax[tpu]
    backend, why = device._auto_backend("auto", None)
    assert backend == "jax" and "is a CPU-only build (tensorflow-cpu)" in why
    monkeypatch.setattr(device, "jax_installed", lambda: False)
    with pytest.raises(PetalsError, match=r"a TPU was found \(ISTPUVM=1\), but .* JAX is not installed"):
        device._auto_backend("auto", None)


def _platform(device_name: str, backend: str = "tensorflow", kind: str = "x") -> Platform:
    return Platform(backend, kind, device_name, 1, 1, "test")


def test_precision_and_compile_defaults_follow_the_hardware():
    tpu, gpu, cpu = _platform("TPU"), _platform("GPU"), _platform("CPU")
    assert device.pick_precision(tpu) == "mixed_bfloat16" and device.pick_precision(gpu) == "mixed_float16"
    assert device.pick_precision(cpu) == "float32"  # logical CPU replicas included
    assert device.pick_precision(gpu, "float32") == "float32"
    assert device.pick_jit_compile(tpu, "off") is True  # TPUs always compile
    assert device.pick_jit_compile(cpu) is False and device.pick_jit_compile(cpu, "on") is True
    assert device.pick_jit_compile(gpu) is True
    assert device.pick_jit_compile(_platform("CPU", "jax"), "off") is True  # JAX always compiles
    assert device.pick_steps_per_execution(tpu) == 32 and device.pick_steps_per_execution(cpu) == 1
    assert device.pick_steps_per_execution(tpu, 4) == 4


def test_a_call_of_steps_ends_where_an_epoch_does():
    """Keras's `fit` runs whole calls: 32 a call in a 4-step epoch trained 32 steps an epoch."""
    tpu, gpu, cpu = _platform("TPU"), _platform("GPU"), _platform("CPU")
    assert (
        device.pick_steps_per_execution(tpu, steps=4) == 4
        and device.pick_steps_per_execution(tpu, steps=96) == 32
    )
    assert device.pick_steps_per_execution(tpu, steps=99) == 11  # the most steps <= 32 that divide 99
    assert device.pick_steps_per_execution(tpu, steps=97) == 1  # a prime number of steps
    assert (
        device.pick_steps_per_execution(gpu, steps=12) == 6
        and device.pick_steps_per_execution(cpu, steps=7) == 1
    )
    assert device.pick_steps_per_execution(tpu, 4, steps=6) == 3  # what was asked for, at most
    assert device.pick_steps_per_execution(tpu, steps=96, done=40) == 8  # a resumed epoch's last 56
    assert device.pick_steps_per_execution(_platform("GPU", kind="mirrored"), 4, steps=8) == 1  # Keras fails


@pytest.mark.slow  # a TensorFlow or JAX process
# The thorough tier's: TensorFlow's 8-replica split is proven by the second-stage test below.
@pytest.mark.thorough
@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_cpu_replicas_split_the_cpu_on_both_backends(backend):
    done = run_python(
        f"""
        from pipeline.core import device, machine
        picked = device.pick("{backend}", "auto", cpu_replicas=8)
        import keras
        print(keras.backend.backend(), picked.kind, picked.devices, picked.replicas, picked.reason)
        """
    )
    assert done.returncode == 0, done.stderr[-2000:]
    kind = "mirrored" if backend == "tensorflow" else "data-parallel"
    assert done.stdout.split()[:4] == [backend, kind, "8", "8"]


@pytest.mark.slow  # a TensorFlow or JAX process
def test_a_second_stage_in_the_process_finds_the_cpu_split_and_another_split_is_one_line():
    done = run_python(
        """
        from pipeline.core import device
        from pipeline.core.errors import PetalsError
        first = device.pick("tensorflow", "auto", cpu_replicas=8)
        again = device.pick("tensorflow", "mirrored", cpu_replicas=8)  # not cached: a new strategy
        print(first.replicas, again.replicas, again is not first)
        try:
            device.pick("tensorflow", "auto", cpu_replicas=4)
        except PetalsError as error:
            print(error)
        """
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert lines[0] == "8 8 True"
    assert lines[1] == (
        "--cpu-replicas 4: TensorFlow already started with 8 CPU device(s); "
        "it must be set before anything else runs"
    )


@pytest.mark.slow  # a Python process importing the stages
def test_stages_import_no_framework_before_the_backend_is_chosen():
    done = run_python(
        """
        import sys
        from pipeline import cli
        from pipeline.stages import ensemble, evaluate, inspect, predict, train
        cli.build_parser(only="train").parse_args(["train", "--backend", "jax"])
        print(sorted(m for m in ("keras", "tensorflow", "jax") if m in sys.modules))
        """
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("args", "env", "found"),
    [
        (["--strategy", "tpu"], {}, "--strategy tpu, but no TPU can be used: TensorFlow found no TPU"),
        ([], {"ISTPUVM": "1"}, "this is a TPU machine (ISTPUVM=1), but no TPU can be used: TensorFlow 2.21"
         ".0 is a CPU-only build (tensorflow-cpu), which cannot drive a TPU VM's TPU, and JAX sees no TPU"),
        # Each half of the line above asked for alone: the thorough tier.
        pytest.param(["--backend", "tensorflow"], {"ISTPUVM": "1"}, "CPU-only build (tensorflow-cpu)",
                     marks=pytest.mark.thorough),
        pytest.param(["--backend", "jax", "--strategy", "tpu"], {}, "JAX sees no TPU",
                     marks=pytest.mark.thorough),
    ],
)  # fmt: skip
@pytest.mark.slow  # the train stage's process
def test_a_tpu_asked_for_but_unreachable_stops_in_one_line_and_writes_nothing(
    tiny_data_dir, tmp_path, args, env, found
):
    runs = tmp_path / "runs"
    done = run_cli(
        "train", "--data-dir", str(tiny_data_dir), "--runs-dir", str(runs), "--recipe", "cpu", *args, env=env
    )
    lines = error_lines(done.stderr)
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-2000:]
    assert found in lines[0] and "nothing was trained on the CPU instead" in lines[0], lines[0]
    assert not runs.exists()


@pytest.mark.thorough  # the JAX TPU stand-in (a second backend): kernel-emulate and the heavy tier use it
def test_an_emulated_tpu_is_jax_cpu_devices_and_says_so():
    done = run_python(
        """
        from pipeline.core import device, machine
        picked = device.pick("auto", "tpu", cpu_replicas=8)
        print(picked.backend, picked.device, picked.replicas)
        print(picked.reason)
        """,
        env={"ISTPUVM": "1", machine.TPU_STANDIN_VARIABLE: "cpu"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    first, reason = done.stdout.strip().splitlines()[-2:]
    assert first == "jax TPU 8" and "stand in for the TPU" in reason and "emulation" in reason


def test_auto_recipe_follows_what_the_replicas_run_on():
    assert [resolve_recipe("auto", d) for d in ("TPU", "GPU", "CPU")] == ["tpu", "gpu", "cpu"]
    assert resolve_recipe("densenet201", "TPU") == "densenet201"


def test_the_cpu_allocator_is_set_on_a_cpu_machine_unless_the_environment_or_an_accelerator_says(
    plain_machine, monkeypatch
):
    name = "TF_CPU_ALLOCATOR_USE_BFC"
    monkeypatch.delenv(name, raising=False)
    machine.engine_environment()
    assert machine.accelerator_signs() == [] and os.environ[name] == "true"
    monkeypatch.setenv(name, "false")  # the user's own choice stays
    machine.engine_environment()
    assert os.environ[name] == "false"
    monkeypatch.delenv(name)
    monkeypatch.setenv("ISTPUVM", "1")  # a TPU VM: TensorFlow's default allocator
    machine.engine_environment()
    assert name not in os.environ
    monkeypatch.delenv("ISTPUVM")
    monkeypatch.setattr(machine.glob, "glob", lambda p: ["/dev/nvidia0"] if "nvidia" in p else [])
    assert machine.accelerator_signs() == ["1 /dev/nvidia* device(s)"]
    machine.engine_environment()
    assert name not in os.environ
