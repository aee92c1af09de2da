"""Image regression: one photo in, one number out (PetFinder's Pawpularity)."""

from __future__ import annotations

from pipeline.tasks.base import register
from pipeline.tasks.inputs.image import ImageInput
from pipeline.tasks.targets.regression import Regression


@register
class ImageRegression(Regression, ImageInput):
    name = "image_regression"
