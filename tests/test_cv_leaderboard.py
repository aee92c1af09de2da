"""The CV leaderboard: one ranking by the CV score where there is one (else val), each row saying how
it was judged, the folds' spread beside a CV score, old boards still printed, and the plot of the
offline score against the public one."""

from __future__ import annotations

import struct

import pandas as pd
import pytest

from competition import load_spec
from pipeline.runs import board_plot, leaderboard
from tests.conftest import run_cli

GROUP = "cv5-cpu-cnn-0123abcd"


def _board(path, public: bool = False):
    """A flowers board (macro-F1): a single-split run scoring above a CV group, the group's refit,
    a CV-judged blend and a run not scored yet."""
    leaderboard.update(
        path, "lucky-split", kind="run", val_macro_f1=0.96, time="2026-11-01T00:00:00Z", image_size=192
    )
    leaderboard.update(
        path,
        GROUP,
        kind="cv",
        val_macro_f1=0.95,
        cv_score=0.95,
        cv_spread=0.004,
        folds=5,
        time="2026-11-02T00:00:00Z",
        members=f"5 folds: {' '.join(f'fold-{i}' for i in range(5))}",
    )
    leaderboard.update(
        path,
        "refit-run",
        kind="refit",
        cv_score=0.95,
        cv_spread=0.004,
        folds=5,
        time="2026-11-03T00:00:00Z",
        members=f"refit of {GROUP} to epoch 7",
    )
    leaderboard.update(
        path,
        "cv-blend",
        kind="ensemble",
        val_macro_f1=0.94,
        cv_score=0.94,
        folds=3,
        time="2026-11-04T00:00:00Z",
    )
    leaderboard.update(path, "not-scored", kind="run", time="2026-11-05T00:00:00Z")
    if public:
        leaderboard.update(path, "lucky-split", public_score=0.91)
        leaderboard.update(path, "refit-run", public_score=0.949)
        leaderboard.update(path, "not-scored", public_score=0.5)  # no offline score: off the second panel
    return leaderboard.read(path)


def test_cv_rows_rank_above_single_splits_and_each_says_how_it_was_judged(tmp_path, spec):
    """A lucky val split (0.96) ranks below every CV score, however much lower (0.94): a score of
    every labelled row out of fold is worth more than one of a few hundred."""
    shown = leaderboard.ranked(_board(tmp_path / leaderboard.BOARD), spec).set_index("entry")
    assert shown.index.tolist() == [GROUP, "refit-run", "cv-blend", "lucky-split", "not-scored"]
    assert shown["rank"].tolist() == [1, 2, 3, 4, 5]
    assert shown["judged"].tolist() == [
        "5-fold CV",
        f"refit (CV of {GROUP})",
        "3-fold CV",
        "single split",
        "",
    ]
    assert shown["macro_f1"].tolist() == ["0.9500 ± 0.0040", "0.9500 ± 0.0040", "0.9400", "0.9600", ""]


def test_a_cv_score_outranks_a_val_score_by_the_same_number_whatever_the_order_of_rows(tmp_path, spec):
    board = tmp_path / leaderboard.BOARD
    leaderboard.update(board, "cv-group", kind="cv", val_macro_f1=0.5, cv_score=0.97, folds=5)
    leaderboard.update(board, "run", kind="run", val_macro_f1=0.9)
    # The CV row's own score column wins over a stale val value: CV is what it is ranked by.
    assert leaderboard.ranked(leaderboard.read(board), spec)["entry"].tolist() == ["cv-group", "run"]


def test_a_lower_is_better_metric_ranks_the_smallest_cv_first_then_val(tmp_path):
    board = tmp_path / "leaderboard-dogs-vs-cats.csv"
    leaderboard.update(board, "run", kind="run", val_log_loss=0.20)
    leaderboard.update(board, "cv", kind="cv", val_log_loss=0.25, cv_score=0.25, cv_spread=0.01, folds=4)
    leaderboard.update(board, "refit", kind="refit", cv_score=0.18, folds=4, members="refit of g to epoch 3")
    shown = leaderboard.ranked(leaderboard.read(board), load_spec("dogs-vs-cats"))
    assert shown["entry"].tolist() == ["refit", "cv", "run"]
    assert shown["log_loss"].tolist() == ["0.1800", "0.2500 ± 0.0100", "0.2000"]


def test_the_printed_board_warns_that_single_split_scores_flatter_only_when_it_shows_one(tmp_path, spec):
    table = _board(tmp_path / leaderboard.BOARD)
    text = leaderboard.board_text(table, spec)
    assert text.splitlines()[-1].startswith("macro-F1: CV rows, ranked first, are scored on out-of-fold")
    assert "single-split scores come from one val split and flatter" in text
    assert "0.9500 ± 0.0040" in text and f"refit (CV of {GROUP})" in text
    only_cv = table[table["entry"] != "lucky-split"]
    assert "flatter" not in leaderboard.board_text(only_cv, spec)
    assert "flatter" not in leaderboard.board_text(table, spec, top=0)  # the single split is not shown


