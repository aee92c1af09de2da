"""One epoch as a line a person reads: fixed columns under a header, a dash where val was not scored;
and its steps' progress while it runs."""

from __future__ import annotations

EPOCH_COLUMNS = (  # (title, least width) of each column of an epoch's line: a longer title widens it
    ("epoch", 7), ("lr", 9), ("loss", 7), ("{acc}", 7), ("val loss", 9), ("val {acc}", 8), ("{metric}", 12),
    ("{unit}/s", 6), ("s", 6),
)  # fmt: skip
SHORT = {"accuracy": "acc"}  # the training metric's titles shown short, as people write them


def epoch_columns(metric_title: str, unit: str = "img", accuracy: str = "accuracy") -> list[tuple[str, int]]:
    """Each column's title and width: the metric's as people write it, examples per second in
    images (`img`) or texts (`ex`), and the task's training metric (`Task.metric_title`: accuracy
    as `acc`, a regression's `rmse`, several numbers' `mcrmse`); every title whole, its column as
    wide as it needs."""
    acc = SHORT.get(accuracy, accuracy)
    titles = [title.format(metric="val " + metric_title, unit=unit, acc=acc) for title, _ in EPOCH_COLUMNS]
    return [(title, max(width, len(title))) for title, (_, width) in zip(titles, EPOCH_COLUMNS, strict=True)]


def epoch_header(metric_title: str, unit: str = "img", accuracy: str = "accuracy") -> str:
    """The column names above the epoch lines (`epoch_columns`)."""
    return " ".join(f"{title:>{width}}" for title, width in epoch_columns(metric_title, unit, accuracy))


def epoch_line(row: dict, epochs: int, score_key: str, metric_title: str, unit: str = "img",
               accuracy: str = "accuracy") -> str:  # fmt: skip
    """One epoch as a line a person reads: the header's columns (the same titles give the same
    widths), a dash where val was not scored."""

    def number(key: str, digits: int = 4) -> str:
        value = row.get(key)
        return "-" if value is None or value != value else f"{value:.{digits}f}"

    cells = (
        f"{row['epoch']}/{epochs}",
        f"{row['lr']:.2e}",
        number("loss"),
        number("accuracy"),
        number("val_loss"),
        number("val_accuracy"),
        number(score_key),
        f"{row['images_per_second']:.0f}",
        f"{row['seconds']:.1f}",
    )
    columns = epoch_columns(metric_title, unit, accuracy)
    return " ".join(f"{cell:>{width}}" for cell, (_, width) in zip(cells, columns, strict=True))


def epoch_progress(trainer, epoch: int):
    """The progress of the epoch's steps (those left of it, resumed): a bar on a terminal, a line
    every tenth in a log once it has run a while, nothing for a short epoch (pipeline/core/progress.py).
    Keras' own bar is off: its lines are the engine's, and each epoch's line says the rest."""
    from pipeline.core.progress import Progress

    return Progress(
        f"train: epoch {epoch + 1}/{trainer.config.train.epochs}",
        trainer.steps - trainer._first_step(epoch),
        "steps",
        enabled=trainer.progress and trainer.job.platform.hosts.writer,
    )
