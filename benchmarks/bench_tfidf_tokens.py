"""The `tfidf` network's features against scikit-learn's own TF-IDF, on a real text set's split.

Where the default's TF-IDF candidate trails the baseline (bench_realdata.py), is it the features
(the run's ids: `standardize`'s tokens, the start id, hashed bigrams, a 20,000-word vocabulary) or
the penalty C? Both fitted on the dev part by the same LogisticRegression at each C, scored once on
the test part (macro-F1). Usage: python benchmarks/bench_tfidf_tokens.py [--sets amazon fortunes]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import realdata
from pipeline.modeling import text_probe
from pipeline.networks.text import Vectorizer
from pipeline.networks.tfidf import tfidf_classifier

LENGTH, WORDS = 512, 20000  # the text candidate's (pipeline/tasks/recipes/text_classification/)
CS = (10.0, 32.0, 100.0)


def ours(dev: np.ndarray, test: np.ndarray, classes: int):
    """Dev and test rows as the `tfidf` network's probe computes them (its columns some dev text holds)."""
    vocabulary = Vectorizer.adapt(dev, WORDS, LENGTH).vocabulary
    encode, net = Vectorizer(vocabulary, LENGTH), tfidf_classifier(len(vocabulary) + 2, LENGTH, classes)
    rows = net.get_layer("logits").rows
    found = text_probe.counts(text_probe.feature_ids(net, encode((dev,))), rows)
    weights = text_probe.idf(found)
    x = text_probe.tfidf(found, weights)
    held = text_probe.tfidf(text_probe.counts(text_probe.feature_ids(net, encode((test,))), rows), weights)
    used = np.flatnonzero(weights)
    return x[:, used], held[:, used]


def main() -> None:
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import f1_score

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sets", nargs="+", default=["amazon"], choices=[n for n in realdata.SETS])
    for name in parser.parse_args().sets:
        data = realdata.load(name)
        dev, test = np.array(data.dev.items), np.array(data.test.items)
        vectorizer = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True)
        features = {"ids": ours(dev, test, len(data.classes))}
        features["scikit-learn"] = (vectorizer.fit_transform(dev), vectorizer.transform(test))
        for c in CS:
            scores = {
                what: f1_score(
                    data.test.labels,
                    LogisticRegression(C=c, max_iter=5000).fit(x, data.dev.labels).predict(held),
                    average="macro",
                )
                for what, (x, held) in features.items()
            }
            print(name, f"C={c:g}", "  ".join(f"{k} {v:.4f}" for k, v in scores.items()), flush=True)


if __name__ == "__main__":
    main()
