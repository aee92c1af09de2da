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
heartbeat) and one line names the process, its exit and its log, and repeats its one-line error
(`petals <stage>: error: ...`) where it printed one; the exit code is its own. Of processes that
fail together, the one that said why is named before one the runtime killed on its account.
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
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from pipeline.core import hosts
from pipeline.core.children import PARENT_VARIABLE
from pipeline.core.errors import EXIT_PREEMPTED, PEER_GONE
from pipeline.modeling import preemption

POLL_SECONDS = 0.2
# After a preemption notice, how long the processes get to save and exit on their own: a process's
# own watchdog gives up after `preemption.GRACE_SECONDS`; then a margin.
GRACE_SECONDS = preemption.GRACE_SECONDS + 5
BACKENDS = ("jax", "tensorflow")
ERROR_LINE = re.compile(r"^petals [\w-]+: error: .*$", re.MULTILINE)  # a stage's one-line error (cli.py)
TAIL_BYTES = 65536  # of a process's output, where its last error line is looked for


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


def last_error(output: bytes) -> str | None:
    """The last one-line error a stage printed (`petals <stage>: error: ...`), if its output has one."""
    found = ERROR_LINE.findall(output.decode("utf-8", "replace"))
    return found[-1].strip() if found else None


def first_failure(codes: list[int | None], errors: list[str | None]) -> int | None:
    """Which failed process a launch names, of those failed by this poll (a TF_CONFIG worker fails
    within 0.1 s of losing its peer, JAX aborts the others as fast): the cause before its
    consequences. First one killed from outside (any signal but SIGABRT), then one that said why
    (a stage's one-line error, other than that a peer went away), then one JAX aborted (SIGABRT),
    then the rest; the lowest index among equals."""

    def rank(i: int) -> int:
        code, error = codes[i], errors[i]
        if code < 0 and code != -signal.SIGABRT:
            return 0
        if error is not None and PEER_GONE not in error:
            return 1
        return 2 if code == -signal.SIGABRT else 3

    failed = [i for i, code in enumerate(codes) if code not in (None, 0)]
    return min(failed, key=lambda i: (rank(i), i)) if failed else None


class _Echo(threading.Thread):
    """Process 0's error output, passed on to this terminal as it comes and its tail kept: the
    launch's last line repeats the process's one-line error."""

    def __init__(self, stream) -> None:
        super().__init__(daemon=True)
        self.stream, self.tail = stream, b""

    def run(self) -> None:
        shown = True
        while chunk := os.read(self.stream.fileno(), 65536):
            self.tail = (self.tail + chunk)[-TAIL_BYTES:]
            if shown:
                try:
                    sys.stderr.buffer.write(chunk)
                    sys.stderr.buffer.flush()
                except (OSError, ValueError):  # the terminal or pipe went away: keep reading, or process 0
                    shown = False  # would block on a full pipe and the others on it


