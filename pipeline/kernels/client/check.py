"""The checks a generated kernel passes before it is pushed: what Kaggle or the run would trip on.

`check(folder)` raises one PetalsError line for the first fault: metadata Kaggle would refuse or
silently change (a retired accelerator, a pinned image on a TPU kernel), a missing code file, a
Kaggle secret in the script, its metadata or a bundled file (the line names which), or a script
that does not import its bundle and answer --help.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
import zlib
from pathlib import Path

from pipeline.core.errors import PetalsError
from pipeline.core.foreign_files import present, read_small_text
from pipeline.core.paths import check_name
from pipeline.kernels.client.metadata import (
    DATASET_SOURCE,
    METADATA,
    SCRIPT,
    TITLE_LIMIT,
    check_accelerator,
    notebook_entry,
)

MAX_METADATA_BYTES = 1 << 20
# A generated script is a few MB (its bundle in base64); the bundle inflates to a few more.
MAX_CODE_BYTES = 64 << 20
MAX_BUNDLE_BYTES = 256 << 20


def _code(folder: Path, meta: dict, where: Path) -> str:
    """The code Kaggle would run, read as untrusted input: a kernel folder gets shared, and the
    client uploads whatever `code_file` names (`../../.ssh/id_rsa`, a link out of the folder), so it
    must be a plain name of a regular file inside the folder, of a bounded size."""
    name = check_name(meta["code_file"], "code_file", where / METADATA)
    text = read_small_text(folder, name, "code_file", where / METADATA, MAX_CODE_BYTES)
    if meta["kernel_type"] == "notebook":
        try:
            cells = json.loads(text)["cells"]
            return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        except (ValueError, TypeError, KeyError, RecursionError):
            raise PetalsError(f"{where / name}: not a notebook petals wrote; regenerate it") from None
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


def check(folder: Path, shown_as: Path | None = None) -> None:
    """Everything Kaggle or the run would trip on, caught here: one line for the first fault. The
    lines name `shown_as` for `folder` (generation checks a kernel in a staging folder)."""
    from slugify import slugify

    where = shown_as or folder
    label = where / METADATA
    try:
        metadata_text = read_small_text(folder, METADATA, "the file", where, MAX_METADATA_BYTES)
        meta = json.loads(metadata_text)
    except (ValueError, RecursionError) as err:
        raise PetalsError(f"{label}: unreadable ({str(err)[:200]})") from None
    if not isinstance(meta, dict):
        raise PetalsError(f"{label}: not a JSON object")
    required = ("id", "title", "code_file", "language", "kernel_type", "is_private", "enable_internet")
    missing = [key for key in required if key not in meta]
    if missing:
        raise PetalsError(f"{label}: missing {', '.join(missing)}")
    owner, _, slug = str(meta["id"]).partition("/")
    if not owner or not slug or "/" in slug:
        raise PetalsError(f"{label}: id {meta['id']!r} must be owner/kernel-slug")
    if not 5 <= len(meta["title"]) <= TITLE_LIMIT or slugify(meta["title"]) != slug:
        raise PetalsError(
            f"{label}: title {meta['title']!r} must be 5 to {TITLE_LIMIT} characters and slugify to {slug!r}"
        )
    if meta["language"] != "python" or meta["kernel_type"] not in ("script", "notebook"):
        raise PetalsError(f"{label}: language must be python and kernel_type script or notebook")
    if "docker_image" in meta or "docker_image_pinning_type" in meta:
        raise PetalsError(f"{label}: remove docker_image: a pinned image runs a TPU kernel on the CPU")
    for source in meta.get("competition_sources", []):
        if "/" in source:
            raise PetalsError(f"{label}: competition source {source!r} must be the plain slug (no 'c/')")
    for source in meta.get("dataset_sources", []):
        if not DATASET_SOURCE.fullmatch(source):
            raise PetalsError(f"{label}: dataset source {source!r} must be owner/dataset-slug")
    if meta.get("machine_shape") == "None":
        raise PetalsError(f"{label}: a CPU kernel names no machine_shape; remove it")
    if "machine_shape" in meta:
        try:
            check_accelerator(meta["machine_shape"])
        except PetalsError as err:
            raise PetalsError(f"{label}: machine_shape: {err}") from None
    for source in meta.get("kernel_sources", []):
        if not DATASET_SOURCE.fullmatch(source):
            raise PetalsError(f"{label}: kernel source {source!r} must be owner/kernel-slug")
    if not present(folder / str(meta["code_file"])):
        raise PetalsError(f"{where / str(meta['code_file'])}: the code file is missing")
    code = _code(folder, meta, where)
    texts = {meta["code_file"]: code, METADATA: metadata_text}
    texts.update((f"bundled file {name}", text) for name, text in _bundled_texts(code).items())
    for secret in _secrets():
        for name, text in texts.items():
            if secret in text:
                raise PetalsError(f"{where}: {name} contains one of your Kaggle secrets; {_remedy(name)}")
    for pattern in SECRET_PATTERNS:
        for name, text in texts.items():
            if pattern.search(text):
                raise PetalsError(
                    f"{where}: {name} contains what looks like a Kaggle key ({pattern.pattern}); "
                    f"{_remedy(name)}"
                )
    _answers_help(code, where, meta["code_file"])


def _remedy(name: str) -> str:
    if name.startswith("bundled file "):  # git tracks it: generation bundles only tracked files
        return "remove the key from that file (or the file from git) and regenerate"
    return "regenerate it"


def _bundled_texts(code: str) -> dict[str, str]:
    """Each bundled file's text, by its path in the bundle."""
    match = re.search(r'BUNDLE = """\n(.*?)\n"""', code, re.S)
    if not match:
        raise PetalsError("the kernel script carries no bundle; regenerate it (make kernel)")
    try:
        with zipfile.ZipFile(io.BytesIO(base64.b64decode(match.group(1)))) as archive:
            if sum(info.file_size for info in archive.infolist()) > MAX_BUNDLE_BYTES:  # a read stops there
                raise PetalsError(
                    f"the kernel's bundle unpacks to over {MAX_BUNDLE_BYTES >> 20} MiB; regenerate it"
                )
            return {name: archive.read(name).decode("utf-8", "replace") for name in archive.namelist()}
    except (ValueError, zipfile.BadZipFile, EOFError, zlib.error):  # not base64, not a zip, cut
        raise PetalsError("the kernel script's bundle is not one petals made; regenerate it") from None


