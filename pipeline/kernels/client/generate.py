"""A Kaggle kernel generated from a recipe: `kernels/<name>/`, checked before it replaces an earlier one.

The kernel script is `pipeline/kernels/script/main.py` with the settings below and the files git tracks in
`pipeline/` and `competition/` bundled into it, byte for byte (`bundle.py`), beside
`kernel-metadata.json` (`metadata.py`). What the kernel could not do on Kaggle is refused here, in
one line (`recipe_check.py`): a retired accelerator, a backbone Kaggle's TPU image cannot build,
weights or packages a kernel without internet cannot reach, a competition or recipe file git does
not track (the kernel would fail, or run another). The same sources give the same bytes.
"""

from __future__ import annotations

import base64
import dataclasses
import os
import pprint
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.core.errors import PetalsError
from pipeline.core.files import write_json
from pipeline.core.options import KernelOptions
from pipeline.core.paths import check_name, shown
from pipeline.formats.base import resolutions_of
from pipeline.kernels.client import weights, wheels
from pipeline.kernels.client.bundle import REPO, bundle, bundle_members, check_carried
from pipeline.kernels.client.metadata import (
    ACCELERATORS,
    DATASET_SOURCE,
    KERNEL_STRATEGY,
    METADATA,
    MODEL_SOURCE,
    NOTEBOOK,
    SCRIPT,
    SESSION_LIMIT,
    TEMPLATE,
    check_accelerator,
    default_name,
    find_owner,
    kernel_folder,
    metadata,
    notebook_entry,
    resolve_accelerator,
    resume_sources,
)
from pipeline.kernels.client.recipe_check import check_recipe, kernel_internet, preset_model, weights_file

if TYPE_CHECKING:
    from pipeline.tasks.competitions import Competition


def kernel_competition(options: KernelOptions) -> str:
    """The competition the kernel's overrides name (the default one without): the stage resolves
    it once and passes its spec down."""
    from pipeline.core.config import DEFAULT_COMPETITION
    from pipeline.core.overrides import parse_overrides

    return parse_overrides(options.overrides).get("competition", DEFAULT_COMPETITION)


def check_names(options: KernelOptions) -> None:
    """Every name given that becomes a folder or a Kaggle slug is a plain name, each part of an
    owner/slug source too: `--name ../evil` would put the kernel folder outside --kernels-dir."""
    for option, value in (("--name", options.name), ("--owner", options.owner)):
        if value is not None:
            check_name(value, option)
    for option, values in (
        ("--resume-from", options.resume_from),
        ("--dataset", options.dataset),
        ("--model", options.model),
    ):
        for value in values:
            for part in value.split("/"):  # the number of parts is checked with the source's shape
                check_name(part, f"{option} {shown(value)}, part")


def resolved(options: KernelOptions, spec) -> KernelOptions:
    """The options with the accelerator filled in: the one asked for, else the default for the
    competition (`spec`, the one `kernel_competition` names)."""
    return dataclasses.replace(options, accelerator=resolve_accelerator(options.accelerator, spec))


def folder_of(options: KernelOptions, spec) -> Path:
    """The folder `generate` writes for these options (on `spec`, their competition's)."""
    accelerator = resolve_accelerator(options.accelerator, spec)
    return kernel_folder(options.kernels_dir, options.name, options.recipe, accelerator, spec.name)


def kernel_recipe(options: KernelOptions) -> str:
    """The recipe the kernel runs: `auto` is the one for its accelerator's device, as on any machine."""
    from pipeline.core.config import resolve_recipe

    return resolve_recipe(options.recipe, check_accelerator(options.accelerator).upper())


# ----------------------------------------------------------------------------- generate


