"""Ensemble stage: blend runs' or CV groups' saved class probabilities, score the blend, write its submission.

Single runs: `--runs a b --weights 0.6 0.4` averages the members' val and test probabilities with
those weights (equal when none are given; they need not sum to 1). `--search` picks the weights
that do best on the competition's val metric by coordinate ascent on a 0.05 grid, starting from
the given (or equal) weights. A score chosen on val flatters the blend, so val is cross-fitted:
dealt in CROSS_FOLDS parts (stratified, whole groups), each part blended by weights searched on
the others, and the blend is scored on those rows; the test set gets the weights searched on all
of val. A member that is a single run kept the epoch its val rows chose (`val_epochs`): each part
is blended with every such member at the epoch the other parts chose too, searched or not. Where
val cannot be dealt so (rows of several labels), the choices made on all of val score it, and the
report and the leaderboard row say so. Members must have been trained on the
same data and scored on the same val images; their predictions are made (or reused) as
`evaluate` and `predict` would.

CV groups (`runs/cv5-...`, `pipeline.cv`): every member a group dealt the same fold table, the
blend is judged out of fold (`pipeline.cv.blend`): `--method equal|search|stack` (`--search` is
`--method search`), each fold's rows blended by a choice made on the other folds. The reported
score is the chosen method's OOF score; every method's is recorded beside it. The test set gets
the choice refit on every row, applied to the groups' fold-averaged test predictions
(`pipeline/stages/ensemble_groups.py`).

The blend lives in `runs/ensemble-<hash>/` like a run, with its own leaderboard row and
`submissions/` CSV (and with `--track mlflow` an MLflow run: its members, method and row).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import numpy as np

from pipeline.core import options
from pipeline.core.errors import PetalsError
from pipeline.core.options import EnsembleOptions
from pipeline.core.rundir import RunDir
from pipeline.cv.blend import blend, search_weights
from pipeline.cv.crossfit import CROSS_FOLDS
from pipeline.cv.members import aligned, blend_dir, ensemble_id, group_dir, record_blend
from pipeline.modeling.inference import Predictions
from pipeline.stages import arguments
from pipeline.tasks.competitions import task_of

log = logging.getLogger(__name__)

METHODS = ("equal", "search", "stack")
SEARCHED = " searched on val, the very rows it is scored on: an optimistic score"
CROSS_FITTED = " searched on val, scored cross-fitted (each fifth blended by weights searched on the rest)"
EPOCHS_CROSSED = "; each member a run at the epoch the other fifths chose"
EPOCHS_CHOSEN = "; its members' epochs chosen on val, the very rows it is scored on"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from pipeline.core import device

    parser.add_argument(
        "--runs", nargs="+", required=True, help="run ids, CV group ids or their dirs to blend"
    )
    parser.add_argument("--weights", nargs="+", type=float, default=None, help="one weight per run")
    parser.add_argument("--search", action="store_true", help="search the weights (same as --method search)")
    parser.add_argument(
        "--method",
        choices=METHODS,
        default=None,
        help="equal weights (default), searched weights, or stacking (CV groups only): judged out of fold",
    )
    parser.add_argument(
        "--name", default=None, help="ensemble id (default: ensemble-<hash of runs and weights>)"
    )
    arguments.add_tta(parser)
    arguments.add_data_dir(parser)
    arguments.add_runs_dir(parser)
    arguments.add_submissions_dir(parser)
    arguments.add_track(parser)
    device.add_arguments(parser, tpu=False)


def run(args: argparse.Namespace) -> None:
    ensemble(options.from_args(EnsembleOptions, args))


def ensemble(opts: EnsembleOptions) -> Path:
    """Blend the runs or CV groups `opts.runs` name; the blend's submission CSV."""
    method = chosen_method(opts)
    if len(opts.runs) < 2:
        raise PetalsError(f"--runs {' '.join(opts.runs)}: an ensemble blends at least two runs")
    if len(set(opts.runs)) != len(opts.runs):
        raise PetalsError(f"--runs {' '.join(opts.runs)}: a run is listed twice")
    if opts.weights is not None and len(opts.weights) != len(opts.runs):
        raise PetalsError(f"--weights: {len(opts.weights)} weight(s) for {len(opts.runs)} run(s)")
    if opts.weights is not None and (min(opts.weights) < 0 or sum(opts.weights) <= 0):
        given = " ".join(f"{w:g}" for w in opts.weights)
        raise PetalsError(f"--weights {given}: need weights >= 0 with a positive sum")
    groups = [group_dir(opts.runs_dir, name) for name in opts.runs]
    if all(groups):
        from pipeline.stages.ensemble_groups import blend_groups  # it reads this module's helpers

        return blend_groups(opts, groups, method)
    if any(groups):
        group = next(g for g in groups if g).name
        single = next(n for n, g in zip(opts.runs, groups, strict=True) if not g)
        raise PetalsError(
            f"--runs: {group} is a CV group and {single} a single run: "
            "blend groups with groups, runs with runs"
        )
    if method == "stack":
        raise PetalsError(
            "--method stack: a stack is judged out of fold, so it blends CV groups (FOLDS=K), not single runs"
        )
    return blend_runs(opts, method == "search")


