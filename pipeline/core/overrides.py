"""Typed updates of frozen dataclasses: `--set section.key=value` strings and recipe values
checked against the fields they set, so unknown keys and wrong types are refused by name.

It knows nothing of the config's sections: `pipeline.core.config` passes its dataclasses and the
keys whose values are limited to a few choices.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Iterable, Mapping
from typing import Any

from pipeline.core.errors import PetalsError
from pipeline.core.paths import shown


def coerce(key: str, value: Any, hint: Any) -> Any:
    """`value` (from TOML or a `--set` string) as the field's type, or a PetalsError naming the key.

    Config fields are plain bool, int, float and str: that is all this needs to read.
    """
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "1", "yes", "false", "0", "no"):
            return value.lower() in ("true", "1", "yes")
        raise PetalsError(f"{key}: expected true or false, got {shown(value)}")
    if hint is int:
        if isinstance(value, bool):
            raise PetalsError(f"{key}: expected an integer, got {shown(value)}")
        try:
            number = int(value) if isinstance(value, str) else value
        except ValueError:
            raise PetalsError(f"{key}: expected an integer, got {shown(value)}") from None
        if not isinstance(number, int):
            raise PetalsError(f"{key}: expected an integer, got {shown(value)}")
        return number
    if hint is float:
        if isinstance(value, bool):
            raise PetalsError(f"{key}: expected a number, got {shown(value)}")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise PetalsError(f"{key}: expected a number, got {shown(value)}") from None
    if hint is str:
        if not isinstance(value, str):
            raise PetalsError(f"{key}: expected a string, got {shown(value)}")
        return value
    raise TypeError(f"{key}: unsupported config type {hint}")  # a bug in the config, not in input


def apply_updates(
    obj: Any,
    updates: dict[str, Any],
    where: str,
    choices: Mapping[str, tuple[str, ...]],
    prefix: str = "",
) -> Any:
    """A copy of the dataclass `obj` with nested `updates` applied, every key and type checked;
    `choices` limits the values of some keys (full dotted names); `where` names the source."""
    hints = typing.get_type_hints(type(obj))
    names = {f.name for f in dataclasses.fields(obj)}
    changes = {}
    for key, value in updates.items():
        full = f"{prefix}{key}"
        if key not in names:
            known = ", ".join(f"{prefix}{n}" for n in sorted(names))
            raise PetalsError(f"{where}: unknown key {shown(full)} (known: {known})")
        current = getattr(obj, key)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise PetalsError(f"{where}: {full} is a section; set its keys, e.g. {full}.<key>=...")
            changes[key] = apply_updates(current, value, where, choices, f"{full}.")
        else:
            try:
                changes[key] = coerce(full, value, hints[key])
            except PetalsError as err:
                raise PetalsError(f"{where}: {err}") from None
            if full in choices and changes[key] not in choices[full]:
                raise PetalsError(f"{where}: {full}: {shown(value)} is not one of {', '.join(choices[full])}")
    return dataclasses.replace(obj, **changes)


def parse_overrides(items: Iterable[str]) -> dict[str, Any]:
    """`["augment.cutmix=0.5", "seed=1"]` -> `{"augment": {"cutmix": "0.5"}, "seed": "1"}`."""
    nested: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise PetalsError(f"--set {shown(item)}: expected key=value, e.g. augment.cutmix=0.5")
        node = nested
        *parents, leaf = key.strip().split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise PetalsError(f"--set {shown(item)}: {part} is set twice, as a value and as a section")
        node[leaf] = value.strip()
    return nested


def leaves(nested: dict[str, Any], prefix: str = "") -> set[str]:
    """The dotted keys a nested mapping sets: `{"augment": {"flip": 1}}` -> `{"augment.flip"}`."""
    keys: set[str] = set()
    for key, value in nested.items():
        keys |= leaves(value, f"{prefix}{key}.") if isinstance(value, dict) else {prefix + key}
    return keys


def toml_value(value: Any) -> str:
    """A config value as TOML writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value) if isinstance(value, str) else repr(value)
