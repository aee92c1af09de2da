"""Multi-label text classification: one text in, any number of labels out (Jigsaw's comments, each
toxic, obscene, an insult... or none). Its recipes' TF-IDF candidate, a softmax fitted once, is left
out of small data's CV choice (pipeline/modeling/probe.py's check)."""

from __future__ import annotations

from pipeline.tasks.base import register
from pipeline.tasks.inputs.text import TextInput
from pipeline.tasks.targets.multi_label import MultiLabel


@register
class MultiLabelTextClassification(MultiLabel, TextInput):
    name = "multi_label_text_classification"
