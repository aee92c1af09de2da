"""Names typed on the command line become folder names, never ways out of their folder: a run id
(`RUN=`) with `..` or a slash is refused in one line before anything is written."""

from __future__ import annotations

import pytest

from pipeline import cli
from tests.conftest import TINY
from tests.hostile import Tree, one_error_line, record


@pytest.mark.parametrize("name", ["../escaped", "a/../../b", "/tmp/abs", ".."])
def test_a_run_id_that_leaves_the_runs_dir_is_refused(tiny_data_dir, tmp_path, capsys, name):
    runs = tmp_path / "place" / "runs"
    runs.mkdir(parents=True)
    before = Tree(tmp_path)
    overrides = [a for s in TINY for a in ("--set", s)]
    args = ["train", "--data-dir", str(tiny_data_dir), "--runs-dir", str(runs), "--run", name, *overrides]
    code = cli.main([*args, "--strategy", "cpu"])
    line = one_error_line(capsys.readouterr().err)
    assert code == 2
    assert "run id" in line and "is not a plain name" in line
    assert before.changes() == []
    record(f"run id {name}", f"make train RUN='{name}'", line, code, "nothing written")


@pytest.mark.parametrize("key", ["model.backbone", "recipe"])
def test_a_backbone_or_recipe_that_leaves_the_runs_dir_is_refused(tiny_data_dir, tmp_path, capsys, key):
    """Both name the run's folder: a shared recipe's `backbone = "x/../../y"` sent predict to read a
    finished "run" outside the runs dir (`runs/cpu-x/../../y-192-...`)."""
    outside = tmp_path / "y-192-0"  # where such a name leads
    outside.mkdir()
    runs = tmp_path / "place" / "runs"
    runs.mkdir(parents=True)
    before = Tree(tmp_path)
    value = "x/../../../y" if key == "model.backbone" else "../../y"
    args = ["predict", "--data-dir", str(tiny_data_dir), "--runs-dir", str(runs), "--set", f"{key}={value}"]
    code = cli.main(args)
    line = one_error_line(capsys.readouterr().err)
    assert code == 2
    assert f"{key} {value!r} is not a plain name" in line
    assert before.changes() == []
    record(f"{key} {value}", f"make predict SET='{key}={value}'", line, code, "nothing read or written")
