"""Ensemble stage: blend runs' or CV groups' saved class probabilities, score the blend, write its submission.

Single runs: `--runs a b --weights 0.6 0.4` averages the members' val and test probabilities with
those weights (equal when none are given; they need not sum to 1). `--search` picks the weights
that do best on the competition's val metric by coordinate ascent on a 0.05 grid, starting from
the given (or equal) weights. A score chosen on val flatters the blend, so val is cross-fitted:
dealt in CROSS_FOLDS parts (stratified, whole groups), each part blended by weights searched on
the others, and the blend is scored on those rows; the test set gets the weights searched on all
of val. Where val cannot be dealt so (rows of several labels), the weights searched on all of val
score it, and the report and the leaderboard row say so. Members must have been trained on the
same data and scored on the same val images; their predictions are made (or reused) as
`evaluate` and `predict` would.

CV groups (`runs/cv5-...`, `pipeline.cv`): every member a group dealt the same fold table, the
blend is judged out of fold (`pipeline.cv.blend`): `--method equal|search|stack` (`--search` is
`--method search`), each fold's rows blended by a choice made on the other folds. The reported
score is the chosen method's OOF score; every method's is recorded beside it. The test set gets
the choice refit on every row, applied to the groups' fold-averaged test predictions.

The blend lives in `runs/ensemble-<hash>/` like a run, with its own leaderboard row and
`submissions/` CSV (and with `--track mlflow` an MLflow run: its members, method and row).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
from pathlib import Path

import numpy as np

from pipeline.core import options
from pipeline.core.errors import PetalsError
from pipeline.core.options import EnsembleOptions
from pipeline.core.rundir import RunDir
from pipeline.cv.blend import BlendResult, blend, search_weights
from pipeline.cv.members import Group, check_groups, group_config, group_dir, load_group, shared_folds
from pipeline.modeling.inference import Predictions
from pipeline.stages import arguments
from pipeline.tasks.competitions import task_of

log = logging.getLogger(__name__)

METHODS = ("equal", "search", "stack")
SEARCHED = " searched on val, the very rows it is scored on: an optimistic score"
CROSS_FITTED = " searched on val, scored cross-fitted (each fifth blended by weights searched on the rest)"
CROSS_FOLDS = 5  # val's parts for a searched blend's score
CAVEAT = "picking the best of these is itself a choice on those rows"


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
    spec, manifest, run_dirs, val, test = _members(opts, platform)
    weights = np.ones(len(run_dirs)) if opts.weights is None else np.asarray(opts.weights, float)
    weights = weights / weights.sum()
    metric = spec.metric
    task = task_of(spec)
    grouped = held_out_groups(opts.data_dir, spec, val[0].ids)  # thresholds judged out of group
    crossed = None
    if search:
        weights, crossed = cross_fitted_search(val, weights, metric, grouped)
    # Each scored as its submission decides, the way evaluate scores a run (a multi-label blend: its
    # thresholds, cross-fitted on val), so members, blend and board rows read alike.
    members = {
        d.name: task.evaluate(v.labels, v.probabilities, spec, grouped).score
        for d, v in zip(run_dirs, val, strict=True)
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
            "judged": _judged(search, crossed is not None),
            spec.score_key: score,
            "val_accuracy": accuracy,
            "images": len(val_blend.ids),
        },
        described=described + _described(search, crossed is not None),
    )  # fmt: skip
    best_member = (max if metric.greater_is_better else min)(members.values())
    said = "" if not search else CROSS_FITTED if crossed is not None else SEARCHED
    print(
        f"{name}: val {metric.title} {score:.4f} (best member {best_member:.4f}), accuracy {accuracy:.4f}; "
        f"weights {described}{said} -> {path}"
    )
    return path


def cross_fitted_search(
    val: list[Predictions], start: np.ndarray, metric, grouped: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray | None]:
    """(the weights searched on all of val, which blend the test set; val's rows blended part by
    part, each of CROSS_FOLDS parts by weights searched on the others: what the blend is scored
    on). The parts are stratified and keep groups whole. None for the second where val cannot be
    dealt so (rows of several labels; fewer than 2 rows or groups): then the weights' own rows."""
    from pipeline.cv.blend import check_inputs, weight_search_oof
    from pipeline.data import folds, targets

    members, labels = [v.probabilities for v in val], np.asarray(val[0].labels)
    ids = np.asarray(val[0].ids).astype(str)
    several_labels = labels.ndim == 2 and labels.dtype.kind != "f"
    # No more parts than the commonest class (or a number's bin) has rows: a stratified deal needs it
    common = 0 if several_labels else int(np.bincount(targets.strata(labels)).max())
    parts = min(CROSS_FOLDS, common, len(set(grouped)) if grouped is not None else len(ids))
    if several_labels or parts < 2:
        return search_weights(members, labels, start, metric), None
    table = folds.deal(ids, labels, parts, 0, None if grouped is None else np.asarray(grouped).astype(str))
    position = {i: n for n, i in enumerate(table.ids)}  # the table is in id order; val in its own
    part = table.folds[[position[i] for i in ids]]
    check_inputs(members, labels, part)
    found = weight_search_oof(members, labels, part, metric, start=start)
    return found.weights, found.oof


