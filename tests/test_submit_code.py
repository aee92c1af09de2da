"""A code competition: `make kernel` writes an offline kernel, `make submit` pushes it as a new version,
waits for it to complete and submits the file it wrote, through the real kaggle client on loopback."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from competition import load_spec
from competition.submission import submission_frame
from pipeline import cli
from pipeline.kernels.client.metadata import METADATA, SCRIPT, content_digest
from pipeline.runs import leaderboard
from tests.conftest import error_lines
from tests.kaggle_server import Behaviour, KaggleTestServer

pytestmark = pytest.mark.slow  # the competition's kernel is generated (its script's --help runs)

SLUG = "leaf-disease-code"
KERNEL = "petals-user/petals-leaves-default"  # petals-<competition>-<recipe>, as `make kernel` names it
SMALL_CNN = ["model.backbone=cnn", "model.weights=none"]  # no pretrained weights to attach
IDS = ["a1", "b2", "c3", "d4", "e5"]


@pytest.fixture(scope="module")
def competition_file(tmp_path_factory):
    """A code competition of its own: the flower competition's file with `[submission] by = "code"`."""
    from competition.spec import competition_folder

    flowers = competition_folder("flowers")
    folder = tmp_path_factory.mktemp("competition") / "leaves"
    folder.mkdir()
    text = (flowers / "competition.toml").read_text()
    lines = []
    for line in text.splitlines():
        if line.startswith("name ="):
            line = 'name = "leaves"'
        elif line.startswith("slugs ="):
            line = f'slugs = ["{SLUG}"]'
        lines.append(line)
        if line == "[submission]":
            lines.append('by = "code"')
    (folder / "competition.toml").write_text("\n".join(lines) + "\n")
    (folder / "classes.txt").write_text((flowers / "classes.txt").read_text())
    path = str(folder / "competition.toml")
    assert load_spec(path).code_competition and load_spec(path).name == "leaves"
    return path


def _generate(kernels_dir, competition_file, *extra: str) -> int:
    args = ["kernel", "generate", "--kernels-dir", str(kernels_dir), "--recipe", "default",
            "--owner", "petals-user", "--set", f"competition={competition_file}"]  # fmt: skip
    for override in SMALL_CNN:
        args += ["--set", override]
    return cli.main([*args, *extra])


@pytest.fixture(scope="module")
def kernels_dir(tmp_path_factory, competition_file):
    """The competition's kernel, generated once (generation runs the script's --help)."""
    folder = tmp_path_factory.mktemp("kernels")
    assert _generate(folder, competition_file) == 0
    return folder


@pytest.fixture
def local(tmp_path, competition_file):
    """A fetched data dir (manifest and sample) and a valid submission CSV, written by hand."""
    spec = load_spec(competition_file)
    data = tmp_path / "data"
    data.mkdir()
    (data / "manifest.json").write_text(json.dumps({"root": ".", "source": "kaggle", "slug": SLUG}))
    submission_frame(spec, IDS, [0] * len(IDS)).to_csv(data / spec.sample_submission, index=False)
    subs = tmp_path / "submissions"
    subs.mkdir()
    csv = subs / "leaves-run.csv"
    submission_frame(spec, IDS, [i % spec.num_classes for i in range(len(IDS))]).to_csv(csv, index=False)
    return data, csv


@pytest.fixture
def submit(monkeypatch, capsys, competition_file, kernels_dir, local):
    """`make submit COMPETITION=<the code competition>` in this process, with its own environment."""
    data, csv = local

    def run(env, *extra) -> subprocess.CompletedProcess:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        args = ["submit", "--competition", competition_file, "--data-dir", str(data),
                "--submissions-dir", str(csv.parent), "--kernels-dir", str(kernels_dir),
                "--recipe", "default", "--poll-seconds", "0.01", "--message", "leaves v1",
                *extra]  # fmt: skip
        code = cli.main(args)
        captured = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, captured.out, captured.err)

    return run


def _no_credentials(tmp_path) -> dict[str, str]:
    home = tmp_path / "empty-home"
    home.mkdir(exist_ok=True)
    env = {"HOME": str(home), "KAGGLE_CONFIG_DIR": str(home / "kaggle"), "XDG_CONFIG_HOME": str(home)}
    return {**env, "KAGGLE_USERNAME": "", "KAGGLE_KEY": "", "KAGGLE_API_TOKEN": ""}


def _row(csv):
    return leaderboard.read(leaderboard.board_file(csv.parent, "leaves")).set_index("entry").loc["leaves-run"]


