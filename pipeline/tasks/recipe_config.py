"""A run's config from its recipe: the recipe found for the competition, then `--set` overrides.

Precedence: the defaults (pipeline/core/config.py) < the recipe (`competition/<name>/recipes/
<recipe>.toml`, else its task's `pipeline/tasks/recipes/<task>/<recipe>.toml`) < `--set`
overrides. Only the transforms the competition says keep the label stay on.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from competition.spec import SPEC_DIR
from pipeline.core.config import (
    AUTO_RECIPE,
    CHOICES,
    DEFAULT_COMPETITION,
    DEFAULT_RECIPE,
    TRANSFORMS,
    AugmentConfig,
    Config,
    resolve_recipe,
    validate,
)
from pipeline.core.errors import PetalsError
from pipeline.core.foreign_files import load_toml, present
from pipeline.core.options import ConfigOptions
from pipeline.core.overrides import apply_updates, leaves, parse_overrides, toml_value
from pipeline.tasks.competitions import Competition, load_competition

RECIPES = "recipes"  # a competition's own recipes: competition/<name>/recipes/


def recipe_dirs(competition: Competition) -> list[Path]:
    """Where a competition's recipes are, first found first: its file's folder's `recipes/`, then
    its task's (pipeline/tasks/recipes/<task>/: cpu, gpu and tpu), so a competition file alone trains."""
    return [competition.spec.file.parent / RECIPES, competition.task.recipes_dir]


def beside_recipe(
    folder: str, competition: Competition, recipe: str, given: str
) -> tuple[Path | None, list[Path]]:
    """A recipe's companion file, `recipes/<folder>/<recipe>.toml` (candidates, a search space):
    beside the recipe file `given` names, else the competition's, then its task's. (The first that
    exists or None, every place looked.)"""
    folders = [Path(given).parent] if given.endswith(".toml") else recipe_dirs(competition)
    places = [place / folder / f"{recipe}.toml" for place in folders]
    return next((p for p in places if present(p)), None), places


def recipe_names(competition: Competition) -> list[str]:
    """A competition's recipes (its own and its task's), plus `default` (no file: the defaults)."""
    found = {p.stem for folder in recipe_dirs(competition) for p in folder.glob("*.toml")}
    return sorted([DEFAULT_RECIPE, *found])


def recipe_path(name: str, competition: Competition) -> Path:
    if name.endswith(".toml"):
        path = Path(name)
    else:
        candidates = [folder / f"{name}.toml" for folder in recipe_dirs(competition)]
        path = next((p for p in candidates if present(p)), candidates[0])
    if not present(path):
        known = ", ".join(recipe_names(competition))
        raise PetalsError(f"unknown recipe {name!r} for {competition.name}: no {path} (recipes: {known})")
    return path


def _competition(overrides: Iterable[str]) -> str:
    """The competition `--set competition=...` names (the recipe is looked up in its folder)."""
    value = parse_overrides(overrides).get("competition", DEFAULT_COMPETITION)
    if not isinstance(value, str):
        raise PetalsError("--set competition: a competition's name, e.g. --set competition=imdb")
    return value


def _recipe_values(recipe: str, competition: Competition) -> tuple[Path | None, dict[str, Any]]:
    """A resolved recipe's file and the values it sets (none for `default`)."""
    if recipe == DEFAULT_RECIPE:
        return None, {}
    path = recipe_path(recipe, competition)
    # Read inside the folder it was found in (a recipes/ folder, or the given file's own): a link in
    # a shared competition's recipes/ to a file elsewhere, a FIFO or a huge file is one line.
    raw = load_toml(path.parent, path.name, "recipe", path.parent)
    raw.pop("recipe", None)
    return path, raw


def load_config(
    recipe: str = DEFAULT_RECIPE, overrides: Iterable[str] = (), device: str | None = None
) -> Config:
    """Defaults, then the recipe file, then `--set` overrides; all keys and types checked.

    `recipe="auto"` takes the recipe for `device` (TPU, GPU or CPU: `Platform.device`). The
    competition `--set competition=` names is loaded here, once (checked against its task before
    any stage reads the config: one line otherwise), for its recipes and the transforms it keeps;
    the stages resolve it again from the config and pass it down.
    """
    return _resolved(recipe, list(overrides), device)[0]


