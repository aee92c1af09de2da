"""docs/quickstart.md runs as written: each job's competition file, class list and commands are
taken from the page itself, tiny data is written in the layout its tree shows, and the commands
run from an empty home folder (no credentials: the submission is a checked dry run).

The page's files are what is tested, so a wrong key or a layout the file does not read fails
here. The test changes only what makes a run tiny: the counts (to the tiny data's), the make
knobs that keep every file in the test's folder, and SET's epochs and sizes (small data's CV choice
off: it trains five folds of each candidate)."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "quickstart.md"
JOBS = {  # section heading -> the folder its files name (~/<folder>/)
    "Images with a label CSV": "my-leaves",
    "Texts in a CSV": "my-reviews",
    "A folder of images, one subfolder per class": "my-pets",
}
TRAIN, TEST = 30, 6  # tiny: a few batches; 10 of a class, as a val split of one in 10 needs
TINY = (
    "data.image_size=32 data.batch_size=8 data.sequence_length=32 train.epochs=1 "
    "train.steps_per_epoch=2 train.min_steps_per_epoch=1 train.choose_up_to=0"
)


def sections(text: str) -> dict[str, str]:
    """The page's `## ` sections by heading."""
    parts = re.split(r"^## (.+)$", text, flags=re.MULTILINE)
    return {heading.strip(): body for heading, body in zip(parts[1::2], parts[2::2], strict=True)}


def fences(body: str) -> list[tuple[str, str, str]]:
    """(language, the line before the fence, its text) of each fenced block."""
    found = re.findall(r"([^\n]*)\n+```(\w*)\n(.*?)^```", body, flags=re.MULTILINE | re.DOTALL)
    return [(language, before.strip(), text) for before, language, text in found]


def files_of(body: str) -> dict[str, str]:
    """The files a section shows: a fence right after a line "`~/folder/name`:"."""
    shown = {}
    for _, before, text in fences(body):
        named = re.fullmatch(r"`(~/[^`]+)`:", before)
        if named:
            shown[named.group(1)] = text
    return shown


def commands_of(body: str) -> str:
    (script,) = [text for language, _, text in fences(body) if language == "bash"]
    return script


def with_tiny_counts(toml: str) -> str:
    """The competition file with `[data.counts]` set to the tiny data's: the only key changed."""
    table = re.search(r"^\[data\.counts\][^\n]*\n(.*?)(?=^\[)", toml, flags=re.MULTILINE | re.DOTALL)
    assert table, "the competition file has no [data.counts]"
    counts = re.sub(r"^train = \d+", f"train = {TRAIN}", table.group(1), flags=re.MULTILINE)
    counts = re.sub(r"^test = \d+", f"test = {TEST}", counts, flags=re.MULTILINE)
    return toml[: table.start(1)] + counts + toml[table.end(1) :]


def jpeg(path: Path, shade: int, rng: np.random.Generator) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.full((32, 32, 3), 40, np.uint8)
    pixels[..., shade % 3] = 200
    pixels += rng.integers(0, 40, pixels.shape, dtype=np.uint8)
    Image.fromarray(pixels).save(path, quality=90)


def leaves(data: Path, classes: list[str], rng: np.random.Generator) -> None:
    """train_images/ beside train.csv (labels by name), test_images/: the tree on the page."""
    rows = [("image_id", "label")]
    for i in range(TRAIN):
        jpeg(data / "train_images" / f"leaf{i}.jpg", i, rng)
        rows.append((f"leaf{i}.jpg", classes[i % len(classes)]))
    write_csv(data / "train.csv", rows)
    for i in range(TEST):
        jpeg(data / "test_images" / f"new{i}.jpg", i, rng)


def reviews(data: Path, classes: list[str], rng: np.random.Generator) -> None:
    """train.csv (id,text,label: class ids) and test.csv (id,text)."""
    words = [["dull", "poor", "boring, slow"], ["great", "lovely", 'a "fine" film']]
    train = [("id", "text", "label")]
    for i in range(TRAIN):
        label = i % len(classes)
        train.append((f"r{i}", f"{rng.choice(words[label])} film, {i}", str(label)))
    write_csv(data / "train.csv", train)
    test = [(f"t{i}", f"a {words[i % 2][0]} one") for i in range(TEST)]
    write_csv(data / "test.csv", [("id", "text"), *test])


def pets(data: Path, classes: list[str], rng: np.random.Generator) -> None:
    """train/<class>/*.jpg and test/*.jpg."""
    for i in range(TRAIN):
        jpeg(data / "train" / classes[i % len(classes)] / f"img_{i}.jpg", i, rng)
    for i in range(TEST):
        jpeg(data / "test" / f"{100 + i}.jpg", i, rng)


