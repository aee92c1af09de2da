"""A kernel folder's names and `kernel-metadata.json`, in the vocabulary Kaggle accepts in 2026.

The accelerator ids and the sessions they give, the sources a kernel attaches, its title rules, and
where a kernel folder is: shared by generation, the pre-push checks, `make submit` and the tests.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any

from pipeline.core.config import DEFAULT_COMPETITION
from pipeline.core.errors import PetalsError
from pipeline.core.foreign_files import load_json
from pipeline.core.paths import check_name, check_relative, shown

METADATA = "kernel-metadata.json"
SCRIPT = "petals_kernel.py"
NOTEBOOK = "petals_kernel.ipynb"
SUMMARY = "petals_summary.json"
TEMPLATE = Path(__file__).resolve().parents[1] / "script" / "main.py"

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
# Kaggle scores a code competition's notebook on a GPU or the CPU (Cassava's rules: no TPU for
# submissions; docs/competitions/cassava.md), so its kernel defaults to a T4.
CODE_COMPETITION_ACCELERATOR = "NvidiaTeslaT4"
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


def notebook_entry() -> tuple[str, str]:
    """The script's closing entry point, and what a notebook cell runs instead: ipykernel's argv is not
    the kernel's, and a cell must not end its Python (the script leaves through `cli.leave`)."""
    text = TEMPLATE.read_text()
    return text[text.index('if __name__ == "__main__":') :], "main([])\n"


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


def default_name(recipe: str, competition: str = DEFAULT_COMPETITION) -> str:
    """petals-<competition>-<recipe>: the kernel folder and slug when none is given."""
    return f"petals-{competition}-{recipe}"


def resolve_accelerator(accelerator: str | None, spec) -> str:
    """The accelerator asked for, else the default for the competition: a TPU, or a T4 for a code
    competition."""
    if accelerator:
        return accelerator
    return CODE_COMPETITION_ACCELERATOR if spec.code_competition else DEFAULT_ACCELERATOR


def kernel_folder(
    kernels_dir: Path, name: str | None, recipe: str, accelerator: str, competition: str
) -> Path:
    """The folder `make kernel` writes for these settings: `name`, else the default name of the
    recipe (`auto` resolved for the accelerator's device, as generation resolves it)."""
    if name:
        return kernels_dir / name
    from pipeline.core.config import resolve_recipe

    resolved = resolve_recipe(recipe, check_accelerator(accelerator).upper())
    return kernels_dir / default_name(resolved, competition)


def read_metadata(folder: Path) -> dict[str, Any]:
    """The folder's kernel-metadata.json; one line saying to generate it when there is none, or
    when its kernel id is not `owner/slug` of two plain names (the slug names files petals writes)."""
    path = folder / METADATA
    if not path.is_file():
        raise PetalsError(f"{folder}: no {METADATA}; generate it first (make kernel RECIPE=...)")
    meta = _json_object(path)
    check_kernel(meta.get("id"), path)
    return meta


def check_kernel(kernel: object, source: object) -> str:
    """`kernel` if it is `owner/slug`, each half a plain name (`check_name`); else the one line."""
    owner, _, slug = str(kernel).partition("/") if isinstance(kernel, str) else ("", "", "")
    check_name(owner, "kernel owner", source)
    check_name(slug, "kernel slug", source)
    return kernel


TEXT_LIMIT = 200  # characters of a summary's text field the leaderboard records (a backbone, a commit)


def _json_object(path: Path) -> dict[str, Any]:
    """A JSON object from a kernel's folder (its metadata, a downloaded summary), read by the rule
    for foreign files: bounded, not nested past reason, one line if not."""
    value = load_json(path.parent, path.name, "file")
    if not isinstance(value, dict):
        raise PetalsError(f"{path}: not a JSON object")
    return value


