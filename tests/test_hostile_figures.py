"""Names from a competition's files in the figures petals draws (pipeline/core/files.py's
`plain_text`, each report's plot): drawn as written, never parsed as TeX, and whole inside the
picture, a long one cut."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from pipeline.core.files import pyplot
from pipeline.runs.tensorboard import per_class_png
from pipeline.stages.train import curves_figure
from pipeline.tasks.inputs.image import image_grid
from pipeline.tasks.targets import regression_report, single_label_report
from tests.hostile import record

# Two dollar signs make matplotlib's mathtext parse what lies between: `\frac{x` stopped evaluate
# with a ParseSyntaxException, and `$5 to $10` drew "5 to" in italics.
TEX = ("a$\\frac{x$", "b$^$", "$5 to $10")


def _texts(fig) -> list:
    """The texts a figure draws (an axis turned off still holds empty tick labels)."""
    return [t for t in fig.findobj(lambda artist: hasattr(artist, "get_parse_math")) if t.get_text()]


def test_a_class_named_like_tex_is_drawn_as_written_in_the_confusion_plot(tmp_path):
    labels, predicted = np.array([0, 1, 2, 0, 1]), np.array([1, 1, 2, 0, 2])
    single_label_report.plot_confusion(labels, predicted, TEX, tmp_path / "confusion.png")
    with Image.open(tmp_path / "confusion.png") as plot:
        assert plot.size[0] > 100
    record(
        "class names: TeX in the figures",
        "classes.txt naming a class a$\\frac{x$ (and b$^$, $5 to $10)",
        "evaluate draws the names as written (it stopped on mathtext's parse error)",
        None,
        "the run's report",
    )


def test_columns_and_classes_named_like_tex_are_drawn_as_written_in_every_figure(tmp_path):
    true = np.random.default_rng(0).normal(size=(40, 3))
    regression_report.plot(true, true + 0.1, list(TEX), tmp_path / "regression.png")
    assert (tmp_path / "regression.png").stat().st_size > 1000
    table = pd.DataFrame({"class": TEX, "precision": [0.5] * 3, "recall": [0.4] * 3, "f1": [0.3] * 3})
    assert per_class_png(table).startswith(b"\x89PNG")
    grid = image_grid(np.zeros((3, 8, 8, 3)), list(TEX), "heading $x$ and $\\frac{")
    assert all(not text.get_parse_math() for text in _texts(grid)) and len(_texts(grid)) >= 4
    pyplot().close(grid)


def test_a_figure_drawn_plain_leaves_matplotlib_as_it_found_it():
    plt = pyplot()
    before = plt.rcParams["text.parse_math"]
    history = {"epoch": [1, 2], "loss": [1.0, 0.5], "accuracy": [0.5, 0.7], "val_macro_f1": [0.4, 0.6]}
    figure = curves_figure(pd.DataFrame(history))
    assert all(not text.get_parse_math() for text in _texts(figure))
    plt.close(figure)
    assert plt.rcParams["text.parse_math"] == before
    fig = plt.figure()
    assert fig.text(0, 0, "$x$").get_parse_math() is before  # a user's own figure, after petals'
    plt.close(fig)


@pytest.fixture(autouse=True)
def _closed():
    yield
    pyplot().close("all")


def test_the_confusion_plot_holds_every_name_whole_inside_it_and_cuts_a_long_one(tmp_path, monkeypatch):
    """Laid out by hand around the widest name: no label may fall off the picture's edge."""
    plt, kept = pyplot(), []
    monkeypatch.setattr(single_label_report, "save_figure", lambda fig, path, dpi: kept.append(fig))
    classes = ("rose", "x" * 300, "iris W" * 6)
    single_label_report.plot_confusion(np.array([0, 1, 2]), np.array([1, 1, 2]), classes, tmp_path / "c.png")
    fig = kept[0]
    fig.draw_without_rendering()  # where the axes' labels go is worked out as the figure is drawn
    renderer = fig.canvas.get_renderer()
    edge = fig.bbox
    names = [t for axis in fig.axes[:1] for t in axis.get_xticklabels() + axis.get_yticklabels()]
    assert len(names) == 6
    for label in [*names, fig.axes[0].title, fig.axes[0].xaxis.label, fig.axes[0].yaxis.label]:
        box = label.get_window_extent(renderer)
        assert edge.x0 <= box.x0 and box.x1 <= edge.x1 and edge.y0 <= box.y0 and box.y1 <= edge.y1, label
    assert "(260 more characters)" in names[1].get_text() and len(names[1].get_text()) < 70
    plt.close(fig)
