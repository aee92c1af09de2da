"""One reading rule for every small file petals reads from a folder it does not own.

Competition folders get shared, and recipes, search spaces and candidates travel with them: a
link in such a folder may point at `~/.kaggle/kaggle.json` (which a kernel bundle would then ship),
at `/dev/zero` (read until memory runs out) or at a FIFO (a read that never returns). So a file
there is read only when it lies inside its folder once links are resolved (`paths.inside`), is a
regular file by `stat` before it is opened, and holds at most `limit` bytes; at most `limit + 1`
are ever read, which also bounds a `/proc` file (regular, with a size of 0). TOML from such a file
is parsed here too: nesting past MAX_DEPTH is one line, never a RecursionError in whoever walks it.
A refusal is a PetalsError: one line naming the field, the value (cut short) and why.
"""

from __future__ import annotations

import json
import os
import re
import stat
import tomllib
from dataclasses import dataclass
from pathlib import Path

from pipeline.core.errors import PetalsError
from pipeline.core.paths import inside, shown

# The largest file such a folder holds is a few KiB (flowers' 104 class names, a recipe); a bundled
# module is under 32 KiB. A MiB is no competition's, and reading it costs nothing.
MAX_BYTES = 2**20
# Tables and arrays inside each other: a recipe nests two deep, a competition file four.
MAX_DEPTH = 32
# TOML's strings and comments, as a lexer reads them left to right (a `#` or a quote inside a
# string is the string's): blanked before dotted names are looked for, so none is seen in a string.
STRINGS_AND_COMMENTS = re.compile(
    r'"""(?:[^"\\]|\\.|"(?!""))*"{3,5}'  # multi-line basic: ends at the first unescaped """
    r"|'''(?:[^']|'(?!''))*'{3,5}"  # multi-line literal
    r'|"(?:[^"\\\n]|\\.)*"'  # basic: escapes, one line
    r"|'[^'\n]*'"  # literal
    r"|#[^\n]*",  # a comment
    re.DOTALL,
)
# A dotted name of more than MAX_DEPTH parts (`a.a.a... = 1`, `[a.a.a...]`), each part a bare key or
# a blanked string; tried from a word's start only and never backtracking: linear in the text.
DOTTED = re.compile(rf"(?<![\w-])(?:[\w-]++[ \t]*+\.[ \t]*+){{{MAX_DEPTH},}}[\w-]")
# Opened without following a last link (it was just resolved) and without blocking on a FIFO
# swapped in after the stat: the fstat that follows then refuses it.
OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)


@dataclass(frozen=True)
class Refused:
    """Where a refusal's line comes from: `field` and `value` as the user or a file wrote them."""

    field: str
    value: object
    source: object = None

    def error(self, why: str) -> PetalsError:
        where = f"{self.source}: " if self.source else ""
        return PetalsError(f"{where}{self.field} {shown(self.value)} {why}")


def present(path: Path) -> bool:
    """A name in its folder, whatever it is: a FIFO or a dangling link named cpu.toml is there to be
    refused when read, not passed over for another file of the same name (or called missing)."""
    return path.is_symlink() or path.exists()


def read_small_bytes(
    folder: Path, value: str, field: str, source: object = None, limit: int = MAX_BYTES
) -> bytes:
    """The bytes of `folder / value`, refused unless it stays inside `folder` once links are resolved,
    is a regular file and holds at most `limit` bytes (all checked before a byte is read). `source`,
    where the value was written or the folder, begins each line but the link's (which names `folder`)."""
    refused = Refused(field, value, source)
    path = inside(folder, value, field).resolve()  # its line names the folder the link leaves
    try:
        before = os.stat(path)
        if not stat.S_ISREG(before.st_mode):
            raise refused.error("is not a regular file")
        if before.st_size > limit:
            raise refused.error(f"is larger than {limit} bytes")
        with os.fdopen(os.open(path, OPEN_FLAGS), "rb") as file:
            now = os.fstat(file.fileno())
            moved = not _opened_inside(file.fileno(), Path(folder).resolve())
            if moved or (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino):
                raise refused.error("changed while it was read")
            data = file.read(limit + 1)  # a file growing after its stat, or a /proc file, stops here
    except OSError as err:
        raise refused.error(f"cannot be read ({err.strerror or err})") from None
    if len(data) > limit:
        raise refused.error(f"is larger than {limit} bytes")
    return data


