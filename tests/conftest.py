"""Shared fixtures: the competition spec and a tiny synthetic dataset in Kaggle's layout."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

# TensorFlow's C++ start-up lines, from tests that import it outside a stage (a stage sets this
# itself, from --verbose): the suite's output is pytest's.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
from pipeline.core.machine import engine_environment
from pipeline.core.native_log import filter_tensorflow_start_up

filter_tensorflow_start_up(int(os.environ["TF_CPP_MIN_LOG_LEVEL"]))  # before the imports below load it
engine_environment()  # the allocator stages run with, in the tests' own processes too


def _share_the_cores() -> None:
    """Each xdist worker's TensorFlow ops run on its share of the cores (3 workers on 2 cores: one
    thread each, and the processes the tests start inherit it). Each worker otherwise runs an
    op on every core, so three contend for two: `make test` measured 4-5% more CPU and wall time
    that way (two samples each, an 82-test slice of training tests). Results do not depend on it."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers > 1:
        share = max(1, (os.cpu_count() or 1) // workers)
        os.environ.setdefault("TF_NUM_INTRAOP_THREADS", str(share))


_share_the_cores()

from competition import CompetitionSpec, load_spec  # noqa: E402
from pipeline.data import synthetic  # noqa: E402
from pipeline.stages.fetch import FetchOptions, fetch  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def pytest_configure(config):
    # Registered here, beside setup.cfg's `slow` and `heavy`: an edit of setup.cfg makes every
    # checkout's next make reinstall the virtualenv (the Makefile's stamp).
    config.addinivalue_line(
        "markers",
        "thorough: a variant of a path `make test` proves once (the other backbones, families and "
        "recipes, a second backend or loop, a chain repeated with one thing changed, each further "
        "refusal of one check): run by `make test-thorough` (not by `make test`; CI runs it)",
    )
    config.addinivalue_line(
        "markers",
        "alone: a heavy test that needs both cores to itself (8 replicas or devices, several "
        "processes side by side, a stop timed by the clock): `make test-heavy` runs these one at a "
        "time, after the rest of its tier two at a time",
    )
    _one_jax_cache(config)


def _one_jax_cache(config):
    """One JAX compilation cache for the whole run (every xdist worker and the processes tests
    start inherit this environment): a JAX process finds what an earlier one compiled, as stages
    do in use, and a cold cache at each run keeps the suite's timings honest."""
    if "JAX_COMPILATION_CACHE_DIR" not in os.environ and not hasattr(config, "workerinput"):
        import tempfile

        config.petals_jax_cache = tempfile.mkdtemp(prefix="petals-jax-cache-")
        os.environ["JAX_COMPILATION_CACHE_DIR"] = config.petals_jax_cache


# Each collected test's markers by node id, before `-m` or `-k` deselect any: tests/test_tiers.py
# checks from them that every test lands in exactly one tier CI runs.
COLLECTED_MARKERS = pytest.StashKey[dict[str, frozenset[str]]]()
MARKERS_FILE = "PETALS_TEST_MARKERS_FILE"  # where a collection writes them as JSON, when set


@pytest.hookimpl(tryfirst=True)  # before pytest's own hook deselects by -m and -k
def pytest_collection_modifyitems(config, items):
    markers = {item.nodeid: frozenset(mark.name for mark in item.iter_markers()) for item in items}
    config.stash[COLLECTED_MARKERS] = markers
    if os.environ.get(MARKERS_FILE):
        Path(os.environ[MARKERS_FILE]).write_text(
            json.dumps({test: sorted(m) for test, m in markers.items()})
        )


def pytest_unconfigure(config):
    if hasattr(config, "petals_jax_cache"):
        shutil.rmtree(config.petals_jax_cache, ignore_errors=True)


TINY_SIZE = 32
TINY_SCALE = 0.05  # about 150 train, 104 val and 104 test images
TINY = [  # a recipe that trains in seconds: the small cnn on 32 px, a few steps
    f"data.image_size={TINY_SIZE}",
    "data.batch_size=8",
    "data.shuffle_buffer=64",
    "model.backbone=cnn",
    "train.epochs=2",
    "train.steps_per_epoch=3",
    "train.lr_ramp_epochs=0",
    "train.lr_max=0.002",
]


@pytest.fixture
def autotuned_reads(monkeypatch) -> list:
    """Whether tf.data's autotuning was on (`options().autotune.enabled`: None is its default, on)
    for each dataset read to numpy from here on, in order."""
    import tensorflow as tf

    enabled, real = [], tf.data.Dataset.as_numpy_iterator

    def spied(dataset):
        enabled.append(dataset.options().autotune.enabled)
        return real(dataset)

    monkeypatch.setattr(tf.data.Dataset, "as_numpy_iterator", spied)
    return enabled


@pytest.fixture(scope="session")
def spec() -> CompetitionSpec:
    return load_spec("flowers")


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory, spec) -> Path:
    """A tiny synthetic data root (32 px) written once per session; copy it before changing it.
    Drawn by the first of the suite's workers to ask and read by the others (7.5 s of drawing, once
    instead of once a worker: the same seed draws the same files)."""
    with _shared_by_workers(tmp_path_factory, "tiny") as (folder, made):
        root = folder / "data"
        if not made:
            synthetic.write_dataset(
                root, spec, size=TINY_SIZE, seed=0, scale=TINY_SCALE, workers=2, progress=False
            )
    return root


