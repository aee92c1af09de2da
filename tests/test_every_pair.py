"""Every input with every target: a competition file names its task, or the input and target it
composes (`input = "text_pair"`, `target = "number"`), and a user's own folder of each of the twelve
pairs trains and submits from its competition file (an image_table's columns read for its test rows
from test.csv)."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from competition.task_names import INPUTS, TARGETS, task_name
from pipeline.core.errors import PetalsError
from pipeline.tasks import get_task
from pipeline.tasks.competitions import load_competition
from pipeline.tasks.composed import INPUT_PARTS, TARGET_PARTS

PAIRS = list(itertools.product(INPUTS, TARGETS))
COLOURS = ("red", "green", "blue")
WORDS = {"red": "apple cherry tomato", "green": "leaf grass lime", "blue": "sea sky ocean"}
# What each target writes: the metric, the label cells and the submission's value.
TARGET_KEYS = {
    "class": ('metric = "macro_f1"', 'labels_are = "names"', 'value = "class"'),
    "labels": ('metric = "mean_f1"', 'labels_are = "name_lists"', 'value = "labels"'),
    "number": ('metric = "rmse"', 'labels_are = "numbers"', 'value = "number"'),
}


@pytest.mark.parametrize(("input_", "target"), PAIRS)
def test_each_pair_is_one_task_of_exactly_its_two_parts(input_, target):
    task = get_task(task_name(input_, target))
    parts = type(task).__mro__
    assert parts[1] is TARGET_PARTS[target] and parts[2] is INPUT_PARTS[input_], parts
    assert task.modality == ("image" if input_.startswith("image") else "text")
    assert task.reads_columns == (input_ == "image_table")


def test_the_named_tasks_follow_the_rule_so_old_files_read_the_same():
    named = {
        ("image", "class"): "image_classification",
        ("text", "labels"): "multi_label_text_classification",
        ("text_pair", "class"): "text_pair_classification",
        ("image", "number"): "image_regression",
    }
    for pair, name in named.items():
        assert task_name(*pair) == name


def _competition_file(input_: str, target: str, train: int, test: int) -> str:
    metric, labels_are, value = TARGET_KEYS[target]
    names = 'name = "mine"\ntitle = "Mine"\nslugs = ["mine"]\n'
    head = f'{names}input = "{input_}"\ntarget = "{target}"\n{metric}\n'
    counts = f"[data.counts]\ntrain = {train}\ntest = {test}\n"
    submission = f'[submission]\nid_column = "id"\nlabel_column = "label"\n{value}\n'
    if input_.startswith("image"):
        table = (
            '[data.image_csv.test]\nfolder = "test"\ntable = "test.csv"\nid_column = "id"\n'
            if input_ == "image_table"
            else '[data.image_csv.test]\nfolder = "test"\n'
        )
        columns = 'feature_columns = ["size", "shade"]\n' if input_ == "image_table" else ""
        data = (
            '[data]\nformat = "image_csv"\nsplits = ["train", "test"]\nlabeled_splits = ["train"]\n'
            f'{columns}sample_submission = "sample_submission.csv"\n{counts}[data.image_csv.train]\n'
            f'folder = "train"\nlabels = "train.csv"\nid_column = "id"\nlabel_column = "label"\n'
            f"{labels_are}\n{table}"
        )
        keeps = '[augment]\nkeeps_label = ["flip", "rotation", "zoom", "shift", "brightness", "contrast"]\n'
    else:
        columns = '["text"]' if input_ == "text" else '["premise", "hypothesis"]'
        data = (
            '[data]\nformat = "table"\nsplits = ["train", "test"]\nlabeled_splits = ["train"]\n'
            f'sample_submission = "sample_submission.csv"\n{counts}[data.table]\nseparator = ","\n'
            f'id_column = "id"\ntext_columns = {columns}\nlabel_column = "label"\n{labels_are}\n'
            '[data.table.train]\nfile = "train.csv"\n[data.table.test]\nfile = "test.csv"\n'
        )
        keeps = "[augment]\nkeeps_label = []\n"
    return "\n".join((head, data, submission, keeps))


def _labels(rng, target: str, n: int):
    """Each row's colours (one, or one or two for labels), its label cell and a number from them."""
    first = rng.integers(0, 3, n)
    second = np.where(rng.random(n) < 0.5, (first + 1) % 3, first)
    if target == "class":
        return first, second * 0 + first, [COLOURS[c] for c in first]
    if target == "labels":
        return (
            first,
            second,
            [" ".join(sorted({COLOURS[a], COLOURS[b]})) for a, b in zip(first, second, strict=True)],
        )
    value = 10.0 * first + rng.normal(0, 0.5, n)
    return first, first, [f"{v:.3f}" for v in value]


