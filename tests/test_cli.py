"""The command line and the Make chain, as a user meets them."""

import json
import os
import subprocess
import sys

import pytest

from pipeline import cli
from tests.conftest import REPO


def test_every_stage_answers_help_with_its_defaults(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--help"])
    assert exit_.value.code == 0
    assert "fetch" in capsys.readouterr().out
    for stage in cli.STAGES:
        with pytest.raises(SystemExit):
            cli.main([stage, "--help"])
        assert "(default:" in capsys.readouterr().out


def test_a_bad_argument_is_one_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["fetch", "--source", "ftp"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "invalid choice: 'ftp'" in err[0]


def test_an_unknown_slug_is_refused(capsys, tmp_path):
    assert cli.main(["fetch", "--slug", "tpu-getting-startd", "--data-dir", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "petals fetch: error: slug 'tpu-getting-startd' is not one of this competition's: "
        "tpu-getting-started, flower-classification-with-tpus"
    ]


@pytest.mark.slow
def test_make_fetch_then_train_build_their_artifacts_and_then_skip(tmp_path):
    """The Make chain, smoke-tested: each stage runs once, then finds its work done."""
    data = tmp_path / "data"
    venv = sys.prefix  # the virtualenv running the tests, which `make test` built
    args = [
        "make",
        "-C",
        str(REPO),
        f"VENV={venv}",
        f"DATA={data}",
        "SOURCE=synthetic",
        "SIZE=32",
        "SCALE=0.05",
    ]
    first = subprocess.run([*args, "fetch"], capture_output=True, text=True, timeout=300, check=False)
    assert first.returncode == 0, first.stderr
    manifest = json.loads((data / "manifest.json").read_text())
    assert manifest["source"] == "synthetic" and manifest["sizes"]["32"]["train"]["images"] > 100
    second = subprocess.run([*args, "fetch"], capture_output=True, text=True, timeout=300, check=False)
    assert second.returncode == 0 and "pipeline fetch" not in second.stdout
    # The next link: make train on that data, then again (the finished run is found, not redone).
    overrides = "data.image_size=32 data.batch_size=8 train.epochs=1 train.steps_per_epoch=2"
    train = [*args, "RECIPE=default", f"SET={overrides}", f"RUNS_DIR={tmp_path / 'runs'}", "train"]
    trained = subprocess.run(train, capture_output=True, text=True, timeout=300, check=False)
    assert trained.returncode == 0, trained.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert (run_dir / "metrics.json").is_file() and run_dir.name.startswith("default-cnn-32-")
    # The main job, `make train submit`: the finished run is evaluated, predicted and submitted,
    # which without Kaggle credentials ends in a validated dry run.
    home = tmp_path / "home"
    home.mkdir()
    no_credentials = {**os.environ, "HOME": str(home), "KAGGLE_CONFIG_DIR": str(home / "kaggle")}
    for name in ("KAGGLE_USERNAME", "KAGGLE_KEY", "KAGGLE_API_TOKEN", "KAGGLE_API_ENVIRONMENT"):
        no_credentials.pop(name, None)
    subs = tmp_path / "submissions"
    job = [*train[:-1], f"SUBMISSIONS={subs}", "train", "submit"]
    done = subprocess.run(job, capture_output=True, text=True, timeout=300, env=no_credentials, check=False)
    assert done.returncode == 0, done.stderr
    stages = [
        line.split("-m pipeline ")[1].split()[0]
        for line in done.stdout.splitlines()
        if "-m pipeline " in line
    ]
    assert stages == ["train", "evaluate", "predict", "submit"]
    assert "is finished" in done.stderr  # train found the run done, and did not train it again
    assert f"DRY RUN, NOT UPLOADED: would upload {subs / run_dir.name}.csv" in done.stdout
    assert "evaluation" in json.loads((run_dir / "metrics.json").read_text())
    assert run_dir.name in (subs / "leaderboard.csv").read_text()