def kernel_settings(
    options: KernelOptions,
    config,
    spec,
    kernel_id: str,
    shipped: dict | None = None,
    wheel_hashes: dict[str, str] | None = None,
) -> dict[str, Any]:
    from pipeline import networks
    from pipeline.core.git import git_commit

    session = ACCELERATORS[options.accelerator]
    return {
        "recipe": config.recipe,  # resolved: the kernel runs what was checked here
        "overrides": list(options.overrides),
        "competition": spec.name,
        "slug": options.slug or spec.default_slug,
        "image_size": config.data.image_size if resolutions_of(spec) else None,  # the resolution to fetch
        "tta": options.tta,
        "petals_commit": git_commit(),
        "accelerator": options.accelerator,
        "strategy": KERNEL_STRATEGY[session],
        "internet": options.internet == "on",
        "code_competition": spec.code_competition,
        "submission_file": spec.submission_file,  # written in the working folder, checked first
        "weights_file": weights_file(config.model.backbone, config.model.weights),
        "shipped_weights": shipped,  # {dataset, file, bytes, sha256}: the backbone's file, `weights.py`
        "packages": networks.packages(config),
        "wheel_hashes": wheel_hashes,  # {file: sha256} of the wheels dataset: the kernel installs no other
        "resume_from": resume_sources(options.resume_from, kernel_id),
        "datasets": list(options.dataset),  # one may hold trained runs (petals_runs/) to predict with
        "time_limit": options.timeout or SESSION_LIMIT[session],
        "folds": options.folds,  # None: one run; K: the folds in fold_list (all when empty) of its CV group
        "fold_list": list(options.fold_list),
        "fold_table": carried_fold_table(options, config, spec),
        # A share of a study's trials: each one's number and the values the study fixed for it.
        "trials": [{"number": n, "overrides": list(values)} for n, values in options.trial_values],
    }


