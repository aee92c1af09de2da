"""Where a run's numbers were computed: its CPU (model, AVX-512) and the libraries that computed
them, in run.json, in a benchmark's machine line, and in `make compare`'s sentence where two runs
differ. One fine-tune scored 0.8986 and 0.9049 at one commit and seed with oneDNN on AVX-512 and
held to AVX2 (docs/BENCHMARKS.md): a comparison of runs made apart says so."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_fetch import machine
from pipeline.core.errors import PetalsError
from pipeline.core.machine import built_with, cpu_name
from pipeline.core.rundir import RunDir
from pipeline.cv.compare import Comparison, apart, made_on


def _cpuinfo(tmp_path: Path, flags: str) -> str:
    block = "processor\t: {n}\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC  9B14\n"
    block += f"flags\t\t: {flags}\n"
    path = tmp_path / "cpuinfo"
    path.write_text("\n".join(block.format(n=n) for n in range(2)))
    return str(path)


def test_the_cpu_is_named_with_its_avx512_and_an_unknown_one_is_nothing(tmp_path):
    assert cpu_name(_cpuinfo(tmp_path, "fpu sse2 avx2 avx512f avx512bw")) == "AMD EPYC 9B14, AVX-512"
    assert cpu_name(_cpuinfo(tmp_path, "fpu sse2 avx2 avx512_bf16")) == "AMD EPYC 9B14, no AVX-512"
    assert cpu_name(str(tmp_path / "absent")) == ""
    (tmp_path / "bare").write_text("processor\t: 0\n")  # no model name: nothing to say
    assert cpu_name(str(tmp_path / "bare")) == ""


def test_the_libraries_are_read_without_importing_them_and_a_benchmark_names_the_cpu():
    on_tensorflow, on_jax = built_with("tensorflow"), built_with("jax")
    assert on_tensorflow["numpy"] == np.__version__ and "keras" in on_tensorflow
    assert "jax" not in on_tensorflow  # what did not compute the run is not its
    assert "jax" in on_jax and not any(name.startswith("tensorflow") for name in on_jax)
    assert (f"CPUs ({cpu_name()})," if cpu_name() else "CPUs,") in machine()


def test_runs_made_apart_say_how_and_alike_or_unrecorded_say_nothing():
    here = {"cpu": "AMD EPYC, AVX-512", "built_with": {"tensorflow": "2.21.0", "numpy": "2.4.6"}}
    there = {"cpu": "Intel Xeon, AVX-512", "built_with": {"tensorflow": "2.20.0", "numpy": "2.4.6"}}
    assert apart(here, there) == (
        "on other CPUs (AMD EPYC, AVX-512; Intel Xeon, AVX-512) and with other libraries "
        "(tensorflow 2.21.0; 2.20.0)"
    )
    assert apart(here, dict(here)) == "" and apart(here, {}) == "" and apart({}, {}) == ""
    said = apart(here, there)
    found = Comparison(("a", "b"), "macro-F1", 10, None, (0.5, 0.6), 0.1, 0.05, (0.0, 0.2), 0, said)
    assert found.line().endswith("(tensorflow 2.21.0; 2.20.0), which moves a score as a seed does")


def test_a_groups_machine_is_its_first_folds_and_a_fold_named_as_a_path_is_refused(tmp_path):
    group, fold = RunDir(tmp_path / "cv5-x"), RunDir(tmp_path / "fold-a")
    group.path.mkdir()
    fold.path.mkdir()
    (group.path / RunDir.GROUP).write_text(json.dumps({"kind": "cv"}))
    (group.path / RunDir.METRICS).write_text(json.dumps({"fold_runs": {"1": "other", "0": "fold-a"}}))
    (fold.path / RunDir.RUN_INFO).write_text(json.dumps({"cpu": "AMD EPYC, AVX-512"}))
    assert made_on(group) == {"cpu": "AMD EPYC, AVX-512"}
    assert made_on(fold) == {"cpu": "AMD EPYC, AVX-512"} and made_on(RunDir(tmp_path / "none")) == {}
    (group.path / RunDir.METRICS).write_text(json.dumps({"fold_runs": {"0": "../fold-a"}}))
    with pytest.raises(PetalsError, match="fold_runs"):
        made_on(group)
