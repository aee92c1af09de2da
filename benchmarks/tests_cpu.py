"""Where `make test`'s time goes: each test's wall seconds, its own CPU seconds (the pytest worker's
threads, fixtures included) and its subprocesses' (stages run as `python -m pipeline`, `make`,
kernels), so that the 6-minute goal is worked on where the seconds are, not where they seem; and
the tail: how long the suite ran on after its first worker had nothing left to do.

As a pytest plugin (`-p benchmarks.tests_cpu`, what `make bench-tests` runs) it appends one line
per test to a file per worker in $PETALS_TESTS_CPU_DIR; as a script it sums those files: the
totals, how the CPU seconds fall by test size, the costliest files and tests.

Usage: make bench-tests [PYTEST_ARGS=...]; python benchmarks/tests_cpu.py FOLDER [--top 25]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FOLDER = "PETALS_TESTS_CPU_DIR"


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)  # children waited for: subprocess.run's
    return used.ru_utime + used.ru_stime


def pytest_configure(config):
    if not os.environ.get(FOLDER):
        raise pytest.UsageError(f"benchmarks.tests_cpu: set {FOLDER} to the folder for its measurements")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Setup, call and teardown of one test, measured together (a fixture's cost lands on the
    first test that asks for it, in each worker)."""
    wall, own, children = time.perf_counter(), time.process_time(), _children_cpu()
    yield
    line = (
        f"{item.nodeid}\t{time.perf_counter() - wall:.2f}\t{time.process_time() - own:.2f}\t"
        f"{_children_cpu() - children:.2f}\t{time.time():.2f}\n"
    )
    with open(Path(os.environ[FOLDER]) / f"{os.getpid()}.tsv", "a") as out:
        out.write(line)


def read(folder: Path) -> tuple[list[tuple[str, float, float, float]], list[float]]:
    """The measured tests (name, wall, own and children's CPU seconds), and when each worker
    finished its last test (seconds since the epoch)."""
    rows, finished = [], []
    for path in sorted(folder.glob("*.tsv")):
        ends = []
        for number, line in enumerate(path.read_text().splitlines(), 1):
            try:
                test, wall, own, children, end = line.split("\t")
                rows.append((test, float(wall), float(own), float(children)))
                ends.append(float(end))
            except ValueError:
                sys.exit(f"{path}:{number}: not a measured test (name, wall, own and children's CPU-s, end)")
        finished += [max(ends)] if ends else []
    if not rows:
        sys.exit(f"{folder}: no measured tests (run `make bench-tests` first)")
    return rows, finished


def summary(rows, finished: list[float], top: int) -> dict:
    cpu = {test: own + children for test, _, own, children in rows}
    by_file = collections.Counter()
    for test, seconds in cpu.items():
        by_file[test.split("::")[0]] += seconds
    bands = {"5 s and more": (5, float("inf")), "1 to 5 s": (1, 5), "under 1 s": (0, 1)}
    return {
        "tests": len(rows),
        "wall_sum_s": round(sum(r[1] for r in rows), 1),
        "cpu_own_s": round(sum(r[2] for r in rows), 1),
        "cpu_children_s": round(sum(r[3] for r in rows), 1),
        # the seconds the suite ran on after its first worker ran out of tests: what an order
        # with the longest tests first could win at most
        "tail_s": round(max(finished) - min(finished), 1),
        "by_size": {
            band: {
                "tests": sum(low <= s < high for s in cpu.values()),
                "cpu_s": round(sum(s for s in cpu.values() if low <= s < high), 1),
            }
            for band, (low, high) in bands.items()
        },
        "files": {name: round(s, 1) for name, s in by_file.most_common(top)},
        "tests_by_cpu": {t: round(s, 1) for t, s in sorted(cpu.items(), key=lambda kv: -kv[1])[:top]},
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("folder", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    figures = summary(*read(args.folder), args.top)
    sys.path.insert(0, str(REPO))
    from benchmarks.bench_fetch import machine, record

    print(json.dumps(figures, indent=1))
    record([{"name": "tests_cpu", "machine": machine(), **figures}])


if __name__ == "__main__":
    main()