# Scripts this process saw answer --help, by `_help_key`: the same code need not start again (a
# kernel generated again with other settings, then pushed, in one process, as the tests do; each
# `make` call is a process of its own).
_ANSWERED: set[str] = set()
# The longest --help may take: it unpacks the bundle and imports every stage (TensorFlow, Keras, JAX),
# 5 to 10 s on a quiet machine and a minute on a loaded one; far past that it hangs (an import that
# waits on a lock or the network), and generation or push should say so rather than wait forever.
HELP_TIMEOUT = 300


def _help_key(code: str) -> str:
    """The sha256 of what --help depends on: the script without its SETTINGS literal, which --help
    reads only through `.get` (an epilog, a default) and which is a pprint-ed dict of plain values,
    so any settings answer alike. The bundle and the code around it are all in the key."""
    import hashlib

    before, found, rest = code.partition("\nSETTINGS = ")
    _settings, found_bundle, after = rest.partition('\nBUNDLE = """')
    kept = before + found + found_bundle + after if found and found_bundle else code
    return hashlib.sha256(kept.encode()).hexdigest()


def _answers_help(code: str, folder: Path, code_file: str = SCRIPT) -> None:
    """The kernel imports its bundle and answers --help in a clean process, outside this repo."""
    digest = _help_key(code)
    if digest in _ANSWERED:
        return
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / SCRIPT
        script.write_text(code.replace(*reversed(notebook_entry())))
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        try:
            done = subprocess.run(
                [sys.executable, str(script), "--help"],
                cwd=tmp,
                env=env,
                capture_output=True,
                text=True,
                check=False,
                timeout=HELP_TIMEOUT,
            )
        except subprocess.TimeoutExpired:  # run() has killed it
            raise PetalsError(
                f"{folder / code_file}: the kernel script did not answer --help within {HELP_TIMEOUT} s "
                "(an import hangs?); run it with --help to see where it waits"
            ) from None
    if done.returncode != 0 or "usage:" not in done.stdout:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise PetalsError(f"{folder}: the kernel script does not answer --help ({last})")
    _ANSWERED.add(digest)
