"""Kernel stage: a Kaggle kernel that runs a recipe on the accelerators Kaggle offers today.

`generate` writes `kernels/<name>/`: the kernel script (the files git tracks in this repo's
`pipeline/` and `competition/` bundled into it, byte for byte, never edited by hand;
`pipeline/kernel_main.py` says what it does on Kaggle) and `kernel-metadata.json`
(`pipeline/kernels/metadata.py`), checked in a staging folder before they replace an earlier
generation. What the kernel could not do there is refused here, in one line
(`pipeline/kernels/recipe_check.py`): a retired accelerator, a backbone Kaggle's TPU image cannot
build (it trains on JAX), weights or packages a kernel without internet cannot reach, a competition
or recipe file git does not track (`check_carried`: the kernel would fail, or run another). A code
competition's kernel has the internet off and writes the competition's submission file, which
`make submit` sends. `push` checks the folder first (`pipeline/kernels/check.py`) and uploads it;
`status` reports the run; `output` downloads its outputs and records the run on the offline
leaderboard as a Kaggle run (`pipeline/kernels/remote.py`). With `--folds K --fold 0,1` the kernel
trains those folds of the recipe's CV group instead, and `output` merges its fold runs into
--runs-dir, assembling the group once every fold is there (`pipeline/cv/merge.py`).
"""

from __future__ import annotations

import argparse
import base64
import logging
import os
import pprint
import shutil
import tempfile
from pathlib import Path
from typing import Any

from pipeline.core import options
from pipeline.core.errors import PetalsError
from pipeline.core.files import write_json
from pipeline.core.paths import check_name, shown
from pipeline.kernels.bundle import REPO, bundle, bundle_members, check_carried
from pipeline.kernels.metadata import (
    ACCELERATORS,
    CODE_COMPETITION_ACCELERATOR,
    DATASET_SOURCE,
    DEFAULT_ACCELERATOR,
    KERNEL_STRATEGY,
    METADATA,
    MODEL_SOURCE,
    NOTEBOOK,
    RETIRED,  # noqa: F401  (re-exported: the accelerator tables are read as kernel.*)
    SCRIPT,
    SESSION_LIMIT,
    SUMMARY,  # noqa: F401  (re-exported: what the kernel writes, read as kernel.SUMMARY)
    TEMPLATE,
    check_accelerator,
    default_name,
    find_owner,
    kernel_folder,
    metadata,
    notebook_entry,
    read_metadata,
    resolve_accelerator,
    resume_sources,
)
from pipeline.kernels.recipe_check import check_recipe, kernel_internet, weights_file
from pipeline.stages import arguments

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from pipeline.tasks import recipe_config

    parser.add_argument(
        "action", choices=("generate", "check", "push", "status", "output"), help="what to do"
    )
    parser.add_argument(
        "--name", default=None, help="kernel folder and slug (default: petals-<competition>-<recipe>)"
    )
    parser.add_argument(
        "--kernels-dir", type=Path, default=options.KERNELS_DIR, help="where kernel folders go"
    )
    parser.add_argument(
        "--owner", default=None, help="Kaggle user that owns the kernel (default: the credentials')"
    )
    parser.add_argument(
        "--accelerator",
        default=None,
        help=f"one of {', '.join(ACCELERATORS)} (default: {DEFAULT_ACCELERATOR}; a code competition: "
        f"{CODE_COMPETITION_ACCELERATOR})",
    )
    parser.add_argument(
        "--resume-from",
        action="append",
        default=[],
        help="attach this kernel's output (owner/slug, or self) and resume its runs; repeatable",
    )
    parser.add_argument(
        "--kernel-type", default="script", choices=("script", "notebook"), help="Kaggle kernel type"
    )
    parser.add_argument(
        "--internet",
        default=None,
        choices=("on", "off"),
        help="kernel internet (pretrained weights download); default on, off for a code competition",
    )
    parser.add_argument(
        "--dataset", action="append", default=[], help="attach a dataset (owner/slug), repeatable"
    )
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        help="attach a Kaggle model (owner/model/framework/variation/version), repeatable",
    )
    parser.add_argument("--slug", default=None, help="competition slug (default: the spec's first)")
    parser.add_argument(
        "--tta", type=int, default=options.TTA, help="TTA passes for the kernel's predictions"
    )
    parser.add_argument(
        "--folds",
        type=int,
        default=None,
        help="K: the kernel trains folds of the recipe's K-fold CV group, not one run (default: one run)",
    )
    parser.add_argument(
        "--fold",
        dest="fold_list",
        type=arguments.fold_list,
        default=(),
        help="with --folds: only these, e.g. 0,1",
    )
    arguments.add_data_dir(parser, help="output: the data dir whose CV group the kernel's folds join")
    arguments.add_runs_dir(parser)
    parser.add_argument(
        "--timeout",
        type=int,
        default=None,
        help="the kernel's longest run, seconds (default: Kaggle's session limit); training stops before it",
    )
    arguments.add_submissions_dir(parser, help="output: the leaderboard")
    recipe_config.add_config_arguments(parser)


