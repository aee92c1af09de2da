"""Text regression: one text in, one number out (CommonLit's readability of an excerpt). A text
task (its networks, `make inspect` table and mistakes table) whose target is a number
(regression.py)."""

from __future__ import annotations

from pathlib import Path

from pipeline.tasks.base import RECIPES_DIR, register
from pipeline.tasks.regression import Regression
from pipeline.tasks.text_classification import TextClassification


@register
class TextRegression(Regression, TextClassification):
    name = "text_regression"

    @property
    def recipes_dir(self) -> Path:
        """The text classification recipes: a text network and its schedule serve a number too."""
        return RECIPES_DIR / TextClassification.name
