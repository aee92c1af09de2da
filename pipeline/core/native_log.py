"""TensorFlow's native start-up lines, held to what TF_CPP_MIN_LOG_LEVEL asks.

TensorFlow 2.21 logs through absl, and what it logs while loading, before absl's log is
initialised, goes to stderr whatever TF_CPP_MIN_LOG_LEVEL says. On CPUs where TensorFlow turns
oneDNN on (avx512_bf16, avx512_vnni, AMX) every process printed "WARNING: All log messages before
absl::InitializeLog() ..." and an INFO line about oneDNN, twice. TF_ENABLE_ONEDNN_OPTS=0 would
hide them but halve the CPU recipe's speed on such a CPU (409-427 against 188 img/s,
`make bench-onednn`), so instead fd 2 goes to a file while TensorFlow loads, and the lines the level would
have dropped are dropped; every other line is written after the import, in its order.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import os
import re
import sys
import tempfile
from collections.abc import Iterator

# absl's prefix: severity, MMDD, time (before init: "0000 00:00:<epoch seconds>"), thread, file:line]
_ABSL_LINE = re.compile(r"^([IWEF])\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [^\]]*\] ")
_BEFORE_INIT = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
_SEVERITIES = "IWEF"  # TF_CPP_MIN_LOG_LEVEL 0, 1, 2, 3


def kept(line: str, min_level: int) -> bool:
    """Whether TF_CPP_MIN_LOG_LEVEL=min_level lets this stderr line through."""
    if line.rstrip("\n") == _BEFORE_INIT:
        return min_level == 0
    match = _ABSL_LINE.match(line)
    return match is None or _SEVERITIES.index(match.group(1)) >= min_level


@contextlib.contextmanager
def filtered_stderr(min_level: int) -> Iterator[None]:
    """Native and Python writes to fd 2 inside the block reach stderr after it, less the lines
    `min_level` drops. Written back even when the block raises."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            text = captured.read().decode(errors="replace")
            sys.stderr.write("".join(line for line in text.splitlines(True) if kept(line, min_level)))
            sys.stderr.flush()


class _FilteredLoader(importlib.abc.Loader):
    """The real loader of a package, its module executed under `filtered_stderr`."""

    def __init__(self, loader: importlib.abc.Loader, min_level: int):
        self._loader = loader
        self._min_level = min_level

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        with filtered_stderr(self._min_level):
            self._loader.exec_module(module)

    def __getattr__(self, name: str):  # is_package, get_resource_reader, ...
        return getattr(self._loader, name)


class _FirstImport(importlib.abc.MetaPathFinder):
    """Finds `package` as Python would, once, and hands back its spec with a filtering loader."""

    def __init__(self, package: str, min_level: int):
        self.package = package
        self.min_level = min_level

    def find_spec(self, name, path=None, target=None):
        if name != self.package:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _FilteredLoader(spec.loader, self.min_level)
        return spec


def filter_tensorflow_start_up(min_level: int) -> None:
    """Hold TensorFlow's load-time lines to `min_level` whenever it is first imported (stages
    that never import it, like submit, stay as fast). A no-op once it has been imported."""
    if min_level <= 0 or "tensorflow" in sys.modules:
        return
    if not any(isinstance(finder, _FirstImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _FirstImport("tensorflow", min_level))
