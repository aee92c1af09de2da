"""Kernel stage: a Kaggle kernel that runs a recipe on a free TPU, generated from this pipeline.

`generate` writes `kernels/<name>/`: the kernel script (this repo's `pipeline/` and
`competition/` bundled into it, byte for byte, never edited by hand) and
`kernel-metadata.json`. On Kaggle the script reads `/kaggle/input/<slug>` (or the
competition's GCS path on a TPU that cannot see it), runs fetch, train, evaluate and predict
under the TPU strategy, and writes `submission.csv`, `petals_summary.json` (config, metrics,
timings) and the run's small files to `/kaggle/working`. `push` checks the folder first
(metadata, code file, the script answering `--help`, no secrets) and uploads it with the
official client; `status` reports the run; `output` downloads its outputs and records the run
on the offline leaderboard as a Kaggle run.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
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
# Accelerator ids Kaggle accepted in 2026 (../shared/facts); "None" runs on the CPU.
ACCELERATORS = (
    "TpuV5E8",
    "TpuV6E8",
    "Tpu1VmV38",
    "TpuV38",
    "NvidiaTeslaT4",
    "NvidiaTeslaP100",
    "NvidiaL4",
    "NvidiaTeslaA100",
    "NvidiaH100",
    "None",
)
DEFAULT_ACCELERATOR = "TpuV5E8"
TITLE_LIMIT = 50  # Kaggle's longest kernel title
DATASET_SOURCE = re.compile(r"[A-Za-z0-9_-]+/[A-Za-z0-9_.-]+")  # owner/dataset-slug


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
    parser.add_argument("--slug", default=None, help="competition slug (default: the spec's first)")
    parser.add_argument("--tta", type=int, default=1, help="TTA passes for the kernel's predictions")
    parser.add_argument("--timeout", type=int, default=None, help="push: the kernel's longest run, seconds")
    parser.add_argument(
        "--submissions-dir", type=Path, default=Path("submissions"), help="output: the leaderboard"
    )
    config_module.add_config_arguments(parser)


def run(args: argparse.Namespace) -> None:
    if args.action == "generate":
        folder = generate(args)
        check(folder)
        kernel_id = json.loads((folder / METADATA).read_text())["id"]
        print(f"kernel: {folder} ({kernel_id}); push with `make kernel-push`")
        return
    folder = args.kernels_dir / (args.name or default_name(args.recipe))
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


def default_name(recipe: str) -> str:
    return f"petals-{recipe}"


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


def kernel_settings(args: argparse.Namespace, config, spec) -> dict[str, Any]:
    from pipeline.stages.train import git_commit

    return {
        "recipe": args.recipe,
        "overrides": list(args.overrides),
        "competition": spec.name,
        "slug": args.slug or spec.default_slug,
        "image_size": config.data.image_size,
        "tta": args.tta,
        "petals_commit": git_commit(),
    }


def check_recipe(config, spec, internet: bool, datasets: list[str]) -> None:
    """What a kernel cannot run: a resolution Kaggle does not ship, weights it cannot reach."""
    size = config.data.image_size
    if size not in spec.resolutions:
        raise PetalsError(
            f"data.image_size={size}: Kaggle ships {', '.join(map(str, spec.resolutions))} px records only; "
            "the kernel cannot run this recipe"
        )
    from pipeline.modeling.registry import WEIGHT_CHOICES

    weights = config.model.weights
    downloaded = [w for w in WEIGHT_CHOICES if w != "none"]
    if weights not in WEIGHT_CHOICES and not weights.startswith("/kaggle/input/"):
        raise PetalsError(
            f"model.weights={weights!r} is a file on this machine, which the kernel cannot see: "
            "upload it as a Kaggle dataset, attach it (DATASETS=owner/slug) "
            "and set model.weights=/kaggle/input/<slug>/<file>"
        )
    if weights in downloaded and not internet and not datasets:
        raise PetalsError(
            f"model.weights={weights} downloads its weights, but the kernel has no internet: "
            "use INTERNET=on, or attach the weights as a dataset (DATASETS=owner/slug) "
            "and point model.weights at it"
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
    if args.accelerator not in ACCELERATORS:
        raise PetalsError(f"accelerator {args.accelerator!r}: Kaggle accepts {', '.join(ACCELERATORS)}")
    return {
        "id": f"{owner}/{name}",
        "title": title,
        "code_file": NOTEBOOK if args.kernel_type == "notebook" else SCRIPT,
        "language": "python",
        "kernel_type": args.kernel_type,
        "is_private": True,
        "enable_internet": args.internet == "on",
        "enable_gpu": args.accelerator.startswith("Nvidia"),
        "enable_tpu": args.accelerator.startswith("Tpu"),
        "machine_shape": args.accelerator,
        "competition_sources": [slug],
        "dataset_sources": list(args.dataset),
        "kernel_sources": [],
        "model_sources": [],
        "keywords": [],
        # No docker_image: a pinned image silently runs a TPU kernel on the CPU (../shared/facts).
    }


def script_text(settings: dict[str, Any], payload: bytes, notebook: bool) -> str:
    template = (Path(__file__).parent / "kernel_template.py").read_text()
    encoded = base64.b64encode(payload).decode()
    lines = "\n".join(encoded[i : i + 100] for i in range(0, len(encoded), 100))
    text = template.replace("SETTINGS = {}", "SETTINGS = " + json.dumps(settings, indent=4, sort_keys=True))
    text = text.replace('BUNDLE = ""', f'BUNDLE = """\n{lines}\n"""')
    if notebook:  # a notebook cell has ipykernel's argv: run with the defaults
        text = text.replace('if __name__ == "__main__":\n    sys.exit(main())', "main([])")
    return text


def generate(args: argparse.Namespace) -> Path:
    from competition import load_spec
    from pipeline.core import config as config_module

    if args.recipe == "auto":
        args.recipe = "tpu"  # a kernel is for Kaggle's accelerators
    config = config_module.config_from_args(args)
    spec = load_spec(config.competition)
    slug = args.slug or spec.default_slug
    if slug not in spec.slugs:
        raise PetalsError(f"slug {slug!r} is not one of this competition's: {', '.join(spec.slugs)}")
    for dataset in args.dataset:
        if not DATASET_SOURCE.fullmatch(dataset):
            raise PetalsError(f"--dataset {dataset!r}: expected owner/dataset-slug")
    check_recipe(config, spec, args.internet == "on", args.dataset)
    name = args.name or default_name(config.recipe)
    meta = metadata(args, find_owner(args.owner), name, slug)
    settings = kernel_settings(args, config, spec)
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


# ----------------------------------------------------------------------------- checks before a push


def _code(folder: Path, meta: dict) -> str:
    path = folder / meta["code_file"]
    text = path.read_text()
    if meta["kernel_type"] == "notebook":
        cells = json.loads(text)["cells"]
        return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    return text


def _secrets() -> list[str]:
    """This machine's Kaggle secrets (values only), to make sure none went into the bundle."""
    from pipeline.core import kaggle_client

    found = [os.environ.get(name, "") for name in ("KAGGLE_KEY", "KAGGLE_API_TOKEN")]
    found.append(str(kaggle_client.config_file_values().get("key", "")))
    token = kaggle_client.access_token_file()
    if token.is_file():
        found.append(token.read_text().strip())
    return [s for s in found if len(s) >= 8]