def _check_texts(fields: dict[str, Any], names: tuple[str, ...], where: str, source: str) -> None:
    """Each of `names` in `fields` absent, null or a string of at most TEXT_LIMIT characters: what
    the leaderboard records of them is text (its escapes are the printing's to show safely)."""
    for name in names:
        value = fields.get(name)
        if value is not None and not (isinstance(value, str) and len(value) <= TEXT_LIMIT):
            raise PetalsError(
                f"{source}: {where}{name} {shown(value)} is not a text of at most {TEXT_LIMIT} characters"
            )


def read_summary(path: Path, kernel: str) -> dict[str, Any]:
    """A kernel's downloaded petals_summary.json, its fields checked before anything uses them: it
    came from Kaggle, so its names (the competition, the run id, the submission file) must stay
    plain and its scores finite numbers; one line naming the kernel, the field and the value if not."""
    summary = _json_object(path)
    source = f"{path} (kernel {kernel})"
    check_name(summary.get("run_id"), "run_id", source)
    check_name(summary.setdefault("competition", DEFAULT_COMPETITION), "competition", source)
    check_relative(summary.setdefault("submission_file", "submission.csv"), "submission_file", source)
    metrics = summary.get("metrics")
    if not isinstance(metrics, dict) or not isinstance(metrics.setdefault("evaluation", {}), dict):
        raise PetalsError(f"{source}: metrics is not a JSON object with an evaluation object")
    metric = check_name(metrics.setdefault("metric", "macro_f1"), "metrics.metric", source)
    _check_texts(summary, ("finished", "petals_commit", "data_source", "data_fingerprint"), "", source)
    _check_texts(metrics, ("recipe", "backbone"), "metrics.", source)
    # What goes on the leaderboard; other numbers (a diverged run's NaN loss) are the kernel's own.
    recorded = {"val_accuracy", f"val_{metric}", "train_seconds", "image_size", "epochs", "tta"}
    for where, numbers in (("metrics", metrics), ("metrics.evaluation", metrics["evaluation"])):
        for name, value in numbers.items():
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if name in recorded and value is not None and not (number and math.isfinite(value)):
                raise PetalsError(f"{source}: {where}.{name} {shown(value)} is not a finite number")
    return summary


def read_json_object(path: Path) -> dict[str, Any]:
    """A downloaded JSON file that must hold an object; else the one line."""
    return _json_object(path)


def read_folds_summary(path: Path, kernel: str) -> dict[str, Any]:
    """A FOLDS kernel's petals_summary.json, checked: K and the TTA whole numbers, and each fold
    run it names (with when it finished) a plain name, as Kaggle could have answered anything."""
    summary = _json_object(path)
    source = f"{path} (kernel {kernel})"
    for field in ("folds", "tta"):
        value = summary.setdefault(field, 1)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise PetalsError(f"{source}: {field} {shown(value)} is not a whole number of at least 1")
    runs = summary.setdefault("fold_runs", {})
    if not isinstance(runs, dict):
        raise PetalsError(f"{source}: fold_runs is not a JSON object")
    for name, finished in runs.items():
        check_name(name, "fold_runs", source)
        if not isinstance(finished, str) or not FINISHED.fullmatch(finished):
            raise PetalsError(f"{source}: fold_runs.{name} {shown(finished)} is not a time")
    return summary


TRIAL_NUMBER = re.compile(r"[0-9]{1,9}")
# When a fold finished, as the kernel writes it (an ISO time, to the second or finer, an offset or
# Z), or empty: printed by `make kernel-output`, so nothing else (an escape sequence) passes.
FINISHED = re.compile(r"|[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9:.]{5,15}(Z|[+-][0-9]{2}:?[0-9]{2})?")


