"""Keras on JAX: the devices JAX sees (or N host devices asked for), laid out by one
`keras.distribution.DataParallel`, and XLA's compiled programs kept on disk between processes.

Used by `pipeline.core.device.pick`, which has already set KERAS_BACKEND to jax.
"""

from __future__ import annotations

import os
from pathlib import Path

from pipeline.core import hosts as hosts_module
from pipeline.core.errors import PetalsError
from pipeline.core.machine import (
    TPU_STANDIN_VARIABLE,
    Platform,
    refuse_tpu,
    tensorflow_sees_tpus,
    tpu_signs,
)

JAX_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "petals" / "jax"


def _jax_cpu_devices(replicas: int) -> None:
    """Ask XLA for `replicas` host devices; only possible before JAX starts its CPU backend."""
    flag = f"--xla_force_host_platform_device_count={replicas}"
    flags = [
        f for f in os.environ.get("XLA_FLAGS", "").split() if "xla_force_host_platform_device_count" not in f
    ]
    os.environ["XLA_FLAGS"] = " ".join([*flags, flag])


def _keep_compiled_programs(jax) -> None:
    """XLA's compiled programs on disk, so the next process finds them: evaluate and predict build the
    model that train built, a resumed run or a new kernel version compiles the same step. On this CPU
    it takes building EfficientNetB0 under JAX from 40 s to 14 s (its initialisers compile per shape,
    each under the default 1 s threshold, hence 0; about 2 MB). JAX_COMPILATION_CACHE_DIR moves it."""
    if not jax.config.jax_compilation_cache_dir:
        jax.config.update("jax_compilation_cache_dir", str(JAX_CACHE))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)


def pick_jax(strategy: str, cpu_replicas: int, why: str) -> Platform:
    """Every device JAX sees (or `cpu_replicas` host devices), data-parallel when there are several;
    a TPU that was wanted and is not there stops here (`refuse_tpu`), unless emulation stands in."""
    if strategy == "multi-worker":
        raise PetalsError("--strategy multi-worker (TF_CONFIG) is TensorFlow's; use --backend tensorflow")
    hosts = hosts_module.from_environment()
    if cpu_replicas > 1:
        _jax_cpu_devices(cpu_replicas)  # on each host: the mesh spans hosts x cpu_replicas
    import jax

    _keep_compiled_programs(jax)
    hosts = hosts_module.join_jax(hosts)  # before any device is touched
    standin = os.environ.get(TPU_STANDIN_VARIABLE) == "cpu"
    if strategy == "cpu" or cpu_replicas > 1:
        devices, reason = (
            jax.devices("cpu"),
            "asked for" if strategy == "cpu" else f"{cpu_replicas} CPU devices asked for",
        )
    else:
        devices = jax.devices()
        reason = why
    platform_name = devices[0].platform  # cpu | gpu | tpu
    device = {"tpu": "TPU", "gpu": "GPU", "cuda": "GPU", "rocm": "GPU"}.get(platform_name, "CPU")
    local = [d for d in devices if d.process_index == jax.process_index()]
    if cpu_replicas > 1 and len(local) != cpu_replicas:
        raise PetalsError(
            f"--cpu-replicas {cpu_replicas}: JAX already started with {len(local)} CPU device(s); "
            "it must be set before anything else runs"
        )
    if hosts.several:
        reason = f"{reason}; {hosts.describe()}, {len(local)} device(s) here"
    tpu_wanted = strategy == "tpu" or (strategy == "auto" and tpu_signs())
    if tpu_wanted and device != "TPU":
        if standin and device == "CPU":
            reason = (
                f"{len(devices)} CPU devices stand in for the TPU ({TPU_STANDIN_VARIABLE}=cpu: emulation)"
            )
            device = "TPU"
        else:
            jax_found = f"JAX sees no TPU ({len(devices)} {platform_name} device(s))"
            if why != "asked for":  # auto chose JAX because TensorFlow cannot drive the TPU: say both
                jax_found = f"{tensorflow_sees_tpus()[1]}, and {jax_found}"
            refuse_tpu(strategy, jax_found)
    if strategy in ("gpu", "mirrored") and device != "GPU":
        raise PetalsError(
            f"--strategy {strategy}: JAX sees no GPU ({len(devices)} {platform_name} device(s))"
        )
    import keras

    distribution = None
    if len(devices) > 1:
        # Across processes each one feeds its own share (hosts.input_share), not the global batch
        # for Keras to cut: JAX assembles the hosts' batches into one.
        distribution = keras.distribution.DataParallel(devices=devices, auto_shard_dataset=not hosts.several)
        keras.distribution.set_distribution(distribution)
    kind = "data-parallel" if distribution else "one-device"
    return Platform(
        "jax",
        kind,
        device,
        len(devices),
        len(devices),
        reason,
        devices[0].device_kind,
        distribution=distribution,
        hosts=hosts,
    )
