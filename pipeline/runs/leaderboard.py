"""The offline leaderboard of every evaluated run and ensemble, per competition.

`submissions/leaderboard-<competition>.csv` has one
row per run or ensemble: what it was trained on and how (data source and fingerprint, recipe,
backbone, size, epochs, git commit), how it scored (the competition's metric on val, such as
`val_macro_f1` or `val_log_loss`, accuracy, training time), its submission file and, once
Kaggle has scored it, the public score. Every write is a read-modify-replace under an exclusive
lock, so two stages finishing at the same moment both land. `sync` pulls the public scores of
your Kaggle submissions and matches them to rows; `plot` draws the metric and public score over
time, and the offline score against the public one. A CV group's row carries its CV score (the
metric on out-of-fold predictions of every labelled example) and the folds' spread; `ranked` ranks
every row by one score, CV where there is one, and says how each was judged. The stages record rows
here; `python -m pipeline leaderboard` prints a board.
"""

from __future__ import annotations

import fcntl
import logging
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from pipeline.core.config import DEFAULT_COMPETITION
from pipeline.core.csv_bounds import CsvBounds, check_csv
from pipeline.core.errors import PetalsError
from pipeline.core.files import write_atomically
from pipeline.core.foreign import safe_cells, text
from pipeline.core.paths import check_name
from pipeline.core.rundir import RunDir

if TYPE_CHECKING:
    from competition.spec import CompetitionSpec

log = logging.getLogger(__name__)

BOARD = f"leaderboard-{DEFAULT_COMPETITION}.csv"  # the default competition's board
LEGACY_BOARD = "leaderboard.csv"  # the default competition's board before 2026-11 (renamed on first use)
PLOT = BOARD.replace(".csv", ".png")  # drawn beside its board
# The columns every board has; a board's score column is `val_<metric>` of its competition
# (`val_macro_f1`, say), so `update` also takes any `val_` column.
COLUMNS = [
    "entry",
    "kind",  # run | ensemble | kaggle | cv (a CV group) | refit (all data, CV's epochs) | trial (a sweep's)
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
    "cv_score",  # a CV group's metric on its out-of-fold predictions (a refit's: its group's)
    "cv_spread",  # the standard deviation of the folds' scores
    "folds",
    "members",  # an ensemble's runs and weights, a CV group's fold runs
    "submission",
    "submitted_at",
    "submission_ref",
    "submission_sha256",  # the bytes uploaded: the same file is not sent twice without --force
    "public_score",
    "private_score",
    "kaggle_status",
    "sweep",  # a sweep's trial: its study and number (`make sweep`)
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


def score_column(spec: CompetitionSpec):
    """A board's score column (`val_<metric>`) and the metric: the competition's (`spec`)."""
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


# A board of 100,000 runs is about 30 MB; its cells are short (a summary's fields are cut at 200).
BOARD_CSV = CsvBounds(256 << 20, 64 << 10)


def read(board: Path) -> pd.DataFrame:
    """The board, read as the foreign file it may be (submissions folders get shared and synced):
    bounded before pandas reads it, one line where it cannot be read."""
    if not board.is_file():
        return pd.DataFrame(columns=COLUMNS)
    check_csv(board, BOARD_CSV)
    try:
        table = pd.read_csv(board, dtype={"entry": str, "submission_ref": str, "git_commit": str})
    except (ValueError, UnicodeDecodeError) as err:  # pandas' parser and empty-file errors among them
        raise PetalsError(f"{board}: unreadable leaderboard ({str(err)[:200]})") from None
    return table.reindex(columns=list(dict.fromkeys([*COLUMNS, *table.columns])))


def update(board: Path, entry: str, defaults: dict[str, Any] | None = None, **fields: Any) -> None:
    """Insert or update the row `entry`; fields given as None leave the stored value alone, and
    `defaults` fill a row only when it is new (under the same lock, so no writer slips between).
    Rows hold foreign text (a downloaded summary's fields): no cell is written as a formula."""
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
        write_atomically(board, lambda tmp: safe_cells(table).to_csv(tmp, index=False))


# ----------------------------------------------------------------------------- what a row says


def _count(value: Any) -> int | None:
    """A whole number a run's files give (epochs, a size), or None: a run comes back in a kernel's
    output, and its metrics.json can say anything."""
    return value if type(value) is int and 0 <= value < 1 << 31 else None


def _seconds(value: Any) -> float | None:
    return round(float(value), 1) if type(value) in (int, float) and 0 <= value < 1e12 else None


def _name(value: Any) -> str | None:
    return text(value, 200) if value is not None else None


def run_fields(run: RunDir) -> dict[str, Any]:
    """A run's leaderboard fields, from what `train` wrote into its dir, each kept only in the shape
    train writes it (a number, a short text)."""
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
        "recipe": _name(metrics.get("recipe")),
        "backbone": _name(metrics.get("backbone")),
        "image_size": _count(metrics.get("image_size")),
        "epochs": _count(metrics.get("epochs")),
        "train_seconds": _seconds(metrics.get("train_seconds")),
    }


SHOWN_CELL = 60  # characters of a cell the printed board shows