class _Processes:
    """The processes of one launch: started, watched, and stopped together."""

    def __init__(self, count: int, backend: str, command: list[str], log_dir: Path) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        self.count, self.children = count, []
        self.logs = [log_dir / f"host-{i}.log" for i in range(count)]
        for i, extra in enumerate(environments(count, backend)):
            out = None if i == 0 else self.logs[i].open("wb")
            self.children.append(
                subprocess.Popen(
                    [sys.executable, "-m", "pipeline", *command],
                    # each dies with this launcher, even one killed with -9 (pipeline/core/children.py)
                    env={**os.environ, **extra, "PYTHONUNBUFFERED": "1", PARENT_VARIABLE: str(os.getpid())},
                    stdout=None if i == 0 else out,  # process 0's is the terminal's
                    stderr=subprocess.PIPE if i == 0 else subprocess.STDOUT,
                    start_new_session=True,  # its own process group: killed with everything it started
                )
            )
            if out is not None:
                out.close()
            (log_dir / f"host-{i}.pid").write_text(f"{self.children[-1].pid}\n")  # to stop one by hand
        self.echo = _Echo(self.children[0].stderr)
        self.echo.start()

    def codes(self) -> list[int | None]:
        return [child.poll() for child in self.children]

    def stop_all(self) -> None:
        for child in self.children:
            if child.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.pid, signal.SIGKILL)
        for child in self.children:
            child.wait()
        self.echo.join(timeout=5)  # its output is all on the terminal before the launch's last line

    def error_of(self, i: int) -> str | None:
        if i == 0:
            return last_error(self.echo.tail)
        with contextlib.suppress(OSError), self.logs[i].open("rb") as log:
            log.seek(max(0, self.logs[i].stat().st_size - TAIL_BYTES))
            return last_error(log.read())
        return None

    def signal_all(self, number: int) -> None:
        for child in self.children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, number)

    def preempted(self) -> int:
        """A preemption (SIGTERM to the launcher, or one process stopped at the step they agreed on):
        the processes save and exit on their own, within the grace; those still running then are
        killed. 75 when every process saved, like one process's preemption."""
        deadline = time.monotonic() + GRACE_SECONDS
        while any(code is None for code in self.codes()) and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
        codes = self.codes()
        self.stop_all()
        if all(code == EXIT_PREEMPTED for code in codes):
            who = "this host's process" if self.count == 1 else f"all {self.count} processes"
            say(f"{who} stopped at the step they agreed on and saved it; rerun the same command to resume")
            return EXIT_PREEMPTED
        late = [i for i, code in enumerate(codes) if code != EXIT_PREEMPTED]
        say(
            f"preempted; process(es) {', '.join(map(str, late))} of {self.count} did not save within "
            f"{GRACE_SECONDS:.0f} s and were stopped; the rerun resumes from the last checkpoint"
        )
        return EXIT_PREEMPTED

    def failed(self, codes: list[int | None]) -> int | None:
        """The launch's exit code once a process has failed (the others stopped, one line said
        which and why), else None."""
        if codes[0] not in (None, 0):
            self.echo.join(timeout=2)  # process 0's last line in before the cause is chosen
        errors = [self.error_of(i) if code not in (None, 0) else None for i, code in enumerate(codes)]
        i = first_failure(codes, errors)
        if i is None:
            return None
        self.stop_all()
        errors[i] = self.error_of(i)  # all of its output is in by now
        code = codes[i]
        said = f"; it said: {errors[i]}" if errors[i] else ""
        if self.count == 1:  # one host of a slice: its process, whose output is above
            say(f"this host's process {_exit_words(code)}{_why(code)}{said}")
        else:
            where = "" if i == 0 else f"; its output: {self.logs[i]}"
            say(f"process {i} of {self.count} {_exit_words(code)}; stopped the other"
                f"{'s' * (self.count > 2)}{where}{said}")  # fmt: skip
        return code if code > 0 else 128 - code

    def watch(self) -> int:
        """Until every process succeeds (0), one fails (its code), or one stops preempted (75)."""
        while True:
            codes = self.codes()
            if EXIT_PREEMPTED in codes:  # the others stop at the same step: let them save
                return self.preempted()
            failed = self.failed(codes)
            if failed is not None:
                return failed
            if all(code == 0 for code in codes):
                self.echo.join(timeout=5)
                return 0
            time.sleep(POLL_SECONDS)


def say(line: str) -> None:
    print(f"petals launch: {line}", file=sys.stderr, flush=True)


def launch(count: int, backend: str, command: list[str], log_dir: Path) -> int:
    """Run `command` (a stage and its arguments) as `count` processes; the first failure's exit code."""
    processes = _Processes(count, backend, command, log_dir)
    terminated = []

    def on_signal(number, frame):
        terminated.append(number)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_signal)
    try:
        return processes.watch()
    except KeyboardInterrupt:
        if terminated:  # a preemption notice: each process takes it (JAX agrees on the step)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one changes nothing now
            processes.signal_all(signal.SIGTERM)
            return processes.preempted()
        processes.stop_all()
        say(f"interrupted; stopped all {count} processes")
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
