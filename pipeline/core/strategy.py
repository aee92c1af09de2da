"""The one place that decides the distribution strategy, the precision and the compile settings.

`pick_strategy` tries, in order: a TPU (Kaggle/Colab address, a TPU VM with `tpu="local"`,
a named TPU or pod slice) -> several GPUs (MirroredStrategy) -> several workers described by
`TF_CONFIG` (MultiWorkerMirroredStrategy) -> one GPU -> the CPU. It catches only the
exceptions that mean "not here", and says what it chose and why. Everything else uses
`strategy.scope()` and `strategy.num_replicas_in_sync`.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass

import tensorflow as tf

from pipeline.core.errors import PetalsError

log = logging.getLogger(__name__)

STRATEGIES = ("auto", "tpu", "mirrored", "multi-worker", "gpu", "cpu")
# Environment variables that locate a TPU on Kaggle / Colab (older TPU nodes).
TPU_ADDRESS_VARIABLES = ("TPU_NAME", "COLAB_TPU_ADDR")


@dataclass(frozen=True)
class Picked:
    strategy: tf.distribute.Strategy
    kind: str  # tpu | mirrored | multi-worker | gpu | cpu
    reason: str
    device: str = "CPU"  # what the replicas run on: TPU | GPU | CPU

    @property
    def replicas(self) -> int:
        return self.strategy.num_replicas_in_sync

    @property
    def accelerated(self) -> bool:
        return self.device != "CPU"


def split_cpu(replicas: int) -> None:
    """Make `replicas` logical CPU devices, so multi-replica code runs (and is tested) without accelerators.

    Must run before TensorFlow initialises its devices, i.e. before the first op.
    """
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)
    except RuntimeError:
        current = len(tf.config.list_logical_devices("CPU"))
        if current != replicas:
            raise PetalsError(
                f"--cpu-replicas {replicas}: TensorFlow already started with {current} CPU device(s); "
                "it must be set before anything else runs"
            ) from None


def _connect_tpu(tpu: str | None) -> tuple[tf.distribute.Strategy, str] | None:
    """A TPUStrategy, or None when there is no TPU to connect to."""
    address = tpu or next((os.environ[v] for v in TPU_ADDRESS_VARIABLES if os.environ.get(v)), None)
    candidates = [address] if address else [None, "local"]  # None: the resolver's own discovery
    tf_logger = logging.getLogger("tensorflow")
    for candidate in candidates:
        level = tf_logger.level
        tf_logger.setLevel(logging.WARNING)  # its "Initializing the TPU system" lines, TPU or not
        try:
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=candidate)
            tf.config.experimental_connect_to_cluster(resolver)
            tf.tpu.experimental.initialize_tpu_system(resolver)
        except (ValueError, tf.errors.NotFoundError, tf.errors.UnavailableError) as err:
            log.debug("strategy: no TPU at %r: %s", candidate, err)
            continue
        finally:
            tf_logger.setLevel(level)
        where = candidate or resolver.master() or "discovered"
        return tf.distribute.TPUStrategy(resolver), f"TPU at {where}"
    return None


def _workers_in_tf_config() -> int:
    try:
        cluster = json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {})
    except json.JSONDecodeError:
        raise PetalsError("TF_CONFIG is set but is not valid JSON") from None
    return len(cluster.get("worker", [])) + len(cluster.get("chief", []))


def pick_strategy(name: str = "auto", tpu: str | None = None, cpu_replicas: int = 0) -> Picked:
    """The strategy for this machine (or the one asked for), with the reason in words."""
    if name not in STRATEGIES:
        raise PetalsError(f"unknown strategy {name!r} (choose from {', '.join(STRATEGIES)})")
    if cpu_replicas > 1:
        split_cpu(cpu_replicas)
        cpus = [d.name for d in tf.config.list_logical_devices("CPU")]
        return Picked(
            tf.distribute.MirroredStrategy(cpus), "mirrored", f"{len(cpus)} logical CPU replicas asked for"
        )

    if name in ("auto", "tpu"):
        connected = _connect_tpu(tpu)
        if connected:
            return Picked(connected[0], "tpu", connected[1], "TPU")
        if name == "tpu":
            raise PetalsError(
                f"--strategy tpu: no TPU found{f' at {tpu}' if tpu else ''} (TPU_NAME unset, no local TPU)"
            )
    gpus = tf.config.list_logical_devices("GPU")
    workers = _workers_in_tf_config()
    if name == "multi-worker" or (name == "auto" and workers > 1):
        if workers < 1:
            raise PetalsError("--strategy multi-worker needs TF_CONFIG describing the cluster")
        return Picked(
            tf.distribute.MultiWorkerMirroredStrategy(), "multi-worker", f"TF_CONFIG lists {workers} workers"
        )
    if name == "mirrored" or (name == "auto" and len(gpus) > 1):
        if not gpus:
            raise PetalsError(
                "--strategy mirrored: no GPU found (use --cpu-replicas N to mirror over the CPU)"
            )
        return Picked(tf.distribute.MirroredStrategy(), "mirrored", f"{len(gpus)} GPUs", "GPU")
    if name == "gpu" or (name == "auto" and gpus):
        if not gpus:
            raise PetalsError("--strategy gpu: no GPU found")
        return Picked(
            tf.distribute.OneDeviceStrategy(gpus[0].name), "gpu", f"one GPU ({gpus[0].name})", "GPU"
        )
    reason = "asked for" if name == "cpu" else "no TPU, no GPU and no TF_CONFIG cluster found"
    return Picked(tf.distribute.get_strategy(), "cpu", reason)


# ----------------------------------------------------------------------------- speed settings


def pick_precision(device: str, asked: str = "auto") -> str:
    """The Keras dtype policy: bfloat16 on TPUs, float16 on GPUs, float32 on the CPU."""
    if asked != "auto":
        return asked
    return {"TPU": "mixed_bfloat16", "GPU": "mixed_float16"}.get(device, "float32")


def pick_jit_compile(device: str, asked: str = "auto") -> bool:
    """XLA on accelerators (TPUs always compile); off on the CPU, where it rarely pays for itself."""
    if device == "TPU":
        return True
    if asked != "auto":
        return asked == "on"
    return device == "GPU"


def pick_steps_per_execution(device: str, asked: int = 0) -> int:
    """Steps run per call into the device: amortises host round trips on accelerators."""
    if asked:
        return asked
    return {"TPU": 32, "GPU": 8}.get(device, 1)
