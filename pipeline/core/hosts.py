"""Several processes, one training: how many there are, which one this is, and how they meet.

A Cloud TPU slice past one host (v5e-16 and up, v4-32...) runs the same program on every host. The
settings come from, in order:
1. Keras' own variables, which `make train HOSTS=N` (pipeline/launch.py) sets for local processes:
   `KERAS_DISTRIBUTION_JOB_ADDRESSES` (host:port of every process, comma-separated; the first is
   the coordinator, or one address, the coordinator's), `KERAS_DISTRIBUTION_NUM_PROCESSES` and
   `KERAS_DISTRIBUTION_PROCESS_ID`;
2. a Cloud TPU slice: `PETALS_HOSTS=slice` (`make train HOSTS=slice` on every host) lets
   `jax.distributed.initialize()` find the hosts itself (from the TPU VM's metadata server, or
   GKE's `TPU_WORKER_HOSTNAMES` / `TPU_WORKER_ID`, which are read here too). It is asked for, not
   guessed: a single-host TPU VM (Kaggle's v5e-8) has no slice to join;
3. TensorFlow's `TF_CONFIG` (MultiWorkerMirroredStrategy): its workers, and this task.

Under JAX every process then joins one coordination service (`jax.distributed.initialize`) before
any device is touched, and one `DataParallel` mesh spans every host's devices. Process 0 is the
writer (`Hosts.writer`: the train stage gives the others a scratch run dir). The service's
heartbeat bounds how long the others wait on a dead one: `HEARTBEAT_SECONDS`, not JAX's default
100 s.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pipeline.core.errors import PetalsError, first_line

ADDRESSES = "KERAS_DISTRIBUTION_JOB_ADDRESSES"
COUNT = "KERAS_DISTRIBUTION_NUM_PROCESSES"
INDEX = "KERAS_DISTRIBUTION_PROCESS_ID"
SLICE = "PETALS_HOSTS"  # "slice": this is one host of a TPU slice; JAX finds the others
# A peer that stops answering is declared dead after this long and every process stops (JAX's
# coordination service aborts them); a launcher that sees a child die stops the rest sooner.
HEARTBEAT_SECONDS = 10
# How long the first process waits for the others to join before it gives up, in one line.
JOIN_SECONDS = 120


@dataclass(frozen=True)
class Hosts:
    """The processes of one training: `count` of them, this one `index`, meeting at `coordinator`
    (None: the TPU slice's own discovery)."""

    count: int = 1  # 0: not known until JAX has found the slice's hosts
    index: int = 0
    coordinator: str | None = None
    source: str = "one process"  # where the settings came from, in words

    @property
    def several(self) -> bool:
        return self.count != 1

    @property
    def writer(self) -> bool:
        """Process 0 writes the run dir, the checkpoints, the leaderboard and the submission."""
        return self.index == 0

    def describe(self) -> str:
        if not self.several:
            return ""
        if not self.count:
            return f"one host of a TPU slice ({self.source})"
        return f"process {self.index} of {self.count} ({self.source})"


def _integer(env: Mapping[str, str], name: str, default: int | None = None) -> int:
    text = env.get(name, "")
    if not text and default is not None:
        return default
    try:
        return int(text)
    except ValueError:
        raise PetalsError(f"{name}={text!r}: expected a whole number") from None


def from_environment(env: Mapping[str, str] = os.environ) -> Hosts:
    """The processes this one belongs to, from Keras' variables, a TPU slice's or TF_CONFIG."""
    if env.get(ADDRESSES):
        addresses = [a.strip() for a in env[ADDRESSES].split(",") if a.strip()]
        count = _integer(env, COUNT, default=len(addresses))
        index = _integer(env, INDEX)
        hosts = Hosts(count, index, addresses[0], f"{ADDRESSES} and {INDEX}")
    elif env.get(SLICE):
        if env[SLICE] != "slice":
            raise PetalsError(f"{SLICE}={env[SLICE]!r}: the only value is slice (one host of a TPU slice)")
        return Hosts(0, 0, None, f"{SLICE}=slice")
    elif len(names := [h for h in env.get("TPU_WORKER_HOSTNAMES", "").split(",") if h]) > 1:
        index = _integer(env, "TPU_WORKER_ID", 0)
        hosts = Hosts(len(names), index, None, "the TPU slice's TPU_WORKER_HOSTNAMES")
    elif env.get("TF_CONFIG"):
        hosts = _tf_config(env["TF_CONFIG"])
    else:
        return Hosts()
    if not 0 <= hosts.index < hosts.count:
        raise PetalsError(
            f"process {hosts.index} of {hosts.count} ({hosts.source}): the index must be below the count"
        )
    return hosts


def _tf_config(text: str) -> Hosts:
    """TF_CONFIG's cluster: the chief (if any) then the workers; this task's place among them."""
    try:
        config = json.loads(text)
        cluster, task = config.get("cluster", {}), config.get("task", {})
        members = [("chief", i) for i in range(len(cluster.get("chief", [])))]
        members += [("worker", i) for i in range(len(cluster.get("worker", [])))]
        index = members.index((task.get("type", "worker"), int(task.get("index", 0))))
    except (json.JSONDecodeError, AttributeError, TypeError, ValueError):
        raise PetalsError(
            "TF_CONFIG: not a cluster with this task in it (see TensorFlow's multi-worker guide)"
        ) from None
    return Hosts(len(members), index, None, "TF_CONFIG")


def join_jax(hosts: Hosts) -> Hosts:
    """Join the other processes under JAX, before any device is used (once per process); the
    processes as JAX then counts them."""
    if not hosts.several:
        return hosts
    import jax

    if not jax.distributed.is_initialized():
        timeouts = {"heartbeat_timeout_seconds": HEARTBEAT_SECONDS, "initialization_timeout": JOIN_SECONDS}
        try:
            if hosts.coordinator is None:  # a Cloud TPU slice: JAX finds the hosts itself
                jax.distributed.initialize(**timeouts)
            else:
                jax.distributed.initialize(hosts.coordinator, hosts.count, hosts.index, **timeouts)
        except (RuntimeError, ValueError) as err:
            raise PetalsError(
                f"could not join {hosts.count or 'the'} processes at {hosts.coordinator or 'the TPU slice'} "
                f"as process {hosts.index} ({first_line(err)[:160]})"
            ) from None
    return Hosts(jax.process_count(), jax.process_index(), hosts.coordinator, hosts.source)


def input_share(hosts: Hosts, global_batch: int, replicas: int):
    """What this process's input pipeline reads: (its batch, a `tf.distribute.InputContext` that
    picks its share of the shards or rows), or (the global batch, None) alone. Each host reads
    only its own files, and JAX makes one global batch of the hosts' batches."""
    if not hosts.several:
        return global_batch, None
    import tensorflow as tf

    if global_batch % hosts.count:
        raise PetalsError(f"a global batch of {global_batch} cannot be split between {hosts.count} processes")
    context = tf.distribute.InputContext(hosts.count, hosts.index, replicas)
    return global_batch // hosts.count, context


def agree(hosts: Hosts, what: str, value: int, hint: str, gather: Callable) -> None:
    """Every process holds the same `value` of `what`, else a PetalsError naming each one's: a
    process that resumed elsewhere would run other steps and wait in a collective for ever.
    `gather`: the engine's all-gather (`host_predict.allgather`), every process's value in order."""
    if not hosts.several:
        return
    import numpy as np

    values = np.asarray(gather(np.asarray([value]))).ravel().tolist()
    if len(set(values)) > 1:
        each = ", ".join(f"process {i}: {v}" for i, v in enumerate(values))
        raise PetalsError(f"the processes disagree on {what} ({each}); {hint}")


def preemption_sync_jax(hosts: Hosts) -> Callable[[int], bool] | None:
    """Several JAX processes: JAX's own agreement on the step to stop at after a SIGTERM to any of
    them (its coordination service's preemption notifier), for `preemption.StopRequest`."""
    if not hosts.several:
        return None
    from jax.experimental import multihost_utils

    return multihost_utils.reached_preemption_sync_point


def leave_jax() -> None:
    """Leave the other processes together: JAX's shutdown waits until each has reached it, so the
    coordinator (process 0) does not go first and take the service from those still finishing.
    Before an `os._exit`, which skips JAX's own exit hook."""
    import sys

    jax = sys.modules.get("jax")
    if jax is not None and jax.distributed.is_initialized():
        jax.distributed.shutdown()