def chosen_method(opts: EnsembleOptions) -> str:
    """`--method`, or search for `--search`; refused when they disagree or weights are given to a search."""
    if opts.method not in (None, *METHODS):
        raise PetalsError(f"--method {opts.method}: one of {', '.join(METHODS)}")
    if opts.search and opts.method not in (None, "search"):
        raise PetalsError(f"--search and --method {opts.method}: pick one method")
    method = "search" if opts.search else opts.method or "equal"
    if method == "stack" and opts.weights is not None:
        raise PetalsError("--weights with --method stack: a stack fits its own meta-model, not weights")
    return method


def blend_runs(opts: EnsembleOptions, search: bool) -> Path:
    """Blend single runs on their val split (the weights searched there when `search`)."""
    from pipeline.core import device
    from pipeline.data.groups import held_out_groups

    platform = device.pick_from_args(opts)  # before Keras is imported: it fixes the backend
    log.info("device: %s", platform.describe("float32"))
    spec, manifest, run_dirs, val, test, choices = _members(opts, platform)
    weights = np.ones(len(run_dirs)) if opts.weights is None else np.asarray(opts.weights, float)
    weights = weights / weights.sum()
    metric = spec.metric
    task = task_of(spec)
    grouped = held_out_groups(opts.data_dir, spec, val[0].ids)  # thresholds judged out of group
    # A member that is a single run kept the epoch its val rows chose: the blend's score crosses
    # that choice too, as it does the weights' search.
    chose = any(len(c) > 1 for c in choices)
    crossed = part = None
    if search or chose:
        part = blend_parts(val, grouped)
        weights, crossed = cross_fitted_blend(val, weights, metric, grouped, choices, search, part)
    # Each scored as its submission decides, the way evaluate scores a run (a multi-label blend: its
    # thresholds, cross-fitted on val; a run's epoch choice, cross-fitted), so members, blend and
    # board rows read alike, on the same parts.
    members = {
        d.name: task.evaluate(v.labels, _member_judged(v, c, part, metric), spec, grouped).score
        for d, v, c in zip(run_dirs, val, choices, strict=True)
    }
    blended = blend([v.probabilities for v in val], weights) if crossed is None else crossed
    val_blend = Predictions(val[0].ids, blended, val[0].labels)
    test_blend = Predictions(test[0].ids, blend([t.probabilities for t in test], weights))
    score = task.evaluate(val_blend.labels, val_blend.probabilities, spec, grouped).score
    accuracy = task_of(spec).scores(val_blend.probabilities, val_blend.labels)["accuracy"]
    name = opts.name or ensemble_id([d.name for d in run_dirs], weights)
    described = " ".join(f"{d.name}:{w:.3f}" for d, w in zip(run_dirs, weights, strict=True))
    path = _write_run_blend(
        opts, spec, manifest, name, val_blend, test_blend,
        score,
        metrics={
            "kind": "ensemble",
            "members": {d.name: float(w) for d, w in zip(run_dirs, weights, strict=True)},
            "metric": metric.name,
            f"member_{spec.score_key}": members,
            "weights_searched_on_val": search,
            "judged": _judged(search, chose, crossed is not None),
            spec.score_key: score,
            "val_accuracy": accuracy,
            "images": len(val_blend.ids),
        },
        described=described + _described(search, chose, crossed is not None),
    )  # fmt: skip
    best_member = (max if metric.greater_is_better else min)(members.values())
    said = "" if not search else CROSS_FITTED if crossed is not None else SEARCHED
    if chose:
        said += EPOCHS_CROSSED if crossed is not None else EPOCHS_CHOSEN
    print(
        f"{name}: val {metric.title} {score:.4f} (best member {best_member:.4f}), accuracy {accuracy:.4f}; "
        f"weights {described}{said} -> {path}"
    )
    return path