SECRET_PATTERNS = (
    re.compile(r"KAGGLE_KEY\s*=\s*['\"]?[0-9a-f]{32}"),
    re.compile(r"['\"]key['\"]\s*:\s*['\"][0-9a-f]{32}['\"]"),
    re.compile(r"KGAT_[0-9A-Za-z]{20,}"),
)


def check(folder: Path) -> None:
    """Everything Kaggle or the run would trip on, caught here: one line for the first fault."""
    from slugify import slugify

    path = folder / METADATA
    try:
        meta = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise PetalsError(f"{path}: unreadable ({err})") from None
    required = ("id", "title", "code_file", "language", "kernel_type", "is_private", "enable_internet")
    missing = [key for key in required if key not in meta]
    if missing:
        raise PetalsError(f"{path}: missing {', '.join(missing)}")
    owner, _, slug = str(meta["id"]).partition("/")
    if not owner or not slug or "/" in slug:
        raise PetalsError(f"{path}: id {meta['id']!r} must be owner/kernel-slug")
    if not 5 <= len(meta["title"]) <= TITLE_LIMIT or slugify(meta["title"]) != slug:
        raise PetalsError(
            f"{path}: title {meta['title']!r} must be 5 to {TITLE_LIMIT} characters and slugify to {slug!r}"
        )
    if meta["language"] != "python" or meta["kernel_type"] not in ("script", "notebook"):
        raise PetalsError(f"{path}: language must be python and kernel_type script or notebook")
    if "docker_image" in meta or "docker_image_pinning_type" in meta:
        raise PetalsError(f"{path}: remove docker_image: a pinned image runs a TPU kernel on the CPU")
    for source in meta.get("competition_sources", []):
        if "/" in source:
            raise PetalsError(f"{path}: competition source {source!r} must be the plain slug (no 'c/')")
    for source in meta.get("dataset_sources", []):
        if not DATASET_SOURCE.fullmatch(source):
            raise PetalsError(f"{path}: dataset source {source!r} must be owner/dataset-slug")
    if meta.get("machine_shape") not in (None, *ACCELERATORS):
        raise PetalsError(
            f"{path}: machine_shape {meta['machine_shape']!r} is not one of {', '.join(ACCELERATORS)}"
        )
    if not (folder / meta["code_file"]).is_file():
        raise PetalsError(f"{folder / meta['code_file']}: the code file is missing")
    code = _code(folder, meta)
    texts = [code, path.read_text(), *_bundled_texts(code)]
    for secret in _secrets():
        if any(secret in text for text in texts):
            raise PetalsError(f"{folder}: the kernel contains one of your Kaggle secrets; regenerate it")
    for pattern in SECRET_PATTERNS:
        if any(pattern.search(text) for text in texts):
            raise PetalsError(
                f"{folder}: the kernel contains what looks like a Kaggle key ({pattern.pattern})"
            )
    _answers_help(code, folder)


