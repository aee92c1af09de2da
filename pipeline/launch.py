"""Several processes on this machine as one training, the way a pod slice runs one per host:
`make train HOSTS=2 CPU_REPLICAS=4`, or `python -m pipeline.launch --hosts 2 -- train ...`.

`--hosts 1` supervises one process (`make train HOSTS=slice`, on each host of a real slice): it adds
nothing to its settings, and if the process fails, one line says how, e.g. when JAX aborted it
because another host died. Each process is `python -m pipeline <the stage and its arguments>`
with the settings a slice would give it (pipeline/core/hosts.py): under JAX, Keras' multi-process
variables, one coordinator on 127.0.0.1 at a free port; under TensorFlow, a TF_CONFIG cluster of
workers on 127.0.0.1. Process 0's output is this terminal's; each other's goes to
`<log dir>/host-<i>.log`, and each one's process id to `host-<i>.pid`.

The first process to fail ends the launch: the others are killed (their whole process groups, at
once: a process waiting in a collective would only notice after the coordination service's
heartbeat) and one line names the process, its exit and its log; the exit code is its own.
Ctrl-C stops every process the same way. A SIGTERM to the launcher (a preemption notice) goes to
every process, which save and exit 75 (EXIT_PREEMPTED): under JAX at a step they agree on (JAX's
preemption sync point), under TensorFlow each at its own. The launcher, as when one process stops
so, waits for them all (`GRACE_SECONDS`), then says so in one line, exit 75. Nothing here takes
part in the training: the collectives and process groups are JAX's and TensorFlow's own.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pipeline.core import hosts
from pipeline.core.children import PARENT_VARIABLE
from pipeline.core.errors import EXIT_PREEMPTED
from pipeline.modeling import preemption

POLL_SECONDS = 0.2
# After a preemption notice, how long the processes get to save and exit on their own: a process's
# own watchdog gives up after `preemption.GRACE_SECONDS`; then a margin.
GRACE_SECONDS = preemption.GRACE_SECONDS + 5
BACKENDS = ("jax", "tensorflow")


def free_ports(count: int) -> list[int]:
    """Ports nothing listens on now (bound to port 0 together, then released for the processes)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def environments(count: int, backend: str) -> list[dict[str, str]]:
    """What each process is told about the others (nothing to one alone: on a slice's host it
    keeps the host's own settings, e.g. PETALS_HOSTS=slice)."""
    if count == 1:
        return [{}]
    if backend == "jax":
        [port] = free_ports(1)
        shared = {hosts.ADDRESSES: f"127.0.0.1:{port}", hosts.COUNT: str(count), "JAX_PLATFORMS": "cpu"}
        return [{**shared, hosts.INDEX: str(i)} for i in range(count)]
    workers = [f"127.0.0.1:{port}" for port in free_ports(count)]
    return [
        {"TF_CONFIG": json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}})}
        for i in range(count)
    ]


def _why(code: int) -> str:
    """What a slice host's failure most likely means, past its own output."""
    if code == -signal.SIGABRT:
        return (
            f"; JAX aborts every process once one has died or not answered for {hosts.HEARTBEAT_SECONDS} s: "
            "if this host's output names no error of its own, another host's does"
        )
    return ""


def _exit_words(code: int) -> str:
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with {code}"


