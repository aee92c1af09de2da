"""Ensemble stage: blend runs' saved class probabilities, score the blend on val, write its submission.

`--runs a b --weights 0.6 0.4` averages the members' val and test probabilities with those
weights (equal when none are given; they need not sum to 1). `--search` picks the weights
that do best on the competition's val metric by coordinate ascent on a 0.05 grid, starting from equal weights;
a score chosen on val flatters the blend, so the report marks it as searched. Members must
have been trained on the same data and scored on the same val images; their predictions are
made (or reused) as `evaluate` and `predict` would. The blend lives in
`runs/ensemble-<hash>/` like a run, with its own leaderboard row and `submissions/` CSV.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging

import numpy as np

from pipeline.core import arguments
from pipeline.core.errors import PetalsError
from pipeline.core.rundir import RunDir
from pipeline.cv.blend import blend, search_weights

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from pipeline.core import device

    parser.add_argument("--runs", nargs="+", required=True, help="run ids or run dirs to blend")
    parser.add_argument("--weights", nargs="+", type=float, default=None, help="one weight per run")
    parser.add_argument("--search", action="store_true", help="search the weights on the val metric")
    parser.add_argument(
        "--name", default=None, help="ensemble id (default: ensemble-<hash of runs and weights>)"
    )
    arguments.add_tta(parser)
    arguments.add_data_dir(parser)
    arguments.add_runs_dir(parser)
    arguments.add_submissions_dir(parser)
    device.add_arguments(parser, tpu=False)


def run(args: argparse.Namespace) -> None:
    from competition import load_spec
    from pipeline.core import device, leaderboard
    from pipeline.core.rundir import finished_run
    from pipeline.core.submission_files import write_submission
    from pipeline.modeling.inference import Predictions, check_same_data, predict_split

    if len(args.runs) < 2:
        raise PetalsError(f"--runs {' '.join(args.runs)}: an ensemble blends at least two runs")
    if len(set(args.runs)) != len(args.runs):
        raise PetalsError(f"--runs {' '.join(args.runs)}: a run is listed twice")
    if args.weights is not None and len(args.weights) != len(args.runs):
        raise PetalsError(f"--weights: {len(args.weights)} weight(s) for {len(args.runs)} run(s)")
    if args.weights is not None and (min(args.weights) < 0 or sum(args.weights) <= 0):
        raise PetalsError(f"--weights {args.weights}: need weights >= 0 with a positive sum")
    platform = device.pick_from_args(args)  # before Keras is imported: it fixes the backend
    log.info("device: %s", platform.describe("float32"))
    run_dirs = [finished_run(args.runs_dir, name) for name in args.runs]
    competitions = {run.competition() for run in run_dirs}
    if len(competitions) > 1:
        raise PetalsError(
            f"--runs: the runs belong to different competitions ({', '.join(sorted(competitions))})"
        )
    spec = load_spec(competitions.pop())
    manifest = check_same_data(run_dirs[0], args.data_dir)
    for run_dir in run_dirs[1:]:
        check_same_data(run_dir, args.data_dir)
    val = [predict_split(d, args.data_dir, "val", args.tta, platform) for d in run_dirs]
    test = [predict_split(d, args.data_dir, "test", args.tta, platform) for d in run_dirs]
    val = aligned(val, run_dirs, "val")
    test = aligned(test, run_dirs, "test")

    weights = np.ones(len(run_dirs)) if args.weights is None else np.asarray(args.weights, float)
    weights = weights / weights.sum()
    metric, key = spec.metric, spec.score_key
    if args.search:  # the very weights whose blend it scored, so the reported score is that one
        weights = search_weights([v.probabilities for v in val], val[0].labels, weights, metric)
    members = {d.name: metric.score(v.labels, v.probabilities) for d, v in zip(run_dirs, val, strict=True)}
    val_blend = Predictions(val[0].ids, blend([v.probabilities for v in val], weights), val[0].labels)
    test_blend = Predictions(test[0].ids, blend([t.probabilities for t in test], weights))
    score = metric.score(val_blend.labels, val_blend.probabilities)
    accuracy = float((val_blend.predicted == val_blend.labels).mean())

    name = args.name or ensemble_id([d.name for d in run_dirs], weights)
    out = RunDir(args.runs_dir / name)
    out.path.mkdir(parents=True, exist_ok=True)
    val_blend.save(out.predictions("val"))
    test_blend.save(out.predictions("test"))
    described = " ".join(f"{d.name}:{w:.3f}" for d, w in zip(run_dirs, weights, strict=True))
    out.write_json(
        RunDir.METRICS,
        {
            "kind": "ensemble",
            "members": {d.name: float(w) for d, w in zip(run_dirs, weights, strict=True)},
            "metric": metric.name,
            f"member_{key}": members,
            "weights_searched_on_val": args.search,
            key: score,
            "val_accuracy": accuracy,
            "images": len(val_blend.ids),
        },
    )
    path = write_submission(
        args.submissions_dir,
        name,
        test_blend.ids,
        spec.task.submission_values(test_blend.probabilities, spec),
        spec,
        args.data_dir,
        manifest,
        score,
        out.path,
    )
    leaderboard.update(
        leaderboard.board_file(args.submissions_dir, spec.name),
        name,
        kind="ensemble",
        time=leaderboard.now(),
        competition=spec.name,
        data_source=manifest.get("source"),
        data_fingerprint=manifest.get("fingerprint"),
        members=described + (" (searched on val)" if args.search else ""),
        **{"val_accuracy": round(accuracy, 5), key: round(score, 5)},  # one column for accuracy
        submission=str(path),
    )
    best_member = (max if metric.greater_is_better else min)(members.values())
    print(
        f"{name}: val {metric.title} {score:.4f} (best member {best_member:.4f}), accuracy {accuracy:.4f}; "
        f"weights {described}{' searched on val' if args.search else ''} -> {path}"
    )


def aligned(predictions: list, run_dirs: list[RunDir], split: str) -> list:
    """Every member's predictions in the first member's id order; an error if the id sets differ."""
    first = predictions[0]
    ids = set(first.ids.tolist())
    for run_dir, other in zip(run_dirs[1:], predictions[1:], strict=True):
        if set(other.ids.tolist()) != ids:
            raise PetalsError(
                f"{run_dirs[0].name} and {run_dir.name} predicted different {split} images "
                "(another fold or data split): blend runs scored on the same split"
            )
    return [first, *(p.by_ids(first.ids) for p in predictions[1:])]


def ensemble_id(names: list[str], weights: np.ndarray) -> str:
    key = json.dumps([names, [round(float(w), 4) for w in weights]])
    return "ensemble-" + hashlib.sha256(key.encode()).hexdigest()[:8]
