"""Fetch stage: put the competition's data where later stages find them, verified.

Sources: the Kaggle API, your own copy (`dir`: the competition's zip as Kaggle serves it, or
an unpacked folder), a `gs://` (or any tf.io.gfile) path, `/kaggle/input/<slug>` inside
Kaggle, or the embedded synthetic dataset. TFRecords are kept as they are; image folders and
tables (pipeline/data/competition_files.py) are unpacked. Copies are made in a staging
folder, verified against the competition spec and swapped into place, so an
interrupted fetch never leaves a half-valid data dir. `manifest.json` in the data
dir records the source, the counts and a content fingerprint; later stages read
the data's location from it.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import shutil
import time
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tensorflow as tf
from tqdm import tqdm

from competition import CompetitionSpec
from pipeline import __version__
from pipeline.core import kaggle_client, kaggle_input, lock
from pipeline.core.competitions import load_competition
from pipeline.core.errors import PetalsError, first_line
from pipeline.core.files import unsafe_member, write_json
from pipeline.data import competition_files, embedded
from pipeline.data.layout import (
    data_files,
    find_in_copy,
    fingerprint,
    found_sizes,
    holds_competition,
    markers,
    verify_layout,
)
from pipeline.data.manifest import MANIFEST, read_manifest

log = logging.getLogger(__name__)

SOURCES = ("auto", "kaggle", "dir", "gcs", "kaggle-input", "synthetic")
GCS_PATH_VARIABLE = "PETALS_GCS_PATH"


@dataclass(frozen=True)
class FetchOptions:
    source: str = "auto"
    data_dir: Path = Path("data")
    slug: str | None = None  # None: the spec's default slug
    data_from: Path | None = None  # source dir: the competition's zip or an unpacked folder
    gcs_path: str | None = None
    gcs_in_place: bool = False
    kaggle_input: Path = Path("/kaggle/input")
    sizes: tuple[int, ...] | None = None  # resolutions to keep and verify; None: all present
    synthetic_size: int = 192
    seed: int = 0
    scale: float | None = None  # None: the embedded dataset's default
    workers: int | None = None
    retries: int = 3
    force: bool = False
    progress: bool = True


# ----------------------------------------------------------------------------- sources


def resolve_source(
    options: FetchOptions, spec: CompetitionSpec, attached: Callable[[], Any] | None = None
) -> tuple[str, str]:
    """The concrete source for `auto` (the first that applies), with the reason in words.
    `attached()` finds the competition under Kaggle's input folder (the fetch passes its own,
    which searches once for both this choice and the copy)."""
    if options.source != "auto":
        return options.source, "asked for"
    if options.data_from:
        return "dir", f"a copy of the data was given ({options.data_from})"
    found = attached() if attached else find_kaggle_input(options, spec)
    if found:
        return "kaggle-input", f"the competition is attached at {found} (running inside Kaggle)"
    if options.gcs_path:
        return "gcs", f"a GCS path was given ({options.gcs_path})"
    where = kaggle_client.find_credentials()
    if where:
        return "kaggle", f"Kaggle credentials found in {where}"
    return "synthetic", (
        "no /kaggle/input data, GCS path or Kaggle credentials found; using the embedded offline dataset "
        f"({kaggle_client.CREDENTIALS_HELP} to fetch the real data)"
    )


def find_kaggle_input(options: FetchOptions, spec: CompetitionSpec) -> kaggle_input.Found | None:
    """The attached competition under Kaggle's input folder, wherever this year's layout put it."""
    slug = options.slug or spec.default_slug
    return kaggle_input.find(
        "competition",
        slug,
        holds_competition(spec),
        markers(spec),
        options.kaggle_input,
        aliases=spec.slugs,
    )


def _from_copy(options: FetchOptions, spec: CompetitionSpec, staging: Path) -> tuple[str, str]:
    """Source `dir`: a folder is read in place; Kaggle's zip is unpacked into the data dir.
    The root of the records and the origin, or a PetalsError naming what was given."""
    given = options.data_from
    if given is None:
        raise PetalsError("--source dir needs --from PATH (make fetch SOURCE=dir DATA_FROM=PATH)")
    given = given.expanduser().resolve()
    if given.is_file() and (given.suffix.lower() == ".zip" or zipfile.is_zipfile(given)):
        _unpack(given, staging, spec, options.sizes, options.progress, keep_archive=True)
        inner = find_in_copy(staging, spec)
        if inner is None:
            raise PetalsError(f"--from {given}: the archive holds no {markers(spec)}")
        if inner != staging:  # lift the files out of a wrapping folder
            for entry in list(inner.iterdir()):
                entry.rename(staging / entry.name)
            shutil.rmtree(staging / inner.relative_to(staging).parts[0])
        return str(staging), str(given)
    if given.is_file():
        raise PetalsError(
            f"--from {given}: not a zip archive (give the competition's zip or its unpacked folder)"
        )
    if not given.is_dir():
        raise PetalsError(f"--from {given}: no such file or folder")
    found = find_in_copy(given, spec)
    if found is None:
        raise PetalsError(f"--from {given}: no folder in it holds {markers(spec)}")
    return str(found), str(given)


@contextmanager
def _staging(data_dir: Path) -> Iterator[Path]:
    """A fresh sibling folder to build the data dir in; swapped into place only on success."""
    staging = data_dir.with_name(data_dir.name + ".partial")
    old = data_dir.with_name(data_dir.name + ".old")
    for leftover in (staging, old):  # from an interrupted earlier run
        if leftover.exists():
            shutil.rmtree(leftover)
    staging.mkdir(parents=True)
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if data_dir.exists():
        data_dir.rename(old)
    staging.rename(data_dir)
    shutil.rmtree(old, ignore_errors=True)


def _unpack(
    archive: Path,
    dest: Path,
    spec: CompetitionSpec,
    sizes: tuple[int, ...] | None,
    progress: bool,
    keep_archive: bool = False,
):
    """Unpack Kaggle's archive keeping its layout (only the chosen resolutions, if any). A damaged
    download is deleted, so the next run fetches it again; a user's own archive is kept."""
    keep_dirs = {spec.records.record_dir(s) for s in sizes} if sizes and spec.kind == "records" else None
    try:
        with zipfile.ZipFile(archive) as zf:
            if (unsafe := unsafe_member(zf)) is not None:
                raise PetalsError(f"corrupt archive {archive}: unsafe member path {unsafe!r}")
            members = [m for m in zf.infolist() if not m.is_dir()]
            if keep_dirs is not None:  # drop the other resolutions' folders, wherever they sit

                def wanted(name: str) -> bool:
                    record_dirs = [p for p in Path(name).parts[:-1] if spec.records.size_from_record_dir(p)]
                    return not record_dirs or record_dirs[0] in keep_dirs

                members = [m for m in members if wanted(m.filename)]
            total = sum(m.file_size for m in members)
            with tqdm(
                total=total, unit="B", unit_scale=True, desc="unpacking", disable=None if progress else True
            ) as bar:
                for m in members:
                    zf.extract(m, dest)
                    bar.update(m.file_size)
    except (zipfile.BadZipFile, EOFError, zlib.error) as err:  # damaged bytes, not a full disk
        if keep_archive:
            raise PetalsError(f"corrupt archive {archive} ({err})") from None
        archive.unlink(missing_ok=True)  # so the next run downloads it again
        raise PetalsError(f"corrupt archive {archive} ({err}): it was deleted, run fetch again") from None


