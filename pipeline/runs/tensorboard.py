"""A run's TensorBoard events: `runs/<run-id>/tensorboard/<label>/`, written by every `train`.

Each epoch's row of `history.csv` becomes scalars (loss, accuracy, the competition's metric, the
learning rate, examples/s) at step = epoch; the resolved config and the run's tags (its CV group and
fold, its study and trial) become the HParams plugin's hyperparameters; evaluate adds its scores,
the confusion matrix and the per-class scores as images. `<label>` names the run's place ("run", or
"<cv-group>-fold3", "<study>-trial7"), so TensorBoard's run filter finds a group's folds or a
study's trials by name. tf.summary writes the files whatever Keras' backend is; the HParams need the
`tensorboard` package (a kernel image without it gets the config as text). history.csv stays the
record: a train process writes its events again from the rows it restored, so a resumed run's
events never hold the epochs it redid twice.
"""

from __future__ import annotations

import json
import logging
import math
import numbers
import shutil
import struct
from pathlib import Path
from typing import Any

from pipeline.core.files import plain_text, pyplot

log = logging.getLogger(__name__)

SPEED_COLUMNS = ("seconds", "images", "images_per_second")
MAX_CLASSES_DRAWN = 200  # the per-class figure's bars, the weakest first (as the confusion plot's cut)


def scalar_tag(column: str) -> str:
    """A history column's scalar tag, grouped the way TensorBoard draws them: `val_macro_f1` ->
    `val/macro_f1`, `loss` -> `train/loss`, `lr` -> `optimizer/lr`, `images_per_second` ->
    `speed/images_per_second`."""
    if column.startswith("val_"):
        return f"val/{column[4:]}"
    if column == "lr":
        return "optimizer/lr"
    return f"speed/{column}" if column in SPEED_COLUMNS else f"train/{column}"


def flat_params(config: dict[str, Any], tags: dict[str, Any]) -> dict[str, bool | int | float | str]:
    """The config's leaves under dotted names (`train.lr_start`) and the tags, as values TensorBoard's
    HParams and MLflow's params take: numbers, booleans and text (a list as its JSON, None as "")."""
    flat: dict[str, bool | int | float | str] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(f"{prefix}{key}.", inner)
        elif isinstance(value, bool | int | float | str):
            flat[prefix[:-1]] = value
        else:
            flat[prefix[:-1]] = "" if value is None else json.dumps(value)

    walk("", config)
    walk("", {key: value for key, value in tags.items() if value is not None})
    return flat