def carried_fold_table(options: KernelOptions, config, spec) -> dict | None:
    """A FOLDS kernel carries the fold table of the data fetched here (dealt now if need be), so
    Kaggle's scikit-learn cannot deal its folds differently from the group they join."""
    from pipeline.data import folds

    if options.folds is None:
        return None
    with_folds = dataclasses.replace(config, train=dataclasses.replace(config.train, folds=options.folds))
    carried, why_not = folds.carried_table(options.data_dir, spec, with_folds)
    if carried is None:
        print(f"kernel: carries no fold table ({why_not}): the kernel deals its folds from Kaggle's copy")
    else:
        print(f"kernel: carries {options.data_dir}'s fold table ({carried['name']}, {carried['examples']} "
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


def generate(options: KernelOptions, competition: Competition) -> Path:
    """Write `kernels/<name>/` for the options' recipe (on `competition`, the one they name, as the
    stage resolved it), checked before it replaces an earlier generation; its folder. Anything the
    kernel could not do on Kaggle is one line here first."""
    from pipeline.tasks import recipe_config

    spec = competition.spec
    options = resolved(options, spec)
    session = check_accelerator(options.accelerator)
    config = recipe_config.config_from_args(options, session.upper())  # auto: the accelerator's recipe
    members = bundle_members()
    # What the kernel reads again on Kaggle is carried: checked here, before Kaggle's queue.
    extra = check_carried(members, config.competition, kernel_recipe(options), competition)
    # The networks (Keras) are imported once the kernel's files are known to be what git tracks.
    from pipeline.modeling.inference import check_tta
    from pipeline.networks import backbone

    options = dataclasses.replace(options, internet=kernel_internet(spec, options.internet))
    preset = preset_model(config)
    if preset and not options.model:  # what petals knows, it fills in: the preset the recipe names
        options = dataclasses.replace(options, model=(preset,))
        print(f"kernel: attaches the Kaggle model {preset}, the preset model.weights names (or MODELS=)")
    slug = options.slug or spec.default_slug
    if slug not in spec.slugs:
        raise PetalsError(f"slug {slug!r} is not one of this competition's: {', '.join(spec.slugs)}")
    for dataset in options.dataset:
        if not DATASET_SOURCE.fullmatch(dataset):
            raise PetalsError(f"--dataset {dataset!r}: expected owner/dataset-slug")
    for model in options.model:
        if not MODEL_SOURCE.fullmatch(model):
            raise PetalsError(f"--model {model!r}: expected owner/model/framework/variation/version")
    attached = [*options.dataset, *options.model]
    # A dataset given may hold the wheels (trusted); an attached model does not.
    requirements = [] if options.dataset else wheels.needed(config, options.internet == "on")
    # The backbone's weights file, when the kernel could not reach it: a given dataset may hold
    # ImageNet's (trusted), not a file that is only on this machine.
    trusted = options.dataset and config.model.weights in backbone.WEIGHT_CHOICES
    source = None if trusted else weights.needed(config, options.internet == "on")
    check_recipe(config, spec, session, options.internet == "on", attached, wheels=bool(requirements),
                 shipped=source is not None)  # fmt: skip
    check_tta(spec, options.tta)  # the kernel would train first and only then stop at evaluate
    check_folds(options, spec, config)
    check_trials(options, spec, session)
    name = options.name or default_name(config.recipe, spec.name)
    owner = find_owner(options.owner)
    meta = metadata(options, owner, name, slug)  # the name checked before anything is downloaded
    built = wheels.build(options.kernels_dir, requirements, owner) if requirements else None
    if built is not None:  # what the image lacks, as Kaggle does it: wheels in a private dataset it attaches
        options = dataclasses.replace(options, dataset=(*options.dataset, built["dataset"]))
    shipped = weights.ship(options.kernels_dir, source, owner) if source is not None else None
    if shipped is not None:  # the backbone's weights file, the same way
        options = dataclasses.replace(options, dataset=(*options.dataset, shipped["dataset"]))
    meta = metadata(options, owner, name, slug)
    settings = kernel_settings(options, config, spec, meta["id"], shipped, built and built["wheels"])
    text = script_text(settings, bundle(REPO, members, extra), notebook=options.kernel_type == "notebook")
    return place_checked(options.kernels_dir / name, text, meta)


def check_folds(options: KernelOptions, spec, config) -> None:
    """--folds and --fold as the CV stage takes them, refused here in one line rather than on Kaggle:
    K of at least 2, folds 0..K-1, a config that holds a fold out, a competition scored on a file
    the kernel writes (a code competition's kernel must submit; a fold kernel does not)."""
    if options.folds is None:
        if options.fold_list:
            raise PetalsError(
                f"--fold {','.join(map(str, options.fold_list))} needs --folds K (FOLDS=5 FOLD=0,1)"
            )
        return
    if options.folds < 2:
        raise PetalsError(f"FOLDS={options.folds}: cross-validation needs at least 2 folds")
    bad = [f for f in options.fold_list if not 0 <= f < options.folds]
    if bad:
        raise PetalsError(f"FOLD={','.join(map(str, options.fold_list))}: folds are 0..{options.folds - 1}")
    if config.train.merge_val:
        raise PetalsError("train.merge_val=true trains on every example: no fold is held out")
    if spec.code_competition:
        raise PetalsError(
            f"competition {spec.name} is a code competition: its kernel must write the submission, and "
            "a FOLDS kernel writes fold runs; train the folds elsewhere (make train FOLDS=...)"
        )


def check_trials(options: KernelOptions, spec, session: str) -> None:
    """A kernel of a study's trials: each trial's values make a config (built as the kernel will),
    whole folds (no FOLD=), and no code competition (such a kernel writes runs, not a submission)."""
    from pipeline.tasks import recipe_config

    if not options.trial_values:
        return
    if options.fold_list:
        raise PetalsError("a kernel of a study's trials trains every fold of each trial: no FOLD=")
    if spec.code_competition:
        raise PetalsError(
            f"competition {spec.name} is a code competition: its kernel must write the submission, and "
            "a kernel of trials writes runs; sweep it here (make sweep)"
        )
    for number, values in options.trial_values:
        given = dataclasses.replace(options, overrides=(*options.overrides, *values))
        try:
            recipe_config.config_from_args(given, session.upper())
        except PetalsError as err:
            raise PetalsError(f"trial {number}: {err}") from None


def place_checked(folder: Path, text: str, meta: dict[str, Any]) -> Path:
    """Write the kernel into a temporary folder beside `folder`, check it there, and only then move
    its files into `folder`: a refused kernel (a secret in the bundle) leaves nothing behind, and an
    earlier good generation, with its downloaded output/, stays as it was."""
    from pipeline.kernels.client.check import check

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