# Progress bars use tqdm's disable=None: drawn on a terminal, left out of logs.
def _copy_tree(source_root: str, dest: Path, spec: CompetitionSpec, sizes: list[int], progress: bool) -> None:
    paths = data_files(source_root, spec, sizes)
    for path in tqdm(
        paths, unit="file", desc=f"copying from {source_root}", disable=None if progress else True
    ):
        target = dest / path[len(source_root.rstrip("/")) + 1 :]
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            tf.io.gfile.copy(path, str(target), overwrite=True)
        except tf.errors.OpError as err:
            raise PetalsError(f"cannot copy {path}: {first_line(err)}") from None


def _note_unusual_counts(counts: dict, spec: CompetitionSpec) -> None:
    for size, splits in counts.items():
        for split, c in splits.items():
            if spec.split_counts.get(split) not in (None, c["images"]):
                log.warning(
                    "note: %s at %dpx has %d images, the spec expects %d (another version of the data?)",
                    split,
                    size,
                    c["images"],
                    spec.split_counts[split],
                )


# ----------------------------------------------------------------------------- the stage


def _synthetic_request(options: FetchOptions, spec: CompetitionSpec) -> dict[str, Any]:
    scale = embedded.default_scale(spec) if options.scale is None else options.scale
    request = {"seed": options.seed, "scale": scale}
    return {**request, "size": options.synthetic_size} if spec.kind == "records" else request


