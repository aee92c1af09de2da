"""What this machine is, read from device files, environment variables and installed packages
alone (no framework is imported), and `Platform`, what `pipeline.core.device.pick` answers.

Kept apart from the picking so the TensorFlow and JAX pickers share it without importing each other.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.metadata
import os
from dataclasses import dataclass, field
from typing import Any

from pipeline.core.errors import PetalsError
from pipeline.core.hosts import Hosts

TPU_ADDRESS_VARIABLES = ("TPU_NAME", "COLAB_TPU_ADDR")  # a TPU reached over gRPC (TPU Nodes, old Colab)
# Kernel emulation only (make kernel-emulate): JAX's CPU devices stand in for the TPU cores of a
# TPU VM, so the TPU code path runs end to end on a machine without one. Says so on every stage.
TPU_STANDIN_VARIABLE = "PETALS_TPU_STANDIN"


@dataclass(frozen=True)
class Platform:
    """What the replicas run on, and how: the answer of `pick`."""

    backend: str  # tensorflow | jax
    kind: str  # tpu | mirrored | multi-worker | gpu | cpu (TensorFlow); data-parallel | one-device (JAX)
    device: str  # TPU | GPU | CPU: what the replicas run on
    devices: int  # how many of them
    replicas: int  # batches are split this many ways
    reason: str
    device_name: str = ""  # e.g. "TPU v5 lite", as the backend names it
    strategy: Any = None  # tf.distribute.Strategy (TensorFlow)
    distribution: Any = None  # keras.distribution.Distribution (JAX, several devices)
    hosts: Hosts = field(default_factory=Hosts)  # the processes training together; process 0 writes

    @property
    def accelerated(self) -> bool:
        return self.device != "CPU"

    def scope(self) -> contextlib.AbstractContextManager:
        """Where variables must be created: the strategy's scope on TensorFlow. On JAX the
        distribution is global (set by `pick`), so variables made anywhere are laid out by it."""
        return self.strategy.scope() if self.strategy is not None else contextlib.nullcontext()

    def describe(self, precision: str | None = None) -> str:
        """The line every stage prints: backend, devices, replicas, precision, why."""
        name = f" ({self.device_name})" if self.device_name.lower() not in ("", self.device.lower()) else ""
        devices = f"{self.devices} {self.device}{'s' if self.devices != 1 else ''}{name}"
        parts = [f"backend {self.backend}", devices, f"{self.replicas} replica{'s' * (self.replicas != 1)}"]
        if precision:
            parts.append(precision)
        return f"{', '.join(parts)}: {self.reason}"


# ----------------------------------------------------------------------------- what this machine is


def tpu_signs() -> list[str]:
    """Evidence that this machine is (or reaches) a TPU, in words; empty on a plain machine."""
    signs = []
    if os.environ.get("ISTPUVM") == "1":
        signs.append("ISTPUVM=1")
    accel = sorted(glob.glob("/dev/accel*"))
    if accel:
        signs.append(f"{len(accel)} /dev/accel* device(s)")
    vfio = [p for p in glob.glob("/dev/vfio/*") if os.path.basename(p) != "vfio"]
    if vfio:
        signs.append("/dev/vfio devices")
    signs += [f"{v} is set" for v in TPU_ADDRESS_VARIABLES if os.environ.get(v) and not on_tpu_vm()]
    return signs


def on_tpu_vm() -> bool:
    """A TPU VM (Kaggle's and Colab's TPUs today): the TPU is local, never a gRPC address."""
    return os.environ.get("ISTPUVM") == "1" or bool(glob.glob("/dev/accel*"))


def tensorflow_build() -> tuple[str, str]:
    """The installed TensorFlow distribution and its version, read without importing it."""
    for name in ("tensorflow-tpu", "tensorflow", "tensorflow-cpu", "tf-nightly", "tensorflow-macos"):
        try:
            return name, importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "", ""


def cpu_info(info: str = "/proc/cpuinfo") -> tuple[str, frozenset[str]]:
    """(this CPU's model, its flags), from the first processor's block; ("", none) where the kernel
    does not say."""
    try:
        with open(info, errors="replace") as lines:
            first = lines.read(1 << 16).split("\n\n")[0]  # the first processor's block
    except OSError:
        return "", frozenset()
    fields = {}
    for line in first.splitlines():
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return " ".join(fields.get("model name", "").split())[:80], frozenset(fields.get("flags", "").split())


def cpu_name(info: str = "/proc/cpuinfo") -> str:
    """This CPU's model and whether it has AVX-512 (`AMD EPYC, AVX-512`); "" where the kernel does
    not say. A run records it: oneDNN picks its kernels, so its round-off, by instruction set, and
    one fine-tune at one commit and seed scored 0.8986 and 0.9049 on 2,000 test images with AVX-512
    and held to AVX2 (docs/BENCHMARKS.md), as much as a seed moves it."""
    model, flags = cpu_info(info)
    return f"{model}, {'AVX-512' if 'avx512f' in flags else 'no AVX-512'}" if model else ""


def built_with(backend: str) -> dict[str, str]:
    """The versions of what computes a run's numbers on `backend` (TensorFlow, or JAX and jaxlib;
    Keras and NumPy on both), read without importing them; a package not installed is left out."""
    name, version = tensorflow_build() if backend == "tensorflow" else ("", "")
    found = {name: version} if name else {}
    for package in ("jax", "jaxlib", "keras", "numpy") if backend == "jax" else ("keras", "numpy"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found[package] = importlib.metadata.version(package)
    return found


def jax_installed() -> bool:
    try:
        importlib.metadata.version("jax")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def tensorflow_sees_tpus() -> tuple[bool, str]:
    """Whether this TensorFlow can drive a TPU here, and what was found, in words."""
    name, version = tensorflow_build()
    if not name:
        return False, "TensorFlow is not installed"
    if on_tpu_vm() and name != "tensorflow-tpu":
        return False, f"TensorFlow {version} is a CPU-only build ({name}), which cannot drive a TPU VM's TPU"
    return True, f"{name} {version}"


def refuse_tpu(strategy: str, found: str) -> None:
    """A TPU was asked for, or this is a TPU machine in `auto`: stop, naming what was found."""
    signs = tpu_signs()
    if strategy == "tpu" or signs:
        asked = "--strategy tpu" if strategy == "tpu" else f"this is a TPU machine ({', '.join(signs)})"
        raise PetalsError(
            f"{asked}, but no TPU can be used: {found}; nothing was trained on the CPU instead "
            "(--strategy cpu does that on purpose)"
        )


# ----------------------------------------------------------------------------- before TensorFlow starts

# TensorFlow's CPU allocator hands each tensor to glibc, which maps a large buffer on every call
# and unmaps it after: EfficientNet-Lite0's forward pass at batch 128 spent a third of its time
# faulting pages in (sys time; 120 million minor faults in one main job). TensorFlow's BFC
# allocator keeps its buffers: 77-86 against 49-51 examples/s here (`make bench-forward`). Read
# once, when TensorFlow makes its first CPU allocation. It keeps what it took (the main job's peak
# 6.0 GB against 3.4), and it was measured on CPU machines only: where an accelerator does the
# network's work, TensorFlow's default stays.
CPU_ALLOCATOR = {"TF_CPU_ALLOCATOR_USE_BFC": "true"}


def accelerator_signs() -> list[str]:
    """A TPU's or an NVIDIA GPU's device files or variables, in words; empty on a CPU machine."""
    gpus = glob.glob("/dev/nvidia[0-9]*")
    return tpu_signs() + ([f"{len(gpus)} /dev/nvidia* device(s)"] if gpus else [])


def engine_environment() -> None:
    """The engine settings petals runs with on a machine without accelerators, unless the
    environment sets them already; before TensorFlow is imported (later, they change nothing)."""
    if accelerator_signs():
        return
    for name, value in CPU_ALLOCATOR.items():
        os.environ.setdefault(name, value)
