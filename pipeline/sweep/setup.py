"""What every trial of a study shares, and how a finished trial is judged and recorded: the same for
trials run here (`make sweep`) and trials run in Kaggle kernels (`make kernel-fanout TRIALS=N`).

The study's name is the competition, the recipe, the space and a hash of what its trials share (the
config outside the space, and the data): another SET=, other data or another image size is another
study, and a sweep here and a fan-out over kernels of the same recipe fill the same one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.core.errors import PetalsError
from pipeline.core.options import SweepOptions
from pipeline.core.paths import check_name

if TYPE_CHECKING:
    from pipeline.tasks.competitions import Competition


@dataclasses.dataclass(frozen=True)
class Setup:
    base: object  # the recipe's config with the command line's overrides: what every trial shares
    competition: Competition  # the base config's, as the stage resolved it
    params: list
    name: str  # the study's: competition, recipe, space, and a hash of what the trials share
    build: object  # overrides -> the config they make (checked, as a stage builds it)

    @property
    def spec(self):
        return self.competition.spec


def base_config(opts: SweepOptions, device: str):
    """The recipe's config for `device` (what recipe `auto` resolves by) with the command line's
    overrides: what every trial shares, and the competition the stage resolves."""
    from pipeline.tasks import recipe_config

    return recipe_config.config_from_args(opts, device)


def setup(opts: SweepOptions, device: str, competition: Competition) -> Setup:
    """The base config for `device` (`base_config`), its competition (`competition`, as the stage
    resolved it), the space (checked) and the study's name."""
    from pipeline.sweep import space
    from pipeline.tasks import recipe_config

    if opts.trials < 1:
        raise PetalsError(f"TRIALS={opts.trials}: a sweep runs at least one trial")
    if opts.folds == 1 or opts.folds < 0:
        raise PetalsError(f"FOLDS={opts.folds}: cross-validation needs at least 2 folds (0: one run a trial)")
    base = base_config(opts, device)
    if base.train.merge_val and not opts.folds:
        raise PetalsError(
            "train.merge_val=true: a trial would keep no val split to be judged on (FOLDS=K: out of fold)"
        )
    path, folder = space.space_file(opts.space, competition, base.recipe, opts.recipe)
    params = space.read_space(path, folder)

    def build(extra):
        given = dataclasses.replace(opts, overrides=(*opts.overrides, *extra))
        return recipe_config.config_from_args(given, device)

    space.check(params, path, build)
    spec = competition.spec
    name = f"{spec.name}-{Path(base.recipe).stem}-{path.stem}" + (f"-cv{opts.folds}" if opts.folds else "")
    name = f"{name}-{shared_hash(base, params, opts)}"
    return Setup(base, competition, params, check_name(name, "study name", "--space"), build)


def shared_hash(base, params: list, opts: SweepOptions) -> str:
    """What every trial of the study shares: the config's values outside the space and the data's
    labelled fingerprint. Another SET=, other data or another image size is another study."""
    from pipeline.core.rundir import data_identity
    from pipeline.data.manifest import read_manifest

    searched = {param.key for param in params}
    shared = {
        f"{section}.{key}": value
        for section, values in base.to_dict().items()
        if isinstance(values, dict)
        for key, value in values.items()
        if f"{section}.{key}" not in searched
    }
    shared["data"] = data_identity(read_manifest(opts.data_dir) or {})
    return hashlib.sha256(json.dumps(shared, sort_keys=True, default=str).encode()).hexdigest()[:8]


def judged_score(runs_dir: Path, folds: int, spec, metrics: dict) -> float:
    """What the study compares: the score at the schedule's end, not at the best epoch, which was
    chosen on the same rows and leans high (a CV group: its folds' mean there, as CHOOSE judges)."""

    from pipeline.core.rundir import RunDir
    from pipeline.cv import choose

    if folds:
        return choose.judged(metrics)[0]
    history = RunDir(runs_dir / metrics["run"]).read_history()
    scored = history[spec.score_key].dropna() if spec.score_key in history else []
    if not len(scored):
        raise PetalsError(f"{metrics['run']}: scored no epoch on val (train.val_every)")
    return float(scored.iloc[-1])


def board_row(runs_dir: Path, submissions_dir: Path, spec, metrics: dict, score: float, trial: str) -> None:
    """A finished trial on the offline leaderboard: a run's row (kind `trial`, its score the one the
    study compares), or its CV group's row (written by the group) marked with the trial."""
    from pipeline.core.rundir import RunDir
    from pipeline.runs import leaderboard

    board = leaderboard.board_file(submissions_dir, spec.name)
    if metrics.get("group"):
        leaderboard.update(board, metrics["group"], sweep=trial)
        return
    run = RunDir(runs_dir / metrics["run"])
    leaderboard.update(
        board,
        run.name,
        **{**leaderboard.run_fields(run), "kind": "trial"},
        time=leaderboard.now(),
        sweep=trial,
        **{spec.score_key: round(score, 5)},  # the study's score: the schedule's end
    )
