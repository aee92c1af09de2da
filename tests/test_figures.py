"""How petals saves a figure (pipeline/core/files.py's `save_figure`): drawn once, the same pixels
as matplotlib's own savefig."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
from PIL import Image

from pipeline.core.files import pyplot, save_figure
from pipeline.stages.train import curves_figure


def test_a_figure_laid_out_by_tight_layout_is_drawn_once_to_be_saved_and_the_same(tmp_path):
    """tight_layout leaves a placeholder layout engine on the figure, for which savefig drew the
    whole figure once more before drawing it (a sixth of the learning curves' CPU)."""
    plt = pyplot()
    history = {"epoch": [1, 2], "loss": [1.0, 0.5], "accuracy": [0.5, 0.7], "val_macro_f1": [0.4, 0.6]}
    pixels = []
    for save in ("matplotlib", "petals"):
        figure, draws = curves_figure(pd.DataFrame(history)), []
        drawing = figure.draw
        figure.draw = lambda renderer, drawing=drawing, draws=draws: draws.append(1) or drawing(renderer)
        if save == "matplotlib":
            buffer = io.BytesIO()
            figure.savefig(buffer, format="png", dpi=80)
            pixels.append(np.asarray(Image.open(buffer)))
            assert len(draws) == 2
            plt.close(figure)
        else:
            save_figure(figure, tmp_path / "curves.png", dpi=80)
            pixels.append(np.asarray(Image.open(tmp_path / "curves.png")))
            assert len(draws) == 1
    np.testing.assert_array_equal(pixels[0], pixels[1])
