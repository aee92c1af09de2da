"""What evaluate shows of the predictions a run gets most confidently wrong: their images as a
grid (`mistakes.png`), their texts as a table (`mistakes.csv`); for a run's val split and for a
CV group's out-of-fold rows alike.

Which rows are wrong, and how wrong, is the task's target's to say (`Task.mistakes`: one class an
example, a wrong argmax ranked by the probability given to it; several labels, a row decided
wrong on some label at the thresholds chosen on val, ranked by its largest error on one label);
how they are shown is its input's (`Task.show_mistakes`). The examples are read again by id from
the data dir, the way they were read to be predicted (`splits.shown_again`). Bounded whatever the
data: MAX_IMAGES images, each at most THUMBNAIL px a side, or MAX_ROWS rows, each text cut to
TEXT characters; every class name and text shown through `pipeline.core.foreign`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.core.foreign import text
from pipeline.tasks.competitions import task_of

MAX_IMAGES = 36  # a 6 x 6 grid at most: a page a person looks through
THUMBNAIL = 128  # px a side each image is drawn at, at most (a 512 px recipe's are scaled down)
MAX_ROWS = 100  # rows of texts
TEXT = 300  # characters of each text a row keeps
NAME = 28  # characters of a class name (or a row's labels) a title shows
BATCH = 32  # images read at a time


def write(folder: Path, data_dir: Path, config, spec, predictions) -> dict:
    """Show the most confidently wrong of `predictions` (labelled: ids, labels, probabilities) in
    `folder` (a run's dir, a CV group's); what was written, for metrics.json and the summary."""
    from pipeline.data import splits
    from pipeline.data.manifest import locate_data

    task = task_of(spec)
    wrong = task.mistakes(predictions.labels, predictions.probabilities, spec)
    entry = {"wrong": len(wrong), "of": len(predictions.labels), "shown": 0, "file": None}
    if not len(wrong):
        return entry
    shown = wrong.head(MAX_IMAGES if task.modality == "image" else MAX_ROWS).reset_index(drop=True)
    rows = shown.pop("row").to_numpy()
    shown.insert(0, "id", np.asarray(predictions.ids).astype(str)[rows])
    split = splits.shown_again(
        locate_data(data_dir), spec, config, shown["id"].to_numpy(), np.asarray(predictions.labels)[rows]
    )
    path = task.show_mistakes(split, shown, config, Path(folder))
    return {**entry, "shown": len(shown), "file": str(path)}


def summary_line(entry: dict | None) -> list[str]:
    """The terminal's line naming the mistakes' file (none where evaluate wrote none)."""
    if not entry:
        return []
    if not entry["file"]:
        return [f"  mistakes: none of {entry['of']:,} rows is wrong"]
    return [
        f"  mistakes: the {entry['shown']} most confident of {entry['wrong']:,} wrong (of {entry['of']:,}) "
        f"in {text(entry['file'])}"
    ]


def captions(shown: pd.DataFrame) -> list[str]:
    """Each image's title: its true and predicted classes (escaped and cut) and its score."""
    scores = [c for c in shown.columns if c not in ("id", "true", "predicted")]
    return [
        "\n".join(
            [
                f"true: {text(row['true'], NAME)}",
                f"predicted: {text(row['predicted'], NAME)}",
                ", ".join(f"{name} {row[name]:.2f}" for name in scores),
            ]
        )
        for _, row in shown.iterrows()
    ]


def images_by_id(split, config, ids: np.ndarray) -> np.ndarray:
    """The images of `ids` from `split` (`splits.shown_again`'s), as the model read them, each at
    most THUMBNAIL px a side, in the order of `ids`."""
    from pipeline.data.datasets import resize_batch
    from pipeline.data.image_inputs import image_of

    found = {}
    batches = split.eval_dataset(config, BATCH, labeled=True, with_ids=True)
    with split.naming_bad(labeled=True):
        for inputs, _, keys in batches.as_numpy_iterator():
            images = image_of(inputs)  # an image_table's columns are not shown
            if images.shape[1] > THUMBNAIL:
                images = np.asarray(resize_batch(images, THUMBNAIL))
            found.update(zip((k.decode() for k in keys), images, strict=True))
    return np.stack([found[key] for key in ids])
