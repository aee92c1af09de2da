"""What evaluate shows of the predictions a run gets most confidently wrong (pipeline/tasks/mistakes.py):
which rows, in which order, the images read back by id, the texts' table made safe, the grid drawn."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from competition import load_spec
from pipeline.data import splits
from pipeline.data.manifest import locate_data
from pipeline.data.readers.files import FileSplit
from pipeline.formats.base import Examples
from pipeline.tasks import mistakes
from pipeline.tasks.competitions import task_of
from pipeline.tasks.inputs.image import image_grid
from pipeline.tasks.recipe_config import load_config
from pipeline.tasks.targets import multi_label_report, single_label_report
from tests.conftest import TINY

CLASSES = ("rose", "tulip", "iris")


def test_one_class_an_example_ranks_the_wrong_rows_by_the_probability_of_the_wrong_answer():
    labels = np.array([0, 1, 2, 0])
    probabilities = np.array([[0.9, 0.05, 0.05], [0.6, 0.3, 0.1], [0.1, 0.05, 0.85], [0.1, 0.2, 0.7]])
    wrong = single_label_report.mistakes(labels, probabilities, CLASSES)
    assert wrong["row"].tolist() == [3, 1]  # 0.7 on iris before 0.6 on rose; rows 0 and 2 are right
    assert wrong["true"].tolist() == ["rose", "tulip"] and wrong["predicted"].tolist() == ["iris", "rose"]
    assert wrong["probability"].tolist() == [0.7, 0.6]


def test_several_labels_a_row_is_wrong_where_its_decision_differs_ranked_by_its_worst_label():
    truth = np.array([[1, 0, 0], [0, 1, 0], [1, 0, 0], [0, 0, 1], [1, 0, 0], [0, 1, 0]] * 3)
    probabilities = truth * 0.9 + 0.05
    probabilities[1] = [0.97, 0.02, 0.05]  # a tulip decided rose, sure of both
    probabilities[3] = [0.05, 0.6, 0.04]  # an iris decided tulip: a milder error
    wrong = multi_label_report.mistakes(truth, probabilities, CLASSES)
    assert wrong["row"].tolist() == [1, 3]
    assert wrong["true"].tolist() == ["tulip", "iris"]
    assert wrong["predicted"].tolist() == ["rose", "tulip"]
    assert wrong["error"].tolist() == [0.98, 0.96]  # the largest |p - truth| over the row's labels


def test_nothing_wrong_writes_nothing_and_says_so(tmp_path):
    entry = {"wrong": 0, "of": 12, "shown": 0, "file": None}
    assert mistakes.summary_line(entry) == ["  mistakes: none of 12 rows is wrong"]
    assert mistakes.summary_line(None) == []


def test_captions_escape_and_cut_foreign_class_names_and_the_grid_draws_them_as_plain_text(tmp_path):
    from pipeline.core.files import save_figure

    names = {"true": ["\x1b[31mred" + "x" * 80], "predicted": ["$\\frac{1}{0$"]}
    shown = pd.DataFrame({"id": ["a"], **names, "probability": [0.91]})
    (caption,) = mistakes.captions(shown)
    assert "\x1b" not in caption and "\\x1b[31mred" in caption and "more characters" in caption
    assert caption.splitlines()[1:] == ["predicted: $\\frac{1}{0$", "probability 0.91"]
    # A `$` pair is a formula to matplotlib (a broken one fails the save): titles are drawn plain.
    figure = image_grid(np.zeros((1, 8, 8, 3)), [caption], "heading $x$")
    save_figure(figure, tmp_path / "grid.png", dpi=40)
    assert (tmp_path / "grid.png").stat().st_size > 0


def test_a_texts_mistakes_are_a_table_of_cut_escaped_texts_no_cell_of_which_is_a_formula(tmp_path):
    spec = load_spec("imdb")
    texts = np.array(['=HYPERLINK("http://x")', "fine \x1b]0;title\x07 text " + "w" * 500, "unused"])
    examples = Examples(ids=np.array(["r1", "r2", "r3"]), inputs=(texts,), labels=np.array([0, 1, 1]))
    split = FileSplit(examples, spec)
    shown = pd.DataFrame(
        {"id": ["r2", "r1"], "true": ["+positive", "negative"], "predicted": ["negative", "positive"],
         "probability": [0.99, 0.8]}
    )  # fmt: skip
    path = task_of(spec).show_mistakes(split, shown, None, tmp_path)
    table = pd.read_csv(path, keep_default_na=False)
    assert table["id"].tolist() == ["r2", "r1"]  # each row beside its own text, in the order shown
    assert table["text"][1] == '\'=HYPERLINK("http://x")' and table["true"][0] == "'+positive"
    assert "\x1b" not in table["text"][0] and "\\x1b]0;title\\x07" in table["text"][0]
    assert len(table["text"][0]) < mistakes.TEXT + 40 and table["text"][0].endswith("more characters)")


def test_images_are_read_back_by_id_in_the_order_asked_and_downscaled(tiny_data_dir, spec, monkeypatch):
    config = load_config(overrides=TINY)
    root = locate_data(tiny_data_dir)
    val = splits.train_and_val(root, spec, config)[1]
    everything = {}
    for images, _, keys in val.eval_dataset(config, 64, labeled=True, with_ids=True).as_numpy_iterator():
        everything.update(zip((k.decode() for k in keys), images, strict=True))
    ids = np.array(sorted(everything)[::-7][:6])  # a few, out of the shards' order
    labels = np.zeros(len(ids), np.int64)
    again = splits.shown_again(root, spec, config, ids, labels)
    images = mistakes.images_by_id(again, config, ids)
    np.testing.assert_array_equal(images, np.stack([everything[i] for i in ids]))
    monkeypatch.setattr(mistakes, "THUMBNAIL", 16)
    assert mistakes.images_by_id(again, config, ids).shape == (6, 16, 16, 3)


@pytest.mark.parametrize("n", [0, 3])
def test_the_grid_holds_at_most_max_images(tmp_path, n, monkeypatch):
    """`write` keeps MAX_IMAGES rows of the task's table; the grid draws what it is given."""
    spec = load_spec("flowers")
    labels = np.arange(60) % 3
    probabilities = np.full((60, spec.num_classes), 0.001)
    probabilities[np.arange(60), (labels + 1) % 3] = 0.9  # every row wrong
    drawn = {}

    def show(split, shown, config, folder):
        drawn["rows"] = len(shown)
        return folder / "mistakes.png"

    monkeypatch.setattr(mistakes, "MAX_IMAGES", 36 if n == 0 else n)
    monkeypatch.setattr(splits, "shown_again", lambda *args: None)
    monkeypatch.setattr(type(task_of(spec)), "show_mistakes", lambda self, *args: show(*args))
    monkeypatch.setattr("pipeline.data.manifest.locate_data", lambda data_dir: str(data_dir))

    class Val:
        ids = np.array([f"id{i}" for i in range(60)])

    Val.labels, Val.probabilities = labels, probabilities
    entry = mistakes.write(tmp_path, tmp_path, None, spec, Val)
    assert drawn["rows"] == entry["shown"] == (36 if n == 0 else n) and entry["wrong"] == 60