def cross_fitted_blend(
    val: list[Predictions],
    start: np.ndarray,
    metric,
    grouped: np.ndarray | None,
    choices: list[list[np.ndarray]] | None = None,
    search: bool = True,
    part: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """(the weights that blend the test set: searched on all of val from `start` with `search`,
    else `start`; val's rows blended part by part, each of CROSS_FOLDS parts by what was chosen on
    the others: the weights searched there, and each member's epoch where it is a single run that
    chose one (`choices`: each member's candidates, `val_epochs.choice`), what the blend is scored
    on). The parts are stratified and keep groups whole. None for the second where val cannot be
    dealt so (rows of several labels; fewer than 2 rows or groups): then the choices' own rows.
    `part`: the parts `blend_parts` dealt, where the caller dealt them already."""
    from pipeline.cv.blend import check_inputs
    from pipeline.cv.crossfit import blend_oof

    members, labels = [v.probabilities for v in val], np.asarray(val[0].labels)
    choices = choices or [[m] for m in members]
    weights = search_weights(members, labels, start, metric) if search else np.asarray(start, float)
    part = blend_parts(val, grouped) if part is None else part
    if part is None:
        return weights, None
    check_inputs(members, labels, part)

    def weigh(rows: list[np.ndarray], truth: np.ndarray) -> np.ndarray:
        return search_weights(rows, truth, start, metric) if search else weights

    return weights, blend_oof(choices, labels, part, metric, weigh)


def blend_parts(val: list[Predictions], grouped: np.ndarray | None) -> np.ndarray | None:
    """The part of each val row a blend of runs is cross-fitted on (`crossfit.val_parts`); None
    for rows of several labels, or fewer than 2 rows or groups."""
    from pipeline.cv.crossfit import val_parts

    labels = np.asarray(val[0].labels)
    several_labels = labels.ndim == 2 and labels.dtype.kind != "f"
    return None if several_labels else val_parts(val[0].ids, labels, grouped)


def _member_judged(member: Predictions, candidates: list[np.ndarray], part: np.ndarray | None, metric):
    """A member's val rows as the blend scores it: each part at the epoch the others chose, where it
    is a run that chose one and val has parts; else its kept weights' predictions."""
    from pipeline.cv.crossfit import pick_oof

    if part is None or len(candidates) < 2:
        return member.probabilities
    return pick_oof(candidates, member.labels, part, metric)[1]


def _judged(search: bool, chose: bool, crossed: bool) -> str:
    if not (search or chose):
        return "on val"
    if crossed:
        on = " and ".join(
            w for w, by in (("weights searched", search), ("members' epochs chosen", chose)) if by
        )
        return f"on val cross-fitted: each of {CROSS_FOLDS} parts blended with {on} on the others"
    if not chose:
        return "on val, the rows the weights were searched on"
    return "on val, the rows its members' epochs were chosen on" + (
        " and its weights searched" if search else ""
    )


def _described(search: bool, chose: bool, crossed: bool) -> str:
    if not (search or chose):
        return ""
    what = "searched on val" if search else "members' epochs chosen on val"
    return f" ({what}, scored cross-fitted)" if crossed else f" ({what}: scored on the same rows)"


def _members(opts: EnsembleOptions, platform):
    """The runs' competition, data manifest and run dirs, and their val and test predictions, each
    split aligned on the same ids; runs of two competitions or of other data are refused."""
    from pipeline.core.rundir import finished_run
    from pipeline.modeling import val_epochs
    from pipeline.modeling.inference import check_same_data, predict_split
    from pipeline.tasks.competitions import load_competition

    run_dirs = [finished_run(opts.runs_dir, name) for name in opts.runs]
    competitions = {run.competition() for run in run_dirs}
    if len(competitions) > 1:
        raise PetalsError(
            f"--runs: the runs belong to different competitions ({', '.join(sorted(competitions))})"
        )
    competition = load_competition(competitions.pop())
    manifest = check_same_data(run_dirs[0], opts.data_dir)
    for run_dir in run_dirs[1:]:
        check_same_data(run_dir, opts.data_dir)
    val = [predict_split(d, competition, opts.data_dir, "val", opts.tta, platform) for d in run_dirs]
    test = [predict_split(d, competition, opts.data_dir, "test", opts.tta, platform) for d in run_dirs]
    key = competition.spec.score_key
    chosen = [
        val_epochs.choice(d, v.labels, v.probabilities, key) for d, v in zip(run_dirs, val, strict=True)
    ]
    own, val = val, aligned(val, run_dirs, "val")
    candidates = [  # each member's, in the blend's row order: every epoch it scored, or its one prediction
        [v.probabilities] if found is None else [_reordered(o, c, val[0].ids) for c in found[1]]
        for v, o, found in zip(val, own, chosen, strict=True)
    ]
    return competition.spec, manifest, run_dirs, val, aligned(test, run_dirs, "test"), candidates


def _reordered(member: Predictions, probabilities: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """`probabilities`, in `member`'s row order, put in the order of `ids`."""
    return Predictions(member.ids, probabilities, member.labels).by_ids(ids).probabilities


def _write_run_blend(
    opts, spec, manifest, name, val_blend, test_blend, score: float, metrics: dict, described: str
) -> Path:
    """The blend's run dir (its predictions and metrics), its submission and its leaderboard row."""
    from pipeline.runs.submission_files import write_submission

    out = blend_dir(opts.runs_dir, name)
    val_blend.save(out.predictions("val"))
    test_blend.save(out.predictions("test"))
    out.write_json(RunDir.METRICS, metrics)
    values = task_of(spec).submission_values(test_blend.probabilities, spec, val_blend)
    path = write_submission(
        opts.submissions_dir, name, test_blend.ids, values, spec, opts.data_dir, manifest, score, out.path
    )
    record_blend(opts, spec, manifest, name, out, path, described, metrics["val_accuracy"], score)
    return path