class EventLog:
    """One folder of event files; `restart` (a train process) empties it first."""

    def __init__(self, folder: Path, restart: bool = False):
        import tensorflow as tf

        self.tf, self.folder = tf, folder
        if restart:
            shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True, exist_ok=True)
        with tf.device("/cpu:0"):  # never an accelerator's memory, whichever backend trains
            self.writer = tf.summary.create_file_writer(str(folder))
        self.written = 0  # the last epoch whose row is written

    def epochs(self, history) -> None:
        """The history rows past the last one written, each at step = its epoch."""
        rows = history[history["epoch"] > self.written]
        with self.tf.device("/cpu:0"), self.writer.as_default():
            for row in rows.to_dict("records"):
                for column, value in row.items():
                    if column != "epoch" and finite(value):
                        self.tf.summary.scalar(scalar_tag(column), float(value), step=int(row["epoch"]))
        if len(rows):
            self.written = int(rows["epoch"].max())
        self.writer.flush()

    def scalars(self, values: dict[str, float], step: int) -> None:
        with self.tf.device("/cpu:0"), self.writer.as_default():
            for tag, value in values.items():
                if finite(value):
                    self.tf.summary.scalar(tag, float(value), step=step)
        self.writer.flush()

    def hparams(self, params: dict[str, bool | int | float | str], run_name: str) -> None:
        """The HParams plugin's session (the `tensorboard` package's), else the params as text."""
        with self.tf.device("/cpu:0"), self.writer.as_default():
            try:
                from tensorboard.plugins.hparams import api as hp
            except ImportError:
                log.info("tensorboard: the tensorboard package is not installed: the config is text")
                shown = "\n".join(f"    {key} = {value}" for key, value in params.items())
                self.tf.summary.text("config", shown, step=0)
            else:
                hp.hparams(params, trial_id=run_name)
        self.writer.flush()

    def images(self, pngs: dict[str, bytes], step: int) -> None:
        """PNG files' bytes, each an image summary under its tag. One that is not a PNG of at most
        MAX_PNG_SIDE px a side (its header read before it is decoded: a run's picture may come back
        in a kernel's output) is left out with a line."""
        with self.tf.device("/cpu:0"), self.writer.as_default():
            for tag, png in pngs.items():
                try:
                    if not _png_fits(png):
                        raise ValueError("not a PNG of a drawable size")
                    image = self.tf.image.decode_png(png, channels=3)[None]
                except (ValueError, self.tf.errors.OpError):
                    log.warning("tensorboard: %s is not a picture it can draw; left out", tag)
                    continue
                self.tf.summary.image(tag, image, step=step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


MAX_PNG_SIDE = 16384


def _png_fits(png: bytes) -> bool:
    """A PNG whose header (IHDR: width, height) declares at most MAX_PNG_SIDE px a side."""
    if len(png) < 24 or png[:8] != b"\x89PNG\r\n\x1a\n" or png[12:16] != b"IHDR":
        return False
    width, height = struct.unpack(">II", png[16:24])
    return 0 < width <= MAX_PNG_SIDE and 0 < height <= MAX_PNG_SIDE


def finite(value: Any) -> bool:
    """A number a scalar can hold (numpy's included), not a flag, not nan."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


@plain_text
def per_class_png(per_class) -> bytes | None:
    """Precision, recall and F1 of each class (a per_class.csv table), the weakest by F1 at the top;
    past MAX_CLASSES_DRAWN classes the weakest of them. None for a table without those columns."""
    import io

    import numpy as np
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Patch

    if not {"class", "f1"} <= set(per_class.columns):
        return None
    shown = per_class.sort_values("f1").head(MAX_CLASSES_DRAWN).iloc[::-1]
    plt = pyplot()
    fig, axes = plt.subplots(figsize=(6, 1 + 0.16 * len(shown)))
    places = np.arange(len(shown))
    drawn = []
    for offset, column, colour in ((-0.27, "precision", "C0"), (0.0, "recall", "C1"), (0.27, "f1", "C2")):
        if column in shown:  # one collection of bars a score: barh's 104 patches each cost a third
            low, width = places + offset - 0.135, np.nan_to_num(np.asarray(shown[column], np.float64))
            corners = np.stack([np.zeros_like(width), low, width, low + 0.27], axis=1)
            boxes = corners[:, [[0, 1], [0, 3], [2, 3], [2, 1]]]  # [bars, 4 corners, (x, y)]
            axes.add_collection(PolyCollection(boxes, facecolors=colour, linewidths=0))
            drawn.append(Patch(facecolor=colour, label=column))
    axes.set_yticks(places, [str(name)[:40] for name in shown["class"]], fontsize=6)
    axes.set_ylim(-0.6, len(shown) - 0.4)
    axes.set_xlim(0, 1)
    cut = f", the {len(shown)} weakest of {len(per_class)}" if len(shown) < len(per_class) else ""
    axes.set_title(f"per-class scores on val{cut}", fontsize=8)
    axes.legend(handles=drawn, fontsize=6, loc="lower right")
    inch = 1 / fig.get_figheight()  # fixed margins: tight_layout measures every label first
    fig.subplots_adjust(left=0.32, right=0.97, top=1 - 0.3 * inch, bottom=0.4 * inch)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=80)
    plt.close(fig)
    return buffer.getvalue()
