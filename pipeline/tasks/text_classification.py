"""Text classification: one text in, one class out (IMDB reviews); and its sibling, text pairs in,
one class out (premise and hypothesis: natural-language inference, Watson)."""

from __future__ import annotations

from pipeline.core.errors import PetalsError
from pipeline.tasks.base import Task, register


def text_networks() -> tuple[str, ...]:
    """The networks that read texts: the word models (pipeline/modeling/text.py) and BERT."""
    from pipeline.modeling import bert, text

    return (*text.NETWORKS, *bert.NAMES)


@register
class TextClassification(Task):
    name = "text_classification"
    modality = "text"
    unit = "ex"
    columns = 1  # texts per example

    def check_spec(self, spec) -> None:
        for split, table in spec.tables.splits.items():
            if len(table.layout.text_columns) != self.columns:
                raise ValueError(
                    f"a {self.name} task reads {self.columns} text column(s) per example; split {split} "
                    f"names {list(table.layout.text_columns)}"
                )

    def size(self, config) -> int:
        return config.data.sequence_length

    def check_network(self, config, spec, backend: str) -> None:
        from pipeline.modeling import bert

        name = config.model.backbone
        if name not in text_networks():
            raise PetalsError(
                f"model.backbone={name}: competition {spec.name} has texts; its networks are "
                f"{', '.join(text_networks())}"
            )
        if config.train.feature_cache:
            raise PetalsError(
                f"train.feature_cache caches an image backbone's activations; {name} reads texts"
            )
        if config.train.unfrozen_layers:  # its cut counts an image backbone's layers back from the head
            raise PetalsError(
                f"train.unfrozen_layers={config.train.unfrozen_layers} cuts an image backbone; {name} reads "
                "texts (train.frozen_epochs freezes a text backbone whole)"
            )
        if name in bert.NAMES:
            bert.check(config)
            return
        if self.columns > 1:
            raise PetalsError(
                f"model.backbone={name} reads one text; competition {spec.name} has {self.columns} "
                "per example "
                f"(sentence pairs need a network that reads pairs: {', '.join(bert.NAMES)})"
            )
        if config.train.frozen_epochs:
            raise PetalsError(
                f"train.frozen_epochs={config.train.frozen_epochs}: {name} has no pretrained part to freeze"
            )

    def summary_sizes(self, config, image_size: int | None) -> dict[str, int | None]:
        return {"image_size": None, "sequence_length": config.data.sequence_length}


@register
class TextPairClassification(TextClassification):
    name = "text_pair_classification"
    columns = 2