@contextlib.contextmanager
def _shared_by_workers(tmp_path_factory, name: str):
    """(a folder, whether it was made before): one folder for every xdist worker of this run, made
    under a lock by the first (a worker that dies while making it leaves no mark, and the next makes
    it again); outside xdist, this session's own."""
    import fcntl

    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not run:
        yield tmp_path_factory.mktemp(name), False
        return
    root = tmp_path_factory.getbasetemp().parent / f"shared-{run[:16]}"
    root.mkdir(exist_ok=True)
    folder, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
        yield folder, done.exists()
        done.touch()


@pytest.fixture(scope="session")
def tiny_data_dir(tmp_path_factory, spec, tiny_dataset) -> Path:
    """A fetched data dir (manifest included) whose records are the tiny dataset, read in place."""
    data_dir = tmp_path_factory.mktemp("fetched") / "data"
    options = FetchOptions(
        source="kaggle-input", data_dir=data_dir, kaggle_input=tiny_dataset.parent, slug=tiny_dataset.name
    )
    fetch(options, spec)
    return data_dir


@pytest.fixture(scope="session")
def small_data_dir(tmp_path_factory, spec) -> Path:
    """A fetched 32 px dataset 40 times the tiny one (4,807 train, 1,398 val images, drawn in about
    8 s): for comparisons of scores, whose noise falls with the val images (with 353, about 3 per
    class, one run's macro-F1 moved 0.035 between two runs of one recipe)."""
    root = tmp_path_factory.mktemp("small") / "data"
    synthetic.write_dataset(root, spec, size=TINY_SIZE, seed=0, scale=2.0, workers=2, progress=False)
    data_dir = tmp_path_factory.mktemp("small-fetched") / "data"
    fetch(
        FetchOptions(source="kaggle-input", data_dir=data_dir, kaggle_input=root.parent, slug=root.name), spec
    )
    return data_dir


@pytest.fixture(scope="session")
def cpu():
    """The platform the in-process tests train on: TensorFlow on the CPU (pytest's Keras backend)."""
    from pipeline.core import device

    return device.pick("tensorflow", "cpu")


@pytest.fixture(scope="session")
def tiny_runs(tmp_path_factory, tiny_data_dir, cpu) -> list[Path]:
    """Two finished tiny runs (seeds 0 and 1) on the tiny data, trained once per session (by the
    first worker to ask: each test copies them before changing them)."""
    from pipeline.stages import train
    from pipeline.tasks.recipe_config import load_config

    run_dirs = []
    with _shared_by_workers(tmp_path_factory, "runs") as (runs_dir, made):  # every test copies them
        for seed in (0, 1):
            config = load_config(overrides=[*TINY, "train.epochs=3", f"seed={seed}"])
            job = train.prepare(config, cpu, tiny_data_dir, runs_dir, None, None)
            if not made:
                train.fit(job, progress=False)
            run_dirs.append(job.run_dir)
    return run_dirs


@pytest.fixture
def backoff(monkeypatch) -> list[float]:
    """The seconds the Kaggle client's retries would have slept, recorded and not slept: a retry
    test's server holds the one port's lock, so a real backoff keeps every other worker's server
    test waiting with it."""
    from types import SimpleNamespace

    from pipeline.core import kaggle_client

    slept: list[float] = []
    monkeypatch.setattr(kaggle_client, "time", SimpleNamespace(sleep=slept.append))
    return slept


@contextlib.contextmanager
def kernel_help_recorded():
    """Kernel generation with the script's --help check recorded, not run: the check imports every
    stage in a fresh process (about 6 CPU-seconds each time). For tests whose claim is the kernel's
    files and settings; the real check runs in tests/test_hostile_kernel.py (from a clean clone, in
    a fresh process) and tests/test_submit_code.py, its caching in tests/test_kernel_parts.py.
    Yields the folders the check was asked for, so a test still sees that generation asks."""
    from pipeline.kernels.client import check

    asked: list[Path] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(check, "_answers_help", lambda code, folder, *args, **kwargs: asked.append(folder))
        yield asked


@pytest.fixture
def kaggle_env(tmp_path) -> dict[str, str]:
    """Credentials in a private kaggle.json and the client pointed at localhost:7777."""
    config = tmp_path / "kaggle-config"
    config.mkdir()
    (config / "kaggle.json").write_text(json.dumps({"username": "petals-user", "key": "petals-key"}))
    (config / "kaggle.json").chmod(0o600)
    home = tmp_path / "home"
    home.mkdir()
    return {"KAGGLE_API_ENVIRONMENT": "TEST", "KAGGLE_CONFIG_DIR": str(config), "HOME": str(home)}


