"""The offline leaderboard of every evaluated run and ensemble, per competition.

`submissions/leaderboard-<competition>.csv` has one
row per run or ensemble: what it was trained on and how (data source and fingerprint, recipe,
backbone, size, epochs, git commit), how it scored (the competition's metric on val, such as
`val_macro_f1` or `val_log_loss`, accuracy, training time), its submission file and, once
Kaggle has scored it, the public score. Every write is a read-modify-replace under an exclusive
lock, so two stages finishing at the same moment both land. `sync` pulls the public scores of
your Kaggle submissions and matches them to rows; `plot` draws the metric and public score over
time. The stages record rows here; `python -m pipeline leaderboard` prints a board.
"""

from __future__ import annotations

import fcntl
import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from competition.spec import DEFAULT_COMPETITION
from pipeline.core.errors import PetalsError
from pipeline.core.files import pyplot, save_figure, write_atomically
from pipeline.core.paths import check_name
from pipeline.core.rundir import RunDir

log = logging.getLogger(__name__)

BOARD = f"leaderboard-{DEFAULT_COMPETITION}.csv"  # the default competition's board
LEGACY_BOARD = "leaderboard.csv"  # the default competition's board before 2026-11 (renamed on first use)
PLOT = BOARD.replace(".csv", ".png")  # drawn beside its board
# The columns every board has; a board's score column is `val_<metric>` of its competition
# (`val_macro_f1`, say), so `update` also takes any `val_` column.
COLUMNS = [
    "entry",
    "kind",  # run | ensemble | kaggle
    "time",
    "git_commit",
    "competition",
    "data_source",
    "data_fingerprint",
    "recipe",
    "backbone",
    "image_size",
    "backend",  # the Keras backend it trained on
    "epochs",
    "val_macro_f1",
    "val_accuracy",
    "tta",
    "train_seconds",
    "members",  # an ensemble's runs and weights
    "submission",
    "submitted_at",
    "submission_ref",
    "submission_sha256",  # the bytes uploaded: the same file is not sent twice without --force
    "public_score",
    "private_score",
    "kaggle_status",
]


# ----------------------------------------------------------------------------- the durable file


def board_file(submissions_dir: Path, competition: str = DEFAULT_COMPETITION) -> Path:
    """A competition's board: `leaderboard-<name>.csv`. The default competition's board was
    `leaderboard.csv` before competitions became folders: found there, it is renamed once. The
    name comes from a competition file or a downloaded summary, so it must be a plain name: the
    board, its lock and its plot stay in `submissions_dir`."""
    check_name(competition, "competition", "leaderboard")
    board = submissions_dir / f"leaderboard-{competition}.csv"
    legacy = submissions_dir / LEGACY_BOARD
    if competition == DEFAULT_COMPETITION and legacy.is_file() and not board.exists():
        legacy.rename(board)
        log.warning("leaderboard: %s is now %s (one board file per competition)", legacy, board.name)
    return board


def is_board(path: Path) -> bool:
    return path.name.startswith("leaderboard") and path.suffix == ".csv"


