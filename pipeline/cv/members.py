"""CV groups as the members of a blend: found by name, loaded, and checked to share one fold table.

A CV group (`pipeline.cv.group`) holds its out-of-fold predictions in the fold table's id order and
its fold-averaged test predictions. Blending groups out of fold (`pipeline.cv.blend`) needs each
row's fold, so the members must have been dealt one table from one data dir, and the table found
beside the data must be that one (its digest) and list exactly their OOF rows.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.core.errors import PetalsError
from pipeline.core.rundir import RunDir
from pipeline.modeling.inference import Predictions


@dataclass(frozen=True)
class Group:
    """One CV group as a blend member: what it is and its out-of-fold and test predictions."""

    run: RunDir
    info: dict  # group.json
    oof: Predictions  # every labelled example once, in the fold table's id order
    test: Predictions  # the fold runs' test predictions averaged


def group_dir(runs_dir: Path, name: str) -> RunDir | None:
    """The CV group named by id (under `runs_dir`) or by path; None when `name` is no group."""
    for candidate in (RunDir(name), RunDir(Path(runs_dir) / name)):
        if candidate.file(RunDir.GROUP).is_file():
            return candidate
    return None


def load_group(run: RunDir) -> Group:
    """A finished group's files, or one line saying which command makes the missing one."""
    info = run.read_json(RunDir.GROUP)
    k = info.get("folds")
    metrics = run.read_json(RunDir.METRICS, default={})
    oof_path, test_path = run.predictions("oof"), run.predictions("test")
    if metrics.get("kind") != "cv" or not oof_path.is_file():
        raise PetalsError(
            f"{run.name}: the CV group is not complete; train its folds first (make train FOLDS={k})"
        )
    if not test_path.is_file():
        raise PetalsError(
            f"{run.name}: no test predictions yet; "
            f"run `make predict FOLDS={k} RECIPE={info.get('recipe')}` first"
        )
    return Group(run, info, Predictions.load(oof_path), Predictions.load(test_path))


def check_groups(groups: list[Group], manifest: dict | None, data_dir: Path) -> None:
    """One line unless every group was dealt the same fold table from the data in `data_dir`."""
    first = groups[0]
    for other in groups[1:]:
        names = f"{first.run.name} and {other.run.name}"
        if other.info.get("competition") != first.info.get("competition"):
            raise PetalsError(f"{names} belong to different competitions: blend groups of one competition")
        if other.info.get("fold_table") != first.info.get("fold_table"):
            raise PetalsError(
                f"{names} were dealt different fold tables ({first.info.get('fold_table')} vs "
                f"{other.info.get('fold_table')}): blend groups of one FOLDS and fold seed"
            )
        if other.info.get("data") != first.info.get("data"):
            raise PetalsError(f"{names} were trained on different data: blend groups of one data dir")
    check_data(first.run.name, first.info.get("data"), manifest, data_dir)


def check_data(name: str, data: str | None, manifest: dict | None, data_dir: Path) -> None:
    """One line unless `data`, the data a run or group was trained on (its identity), is what the
    fetched `data_dir` (its `manifest`) holds."""
    from pipeline.core.rundir import data_identity

    if manifest is None:
        raise PetalsError(f"{data_dir}: no manifest.json; run `make fetch` (or pass the fetched --data-dir)")
    if data_identity(manifest) != data:
        raise PetalsError(f"{name} was trained on other data than {data_dir} holds: pass its --data-dir")


def group_config(group: Group):
    """The group's resolved config (group.json), every key checked again."""
    from pipeline.core.config import CHOICES, Config, validate
    from pipeline.core.overrides import apply_updates

    config = apply_updates(Config(), group.info.get("config", {}), f"{group.run.file(RunDir.GROUP)}", CHOICES)
    validate(config)
    return config


def shared_folds(groups: list[Group], data_dir: Path, spec) -> np.ndarray:
    """Each OOF row's fold: the data's fold table, checked to be the one the groups were dealt
    and to list exactly their OOF rows, in order, with their labels."""
    from pipeline.data import folds, targets

    config = group_config(groups[0])
    path = folds.stored_path(data_dir, spec, config)
    table = stored_table(path, config) if path.is_file() else folds.fold_table(data_dir, spec, config)
    if table.digest != groups[0].info.get("fold_table"):
        raise PetalsError(
            f"{path}: fold table {table.digest}, not the {groups[0].info.get('fold_table')} "
            f"{groups[0].run.name} was dealt: the data or its folds changed since"
        )
    for group in groups:
        same_ids = np.array_equal(group.oof.ids.astype(str), table.ids)
        # the stored table holds each row's stratum (a class id, a number's bin): compare those
        if not same_ids or not np.array_equal(targets.strata(group.oof.labels), targets.strata(table.labels)):
            raise PetalsError(
                f"{group.run.name}: its OOF rows are not its fold table's examples in id order: "
                "assemble it again"
            )
    return table.folds


def stored_table(path: Path, config):
    """The fold table stored beside the data (id, label, fold), read as folds reads it."""
    from pipeline.data.folds import FoldTable, read_table

    ids, labels, fold = read_table(path, config.train.folds)
    return FoldTable(ids, labels, fold, config.train.folds, config.train.fold_seed)


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


def blend_dir(runs_dir: Path, name: str) -> RunDir:
    """The blend's folder, made; refused in one line where `name` (ENSEMBLE_NAME, --name) is a run,
    a CV group or anything but an earlier blend: its metrics, predictions and board row would be
    replaced by the blend's, and its training lost."""
    out = RunDir(Path(runs_dir) / name)
    if out.path.exists():
        kind = out.read_json(RunDir.METRICS, default={}).get("kind") if out.path.is_dir() else None
        trained = [f for f in (RunDir.CONFIG, "group.json", "writer.lock") if (out.path / f).exists()]
        if kind != "ensemble" or trained:
            why = f"it holds {trained[0]}" if trained else "another kind of run"
            raise PetalsError(f"{out.path}: not a blend ({why}); give the blend another name, or none")
    out.path.mkdir(parents=True, exist_ok=True)
    return out


def ensemble_id(names: list[str], weights: np.ndarray, method: str | None = None) -> str:
    """Same members and weights (and method, for CV groups) -> the same ensemble id."""
    key = [names, [round(float(w), 4) for w in weights]] + ([method] if method else [])
    return "ensemble-" + hashlib.sha256(json.dumps(key).encode()).hexdigest()[:8]


def record_blend(opts, spec, manifest: dict, name: str, out: RunDir, submission: Path, members: str,
                 accuracy: float, score: float, **more) -> None:  # fmt: skip
    """A blend's row on the offline leaderboard (`more`: a CV blend's columns) and, with
    TRACK=mlflow, the blend as a run of its own: its members, method and row."""
    from pipeline.runs import leaderboard, tracking

    board = leaderboard.board_file(opts.submissions_dir, spec.name)
    leaderboard.update(
        board,
        name,
        kind="ensemble",
        time=leaderboard.now(),
        competition=spec.name,
        data_source=manifest.get("source"),
        data_fingerprint=manifest.get("fingerprint"),
        members=members,
        **{"val_accuracy": round(accuracy, 5), spec.score_key: round(score, 5)},  # one column for accuracy
        **more,
        submission=str(submission),
    )
    tracking.ensemble_written(out, board, submission, opts.track, spec.name, manifest.get("fingerprint"))
