"""What adapts to the data, chosen by cross-validation: a recipe's candidates, each a CV group on
the same fold table, and the one CV prefers (`make train FOLDS=5 CHOOSE=1`).

A recipe tuned on thousands of images memorises a few hundred; a head on frozen features (the
linear probe's capacity) cannot. Which one a dataset wants is a question for its own folds, not
for a rule of thumb on its size. The candidates live in a file beside the recipes
(`recipes/candidates/<recipe>.toml`, the competition's first, then its task's; or any file:
`CHOOSE=path.toml`): each table is a candidate, its sub-tables the config sections it changes over
the recipe and the command line's `--set`s (an empty table: the recipe as written).

Each candidate is judged by its folds' val scores at the end of its schedule: what each fold
keeps (a group trained before 2026-12-01 kept each fold's best epoch, chosen on the very rows that
score it, and on folds of a few dozen examples the best of six noisy epochs flattered a candidate
whose curve is noisy: the one that memorises). Listed simplest first: the winner is the first
candidate within one standard error of the best (the folds' spread over sqrt(K): the
one-standard-error rule of Breiman et al. 1984; Hastie et al., The Elements of Statistical
Learning, 7.10): two scores a fold's noise apart do not say the bigger model is better.

Candidates differ in what trains, never in the data or its folds (`SHARED` keys are refused).
The choice (every candidate's group, scores, spread and epoch, and the winner) is written to
`runs/choose-<recipe>-<hash>/choice.json`; `make predict FOLDS=5 CHOOSE=1` predicts with the
winner's group: its fold mean (each fold's schedule's-end weights, as every CV group's), or `REFIT=1`,
a refit to the epoch its CV chose. The winner's CV figures are the ones it won on, so they lean
high; a held-out test part (`make bench-choose`) or Kaggle's score is the fair figure.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from pipeline.core.errors import PetalsError
from pipeline.core.foreign_files import load_toml, present
from pipeline.core.options import CVOptions
from pipeline.core.rundir import RunDir

if TYPE_CHECKING:
    from pipeline.tasks.competitions import Competition

log = logging.getLogger(__name__)

FOLDER = "candidates"  # beside a recipe: recipes/candidates/<recipe>.toml
RULE = (
    "the folds' mean at the schedule's end; the first within one standard error (std / sqrt(K)) of the best"
)
FILE = "choice.json"
# What every candidate shares, or their scores would not compare: the data, its folds, what trains.
SHARED = ("competition", "train.folds", "train.fold", "train.fold_seed", "train.folds_keep_val",
          "train.merge_val", "train.pseudo_labels")  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Candidate:
    name: str
    overrides: tuple[str, ...]  # `--set` strings over the recipe and the command line's


def _flatten(table: dict, where: str, prefix: str = "") -> list[str]:
    """`{"train": {"frozen_epochs": 6}}` -> `["train.frozen_epochs=6"]` (scalars only)."""
    found = []
    for key, value in table.items():
        if isinstance(value, dict):
            found += _flatten(value, where, f"{prefix}{key}.")
        elif isinstance(value, bool):
            found.append(f"{prefix}{key}={'true' if value else 'false'}")
        elif isinstance(value, int | float | str):
            found.append(f"{prefix}{key}={value}")
        else:
            raise PetalsError(f"{where}: {prefix}{key} = {value!r}: a candidate sets plain values only")
    return found


def candidates_file(choose: str, competition: Competition, recipe: str, given: str) -> tuple[Path, Path]:
    """`CHOOSE=1` (or `recipe`): the recipe's own candidates, beside it (`given`: the recipe as the
    command line named it, maybe a file's path); anything else: a file's path. With the folder it
    is read inside: the recipes folder it was found in, or a given file's own."""
    from pipeline.tasks import recipe_config

    if choose not in ("1", "recipe"):
        return Path(choose), Path(choose).parent
    found, places = recipe_config.beside_recipe(FOLDER, competition, recipe, given)
    if found is None:
        raise PetalsError(
            f"CHOOSE=1: recipe {recipe!r} has no candidates ({' or '.join(map(str, places))}); "
            "name a file of your own: CHOOSE=path.toml"
        )
    return found, found.parents[1]  # <recipes>/candidates/<recipe>.toml


