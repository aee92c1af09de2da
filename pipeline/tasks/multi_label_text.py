"""Multi-label text classification: one text in, any number of labels out (Jigsaw's comments, each
toxic, obscene, an insult... or none). Its recipes' TF-IDF candidate fits a logistic regression per
label (pipeline/modeling/head_fits.py), and small data's CV chooses between it and the recipe."""

from __future__ import annotations

from pipeline.tasks.base import register
from pipeline.tasks.inputs.text import TextInput
from pipeline.tasks.targets.multi_label import MultiLabel


@register
class MultiLabelTextClassification(MultiLabel, TextInput):
    name = "multi_label_text_classification"
