"""Multi-label image classification: one photo in, any number of labels out (Plant Pathology
2021's leaves, each with its diseases)."""

from __future__ import annotations

from pipeline.tasks.base import register
from pipeline.tasks.inputs.image import ImageInput
from pipeline.tasks.targets.multi_label import MultiLabel


@register
class MultiLabelImageClassification(MultiLabel, ImageInput):
    name = "multi_label_image_classification"