# How a row was judged: a CV score on every labelled example out of fold, or one val split. Both are
# the competition's metric, so one ranking holds them, but they are not equally trustworthy.
SINGLE_SPLIT = "single split"
FOOTER = (
    "{metric}: CV rows, ranked first, are scored on out-of-fold predictions of every labelled example "
    "(± the folds' standard deviation); single-split scores come from one val split and flatter the "
    "recipes tuned on it."
)


def _numbers(table: pd.DataFrame, column: str) -> pd.Series:
    """A column as floats; absent (an older board) or empty cells are NaN."""
    if column not in table.columns:
        return pd.Series(float("nan"), index=table.index)
    return pd.to_numeric(table[column], errors="coerce")


def _texts(table: pd.DataFrame, column: str) -> pd.Series:
    """A column as strings; absent or empty cells are ""."""
    if column not in table.columns:
        return pd.Series("", index=table.index, dtype=object)
    return table[column].astype(object).fillna("").astype(str)


def board_score(table: pd.DataFrame, column: str) -> pd.Series:
    """What a row is ranked by: its CV score where it has one (a CV group, its refit, a blend judged
    out of fold), else its score on the val split (`column`)."""
    return _numbers(table, "cv_score").fillna(_numbers(table, column))


def judged(table: pd.DataFrame, column: str) -> pd.Series:
    """How each row's score was judged: "5-fold CV", "refit (CV of <group>)", "single split", or ""
    for a row not scored yet."""
    folds, cv, val = _numbers(table, "folds"), _numbers(table, "cv_score"), _numbers(table, column)
    kinds, members = _texts(table, "kind"), _texts(table, "members")

    def one(i) -> str:
        if pd.notna(cv[i]):
            group = re.match(r"refit of (\S+)", members[i])  # a refit's members: "refit of <group> to ..."
            if kinds[i] == "refit" or group:
                return f"refit (CV of {group.group(1) if group else 'its group'})"
            return f"{int(folds[i])}-fold CV" if 2 <= folds[i] < 1000 else "CV"  # NaN, inf: no number
        return SINGLE_SPLIT if pd.notna(val[i]) else ""

    return pd.Series([one(i) for i in table.index], index=table.index, dtype=object)


def _shown_score(score: float, spread: float) -> str:
    if pd.isna(score):
        return ""
    return f"{score:.4f}" + ("" if pd.isna(spread) else f" ± {spread:.4f}")


def ranked(table: pd.DataFrame, spec: CompetitionSpec) -> pd.DataFrame:
    """The table as printed: rows judged by CV first (a CV group, its refit, a blend judged out of
    fold), then single-split rows, then those not scored, each best first by the competition's
    metric; the metric's column showing the folds' spread beside a CV score, and `judged` saying
    how each row's score was judged. A val split of a few hundred rows can flatter a recipe by
    more than the gap between two recipes: a CV score of every labelled row outranks it."""
    column, metric = score_column(spec)
    table = table.reset_index(drop=True)
    score, spread = board_score(table, column), _numbers(table, "cv_spread")
    tiers = pd.DataFrame({"tier": _numbers(table, "cv_score").isna().astype(int), "score": score})
    order = tiers.sort_values(
        ["tier", "score"], ascending=[True, not metric.greater_is_better], na_position="last", kind="stable"
    )
    shown = table.reindex(columns=list(dict.fromkeys([*COLUMNS, *table.columns]))).loc[order.index]
    shown = shown.assign(
        judged=judged(table, column)[order.index],
        **{metric.name: [_shown_score(score[i], spread[i]) for i in order.index]},
    ).reset_index(drop=True)
    shown.insert(0, "rank", range(1, len(shown) + 1))
    for number in ("image_size", "epochs"):  # whole numbers, or none (a hand-edited board: 1.5, inf)
        values = pd.to_numeric(shown[number], errors="coerce")
        whole = values.where(np.isfinite(values) & (values == values.round()) & (values.abs() < 1 << 31))
        shown[number] = whole.astype("Int64")
    columns = ["rank", "entry", "kind", "judged", "backbone", "image_size", "epochs", metric.name]
    columns += [
        *(["val_accuracy"] if column != "val_accuracy" else []),
        "public_score",
        "data_source",
        "time",
    ]
    return shown[columns].astype(object).fillna("")


def board_text(table: pd.DataFrame, spec: CompetitionSpec, top: int = 20) -> str:
    """The printed board: its best `top` rows, and a footer when single-split rows are among them
    (their scores look as good as CV's and are not as trustworthy). A row's text may have come from a
    downloaded summary: each cell is shown escaped and cut (`pipeline.core.foreign.text`)."""
    shown = ranked(table, spec).head(top)
    board = shown.map(lambda v: text(v, SHOWN_CELL) if isinstance(v, str) else v).to_string(index=False)
    if (shown["judged"] == SINGLE_SPLIT).any():
        board += "\n" + FOOTER.format(metric=score_column(spec)[1].title)
    return board


# ----------------------------------------------------------------------------- Kaggle scores


def _score(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def sync(board: Path, slug: str) -> int:
    """Pull your submissions' scores on `slug` and write them onto the rows they came from."""
    from pipeline.core import kaggle_submissions

    submissions = kaggle_submissions.list_submissions(slug)  # each one's shape checked
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
