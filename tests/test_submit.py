"""`submit` through the real kaggle client against a loopback server: checks, dry run, upload, errors."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from competition.submission import submission_frame
from pipeline import cli
from pipeline.runs import leaderboard
from pipeline.runs.submission_files import sample_ids
from tests.conftest import error_lines
from tests.kaggle_server import Behaviour, KaggleTestServer

SLUG = "tpu-getting-started"


@pytest.fixture
def csv(tiny_data_dir, spec, tmp_path):
    """A valid submission for the tiny data, with the provenance `predict` writes beside it."""
    subs = tmp_path / "submissions"
    subs.mkdir()
    ids = sample_ids(tiny_data_dir, spec)
    path = subs / "tiny-run.csv"
    submission_frame(spec, ids, [i % spec.num_classes for i in range(len(ids))]).to_csv(path, index=False)
    return path


@pytest.fixture
def submit(monkeypatch, capsys):
    """Run the stage in this process (TensorFlow is already imported) with its own environment."""

    def run(csv, data_dir, env, *extra) -> subprocess.CompletedProcess:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        args = ["submit", "--data-dir", str(data_dir), "--submissions-dir", str(csv.parent), "--slug", SLUG]
        code = cli.main([*args, *extra])
        captured = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, captured.out, captured.err)

    return run


def _no_credentials(tmp_path) -> dict[str, str]:
    home = tmp_path / "empty-home"
    home.mkdir(exist_ok=True)
    env = {"HOME": str(home), "KAGGLE_CONFIG_DIR": str(home / "kaggle"), "XDG_CONFIG_HOME": str(home)}
    return {**env, "KAGGLE_USERNAME": "", "KAGGLE_KEY": "", "KAGGLE_API_TOKEN": ""}


def test_without_credentials_it_is_a_validated_dry_run(submit, csv, tiny_data_dir, tmp_path):
    result = submit(csv, tiny_data_dir, _no_credentials(tmp_path))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith(f"DRY RUN, NOT UPLOADED: would upload {csv} (104 rows")
    assert "to competition 'tpu-getting-started'" in out and "message 'petals tiny-run'" in out
    assert "embedded synthetic dataset" in out and "KAGGLE_USERNAME and KAGGLE_KEY" in out
    assert not (csv.parent / leaderboard.BOARD).exists()


def test_the_main_job_ends_with_what_ran_the_score_the_files_and_the_next_step(
    submit, csv, tiny_data_dir, tmp_path
):
    from pipeline.core.files import sha256, write_json

    board = csv.parent / leaderboard.BOARD
    leaderboard.update(board, "older-run", kind="run", recipe="cpu", val_macro_f1=0.95)  # sizes unknown
    leaderboard.update(board, "tiny-run", kind="run", recipe="cpu", backbone="cnn", image_size=192,
                       epochs=20, backend="tensorflow", val_macro_f1=0.9123)  # fmt: skip
    write_json(
        csv.with_suffix(".json"), {"entry": "tiny-run", "run_dir": "runs/tiny-run", "csv_sha256": sha256(csv)}
    )
    result = submit(csv, tiny_data_dir, _no_credentials(tmp_path))
    assert result.returncode == 0, result.stderr
    summary = result.stdout.split("petals: done.\n", 1)[1].splitlines()
    assert summary == [
        "  ran      recipe cpu: cnn at 192 px, 20 epochs on tensorflow",
        "  scored   val macro-F1 0.9123, rank 2 of 2 on the offline leaderboard",
        "  run      runs/tiny-run",
        f"  wrote    {csv} (104 rows), NOT UPLOADED (dry run)",
        "  next     real data: Kaggle credentials, then "
        "`make fetch SOURCE=kaggle FORCE=1 COMPETITION=flowers && make train submit COMPETITION=flowers`",
    ]


def test_the_uploaded_bytes_arrive_intact_and_the_run_is_recorded(submit, csv, tiny_data_dir, kaggle_env):
    behaviour = Behaviour()
    with KaggleTestServer(behaviour):
        result = submit(csv, tiny_data_dir, kaggle_env, "--message", "first try")
    assert result.returncode == 0, result.stderr
    assert list(behaviour.uploads.values()) == [csv.read_bytes()]
    listed, start = behaviour.requests[:2]  # what Kaggle holds before (a retry looks for what it added)
    assert listed["path"].endswith("CompetitionApiService/ListSubmissions")
    assert start["path"].endswith("CompetitionApiService/StartSubmissionUpload")
    assert start["json"]["fileName"] == csv.name and start["json"]["contentLength"] == csv.stat().st_size
    (created,) = behaviour.created
    assert created["competitionName"] == "tpu-getting-started"
    assert created["submissionDescription"] == "first try" and created["blobFileTokens"] == "blob-1"
    assert "UPLOADED" in result.stdout and "ref 1001" in result.stdout
    row = leaderboard.read(csv.parent / leaderboard.BOARD).set_index("entry").loc["tiny-run"]
    assert row["submission_ref"] == "1001" and row["submission"] == str(csv)
    assert "petals-key" not in result.stdout + result.stderr


def test_a_server_error_is_retried(submit, csv, tiny_data_dir, kaggle_env, caplog, backoff):
    behaviour = Behaviour(fail_with=[500])
    with KaggleTestServer(behaviour):
        result = submit(csv, tiny_data_dir, kaggle_env)
    assert result.returncode == 0, result.stderr
    assert "HTTP 500, retrying in 2 s (attempt 2 of 3)" in caplog.text and backoff == [2.0]
    assert list(behaviour.uploads.values())[-1] == csv.read_bytes() and len(behaviour.created) == 1


def test_a_lost_answer_is_not_uploaded_again(submit, csv, tiny_data_dir, kaggle_env, caplog, backoff):
    """Kaggle took the file but its answer was lost (a 502): the retry finds the submission the
    first try made, and does not spend another of the day's submissions on the same file."""
    behaviour = Behaviour(lost_answers=1)
    with KaggleTestServer(behaviour):
        result = submit(csv, tiny_data_dir, kaggle_env)
    assert result.returncode == 0, result.stderr
    assert len(behaviour.created) == 1 and "ref 1001" in result.stdout
    row = leaderboard.read(csv.parent / leaderboard.BOARD).set_index("entry").loc["tiny-run"]
    assert row["submission_ref"] == "1001"