def read_candidates(path: Path, folder: Path | None = None) -> list[Candidate]:
    """The candidates a file lists, in its order; one line for a file that cannot be one. Read
    inside `folder` (its own by default) by the rule for shared folders (pipeline.core.foreign_files)."""
    if not present(path):
        raise PetalsError(f"CHOOSE={path}: no such file")
    folder = path.parent if folder is None else folder
    raw = load_toml(folder, path.relative_to(folder).as_posix(), "candidates file", folder)
    found = []
    for name, table in raw.items():
        if not isinstance(table, dict):
            raise PetalsError(f"{path}: {name} = {table!r}: each candidate is a table ([{name}] ...)")
        overrides = tuple(_flatten(table, f"{path} [{name}]"))
        fixed = [o.partition("=")[0] for o in overrides if o.partition("=")[0] in SHARED]
        if fixed:
            raise PetalsError(
                f"{path} [{name}]: sets {', '.join(fixed)}: every candidate is judged on the same data and "
                "fold table (set them on the command line, for all)"
            )
        found.append(Candidate(name, overrides))
    if len(found) < 2:
        raise PetalsError(f"{path}: {len(found)} candidate(s); CV chooses between two or more")
    return found


def _options(opts: CVOptions, candidate: Candidate) -> CVOptions:
    # The candidate's values come last: what it changes is what tells it from the others.
    return dataclasses.replace(opts, overrides=(*opts.overrides, *candidate.overrides))


def _checked(opts: CVOptions, path: Path, found: list[Candidate], device: str) -> None:
    """Every candidate's config is built before any trains: a bad key is one line naming the file."""
    from pipeline.tasks import recipe_config

    for candidate in found:
        try:
            checked = _options(opts, candidate)
            folds = dataclasses.replace(checked, overrides=(*checked.overrides, f"train.folds={opts.folds}"))
            recipe_config.config_from_args(folds, device)
        except PetalsError as err:
            raise PetalsError(f"{path} [{candidate.name}]: {err}") from None


def here(opts: CVOptions, listed: list[Candidate], device: str) -> list[Candidate]:
    """The candidates whose network's pretrained weights are on this machine (a packaged model
    installed, a preset folder present or attached), one line for each left out: the others still
    compete. A network that loads none (TF-IDF, the word models) is always here."""
    from pipeline import networks
    from pipeline.tasks import recipe_config

    kept = []
    for candidate in listed:
        config = recipe_config.config_from_args(_options(opts, candidate), device)
        try:
            networks.get(config.model.backbone).check(config)
        except PetalsError as err:
            log.warning("choose: [%s] left out: %s", candidate.name, err)
            continue
        kept.append(candidate)
    return kept


def cannot_run(opts: CVOptions, listed: list[Candidate], device: str, task) -> str | None:
    """Why a candidate cannot train on this competition (its config, or a target no probe fits:
    `Task.probe`), else None: small data's default falls back to the recipe alone on it."""
    from pipeline.modeling import probe
    from pipeline.tasks import recipe_config

    for candidate in listed:
        try:
            probe.check(recipe_config.config_from_args(_options(opts, candidate), device), task)
        except PetalsError as err:
            return f"[{candidate.name}] {err}"
    return None


def _candidates(opts: CVOptions, found) -> tuple[Path, list[Candidate]]:
    path, folder = candidates_file(opts.choose, found.competition, found.config.recipe, opts.recipe)
    listed = read_candidates(path, folder)
    _checked(opts, path, listed, found.platform.device)
    listed = here(opts, listed, found.platform.device)
    if len(listed) < 2:
        raise PetalsError(f"{path}: {len(listed)} candidate(s) can train here; CV chooses between two+")
    return path, listed


def group_names(opts: CVOptions, listed: list[Candidate], competition: Competition) -> list[str]:
    from pipeline.cv.experiment import setup

    return [setup(_options(opts, c), competition).group.name for c in listed]


def choice_dir(opts: CVOptions, found, listed: list[Candidate], groups: list[str]) -> RunDir:
    """Where the choice over these candidates (on this recipe, data and fold table) is written."""
    described = [[c.name, list(c.overrides), g] for c, g in zip(listed, groups, strict=True)]
    digest = hashlib.sha256(json.dumps(described).encode()).hexdigest()[:8]
    return RunDir(opts.runs_dir / f"choose-{found.config.recipe}-{digest}")


def judged(metrics: dict) -> tuple[float, float]:
    """A group's score for the choice and its spread: the folds at their schedule's end."""
    last = metrics.get("fold_scores_last")
    if not last:
        raise PetalsError(
            f"{metrics.get('fold_runs', {}).get('0', 'a CV group')}: its folds scored no epoch on val "
            "(train.val_every): CV has nothing to choose by"
        )
    return float(np.mean(last)), float(np.std(last, ddof=1)) if len(last) > 1 else 0.0


