"""Image classification: one photo in, one class out (flowers, pets, leaves)."""

from __future__ import annotations

from pipeline.core.errors import PetalsError
from pipeline.tasks.base import Task, register


@register
class ImageClassification(Task):
    name = "image_classification"
    modality = "image"
    unit = "img"

    def size(self, config) -> int:
        return config.data.input_size or config.data.image_size

    def check_network(self, config, spec, backend: str) -> None:
        from pipeline.modeling import registry, text_networks

        # A text network's entry (pipeline/modeling/text_networks.py) reads another modality.
        entry = text_networks.NETWORKS.get(config.model.backbone)
        if entry is not None and entry.modality != self.modality:
            raise PetalsError(
                f"model.backbone={config.model.backbone} reads texts; competition {spec.name} has images "
                f"(python -m pipeline train --list-backbones)"
            )
        registry.check_backbone(config.model.backbone, backend)

    def summary_sizes(self, config, image_size: int | None) -> dict[str, int | None]:
        return {"image_size": image_size, "sequence_length": None}