# ----------------------------------------------------------------------------- make kernel


def test_a_code_competitions_kernel_is_offline_attaches_the_competition_and_writes_its_file(kernels_dir):
    folder = kernels_dir / "petals-leaves-default"
    meta = json.loads((folder / METADATA).read_text())
    assert meta["id"] == KERNEL and meta["enable_internet"] is False
    assert meta["competition_sources"] == [SLUG]
    script = (folder / SCRIPT).read_text()
    assert "'code_competition': True" in script and "'submission_file': 'submission.csv'" in script
    assert "'internet': False" in script


def test_internet_on_is_refused_for_a_code_competition_in_one_line(tmp_path, competition_file, capsys):
    assert _generate(tmp_path / "kernels", competition_file, "--internet", "on") == 2
    (line,) = error_lines(capsys.readouterr().err)
    assert "competition leaves is a code competition" in line and "INTERNET=on is refused" in line
    assert not (tmp_path / "kernels").exists()


@pytest.mark.thorough  # a further refusal of the offline kernel's checks (test_kernel_wheels' weights)
def test_pretrained_weights_of_a_code_competitions_kernel_must_be_attached(
    tmp_path, competition_file, capsys
):
    extra = ["--set", "model.backbone=keras-efficientnet-b0", "--set", "model.weights=imagenet"]
    assert _generate(tmp_path / "kernels", competition_file, *extra) == 2
    (line,) = error_lines(capsys.readouterr().err)
    assert "model.weights=imagenet downloads" in line
    assert "competition leaves is a code competition, whose notebook runs offline" in line
    assert "from an attached dataset or model, not a download" in line and "INTERNET=on" not in line
    assert _generate(tmp_path / "kernels", competition_file, *extra, "--dataset", "me/b0-weights") == 0


# ----------------------------------------------------------------------------- make submit


def test_without_credentials_it_checks_the_csv_and_says_what_it_would_push_and_submit(
    submit, local, tmp_path
):
    _, csv = local
    result = submit(_no_credentials(tmp_path))
    assert result.returncode == 0, result.stderr
    first, checked = result.stdout.splitlines()[:2]
    assert first.startswith(f"DRY RUN, NOT SUBMITTED: would push kernel {KERNEL} (")
    assert f"submit its submission.csv to competition '{SLUG}'" in first and "message 'leaves v1'" in first
    assert checked.startswith(f"  {csv} (5 rows, ") and "passes the checks" in checked
    assert f"  wrote    {csv} (5 rows), NOT SUBMITTED (dry run)" in result.stdout
    # the next step names the competition as it was given: here its file's path
    assert re.search(r"`make submit COMPETITION=\S+/leaves/competition\.toml`", result.stdout)
    assert not leaderboard.board_file(csv.parent, "leaves").exists()


def test_a_defective_csv_is_refused_before_any_request(submit, local, kaggle_env):
    _, csv = local
    csv.write_text(csv.read_text() + "a1,0\n")  # one id twice
    behaviour = Behaviour()
    with KaggleTestServer(behaviour):
        result = submit(kaggle_env)
    assert result.returncode == 2 and "1 duplicate id(s): 'a1'" in error_lines(result.stderr)[0]
    assert behaviour.requests == []


def test_it_pushes_waits_until_complete_and_submits_that_versions_file(
    submit, local, kaggle_env, kernels_dir
):
    _, csv = local
    behaviour = Behaviour(kernel_statuses=["QUEUED", "RUNNING", "RUNNING"], versions={KERNEL: 4})
    with KaggleTestServer(behaviour):
        result = submit(kaggle_env)
    assert result.returncode == 0, result.stderr
    (pushed,) = behaviour.pushed
    assert pushed["slug"] == KERNEL and pushed["enableInternet"] is False
    assert pushed["competitionDataSources"] == [SLUG]
    assert behaviour.code_submissions == [
        {
            "competitionName": SLUG,
            "kernelOwner": "petals-user",
            "kernelSlug": "petals-leaves-default",
            "kernelVersion": 5,  # the version the push answered, not the first
            "fileName": "submission.csv",
            "submissionDescription": "leaves v1",
        }
    ]
    methods = [r["path"].rsplit("/", 1)[-1] for r in behaviour.requests]
    # Each Kaggle call that spends quota or a submission looks first for what a lost answer made.
    assert methods == [
        "GetKernel", "SaveKernel", *["GetKernelSessionStatus"] * 4, "ListSubmissions", "CreateCodeSubmission"
    ]  # fmt: skip
    states = [line for line in result.stdout.splitlines() if line.startswith(f"kernel {KERNEL} version 5: ")]
    assert [s.rsplit(": ", 1)[1] for s in states] == ["queued", "running", "complete"]
    assert f"SUBMITTED submission.csv of kernel {KERNEL} version 5 to '{SLUG}'" in result.stdout
    assert "(ref 2001)" in result.stdout and "petals-key" not in result.stdout + result.stderr
    row = _row(csv)
    assert row["submission"] == f"{KERNEL} version 5" and row["submission_ref"] == "2001"
    assert row["submission_sha256"] == content_digest(kernels_dir / "petals-leaves-default")
    assert not list(csv.parent.glob(".*.submitting.json"))