def test_an_old_board_without_the_cv_columns_still_reads_prints_and_plots(tmp_path, spec):
    board = tmp_path / leaderboard.BOARD
    old = pd.DataFrame(
        [
            {"entry": "a", "kind": "run", "time": "2026-10-01T00:00:00Z", "val_macro_f1": 0.8, "epochs": 3},
            {"entry": "b", "kind": "ensemble", "time": "2026-10-02T00:00:00Z", "val_macro_f1": 0.85},
        ]
    )
    old.to_csv(board, index=False)
    table = leaderboard.read(board)
    shown = leaderboard.ranked(table, spec)
    assert shown["entry"].tolist() == ["b", "a"] and shown["judged"].tolist() == ["single split"] * 2
    assert shown["macro_f1"].tolist() == ["0.8500", "0.8000"]
    assert leaderboard.ranked(old, spec)["entry"].tolist() == ["b", "a"]  # a bare table, not read(): same
    assert "flatter" in leaderboard.board_text(table, spec)
    board_plot.plot(old, tmp_path / "old.png", spec)
    assert _png_size(tmp_path / "old.png")[0] == 8 * 90


def _png_size(path) -> tuple[int, int]:
    """A PNG's width and height in pixels, from its header."""
    return struct.unpack(">II", path.read_bytes()[16:24])


@pytest.mark.parametrize("public", [False, True])
def test_the_plot_adds_the_offline_against_public_panel_once_kaggle_has_scored(
    tmp_path, public, monkeypatch, spec
):
    drawn = []
    save = board_plot.save_figure
    monkeypatch.setattr(
        board_plot, "save_figure", lambda fig, *a, **k: (drawn.append(fig), save(fig, *a, **k))
    )
    table = _board(tmp_path / leaderboard.BOARD, public=public)
    board_plot.plot(table, tmp_path / "board.png", spec)
    width, height = _png_size(tmp_path / "board.png")
    assert (width, height) == ((16 if public else 8) * 90, 4 * 90)
    axes = drawn[0].axes
    assert len(axes) == (2 if public else 1)
    if public:  # each marker family's points are (offline score, public score); the unscored row is absent
        against = axes[1]
        points = {c.get_label(): c.get_offsets().tolist() for c in against.collections}
        assert points == {"single split": [[0.96, 0.91]], "refit": [[0.95, 0.949]]}
        assert {c.get_marker() for c in against.lines} == {"None"} and against.lines[0].get_label() == "y = x"
        diagonal = against.lines[0].get_xydata()
        assert (diagonal[:, 0] == diagonal[:, 1]).all() and diagonal[0, 0] < 0.91 and diagonal[1, 0] > 0.96


def test_the_cli_prints_the_cv_board_and_its_footer(tmp_path):
    subs = tmp_path / "submissions"
    _board(subs / leaderboard.BOARD, public=True)
    result = run_cli("leaderboard", "--submissions-dir", str(subs))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "judged" in lines[0] and "5-fold CV" in lines[1] and "lucky-split" in lines[4]
    assert "flatter the recipes tuned on it" in lines[-1]
    assert _png_size(subs / leaderboard.PLOT)[0] == 16 * 90


def test_the_closing_summary_reports_a_cv_groups_and_a_refits_cv_not_a_val_score(tmp_path, spec):
    from pipeline.runs.report import closing_summary

    _board(tmp_path / leaderboard.BOARD)

    def summary(entry: str) -> list[str]:
        return closing_summary(
            tmp_path, "flowers", spec, {"entry": entry}, tmp_path / "s.csv", 3, None, False
        ).splitlines()

    assert summary(GROUP)[2:4] == [
        "  ran      CV group of 5 folds: fold-0 fold-1 fold-2 fold-3 fold-4",
        "  scored   macro-F1 0.9500 ± 0.0040 by 5-fold CV, each row scored by a fold model trained on "
        "the other 4/5; submitted: the 5 fold models' mean, rank 1 of 5 on the offline leaderboard",
    ]
    assert summary("refit-run")[2:4] == [
        f"  ran      refit of {GROUP} to epoch 7",
        f"  scored   macro-F1 0.9500 ± 0.0040 by refit (CV of {GROUP}), each row scored by a fold model "
        "trained on the other 4/5; submitted: one model refitted on all of them, rank 2 of 5 on the offline "
        "leaderboard",
    ]
    assert (
        summary("lucky-split")[3] == "  scored   val macro-F1 0.9600, rank 4 of 5 on the offline leaderboard"
    )
