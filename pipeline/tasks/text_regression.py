"""Text regression: one text in, one number out (CommonLit's readability of an excerpt)."""

from __future__ import annotations

from pipeline.tasks.base import register
from pipeline.tasks.inputs.text import TextInput
from pipeline.tasks.targets.regression import Regression


@register
class TextRegression(Regression, TextInput):
    name = "text_regression"
