"""The one place that decides the backend, the device and the distribution.

`pick` chooses Keras's backend before Keras is first imported (TensorFlow imports Keras, so
this is decided from device files and installed packages alone), then builds what runs the
replicas: a `tf.distribute` strategy on TensorFlow (TPUStrategy, mirrored GPUs, a TF_CONFIG
cluster, one GPU, the CPU, or N logical CPUs) or a `keras.distribution.DataParallel` over
every device on JAX. It says what it chose and why, and a TPU that was asked for (or that
this machine is built around) is used or the stage stops with one line: never a silent run
on the host CPU. Everything else asks the returned `Platform` for a scope and a replica
count, never for the backend by name.

Why these defaults: TensorFlow's TPUStrategy where TensorFlow can reach the TPU (a
`tensorflow-tpu` build); Keras on JAX where only JAX can (Kaggle's and Colab's TPU images ship
`tensorflow-cpu` since 2025-09); TensorFlow on GPUs and the CPU, where it ran this project's
CPU recipe about twice as fast as JAX (docs/BENCHMARKS.md; no GPU comparison was possible).
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import sys
from typing import Any

from pipeline.core import hosts as hosts_module
from pipeline.core.device_jax import pick_jax
from pipeline.core.errors import PetalsError, first_line
from pipeline.core.machine import (
    TPU_ADDRESS_VARIABLES,
    Platform,
    jax_installed,
    on_tpu_vm,
    refuse_tpu,
    tensorflow_sees_tpus,
    tpu_signs,
)
from pipeline.core.options import DeviceOptions

log = logging.getLogger(__name__)

BACKENDS = ("auto", "tensorflow", "jax")
STRATEGIES = ("auto", "tpu", "mirrored", "multi-worker", "gpu", "cpu")


# ----------------------------------------------------------------------------- the backend


def choose_backend(backend: str, strategy: str, tpu: str | None) -> tuple[str, str]:
    """The Keras backend for this process and why; set in KERAS_BACKEND before Keras is imported."""
    if backend not in BACKENDS:
        raise PetalsError(f"unknown backend {backend!r} (choose from {', '.join(BACKENDS)})")
    if strategy not in STRATEGIES:
        raise PetalsError(f"unknown strategy {strategy!r} (choose from {', '.join(STRATEGIES)})")
    if backend != "auto":
        chosen, why = backend, "asked for"
    else:
        chosen, why = _auto_backend(strategy, tpu)
    if chosen == "jax" and not jax_installed():
        raise PetalsError("backend jax: JAX is not installed (pip install jax, or jax[tpu] on a TPU VM)")
    if "keras" in sys.modules:
        import keras

        if keras.backend.backend() != chosen:
            raise PetalsError(
                f"backend {chosen}: Keras was already imported with the {keras.backend.backend()} backend "
                "in this process, and its backend cannot change; start a new process"
            )
    os.environ["KERAS_BACKEND"] = chosen
    return chosen, why


def _auto_backend(strategy: str, tpu: str | None) -> tuple[str, str]:
    several = hosts_module.from_environment()
    if several.several and several.source != "TF_CONFIG":
        return "jax", f"{several.describe()}: JAX joins the processes"
    signs = tpu_signs()
    wants_tpu = strategy == "tpu" or bool(tpu) or (strategy == "auto" and bool(signs))
    if not wants_tpu:
        return "tensorflow", "TensorFlow: the faster backend on GPUs and CPUs here"
    sees, found = tensorflow_sees_tpus()
    if sees:
        return "tensorflow", f"{found}: TPUStrategy"
    if jax_installed():
        return "jax", f"{found}; JAX drives the TPU"
    raise PetalsError(
        f"a TPU was {'asked for' if strategy == 'tpu' or tpu else 'found (' + ', '.join(signs) + ')'}, but "
        f"{found} and JAX is not installed: install jax[tpu], or pass --strategy cpu to train on the host"
    )


# ----------------------------------------------------------------------------- picking


@functools.cache
def pick(
    backend: str = "auto", strategy: str = "auto", tpu: str | None = None, cpu_replicas: int = 0
) -> Platform:
    """The backend, device and distribution for this machine (or the ones asked for), made once per
    process: a TPU is initialised once however many stages run in it."""
    chosen, why = choose_backend(backend, strategy, tpu)
    if chosen == "jax":
        platform = pick_jax(strategy, cpu_replicas, why)
    else:
        platform = _pick_tensorflow(strategy, tpu, cpu_replicas, why)
    return platform


def pick_from_args(args) -> Platform:
    """`pick` with a stage's --backend, --strategy, --tpu and --cpu-replicas."""
    return pick(args.backend, args.strategy, getattr(args, "tpu", None), getattr(args, "cpu_replicas", 0))


