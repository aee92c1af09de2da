"""The command line and the Make chain, as a user meets them."""

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys

import pytest

from pipeline import cli
from pipeline.core import options
from pipeline.core.config import DEFAULT_COMPETITION
from pipeline.tasks import recipe_config
from tests.conftest import REPO, foreign_lines, tensorboard_events


def test_every_stage_answers_help_with_each_default_once_and_true(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--help"])
    assert exit_.value.code == 0
    assert "fetch" in capsys.readouterr().out
    parser = cli.build_parser()
    stages = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for stage in cli.STAGES:
        with pytest.raises(SystemExit):
            cli.main([stage, "--help"])
        out = capsys.readouterr().out
        text = " ".join(out[out.index("\noptions:") :].split())  # argparse wraps lines anywhere
        assert "(default:" in text
        for action in stages.choices[stage]._actions:
            if not action.option_strings or action.help is None:
                continue
            option = action.option_strings[-1]
            # The option's own block: from its name to the next option's.
            block = re.split(rf" {re.escape(option)}(?![\w-])", text, maxsplit=1)[1].split(" --", 1)[0]
            assert block.count("(default:") <= 1, f"{stage} {option}: {block}"
            if action.nargs == 0:  # a flag: on or off is the flag, no default to show
                assert "(default:" not in block, f"{stage} {option}: {block}"
            elif "default" not in action.help and "(default: " in block:  # the formatter's
                value = block.split("(default: ", 1)[1].rsplit(")", 1)[0]
                assert value == str(action.default), f"{stage} {option}: shows {value}, is {action.default}"


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
@pytest.mark.heavy  # a whole chain (`make test-heavy`)
def test_make_fetch_then_the_main_job_end_in_a_checked_dry_run(tmp_path):
    """The Make chain, smoke-tested: fetch runs once, then Make finds it done; `make train submit`
    runs every stage between and ends in the dry run and the closing summary."""
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
    # The main job, `make train submit`, on that data: trained, evaluated, predicted and submitted,
    # which without Kaggle credentials ends in a validated dry run. (A rerun finding the run
    # finished is tested in-process: test_a_run_directory_holds_everything_and_reruns_are_no_ops.)
    overrides = "data.image_size=32 data.batch_size=8 train.epochs=1 train.steps_per_epoch=2"
    home = tmp_path / "home"
    home.mkdir()
    no_credentials = {**os.environ, "HOME": str(home), "KAGGLE_CONFIG_DIR": str(home / "kaggle")}
    for name in ("KAGGLE_USERNAME", "KAGGLE_KEY", "KAGGLE_API_TOKEN", "KAGGLE_API_ENVIRONMENT"):
        no_credentials.pop(name, None)
    subs = tmp_path / "submissions"
    job = [
        *args,
        "RECIPE=default",
        f"SET={overrides}",
        f"RUNS_DIR={tmp_path / 'runs'}",
        f"SUBMISSIONS={subs}",
    ]
    done = subprocess.run(
        [*job, "train", "submit"],
        capture_output=True,
        text=True,
        timeout=300,
        env=no_credentials,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    stages = [
        line.split("-m pipeline ")[1].split()[0]
        for line in done.stdout.splitlines()
        if "-m pipeline " in line
    ]
    assert stages == ["train", "evaluate,predict", "submit"]  # evaluate and predict: one engine start
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert (run_dir / "metrics.json").is_file() and run_dir.name.startswith("default-cnn-32-")
    events = tensorboard_events(run_dir / "tensorboard" / "run")  # the main job's, as TensorBoard reads them
    assert [step for step, _ in events["train/loss"]] == [1] and "evaluate/confusion_matrix" in events
    assert f"DRY RUN, NOT UPLOADED: would upload {subs / run_dir.name}.csv" in done.stdout
    summary = done.stdout.split("petals: done.\n", 1)[1]
    assert f"  run      {tmp_path / 'runs' / run_dir.name}\n" in summary and "  next     " in summary
    # Make's own echo, the dry run's and the summary's indented lines aside, every line is petals'.
    lines = (done.stdout + done.stderr).splitlines()
    shown = [
        line
        for line in lines
        if " -m pipeline " not in line and not line.startswith(("DRY RUN", "  ", "make"))
    ]
    assert foreign_lines("\n".join(shown)) == []
    assert "evaluation" in json.loads((run_dir / "metrics.json").read_text())
    assert run_dir.name in (subs / f"leaderboard-{DEFAULT_COMPETITION}.csv").read_text()


@pytest.mark.slow  # Make's stage process picks the device (TensorFlow's start-up)
@pytest.mark.thorough  # Make's values reach the CLI as typed: test_make_passes_what_the_user_typed (below)
def test_make_and_the_cli_resolve_the_same_recipe_here(cpu):
    """`make config` (what `make train` runs) prints what the stage's own default resolves on
    this machine: one default, `recipe=auto` resolved once for the device."""
    make = subprocess.run(
        ["make", "-s", "-C", str(REPO), f"VENV={sys.prefix}", "SET=seed=3", "config"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert make.returncode == 0, make.stderr
    parser = cli.build_parser(only="train")
    # the CLI's defaults, nothing else (Make names the competition, the default one here)
    args = parser.parse_args(["train", "--set", f"competition={DEFAULT_COMPETITION}", "--set", "seed=3"])
    assert make.stdout == recipe_config.describe(args.recipe, args.overrides, cpu.device) + "\n"
    assert make.stdout.startswith(
        "# recipe auto -> cpu (the CPU recipe): competition/flowers/recipes/cpu.toml\n"
    )
    assert "seed = 3" in make.stdout and "# --set" in make.stdout


def test_print_config_names_each_values_source_and_reads_back_as_a_recipe(tmp_path):
    text = recipe_config.describe("auto", ["train.epochs=3"], device="CPU")
    lines = {line.split("=")[0].strip(): line for line in text.splitlines() if "=" in line}
    assert lines["epochs"].endswith("# --set")
    assert lines["feature_cache"].endswith("# recipe cpu")  # set by competition/flowers/recipes/cpu.toml
    assert lines["hue"].endswith("# default")
    saved = tmp_path / "mine.toml"
    saved.write_text(text)
    again = recipe_config.load_config(str(saved))
    assert recipe_config.describe(str(saved)).startswith(f"# recipe mine: {saved}\n")
    assert dataclasses.replace(again, recipe="cpu") == recipe_config.load_config(
        "auto", ["train.epochs=3"], "CPU"
    )


def test_a_kernel_resolves_auto_for_its_accelerator():
    from pipeline.core.options import KernelOptions
    from pipeline.kernels.client import generate

    for accelerator, recipe in (("TpuV5E8", "tpu"), ("NvidiaTeslaT4", "gpu"), ("None", "cpu")):
        assert generate.kernel_recipe(KernelOptions(accelerator=accelerator)) == recipe


# Knobs Make itself needs a value of: the files it tracks (DATA names the manifest, INSPECT_DIR
# batch.png, ARGS_DIR the .args), what DATA's name is made of, the folders `make tensorboard` and
# the benches read, and the number of local processes `hosts_PY` branches on.
MAKE_OWN_DEFAULTS = {
    "COMPETITION": DEFAULT_COMPETITION,
    "RUNS_DIR": str(options.RUNS_DIR),
    "SUBMISSIONS": str(options.SUBMISSIONS_DIR),
    "DATA": "data-$(competition_name)",
    "INSPECT_DIR": f"{options.RUNS_DIR}/inspect-$(competition_name)",
    "ARGS_DIR": ".make",
    "HOSTS": "1",
    "TEST_WORKERS": "3",  # pytest's, not a stage's
    "HEAVY_WORKERS": "2",  # pytest's too
    "BENCH_EPOCHS": "0",  # a bench's, not a stage's
}


def test_make_passes_what_the_user_typed_and_each_default_lives_in_python():
    """A knob with a default in pipeline/core/options.py is empty in the Makefile and passed only
    when typed, so changing a default is one edit; the few Make needs itself equal Python's."""
    defaults = {}
    for line in (REPO / "Makefile").read_text().splitlines():
        match = re.match(r"^([A-Z_]+)\s*\?=([^#]*)#", line)
        if match:
            defaults[match.group(1)] = match.group(2).strip()
    assert "SOURCE" in defaults and "TTA" in defaults  # the pattern still reads the knob lines
    set_in_make = {name: value for name, value in defaults.items() if value}
    assert set_in_make == MAKE_OWN_DEFAULTS
