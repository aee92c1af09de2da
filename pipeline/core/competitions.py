"""The competition a stage works on: its file loaded, or refused in one line.

Competition files describe three kinds of data (competition/layouts.py). Most stages read every
kind; those in `READ_BY_STAGES` read only the kinds named there. A file of another kind loads
and validates, and a stage asked to work on it says so instead of failing half-way.
"""

from __future__ import annotations

from competition import CompetitionSpec, load_spec
from competition.layouts import KINDS
from pipeline.core.errors import PetalsError

READ_BY_STAGES = {"kernel": ("records",)}
_DESCRIBED = {"records": "TFRecords", "image_folder": "an image folder", "table": "a table of texts"}


def load_competition(name: str, stage: str = "") -> CompetitionSpec:
    """The competition `name` (or a path to its .toml) for a stage; PetalsError in one line for
    a file that does not load, or data the stage does not read yet."""
    try:
        spec = load_spec(name)
    except ValueError as err:
        raise PetalsError(f"competition={name}: {err}") from None
    kinds = READ_BY_STAGES.get(stage, KINDS)
    if spec.kind not in kinds:
        read = ", ".join(_DESCRIBED[kind] for kind in kinds)
        raise PetalsError(
            f"competition {spec.name}: its data is {_DESCRIBED[spec.kind]}, which this stage does not "
            f"read yet (it reads {read})"
        )
    return spec