def _reuse_existing(options: FetchOptions, spec: CompetitionSpec, existing: dict[str, Any]) -> None:
    """Refuse, with the way out, to silently keep data that differs from what was asked for."""
    flag = "--force (make fetch FORCE=1)"
    if existing.get("competition", spec.name) != spec.name:
        raise PetalsError(
            f"{options.data_dir} holds the data of competition {existing['competition']}, not {spec.name}; "
            f"choose another --data-dir (make fetch DATA=...) or pass {flag}"
        )
    if options.source not in ("auto", existing["source"]):
        raise PetalsError(
            f"{options.data_dir} already holds {existing['source']} data; pass {flag} "
            f"to replace it with {options.source} data, or choose another --data-dir"
        )
    if options.data_from and options.source in ("auto", "dir"):
        given = str(options.data_from.expanduser().resolve())
        if (existing["source"], existing["origin"]) != ("dir", given):
            raise PetalsError(
                f"{options.data_dir} already holds {existing['source']} data from {existing['origin']}; "
                f"pass {flag} to replace it with {given}, or choose another --data-dir"
            )
    if existing["source"] == "synthetic" and options.source == "synthetic":
        made, asked = existing.get("synthetic") or {}, _synthetic_request(options, spec)
        if made != asked:
            raise PetalsError(
                f"{options.data_dir} holds synthetic data made with {made}, not {asked}; "
                f"pass {flag} to regenerate"
            )


def fetch(options: FetchOptions, spec: CompetitionSpec) -> dict[str, Any]:
    """Run the fetch stage; returns the manifest. A second run is a no-op unless `force`.
    One fetch per data dir at a time: `<data-dir>.lock` beside it names the one at work."""
    if options.source not in SOURCES:
        raise PetalsError(f"unknown source {options.source!r} (choose from {', '.join(SOURCES)})")
    data_dir = options.data_dir
    with lock.holding(data_dir.with_name(data_dir.name + ".lock"), "fetch"):
        return _fetch(options, spec)


