"""What the `sentence` candidate costs on this machine: the packaged sentence encoder's vectors a
second (`probe.sentence_vectors`, the pass the candidate's probe runs), at the candidate's 128 word
pieces, on texts of two shapes:

- the embedded imdb reviews as drawn (11 to ~90 words: batches cut to their longest text), and
- the same reviews joined until each fills all 128 word pieces (the most a text can cost).

The pass is linear in the number of texts at a given width, so the seconds for the recipe's
`train.choose_up_to` texts (20,000) follow from the rate; each text is encoded once a process
(a CV group's folds share the vectors), and the test texts once more at predict. What the next
process pays for texts a process encoded (`seconds_read_back`): the vectors read from the runs
dir, where `probe.sentence_vectors` keeps a frozen encoder's (pipeline/modeling/vector_store.py).

The process's peak memory is written beside the rates: `--attention-cells` sets what one batch's
attention may hold (`probe.ATTENTION_CELLS`; 8388608 = 256 x 128^2, the batches before it), so the
two can be compared, each in its own process.

Usage: python benchmarks/bench_encoder.py [--texts 1000 4000] [--attention-cells N] [--out PATH]
Writes benchmarks/encoder.json (the rates, the peak memory, the commit, the machine).
"""

from __future__ import annotations

import argparse
import io
import resource
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.bench_cv import commit  # noqa: E402
from benchmarks.bench_fetch import machine  # noqa: E402
from pipeline.core.files import write_json  # noqa: E402  (atomic)

LENGTH = 128  # the candidate's data.sequence_length (text_classification/candidates/cpu.toml)
CHOOSE_UP_TO = 20_000  # the text recipes' train.choose_up_to


def reviews(n: int) -> list[str]:
    """`n` embedded imdb reviews (drawn at the scale that holds them), train's then test's."""
    from competition import load_spec
    from pipeline.data import embedded

    folder = Path(tempfile.mkdtemp(prefix="bench-encoder-"))
    embedded.draw(load_spec("imdb"), folder, size=64, seed=0, scale=max(1.0, n / 4000 + 0.01), progress=False)
    texts: list[str] = []
    for name in ("labeledTrainData.tsv.zip", "testData.tsv.zip"):
        with zipfile.ZipFile(folder / name) as archive:
            member = archive.namelist()[0]
            table = pd.read_csv(io.BytesIO(archive.read(member)), sep="\t", quoting=3)
        texts += table["review"].astype(str).tolist()
    return texts[:n]


def filled(texts: list[str]) -> list[str]:
    """Each text followed by the next ones until it holds more than 128 word pieces."""
    return [" ".join(texts[i : i + 12]) for i in range(len(texts))]


def encoder():
    from pipeline.networks import keras_hub_text, sentence

    return keras_hub_text.packaged_encoder(sentence.ALL_MINILM, LENGTH)


def rate(net, encode, texts: list[str]) -> dict:
    """The pass over `texts` in a fresh runs dir, and the next process's over the same texts: their
    vectors read back from the runs dir (`vector_store`), the same to the bit."""
    from pipeline.modeling import probe, vector_store

    probe._VECTORS.clear()  # each measurement encodes every text
    vector_store._STORES.clear()
    inputs = encode((np.array(texts),))
    pieces = np.asarray(inputs["padding_mask"]).sum(axis=1)
    with tempfile.TemporaryDirectory(prefix="bench-encoder-runs-") as runs:
        started = time.perf_counter()
        vectors = probe.sentence_vectors(net, inputs, Path(runs))
        seconds = time.perf_counter() - started
        probe._VECTORS.clear()  # as the next process (evaluate after train) starts
        vector_store._STORES.clear()
        started = time.perf_counter()
        again = probe.sentence_vectors(net, inputs, Path(runs))
        read_back = time.perf_counter() - started
    assert vectors.shape == (len(texts), 384) and np.isfinite(vectors).all()
    assert np.array_equal(again, vectors)
    return {
        "seconds_read_back": round(read_back, 2),
        "texts": len(texts),
        "word_pieces_mean": round(float(pieces.mean()), 1),
        "word_pieces_max": int(pieces.max()),
        "seconds": round(seconds, 1),
        "texts_per_s": round(len(texts) / seconds, 1),
        "seconds_for_choose_up_to": round(CHOOSE_UP_TO * seconds / len(texts)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, nargs="+", default=[1000, 4000])
    parser.add_argument("--attention-cells", type=int, help="probe.ATTENTION_CELLS for this run")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "encoder.json")
    args = parser.parse_args()
    from pipeline.modeling import probe

    if args.attention_cells:
        probe.ATTENTION_CELLS = args.attention_cells
    net, encode = encoder()
    base = reviews(max(args.texts) + 12)
    rate(net, encode, base[:32])  # the first calls build the engine's kernels: not timed
    rows = []
    for n in args.texts:
        for shape, texts in (("as drawn", base[:n]), ("128 word pieces each", filled(base)[:n])):
            row = {"shape": shape, **rate(net, encode, texts)}
            print(row, flush=True)
            rows.append(row)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux -> GiB
    print(f"attention cells {probe.ATTENTION_CELLS}: peak memory {peak:.2f} GiB", flush=True)
    write_json(args.out, {
        "commit": commit(), "machine": machine(), "length": LENGTH, "rows": rows,
        "attention_cells": probe.ATTENTION_CELLS, "peak_rss_gib": round(peak, 2),
    })  # fmt: skip


if __name__ == "__main__":
    main()