def _judged(search: bool, crossed: bool) -> str:
    if not search:
        return "on val"
    if crossed:
        return f"on val cross-fitted: each of {CROSS_FOLDS} parts blended by weights searched on the others"
    return "on val, the rows the weights were searched on"


def _described(search: bool, crossed: bool) -> str:
    if not search:
        return ""
    return (
        " (searched on val, scored cross-fitted)"
        if crossed
        else " (searched on val: scored on the same rows)"
    )


def _members(opts: EnsembleOptions, platform):
    """The runs' competition, data manifest and run dirs, and their val and test predictions, each
    split aligned on the same ids; runs of two competitions or of other data are refused."""
    from pipeline.core.rundir import finished_run
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
    return (
        competition.spec,
        manifest,
        run_dirs,
        aligned(val, run_dirs, "val"),
        aligned(test, run_dirs, "test"),
    )


def _write_run_blend(
    opts, spec, manifest, name, val_blend, test_blend, score: float, metrics: dict, described: str
) -> Path:
    """The blend's run dir (its predictions and metrics), its submission and its leaderboard row."""
    from pipeline.runs import leaderboard
    from pipeline.runs.submission_files import write_submission

    out = RunDir(opts.runs_dir / name)
    out.path.mkdir(parents=True, exist_ok=True)
    val_blend.save(out.predictions("val"))
    test_blend.save(out.predictions("test"))
    out.write_json(RunDir.METRICS, metrics)
    key = spec.score_key
    values = task_of(spec).submission_values(test_blend.probabilities, spec, val_blend)
    path = write_submission(
        opts.submissions_dir, name, test_blend.ids, values, spec, opts.data_dir, manifest, score, out.path
    )
    leaderboard.update(
        leaderboard.board_file(opts.submissions_dir, spec.name),
        name,
        kind="ensemble",
        time=leaderboard.now(),
        competition=spec.name,
        data_source=manifest.get("source"),
        data_fingerprint=manifest.get("fingerprint"),
        members=described,
        **{
            "val_accuracy": round(metrics["val_accuracy"], 5),
            key: round(score, 5),
        },  # one column for accuracy
        submission=str(path),
    )
    _tracked(opts, spec, manifest, out, path)
    return path


def _tracked(opts: EnsembleOptions, spec, manifest: dict, out: RunDir, submission: Path) -> None:
    """With TRACK=mlflow, the blend as a run of its own: its members, method and leaderboard row."""
    from pipeline.runs import leaderboard, tracking

    board = leaderboard.board_file(opts.submissions_dir, spec.name)
    tracking.ensemble_written(out, board, submission, opts.track, spec.name, manifest.get("fingerprint"))


# ----------------------------------------------------------------------------- CV groups


def fixed_weights(members, labels, folds, metric, tests, weights) -> BlendResult:
    """The given weights: nothing is fitted, so their OOF score is honest as it is."""
    from pipeline.cv.blend import fold_scores

    weights = np.asarray(weights, float) / np.sum(weights)
    oof = blend(members, weights)
    return BlendResult(
        kind="weights",
        oof=oof,
        score=float(metric.score(labels, oof)),
        fold_scores=fold_scores(oof, labels, folds, metric),
        test=blend(tests, weights),
        weights=weights,
    )


def blend_groups(opts: EnsembleOptions, dirs: list[RunDir], method: str) -> Path:
    """Blend CV groups out of fold by `method` (or the given weights) and write the ensemble."""
    from competition import load_spec
    from pipeline.cv.blend import compare
    from pipeline.data.groups import held_out_groups
    from pipeline.data.manifest import read_manifest

    if opts.weights is not None and method != "equal":
        raise PetalsError(f"--weights with --method {method}: the {method} fits its own blend out of fold")
    groups = [load_group(d) for d in dirs]
    manifest = read_manifest(opts.data_dir)
    check_groups(groups, manifest, opts.data_dir)
    spec = load_spec(group_config(groups[0]).competition)  # a name, or a competition file's path
    folds = shared_folds(groups, opts.data_dir, spec)
    labels = groups[0].oof.labels
    tests = aligned([g.test for g in groups], [g.run for g in groups], "test")
    members, test_members = [g.oof.probabilities for g in groups], [t.probabilities for t in tests]
    grouped = held_out_groups(opts.data_dir, spec, groups[0].oof.ids)  # a stack's inner CV: whole groups
    results = compare(members, labels, folds, spec.metric, test_members, needed=method, groups=grouped)
    chosen = results[method]
    if opts.weights is not None:
        chosen = fixed_weights(members, labels, folds, spec.metric, test_members, opts.weights)
    return write_group_ensemble(opts, spec, manifest, groups, tests[0].ids, results, chosen)