def _fetch(options: FetchOptions, spec: CompetitionSpec) -> dict[str, Any]:
    data_dir = options.data_dir
    existing = read_manifest(data_dir)
    if existing and not options.force:
        _reuse_existing(options, spec, existing)
        log.info(
            "fetch: %s already holds %s data (%s); nothing to do (--force to fetch again)",
            data_dir,
            existing["source"],
            existing["fingerprint"][:19],
        )
        return existing

    attached = functools.cache(lambda: find_kaggle_input(options, spec))  # a search, done once
    source, why = resolve_source(options, spec, attached)
    log.info("fetch: source %s: %s", source, why)
    slug = options.slug or spec.default_slug
    started = time.perf_counter()
    cache_dir = data_dir.with_name(data_dir.name + ".download")
    extra: dict[str, Any] = {}
    with _staging(data_dir) as staging:
        if source == "synthetic":
            extra["synthetic"] = request = _synthetic_request(options, spec)
            split_counts = embedded.draw(
                spec,
                staging,
                size=options.synthetic_size,
                seed=options.seed,
                scale=request["scale"],
                workers=options.workers,
                progress=options.progress,
            )
            root, origin, sizes = str(staging), "embedded synthetic dataset", (options.synthetic_size,)
            log.info("fetch: drew %s %s", split_counts, "rows" if spec.kind == "table" else "images")
        elif source == "kaggle":
            if not kaggle_client.find_credentials():
                raise PetalsError(
                    f"--source kaggle needs Kaggle credentials: {kaggle_client.CREDENTIALS_HELP}"
                )
            archive = kaggle_client.download_competition(
                slug, cache_dir, retries=options.retries, quiet=not options.progress
            )
            _unpack(archive, staging, spec, options.sizes, options.progress)
            root, origin, sizes = str(staging), f"kaggle competition {slug}", options.sizes
        elif source == "dir":
            root, origin = _from_copy(options, spec, staging)
            sizes = options.sizes
        elif source == "gcs":
            if spec.kind != "records":
                raise PetalsError(
                    f"--source gcs reads TFRecords; competition {spec.name} has {spec.kind} data"
                )
            if not options.gcs_path:
                raise PetalsError(
                    f"--source gcs needs --gcs-path gs://... (or the {GCS_PATH_VARIABLE} variable)"
                )
            remote = options.gcs_path.rstrip("/")
            sizes = options.sizes or tuple(found_sizes(remote, spec))
            if options.gcs_in_place:
                root = remote
            else:
                _copy_tree(remote, staging, spec, list(sizes), options.progress)
                root = str(staging)
            origin = remote
        else:  # kaggle-input
            found = attached()
            if found is None:
                raise PetalsError(
                    f"--source kaggle-input: no folder under {options.kaggle_input} holds "
                    f"{markers(spec)} (attach the competition {slug} to the kernel)"
                )
            if options.source != "auto":  # auto's reason above already said where
                log.info("fetch: the competition is attached at %s", found)
            root, origin, sizes = str(found.path), str(found.path), options.sizes

        if spec.kind == "records":
            counts = verify_layout(root, spec, sizes)
            if source != "synthetic":
                _note_unusual_counts(counts, spec)
            counted = {"sizes": {str(size): splits for size, splits in counts.items()}}
            digest = fingerprint(root, spec, list(counts))
        else:  # image folders and tables are unpacked into the data dir
            competition_files.unpack_into(Path(root), staging, spec)
            try:
                counted = {"splits": competition_files.verify(staging, spec)}
            except PetalsError as err:  # name the file where it came from: staging goes with the error
                raise PetalsError(str(err).replace(str(staging), origin.rstrip("/"))) from None
            root, counts = str(staging), {}
            digest = competition_files.fingerprint(staging, spec)
        manifest = {
            "competition": spec.name,
            "slug": slug,
            "source": source,
            "origin": origin,
            "root": "." if root == str(staging) else root,
            **counted,
            "fingerprint": digest,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "seconds": round(time.perf_counter() - started, 1),
            "petals_version": __version__,
            "synthetic": extra.get("synthetic"),
        }
        write_json(staging / MANIFEST, manifest)
    shutil.rmtree(cache_dir, ignore_errors=True)  # the archive is unpacked and verified
    for size, splits in counts.items():
        summary = ", ".join(f"{split} {c['images']}" for split, c in splits.items())
        log.info("fetch: %s ready at %dpx: %s images", data_dir, size, summary)
    if "splits" in manifest:
        summary = ", ".join(
            f"{split} {n} {unit}" for split, c in manifest["splits"].items() for unit, n in c.items()
        )
        log.info("fetch: %s ready: %s", data_dir, summary)
    return manifest


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--source", default="auto", choices=SOURCES, help="where the data comes from")
    parser.add_argument(
        "--data-dir", type=Path, default=Path("data"), help="where the data (or its manifest) goes"
    )
    parser.add_argument("--competition", default="flowers", help="competition spec under competition/")
    parser.add_argument(
        "--slug", default=None, help="Kaggle competition slug (default: the spec's first slug)"
    )
    parser.add_argument(
        "--from",
        dest="data_from",
        type=Path,
        default=None,
        help="source dir: your copy of the competition, its zip as Kaggle serves it or an unpacked folder",
    )
    parser.add_argument(
        "--gcs-path",
        default=os.environ.get(GCS_PATH_VARIABLE),
        help=f"gs:// folder holding the competition's files (default: ${GCS_PATH_VARIABLE})",
    )
    parser.add_argument(
        "--gcs-in-place", action="store_true", help="read the gs:// data in place, do not copy it"
    )
    parser.add_argument(
        "--kaggle-input", type=Path, default=Path("/kaggle/input"), help="Kaggle's input folder"
    )
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=None,
        help="resolutions to keep and verify (default: all present)",
    )
    parser.add_argument("--size", type=int, default=192, help="synthetic image size in pixels")
    parser.add_argument("--seed", type=int, default=0, help="synthetic dataset seed")
    parser.add_argument(
        "--scale",
        type=float,
        default=None,
        help="synthetic dataset size multiplier (default: each embedded dataset's own, 4 for flowers)",
    )
    parser.add_argument(
        "--workers", type=int, default=None, help="synthetic drawing processes (default: CPUs)"
    )
    parser.add_argument("--retries", type=int, default=3, help="attempts for Kaggle server errors")
    parser.add_argument("--force", action="store_true", help="fetch again even if the data dir is complete")
    parser.add_argument(
        "--no-progress",
        dest="progress",
        action="store_false",
        help="hide progress bars (shown only on a terminal)",
    )


def run(args: argparse.Namespace) -> None:
    spec = load_competition(args.competition)
    if args.slug and args.slug not in spec.slugs:
        raise PetalsError(f"slug {args.slug!r} is not one of this competition's: {', '.join(spec.slugs)}")
    options = FetchOptions(
        source=args.source,
        data_dir=args.data_dir,
        slug=args.slug,
        data_from=args.data_from,
        gcs_path=args.gcs_path,
        gcs_in_place=args.gcs_in_place,
        kaggle_input=args.kaggle_input,
        sizes=tuple(args.sizes) if args.sizes else None,
        synthetic_size=args.size,
        seed=args.seed,
        scale=args.scale,
        workers=args.workers,
        retries=args.retries,
        force=args.force,
        progress=args.progress,
    )
    try:
        fetch(options, spec)
    except ValueError as err:  # bad synthetic parameters
        raise PetalsError(str(err)) from None
