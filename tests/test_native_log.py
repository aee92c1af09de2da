"""TensorFlow's load-time lines held to TF_CPP_MIN_LOG_LEVEL (absl ignores it before it is set up)."""

from __future__ import annotations

import os

import pytest

from pipeline.core import native_log
from tests.conftest import run_python

# Lines TensorFlow 2.21 wrote at import on a CPU with avx512_bf16 (oneDNN on), copied from a run.
BEFORE_INIT = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
ONEDNN = (
    "I0000 00:00:1795517426.366573   24353 port.cc:153] oneDNN custom operations are on. You may see "
    "slightly different numerical results due to floating-point round-off errors from different "
    "computation orders. To turn them off, set the environment variable `TF_ENABLE_ONEDNN_OPTS=0`.\n"
)
WARNING = "W0000 00:00:1795517426.366573   24353 cuda_dnn.cc:8310] Unable to register cuDNN factory\n"
ERROR = "E1124 10:51:02.123456   24353 xla_bridge.cc:12] a real error\n"


@pytest.mark.parametrize(
    ("line", "levels_that_keep_it"),
    [
        (BEFORE_INIT, [0]),
        (ONEDNN, [0]),
        (WARNING, [0, 1]),
        (ERROR, [0, 1, 2]),
        ("Traceback (most recent call last):\n", [0, 1, 2, 3]),
        ("I am not absl's line\n", [0, 1, 2, 3]),
    ],
)
def test_each_level_keeps_what_tensorflow_documents(line, levels_that_keep_it):
    assert [level for level in range(4) if native_log.kept(line, level)] == levels_that_keep_it


def test_native_writes_are_filtered_and_the_rest_written_back_in_order(capfd):
    with pytest.raises(RuntimeError), native_log.filtered_stderr(2):
        for line in (BEFORE_INIT, ONEDNN, "first\n", ERROR, WARNING, "last\n"):
            os.write(2, line.encode())  # as native code writes: not through sys.stderr
        raise RuntimeError("the import failed")  # what was captured still comes out
    assert capfd.readouterr().err == f"first\n{ERROR}last\n"


@pytest.mark.slow  # a TensorFlow or JAX process
@pytest.mark.thorough  # a process's output, not what it computes (make test at 6 min)
def test_a_stage_process_imports_tensorflow_without_its_start_up_lines():
    """In a fresh process, as a stage starts: on a CPU where oneDNN is on, importing TensorFlow
    printed four lines before this filter."""
    done = run_python(
        """
        import sys
        from pipeline import cli
        cli.hush(verbose=False)
        import keras  # imports TensorFlow, the backend pytest's environment names
        import tensorflow as tf
        tf.constant(1.0)
        print("imported", file=sys.stderr)
        """,
        env={"TF_CPP_MIN_LOG_LEVEL": "0"},  # a parent's level is not inherited
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == "imported\n"


@pytest.mark.slow
@pytest.mark.heavy  # a whole chain (`make test-heavy`)
def test_a_run_on_cached_float16_features_writes_no_engine_line(tiny_data_dir, tmp_path):
    """The feature cache keeps float16 rows; cast inside TensorFlow, they made oneDNN log
    "E0000 ... supports DT_HALF only on platforms with AVX-512" in every cached run on this CPU."""
    from tests.conftest import TINY

    cached = [*TINY, "train.epochs=1", "train.feature_cache=true", "train.unfrozen_layers=4"]
    sets = " ".join(f"--set {override}" for override in cached)
    argv = f"--quiet train --recipe default --data-dir {tiny_data_dir} --runs-dir {tmp_path} {sets}"
    done = run_python(
        f"""
        import sys
        from pipeline import cli
        sys.exit(cli.main({argv!r}.split()))
        """,
        env={"TF_CPP_MIN_LOG_LEVEL": "0"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    engine = [
        line for line in (done.stdout + done.stderr).splitlines() if line[:1] in "IWEF" and "0000 " in line
    ]
    assert engine == [], engine
