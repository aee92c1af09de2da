"""`fetch --source kaggle`: the real kaggle client against a loopback server; the download end to end in
a new process, the failures in this one (cheaper: the client is the same)."""

import json
import re
import zipfile
from pathlib import Path

import pytest

from pipeline import cli
from pipeline.data import layout
from pipeline.formats.records import records_of
from tests.conftest import TINY_SIZE, error_lines, foreign_lines, run_cli
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


def _fetch_here(tmp_path, capsys, *extra) -> tuple[int, list[str], str]:
    """The stage in this process: its exit code, its error lines and everything it printed."""
    code = cli.main(
        ["fetch", "--source", "kaggle", "--data-dir", str(tmp_path / "data"), "--no-progress", *extra]
    )
    captured = capsys.readouterr()
    return code, error_lines(captured.err), captured.out + captured.err


@pytest.mark.slow  # the fetch stage's process against the loopback server
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
    assert manifest["fingerprint"] == layout.fingerprint(str(tiny_dataset), spec, [TINY_SIZE])
    assert (tmp_path / "data" / records_of(spec).record_dir(TINY_SIZE) / "train").is_dir()
    assert not (tmp_path / "data.download").exists() and not (tmp_path / "data.partial").exists()
    assert "petals-key" not in result.stdout + result.stderr
    assert foreign_lines(result.stdout + result.stderr) == []  # the client's own lines stay hidden


@pytest.mark.slow  # the fetch stage in this process, its archive unpacked and verified
def test_server_errors_are_retried(tmp_path, in_kaggle_env, archive, capsys, caplog, backoff):
    behaviour = Behaviour(archive=archive, fail_with=[500])
    with KaggleTestServer(behaviour):
        code, _, printed = _fetch_here(tmp_path, capsys, "--retries", "2")
    assert code == 0, printed
    assert "HTTP 500, retrying" in caplog.text and backoff == [2.0]
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
def test_error_answers_become_one_actionable_line(tmp_path, in_kaggle_env, capsys, status, advice, backoff):
    behaviour = Behaviour(fail_with=[status] * 3)
    with KaggleTestServer(behaviour):
        code, lines, printed = _fetch_here(tmp_path, capsys, "--retries", "2" if status == 500 else "1")
    assert code == 2
    assert len(lines) == 1, printed
    assert lines[0].startswith("petals fetch: error: ")
    assert re.search(advice, lines[0]), lines[0]
    assert "Traceback" not in printed
    assert backoff == ([2.0] if status == 500 else [])  # a 4xx needs the user: never retried
    assert not (tmp_path / "data").exists() and not (tmp_path / "data.partial").exists()


def test_corrupt_archive_is_named_and_deleted(tmp_path, in_kaggle_env, capsys):
    with KaggleTestServer(Behaviour(archive=b"PK\x03\x04 this is not a zip archive" * 100)):
        code, (line,), _ = _fetch_here(tmp_path, capsys)
    assert code == 2
    assert "corrupt archive" in line and "tpu-getting-started.zip" in line and "run fetch again" in line
    assert not list(Path(tmp_path / "data.download").glob("*.zip"))
    assert not (tmp_path / "data").exists()


def test_missing_credentials_say_where_they_go(tmp_path, in_kaggle_env, capsys):
    (Path(in_kaggle_env["KAGGLE_CONFIG_DIR"]) / "kaggle.json").unlink()
    code, (line,), _ = _fetch_here(tmp_path, capsys)
    assert code == 2
    assert "needs Kaggle credentials" in line and "~/.kaggle/" in line and "KAGGLE_USERNAME" in line


def test_a_table_competition_downloads_with_its_zips_inside_unpacked(tmp_path, in_kaggle_env, capsys):
    """word2vec-nlp-tutorial's download, as the facts describe it: each table zipped again inside."""
    from competition import load_spec
    from pipeline.data import embedded

    files = tmp_path / "files"
    embedded.draw(load_spec("imdb"), files, size=0, seed=2, scale=0.01)
    download = tmp_path / "word2vec-nlp-tutorial.zip"
    with zipfile.ZipFile(download, "w") as zf:
        for file in sorted(files.iterdir()):
            zf.write(file, file.name)
    behaviour = Behaviour(archive=download.read_bytes())
    with KaggleTestServer(behaviour):
        code, _, printed = _fetch_here(tmp_path, capsys, "--competition", "imdb")
    assert code == 0, printed
    assert behaviour.requests[0]["json"] == {"competitionName": "word2vec-nlp-tutorial"}
    data = tmp_path / "data"
    assert sorted(p.name for p in data.iterdir()) == [
        "labeledTrainData.tsv", "manifest.json", "sampleSubmission.csv", "testData.tsv",
    ]  # fmt: skip
    manifest = json.loads((data / "manifest.json").read_text())
    assert manifest["source"] == "kaggle" and manifest["splits"] == {
        "train": {"rows": 20},
        "test": {"rows": 20},
    }
    assert not (tmp_path / "data.download").exists()