def group_metrics(spec, groups: list[Group], results: dict[str, BlendResult], chosen: BlendResult) -> dict:
    """The ensemble's metrics.json: the chosen blend's OOF score, every method's, what was fitted."""
    metric, key = spec.metric, spec.score_key
    labels = groups[0].oof.labels
    fold_weights = chosen.fold_weights or []
    return {
        "kind": "ensemble",
        "judged": "out of fold",
        "method": chosen.kind,
        "members": {
            g.run.name: None if chosen.weights is None else float(w) for g, w in _weighted(groups, chosen)
        },
        "metric": metric.name,
        f"member_{key}": {g.run.name: float(metric.score(labels, g.oof.probabilities)) for g in groups},
        "methods": {kind: result.score for kind, result in results.items()},  # each out of fold
        key: chosen.score,  # the board's score column: the OOF score, as a CV group's
        "cv_score": chosen.score,
        "fold_scores": chosen.fold_scores,
        "fold_std": _spread(chosen),
        "fold_weights": [[float(w) for w in weights] for weights in fold_weights] or None,
        "stack_c": chosen.c,
        "fold_c": chosen.fold_c,
        "val_accuracy": task_of(spec).scores(chosen.oof, labels)["accuracy"],
        "examples": len(labels),
        "folds": len(chosen.fold_scores),
        "fold_table": groups[0].info.get("fold_table"),
    }


def write_group_ensemble(opts, spec, manifest: dict, groups, test_ids, results, chosen: BlendResult) -> Path:
    """`runs/ensemble-<hash>/` (metrics, OOF and test predictions), the submission and the board's row."""
    from pipeline.runs import leaderboard
    from pipeline.runs.submission_files import write_submission

    names = [g.run.name for g in groups]
    weights = np.asarray([] if chosen.weights is None else chosen.weights)
    name = opts.name or ensemble_id(names, weights, chosen.kind)
    out = RunDir(opts.runs_dir / name)
    out.path.mkdir(parents=True, exist_ok=True)
    oof = Predictions(
        groups[0].oof.ids, chosen.oof, groups[0].oof.labels, source=f"{chosen.kind} out of fold"
    )
    oof.save(out.predictions("oof"))
    Predictions(test_ids, chosen.test, source=chosen.kind).save(out.predictions("test"))
    metrics = group_metrics(spec, groups, results, chosen)
    out.write_json(RunDir.METRICS, metrics)
    values = task_of(spec).submission_values(chosen.test, spec, oof)
    path = write_submission(
        opts.submissions_dir, name, test_ids, values, spec, opts.data_dir, manifest, chosen.score, out.path
    )
    if chosen.weights is None:
        described = " + ".join(names) + f" stacked (C={chosen.c:g})"
    else:
        described = " ".join(f"{g.run.name}:{w:.3f}" for g, w in _weighted(groups, chosen))
    leaderboard.update(
        leaderboard.board_file(opts.submissions_dir, spec.name),
        name,
        kind="ensemble",
        time=leaderboard.now(),
        competition=spec.name,
        data_source=manifest.get("source"),
        data_fingerprint=manifest.get("fingerprint"),
        members=f"{described} ({chosen.kind}, judged out of fold)",
        **{"val_accuracy": round(metrics["val_accuracy"], 5), spec.score_key: round(chosen.score, 5)},
        cv_score=round(chosen.score, 5),
        cv_spread=round(metrics["fold_std"], 5),
        folds=metrics["folds"],
        submission=str(path),
    )
    _tracked(opts, spec, manifest, out, path)
    print(group_summary(name, spec, metrics, described, path))
    return path


def group_summary(name: str, spec, metrics: dict, described: str, path: Path) -> str:
    """One line: the chosen blend's OOF score and spread, every method's beside it, the caveat."""
    title = spec.metric.title
    methods = ", ".join(f"{kind} {score:.4f}" for kind, score in metrics["methods"].items())
    best = (max if spec.metric.greater_is_better else min)(metrics[f"member_{spec.score_key}"].values())
    return (
        f"{name}: OOF {title} {metrics['cv_score']:.4f} +- {metrics['fold_std']:.4f} by {metrics['method']} "
        f"over {metrics['examples']} examples in {metrics['folds']} folds (best member {best:.4f}); "
        f"every method out of fold: {methods} ({CAVEAT}); {described} -> {path}"
    )


def _weighted(groups: list[Group], chosen: BlendResult) -> list:
    weights = [None] * len(groups) if chosen.weights is None else chosen.weights
    return list(zip(groups, weights, strict=True))


def _spread(chosen: BlendResult) -> float:
    """The folds' standard deviation, as a CV group's `fold_std`."""
    return float(np.std(chosen.fold_scores, ddof=1)) if len(chosen.fold_scores) > 1 else 0.0


# ----------------------------------------------------------------------------- shared


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


def ensemble_id(names: list[str], weights: np.ndarray, method: str | None = None) -> str:
    """Same members and weights (and method, for CV groups) -> the same ensemble id."""
    key = [names, [round(float(w), 4) for w in weights]] + ([method] if method else [])
    return "ensemble-" + hashlib.sha256(json.dumps(key).encode()).hexdigest()[:8]
