"""benchmarks/compare_runs.py: two runs judged on the same val rows, paired, or refused in one line
where they were not scored on the same rows of one competition."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import compare_runs
from competition import load_spec
from pipeline.core.errors import PetalsError
from pipeline.core.rundir import RunDir
from pipeline.modeling.inference import Predictions


def _run(folder: Path, competition: str, ids, labels, predicted, classes: int) -> Path:
    folder.mkdir(parents=True)
    (folder / RunDir.CONFIG).write_text(json.dumps({"competition": competition}))
    probabilities = np.full((len(ids), classes), 0.1 / classes)
    probabilities[np.arange(len(ids)), predicted] += 0.9
    Predictions(np.asarray(ids), probabilities, np.asarray(labels)).save(RunDir(folder).predictions("val", 1))
    return folder


def test_two_runs_are_compared_on_their_common_rows_in_any_order(tmp_path, capsys, monkeypatch):
    rng = np.random.default_rng(0)
    ids = np.array([f"id{i:03d}" for i in range(300)])
    labels = rng.integers(0, 104, 300)
    first = np.where(rng.random(300) < 0.6, labels, rng.integers(0, 104, 300))
    second = np.where(rng.random(300) < 0.5, labels, first)  # about half its mistakes put right
    order = rng.permutation(300)  # the second run saved its rows in another order
    a = _run(tmp_path / "a", "flowers", ids, labels, first, 104)
    b = _run(tmp_path / "b", "flowers", ids[order], labels[order], second[order], 104)
    found = compare_runs.compare(a, b)
    metric = load_spec("flowers").metric
    assert found["first"] == pytest.approx(metric.score(labels, np.eye(104)[first]))
    assert found["difference"] == pytest.approx(found["second"] - found["first"])
    assert found["rows"] == 300 and found["rows_predicted_differently"] == int((first != second).sum())
    assert found["interval"][0] > 0  # that many mistakes put right, and none made: clear of zero
    monkeypatch.setattr(sys, "argv", ["compare_runs.py", str(a), str(b)])
    compare_runs.main()
    assert capsys.readouterr().out.startswith("macro-F1 on 300 val rows: ")


def test_runs_of_other_rows_or_another_competition_are_refused_in_one_line(tmp_path, capsys, monkeypatch):
    ids = np.array([f"id{i}" for i in range(20)])
    labels = np.arange(20) % 4
    a = _run(tmp_path / "a", "flowers", ids, labels, labels, 104)
    other_rows = _run(tmp_path / "b", "flowers", np.array([f"x{i}" for i in range(20)]), labels, labels, 104)
    with pytest.raises(PetalsError, match="scored on different val rows"):
        compare_runs.compare(a, other_rows)
    cats = _run(tmp_path / "c", "dogs-vs-cats", ids, labels % 2, labels % 2, 2)
    monkeypatch.setattr(sys, "argv", ["compare_runs.py", str(a), str(cats)])
    with pytest.raises(SystemExit) as stopped:
        compare_runs.main()
    said = f"compare_runs: {a} and {cats} are runs of different competitions (dogs-vs-cats, flowers)"
    assert str(stopped.value) == said