WRITE_DATA = {"my-leaves": leaves, "my-reviews": reviews, "my-pets": pets}
TEST_IDS = {  # the submission's ids, as each layout names its test rows
    "my-leaves": [f"new{i}.jpg" for i in range(TEST)],
    "my-reviews": [f"t{i}" for i in range(TEST)],
    "my-pets": [str(100 + i) for i in range(TEST)],
}


def write_csv(path: Path, rows: list[tuple[str, ...]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        csv.writer(f).writerows(rows)


def shown_files(heading: str) -> tuple[str, dict[str, str], str]:
    body = sections(PAGE.read_text())[heading]
    folder = JOBS[heading]
    files = files_of(body)
    assert set(files) == {f"~/{folder}/competition.toml", f"~/{folder}/classes.txt"}, heading
    return folder, files, commands_of(body)


def set_up(home: Path, heading: str) -> tuple[str, str]:
    """The page's files written under `home`, with tiny data: (the folder, the commands)."""
    folder, files, commands = shown_files(heading)
    for name, text in files.items():
        path = home / name.removeprefix("~/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(with_tiny_counts(text) if name.endswith(".toml") else text)
    classes = files[f"~/{folder}/classes.txt"].split()
    WRITE_DATA[folder](home / folder / "data", classes, np.random.default_rng(0))
    return folder, commands


@pytest.mark.parametrize("heading", list(JOBS))
def test_each_quick_start_file_reads_the_layout_its_page_shows(heading, tmp_path):
    """The default tier's check of the page's files: fetch takes in and verifies tiny data laid out
    as the page's tree shows, read by the page's competition file (the sample submission written
    here, as the page's first command would)."""
    from pipeline import cli

    folder, _ = set_up(tmp_path, heading)
    data = tmp_path / folder / "data"
    spec_file = tmp_path / folder / "competition.toml"
    id_column = tomllib.loads(spec_file.read_text())["submission"]["id_column"]
    write_csv(data / "sample_submission.csv", [(id_column, "label")] + [(i, "0") for i in TEST_IDS[folder]])
    fetched = tmp_path / "fetched"
    argv = ["fetch", "--source", "dir", "--from", str(data), "--data-dir", str(fetched)]
    assert cli.main([*argv, "--competition", str(spec_file)]) == 0
    manifest = json.loads((fetched / "manifest.json").read_text())
    assert manifest["source"] == "dir" and manifest["competition"] == folder


@pytest.mark.parametrize("heading", list(JOBS))
def test_each_quick_start_file_takes_its_tasks_cpu_gpu_and_tpu_recipes(heading, tmp_path):
    """The transforms a file keeps cover what each device's recipe turns on (one line otherwise)."""
    from pipeline.tasks import recipe_config

    folder, _ = set_up(tmp_path, heading)
    competition = f"competition={tmp_path / folder / 'competition.toml'}"
    for recipe in ("cpu", "gpu", "tpu"):
        assert recipe_config.load_config(recipe, (competition,), recipe.upper()).recipe == recipe


@pytest.mark.slow
@pytest.mark.heavy  # the whole chain through make: fetch, train, evaluate and predict, submit
@pytest.mark.parametrize("heading", list(JOBS))
def test_each_quick_start_runs_from_an_empty_folder(heading, tmp_path):
    home = tmp_path / "home"
    folder, commands = set_up(home, heading)
    (home / "petals").symlink_to(ROOT)  # `cd ~/petals`: the checkout
    work = tmp_path / "work"
    knobs = [
        f"VENV={sys.prefix}",
        f"DATA={work / 'data'}",
        f"RUNS_DIR={work / 'runs'}",
        f"SUBMISSIONS={work / 'submissions'}",
        f"ARGS_DIR={work / 'make'}",
        f"SET={TINY}",
    ]
    quoted = " ".join(f"'{knob}'" for knob in knobs)
    script = f'set -e\nmake() {{ command make -C "{ROOT}" "$@" {quoted}; }}\ncd\n{commands}'
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAGGLE_")}
    env.update(HOME=str(home), KAGGLE_CONFIG_DIR=str(home / ".kaggle"))
    done = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, timeout=300, env=env, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (submission,) = [p for p in (work / "submissions").glob("*.csv") if not p.name.startswith("leaderboard")]
    assert len(submission.read_text().splitlines()) == TEST + 1
    summary = done.stdout.split("petals: done.\n", 1)[1]
    assert "NOT UPLOADED (dry run)" in summary
    assert f"COMPETITION={home / folder / 'competition.toml'}" in summary  # the next step names the file
