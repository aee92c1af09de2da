"""Kaggle's long steps say how far they are, through the real `kaggle` client against the loopback
server: `make kernel-fanout`'s wait (N of K kernels done, how long it has waited, the time left at
the pace of the kernels that completed), a kernel's output file's download, and a competition's
archive unpacked. The fan-out's kernel
folders are written here in their shape (generating each takes seconds); what is under test is the
following, pushing and timing."""

from __future__ import annotations

import json
import re

import pytest

from pipeline.core import progress
from pipeline.core.options import KernelOptions
from pipeline.kernels.client import fanout, generate
from pipeline.kernels.client.metadata import METADATA, SCRIPT
from pipeline.kernels.client.shares import Share
from pipeline.tasks.competitions import load_competition
from tests.kaggle_server import Behaviour, KaggleTestServer, KernelPlan

OWNER, BASE, K = "petals-user", "petals-fan", 3


def _kernel(number: int) -> str:
    return f"{OWNER}/{BASE}-fold{number}"


def _written(options: KernelOptions, competition=None):
    """A kernel folder as `generate` leaves it, as far as a push reads it: its metadata and script."""
    folder = options.kernels_dir / options.name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / SCRIPT).write_text("print('a fold')\n")
    meta = {"id": f"{OWNER}/{options.name}", "title": options.name, "code_file": SCRIPT, "language": "python",
            "kernel_type": "script", "is_private": True, "enable_gpu": False, "enable_internet": False,
            "dataset_sources": [], "competition_sources": [], "kernel_sources": []}  # fmt: skip
    (folder / METADATA).write_text(json.dumps(meta))
    return folder


def _plan(options: KernelOptions, collected: list[int]) -> fanout.Plan:
    def options_of(share: Share) -> KernelOptions:
        return KernelOptions(name=share.name, kernels_dir=options.kernels_dir, accelerator="None")

    return fanout.Plan(
        kind="fold", base=BASE, settings={"folds": K}, numbers=list(range(K)), count=K,
        new_share=lambda n: Share(n, f"{BASE}-fold{n}"), check=lambda share: None,
        options_of=options_of, collect=lambda share: collected.append(share.number),
    )  # fmt: skip


def test_a_fan_outs_wait_says_how_many_kernels_are_done_and_the_time_left(
    tmp_path, in_kaggle_env, monkeypatch
):
    monkeypatch.setattr(generate, "generate", _written)
    monkeypatch.setattr(progress, "LINES_AFTER", 0.0)  # a log's lines from the start, not after 10 s
    options = KernelOptions(kernels_dir=tmp_path / "kernels", accelerator="None", concurrent=2,
                            poll_seconds=0.02, wait_seconds=60)  # fmt: skip
    # Two at a time, each running a round longer than the one before: the third is pushed once the
    # first has completed, and each completes in a round of its own.
    plans = {_kernel(n): KernelPlan(versions=[["QUEUED", *["RUNNING"] * 2 * (n + 1), "COMPLETE"]])
             for n in range(K)}  # fmt: skip
    collected, lines = [], []
    with KaggleTestServer(Behaviour(plans=plans)):
        competition = load_competition(generate.kernel_competition(options))
        counts = fanout.fanout(options, competition, _plan(options, collected), report=lines.append)
    assert counts["collected"] == K and sorted(collected) == list(range(K))
    said = [line for line in lines if line.startswith("kernel-fanout: fold kernels:")]
    # A line at each third done (never at the end): the count, the wait so far, the time left.
    assert [line.split(",")[0] for line in said] == [
        "kernel-fanout: fold kernels: 33% (1/3 kernels)",
        "kernel-fanout: fold kernels: 67% (2/3 kernels)",
    ]
    assert all(re.fullmatch(r".*\), \d+ s, about \d+ s left", line) for line in said), said
    state = json.loads((tmp_path / "kernels" / f"{BASE}.fanout.json").read_text())
    took = [share["took"] for share in state["shares"]]
    assert all(share["pushed_at"] > 0 for share in state["shares"]) and all(0 < t < 60 for t in took)


def test_the_time_left_counts_the_kernels_running_and_those_waiting_for_a_place():
    # Kernels took 60 s each; one has run 40 s, one 10 s, two wait; two run at once.
    assert progress.time_left([50, 70], 2, running=[40, 10], at_once=2) == pytest.approx(110)
    assert progress.time_left([60], 0, running=[90]) == 0  # over its pace: it may end any time
    assert progress.time_left([], 3) is None  # nothing done yet: no pace to go by


def test_a_state_file_with_a_negative_time_is_not_a_fan_outs(tmp_path):
    from pipeline.core.errors import PetalsError
    from pipeline.kernels.client.shares import read_state

    path = tmp_path / "x.fanout.json"
    path.write_text(json.dumps({"shares": [{"number": 0, "name": "a-fold0", "took": -5}]}))
    with pytest.raises(PetalsError, match="is not a fan-out's share"):
        read_state(path, {}, 1)


def test_a_kernels_output_file_downloads_with_its_progress(tmp_path, in_kaggle_env, monkeypatch, caplog):
    from pipeline.core import kaggle_outputs

    monkeypatch.setattr(progress, "LINES_AFTER", 0.0)
    caplog.set_level("INFO", logger="pipeline.core.progress")
    big = bytes(3 * kaggle_outputs.CHUNK)  # three chunks: a line at a third and at two thirds
    with KaggleTestServer(Behaviour(kernel_files={"model.keras": big})):
        kaggle_outputs.kernel_output(_kernel(0), tmp_path / "output")
    assert (tmp_path / "output" / "model.keras").read_bytes() == big
    said = [r.getMessage().split(",")[0] for r in caplog.records if "model.keras" in r.getMessage()]
    assert said == [
        f"kernel {_kernel(0)}: 'model.keras': 33% (1/3 MB)",
        f"kernel {_kernel(0)}: 'model.keras': 67% (2/3 MB)",
    ]


def test_a_competition_archive_unpacks_with_its_progress(tmp_path, spec, monkeypatch, caplog):
    import zipfile

    from pipeline.data.sources.archives import unpack

    monkeypatch.setattr(progress, "LINES_AFTER", 0.0)
    caplog.set_level("INFO", logger="pipeline.core.progress")
    archive = tmp_path / "flowers.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for name in ("a.bin", "b.bin", "c.bin"):
            zf.writestr(name, bytes(progress.MB))
    unpack(archive, tmp_path / "data", spec, None, progress=True, keep_archive=True)
    assert (tmp_path / "data" / "c.bin").stat().st_size == progress.MB
    said = [r.getMessage().split(",")[0] for r in caplog.records if "unpacking" in r.getMessage()]
    assert said == ["unpacking flowers.zip: 33% (1/3 MB)", "unpacking flowers.zip: 67% (2/3 MB)"]
