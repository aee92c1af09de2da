"""Text classification: one text in, one class out (IMDB reviews); and its sibling, text pairs in,
one class out (premise and hypothesis: natural-language inference, Watson)."""

from __future__ import annotations

from pipeline.tasks.base import register
from pipeline.tasks.inputs.text import TextInput, TextPairInput
from pipeline.tasks.targets.single_label import SingleLabel


@register
class TextClassification(SingleLabel, TextInput):
    name = "text_classification"


@register
class TextPairClassification(SingleLabel, TextPairInput):
    name = "text_pair_classification"
