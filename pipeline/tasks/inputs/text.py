"""A text in, or a pair of texts (premise and hypothesis: natural-language inference, Watson): the
input part of every text task (pipeline/tasks/text_classification.py and its siblings compose it with
a target part). It owns what texts decide: the tokens a run id carries, which networks read texts,
`make inspect`'s table and the mistakes table; nothing here knows what the label is."""

from __future__ import annotations

from pathlib import Path

from pipeline.core.errors import PetalsError
from pipeline.core.foreign import safe_cells, text
from pipeline.formats.table import tables_of
from pipeline.tasks.base import RECIPES_DIR, Task


class TextInput(Task):
    """One text an example."""

    modality = "text"
    unit = "ex"
    columns = 1  # texts per example
    # The text recipes, whatever the target: a network and its schedule serve one class, several
    # labels or a number alike (a target refuses in `check_recipe` what it cannot use).
    recipes = "text_classification"

    @property
    def recipes_dir(self) -> Path:
        return RECIPES_DIR / self.recipes

    def check_spec(self, spec) -> None:
        for split, table in tables_of(spec).splits.items():
            if len(table.layout.text_columns) != self.columns:
                raise ValueError(
                    f"a {self.name} task reads {self.columns} text column(s) per example; split {split} "
                    f"names {list(table.layout.text_columns)}"
                )

    def size(self, config) -> int:
        return config.data.sequence_length

    def check_network(self, config, spec, backend: str) -> None:
        """Through the network's entry (pipeline/networks/text_networks.py): it reads texts, as many
        an example as this task has, and has a pretrained part where a warm-up freezes one."""
        from pipeline import networks

        name = config.model.backbone
        entries = {n: networks.NETWORKS[n] for n in networks.TEXT_NETWORKS}  # text_networks', keras-hub's
        entry = entries.get(name)
        if entry is None:
            raise PetalsError(
                f"model.backbone={name}: competition {spec.name} has texts; its networks are "
                f"{', '.join(entries)}"
            )
        if backend not in entry.backends:
            raise PetalsError(
                f"model.backbone={name} builds on {', '.join(entry.backends)} only, not on {backend}"
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
        entry.check(config)
        if self.columns > 1 and not entry.reads_pairs:
            pairs = ", ".join(n for n, e in entries.items() if e.reads_pairs)
            raise PetalsError(
                f"model.backbone={name} reads one text; competition {spec.name} has {self.columns} "
                f"per example (sentence pairs need a network that reads pairs: {pairs})"
            )
        if config.train.frozen_epochs and not entry.has_backbone:
            raise PetalsError(
                f"train.frozen_epochs={config.train.frozen_epochs}: {name} has no pretrained part to freeze"
            )

    def summary_sizes(self, config, image_size: int | None) -> dict[str, int | None]:
        return {"image_size": None, "sequence_length": config.data.sequence_length}

    def show_batch(self, train, spec, config, out: Path, size: int, where: str) -> Path:
        """`size` training texts drawn with the config's seed, with their labels (a class name, or the
        labels held) and lengths in words (`batch.csv`); the first five printed."""
        import numpy as np
        import pandas as pd

        from pipeline.core.files import write_atomically

        examples = train.examples
        rows = np.random.default_rng(config.seed).choice(
            len(examples), min(size, len(examples)), replace=False
        )
        table = pd.DataFrame(
            {
                "id": examples.ids[rows],
                "label": [self.label_text(label, spec) for label in examples.labels[rows]],
            }
        )
        for k, column in enumerate(examples.inputs):
            name = "text" if len(examples.inputs) == 1 else f"text_{k + 1}"
            table[name] = column[rows]
            table[f"{name}_words"] = [len(t.split()) for t in column[rows]]
        path = out / "batch.csv"
        write_atomically(path, lambda tmp: safe_cells(table).to_csv(tmp, index=False))
        shown = table.head(5).map(lambda v: text(v, 90) if isinstance(v, str) else v)
        print(shown.to_string(index=False, max_colwidth=90))
        return path

    def show_mistakes(self, split, shown, config, folder: Path) -> Path:
        """`shown` with each example's text(s) beside it, cut to mistakes.TEXT characters and escaped
        (foreign.text), as a CSV whose cells cannot start a formula (`mistakes.csv`)."""
        from pipeline.core.files import write_atomically
        from pipeline.core.rundir import RunDir
        from pipeline.tasks import mistakes

        examples = split.examples
        where = {key: i for i, key in enumerate(examples.ids.astype(str))}
        rows = [where[key] for key in shown["id"]]
        table = shown.copy()
        for k, column in enumerate(examples.inputs):
            name = "text" if len(examples.inputs) == 1 else f"text_{k + 1}"
            table[name] = [text(t, mistakes.TEXT) for t in column[rows]]
        path = folder / RunDir.MISTAKES
        write_atomically(path, lambda tmp: safe_cells(table).to_csv(tmp, index=False))
        return path


class TextPairInput(TextInput):
    """Two texts an example."""

    columns = 2
    recipes = "text_pair_classification"
