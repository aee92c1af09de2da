"""A kernel's parts that need no generated script: metadata per accelerator, and what the kernel does
with its attached inputs (weights, wheels, an earlier version's runs) before it trains."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from pipeline.core import kaggle_input
from pipeline.core.errors import PetalsError
from pipeline.core.options import KernelOptions
from pipeline.kernels.client import metadata as kernel
from pipeline.kernels.script import main as template


def _args(accelerator: str, **extra) -> KernelOptions:
    return KernelOptions(accelerator=accelerator, internet="on", **extra)


@pytest.mark.parametrize(
    ("accelerator", "gpu", "tpu", "strategy"),
    [
        ("TpuV5E8", False, True, "tpu"),
        ("TpuV6E8", False, True, "tpu"),
        ("NvidiaTeslaT4", True, False, "mirrored"),
        ("NvidiaL4", True, False, "mirrored"),
        ("NvidiaH100", True, False, "mirrored"),
        ("None", False, False, "cpu"),
    ],
)
def test_metadata_names_the_accelerator_as_kaggle_takes_it(accelerator, gpu, tpu, strategy):
    meta = kernel.metadata(_args(accelerator), "me", "petals-cpu", "tpu-getting-started")
    assert meta["enable_gpu"] is gpu and meta["enable_tpu"] is tpu
    if accelerator == "None":
        assert "machine_shape" not in meta  # a CPU kernel names no accelerator, not "None"
    else:
        assert meta["machine_shape"] == accelerator
    assert "docker_image" not in meta and "docker_image_pinning_type" not in meta
    assert kernel.KERNEL_STRATEGY[kernel.check_accelerator(accelerator)] == strategy


def test_every_retired_accelerator_is_refused_with_the_one_to_use():
    for retired, instead in kernel.RETIRED.items():
        assert instead in kernel.ACCELERATORS
        with pytest.raises(PetalsError, match=f"{retired} is retired.*use ACCELERATOR={instead}$"):
            kernel.check_accelerator(retired)


def test_every_competitions_kernel_is_named_after_it_and_its_recipe():
    assert kernel.default_name("cpu", "flowers") == "petals-flowers-cpu"
    assert kernel.default_name("tpu", "imdb") == "petals-imdb-tpu"
    folder = kernel.kernel_folder(Path("kernels"), None, "auto", "NvidiaTeslaT4", "flowers")
    assert folder == Path("kernels/petals-flowers-gpu")  # auto: the accelerator's recipe
    assert kernel.kernel_folder(Path("k"), "mine", "auto", "TpuV5E8", "flowers") == Path("k/mine")


def test_the_pre_push_checks_and_the_kernel_stage_do_not_import_each_other():
    from tests.conftest import run_python

    done = run_python(
        """
        import sys
        import pipeline.kernels.client.check
        print("pipeline.stages.kernel" in sys.modules)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False"]