def test_the_grid_pastes_each_image_whole_and_centred_in_its_square_under_its_title():
    """One picture holds every image at its own pixels (matplotlib draws one image, not an axes
    each), a wide one centred in its square; each title is a plain text of the figure."""
    from pipeline.tasks.inputs.image import CELL, GAP, HEADING, TITLE_LINE

    wide = np.zeros((3, 8, 16, 3))
    for k in range(3):
        wide[k, ..., k] = 255.0  # red, green, blue
    figure = image_grid(wide, ["a", "b", "c $x$"], "heading", cols=2)
    (axes,) = figure.axes
    picture = np.asarray(axes.images[0].get_array())
    per_inch = 16 / CELL  # the picture's pixels an inch: the widest side fills its square
    band = TITLE_LINE + 0.1  # one line of title above each image
    for k in range(3):
        rows, cols = np.nonzero(np.all(picture == 255 * np.eye(3)[k], axis=-1))
        assert (len(set(rows)), len(set(cols)), len(rows)) == (8, 16, 128)  # whole, once, unscaled
        row, col = divmod(k, 2)
        middle = (
            (HEADING + row * (band + CELL) + band + CELL / 2) * per_inch,
            (GAP / 2 + col * (CELL + GAP) + CELL / 2) * per_inch,
        )
        assert abs(rows.mean() + 0.5 - middle[0]) <= 1 and abs(cols.mean() + 0.5 - middle[1]) <= 1
    assert np.all(picture[0] == 255)  # the heading's band: white
    assert [t.get_text() for t in figure.texts] == ["a", "b", "c $x$", "heading"]
    assert not any(t.get_parse_math() for t in figure.texts)
