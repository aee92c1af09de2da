"""A search space: config keys and the values a sweep tries for each, in a file beside the recipes.

`recipes/spaces/<recipe>.toml` (the competition's first, then its task's; or any file with
`SPACE=path.toml`) holds one table per config key, nested as the config is:

    [train.lr_start]          # a float from low to high, log-uniform with `log = true`
    low = 1e-4
    high = 3e-3
    log = true

    [train.epochs]            # whole numbers: an int from low to high (`step` optional)
    low = 4
    high = 10

    [model.backbone]          # one of a list
    choices = ["efficientnet-lite0", "cnn"]

Checked like a recipe before any trial: each key's extremes and every choice are built into the
recipe's config, so an unknown key or a value the config refuses is one line naming the file and
the key; a range that is no range (low >= high, a log range through 0, an empty list) too.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.core.errors import PetalsError
from pipeline.core.foreign_files import load_toml, present
from pipeline.core.paths import shown

if TYPE_CHECKING:
    from pipeline.tasks.competitions import Competition

FOLDER = "spaces"  # beside a recipe: recipes/spaces/<recipe>.toml
FIELDS = {"low", "high", "log", "step", "choices"}
# What every trial shares, or their scores would not compare: the data, its folds and val split.
SHARED = ("competition", "train.folds", "train.fold", "train.fold_seed", "train.folds_keep_val",
          "train.merge_val")  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Param:
    key: str  # a config key, `train.lr_start`
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    step: float | int | None = None
    choices: tuple[Any, ...] = ()

    def values_to_check(self) -> tuple[Any, ...]:
        return self.choices or (self.low, self.high)

    def suggest(self, trial) -> Any:
        """This key's value for an Optuna trial."""
        if self.choices:
            return trial.suggest_categorical(self.key, list(self.choices))
        if isinstance(self.low, int) and isinstance(self.high, int):
            return trial.suggest_int(self.key, self.low, self.high, step=self.step or 1, log=self.log)
        return trial.suggest_float(self.key, self.low, self.high, step=self.step, log=self.log)


def override(key: str, value: Any) -> str:
    """A `--set` string: `train.lr_start=0.001`, booleans as TOML writes them."""
    if isinstance(value, bool):
        return f"{key}={'true' if value else 'false'}"
    return f"{key}={value}"


def space_file(space: str, competition: Competition, recipe: str, given: str) -> tuple[Path, Path]:
    """`SPACE=1`: the recipe's own space, beside it (`given`: the recipe as the command line named
    it, maybe a file's path); anything else: a file's path. With the folder it is read inside: the
    recipes folder it was found in, or a given file's own."""
    from pipeline.tasks import recipe_config

    if space != "1":
        return Path(space), Path(space).parent
    found, places = recipe_config.beside_recipe(FOLDER, competition, recipe, given)
    if found is None:
        shipped = sorted(p for place in places for p in place.parent.glob("*.toml"))
        start = f" (to start from: {shipped[0]})" if shipped else ""
        raise PetalsError(
            f"SPACE=1: recipe {recipe!r} has no search space ({' or '.join(map(str, places))}); "
            f"name a file of your own: SPACE=path.toml{start}"
        )
    return found, found.parents[1]  # <recipes>/spaces/<recipe>.toml


def _shown(value: Any) -> str:
    """A value as the file wrote it (numbers, booleans), or quoted and bounded (anything else)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, int | float) else shown(value)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _param(key: str, table: dict, where: str) -> Param:
    where = f"{where} [{key}]"
    unknown = sorted(set(table) - FIELDS)
    if unknown:
        raise PetalsError(f"{where}: {unknown[0]} is not one of {', '.join(sorted(FIELDS))}")
    if "choices" in table:
        choices = table["choices"]
        if set(table) != {"choices"} or not isinstance(choices, list) or not choices:
            raise PetalsError(f"{where}: choices = {_shown(choices)}: a non-empty list, alone")
        plain = all(isinstance(c, bool | int | float | str) for c in choices)
        if not plain or len(set(map(type, choices))) > 1:
            raise PetalsError(f"{where}: choices = {_shown(choices)}: plain values of one type")
        return Param(key, choices=tuple(choices))
    low, high, step, log = table.get("low"), table.get("high"), table.get("step"), table.get("log", False)
    if not (_number(low) and _number(high) and low < high):
        raise PetalsError(f"{where}: low = {_shown(low)}, high = {_shown(high)}: two numbers, low < high")
    if not isinstance(log, bool) or (log and low <= 0):
        raise PetalsError(f"{where}: log = {_shown(log)} over {low}..{high}: true or false, true above 0")
    whole = isinstance(low, int) and isinstance(high, int)
    if step is not None and (not (_number(step) and 0 < step <= high - low and not log) or
                             (whole and not isinstance(step, int))):  # fmt: skip
        raise PetalsError(
            f"{where}: step = {_shown(step)}: a number in (0, high - low], whole for whole bounds, no log"
        )
    return Param(key, low=low, high=high, log=log, step=step)


def _params(table: dict, where: str, prefix: str = "") -> list[Param]:
    found = []
    for name, value in table.items():
        key = f"{prefix}{name}"
        if not isinstance(value, dict):
            raise PetalsError(
                f"{where}: {key} = {_shown(value)}: each key is a table of low, high or choices"
            )
        found += [_param(key, value, where)] if set(value) & FIELDS else _params(value, where, f"{key}.")
    return found


def read_space(path: Path, folder: Path | None = None) -> list[Param]:
    """The parameters a file lists, in its order; one line for a file that cannot be a space. Read
    inside `folder` (its own by default) by the rule for shared folders (pipeline.core.foreign_files)."""
    if not present(path):
        raise PetalsError(f"SPACE={path}: no such file")
    folder = path.parent if folder is None else folder
    raw = load_toml(folder, path.relative_to(folder).as_posix(), "search space", folder)
    params = _params(raw, str(path))
    if not params:
        raise PetalsError(f"{path}: no parameter to search")
    fixed = [p.key for p in params if p.key in SHARED]
    if fixed:
        raise PetalsError(
            f"{path}: searches {', '.join(fixed)}: every trial is judged on the same data and val split "
            "(set them on the command line, for all)"
        )
    return params


def check(params: list[Param], path: Path, build) -> None:
    """Every key's extremes and choices built into the config (`build(overrides)`) before any trial."""
    for param in params:
        for value in param.values_to_check():
            try:
                build((override(param.key, value),))
            except PetalsError as err:
                raise PetalsError(f"{path} [{param.key}] = {_shown(value)}: {err}") from None
