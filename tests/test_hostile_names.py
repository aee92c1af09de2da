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