@pytest.mark.slow  # a Python process importing the stage
def test_a_kernel_name_is_refused_before_any_framework_is_imported():
    """`make kernel NAME=../evil` (and status, output, push) answers in one line without the seconds
    TensorFlow and Keras take to import: the networks are imported where generation needs them."""
    from tests.conftest import run_python

    done = run_python(
        """
        import sys
        from pipeline.core.errors import PetalsError
        from pipeline.core.options import KernelOptions
        from pipeline.stages.kernel import kernel
        for action in ("generate", "status"):
            try:
                kernel(action, KernelOptions(name="../evil", owner="petals-user"))
            except PetalsError as err:
                print(action, "refused:", "'../evil' is not a plain name" in str(err))
        print(sorted(m for m in ("keras", "tensorflow", "jax") if m in sys.modules))
        """
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["generate refused: True", "status refused: True", "[]"]


def test_a_script_answers_help_once_a_process_whatever_its_settings_and_again_for_other_code(
    monkeypatch, tmp_path
):
    """--help reads the settings only through `.get`: a kernel generated again with other settings
    is not asked again in the same process; another bundle, or other code, is."""
    from pipeline.kernels.client import check, generate

    asked = []
    monkeypatch.setattr(check, "_ANSWERED", set())
    monkeypatch.setattr(check.subprocess, "run", lambda command, **kw: asked.append(command) or _HELPED)
    settings = {"recipe": "cpu", "overrides": ["train.epochs=1"], "slug": "tpu-getting-started"}
    script = generate.script_text(settings, b"bundle", notebook=False)
    assert check._help_key(script) != check._help_key(script.replace("SETTINGS = ", "SETTINGS=", 1))
    for text in (
        script,
        generate.script_text({**settings, "overrides": ["train.epochs=2", "a='b'"]}, b"bundle", False),
        generate.script_text({}, b"bundle", notebook=False),
    ):
        check._answers_help(text, tmp_path)
    assert len(asked) == 1
    for text in (
        generate.script_text(settings, b"another bundle", notebook=False),
        script.replace("def parse(", "def parse_(", 1),
        generate.script_text(settings, b"bundle", notebook=True),
    ):
        check._answers_help(text, tmp_path)
    assert len(asked) == 4


_HELPED = argparse.Namespace(returncode=0, stdout="usage: petals_kernel.py", stderr="")


def test_resume_from_attaches_earlier_outputs_as_kernel_sources():
    meta = kernel.metadata(
        _args("TpuV5E8", resume_from=("self", "friend/their-run", "self")), "me", "petals-tpu", "x"
    )
    assert meta["kernel_sources"] == ["me/petals-tpu", "friend/their-run"]


# ----------------------------------------------------------------------------- inside the kernel


@pytest.fixture
def settings(monkeypatch):
    values = {"internet": False, "weights_file": None, "packages": {}, "resume_from": []}
    monkeypatch.setattr(template, "SETTINGS", values)
    return values


def test_offline_weights_come_from_an_attached_dataset(tmp_path, settings):
    name = "efficientnet-b7_noisy-student_notop.h5"
    mounted = tmp_path / "input" / "datasets" / "me" / "b7-weights"
    mounted.mkdir(parents=True)
    (mounted / name).write_bytes(b"weights")
    settings["weights_file"], settings["datasets"] = name, ["me/b7-weights"]
    args = argparse.Namespace(input=tmp_path / "input")
    done = template.provide_offline(args, tmp_path / "keras")
    assert (tmp_path / "keras" / "models" / name).read_bytes() == b"weights"
    assert done == [f"weights {mounted / name}"]


def test_weights_in_the_competitions_folder_are_not_linked_into_keras(tmp_path, settings):
    """A competition's files (or a source the kernel was not given) are untrusted: a file there named
    as Keras's weights would be the backbone's ImageNet weights."""
    name = "efficientnet-b7_noisy-student_notop.h5"
    hostile = tmp_path / "input" / "competitions" / "tpu-getting-started"
    hostile.mkdir(parents=True)
    (hostile / name).write_bytes(b"not the weights")
    settings["weights_file"] = name
    with pytest.raises(PetalsError, match="no attached source"):
        template.provide_offline(argparse.Namespace(input=tmp_path / "input"), tmp_path / "keras")
    assert not (tmp_path / "keras" / "models" / name).exists()


def test_offline_weights_that_no_source_holds_stop_the_kernel_in_one_line(tmp_path, settings):
    settings["weights_file"] = "efficientnet-b7_noisy-student_notop.h5"
    (tmp_path / "input" / "competitions" / "tpu-getting-started").mkdir(parents=True)
    args = argparse.Namespace(input=tmp_path / "input")
    with pytest.raises(
        PetalsError, match=r"needs efficientnet-b7_noisy-student_notop\.h5, no attached source"
    ):
        template.provide_offline(args, tmp_path / "keras")


def test_a_missing_package_without_internet_or_wheel_is_one_line(tmp_path, settings):
    settings["packages"] = {"no_such_package_petals": ["no-such-package-petals==1.0"]}
    args = argparse.Namespace(input=tmp_path / "input")
    with pytest.raises(PetalsError, match="the image lacks the no_such_package_petals package, no attached"):
        template.provide_offline(args, tmp_path / "keras")


def test_a_wheel_in_the_competitions_folder_is_not_a_wheel_to_install(tmp_path, settings):
    """An installed wheel runs its code in the kernel: one in an attached source the kernel was not
    given (here the competition's folder) is never handed to pip."""
    settings["packages"] = {"no_such_package_petals": ["no-such-package-petals==1.0"]}
    hostile = tmp_path / "input" / "competitions" / "tpu-getting-started"
    hostile.mkdir(parents=True)
    (hostile / "no_such_package_petals-1.0-py3-none-any.whl").write_bytes(b"a stranger's code")
    args = argparse.Namespace(input=tmp_path / "input")
    with pytest.raises(PetalsError, match="the image lacks the no_such_package_petals package, no attached"):
        template.provide_offline(args, tmp_path / "keras")


WHEEL = "petals_lite-0.1.0-py3-none-any.whl"


@pytest.fixture
def recorded(tmp_path):
    """The wheels dataset as Kaggle mounts it, and the {name: sha256} `make kernel` recorded of it."""
    import hashlib

    mounted = tmp_path / "input" / "datasets" / "me" / "petals-wheels"
    mounted.mkdir(parents=True)
    (mounted / WHEEL).write_bytes(b"the wheel make kernel downloaded")
    return {WHEEL: hashlib.sha256(b"the wheel make kernel downloaded").hexdigest()}


@pytest.mark.parametrize("where", ["competitions/tpu-getting-started", "datasets/me/petals-wheels"])
def test_pip_sees_only_wheels_whose_bytes_make_kernel_recorded(tmp_path, recorded, where, capsys):
    """A wheel named as a recorded one but holding other bytes (beside it in a stranger's folder, or
    in place of it), and a wheel make kernel never saw (a newer version pip would prefer), are not in
    the one folder pip is given; the recorded bytes are, when any folder holds them."""
    from pipeline.kernels.client import wheels

    hostile = tmp_path / "input" / where
    hostile.mkdir(parents=True, exist_ok=True)
    (hostile / "petals_lite-9.0-py3-none-any.whl").write_bytes(b"a newer version, by a stranger")
    (hostile / "zz").mkdir()  # searched after the dataset's own folder
    (hostile / "zz" / WHEEL).write_bytes(b"the same name, a stranger's code")
    if where.startswith("datasets"):  # the dataset's own copy replaced
        (hostile / WHEEL).write_bytes(b"the same name, a stranger's code")
    checked = tmp_path / "checked"
    folders = wheels.mounted(recorded, ["me/petals-wheels"], tmp_path / "input", checked)
    kept = {p.name: p.read_bytes() for p in checked.iterdir()}
    if where.startswith("datasets"):
        assert kept == {} and folders == []
    else:
        assert kept == {WHEEL: b"the wheel make kernel downloaded"} and folders == [checked]
    said = capsys.readouterr().out
    assert f"{WHEEL} is not the wheel `make kernel` downloaded" in said
    assert "petals_lite-9.0" not in said


def test_without_recorded_wheels_only_the_given_datasets_folders_are_searched(tmp_path):
    from pipeline.kernels.client import wheels

    given = tmp_path / "input" / "datasets" / "me" / "my-wheels" / "py312"
    given.mkdir(parents=True)
    (given / WHEEL).write_bytes(b"wheel")
    stranger = tmp_path / "input" / "competitions" / "tpu-getting-started"
    stranger.mkdir(parents=True)
    (stranger / WHEEL).write_bytes(b"wheel")
    assert wheels.mounted(None, ["me/my-wheels"], tmp_path / "input", tmp_path / "x") == [given]
    assert wheels.mounted(None, [], tmp_path / "input", tmp_path / "x") == []


@pytest.mark.parametrize("mounted", ["notebooks/me/petals-tpu", "petals-tpu"])
def test_an_earlier_versions_runs_are_copied_in_to_resume(tmp_path, settings, mounted):
    earlier = tmp_path / "input" / mounted / template.RUNS / "tpu-cnn-192-abc"
    (earlier / "checkpoints").mkdir(parents=True)
    (earlier / "config.json").write_text(json.dumps({"recipe": "tpu"}))
    (earlier / "checkpoints" / "epoch-1.npz").write_bytes(b"state")
    (earlier / "writer.lock").write_text('{"pid": 7, "host": "an-earlier-kernel"}')  # killed at its limit
    (earlier / "checkpoints" / "ckpt-2.npz.partial").write_bytes(b"half")
    runs = tmp_path / "working" / template.RUNS
    (runs / "kept-run").mkdir(parents=True)
    settings["resume_from"] = ["me/petals-tpu", "me/not-attached"]
    args = argparse.Namespace(input=tmp_path / "input")
    restored = template.restore_runs(args, runs)
    assert (runs / "tpu-cnn-192-abc" / "checkpoints" / "epoch-1.npz").read_bytes() == b"state"
    assert sorted(p.name for p in (runs / "tpu-cnn-192-abc").rglob("*")) == [
        "checkpoints",
        "config.json",
        "epoch-1.npz",
    ]
    assert restored == [
        f"tpu-cnn-192-abc from {kaggle_input.Found(tmp_path / 'input' / mounted, f'the layout {mounted}')}"
    ]
    assert sorted(p.name for p in runs.iterdir()) == ["kept-run", "tpu-cnn-192-abc"]
    assert template.restore_runs(args, runs) == []  # a run already here is kept as it is


def test_an_earlier_versions_links_are_not_followed_into_this_session(tmp_path, settings):
    """An attached source is a folder petals did not write: a link in a run there (to this session's
    credentials) or a run folder that is a link is not copied into the runs this kernel writes out."""
    secret = tmp_path / "kaggle.json"
    secret.write_text("secret")
    earlier = tmp_path / "input" / "petals-tpu" / template.RUNS
    (earlier / "tpu-cnn-192-abc").mkdir(parents=True)
    (earlier / "tpu-cnn-192-abc" / "config.json").write_text("{}")
    (earlier / "tpu-cnn-192-abc" / "best.weights.h5").symlink_to(secret)
    (earlier / "tpu-cnn-192-def").symlink_to(tmp_path, target_is_directory=True)
    settings["resume_from"] = ["me/petals-tpu"]
    runs = tmp_path / "working" / template.RUNS
    runs.mkdir(parents=True)
    template.restore_runs(argparse.Namespace(input=tmp_path / "input"), runs)
    assert sorted(p.relative_to(runs).as_posix() for p in runs.rglob("*")) == [
        "tpu-cnn-192-abc",
        "tpu-cnn-192-abc/config.json",
    ]


def test_a_trained_run_in_an_attached_dataset_is_copied_in(tmp_path, settings):
    """A code competition's kernel can predict with a run trained elsewhere, uploaded as a dataset."""
    trained = tmp_path / "input" / "datasets" / "me" / "leaf-runs" / template.RUNS / "cpu-cnn-224-abc"
    trained.mkdir(parents=True)
    (trained / "metrics.json").write_text("{}")
    weights = tmp_path / "input" / "datasets" / "me" / "b0-weights"
    weights.mkdir(parents=True)
    settings["datasets"] = ["me/b0-weights", "me/leaf-runs"]
    runs = tmp_path / "working" / template.RUNS
    runs.mkdir(parents=True)
    restored = template.restore_runs(argparse.Namespace(input=tmp_path / "input"), runs)
    assert (runs / "cpu-cnn-224-abc" / "metrics.json").is_file()
    source = kaggle_input.Found(trained.parents[1], "the layout datasets/me/leaf-runs")
    assert restored == [f"cpu-cnn-224-abc from {source}"]  # the weights dataset holds no runs


def test_attached_sources_are_found_in_every_layout(tmp_path):
    root = tmp_path / "input"
    for relative in ("competitions/c", "datasets/me/d", "models/me/m/keras/v1/2", "notebooks/me/k"):
        (root / relative).mkdir(parents=True)
        (root / relative / "file.txt").write_text("x")
    assert kaggle_input.files_named("file.txt", root) == [
        root / r / "file.txt"
        for r in ("competitions/c", "datasets/me/d", "notebooks/me/k", "models/me/m/keras/v1/2")
    ]
    holds = lambda folder: (folder / "file.txt").is_file()  # noqa: E731
    assert kaggle_input.find("model", "me/m/keras/v1/2", holds, "file.txt", root).how == (
        "the layout models/me/m/keras/v1/2"
    )
    assert kaggle_input.find("dataset", "me/d", holds, "file.txt", root).path == root / "datasets/me/d"
    assert kaggle_input.find("dataset", "me/absent", lambda f: False, "nothing", root) is None


def test_train_gets_the_sessions_limit_less_what_has_passed_and_a_reserve(monkeypatch):
    import time

    monkeypatch.setattr(template, "SETTINGS", {"time_limit": 9 * 3600})
    started = time.perf_counter() - 600  # ten minutes of set-up and fetch
    limit = template.time_limit(started)
    assert 9 * 3600 - 600 - 1620 - 5 <= limit <= 9 * 3600 - 600 - 1620  # 5% of 9 h kept for scoring
    monkeypatch.setattr(template, "SETTINGS", {"time_limit": 3600})
    assert template.time_limit(time.perf_counter()) == pytest.approx(3600 - 900, abs=2)
    monkeypatch.setattr(template, "SETTINGS", {})
    assert template.time_limit(time.perf_counter()) is None


def test_a_kernels_settings_carry_its_session_limit():
    from competition import load_spec
    from pipeline.core.options import KernelOptions
    from pipeline.kernels.client import generate
    from pipeline.tasks.recipe_config import load_config

    config, spec = load_config("cpu"), load_spec("flowers")
    for accelerator, timeout, expected in (
        ("TpuV5E8", None, 9 * 3600),
        ("NvidiaL4", None, 12 * 3600),
        ("TpuV5E8", 7200, 7200),
    ):
        options = KernelOptions(accelerator=accelerator, timeout=timeout)
        assert generate.kernel_settings(options, config, spec, "me/k")["time_limit"] == expected