def check_names(args: argparse.Namespace) -> None:
    """Every name the user gives that becomes a folder or a Kaggle slug is a plain name, each part of
    an owner/slug source too: `--name ../evil` would put the kernel folder outside --kernels-dir."""
    for option, value in (("--name", args.name), ("--owner", args.owner)):
        if value is not None:
            check_name(value, option)
    for option, values in (
        ("--resume-from", args.resume_from),
        ("--dataset", args.dataset),
        ("--model", args.model),
    ):
        for value in values:
            for part in value.split("/"):  # the number of parts is checked with the source's shape
                check_name(part, f"{option} {shown(value)}, part")


def run(args: argparse.Namespace) -> None:
    from pipeline.kernels import remote
    from pipeline.kernels.check import check

    check_names(args)
    args.accelerator = resolve_accelerator(args.accelerator, kernel_spec(args))
    if args.action == "generate":
        folder = generate(args)
        kernel_id = read_metadata(folder)["id"]
        print(f"kernel: {folder} ({kernel_id}); push with `make kernel-push`")
        return
    folder = kernel_folder(
        args.kernels_dir, args.name, args.recipe, args.accelerator, kernel_competition(args)
    )
    read_metadata(folder)  # one line saying to generate it first
    if args.action == "check":
        check(folder)
        print(f"kernel: {folder} passes the checks")
    elif args.action == "push":
        check(folder)
        remote.push(folder, args.timeout)
    elif args.action == "status":
        print(remote.status(folder))
    else:
        remote.output(folder, args.submissions_dir, args.data_dir, args.runs_dir)


def kernel_spec(args: argparse.Namespace):
    """The competition the kernel's overrides pick (the default one without)."""
    from pipeline.core.config import DEFAULT_COMPETITION
    from pipeline.core.overrides import parse_overrides
    from pipeline.tasks.competitions import load_competition

    return load_competition(parse_overrides(args.overrides).get("competition", DEFAULT_COMPETITION))


def kernel_competition(args: argparse.Namespace) -> str:
    """The name of the competition the kernel's overrides pick (the default one without)."""
    return kernel_spec(args).name


def kernel_recipe(args: argparse.Namespace) -> str:
    """The recipe the kernel runs: `auto` is the one for its accelerator's device, as on any machine."""
    from pipeline.core.config import resolve_recipe

    return resolve_recipe(args.recipe, check_accelerator(args.accelerator).upper())


# ----------------------------------------------------------------------------- generate


def kernel_settings(args: argparse.Namespace, config, spec, kernel_id: str) -> dict[str, Any]:
    from pipeline import networks
    from pipeline.core.git import git_commit

    session = ACCELERATORS[args.accelerator]
    return {
        "recipe": config.recipe,  # resolved: the kernel runs what was checked here
        "overrides": list(args.overrides),
        "competition": spec.name,
        "slug": args.slug or spec.default_slug,
        "image_size": config.data.image_size if spec.resolutions else None,  # the resolution to fetch
        "tta": args.tta,
        "petals_commit": git_commit(),
        "accelerator": args.accelerator,
        "strategy": KERNEL_STRATEGY[session],
        "internet": args.internet == "on",
        "code_competition": spec.code_competition,
        "submission_file": spec.submission_file,  # written in the working folder, checked first
        "weights_file": weights_file(config.model.backbone, config.model.weights),
        "packages": networks.packages(config),
        "resume_from": resume_sources(args.resume_from, kernel_id),
        "datasets": list(args.dataset),  # one may hold trained runs (petals_runs/) to predict with
        "time_limit": args.timeout or SESSION_LIMIT[session],
        "folds": args.folds,  # None: one run; K: the folds in fold_list (all when empty) of its CV group
        "fold_list": list(args.fold_list),
        "fold_table": carried_fold_table(args, config, spec),
    }


def carried_fold_table(args: argparse.Namespace, config, spec) -> dict | None:
    """A FOLDS kernel carries the fold table of the data fetched here (dealt now if need be), so
    Kaggle's scikit-learn cannot deal its folds differently from the group they join."""
    import dataclasses

    from pipeline.data import folds

    if args.folds is None:
        return None
    with_folds = dataclasses.replace(config, train=dataclasses.replace(config.train, folds=args.folds))
    carried, why_not = folds.carried_table(args.data_dir, spec, with_folds)
    if carried is None:
        print(f"kernel: carries no fold table ({why_not}): the kernel deals its folds from Kaggle's copy")
    else:
        print(f"kernel: carries {args.data_dir}'s fold table ({carried['name']}, {carried['examples']} "
              f"examples, {carried['digest']}): used there if it deals Kaggle's copy exactly")  # fmt: skip
    return carried


