"""Which blocks of features a linear model on real texts wants, measured outside petals (issue 65):
the words, their characters, the packaged sentence encoder's vector, alone and joined.

For each of `make bench-realdata`'s text sets and dev/test splits (the same splits: `--seeds`),
scikit-learn fits one logistic regression on each block list, C the best of CS by 5-fold CV on dev
(stratified, whole groups where the set is grouped; the vectorizers fitted on each fold's training
rows alone), then refits on all of dev and scores the test part once (macro-F1):
- `words`: TF-IDF on words and word bigrams, sublinear tf (the baseline bench-realdata compares with);
- `chars`: TF-IDF on the words' character 3- to 5-grams (`char_wb`), sublinear tf;
- `vec`: all-MiniLM-L6-v2's mean token vector over a text's first 128 word pieces, unit length
  (as `sentence.MeanPool` pools it); `vec0.5`: the same at half length;
- joined with `+`, each block of unit length on its own (`words+chars+vec`: petals' `joined`
  candidate, pipeline/networks/joined.py).

Usage: python benchmarks/bench_text_blocks.py --sets manpages --seeds 0,1,2,3,4
           [--kinds words,words+chars,vec,words+chars+vec]
Adds its rows to benchmarks/text_blocks.json (a set, seed and kind's row replaced when run again).
The encoder's vectors are cached under the benchmark cache, by set.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks import realdata, realdata_gaps  # noqa: E402
from benchmarks.bench_cv import commit  # noqa: E402
from benchmarks.bench_fetch import machine  # noqa: E402
from pipeline.core.files import write_json  # noqa: E402  (atomic)

RESULTS = REPO / "benchmarks" / "text_blocks.json"
CS = (0.1, 0.3, 1, 3, 10, 30, 100)
LENGTH = 128  # the word pieces the encoder reads (pipeline/networks/joined.py, ENCODER_LENGTH)
TEXT_SETS = ("manpages", "fortunes", "amazon")


def sentence_vectors(name: str, texts: list[str]) -> dict[str, np.ndarray]:
    """Each text's unit-length mean token vector, computed once a set and cached."""
    path = realdata.CACHE / f"text-blocks-{name}.npz"
    if path.is_file():
        cached = np.load(path, allow_pickle=True)
        if set(cached["texts"]) >= set(texts):
            return dict(zip(cached["texts"], cached["vectors"], strict=True))
    from pipeline.modeling import probe
    from pipeline.networks import keras_hub_text, sentence

    net, encode = keras_hub_text.packaged_encoder(sentence.ALL_MINILM, LENGTH)
    vectors = probe.sentence_vectors(net, encode((np.asarray(texts, dtype=object),)))
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, texts=np.asarray(texts, dtype=object), vectors=vectors)
    return dict(zip(texts, vectors, strict=True))


def features(kind: str, fit_texts: list[str], texts: list[str], vectors: dict):
    """`kind`'s blocks fitted on `fit_texts` for `texts`, side by side (sparse)."""
    from scipy import sparse
    from sklearn.feature_extraction.text import TfidfVectorizer

    blocks = []
    for block in kind.split("+"):
        if block.startswith("vec"):
            scale = float(block[3:] or 1)
            blocks.append(sparse.csr_matrix(np.stack([vectors[t] for t in texts]) * scale))
            continue
        vectorizer = (
            TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True)
            if block == "words"
            else TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5), sublinear_tf=True)
        )
        vectorizer.fit(fit_texts)
        blocks.append(vectorizer.transform(texts))
    return sparse.hstack(blocks, format="csr")


def measure(data: realdata.RealSet, kind: str, vectors: dict) -> dict:
    """C by 5-fold (grouped) CV on dev, the refit's test macro-F1."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import f1_score
    from sklearn.model_selection import StratifiedGroupKFold
    from threadpoolctl import threadpool_limits

    dev, labels = data.dev.items, data.dev.labels
    groups = data.dev.groups if data.grouped else np.arange(len(labels))
    folds = list(StratifiedGroupKFold(5, shuffle=True, random_state=0).split(labels, labels, groups))
    scores = {}
    for c in CS:
        predicted = np.zeros(len(labels), np.int64)
        for train, val in folds:
            fit_texts = [dev[i] for i in train]
            x = features(kind, fit_texts, fit_texts, vectors)
            with threadpool_limits(1):
                model = LogisticRegression(C=c, max_iter=3000).fit(x, labels[train])
            predicted[val] = model.predict(features(kind, fit_texts, [dev[i] for i in val], vectors))
        scores[c] = f1_score(labels, predicted, average="macro")
    best = max(CS, key=lambda c: scores[c])
    with threadpool_limits(1):
        model = LogisticRegression(C=best, max_iter=3000).fit(features(kind, dev, dev, vectors), labels)
    test = f1_score(
        data.test.labels, model.predict(features(kind, dev, data.test.items, vectors)), average="macro"
    )
    return {"cv": round(scores[best], 4), "C": best, "test": round(float(test), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sets", nargs="+", default=list(TEXT_SETS), choices=TEXT_SETS)
    parser.add_argument("--seeds", default="0", help="dev/test splits, e.g. 0,1,2")
    parser.add_argument("--kinds", default="words,words+chars,vec,words+chars+vec")
    args = parser.parse_args()
    stored = json.loads(RESULTS.read_text())["rows"] if RESULTS.is_file() else []
    for name in args.sets:
        loaded = realdata.load(name)
        vectors = sentence_vectors(name, loaded.dev.items + loaded.test.items)
        for seed in (int(s) for s in args.seeds.split(",")):
            data = realdata_gaps.resplit(loaded, seed)
            for kind in args.kinds.split(","):
                row = {
                    "set": name,
                    "seed": seed,
                    "kind": kind,
                    **measure(data, kind, vectors),
                    "commit": commit(),
                }
                print(json.dumps(row), flush=True)
                stored = [r for r in stored if (r["set"], r["seed"], r["kind"]) != (name, seed, kind)] + [row]
                write_json(RESULTS, {"machine": machine(), "rows": stored})


if __name__ == "__main__":
    main()
