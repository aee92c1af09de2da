"""What a benchmark figure says of the machine it was measured on: the CPU's model and whether
it has AVX-512. One fine-tune scored 0.9075 on one session's CPU and 0.8986 on another's at the
same commit and seed (docs/BENCHMARKS.md), so a figure without its CPU cannot be compared."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bench_fetch import cpu, machine


def _info(tmp_path: Path, flags: str) -> Path:
    block = "processor\t: {n}\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9B14\n"
    block += f"flags\t\t: {flags}\n"
    path = tmp_path / "cpuinfo"
    path.write_text("\n".join(block.format(n=n) for n in range(2)))
    return path


def test_the_cpu_is_named_with_its_avx512(tmp_path):
    assert cpu(_info(tmp_path, "fpu sse2 avx2 avx512f avx512bw")) == " (AMD EPYC 9B14, with AVX-512)"
    assert cpu(_info(tmp_path, "fpu sse2 avx2 avx512_bf16")) == " (AMD EPYC 9B14, without AVX-512)"


def test_no_cpuinfo_names_nothing_and_the_machine_line_carries_this_one(tmp_path):
    assert cpu(tmp_path / "absent") == ""
    assert f"CPUs{cpu()}," in machine()