@pytest.fixture
def in_kaggle_env(kaggle_env, monkeypatch) -> dict[str, str]:
    """`kaggle_env` set in this process, for stages run in-process with `cli.main`."""
    for name, value in kaggle_env.items():
        monkeypatch.setenv(name, value)
    return kaggle_env


@pytest.fixture
def tiny_copy(tiny_dataset, tmp_path) -> Path:
    """A private copy of the tiny dataset that a test may damage."""
    return Path(shutil.copytree(tiny_dataset, tmp_path / "copy"))


def competition_of(run):
    """The competition a run's config names, loaded as a stage loads it: what a test passes down
    where a stage would resolve it once."""
    from pipeline.core.rundir import RunDir
    from pipeline.tasks.competitions import load_competition

    return load_competition((run if isinstance(run, RunDir) else RunDir(run)).competition())


def kept_score(evaluation: dict, key: str) -> float:
    """What a run's kept weights score on all of val: its evaluation's score, or where that is its
    epoch choice cross-fitted (`crossfit.crossed_epochs`), the kept epoch's own score beside it."""
    return (evaluation.get("cross_fitted") or {}).get("kept", evaluation[key])


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 180
) -> subprocess.CompletedProcess:
    """Run `python -m pipeline ...` in a fresh process, as the Makefile does."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args],
        cwd=REPO,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def run_python(
    code: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """Run a Python snippet in a fresh process (its own Keras backend), from the repository root.

    Backend and device variables of this process are dropped unless `env` sets them.
    """
    full_env = {**os.environ, "PYTHONPATH": str(REPO)}
    for variable in ("ISTPUVM", "KERAS_BACKEND", "PETALS_TPU_STANDIN"):
        full_env.pop(variable, None)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=REPO,
        env={**full_env, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def tensorboard_events(folder: Path) -> dict:
    """Every summary in a folder of event files by tag, (step, value) in order, as TensorBoard's own
    reader loads them (tf.summary's scalars and images are tensors to it)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util.tensor_util import make_ndarray

    reader = EventAccumulator(str(folder), size_guidance={"tensors": 0})
    reader.Reload()
    return {
        tag: [(e.step, make_ndarray(e.tensor_proto)) for e in reader.Tensors(tag)]
        for tag in reader.Tags()["tensors"]
    }


def kill_at_first_checkpoint(command: list[str], env: dict[str, str], run_dir: Path) -> None:
    """Start a train command and kill -9 it as soon as its first checkpoint is complete (the
    checkpoint index names it), as a machine lost mid-run would; fails if none came in 240 s."""
    first = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    index = run_dir / "checkpoints" / "latest.json"
    deadline = time.monotonic() + 240
    while not index.is_file() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert index.is_file(), "no checkpoint was written before the deadline"
    assert not (run_dir / "metrics.json").is_file()


def error_lines(stderr: str) -> list[str]:
    """The stage's own error lines (TensorFlow prints start-up chatter to stderr too)."""
    return [line for line in stderr.splitlines() if line.startswith(("petals ", "python -m pipeline"))]


# A line petals writes: a stage's log line ("train: ...", "device: ...", "<run id>: val pass 1/1
# done"), an error ("petals train: error: ..."). Anything else in a stage's default output is
# another library's.
PETALS_LINE = re.compile(r"^(petals [a-z-]+: |[a-z][a-z0-9._-]*: )")


def foreign_lines(output: str) -> list[str]:
    """Lines of a stage's output that petals did not write (start-up chatter of TensorFlow, absl,
    JAX or the Kaggle client)."""
    return [line for line in output.splitlines() if line.strip() and not PETALS_LINE.match(line)]


@pytest.fixture
def postgresql():
    """A PostgreSQL server of its own on 127.0.0.1, in a folder outside pytest's (which the postgres
    user cannot enter; initdb refuses root): the URL of its database."""
    import os
    import socket
    import tempfile

    pytest.importorskip("psycopg2")
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb")) or [Path(shutil.which("initdb") or "/-")]
    if not found[-1].exists():
        pytest.skip("no PostgreSQL server installed (initdb)")
    bin_dir, home = found[-1].parent, Path(tempfile.mkdtemp(prefix="petals-pg-"))
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    if as_user:
        shutil.chown(home, "postgres")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    def pg(tool: str, *args: str, check: bool = True) -> None:
        subprocess.run([*as_user, str(bin_dir / tool), *args], check=check, capture_output=True, timeout=120)

    data = str(home / "data")
    pg("initdb", "-D", data, "-U", "postgres", "-A", "trust")
    listen = f"-p {port} -k {home} -c listen_addresses=127.0.0.1"  # its log in a file: no pipe held open
    pg("pg_ctl", "-D", data, "-l", str(home / "log"), "-o", listen, "-w", "start")
    try:
        yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/postgres"
    finally:
        pg("pg_ctl", "-D", data, "-m", "immediate", "stop", check=False)
        shutil.rmtree(home, ignore_errors=True)
