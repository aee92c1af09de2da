"""Multi-label image classification: one photo in, any number of labels out (Plant Pathology
2021's leaves, each with its diseases). An image task (its networks, views and `make inspect`
batch) whose label is several (multi_label.py)."""

from __future__ import annotations

from pathlib import Path

from pipeline.tasks.base import RECIPES_DIR, register
from pipeline.tasks.image_classification import ImageClassification
from pipeline.tasks.multi_label import MultiLabel


@register
class MultiLabelImageClassification(MultiLabel, ImageClassification):
    name = "multi_label_image_classification"

    @property
    def recipes_dir(self) -> Path:
        """The image classification recipes: a backbone and its schedule do not depend on how
        many labels a photo has."""
        return RECIPES_DIR / ImageClassification.name
