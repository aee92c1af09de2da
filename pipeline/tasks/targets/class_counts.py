"""What `make inspect` shows of classes and labels: examples per class in each labelled split
(`class_counts.csv`) and the terminal's table of them, the rarest classes named (a single-label's
and a multi-label's `labels_summary`; a number's is regression_summary.py)."""

from __future__ import annotations

import pandas as pd

from pipeline.core.foreign import EACH, text
from pipeline.tasks.base import LabelsSummary


def summary(labeled: dict, spec, config) -> LabelsSummary:
    """Examples per class in each labelled split (labels read, images not decoded), plus names."""
    table = pd.DataFrame({"name": spec.classes})
    for split, examples in labeled.items():
        table[split] = examples.class_counts(config)
    return LabelsSummary("class_counts.csv", table, lines(table), index_label="class")


def lines(counts: pd.DataFrame) -> list[str]:
    splits = [c for c in counts.columns if c != "name"]
    shown = [f"{'split':<8}{'examples':>9}{'classes':>9}{'min':>6}{'median':>8}{'max':>6}"]
    for split in splits:
        column = counts[split]
        shown.append(
            f"{split:<8}{column.sum():>9}{(column > 0).sum():>9}{column.min():>6}"
            f"{column.median():>8.0f}{column.max():>6}"
        )
    rarest = counts.nsmallest(5, "train")
    shown.append(
        "rarest in train: "
        + ", ".join(f"{text(row['name'], EACH)} ({row['train']})" for _, row in rarest.iterrows())
    )
    for split in splits:
        absent = counts.index[counts[split] == 0].tolist()
        if absent:
            shown.append(f"warning: {len(absent)} classes have no {split} images: {absent[:10]}")
    return shown
