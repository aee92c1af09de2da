"""What a kernel carries: the files of `pipeline/` and `competition/` it needs, and nothing else.

The bundle is built from what git tracks, so a stray untracked file (a key in
`competition/<name>/notes.txt`) never goes to Kaggle; where there is no git (an unpacked sdist, a
kernel's own bundle) an explicit list says what belongs. The files the kernel will read for its
competition and recipe must be among them, or it would fail on Kaggle, or run another recipe.
"""

from __future__ import annotations

import io
import logging
import zipfile
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, NamedTuple

from pipeline.core.errors import PetalsError
from pipeline.core.foreign_files import load_toml, read_small_bytes
from pipeline.core.git import listed_files
from pipeline.core.paths import check_relative, inside, shown

if TYPE_CHECKING:
    from pipeline.tasks.competitions import Competition

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[3]
BUNDLED = ("pipeline", "competition")  # the packages the kernel carries
BUNDLED_SUFFIXES = (".py", ".toml", ".txt")
# What the kernel needs where git cannot say what belongs to the packages (an unpacked sdist, a
# kernel's own bundle): their modules, the task recipes, their candidates (`CHOOSE=1`) and search
# spaces (`make sweep`), and each competition's file, recipes, candidates and spaces; with each
# competition's class list as its file names it (`classes_files`). A stray notes.txt beside
# competition.toml matches none of these.
WITHOUT_GIT = (
    "pipeline/**/*.py",
    "pipeline/tasks/recipes/*/*.toml",
    "pipeline/tasks/recipes/*/candidates/*.toml",
    "pipeline/tasks/recipes/*/spaces/*.toml",
    "competition/*.py",
    "competition/*/competition.toml",
    "competition/*/recipes/*.toml",
    "competition/*/recipes/candidates/*.toml",
    "competition/*/recipes/spaces/*.toml",
)
SHOWN_LEFT_OUT = 3  # untracked files the INFO line names


class Carried(NamedTuple):
    """A file from outside the checkout that the kernel carries: where it was read, and its bytes,
    read once by the rule for shared folders, so what was checked is what is bundled."""

    path: Path
    data: bytes


def _carried(name: str) -> bool:
    path = PurePosixPath(name)
    return path.suffix in BUNDLED_SUFFIXES and "__pycache__" not in path.parts


def classes_file(spec_file: Path, root: Path = REPO) -> str | None:
    """The class list `spec_file` (a competition.toml under `root`) names, relative to `root`
    (`classes_file`, default classes.txt); None for a file that does not parse or names a path out
    of its folder (load_spec refuses that file where a stage uses it)."""
    from competition.spec import CLASSES_FILE

    try:
        raw = load_toml(spec_file.parent, spec_file.name, "competition file")
        value = check_relative(raw.get("classes_file", CLASSES_FILE), "classes_file", spec_file)
    except PetalsError:
        return None
    return PurePosixPath(spec_file.parent.relative_to(root).as_posix(), value).as_posix()


def classes_files(root: Path = REPO) -> set[str]:
    """Every competition's class list, whatever its name or suffix: the kernel carries each one."""
    from competition.spec import SPEC_FILE

    found = (classes_file(path, root) for path in (root / "competition").glob(f"*/{SPEC_FILE}"))
    return {name for name in found if name}


def bundle_members(root: Path = REPO) -> list[str]:
    """The files the kernel carries, relative to `root`: what git tracks under the bundled packages,
    so a stray untracked file (a key in competition/<name>/notes.txt) never goes in, and one INFO line
    says how many were left out; without git, the explicit list WITHOUT_GIT and each competition's
    class list."""
    classes = classes_files(root)
    tracked = listed_files(root, BUNDLED)
    if tracked is None:
        names = {path.relative_to(root).as_posix() for pattern in WITHOUT_GIT for path in root.glob(pattern)}
        names |= classes
    else:
        names = set(tracked)
        left_out = [
            name
            for name in listed_files(root, BUNDLED, tracked=False) or []
            if _carried(name) or name in classes
        ]
        if left_out:
            named = ", ".join(left_out[:SHOWN_LEFT_OUT]) + (", ..." if len(left_out) > SHOWN_LEFT_OUT else "")
            log.info(
                "kernel: %d untracked file(s) under %s left out of the bundle (only what git tracks goes "
                "in; git add one the kernel needs): %s",
                len(left_out),
                ", ".join(f"{p}/" for p in BUNDLED),
                named,
            )
    # A tracked link pointing out of the checkout (at ~/.kaggle, say) is refused, not followed.
    return [
        name
        for name in sorted(names)
        if (_carried(name) or name in classes) and inside(root, name, "bundled file").is_file()
    ]


def _untracked(name: str, why: str = "") -> PetalsError:
    return PetalsError(
        f"{name} is not in the kernel's bundle{why}: it carries only the files git tracks under "
        f"{', '.join(f'{p}/' for p in BUNDLED)}; git add {name} and regenerate"
    )


