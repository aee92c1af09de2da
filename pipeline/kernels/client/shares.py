"""The shares of a fan-out over Kaggle kernels and their state file, `kernels/<name>.fanout.json`.

The state file names kernel folders and Kaggle slugs, and its numbers decide what is pushed: it is
read with every field checked, and refused in one line when it is not a fan-out's state or is of
other settings (a rerun would mix kernels of two kinds in one experiment).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.core.errors import PetalsError
from pipeline.core.foreign import text
from pipeline.core.foreign_files import load_json
from pipeline.core.paths import check_name, shown
from pipeline.kernels.client.metadata import check_kernel

PUSHES = 2  # a kernel that ends in an error is pushed again once
# queued and running on Kaggle; complete there, its output not collected yet (a download that
# failed is tried again, never the training).
ACTIVE = ("queued", "running")
STATES = ("waiting", *ACTIVE, "complete", "collected", "failed")
MAX_STATE_BYTES = 2**20  # a state file of a few hundred folds is a few KiB
MAX_WHY = 300  # characters of a reason kept in the state file
LEGACY = {"fold": "number"}


@dataclass
class Share:
    """One kernel's share and where it stands: waiting (not pushed, or to be pushed again), queued or
    running on Kaggle, complete there (its output still to collect), collected (its runs placed
    here), or failed (twice, or its output refused)."""

    number: int  # the fold; in a trials fan-out, the share's place
    name: str  # the kernel's folder and slug
    kernel: str = ""  # owner/slug, once generated
    state: str = "waiting"
    pushes: int = 0
    version: int | None = None
    why: str = ""  # what went wrong last, in one line
    trials: list[int] = field(default_factory=list)  # a trials fan-out: the study's trial numbers
    pushed_at: float | None = None  # when its last version was pushed (Unix seconds)
    took: float | None = None  # seconds from that push to its completion on Kaggle: the ETA's pace

    def line(self, said: str) -> str:
        version = f" version {self.version}" if self.version else ""
        return f"{self.what} ({self.kernel}){version}: {said}"

    @property
    def what(self) -> str:
        return f"trial(s) {', '.join(map(str, self.trials))}" if self.trials else f"fold {self.number}"


def load(path: Path, plan, report) -> dict[int, Share]:
    """Every share the state file holds, by number, and a new one for each number asked that it
    lacks; a failed one asked for again is to be pushed again. A state file of other settings, or
    one that does not read, is one line naming it."""
    every = {s.number: s for s in read_state(path, plan.settings, plan.count)} if path.exists() else {}
    for share in every.values():
        try:
            plan.check(share)
        except PetalsError as err:
            raise PetalsError(f"{path}: {err}") from None
    for number in plan.numbers:
        share = every.get(number) or plan.new_share(number)
        if share.state == "failed":
            report(share.line(f"failed last time ({share.why}); pushed again"))
            share = Share(number, share.name, share.kernel, trials=share.trials)
        every[number] = share
    return dict(sorted(every.items()))


def read_state(path: Path, settings: dict, count: int) -> list[Share]:
    """The state file's shares, each field checked: it names folders and Kaggle slugs, and its
    numbers decide what is pushed."""
    # By the rule for foreign files: a pipe, a link out, a gibibyte or 100,000 brackets is one line.
    raw = load_json(path.parent, path.name, "fan-out state", limit=MAX_STATE_BYTES)
    try:
        for key, value in settings.items():
            if raw.get(key) != value:
                raise PetalsError(
                    f"{path}: a fan-out of {key} {shown(raw.get(key))}, not {shown(value)}; "
                    "move it aside to start another (its kernels stay on Kaggle)"
                )
        # A fold fan-out's state before trials could be fanned out named a share's number `fold`.
        shares = [Share(**{LEGACY.get(k, k): v for k, v in entry.items()}) for entry in raw["shares"]]
    except (AttributeError, KeyError, TypeError) as err:
        raise PetalsError(f"{path}: not a fan-out's state ({err})") from None
    for share in shares:
        if not is_state(share, count):
            raise PetalsError(f"{path}: share {shown(dataclasses.asdict(share))} is not a fan-out's share")
        check_name(share.name, "share name", path)
        if share.kernel:
            check_kernel(share.kernel, path)
    if len({s.number for s in shares}) != len(shares):
        raise PetalsError(f"{path}: a share's number is there twice; not a fan-out's state")
    return shares


def is_state(share: Share, count: int) -> bool:
    def whole(value) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    return (
        whole(share.number)
        and 0 <= share.number < count
        and isinstance(share.trials, list)
        and all(whole(t) and t >= 0 for t in share.trials)
        and share.state in STATES
        and whole(share.pushes)
        and 0 <= share.pushes <= PUSHES
        and (share.version is None or (whole(share.version) and share.version >= 1))
        and all(_seconds(v) for v in (share.pushed_at, share.took))
        and isinstance(share.why, str)
        and len(share.why) <= MAX_WHY
        and "\n" not in share.why
    )


def _seconds(value) -> bool:
    """A time the state file may hold: none yet, or a number of seconds not below zero."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return value is None or (number and 0 <= value < float("inf"))


def one_line(said: str) -> str:
    """A reason (often Kaggle's words) for the state file and the lines: one line, escaped, cut
    with a count (`pipeline.core.foreign.text`), within MAX_WHY."""
    return text(" ".join(said.split()), MAX_WHY - 40)