@pytest.mark.parametrize(
    ("status", "line"),
    [
        (400, "join the competition at https://www.kaggle.com/competitions/tpu-getting-started"),
        (401, "Kaggle rejected the credentials (401)"),
        (
            403,
            "accept the competition rules at https://www.kaggle.com/competitions/tpu-getting-started/rules",
        ),
        (404, "Kaggle has no competition 'tpu-getting-started' (404)"),
    ],
)
def test_refusals_become_one_actionable_line(submit, csv, tiny_data_dir, kaggle_env, status, line):
    behaviour = Behaviour(fail_with=[status])
    with KaggleTestServer(behaviour):
        result = submit(csv, tiny_data_dir, kaggle_env)
    assert result.returncode == 2
    (error,) = error_lines(result.stderr)
    assert line in error and "petals-key" not in result.stdout + result.stderr
    assert not behaviour.created and not (csv.parent / leaderboard.BOARD).exists()


def test_synthetic_predictions_are_never_uploaded_to_the_real_competition(
    submit,
    csv,
    tiny_data_dir,
    kaggle_env,
):
    env = {**kaggle_env, "KAGGLE_API_ENVIRONMENT": ""}  # production, with credentials
    result = submit(csv, tiny_data_dir, env)
    assert result.returncode == 2
    (error,) = error_lines(result.stderr)
    assert (
        "embedded synthetic dataset" in error
        and "104 test rows where 'tpu-getting-started' has 7382" in error
    )


def test_a_defective_file_is_refused_before_any_request(submit, csv, tiny_data_dir, kaggle_env, tmp_path):
    lines = csv.read_text().splitlines()
    broken = tmp_path / "broken.csv"
    broken.write_text("\n".join([*lines, lines[1]]) + "\n")  # one id twice
    behaviour = Behaviour()
    with KaggleTestServer(behaviour):
        result = submit(csv, tiny_data_dir, kaggle_env, "--file", str(broken))
    assert result.returncode == 2
    assert error_lines(result.stderr) == [
        f"petals submit: error: {broken}: 1 duplicate id(s): {lines[1].split(',')[0]!r}"
    ]
    assert behaviour.requests == []


def test_the_newest_submission_is_the_default(submit, csv, tiny_data_dir, tmp_path):
    older = csv.with_name("older.csv")
    older.write_text(csv.read_text())
    os.utime(older, (1, 1))
    (csv.parent / "tiny-run.json").write_text(json.dumps({"entry": "ignored: another file's digest"}))
    result = submit(csv, tiny_data_dir, _no_credentials(tmp_path))
    assert result.returncode == 0 and f"would upload {csv} " in result.stdout


