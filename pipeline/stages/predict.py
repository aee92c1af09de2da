"""Predict stage: a run's test-set probabilities (optionally with TTA) and its submission CSV.

Writes `test_predictions.npz` (ids, probabilities; `test_predictions-ttaN.npz` with TTA) into the run dir and
`submissions/<run-id>.csv` in Kaggle's exact format (the competition's header, every test id of
the sample submission once, a class id in range or P(class 1) per row), checked before it
replaces any earlier file. Beside it, `<run-id>.json` records what the file was made from (data source
and fingerprint), which `submit` reads to refuse uploading predictions of the embedded
synthetic data to the real competition.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.core import options
from pipeline.core.options import ScoreOptions
from pipeline.runs.submission_files import write_submission
from pipeline.stages import arguments

if TYPE_CHECKING:
    from pipeline.tasks.competitions import Competition

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    arguments.add_run_arguments(parser)
    arguments.add_tta(parser)
    arguments.add_submissions_dir(parser)


def run(args: argparse.Namespace, competition: Competition | None = None) -> None:
    predict(options.from_args(ScoreOptions, args), competition=competition)


def predict(opts: ScoreOptions, competition: Competition | None = None) -> Path:
    """The test predictions of the finished run `opts` names, and its submission CSV (returned).
    `competition`: the options' config's, where the caller resolved it (`arguments.named_run`)."""
    from pipeline.core import device
    from pipeline.modeling.inference import check_same_data, predict_split
    from pipeline.runs import leaderboard, tracking

    platform = device.pick_from_args(opts)  # before Keras is imported: it fixes the backend
    log.info("device: %s", platform.describe("float32"))
    run, competition = arguments.named_run(opts, platform, competition)
    spec = competition.spec
    manifest = check_same_data(run, opts.data_dir)
    test = predict_split(run, competition, opts.data_dir, "test", opts.tta, platform)
    task = competition.task
    val = (
        predict_split(run, competition, opts.data_dir, "val", opts.tta, platform)
        if task.decides_on_val
        else None
    )
    if not platform.hosts.writer:  # process 0 writes the submission; the others predicted their share
        return opts.submissions_dir / f"{run.name}.csv"
    metrics = run.metrics()
    score = metrics.get("evaluation", metrics).get(spec.score_key)
    if val is not None and "evaluation" not in metrics:  # what evaluate would say of this decision
        from pipeline.data.groups import held_out_groups

        grouped = held_out_groups(opts.data_dir, spec, val.ids)  # thresholds judged out of group
        score = task.evaluate(val.labels, val.probabilities, spec, grouped).score
    path = write_submission(
        opts.submissions_dir,
        run.name,
        test.ids,
        task.submission_values(test.probabilities, spec, val),
        spec,
        opts.data_dir,
        manifest,
        score,
        run.path,
    )
    board = leaderboard.board_file(opts.submissions_dir, spec.name)
    leaderboard.update(
        board,
        run.name,
        # A run predicted before it was evaluated: its training scores until evaluate runs.
        defaults={
            "time": leaderboard.now(),
            "val_accuracy": metrics.get("val_accuracy"),
            spec.score_key: score,  # last: the same column for an accuracy competition
        },
        **leaderboard.run_fields(run),
        submission=str(path),
    )
    tracking.predicted(run, spec.name, path, board, opts.track)
    print(f"{run.name}: {len(test.ids)} test predictions (TTA {opts.tta}) -> {path}")
    return path