def script_text(settings: dict[str, Any], payload: bytes, notebook: bool) -> str:
    template = TEMPLATE.read_text()
    encoded = base64.b64encode(payload).decode()
    lines = "\n".join(encoded[i : i + 100] for i in range(0, len(encoded), 100))
    text = template.replace("SETTINGS = {}", "SETTINGS = " + pprint.pformat(settings, width=100))
    text = text.replace('BUNDLE = ""', f'BUNDLE = """\n{lines}\n"""')
    if notebook:  # a notebook cell has ipykernel's argv: run with the defaults
        text = text.replace(*notebook_entry())
    return text


def generate(args: argparse.Namespace) -> Path:
    from pipeline.tasks import recipe_config
    from pipeline.tasks.competitions import load_competition

    session = check_accelerator(args.accelerator)
    config = recipe_config.config_from_args(args, session.upper())  # auto: the accelerator's recipe
    spec = load_competition(config.competition)
    members = bundle_members()
    extra = check_carried(members, config.competition, kernel_recipe(args))  # before Kaggle's queue
    args.internet = kernel_internet(spec, args.internet)  # off for a code competition
    slug = args.slug or spec.default_slug
    if slug not in spec.slugs:
        raise PetalsError(f"slug {slug!r} is not one of this competition's: {', '.join(spec.slugs)}")
    for dataset in args.dataset:
        if not DATASET_SOURCE.fullmatch(dataset):
            raise PetalsError(f"--dataset {dataset!r}: expected owner/dataset-slug")
    for model in args.model:
        if not MODEL_SOURCE.fullmatch(model):
            raise PetalsError(f"--model {model!r}: expected owner/model/framework/variation/version")
    check_recipe(config, spec, session, args.internet == "on", [*args.dataset, *args.model])
    from pipeline.modeling.inference import check_tta

    check_tta(spec, args.tta)  # the kernel would train first and only then stop at evaluate
    check_folds(args, spec, config)
    name = args.name or default_name(config.recipe, spec.name)
    meta = metadata(args, find_owner(args.owner), name, slug)
    settings = kernel_settings(args, config, spec, meta["id"])
    text = script_text(settings, bundle(REPO, members, extra), notebook=args.kernel_type == "notebook")
    return place_checked(args.kernels_dir / name, text, meta)


def check_folds(args: argparse.Namespace, spec, config) -> None:
    """--folds and --fold as the CV stage takes them, refused here in one line rather than on Kaggle:
    K of at least 2, folds 0..K-1, a config that holds a fold out, a competition scored on a file
    the kernel writes (a code competition's kernel must submit; a fold kernel does not)."""
    if args.folds is None:
        if args.fold_list:
            raise PetalsError(
                f"--fold {','.join(map(str, args.fold_list))} needs --folds K (FOLDS=5 FOLD=0,1)"
            )
        return
    if args.folds < 2:
        raise PetalsError(f"FOLDS={args.folds}: cross-validation needs at least 2 folds")
    bad = [f for f in args.fold_list if not 0 <= f < args.folds]
    if bad:
        raise PetalsError(f"FOLD={','.join(map(str, args.fold_list))}: folds are 0..{args.folds - 1}")
    if config.train.merge_val:
        raise PetalsError("train.merge_val=true trains on every example: no fold is held out")
    if spec.code_competition:
        raise PetalsError(
            f"competition {spec.name} is a code competition: its kernel must write the submission, and "
            "a FOLDS kernel writes fold runs; train the folds elsewhere (make train FOLDS=...)"
        )


def place_checked(folder: Path, text: str, meta: dict[str, Any]) -> Path:
    """Write the kernel into a temporary folder beside `folder`, check it there, and only then move
    its files into `folder`: a refused kernel (a secret in the bundle) leaves nothing behind, and an
    earlier good generation, with its downloaded output/, stays as it was."""
    from pipeline.kernels.check import check

    made = [p for p in (folder.parent, *folder.parent.parents) if not p.exists()]
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".generating", dir=folder.parent))
    try:
        staging.chmod(folder.parent.stat().st_mode & 0o777)  # mkdtemp's 0700 would outlive the rename
        code_file = meta["code_file"]
        if meta["kernel_type"] == "notebook":
            cell = {
                "cell_type": "code",
                "execution_count": None,
                "metadata": {},
                "outputs": [],
                "source": text,
            }
            notebook = {
                "cells": [cell],
                "metadata": {
                    "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
                },
                "nbformat": 4,
                "nbformat_minor": 4,
            }
            write_json(staging / code_file, notebook)
        else:
            (staging / code_file).write_text(text)
        write_json(staging / METADATA, meta)
        check(staging, shown_as=folder)
        if not folder.exists():
            staging.rename(folder)  # whole, in one step
            return folder
        for name in (code_file, METADATA):
            os.replace(staging / name, folder / name)
        (folder / (NOTEBOOK if code_file == SCRIPT else SCRIPT)).unlink(missing_ok=True)
        return folder
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        for created in made:  # the kernels folder this call made, if it holds nothing else
            if created.exists() and not any(created.iterdir()):
                created.rmdir()
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