def test_a_version_that_ends_in_error_is_one_line_and_nothing_is_submitted(submit, local, kaggle_env):
    _, csv = local
    behaviour = Behaviour(
        kernel_statuses=["RUNNING"], kernel_status="ERROR", failure_message="out of memory in predict"
    )
    with KaggleTestServer(behaviour):
        result = submit(kaggle_env)
    assert result.returncode == 2
    (line,) = error_lines(result.stderr)
    assert f"kernel {KERNEL} version 1 ended error (out of memory in predict): nothing was submitted" in line
    assert behaviour.code_submissions == [] and not leaderboard.board_file(csv.parent, "leaves").exists()
    with KaggleTestServer(behaviour):  # that version is over: a rerun pushes a new one
        submit(kaggle_env)
    assert len(behaviour.pushed) == 2


def test_a_rerun_does_not_push_and_submit_the_same_kernel_twice_unless_forced(submit, local, kaggle_env):
    _, csv = local
    behaviour = Behaviour()
    with KaggleTestServer(behaviour):
        assert submit(kaggle_env).returncode == 0
        again = submit(kaggle_env)
        assert again.returncode == 0 and len(behaviour.pushed) == 1 and len(behaviour.code_submissions) == 1
        assert again.stdout.startswith(f"ALREADY SUBMITTED kernel {KERNEL} (sha256 ")
        assert "FORCE=1 (--force) pushes and submits it again" in again.stdout
        assert submit(kaggle_env, "--force").returncode == 0
    assert len(behaviour.pushed) == 2 and behaviour.code_submissions[-1]["kernelVersion"] == 2
    row = _row(csv)
    assert row["submission"] == f"{KERNEL} version 2" and row["submission_ref"] == "2002"


def test_a_code_submission_whose_answer_was_lost_is_found_not_sent_again(
    submit, local, kaggle_env, caplog, backoff
):
    """Kaggle took the submission but its answer was lost (a 502): the retry finds it instead of
    spending another of the day's submissions on the same version."""
    _, csv = local
    behaviour = Behaviour(lost_answers=1)
    with KaggleTestServer(behaviour):
        result = submit(kaggle_env)
    assert result.returncode == 0, result.stderr
    assert len(behaviour.code_submissions) == 1 and backoff == [2.0]
    assert "the last try reached Kaggle (ref 2001) though its answer was lost" in caplog.text
    assert _row(csv)["submission_ref"] == "2001"


def test_a_wait_that_runs_out_is_one_line_and_the_rerun_waits_for_the_same_version(submit, local, kaggle_env):
    behaviour = Behaviour(kernel_status="RUNNING")
    with KaggleTestServer(behaviour):
        result = submit(kaggle_env, "--wait-seconds", "0.05")
        assert result.returncode == 2
        (line,) = error_lines(result.stderr)
        assert f"kernel {KERNEL} version 1 is still running after" in line and "not pushed again" in line
        behaviour.kernel_status = "COMPLETE"
        again = submit(kaggle_env)
    assert again.returncode == 0, again.stderr
    assert "version 1 was pushed by an earlier `make submit`: waiting for it" in again.stdout
    assert len(behaviour.pushed) == 1 and [s["kernelVersion"] for s in behaviour.code_submissions] == [1]


def test_without_the_kernel_it_says_to_generate_it(submit, kaggle_env, tmp_path):
    result = submit(kaggle_env, "--kernels-dir", str(tmp_path / "no-kernels"))
    assert result.returncode == 2
    (line,) = error_lines(result.stderr)
    assert "competition leaves is a code competition" in line and "make kernel COMPETITION=leaves" in line
