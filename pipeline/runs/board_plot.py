"""The offline leaderboard as a picture (`make leaderboard`'s PNG): every row's score over time, and
once Kaggle has scored some, the offline score against the public one."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from pipeline.core.files import plain_text, pyplot, save_figure
from pipeline.runs.leaderboard import COLUMNS, SINGLE_SPLIT, _numbers, board_score, judged, score_column

if TYPE_CHECKING:
    from competition import CompetitionSpec


# Markers: by kind over time; by how the score was judged against the public score.
KIND_MARKERS = {"run": "o", "ensemble": "s", "kaggle": "^", "cv": "D", "refit": "P"}
JUDGED_MARKERS = {SINGLE_SPLIT: "o", "CV": "D", "refit": "P"}


@plain_text
def plot(table: pd.DataFrame, path: Path, spec: CompetitionSpec) -> None:
    """One figure: the board's scores (CV where there is one) and public scores over time; beside it,
    once Kaggle has scored some rows, the offline score against the public one, the picture that
    says whether the CV can be trusted."""
    plt = pyplot()

    column, metric = score_column(spec)
    table = table.reindex(columns=list(dict.fromkeys([*COLUMNS, *table.columns]))).reset_index(drop=True)
    public = _numbers(table, "public_score")
    panels = 2 if public.notna().any() else 1
    fig, axes = plt.subplots(1, panels, figsize=(8 * panels, 4), squeeze=False)
    _plot_over_time(axes[0][0], table, column, metric)
    if panels == 2:
        _plot_against_public(axes[0][1], table, column, metric)
    fig.tight_layout()
    save_figure(fig, path, dpi=90)


def _plot_over_time(axis, table: pd.DataFrame, column: str, metric) -> None:
    times = pd.to_datetime(table["time"], utc=True, errors="coerce")
    score, public = board_score(table, column), _numbers(table, "public_score")
    dated = times.notna()
    for kind, marker in KIND_MARKERS.items():
        rows = dated & (table["kind"] == kind) & score.notna()
        if rows.any():
            axis.scatter(times[rows], score[rows], marker=marker, label=kind)
    if (dated & public.notna()).any():
        rows = dated & public.notna()
        axis.scatter(times[rows], public[rows], marker="*", s=90, label="public score")
    axis.set_ylabel(f"{metric.title} (CV, else val)")
    axis.set_ylim(bottom=0)
    if axis.get_legend_handles_labels()[0]:  # a board of rows with no score has nothing to name
        axis.legend(loc="lower right", fontsize=8)
    for label in axis.get_xticklabels():  # dates: slanted, as autofmt_xdate does for one panel
        label.set_rotation(30)
        label.set_horizontalalignment("right")


def _plot_against_public(axis, table: pd.DataFrame, column: str, metric) -> None:
    score, public = board_score(table, column), _numbers(table, "public_score")
    how = judged(table, column).map(_family)
    for name, marker in JUDGED_MARKERS.items():
        rows = (how == name) & score.notna() & public.notna()
        if rows.any():
            axis.scatter(score[rows], public[rows], marker=marker, s=40, label=name)
    paired = score.notna() & public.notna()
    if not paired.any():  # public scores only on rows with no offline score: nothing to compare
        return
    both = pd.concat([score[paired], public[paired]])
    low, high = both.min(), both.max()
    pad = max((high - low) * 0.1, 0.01)
    axis.plot([low - pad, high + pad], [low - pad, high + pad], "k--", linewidth=0.8, label="y = x")
    axis.set_xlabel(f"offline {metric.title} (CV, else val)")
    axis.set_ylabel(f"public {metric.title}")
    axis.legend(loc="upper left", fontsize=8)  # points gather on y = x; public far above CV is rare


def _family(how: str) -> str:
    """A `judged` value's marker family: "5-fold CV" is CV, "refit (CV of g)" is refit."""
    return "refit" if how.startswith("refit") else "CV" if how.endswith("CV") else how