def outside_competition(spec_path: str, name: str, members: list[str]) -> dict[str, Carried]:
    """A competition given as a path (`--set competition=/x/leaves/competition.toml`): its file,
    class list and recipes, {name in the bundle: what is carried}, carried as
    `competition/<name>/...`, where the kernel looks its competition up by name. One line if the
    bundle has that name already, or if one of them is not a small regular file inside the folder
    (a link in a shared folder's recipes/ to ~/.kaggle/kaggle.json, /dev/zero or a /proc file)."""
    from competition.spec import CLASSES_FILE, SPEC_FILE

    folder, carried_as = Path(spec_path).parent, f"competition/{name}"
    if any(member.startswith(carried_as + "/") for member in members):
        raise PetalsError(
            f"--set competition={shown(spec_path)}: the kernel already carries a competition named "
            f"{name!r} ({carried_as}/); name yours otherwise, or use --set competition={name}"
        )
    raw = load_toml(folder, Path(spec_path).name, "competition file", spec_path)
    classes = raw.get("classes_file", CLASSES_FILE)
    # a competition whose classes are its label columns may have no class list (competition/spec.py)
    omitted = "classes_file" not in raw and not (folder / CLASSES_FILE).exists()
    own = {  # as carried: (as read in the folder, the field a refusal names)
        SPEC_FILE: (Path(spec_path).name, "competition file"),
        **({} if omitted else {classes: (classes, "classes_file")}),
        **{f"recipes/{p.name}": (f"recipes/{p.name}", "recipe") for p in (folder / "recipes").glob("*.toml")},
    }
    return {
        f"{carried_as}/{relative}": Carried(folder / read, read_small_bytes(folder, read, field, folder))
        for relative, (read, field) in sorted(own.items())
    }


def check_carried(
    members: list[str], competition: str, recipe: str, loaded: Competition, root: Path = REPO
) -> dict[str, Carried]:
    """The files this generation read that the kernel reads again on Kaggle are among `members`
    (relative to `root`, the checkout holding competition/): the competition's file and class list,
    and the recipe's file, which the kernel finds by name (its competition's recipes/ first, then its
    task's). Else the kernel would fail after Kaggle's queue, or run another file of the same name
    (an untracked competition/<name>/recipes/tpu.toml: the task's tpu.toml). One line if not.
    `competition`: as the config gives it (a name, or a path); `loaded`: that competition, as the
    stage resolved it. A competition given as a path is carried under its name: those files are
    returned, to bundle."""
    from competition.spec import competition_file
    from pipeline.core.config import DEFAULT_RECIPE
    from pipeline.tasks.recipe_config import recipe_dirs, recipe_path

    spec_file = competition_file(competition)
    extra: dict[str, Carried] = {}
    if competition.endswith(".toml"):
        extra = outside_competition(competition, loaded.name, members)
    else:
        for name in (spec_file.relative_to(root).as_posix(), classes_file(spec_file, root)):
            if name and name not in members:
                raise _untracked(name)
    if recipe == DEFAULT_RECIPE:
        return extra
    carried_extra = {carried.path.resolve(): name for name, carried in extra.items()}

    def carried(path: Path) -> str | None:  # its name in the bundle, if the kernel could carry it
        path = path.resolve()
        if path in carried_extra:
            return carried_extra[path]
        inner = path.is_relative_to(root.resolve()) and path.relative_to(root.resolve()).as_posix()
        return inner if inner and inner.split("/", 1)[0] in BUNDLED else None

    bundled = set(members) | set(extra)
    used = recipe_path(recipe, loaded)
    by_name = [carried(folder / f"{used.stem}.toml") for folder in recipe_dirs(loaded)]
    found = next((name for name in by_name if name in bundled), None)  # what the kernel will run
    name = carried(used)
    if name and name not in bundled:
        would = f"the kernel would run {found} instead" if found else f"no {used.stem!r} recipe in the kernel"
        raise _untracked(name, f" ({would})")
    if name is None or name != found:  # a file outside the bundle, or another one than by name
        where = spec_file.parent.relative_to(root) if spec_file.is_relative_to(root) else spec_file.parent
        raise PetalsError(
            f"--recipe {shown(recipe)}: the kernel finds its recipe by name among the files it carries "
            f"and would run {found or 'none'} for {used.stem!r}, not this file; put it in "
            f"{where}/recipes/ under a name of its own, git add it and regenerate with that --recipe"
        )
    return extra


def bundle(
    root: Path = REPO, members: list[str] | None = None, extra: dict[str, Carried] | None = None
) -> bytes:
    """The bundled packages as a zip with fixed timestamps: the same sources give the same bytes.
    Each member is read by the rule for shared folders (inside the checkout, a small regular file).
    `extra`: files from elsewhere, by their name in the bundle (a competition given as a path)."""
    names = bundle_members(root) if members is None else members
    files = {name: read_small_bytes(root, name, "bundled file") for name in names}
    files.update({name: carried.data for name, carried in (extra or {}).items()})
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in sorted(files.items()):
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return buffer.getvalue()