def pick(rows: list[dict], folds: int, greater_is_better: bool) -> int:
    """The index of the first row within one standard error of the best score."""
    sign = 1.0 if greater_is_better else -1.0
    best = max(range(len(rows)), key=lambda i: sign * rows[i]["score"])
    margin = rows[best]["spread"] / math.sqrt(folds)
    return next(i for i, row in enumerate(rows) if sign * (rows[best]["score"] - row["score"]) <= margin)


def train(opts: CVOptions, competition: Competition, train_folds: Callable[..., dict | None]) -> dict | None:
    """Train every candidate's folds with `train_folds` (the CV stage's: each resumes; with FOLD= this
    process's share of each), then choose once every group is complete; None while folds are missing.
    `competition`: the one the stage resolved (candidates share it: SHARED)."""
    from pipeline.cv import experiment

    found = experiment.setup(opts, competition)
    path, listed = _candidates(opts, found)
    setups = [experiment.setup(_options(opts, c), competition) for c in listed]
    groups = [one.group.name for one in setups]
    trained = []
    for candidate in listed:
        log.info("choose: %s (%s)", candidate.name, " ".join(candidate.overrides) or "the recipe as written")
        trained.append(train_folds(_options(opts, candidate), competition))
    if any(metrics is None for metrics in trained):
        log.info("choose: not every candidate's folds are trained yet; no choice made")
        return None
    _done_with_features(opts, setups)
    rows = []
    for candidate, group, metrics in zip(listed, groups, trained, strict=True):
        score, spread = judged(metrics)
        rows.append({
            "candidate": candidate.name,
            "overrides": list(candidate.overrides),
            "group": group,
            "score": score,
            "spread": spread,
            **{k: metrics[k] for k in ("cv_score", "fold_std", "cv_epoch", "fold_mean_at_cv_epoch")},
        })  # fmt: skip
    winner = pick(rows, opts.folds, found.spec.metric.greater_is_better)
    choice = {"candidates_file": str(path), "rule": RULE, "folds": opts.folds, "rows": rows,
              "winner": rows[winner]["candidate"], "group": rows[winner]["group"]}  # fmt: skip
    if found.platform.hosts.writer:
        place = choice_dir(opts, found, listed, groups)
        place.path.mkdir(parents=True, exist_ok=True)
        place.write_json(FILE, choice)
    for line in report(choice, found.spec):
        log.info("%s", line)
    return choice


def _done_with_features(opts: CVOptions, setups: list) -> None:
    """Every candidate is trained: their shared feature caches go (kept until now, as candidates
    that cut the network at one place share one)."""
    from pipeline.modeling import features

    for one in setups:
        if one.config.train.feature_cache and one.platform.hosts.writer:
            features.remove_shared(opts.runs_dir, one.table, one.config)


def report(choice: dict, spec) -> list[str]:
    lines = [
        f"choose: {spec.metric.title} of each candidate, {choice['folds']} folds ({choice['rule']}); "
        "beside it its out-of-fold CV score:"
    ]
    for row in choice["rows"]:
        mark = "  <- chosen" if row["candidate"] == choice["winner"] else ""
        lines.append(
            f"choose:   {row['candidate']:<12} {row['score']:.4f} +- {row['spread']:.4f}  "
            f"(CV {row['cv_score']:.4f}, epoch {row['cv_epoch']})  {row['group']}{mark}"
        )
    # The winner's scores are the very ones it won on: a choice among several leans high.
    lines.append("choose: the chosen group's scores chose it; a held-out test (or Kaggle's) is the fair one")
    return lines


def chosen(opts: CVOptions, competition: Competition) -> CVOptions:
    """The options of the chosen candidate's group (on `competition`, the stage's), or one line if
    the choice was not made yet."""
    from pipeline.cv import experiment

    found = experiment.setup(opts, competition)
    _, listed = _candidates(opts, found)
    place = choice_dir(opts, found, listed, group_names(opts, listed, competition))
    choice = place.read_json(FILE, default={})
    if not choice:
        raise PetalsError(
            f"{place.path}: no choice yet; train the candidates first "
            f"(make train FOLDS={opts.folds} CHOOSE=...)"
        )
    winner = next(c for c in listed if c.name == choice["winner"])
    for line in report(choice, found.spec):
        log.info("%s", line)
    return _options(dataclasses.replace(opts, choose=None), winner)
