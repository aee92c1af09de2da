"""Image regression: one photo in, one number out (PetFinder's Pawpularity). An image task (its
networks, views and `make inspect` batch) whose target is a number (regression.py)."""

from __future__ import annotations

from pathlib import Path

from pipeline.tasks.base import RECIPES_DIR, register
from pipeline.tasks.image_classification import ImageClassification
from pipeline.tasks.regression import Regression


@register
class ImageRegression(Regression, ImageClassification):
    name = "image_regression"

    @property
    def recipes_dir(self) -> Path:
        """The image classification recipes: a backbone and its schedule serve a number as a class."""
        return RECIPES_DIR / ImageClassification.name