def test_the_slug_defaults_to_the_datas_competition_or_the_specs_first(
    csv, tiny_data_dir, tmp_path, monkeypatch, capsys
):
    for name, value in _no_credentials(tmp_path).items():
        monkeypatch.setenv(name, value)
    manifest = json.loads((tiny_data_dir / "manifest.json").read_text())
    assert manifest["slug"] not in ("tpu-getting-started", "flower-classification-with-tpus")
    code = cli.main(["submit", "--data-dir", str(tiny_data_dir), "--submissions-dir", str(csv.parent)])
    assert code == 0 and "to competition 'tpu-getting-started'" in capsys.readouterr().out


@pytest.mark.slow  # the submit stage's process
def test_a_dry_run_on_local_data_starts_without_tensorflow(csv, tiny_data_dir, tmp_path):
    """Submit reads a manifest and two CSVs: on local data it never imports TensorFlow (a second
    to start, not ten)."""
    from tests.conftest import run_python

    done = run_python(
        f"""
        import sys
        from pipeline import cli
        code = cli.main(["submit", "--data-dir", {str(tiny_data_dir)!r}, "--file", {str(csv)!r}])
        print(code, "tensorflow" in sys.modules, "keras" in sys.modules)
        """,
        env=_no_credentials(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "0 False False"


def test_an_upload_kaggle_accepted_before_a_kill_is_recorded_not_sent_again(
    submit, csv, tiny_data_dir, kaggle_env
):
    """The process died between Kaggle's answer and the leaderboard row: its intent file is there,
    and Kaggle lists the file with the same description, so the rerun records that submission."""
    from pipeline.core.files import sha256

    message = "petals tiny-run"
    intent = csv.with_name(f".{csv.name}.submitting.json")
    intent.write_text(json.dumps({"sha256": sha256(csv), "slug": SLUG, "message": message}))
    listed = {"ref": 1077, "fileName": csv.name, "description": message, "status": "PENDING"}
    behaviour = Behaviour(submissions=[listed])
    with KaggleTestServer(behaviour):
        result = submit(csv, tiny_data_dir, kaggle_env, "--message", message)
    assert result.returncode == 0, result.stderr
    assert behaviour.uploads == {} and behaviour.created == []  # nothing sent twice
    assert "found on Kaggle, not sent again (ref 1077)" in result.stdout
    row = leaderboard.read(csv.parent / leaderboard.BOARD).set_index("entry").loc["tiny-run"]
    assert row["submission_ref"] == "1077" and not intent.exists()

    intent.write_text(json.dumps({"sha256": "another file", "slug": SLUG, "message": message}))
    with KaggleTestServer(behaviour):  # asked again on purpose, an intent for other bytes: it is sent
        assert submit(csv, tiny_data_dir, kaggle_env, "--message", message, "--force").returncode == 0
    assert len(behaviour.created) == 1 and not intent.exists()


def test_a_rerun_does_not_upload_the_same_bytes_twice_unless_forced(submit, csv, tiny_data_dir, kaggle_env):
    behaviour = Behaviour()
    with KaggleTestServer(behaviour):
        assert submit(csv, tiny_data_dir, kaggle_env).returncode == 0
        again = submit(csv, tiny_data_dir, kaggle_env)
        assert again.returncode == 0 and len(behaviour.created) == 1
        assert again.stdout.startswith(f"ALREADY UPLOADED {csv} to 'tpu-getting-started' (ref 1001)")
        assert submit(csv, tiny_data_dir, kaggle_env, "--force").returncode == 0
    assert len(behaviour.created) == 2
    row = leaderboard.read(csv.parent / leaderboard.BOARD).set_index("entry").loc["tiny-run"]
    assert row["submission_ref"] == "1002"


def test_a_boards_ref_with_escapes_is_shown_escaped_on_a_rerun(submit, csv, tiny_data_dir, kaggle_env):
    """The leaderboard is a CSV in the submissions folder (a shared one says anything): a rerun that
    finds the bytes uploaded shows the ref it records as text, nothing a terminal acts on."""
    behaviour = Behaviour()
    with KaggleTestServer(behaviour):
        assert submit(csv, tiny_data_dir, kaggle_env).returncode == 0
        board = csv.parent / leaderboard.BOARD
        board.write_text(board.read_text().replace(",1001,", ",1001\x1b]0;OWNED\x07,"))
        again = submit(csv, tiny_data_dir, kaggle_env)
    assert again.returncode == 0 and len(behaviour.created) == 1
    assert "(ref 1001\\x1b]0;OWNED\\x07)" in again.stdout and "\x1b" not in again.stdout