def _write(folder, input_: str, target: str, train: int = 60, test: int = 6, seed: int = 0):
    """A user's own competition folder (its file, classes.txt, the data beside it)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    data = folder / "data"
    data.mkdir(parents=True)
    first, second, cells = _labels(rng, target, train + test)
    ids = [f"r{k:04d}" for k in range(train + test)]
    if input_.startswith("image"):
        for split, rows in (("train", range(train)), ("test", range(train, train + test))):
            (data / split).mkdir()
            for k in rows:
                pixels = rng.integers(0, 40, (32, 32, 3)).astype(np.uint8)  # each photo its own
                pixels[:, :16, first[k]] = 220  # the left half the first colour, the right the second
                pixels[:, 16:, second[k]] = 220
                Image.fromarray(pixels).save(data / split / f"{ids[k]}.jpg", quality=95)
        ids = [f"{i}.jpg" for i in ids]
        table = pd.DataFrame({"id": ids, "label": cells})
        if input_ == "image_table":  # two numbers a row: one says the second colour
            table["size"], table["shade"] = second * 1.5, rng.normal(0, 1, train + test).round(3)
        table[:train].to_csv(data / "train.csv", index=False)
        if input_ == "image_table":
            table[train:].drop(columns="label").to_csv(data / "test.csv", index=False)
    else:
        texts = [f"{WORDS[COLOURS[a]]} and {WORDS[COLOURS[b]]}" for a, b in zip(first, second, strict=True)]
        columns = {"text": texts} if input_ == "text" else {"premise": texts, "hypothesis": texts[::-1]}
        table = pd.DataFrame({"id": ids, **columns, "label": cells})
        table[:train].to_csv(data / "train.csv", index=False)
        table[train:].drop(columns="label").to_csv(data / "test.csv", index=False)
    pd.DataFrame({"id": ids[train:], "label": cells[train]}).to_csv(
        data / "sample_submission.csv", index=False
    )
    toml = folder / "mine" / "competition.toml"
    toml.parent.mkdir()
    toml.write_text(_competition_file(input_, target, train, test))
    if target != "number":
        (toml.parent / "classes.txt").write_text("\n".join(COLOURS) + "\n")
    return toml, data


def test_a_file_naming_both_a_task_and_a_pair_or_an_unknown_input_is_one_line(tmp_path):
    toml, _ = _write(tmp_path, "text", "class", train=20, test=2)
    text = toml.read_text()
    toml.write_text(text.replace('input = "text"', 'task = "text_classification"\ninput = "text"'))
    with pytest.raises(PetalsError, match=r"competition\.toml: names a task and input and target"):
        load_competition(str(toml))
    toml.write_text(text.replace('input = "text"', 'input = "audio"'))
    with pytest.raises(
        PetalsError, match=r"input 'audio' and target 'class': inputs are image, text, text_pair, image_table"
    ):
        load_competition(str(toml))


@pytest.mark.slow
@pytest.mark.thorough
@pytest.mark.parametrize(("input_", "target"), PAIRS)
def test_a_users_folder_of_each_pair_trains_and_submits_from_its_file(cpu, tmp_path, input_, target):
    from pipeline import api
    from pipeline.stages.fetch import FetchOptions, fetch

    toml, download = _write(tmp_path, input_, target)
    competition = load_competition(str(toml))
    assert competition.task.name == task_name(input_, target)
    data_dir = tmp_path / "data-mine"
    fetch(FetchOptions(source="dir", data_from=download, data_dir=data_dir, progress=False), competition.spec)
    sizes = (
        ("model.backbone=cnn", "data.image_size=32")
        if input_.startswith("image")
        else ("data.sequence_length=16",)
    )
    overrides = (f"competition={toml}", *sizes, "train.epochs=1", "data.batch_size=16")
    overrides += ("train.choose_up_to=0",)  # the recipe itself, not small data's CV choice
    recipe = "default" if input_.startswith("image") else "cpu"  # config defaults: a cnn from scratch
    where = {"runs_dir": tmp_path / "runs", "strategy": "cpu", "recipe": recipe}
    api.train(api.TrainOptions(data_dir=data_dir, overrides=overrides, progress=False, **where))
    scored = api.ScoreOptions(data_dir=data_dir, overrides=overrides, submissions_dir=tmp_path / "s", **where)
    api.evaluate(scored)
    written = pd.read_csv(api.predict(scored), dtype=str, keep_default_na=False)
    assert list(written.columns) == ["id", "label"] and len(written) == 6


@pytest.mark.slow
@pytest.mark.thorough  # Keras on JAX in a fresh process: ~30 s each on this CPU
@pytest.mark.parametrize("case", ["image_table", "several_numbers"])
def test_the_image_and_columns_input_and_several_numbers_train_on_jax(tmp_path, case):
    # The two-input network (image + a row's columns) and the head of several numbers with its
    # MCRMSE metric run through JAX's loop too, not only TensorFlow's.
    import json

    from competition import load_spec
    from pipeline.stages.fetch import FetchOptions, fetch
    from tests.conftest import run_cli

    data_dir, runs = tmp_path / "data-mine", tmp_path / "runs"
    if case == "image_table":
        toml, download = _write(tmp_path, "image_table", "number")
        spec = load_competition(str(toml)).spec
        fetch(FetchOptions(source="dir", data_from=download, data_dir=data_dir, progress=False), spec)
        sets = [f"competition={toml}", "model.backbone=cnn", "data.image_size=32", "data.batch_size=16"]
        recipe = "default"
    else:
        spec = load_spec("feedback-prize-ell")
        fetch(FetchOptions(source="synthetic", data_dir=data_dir, scale=0.2, progress=False), spec)
        sets = ["competition=feedback-prize-ell", "data.sequence_length=16", "data.batch_size=16"]
        recipe = "cpu"
    sets += ["train.epochs=1", "train.choose_up_to=0"]
    args = ["train", "--data-dir", str(data_dir), "--runs-dir", str(runs), "--recipe", recipe]
    done = run_cli(*args, "--backend", "jax", *(x for s in sets for x in ("--set", s)), timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "backend jax" in done.stdout + done.stderr  # the device line: JAX's loop trained it
    (metrics_file,) = runs.glob("*/metrics.json")
    metrics = json.loads(metrics_file.read_text())
    assert np.isfinite(metrics[spec.score_key]) and metrics[spec.score_key] > 0