def _opened_inside(fd: int, base: Path) -> bool:
    """Whether the file opened is inside `base` where it really is (Linux names it in /proc): a
    folder on its way swapped for a link after the path was resolved is caught here; True where
    the system cannot say."""
    try:
        return Path(os.readlink(f"/proc/self/fd/{fd}")).is_relative_to(base)
    except OSError:
        return True


def read_small_text(
    folder: Path, value: str, field: str, source: object = None, limit: int = MAX_BYTES
) -> str:
    """`read_small_bytes`, decoded as UTF-8."""
    try:
        return read_small_bytes(folder, value, field, source, limit).decode("utf-8")
    except UnicodeDecodeError:
        raise Refused(field, value, source).error("is not UTF-8 text") from None


def load_toml(folder: Path, value: str, field: str, source: object = None) -> dict:
    """The TOML of a small file read by the rule above; one line naming the file for a file that is
    not TOML or nests deeper than MAX_DEPTH (tomllib recurses once per bracket: 20,000 would be a
    RecursionError; a dotted name of as many parts takes it hours, then every walker recurses)."""
    text = read_small_text(folder, value, field, source)
    where = Path(folder) / value
    # tomllib's time grows with the square of a dotted name's parts (32,000 of them: 15 s),
    # so that nesting is refused before it parses; brackets and braces raise RecursionError instead.
    nested = " of tables and arrays"
    if DOTTED.search(STRINGS_AND_COMMENTS.sub("s", text)):
        raise PetalsError(f"{where}: nested deeper than {MAX_DEPTH} levels{nested}")
    return _parsed(where, text, tomllib.loads, tomllib.TOMLDecodeError, "TOML", nested)


# A run's JSON files and a kernel's summary hold a few KiB (a fold group's summary names its runs;
# an evaluation lists the weakest classes, not every class): 16 MiB is far past any of them.
MAX_JSON_BYTES = 16 * 2**20


def load_json(folder: Path, value: str, field: str, source: object = None, limit: int = MAX_JSON_BYTES):
    """The JSON of a file read by the rule above (a run's files and a kernel's summary come back in
    its downloaded output): one line naming the file for one that is not JSON or nests deeper than
    MAX_DEPTH (json's decoder recurses once per bracket: 10,000 are a RecursionError)."""
    text = read_small_text(folder, value, field, source, limit)
    where = Path(folder) / value
    return _parsed(where, text, json.loads, json.JSONDecodeError, "JSON", " (a hostile file?)")


def json_object(path: Path, field: str) -> dict:
    """`load_json` of the file at `path` (inside its own folder), which must hold a JSON object:
    one line naming it otherwise. For the files petals writes beside its outputs and reads back
    (a run's config, a data dir's manifest, a submission's record), which come back from kernels
    and shared folders as anything at all: a list, a FIFO, a gibibyte, 100,000 brackets."""
    path = Path(path)
    found = load_json(path.parent, path.name, field)
    if not isinstance(found, dict):
        raise PetalsError(f"{path}: not a JSON object")
    return found


def json_record(path: Path, field: str) -> dict:
    """`json_object`, or {} where there is none to read: for a record petals can do without (a
    CSV's sidecar, an intent file), where a FIFO, a list or 100,000 brackets is no record."""
    path = Path(path)
    if not path.is_file() and not path.is_symlink():
        return {}
    try:
        return json_object(path, field)
    except PetalsError:
        return {}


def _parsed(where: Path, text: str, parse, error: type[Exception], kind: str, nested: str):
    """`parse(text)`: a file that does not parse, or nests deeper than MAX_DEPTH (the parsers recurse
    once per bracket: thousands are a RecursionError), is one line naming `where`."""
    deep = PetalsError(f"{where}: nested deeper than {MAX_DEPTH} levels{nested}")
    try:
        found = parse(text)
    except error as err:
        raise PetalsError(f"{where}: not valid {kind} ({err})") from None
    except RecursionError:
        raise deep from None
    if _deeper_than(found, MAX_DEPTH):
        raise deep
    return found


def _deeper_than(value: object, bound: int) -> bool:
    """Whether tables and arrays nest more than `bound` deep, walked without recursion."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > bound:
            return True
        inner = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        stack.extend((child, depth + 1) for child in inner if isinstance(child, dict | list))
    return False