def add_arguments(parser, tpu: bool = True) -> None:
    """--backend, --strategy (and --tpu, --cpu-replicas) for the stages that run a model."""
    parser.add_argument(
        "--backend", default=DeviceOptions.backend, choices=BACKENDS, help="Keras backend (auto: by machine)"
    )
    parser.add_argument(
        "--strategy", default=DeviceOptions.strategy, choices=STRATEGIES, help="what the replicas run on"
    )
    parser.add_argument(
        "--cpu-replicas",
        type=int,
        default=DeviceOptions.cpu_replicas,
        help="split the CPU into N replicas (tests multi-replica code)",
    )
    if tpu:
        parser.add_argument(
            "--tpu", default=None, help="TPU name or gRPC address (default: the local TPU of a TPU VM)"
        )


# ----------------------------------------------------------------------------- TensorFlow


def _split_cpu(tf, replicas: int) -> None:
    """`replicas` logical CPU devices (must happen before TensorFlow initialises its devices).

    Each replica runs its ops on one thread, and the inter-op pool has a thread for every replica
    to wait in: every step waits for all replicas, and with TensorFlow's pools sized to the cores
    (2 here) replicas queued behind each other's ops. Beside another busy process, 8 replicas
    then took 176 s for what took 29-33 s alone; with these pools, 53 s."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(max(2 * replicas, os.cpu_count() or 1))
    except RuntimeError:
        current = len(tf.config.list_logical_devices("CPU"))
        if current != replicas:
            raise PetalsError(
                f"--cpu-replicas {replicas}: TensorFlow already started with {current} CPU device(s); "
                "it must be set before anything else runs"
            ) from None


def _connect_tpu(tf, tpu: str | None) -> tuple[Any, str] | tuple[None, str]:
    """A TPUStrategy and where, or None and why not."""
    if on_tpu_vm():
        candidates = [tpu or "local"]  # the TPU is attached: no gRPC address is ever tried
    else:
        address = tpu or next((os.environ[v] for v in TPU_ADDRESS_VARIABLES if os.environ.get(v)), None)
        candidates = [address] if address else [None, "local"]  # None: the resolver's own discovery
    tf_logger = logging.getLogger("tensorflow")
    failures = []
    for candidate in candidates:
        level = tf_logger.level
        tf_logger.setLevel(logging.WARNING)  # its "Initializing the TPU system" lines
        try:
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=candidate)
            tf.config.experimental_connect_to_cluster(resolver)
            tf.tpu.experimental.initialize_tpu_system(resolver)
        except (
            ValueError,
            tf.errors.NotFoundError,
            tf.errors.UnavailableError,
            tf.errors.InvalidArgumentError,
        ) as err:
            log.debug("device: no TPU at %r: %s", candidate, err)
            failures.append(f"{candidate or 'discovery'}: {first_line(err)[:120]}")
            continue
        finally:
            tf_logger.setLevel(level)
        where = candidate or resolver.master() or "discovered"
        return tf.distribute.TPUStrategy(resolver), f"TPU at {where}"
    return None, "TensorFlow found no TPU (" + "; ".join(failures) + ")"


def _workers_in_tf_config() -> int:
    try:
        cluster = json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {})
    except json.JSONDecodeError:
        raise PetalsError("TF_CONFIG is set but is not valid JSON") from None
    return len(cluster.get("worker", [])) + len(cluster.get("chief", []))


def _pick_tensorflow(strategy: str, tpu: str | None, cpu_replicas: int, why: str) -> Platform:
    import tensorflow as tf

    def platform(strategy_object, kind, device, reason, devices=None, hosts=None):
        replicas = strategy_object.num_replicas_in_sync
        return Platform(
            "tensorflow",
            kind,
            device,
            devices or replicas,
            replicas,
            reason,
            strategy=strategy_object,
            hosts=hosts or hosts_module.Hosts(),
        )

    if cpu_replicas > 1:
        if _workers_in_tf_config() > 1:  # MirroredStrategy would train each worker alone
            raise PetalsError(
                f"--cpu-replicas {cpu_replicas}: TF_CONFIG's workers train with one CPU replica "
                "each (MultiWorkerMirroredStrategy); leave it out, or use --backend jax"
            )
        _split_cpu(tf, cpu_replicas)
        cpus = [d.name for d in tf.config.list_logical_devices("CPU")]
        return platform(
            tf.distribute.MirroredStrategy(cpus),
            "mirrored",
            "CPU",
            f"{len(cpus)} logical CPU replicas asked for",
        )
    signs = tpu_signs()
    if strategy == "tpu" or tpu or (strategy == "auto" and signs):
        sees, found = tensorflow_sees_tpus()
        connected, where = _connect_tpu(tf, tpu) if sees else (None, found)
        if connected is not None:
            return platform(connected, "tpu", "TPU", f"{where}; {why}")
        refuse_tpu("tpu" if (strategy == "tpu" or tpu) else strategy, where)
    several = hosts_module.from_environment()
    if several.several and several.source != "TF_CONFIG":
        raise PetalsError(
            f"{several.describe()}: several processes under TensorFlow need a TF_CONFIG cluster "
            "(--strategy multi-worker); use --backend jax"
        )
    workers = _workers_in_tf_config()
    if strategy == "multi-worker" or (strategy == "auto" and workers > 1):
        if workers < 1:
            raise PetalsError("--strategy multi-worker needs TF_CONFIG describing the cluster")
        # Before anything starts TensorFlow's runtime (listing logical devices does): the strategy
        # configures its collectives, which must happen first ("must be configured at program startup").
        gpus = tf.config.list_physical_devices("GPU")
        return platform(
            tf.distribute.MultiWorkerMirroredStrategy(),
            "multi-worker",
            "GPU" if gpus else "CPU",
            f"TF_CONFIG lists {workers} workers; {several.describe()}",
            hosts=several,
        )
    gpus = tf.config.list_logical_devices("GPU")
    if strategy == "mirrored" or (strategy == "auto" and len(gpus) > 1):
        if not gpus:
            raise PetalsError(
                "--strategy mirrored: no GPU found (use --cpu-replicas N to mirror over the CPU)"
            )
        return platform(tf.distribute.MirroredStrategy(), "mirrored", "GPU", f"{len(gpus)} GPUs; {why}")
    if strategy == "gpu" or (strategy == "auto" and gpus):
        if not gpus:
            raise PetalsError("--strategy gpu: no GPU found")
        return platform(tf.distribute.OneDeviceStrategy(gpus[0].name), "gpu", "GPU", f"one GPU; {why}")
    reason = "asked for" if strategy == "cpu" else f"no TPU, no GPU and no TF_CONFIG cluster; {why}"
    return platform(tf.distribute.get_strategy(), "cpu", "CPU", reason)


# ----------------------------------------------------------------------------- speed settings


def pick_precision(platform: Platform, asked: str = "auto") -> str:
    """The Keras dtype policy: bfloat16 on TPUs, float16 on GPUs, float32 on the CPU."""
    if asked != "auto":
        return asked
    return {"TPU": "mixed_bfloat16", "GPU": "mixed_float16"}.get(platform.device, "float32")


def pick_jit_compile(platform: Platform, asked: str = "auto") -> bool:
    """XLA on accelerators (TPUs always compile); JAX always compiles (its eager mode is for debugging);
    off for TensorFlow on the CPU, where it rarely pays for itself."""
    if platform.device == "TPU" or platform.backend == "jax":
        return True
    if asked != "auto":
        return asked == "on"
    return platform.device == "GPU"


def pick_steps_per_execution(platform: Platform, asked: int = 0, steps: int = 0, done: int = 0) -> int:
    """Steps run per call into the device (amortises host round trips on accelerators): the most,
    up to `asked` or the device's default, that divide `steps` (an epoch's, 0: any) and `done`
    (a resumed epoch's steps already run), so that every call ends where an epoch does.

    Keras 3's `fit` runs whole calls: with 4 steps an epoch and 32 a call it trained 32 steps an
    epoch, on both backends, and the epoch line's loss and accuracy read 8x (the mean of 32 steps
    counted as 4 steps' sum), whatever its docstring says about truncating at the epoch's end."""
    wanted = asked or {"TPU": 32, "GPU": 8}.get(platform.device, 1)
    if platform.kind == "mirrored" and wanted > 1:
        # Keras 3.15's `fit` on TensorFlow 2.21 fails under a MirroredStrategy past one step a call
        # (TensorFlow asks for a value fed to 'while/cond/Placeholder', 8 logical CPUs).
        log.info("device: 1 step a call, not %d: Keras's fit fails under MirroredStrategy past one", wanted)
        return 1
    every = math.gcd(steps, done)
    if not every:
        return wanted
    fitting = max(n for n in range(1, min(wanted, every) + 1) if every % n == 0)
    if fitting < wanted:
        log.info("device: %d steps a call, not %d: a call must end where an epoch of %d steps does",
                 fitting, wanted, steps)  # fmt: skip
    return fitting