def _bundled_texts(code: str) -> list[str]:
    match = re.search(r'BUNDLE = """\n(.*?)\n"""', code, re.S)
    if not match:
        raise PetalsError("the kernel script carries no bundle; regenerate it (make kernel)")
    with zipfile.ZipFile(io.BytesIO(base64.b64decode(match.group(1)))) as archive:
        return [archive.read(name).decode("utf-8", "replace") for name in archive.namelist()]


def _answers_help(code: str, folder: Path) -> None:
    """The kernel imports its bundle and answers --help in a clean process, outside this repo."""
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / SCRIPT
        script.write_text(code.replace("main([])", 'if __name__ == "__main__":\n    sys.exit(main())'))
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        done = subprocess.run(
            [sys.executable, str(script), "--help"],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
    if done.returncode != 0 or "usage:" not in done.stdout:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise PetalsError(f"{folder}: the kernel script does not answer --help ({last})")


# ----------------------------------------------------------------------------- Kaggle


def _id(folder: Path) -> str:
    return json.loads((folder / METADATA).read_text())["id"]


def push(folder: Path, timeout: int | None) -> None:
    from pipeline.core import kaggle_client

    meta = json.loads((folder / METADATA).read_text())
    slug = (meta.get("competition_sources") or [""])[0]
    action = f"pushing kernel {meta['id']}"
    client = kaggle_client.call_with_retries(kaggle_client.api, slug=slug, action=action)
    accelerator = meta.get("machine_shape")
    answer = kaggle_client.call_with_retries(
        lambda: client.kernels_push(str(folder), str(timeout) if timeout else None, accelerator),
        slug=slug,
        action=action,
    )  # a push's 400/403/404 are about the competition sources: the competition's explanations
    if answer.error:
        raise PetalsError(f"Kaggle refused kernel {meta['id']}: {answer.error}")
    rejected = answer.invalid_competition_sources or answer.invalid_dataset_sources
    if rejected:
        raise PetalsError(f"Kaggle rejected the kernel's sources {rejected}: check the slugs in {METADATA}")
    print(
        f"kernel {meta['id']} version {answer.version_number} pushed ({accelerator}): {answer.url}; "
        "`make kernel-status` follows it, `make kernel-output` collects it"
    )


def status(folder: Path) -> str:
    from pipeline.core import kaggle_client

    kernel = _id(folder)
    action = f"asking for the status of kernel {kernel}"
    client = kaggle_client.call_with_retries(kaggle_client.api, slug=kernel, action=action)
    try:
        answer = kaggle_client.call_with_retries(
            lambda: client.kernels_status(kernel),
            slug=kernel,
            action=action,
            explain=kaggle_client.explain_kernel_error,
        )
    except ValueError as err:  # the client's own words for 401/403 on a kernel
        raise PetalsError(f"cannot see kernel {kernel}: check the owner and the slug ({err})") from None
    state = str(answer.status).rsplit(".", 1)[-1].lower()
    failure = f": {answer.failure_message}" if answer.failure_message else ""
    return f"kernel {kernel}: {state}{failure}"


def output(folder: Path, submissions_dir: Path) -> None:
    """Download the kernel's outputs into `<folder>/output/` and record its run on the leaderboard."""
    from pipeline.core import kaggle_client
    from pipeline.stages import leaderboard

    kernel = _id(folder)
    target = folder / "output"
    action = f"downloading the output of kernel {kernel}"
    client = kaggle_client.call_with_retries(kaggle_client.api, slug=kernel, action=action)
    try:
        files, _ = kaggle_client.call_with_retries(
            lambda: client.kernels_output(kernel, str(target), force=True, quiet=True),
            slug=kernel,
            action=action,
            explain=kaggle_client.explain_kernel_error,
        )
    except ValueError as err:
        raise PetalsError(f"cannot see kernel {kernel}: check the owner and the slug ({err})") from None
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
    leaderboard.update(
        submissions_dir / leaderboard.BOARD,
        entry,
        kind="kaggle",
        time=summary.get("finished"),
        git_commit=summary.get("petals_commit"),
        competition=summary.get("competition"),
        data_source=summary.get("data_source"),
        data_fingerprint=summary.get("data_fingerprint"),
        recipe=metrics.get("recipe"),
        backbone=metrics.get("backbone"),
        image_size=metrics.get("image_size"),
        epochs=metrics.get("epochs"),
        val_macro_f1=evaluation.get("val_macro_f1", metrics.get("val_macro_f1")),
        val_accuracy=evaluation.get("val_accuracy", metrics.get("val_accuracy")),
        tta=evaluation.get("tta"),
        train_seconds=metrics.get("train_seconds"),
        submission=str(submission) if submission.is_file() else None,
    )
    print(f"kernel {kernel}: {len(files)} file(s) in {target}; recorded as {entry} on the leaderboard")