def score_column(competition: str = DEFAULT_COMPETITION):
    """A board's score column (`val_<metric>`) and the metric: the competition's."""
    from competition import load_spec

    spec = load_spec(competition)
    return spec.score_key, spec.metric


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@contextmanager
def locked(board: Path) -> Iterator[None]:
    """An exclusive lock on the board (a lock file beside it), held across read-modify-replace."""
    board.parent.mkdir(parents=True, exist_ok=True)
    with open(board.with_name(f".{board.name}.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def read(board: Path) -> pd.DataFrame:
    if not board.is_file():
        return pd.DataFrame(columns=COLUMNS)
    try:
        table = pd.read_csv(board, dtype={"entry": str, "submission_ref": str, "git_commit": str})
    except (pd.errors.ParserError, UnicodeDecodeError) as err:
        raise PetalsError(f"{board}: unreadable leaderboard ({err})") from None
    return table.reindex(columns=list(dict.fromkeys([*COLUMNS, *table.columns])))


def update(board: Path, entry: str, defaults: dict[str, Any] | None = None, **fields: Any) -> None:
    """Insert or update the row `entry`; fields given as None leave the stored value alone, and
    `defaults` fill a row only when it is new (under the same lock, so no writer slips between)."""
    defaults = defaults or {}
    unknown = {k for k in (set(fields) | set(defaults)) - set(COLUMNS) if not k.startswith("val_")}
    if unknown:
        raise ValueError(f"unknown leaderboard column(s): {sorted(unknown)}")  # a bug, not input
    with locked(board):
        table = read(board)
        values = {k: v for k, v in fields.items() if v is not None}
        new_columns = [k for k in [*values, *defaults] if k not in table.columns]  # a board's score column
        table = table.reindex(columns=[*table.columns, *dict.fromkeys(new_columns)])
        if (table["entry"] == entry).any():
            for key, value in values.items():
                table[key] = table[key].astype(object)
                table.loc[table["entry"] == entry, key] = value
        else:
            new = {k: v for k, v in defaults.items() if v is not None}
            row = pd.DataFrame([{"entry": entry, **new, **values}], columns=table.columns)
            table = row if table.empty else pd.concat([table, row], ignore_index=True)
        write_atomically(board, lambda tmp: table.to_csv(tmp, index=False))


# ----------------------------------------------------------------------------- what a row says


def run_fields(run: RunDir) -> dict[str, Any]:
    """A run's leaderboard fields, from what `train` wrote into its dir."""
    metrics, config, manifest, meta = (
        run.read_json(name, default={})
        for name in (RunDir.METRICS, RunDir.CONFIG, RunDir.DATA_MANIFEST, RunDir.RUN_INFO)
    )
    return {
        "kind": "run",
        "git_commit": meta.get("git_commit"),
        "backend": meta.get("backend"),
        "competition": config.get("competition"),
        "data_source": manifest.get("source"),
        "data_fingerprint": manifest.get("fingerprint"),
        "recipe": metrics.get("recipe"),
        "backbone": metrics.get("backbone"),
        "image_size": metrics.get("image_size"),
        "epochs": metrics.get("epochs"),
        "train_seconds": round(metrics["train_seconds"], 1) if "train_seconds" in metrics else None,
    }


def ranked(table: pd.DataFrame, competition: str = DEFAULT_COMPETITION) -> pd.DataFrame:
    """The table as printed: the best val score first, the columns that tell runs apart."""
    column, metric = score_column(competition)
    table = table.reindex(columns=list(dict.fromkeys([*table.columns, column])))
    table = table.assign(**{column: pd.to_numeric(table[column], errors="coerce")})
    shown = table.sort_values(column, ascending=not metric.greater_is_better, na_position="last")
    shown = shown.reset_index(drop=True)
    shown.insert(0, "rank", range(1, len(shown) + 1))
    columns = list(
        dict.fromkeys(["rank", "entry", "kind", "backbone", "image_size", "epochs", column, "val_accuracy"])
    )
    columns += ["public_score", "data_source", "time"]
    for column in ("image_size", "epochs"):
        shown[column] = pd.to_numeric(shown[column], errors="coerce").astype("Int64")
    return shown[columns].astype(object).fillna("")


def plot(table: pd.DataFrame, path: Path, competition: str = DEFAULT_COMPETITION) -> None:
    plt = pyplot()

    column, metric = score_column(competition)
    table = table.reindex(columns=list(dict.fromkeys([*table.columns, column])))
    table = table[pd.to_datetime(table["time"], utc=True, errors="coerce").notna()]
    times = pd.to_datetime(table["time"], utc=True)
    fig, axis = plt.subplots(figsize=(8, 4))
    for kind, marker in (("run", "o"), ("ensemble", "s"), ("kaggle", "^")):
        rows = table["kind"] == kind
        if rows.any():
            axis.scatter(
                times[rows], table.loc[rows, column], marker=marker, label=f"{kind}: val {metric.title}"
            )
    public = pd.to_numeric(table["public_score"], errors="coerce")
    if public.notna().any():
        axis.scatter(times[public.notna()], public[public.notna()], marker="*", s=90, label="public score")
    axis.set_ylabel(metric.title)
    axis.set_ylim(bottom=0)
    axis.legend(loc="lower right", fontsize=8)
    fig.autofmt_xdate()
    fig.tight_layout()
    save_figure(fig, path, dpi=90)


# ----------------------------------------------------------------------------- Kaggle scores


def _score(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def sync(board: Path, slug: str) -> int:
    """Pull your submissions' scores on `slug` and write them onto the rows they came from."""
    from pipeline.core import kaggle_client

    submissions = kaggle_client.with_client(
        lambda client: client.competition_submissions(slug, page_size=100) or [],
        slug=slug,
        action=f"listing your submissions to {slug!r}",
    )
    table = read(board)
    matched = 0
    for sub in submissions:
        entry = match(table, str(sub.ref), sub.file_name or "", sub.description or "")
        if entry is None:
            continue
        update(
            board,
            entry,
            submission_ref=str(sub.ref),
            public_score=_score(sub.public_score),
            private_score=_score(sub.private_score),
            kaggle_status=str(sub.status).rsplit(".", 1)[-1].removeprefix("SUBMISSION_STATUS_").lower()
            or None,
        )
        matched += 1
    return matched


def match(table: pd.DataFrame, ref: str, file_name: str, description: str) -> str | None:
    """The row a Kaggle submission belongs to: by ref, else file name, else the entry named in its message."""
    by_ref = table[table["submission_ref"].astype(str) == ref]
    if len(by_ref):
        return by_ref["entry"].iloc[0]
    names = table["submission"].fillna("").map(lambda p: Path(p).name if p else "")
    by_name = table[(names == file_name) & (names != "")]
    if len(by_name) == 1:
        return by_name["entry"].iloc[0]
    for entry in table["entry"]:
        if entry and entry in description:
            return entry
    return None
