"""Kaggle kernels: generated from the pipeline, run locally on CPU, pushed and collected by the client."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import subprocess
import sys
import zipfile

import pandas as pd
import pytest

from pipeline import cli
from pipeline.kernels.client import metadata as kernel
from pipeline.runs import leaderboard
from pipeline.runs.submission_files import sample_ids
from pipeline.tasks.competitions import check_submission
from tests.conftest import REPO, TINY, error_lines, kernel_help_recorded
from tests.kaggle_server import Behaviour, KaggleTestServer

pytestmark = pytest.mark.slow
# The tiny recipe minus its 32 px records: a kernel is checked against Kaggle's resolutions,
# so the local run passes `--set data.image_size=32` to the generated script instead.
KERNEL_RECIPE = [o for o in TINY if not o.startswith("data.image_size")]


def _generate(kernels_dir, *extra: str, asked: list | None = None) -> int:
    """`kernel generate` of the tiny recipe; the folders its --help check was asked for are added
    to `asked` (the check itself is not run here: see `kernel_help_recorded`)."""
    args = ["kernel", "generate", "--kernels-dir", str(kernels_dir), "--recipe", "default"]
    for override in KERNEL_RECIPE:
        args += ["--set", override]
    with kernel_help_recorded() as recorded:
        code = cli.main([*args, *extra])
    (asked if asked is not None else []).extend(recorded)
    return code


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """A kernel for the tiny recipe, generated once (its --help check asked for, not run: see
    `kernel_help_recorded`)."""
    kernels_dir, asked = tmp_path_factory.mktemp("kernels"), []
    assert _generate(kernels_dir, "--owner", "petals-user", "--name", "petals-tiny", asked=asked) == 0
    assert asked == [kernels_dir / "petals-tiny"]
    return kernels_dir / "petals-tiny"


def _bundle(folder) -> zipfile.ZipFile:
    code = (folder / kernel.SCRIPT).read_text()
    encoded = re.search(r'BUNDLE = """\n(.*?)\n"""', code, re.S).group(1)
    return zipfile.ZipFile(io.BytesIO(base64.b64decode(encoded)))


def test_generate_writes_the_bundled_script_and_exact_metadata(generated, tmp_path):
    meta = json.loads((generated / kernel.METADATA).read_text())
    assert meta == {
        "id": "petals-user/petals-tiny",
        "title": "petals tiny",
        "code_file": "petals_kernel.py",
        "language": "python",
        "kernel_type": "script",
        "is_private": True,
        "enable_internet": True,
        "enable_gpu": False,
        "enable_tpu": True,
        "machine_shape": "TpuV5E8",
        "competition_sources": ["tpu-getting-started"],
        "dataset_sources": [],
        "kernel_sources": [],
        "model_sources": [],
        "keywords": [],
    }
    # The bundle is this repo's pipeline/ and competition/, byte for byte.
    with _bundle(generated) as archive:
        names = set(archive.namelist())
        for path in [*(REPO / "pipeline").glob("*.py"), *(REPO / "competition").rglob("*.toml")]:
            name = path.relative_to(REPO).as_posix()
            assert name in names and archive.read(name) == path.read_bytes(), name
    # Regenerating gives the same bytes.
    again = tmp_path / "again"
    assert _generate(again, "--owner", "petals-user", "--name", "petals-tiny") == 0
    assert (again / "petals-tiny" / kernel.SCRIPT).read_bytes() == (generated / kernel.SCRIPT).read_bytes()


@pytest.mark.heavy  # a whole chain (`make test-heavy`)
def test_the_generated_kernel_runs_end_to_end_on_cpu(generated, tiny_data_dir, spec, tmp_path):
    """Outside the repo, with no PYTHONPATH: everything it runs comes from its own bundle."""
    working = tmp_path / "working"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, str(generated / kernel.SCRIPT), "--working", str(working), "--data-dir",
         str(tiny_data_dir), "--strategy", "cpu", "--set", "data.image_size=32"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    check_submission(working / "submission.csv", spec, sample_ids(tiny_data_dir, spec))
    summary = json.loads((working / kernel.SUMMARY).read_text())
    assert summary["recipe"] == "default" and summary["extra_overrides"] == ["data.image_size=32"]
    assert not summary["code_root"].startswith(str(REPO))  # the bundle ran, not this checkout
    assert summary["config"]["data"]["image_size"] == 32 and summary["run"]["strategy"] == "cpu"
    assert set(summary["timings_seconds"]) == {"setup", "train", "evaluate", "predict", "total"}
    assert summary["strategy"] == "tpu" and summary["accelerator"] == "TpuV5E8"  # --strategy cpu ran it here
    # The run was written into the working folder as it trained: a kill keeps its epochs.
    run = working / "petals_runs" / summary["run_id"]
    evaluation = summary["metrics"]["evaluation"]
    per_class = pd.read_csv(run / "per_class.csv")
    assert evaluation["images"] == per_class["support"].sum() and 0 <= evaluation["val_macro_f1"] <= 1
    assert (run / "history.csv").is_file() and (run / "best.weights.h5").is_file()
    assert not (working / "best.weights.h5").exists()


def test_push_status_and_output_go_through_the_official_client(generated, tmp_path, in_kaggle_env):
    folder = tmp_path / "petals-tiny"
    folder.mkdir()
    for name in (kernel.SCRIPT, kernel.METADATA):
        (folder / name).write_bytes((generated / name).read_bytes())
    common = [
        "--kernels-dir",
        str(tmp_path),
        "--name",
        "petals-tiny",
        "--submissions-dir",
        str(tmp_path / "subs"),
    ]
    summary = {
        "run_id": "default-cnn-192-abc",
        "competition": "flowers",
        "petals_commit": "abc123",
        "finished": "2026-11-21T12:00:00Z",
        "data_source": "kaggle-input",
        "data_fingerprint": "sha256:feed",
        "metrics": {"recipe": "tpu", "backbone": "efficientnet-b7", "image_size": 512, "epochs": 20,
                    "train_seconds": 3000.0,
                    "evaluation": {"val_macro_f1": 0.95, "val_accuracy": 0.96, "tta": 4}},
    }  # fmt: skip
    files = {"submission.csv": b"id,label\nabc,3\n", kernel.SUMMARY: json.dumps(summary).encode()}
    behaviour = Behaviour(kernel_status="RUNNING", kernel_files=files)
    with KaggleTestServer(behaviour):
        assert cli.main(["kernel", "push", *common, "--timeout", "7200"]) == 0
        assert cli.main(["kernel", "status", *common]) == 0
        assert cli.main(["kernel", "output", *common]) == 0
    (pushed,) = behaviour.pushed
    assert pushed["slug"] == "petals-user/petals-tiny" and pushed["newTitle"] == "petals tiny"
    assert pushed["text"] == (generated / kernel.SCRIPT).read_text()
    assert pushed["language"] == "python" and pushed["kernelType"] == "script" and pushed["isPrivate"] is True
    assert (
        pushed["enableInternet"] is True
        and pushed["enableTpu"] is True
        and pushed["machineShape"] == "TpuV5E8"
    )
    assert (
        pushed["competitionDataSources"] == ["tpu-getting-started"]
        and pushed["sessionTimeoutSeconds"] == 7200
    )
    assert "dockerImage" not in pushed
    assert (folder / "output" / "submission.csv").read_bytes() == files["submission.csv"]
    row = (
        leaderboard.read(tmp_path / "subs" / leaderboard.BOARD)
        .set_index("entry")
        .loc["kaggle-default-cnn-192-abc"]
    )
    assert row["kind"] == "kaggle" and row["val_macro_f1"] == 0.95 and row["backbone"] == "efficientnet-b7"


def test_status_reports_the_kernels_state(generated, in_kaggle_env, capsys):
    behaviour = Behaviour(kernel_status="ERROR")
    args = ["kernel", "status", "--kernels-dir", str(generated.parent), "--name", "petals-tiny"]
    with KaggleTestServer(behaviour):
        assert cli.main(args) == 0
    assert "kernel petals-user/petals-tiny: error" in capsys.readouterr().out
    assert behaviour.requests[0]["json"] == {"userName": "petals-user", "kernelSlug": "petals-tiny"}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--owner", "me", "--set", "data.image_size=32"], "Kaggle ships 192, 224, 331, 512 px records only"),
        (["--owner", "me", "--set", "model.weights=/home/me/b7.h5"], "no such file on this machine to ship"),
        (
            ["--owner", "me", "--internet", "off", "--set", "model.weights=imagenet"],
            "the kernel has no internet",
        ),
        (
            ["--owner", "me", "--accelerator", "TpuV99"],
            "accelerator 'TpuV99': Kaggle accepts TpuV5E8, TpuV6E8",
        ),
        (
            ["--owner", "me", "--accelerator", "TpuV38"],
            "TpuV38 is retired: Kaggle silently runs something else",
        ),
        (["--owner", "me", "--accelerator", "NvidiaTeslaP100"], "use ACCELERATOR=NvidiaTeslaT4"),
        (
            [
                "--owner",
                "me",
                "--internet",
                "off",
                "--set",
                "model.backbone=keras-efficientnet-b0",
                "--set",
                "model.weights=noisy-student",
            ],
            "downloads efficientnet-b0_noisy-student_notop.h5, but the kernel has no internet: attach",
        ),
        (
            ["--owner", "me", "--set", "model.backbone=efficientnet-b0"],
            "builds on tensorflow only, not on jax; use keras-efficientnet-b0 (the same network; "
            "noisy-student weights are carried over); Kaggle's TPU image trains on JAX",
        ),
        (["--owner", "me", "--resume-from", "nobody"], "--resume-from 'nobody': expected owner/kernel-slug"),
        (["--owner", "me", "--name", "Petals_Tiny"], "use lowercase letters, digits and single dashes"),
        ([], "no Kaggle owner for the kernel: pass OWNER=<your Kaggle username>"),
    ],
)
def test_what_a_kernel_cannot_do_is_one_line_and_writes_nothing(
    tmp_path, monkeypatch, capsys, extra, message
):
    for name in ("KAGGLE_USERNAME", "KAGGLE_KEY", "KAGGLE_API_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KAGGLE_CONFIG_DIR", str(tmp_path / "no-credentials"))
    assert _generate(tmp_path / "kernels", *extra) == 2
    (line,) = error_lines(capsys.readouterr().err)
    assert message in line
    assert not (tmp_path / "kernels").exists()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda meta: {**meta, "title": "something else"},
            "must be 5 to 50 characters and slugify to 'petals-tiny'",
        ),
        (lambda meta: {**meta, "docker_image": "gcr.io/kaggle-images/python"}, "remove docker_image"),
        (lambda meta: {**meta, "competition_sources": ["c/tpu-getting-started"]}, "must be the plain slug"),
        (
            lambda meta: {**meta, "keywords": ["0123456789abcdef0123456789abcdef"]},
            "one of your Kaggle secrets",
        ),
        (lambda meta: {k: v for k, v in meta.items() if k != "enable_internet"}, "missing enable_internet"),
    ],
)
def test_checks_before_a_push_refuse_and_push_nothing(
    generated,
    tmp_path,
    in_kaggle_env,
    monkeypatch,
    capsys,
    edit,
    message,
):
    folder = tmp_path / "petals-tiny"
    folder.mkdir()
    (folder / kernel.SCRIPT).write_bytes((generated / kernel.SCRIPT).read_bytes())
    meta = json.loads((generated / kernel.METADATA).read_text())
    (folder / kernel.METADATA).write_text(json.dumps(edit(meta)))
    monkeypatch.setenv("KAGGLE_KEY", "0123456789abcdef0123456789abcdef")
    behaviour = Behaviour()
    with KaggleTestServer(behaviour):
        assert cli.main(["kernel", "push", "--kernels-dir", str(tmp_path), "--name", "petals-tiny"]) == 2
    assert message in error_lines(capsys.readouterr().err)[0]
    assert behaviour.requests == []


@pytest.mark.parametrize("how", ["with ..", "absolute", "a link out", "metadata a list", "deep metadata"])
def test_a_shared_kernel_folder_cannot_push_a_file_from_outside_it(
    generated, tmp_path, in_kaggle_env, capsys, how
):
    """The client uploads whatever code_file names: a kernel folder someone shared, naming a private
    file of yours (by `..`, a path, a link), would push it to Kaggle. Refused in one line, nothing sent."""
    private = tmp_path / "id_rsa"
    private.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    folder = tmp_path / "petals-tiny"
    folder.mkdir()
    meta = json.loads((generated / kernel.METADATA).read_text())
    (folder / kernel.SCRIPT).write_bytes((generated / kernel.SCRIPT).read_bytes())
    if how == "a link out":
        (folder / kernel.SCRIPT).unlink()
        (folder / kernel.SCRIPT).symlink_to(private)
    named = {"with ..": "../id_rsa", "absolute": str(private)}.get(how, kernel.SCRIPT)
    text = json.dumps({**meta, "code_file": named})
    if how == "metadata a list":
        text = json.dumps([meta])
    elif how == "deep metadata":
        text = "[" * 100_000
    (folder / kernel.METADATA).write_text(text)
    says = {
        "with ..": "code_file '../id_rsa' is not a plain name",
        "absolute": "code_file '/tmp/",  # shown cut
        "a link out": f"code_file '{kernel.SCRIPT}' leaves {folder} (a link out of it)",
        "metadata a list": f"{folder / kernel.METADATA}: not a JSON object",
        "deep metadata": f"{folder / kernel.METADATA}: nested deeper than 32 levels",
    }[how]
    behaviour = Behaviour()
    with KaggleTestServer(behaviour):
        assert cli.main(["kernel", "push", "--kernels-dir", str(tmp_path), "--name", "petals-tiny"]) == 2
    (line,) = error_lines(capsys.readouterr().err)
    assert says in line, line
    assert behaviour.requests == []


def test_a_refused_push_is_one_actionable_line(generated, in_kaggle_env, capsys):
    behaviour = Behaviour(fail_with=[404, 403])  # a kernel never pushed; its push refused
    with KaggleTestServer(behaviour):
        code = cli.main(["kernel", "push", "--kernels-dir", str(generated.parent), "--name", "petals-tiny"])
    assert code == 2
    (line,) = error_lines(capsys.readouterr().err)
    assert "refused access (403) while pushing kernel petals-user/petals-tiny" in line
    assert not behaviour.pushed


def test_a_push_whose_answer_was_lost_is_found_and_not_pushed_again(
    generated, in_kaggle_env, capsys, caplog, backoff
):
    """Kaggle made the version (it runs, spending quota) but its answer was lost (a 502): the retry
    finds the new version instead of pushing a second one."""
    behaviour = Behaviour(lost_pushes=1, versions={"petals-user/petals-tiny": 4})
    with KaggleTestServer(behaviour):
        code = cli.main(["kernel", "push", "--kernels-dir", str(generated.parent), "--name", "petals-tiny"])
    assert code == 0 and len(behaviour.pushed) == 1 and backoff == [2.0]
    assert "kernel petals-user/petals-tiny version 5 pushed" in capsys.readouterr().out
    assert "the last try made version 5 though its answer was lost" in caplog.text


def test_a_lost_push_answer_where_kaggle_hides_the_versions_is_not_pushed_again(
    generated, in_kaggle_env, capsys, backoff
):
    behaviour = Behaviour(lost_pushes=1, hide_versions=True)
    with KaggleTestServer(behaviour):
        code = cli.main(["kernel", "push", "--kernels-dir", str(generated.parent), "--name", "petals-tiny"])
    (line,) = error_lines(capsys.readouterr().err)
    assert code == 2 and len(behaviour.pushed) == 1, line
    assert "the push may have made one: `make kernel-status` says whether a new version runs" in line


@pytest.mark.thorough  # the script kernel's generation (above), as a notebook
def test_a_notebook_kernel_carries_the_same_script_in_one_cell(generated, tmp_path):
    assert (
        _generate(tmp_path, "--owner", "petals-user", "--name", "petals-tiny", "--kernel-type", "notebook")
        == 0
    )
    folder = tmp_path / "petals-tiny"
    meta = json.loads((folder / kernel.METADATA).read_text())
    assert meta["kernel_type"] == "notebook" and meta["code_file"] == "petals_kernel.ipynb"
    (cell,) = json.loads((folder / kernel.NOTEBOOK).read_text())["cells"]
    script = (generated / kernel.SCRIPT).read_text()
    assert cell["source"] == script.replace(*kernel.notebook_entry())
    assert not (folder / kernel.SCRIPT).exists()


@pytest.mark.parametrize(
    ("status", "line"),
    [
        (404, "Kaggle has no kernel 'petals-user/petals-tiny' (404) while asking for the status"),
        (403, "cannot see kernel petals-user/petals-tiny: check the owner and the slug"),
    ],
)
def test_status_of_a_kernel_kaggle_does_not_show_is_one_line(
    generated,
    in_kaggle_env,
    capsys,
    status,
    line,
):
    with KaggleTestServer(Behaviour(fail_with=[status])):
        code = cli.main(["kernel", "status", "--kernels-dir", str(generated.parent), "--name", "petals-tiny"])
    assert code == 2
    (error,) = error_lines(capsys.readouterr().err)
    assert line in error
