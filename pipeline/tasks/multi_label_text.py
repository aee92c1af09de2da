"""Multi-label text classification: one text in, any number of labels out (Jigsaw's comments, each
toxic, obscene, an insult... or none). A text task (its networks, `make inspect` table and
mistakes) whose label is several (multi_label.py): sigmoid outputs, thresholds chosen out of fold."""

from __future__ import annotations

from pathlib import Path

from pipeline.tasks.base import RECIPES_DIR, register
from pipeline.tasks.multi_label import MultiLabel
from pipeline.tasks.text_classification import TextClassification


@register
class MultiLabelTextClassification(MultiLabel, TextClassification):
    name = "multi_label_text_classification"

    @property
    def recipes_dir(self) -> Path:
        """The text classification recipes: a network and its schedule do not depend on how many
        labels a text has (their TF-IDF candidate, a softmax fitted once, is left out: probe.check)."""
        return RECIPES_DIR / TextClassification.name
