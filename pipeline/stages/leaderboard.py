"""Leaderboard stage: print a competition's offline leaderboard ranked by its metric (the CV score
where there is one, else val), after pulling the public scores of your Kaggle submissions
(`--sync`), and plot it beside the board. The board itself is pipeline/runs/leaderboard.py's.

`--compare A B` prints instead what the board cannot say: whether run (or CV group) B is ahead of
A beyond the noise of the rows both held out, from one bootstrap that draws the same rows for both
(pipeline/cv/compare.py). Two rows' intervals on the board overlap long after that is clear."""

from __future__ import annotations

import argparse
import logging

from pipeline.core.errors import PetalsError
from pipeline.runs.board_plot import plot
from pipeline.runs.leaderboard import board_file, board_text, read, sync
from pipeline.stages import arguments

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    arguments.add_submissions_dir(parser, help="the leaderboard's folder")
    parser.add_argument(
        "--sync", action="store_true", help="first pull the public scores of your Kaggle submissions"
    )
    arguments.add_competition(parser)
    parser.add_argument("--slug", default=None, help="Kaggle competition slug (default: the spec's first)")
    parser.add_argument("--top", type=int, default=20, help="rows to print")
    parser.add_argument(
        "--compare", nargs=2, metavar=("A", "B"), default=None,
        help="two run or CV group ids (or dirs): B's score less A's on the rows both held out, paired",
    )  # fmt: skip
    arguments.add_runs_dir(parser)
    arguments.add_data_dir(parser, help="the fetched data the runs held rows out of (with --compare)")


def run(args: argparse.Namespace) -> None:
    from pipeline.tasks.competitions import load_competition

    if args.compare:
        from pipeline.cv.compare import compare, runs_named

        runs, competition = runs_named(args.runs_dir, tuple(args.compare))
        print(compare(runs, load_competition(competition).spec, args.data_dir).line())
        return

    spec = load_competition(args.competition).spec
    board = board_file(args.submissions_dir, spec.name)
    if args.sync:
        slug = args.slug or spec.default_slug
        matched = sync(board, slug)
        log.info("leaderboard: %d row(s) matched to Kaggle submissions of %s", matched, slug)
    table = read(board)
    if table.empty:
        raise PetalsError(f"{board}: no entries yet; `make evaluate` records a run")
    print(board_text(table, spec, args.top))
    plot(table, board.with_suffix(".png"), spec)
    log.info("leaderboard: %d entries; plot in %s", len(table), board.with_suffix(".png"))
