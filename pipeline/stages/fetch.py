"""Fetch stage: put the competition's data where later stages find them, verified.

Sources: the Kaggle API, your own copy (`dir`: the competition's zip as Kaggle serves it, or
an unpacked folder), a `gs://` (or any tf.io.gfile) path, `/kaggle/input/<slug>` inside
Kaggle, or the embedded synthetic dataset. TFRecords are kept as they are; image folders and
tables (pipeline/data/competition_files.py) are unpacked. Copies are made in a staging
folder, verified against the competition spec and swapped into place, so an
interrupted fetch never leaves a half-valid data dir. `manifest.json` in the data
dir records the source, the counts and a content fingerprint; later stages read
the data's location from it.

Fetch deletes only what is its own: the data dir it wrote (it holds the manifest) and the work
folders beside it that carry petals' marker. A source that is, holds or lies inside the data dir
or one of those folders is refused before anything is touched, and so is a data dir holding
someone else's files.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from competition import CompetitionSpec
from pipeline import __version__
from pipeline.core import lock
from pipeline.core.errors import PetalsError
from pipeline.core.files import make_work_folder, remove_work_folder, write_json
from pipeline.data import work_folders
from pipeline.data.manifest import MANIFEST, read_manifest
from pipeline.data.readers import reader_for
from pipeline.data.sources import SOURCES as REGISTERED
from pipeline.data.sources import Context, FetchOptions, by_priority
from pipeline.data.sources.attached import find_attached
from pipeline.data.sources.gcs import GCS_PATH_VARIABLE
from pipeline.data.sources.synthetic import request as synthetic_request
from pipeline.stages import arguments
from pipeline.tasks.competitions import load_competition

log = logging.getLogger(__name__)

SOURCES = ("auto", *REGISTERED)
__all__ = ["FetchOptions", "fetch"]


def resolve_source(
    options: FetchOptions, spec: CompetitionSpec, attached: Callable[[], Any] | None = None
) -> tuple[str, str]:
    """The concrete source for `auto` (the first registered source that applies, by priority),
    with the reason in words. `attached()` finds the competition under Kaggle's input folder
    (the fetch passes its own, which searches once for both this choice and the copy)."""
    if options.source != "auto":
        return options.source, "asked for"
    context = _context(options, spec, attached)
    for source in by_priority():
        why = source.auto_reason(context)
        if why:
            return source.name, why
    raise AssertionError("the synthetic source always applies")  # a registry without it: a bug


def _context(options: FetchOptions, spec: CompetitionSpec, attached=None) -> Context:
    data_dir = options.data_dir
    return Context(
        options=options,
        spec=spec,
        slug=options.slug or spec.default_slug,
        cache_dir=work_folders.beside(data_dir, work_folders.DOWNLOAD),
        attached=attached or functools.cache(lambda: find_attached(options, spec)),
    )


# ----------------------------------------------------------------------------- the stage


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
        made, asked = existing.get("synthetic") or {}, synthetic_request(options, spec)
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
    work_folders.check_sources_apart(options)  # before the lock: even its file could land in the source
    made = work_folders.missing_folders(data_dir.parent)
    try:
        with lock.holding(data_dir.with_name(data_dir.name + ".lock"), "fetch"):
            return _fetch(options, spec)
    except BaseException:  # a failed fetch leaves no empty folders it made on the way to the lock
        for folder in made:
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
        raise


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

    context = _context(options, spec)
    source, why = resolve_source(options, spec, context.attached)
    if source == "kaggle-input" and (found := context.attached()) is not None:
        work_folders.check_apart(data_dir, found.path, "--kaggle-input")
    work_folders.check_replaceable(data_dir, source, context.cache_dir, context.slug)
    log.info("fetch: source %s: %s", source, why)
    slug = context.slug
    started = time.perf_counter()
    if source == "kaggle":  # the download folder, marked so a later fetch knows it is petals'
        make_work_folder(context.cache_dir)
    try:
        manifest, counts = _build(data_dir, spec, source, context, started)
    except BaseException:
        work_folders.drop_if_unused(context.cache_dir)
        raise
    if context.cache_dir.exists() and work_folders.is_own(context.cache_dir, slug):  # unpacked and verified
        remove_work_folder(context.cache_dir)
    for size, splits in counts.items():
        summary = ", ".join(f"{split} {c['images']}" for split, c in splits.items())
        log.info("fetch: %s ready at %dpx: %s images", data_dir, size, summary)
    if "splits" in manifest:
        summary = ", ".join(
            f"{split} {n} {unit}" for split, c in manifest["splits"].items() for unit, n in c.items()
        )
        log.info("fetch: %s ready: %s", data_dir, summary)
    return manifest


def _build(
    data_dir: Path, spec: CompetitionSpec, source: str, context: Context, started: float
) -> tuple[dict[str, Any], dict]:
    """The data dir built in staging by `source`, verified, its manifest written, swapped into place;
    (the manifest, its counts per resolution: none where the data has no fixed resolutions)."""
    slug = context.slug
    with work_folders.staging_for(data_dir) as staging:
        got = REGISTERED[source].get(context, staging)
        taken = reader_for(spec).take_in(got, staging, spec, drawn=source == "synthetic")
        manifest = {
            "competition": spec.name,
            "slug": slug,
            "source": source,
            "origin": got.origin,
            "root": "." if taken.root == str(staging) else taken.root,
            **taken.counted,
            "fingerprint": taken.fingerprint,  # every file: the data dir
            # the labelled splits: what a run trains on, in its id
            "labelled_fingerprint": taken.labelled_fingerprint,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "seconds": round(time.perf_counter() - started, 1),
            "petals_version": __version__,
            "synthetic": got.extra.get("synthetic"),
        }
        write_json(staging / MANIFEST, manifest)
    return manifest, taken.sizes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--source", default=FetchOptions.source, choices=SOURCES, help="where the data comes from"
    )
    arguments.add_data_dir(parser, help="where the data (or its manifest) goes")
    arguments.add_competition(parser)
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
        "--kaggle-input", type=Path, default=FetchOptions.kaggle_input, help="Kaggle's input folder"
    )
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=None,
        help="resolutions to keep and verify (default: all present)",
    )
    parser.add_argument(
        "--size", type=int, default=FetchOptions.synthetic_size, help="synthetic image size in pixels"
    )
    parser.add_argument("--seed", type=int, default=FetchOptions.seed, help="synthetic dataset seed")
    parser.add_argument(
        "--scale",
        type=float,
        default=None,
        help="synthetic dataset size multiplier (default: each embedded dataset's own)",
    )
    parser.add_argument(
        "--workers", type=int, default=None, help="synthetic drawing processes (default: CPUs)"
    )
    parser.add_argument(
        "--retries", type=int, default=FetchOptions.retries, help="attempts for Kaggle server errors"
    )
    parser.add_argument("--force", action="store_true", help="fetch again even if the data dir is complete")
    parser.add_argument(
        "--no-progress",
        dest="progress",
        action="store_false",
        help="hide progress bars (shown only on a terminal)",
    )


def run(args: argparse.Namespace) -> None:
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
    fetch_competition(args.competition, options)


def fetch_competition(competition: str, options: FetchOptions) -> dict[str, Any]:
    """`fetch` for the competition named: its data into `options.data_dir`; returns the manifest."""
    spec = load_competition(competition).spec
    if options.slug and options.slug not in spec.slugs:
        raise PetalsError(f"slug {options.slug!r} is not one of this competition's: {', '.join(spec.slugs)}")
    try:
        return fetch(options, spec)
    except ValueError as err:  # bad synthetic parameters
        raise PetalsError(str(err)) from None
