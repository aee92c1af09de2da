"""A registry of classes by their `name`: the tasks, data formats and data sources each keep one."""

from __future__ import annotations

from typing import Any


class Registry(dict):
    """{name: an instance of the class registered under it}. `register` is the class decorator."""

    def __init__(self, what: str) -> None:
        super().__init__()
        self.what = what  # "task", "data format": how errors name an entry

    def register(self, cls: type) -> type:
        if cls.name in self:
            raise ValueError(
                f"{self.what} {cls.name!r} registered twice"
            )  # two modules claim one name: a bug
        self[cls.name] = cls()  # an abstract class (a method left out) fails here, at import
        return cls

    def named(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise ValueError(f"{self.what} {name!r} is not one of {', '.join(sorted(self))}") from None