def _resolved(recipe: str, overrides: list[str], device: str | None) -> tuple[Config, Path | None, dict]:
    """`load_config`'s config, with the recipe file it read and the values it set."""
    named = _competition(overrides)
    competition = load_competition(named)
    path, raw = _recipe_values(resolve_recipe(recipe, device), competition)
    config = Config()
    if path is not None:
        config = dataclasses.replace(apply_updates(config, raw, str(path), CHOICES), recipe=path.stem)
    config = apply_updates(config, parse_overrides(overrides), "--set", CHOICES)
    if config.competition != named:  # a recipe file that names another competition: its transforms
        competition = load_competition(config.competition)
    config = _keep_labels(config, competition, explicit=leaves(raw) | leaves(parse_overrides(overrides)))
    validate(config)
    return config, path, raw


def _keep_labels(config: Config, competition: Competition, explicit: set[str]) -> Config:
    """Only the transforms the competition says keep the label: a default one that does not is
    turned off, one a recipe or `--set` turns on is refused."""

    spec = competition.spec
    unknown = sorted(spec.keeps_label - set(TRANSFORMS))
    if unknown:
        raise PetalsError(
            f"competition {spec.name}: keeps_label names {unknown}, which are not transforms "
            f"(known: {', '.join(TRANSFORMS)})"
        )
    off: dict[str, Any] = {}
    for name in TRANSFORMS:
        value = getattr(config.augment, name)
        if name in spec.keeps_label or not value:
            continue
        if f"augment.{name}" in explicit:
            raise PetalsError(
                f"augment.{name}={toml_value(value)}: competition {spec.name} does not keep the label "
                f"under {name} (its keeps_label: {', '.join(sorted(spec.keeps_label)) or 'none'})"
            )
        off[name] = type(value)(0)
    return dataclasses.replace(config, augment=dataclasses.replace(config.augment, **off)) if off else config


def describe(recipe: str, overrides: Iterable[str] = (), device: str | None = None) -> str:
    """The resolved config as TOML (a file `--recipe` reads back), each value with where it came
    from: the defaults, the recipe file, or `--set`."""
    overrides = list(overrides)
    config, path, raw = _resolved(recipe, overrides, device)
    from_recipe, from_set = leaves(raw), leaves(parse_overrides(overrides))
    chosen = f"{recipe} -> {config.recipe} (the {device} recipe)" if recipe == AUTO_RECIPE else config.recipe
    shown = (
        path.resolve().relative_to(SPEC_DIR.parent)
        if path and path.resolve().is_relative_to(SPEC_DIR.parent)
        else path
    )
    lines = [f"# recipe {chosen}: {shown or 'no file, the defaults'}"]
    top, sections = [], []
    for item in dataclasses.fields(config):
        value = getattr(config, item.name)
        if dataclasses.is_dataclass(value):
            sections.append(
                (item.name, [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)])
            )
        elif item.name != "recipe":  # the recipe is the header's
            top.append((item.name, value))
    sections.insert(0, ("", top))  # top-level keys come before any [section] in TOML
    for section, items in sections:
        if section:
            lines.append(f"\n[{section}]")
        for key, value in items:
            full = f"{section}.{key}" if section else key
            source = (
                "--set"
                if full in from_set
                else f"recipe {config.recipe}"
                if full in from_recipe
                else f"off: competition {config.competition} does not keep the label"
                if section == "augment" and key in TRANSFORMS and value != getattr(AugmentConfig(), key)
                else "default"
            )
            lines.append(f"{f'{key} = {toml_value(value)}':<34} # {source}")
    return "\n".join(lines)


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """`--recipe`, `--set` and `--print-config`, for every stage that reads the config."""
    parser.add_argument(
        "--recipe",
        default=ConfigOptions.recipe,
        help="recipe under competition/<name>/recipes/ (else its task's), a .toml path, or auto: tpu, "
        "gpu or cpu by the device the stage runs on; `default` is the bare defaults "
        f"(known: {', '.join(recipe_names(load_competition(DEFAULT_COMPETITION)))}) "
        f"(default: {AUTO_RECIPE})",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one config value, e.g. --set augment.cutmix=0.5 (repeatable)",
    )
    parser.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved config as TOML, each value with its source (default, recipe, --set); exit",
    )


def config_from_args(args, device: str | None = None) -> Config:
    """The config of a stage's command line or options (`recipe`, `overrides`), resolved once for
    `device`; with `--print-config`, printed, and the process exits 0 (like `--help`)."""
    if getattr(args, "print_config", False):
        print(describe(args.recipe, args.overrides, device))
        raise SystemExit(0)
    return load_config(args.recipe, args.overrides, device)
