"""The ensemble stage's blends of CV groups (`runs/cv5-...`, `pipeline.cv`): every member a group
dealt the same fold table, the blend judged out of fold (`pipeline.cv.blend`: equal weights,
searched weights or a stack, each fold's rows blended by a choice made on the other folds), the
test set by the choice refit on every row. The stage itself, and blends of single runs on val:
`pipeline/stages/ensemble.py`."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pipeline.core.errors import PetalsError
from pipeline.core.options import EnsembleOptions
from pipeline.core.rundir import RunDir
from pipeline.cv.blend import BlendResult, given_weights
from pipeline.cv.members import (
    Group,
    aligned,
    blend_dir,
    check_groups,
    ensemble_id,
    group_config,
    load_group,
    record_blend,
    shared_folds,
)
from pipeline.modeling.inference import Predictions
from pipeline.tasks.competitions import task_of

CAVEAT = "picking the best of these is itself a choice on those rows"


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
        chosen = given_weights(members, labels, folds, spec.metric, test_members, opts.weights)
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
    from pipeline.runs.submission_files import write_submission

    names = [g.run.name for g in groups]
    weights = np.asarray([] if chosen.weights is None else chosen.weights)
    name = opts.name or ensemble_id(names, weights, chosen.kind)
    out = blend_dir(opts.runs_dir, name)
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
    record_blend(
        opts, spec, manifest, name, out, path, f"{described} ({chosen.kind}, judged out of fold)",
        metrics["val_accuracy"], chosen.score,
        cv_score=round(chosen.score, 5), cv_spread=round(metrics["fold_std"], 5), folds=metrics["folds"],
    )  # fmt: skip
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