def launch(count: int, backend: str, command: list[str], log_dir: Path) -> int:
    """Run `command` (a stage and its arguments) as `count` processes; the first failure's exit code."""
    log_dir.mkdir(parents=True, exist_ok=True)
    children: list[subprocess.Popen] = []
    logs = [log_dir / f"host-{i}.log" for i in range(count)]
    for i, extra in enumerate(environments(count, backend)):
        out = None if i == 0 else logs[i].open("wb")
        children.append(
            subprocess.Popen(
                [sys.executable, "-m", "pipeline", *command],
                # each dies with this launcher, even one killed with -9 (pipeline/core/children.py)
                env={**os.environ, **extra, "PYTHONUNBUFFERED": "1", PARENT_VARIABLE: str(os.getpid())},
                stdout=out,
                stderr=None if i == 0 else subprocess.STDOUT,
                start_new_session=True,  # its own process group: killed with everything it started
            )
        )
        if out is not None:
            out.close()
        (log_dir / f"host-{i}.pid").write_text(f"{children[-1].pid}\n")  # to stop one by hand

    def stop_all() -> None:
        for child in children:
            if child.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.pid, signal.SIGKILL)
        for child in children:
            child.wait()

    terminated = []

    def on_signal(number, frame):
        terminated.append(number)
        raise KeyboardInterrupt

    def preempted() -> int:
        """A preemption (SIGTERM to the launcher, or one process stopped at the step they agreed on):
        the processes save and exit on their own, within the grace; those still running then are
        killed. 75 when every process saved, like one process's preemption."""
        deadline = time.monotonic() + GRACE_SECONDS
        while any(c.poll() is None for c in children) and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
        codes = [c.poll() for c in children]
        stop_all()
        if all(code == EXIT_PREEMPTED for code in codes):
            who = "this host's process" if count == 1 else f"all {count} processes"
            print(f"petals launch: {who} stopped at the step they agreed on and saved it; "
                  "rerun the same command to resume", file=sys.stderr)  # fmt: skip
            return EXIT_PREEMPTED
        late = [i for i, code in enumerate(codes) if code != EXIT_PREEMPTED]
        print(f"petals launch: preempted; process(es) {', '.join(map(str, late))} of {count} did not save "
              f"within {GRACE_SECONDS:.0f} s and were stopped; the rerun resumes from the last checkpoint",
              file=sys.stderr)  # fmt: skip
        return EXIT_PREEMPTED

    previous = signal.signal(signal.SIGTERM, on_signal)
    try:
        while True:
            codes = [child.poll() for child in children]
            if EXIT_PREEMPTED in codes:  # the others stop at the same step: let them save
                return preempted()
            failed = [i for i, code in enumerate(codes) if code not in (None, 0)]
            if failed:
                # Seen together, one killed by a signal is named before one that exited with an
                # error: a TF_CONFIG worker fails within 0.1 s of losing its peer, inside one poll.
                failed = min(failed, key=lambda i: (codes[i] > 0, i))
                stop_all()
                if count == 1:  # one host of a slice: its process, whose output is above
                    print(f"petals launch: this host's process {_exit_words(codes[0])}{_why(codes[0])}",
                          file=sys.stderr)  # fmt: skip
                    return codes[0] if codes[0] > 0 else 128 - codes[0]
                where = "" if failed == 0 else f"; its output: {logs[failed]}"
                print(
                    f"petals launch: process {failed} of {count} {_exit_words(codes[failed])}; "
                    f"stopped the other{'s' * (count > 2)}{where}",
                    file=sys.stderr,
                )
                return codes[failed] if codes[failed] > 0 else 128 - codes[failed]
            if all(code == 0 for code in codes):
                return 0
            time.sleep(POLL_SECONDS)
    except KeyboardInterrupt:
        if terminated:  # a preemption notice: each process takes it (JAX agrees on the step)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one changes nothing now
            for child in children:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signal.SIGTERM)
            return preempted()
        stop_all()
        print(f"petals launch: interrupted; stopped all {count} processes", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.launch",
        description=__doc__.split("\n\n")[0],
        usage="%(prog)s --hosts N [--backend jax|tensorflow] [--log-dir DIR] -- STAGE [ARGS...]",
    )
    parser.add_argument("--hosts", type=int, required=True, help="processes, as hosts of a slice")
    parser.add_argument("--backend", default="jax", choices=BACKENDS, help="whose runtime joins them")
    parser.add_argument("--log-dir", type=Path, default=None, help="the other processes' output")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the stage and its arguments")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.hosts < 1:
        parser.error(f"--hosts {args.hosts}: must be at least 1")
    if not command:
        parser.error("no stage given (after --)")
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="petals-hosts-"))
    return launch(args.hosts, args.backend, command, log_dir)


if __name__ == "__main__":
    sys.exit(main())