def read_trials_summary(path: Path, kernel: str) -> dict[str, Any]:
    """A kernel of a study's trials: its summary read as a FOLDS kernel's (K may be none), and each
    trial's number and run ids checked."""
    summary = _json_object(path)
    folds = summary.get("folds")
    if folds is not None:
        summary = read_folds_summary(path, kernel)
    source = f"{path} (kernel {kernel})"
    runs = summary.setdefault("trial_runs", {})
    if not isinstance(runs, dict):
        raise PetalsError(f"{source}: trial_runs is not a JSON object")
    for number, names in runs.items():
        if not (TRIAL_NUMBER.fullmatch(number) and isinstance(names, list) and names):
            raise PetalsError(f"{source}: trial_runs.{shown(number)} {shown(names)} is not a trial's runs")
        for name in names:
            check_name(name, f"trial_runs.{number}", source)
    failed = summary.setdefault("trial_failed", {})
    if not isinstance(failed, dict) or not all(
        TRIAL_NUMBER.fullmatch(k) and isinstance(v, str) and len(v) <= 300 and "\n" not in v
        for k, v in failed.items()
    ):
        raise PetalsError(f"{source}: trial_failed is not an object of trial numbers and one-line reasons")
    return summary


def resume_sources(given: list[str], kernel_id: str) -> list[str]:
    sources = [kernel_id if s == "self" else s for s in given]
    for source in sources:
        if not DATASET_SOURCE.fullmatch(source):
            raise PetalsError(f"--resume-from {source!r}: expected owner/kernel-slug or self")
    return list(dict.fromkeys(sources))


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


def metadata(options, owner: str, name: str, slug: str) -> dict[str, Any]:
    """kernel-metadata.json for the kernel `owner/name` that attaches competition `slug`."""
    from slugify import slugify  # what the official client matches titles against

    title = name.replace("-", " ")
    if slugify(title) != name:
        raise PetalsError(f"kernel name {name!r}: use lowercase letters, digits and single dashes")
    if not 5 <= len(title) <= TITLE_LIMIT:
        raise PetalsError(f"kernel name {name!r}: its title must be 5 to {TITLE_LIMIT} characters")
    session = check_accelerator(options.accelerator)
    meta = {
        "id": f"{owner}/{name}",
        "title": title,
        "code_file": NOTEBOOK if options.kernel_type == "notebook" else SCRIPT,
        "language": "python",
        "kernel_type": options.kernel_type,
        "is_private": True,
        "enable_internet": options.internet == "on",
        "enable_gpu": session == "gpu",
        "enable_tpu": session == "tpu",
        "machine_shape": options.accelerator,
        "competition_sources": [slug],
        "dataset_sources": list(options.dataset),
        "kernel_sources": resume_sources(options.resume_from, f"{owner}/{name}"),
        "model_sources": list(options.model),
        "keywords": [],
        # No docker_image: a pinned image silently runs a TPU kernel on the CPU (../shared/facts).
    }
    if session == "cpu":
        del meta["machine_shape"]  # a CPU kernel names no accelerator at all
    return meta


def content_digest(folder: Path) -> str:
    """sha256 of what a push sends: the metadata and the code file. Regenerating the kernel from the
    same sources gives the same bytes, so the same digest: `make submit` does not send it twice."""
    import hashlib

    meta = read_metadata(folder)
    digest = hashlib.sha256()
    for name in (METADATA, meta["code_file"]):
        digest.update(name.encode() + b"\0" + (folder / name).read_bytes() + b"\0")
    return digest.hexdigest()


def code_kernel(folder: Path, spec, slug: str) -> tuple[Path, dict]:
    """The kernel folder `make kernel` generated for a code competition, and its metadata; one line when
    there is none, or when Kaggle would not score it (internet on, the competition not attached)."""
    if not (folder / METADATA).is_file():
        raise PetalsError(
            f"{folder}: no {METADATA}; competition {spec.name} is a code competition, scored from a "
            f"kernel's output: generate its kernel first (make kernel COMPETITION={spec.name}, or KERNEL=)"
        )
    meta = read_metadata(folder)
    if meta.get("enable_internet"):
        raise PetalsError(
            f"{folder}: kernel {meta['id']} has the internet on, and Kaggle scores a code competition's "
            f"notebook offline: regenerate it (make kernel COMPETITION={spec.name})"
        )
    if slug not in meta.get("competition_sources", []):
        raise PetalsError(
            f"{folder}: kernel {meta['id']} does not attach competition {slug!r} "
            f"(it attaches {meta.get('competition_sources', [])}): regenerate it with SLUG={slug}"
        )
    return folder, meta
