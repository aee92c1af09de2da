"""The Source interface and its registry: where a fetch takes the competition's data from.

A source either applies on its own when `--source auto` is asked (`auto_reason`: why, in words,
or None) or only when named, and `get`s the data into the fetch's staging folder or names
where it already lies. `auto` tries the registered sources by `priority`, lowest first. A new
source is a new module here, decorated `@register`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pipeline.core.named import Registry
from pipeline.core.options import FetchOptions


@dataclass
class Got:
    """What a source got: where the files are (`root`: staging, or read in place), where they
    came from in words (`origin`), the resolutions to verify (None: all found) and anything the
    manifest should keep about it (`extra`)."""

    root: str
    origin: str
    sizes: tuple[int, ...] | None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Context:
    """What a fetch knows before its source runs: the options, the spec, the slug, the cache
    folder a download may use, and the search of Kaggle's input folder (done at most once)."""

    options: FetchOptions
    spec: Any
    slug: str
    cache_dir: Path
    attached: Callable[[], Any]


SOURCES = Registry("source")
register = SOURCES.register  # class decorator: make a source known by its `name`


def by_priority() -> list[Source]:
    return sorted(SOURCES.values(), key=lambda source: source.priority)


class Source(ABC):
    name: ClassVar[str]
    priority: ClassVar[int]  # `auto` tries lower first

    def auto_reason(self, context: Context) -> str | None:
        """Why `auto` takes this source here, or None when it does not apply."""
        return None

    @abstractmethod
    def get(self, context: Context, staging: Path) -> Got:
        """The data in `staging`, or where it already lies (read in place); PetalsError naming the fault."""
