"""How `make install` gets TensorFlow: reuse the image's (Kaggle, Colab, TPU images) with pip and
the system's packages, else uv and the CPU build. Make is run dry (`-n`) with a stand-in Python
that says whether `import tensorflow` works and logs each time it is asked: the question costs a
TensorFlow import (4-12 s where one is installed), so only the install recipes ask it, and once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO


def stand_in_python(tmp_path: Path, tensorflow: bool) -> tuple[Path, Path]:
    log, fake = tmp_path / "asked", tmp_path / "bin" / "python"
    fake.parent.mkdir()
    fake.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        "if sys.argv[1:] == ['-c', 'import tensorflow']:\n"
        f"    open({str(log)!r}, 'a').write('asked\\n')\n"
        f"    sys.exit({0 if tensorflow else 1})\n"
    )
    fake.chmod(0o755)
    return fake, log


def dry_make(tmp_path: Path, python: Path, *targets: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "PATH")}
    env["PATH"] = "/usr/bin:/bin"  # no nvidia-smi: the CPU build where TensorFlow is absent
    command = ["make", "-n", "-s", "-C", str(REPO), f"VENV={tmp_path / 'venv'}", f"PYTHON={python}", *targets]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=True)
    return done.stdout


@pytest.mark.parametrize("tensorflow", [True, False], ids=["image with tensorflow", "bare machine"])
def test_install_reuses_an_images_tensorflow_and_asks_once(tmp_path, tensorflow):
    python, asked = stand_in_python(tmp_path, tensorflow)
    venv = tmp_path / "venv"
    lines = dry_make(tmp_path, python, "install", f"{venv}/.installed-track").splitlines()
    if tensorflow:
        assert lines[0] == f"{python} -m venv --system-site-packages {venv}"
        assert f'{venv}/bin/python -m pip install --quiet -e ".[dev]"' in lines
        assert f'{venv}/bin/python -m pip install --quiet -e ".[track]"' in lines
        assert not any("uv pip install" in line for line in lines)
    else:
        assert lines[0].split() == [str(python), "-m", "venv", str(venv)]
        assert f"{venv}/bin/python -m pip install --quiet uv" in lines
        uv = f"{venv}/bin/uv pip install"
        assert any(line.startswith(f"{{ {uv}") and '".[cpu,dev]"' in line for line in lines)
        assert any(line.startswith(uv) and '".[track]"' in line for line in lines)
    assert asked.read_text() == "asked\n"  # once for both stamps


def test_a_make_call_that_installs_nothing_does_not_import_tensorflow(tmp_path):
    python, asked = stand_in_python(tmp_path, tensorflow=True)
    dry_make(tmp_path, python, "help")
    dry_make(tmp_path, python, "-o", f"{tmp_path / 'venv'}/.installed", "train", f"DATA={tmp_path / 'data'}")
    assert not asked.exists()
