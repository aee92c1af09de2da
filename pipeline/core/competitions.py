"""The competition a stage works on: its file loaded, or refused in one line."""

from __future__ import annotations

from competition import CompetitionSpec, load_spec
from pipeline.core.errors import PetalsError


def load_competition(name: str) -> CompetitionSpec:
    """The competition `name` (or a path to its .toml); PetalsError in one line for a file that
    does not load."""
    try:
        return load_spec(name)
    except ValueError as err:
        raise PetalsError(f"competition={name}: {err}") from None
