"""`fetch --source kaggle` end to end: the real kaggle client, in a new process, against a loopback server."""

import json
import re
import zipfile
from pathlib import Path

import pytest

from pipeline.stages import fetch as fetch_stage
from tests.conftest import TINY_SIZE, error_lines, run_cli
from tests.kaggle_server import Behaviour, KaggleTestServer


@pytest.fixture(scope="module")
def archive(tiny_dataset, tmp_path_factory) -> bytes:
    """The tiny dataset zipped the way Kaggle ships the competition: its layout at the archive's root."""
    path = tmp_path_factory.mktemp("zip") / "tpu-getting-started.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for file in sorted(tiny_dataset.rglob("*")):
            if file.is_file():
                zf.write(file, file.relative_to(tiny_dataset).as_posix())
    return path.read_bytes()


def _fetch(tmp_path, env, *extra):
    return run_cli(
        "fetch", "--source", "kaggle", "--data-dir", str(tmp_path / "data"), "--no-progress", *extra, env=env
    )


def test_download_unpacks_kaggles_layout_and_verifies(tmp_path, kaggle_env, archive, tiny_dataset, spec):
    behaviour = Behaviour(archive=archive)
    with KaggleTestServer(behaviour):
        result = _fetch(tmp_path, kaggle_env)
    assert result.returncode == 0, result.stderr
    assert behaviour.requests[0] == {
        "path": "/api/v1/competitions.CompetitionApiService/DownloadDataFiles",
        "json": {"competitionName": "tpu-getting-started"},
    }
    manifest = json.loads((tmp_path / "data" / "manifest.json").read_text())
    assert manifest["source"] == "kaggle" and manifest["origin"] == "kaggle competition tpu-getting-started"
    # The bytes arrived intact: the unpacked tree has the served dataset's fingerprint.
    assert manifest["fingerprint"] == fetch_stage.fingerprint(str(tiny_dataset), spec, [TINY_SIZE])
    assert (tmp_path / "data" / spec.record_dir(TINY_SIZE) / "train").is_dir()
    assert not (tmp_path / "data.download").exists() and not (tmp_path / "data.partial").exists()
    assert "petals-key" not in result.stdout + result.stderr


def test_server_errors_are_retried(tmp_path, kaggle_env, archive):
    behaviour = Behaviour(archive=archive, fail_with=[500])
    with KaggleTestServer(behaviour):
        result = _fetch(tmp_path, kaggle_env, "--retries", "2")
    assert result.returncode == 0, result.stderr
    assert "HTTP 500, retrying" in result.stderr
    assert (tmp_path / "data" / "manifest.json").is_file()


@pytest.mark.parametrize(
    ("status", "advice"),
    [
        (401, r"rejected the credentials \(401\).*kaggle\.json"),
        (403, r"refused access \(403\).*accept the competition rules at .*/tpu-getting-started/rules"),
        (404, r"no competition 'tpu-getting-started' \(404\).*check the competition slug"),
        (500, r"answered 500 .*rerun later"),
    ],
)
def test_error_answers_become_one_actionable_line(tmp_path, kaggle_env, status, advice):
    behaviour = Behaviour(fail_with=[status] * 3)
    with KaggleTestServer(behaviour):
        result = _fetch(tmp_path, kaggle_env, "--retries", "2" if status == 500 else "1")
    assert result.returncode == 2
    lines = error_lines(result.stderr)
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("petals fetch: error: ")
    assert re.search(advice, lines[0]), lines[0]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "data").exists() and not (tmp_path / "data.partial").exists()


def test_corrupt_archive_is_named_and_deleted(tmp_path, kaggle_env):
    with KaggleTestServer(Behaviour(archive=b"PK\x03\x04 this is not a zip archive" * 100)):
        result = _fetch(tmp_path, kaggle_env)
    assert result.returncode == 2
    (line,) = error_lines(result.stderr)
    assert "corrupt archive" in line and "tpu-getting-started.zip" in line and "run fetch again" in line
    assert not list(Path(tmp_path / "data.download").glob("*.zip"))
    assert not (tmp_path / "data").exists()


def test_missing_credentials_say_where_they_go(tmp_path, kaggle_env):
    (Path(kaggle_env["KAGGLE_CONFIG_DIR"]) / "kaggle.json").unlink()
    result = _fetch(tmp_path, kaggle_env)
    assert result.returncode == 2
    (line,) = error_lines(result.stderr)
    assert "needs Kaggle credentials" in line and "~/.kaggle/" in line and "KAGGLE_USERNAME" in line
