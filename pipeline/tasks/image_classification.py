"""Image classification: one photo in, one class out (flowers, pets, leaves)."""

from __future__ import annotations

from pipeline.tasks.base import register
from pipeline.tasks.inputs.image import ImageInput
from pipeline.tasks.targets.single_label import SingleLabel


@register
class ImageClassification(SingleLabel, ImageInput):
    name = "image_classification"
