"""Benchmark the imdb CPU recipe on real movie reviews against TF-IDF + logistic regression.

The data: the 10,605 Rotten Tomatoes sentences of Pang & Lee, rated -4..4 by 20 people each, as
VADER ships them (Hutto & Gilbert, ICWSM 2014; MIT licence) in the vaderSentiment 3.3.2 source
archive, `additional_resources/hutto_ICWSM_2014.tar.gz`: positive if the mean rating is > 0,
negative if < 0, the 37 at 0 dropped (10,568 left, about half each). The archive is downloaded
once with pip into the cache folder (`--cache`), checked by its sha256, and reused.

The snippets are written as a user brings the competition in: word2vec-nlp-tutorial's zipped TSVs
with Kaggle's quoting. A fixed stratified 20% (seed 0) is held out: it becomes testData.tsv
without labels, its labels kept here. The chain then runs as `make` runs it, each stage in a fresh
process: fetch --source dir, train --recipe cpu (petals holds 10% of train out as its val split),
predict; the submission's P(positive) is scored against the held-out labels with scikit-learn's
roc_auc_score. The baseline, on the same split: TF-IDF of word 1-2 grams (sublinear tf) and
logistic regression, its C chosen by 5-fold cross-validation on the training part only.

Tuning never sees the held-out part: `--validate` sets it aside and scores a stratified 20% of
the training part instead (seed 1), with extra `--set` overrides to compare; nothing is recorded.

Usage: python benchmarks/bench_text_real.py [--seeds 0 1 2] [--backend tensorflow] [--validate]
       [--set model.dropout=0.4 ...] [--cache ~/.cache/petals/real-data]
Writes the figures into benchmarks/latest.json (merged with other benchmarks' figures).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import io
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.bench_fetch import machine, record  # noqa: E402
from benchmarks.bench_train import figure  # noqa: E402
from pipeline.formats.table import tables_of  # noqa: E402

SDIST = "vaderSentiment-3.3.2.tar.gz"
SDIST_SHA256 = "5d7c06e027fc8b99238edb0d53d970cf97066ef97654009890b83703849632f9"
INNER = "vaderSentiment-3.3.2/additional_resources/hutto_ICWSM_2014.tar.gz"
SNIPPETS = "hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt"
HELD_OUT = 0.2  # of the snippets: the test part (seed 0); with --validate, of the training part (seed 1)
BASELINE_C = (0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 128)


class Unavailable(Exception):
    """The real data cannot be had here; the message says why and what to do."""


def sdist(cache: Path) -> Path:
    """VADER's source archive in `cache`, downloaded with pip when missing, checked by sha256."""
    path = cache / SDIST
    if not path.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        command += ["--dest", str(cache), "vadersentiment==3.3.2"]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not path.is_file():
            reason = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise Unavailable(
                f"pip could not download vadersentiment==3.3.2 ({reason}); put {SDIST} from "
                f"https://pypi.org/project/vaderSentiment/3.3.2/#files into {cache}"
            )
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != SDIST_SHA256:
        raise Unavailable(f"{path}: sha256 {digest}, expected {SDIST_SHA256}; delete it to download again")
    return path


def read_snippets(archive: Path) -> tuple[list[str], list[str], np.ndarray]:
    """Ids, texts and labels (1: mean rating > 0) of the rated snippets; the neutral ones dropped."""
    with tarfile.open(archive) as outer:
        inner_bytes = outer.extractfile(INNER).read()
    with tarfile.open(fileobj=io.BytesIO(inner_bytes)) as inner:
        lines = inner.extractfile(SNIPPETS).read().decode("utf-8").splitlines()
    rows = [line.split("\t", 2) for line in lines if line.strip()]
    rated = [(number, float(mean), text) for number, mean, text in rows if float(mean) != 0]
    ids = [f"rt{number}" for number, _, _ in rated]
    texts = [text for _, _, text in rated]
    labels = np.array([int(mean > 0) for _, mean, _ in rated])
    return ids, texts, labels


def split(labels: np.ndarray, validate: bool) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the training part and of the part scored: the held-out test part, or with
    `validate` a part of the training part (the test part left out of both)."""
    from sklearn.model_selection import train_test_split

    everything = np.arange(len(labels))
    train, test = train_test_split(everything, test_size=HELD_OUT, stratify=labels, random_state=0)
    if not validate:
        return train, test
    return train_test_split(train, test_size=HELD_OUT, stratify=labels[train], random_state=1)


def write_competition(folder: Path, ids, texts, labels, train: np.ndarray, scored: np.ndarray) -> None:
    """The snippets in word2vec-nlp-tutorial's layout: each table zipped, Kaggle's quoting, the
    scored part without its labels, and a sample submission of its ids."""
    import pandas as pd

    from pipeline.core.files import write_zip
    from pipeline.data.synthetic_reviews import SPEC
    from pipeline.formats.tables import table_text

    folder.mkdir(parents=True)
    for split_name, rows in (("train", train), ("test", scored)):
        table = tables_of(SPEC).splits[split_name]
        labeled = bool(table.layout.label_column)
        columns = ["id", "sentiment", "review"] if labeled else ["id", "review"]
        records = [{"id": ids[i], "sentiment": int(labels[i]), "review": texts[i]} for i in rows]
        write_zip(folder / table.archive, [(table.file, table_text(records, columns, table.layout).encode())])
    sample = pd.DataFrame({SPEC.id_column: [ids[i] for i in scored], SPEC.label_column: 0})
    sample.to_csv(folder / SPEC.sample_submission, index=False)


def pipeline(*args: str) -> None:
    """One stage in a fresh process, as `make` runs it; exits with its last lines if it fails."""
    command = [sys.executable, "-m", "pipeline", "--quiet", *args]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"bench_text_real: {' '.join(command)} failed:\n{done.stderr[-3000:]}")


def run_chain(folder: Path, work: Path, seed: int, backend: str, overrides: list[str]) -> dict:
    """fetch, train and predict on the written competition; the run's metrics and its submission."""
    import pandas as pd

    from pipeline.core.rundir import RunDir

    data, runs, subs, name = work / "data", work / "runs", work / "submissions", f"real-seed{seed}"
    if not (data / "manifest.json").is_file():
        pipeline(
            "fetch",
            "--source",
            "dir",
            "--from",
            str(folder),
            "--competition",
            "imdb",
            "--data-dir",
            str(data),
        )
    settings = ["--set", "competition=imdb", "--set", f"seed={seed}"]
    for override in overrides:
        settings += ["--set", override]
    common = ["--data-dir", str(data), "--runs-dir", str(runs), "--run", name, "--backend", backend]
    common += ["--strategy", "cpu", "--recipe", "cpu", *settings]
    started = time.perf_counter()
    pipeline("train", *common)
    wall = time.perf_counter() - started
    pipeline("predict", *common, "--submissions-dir", str(subs))
    metrics = RunDir(runs / name).metrics()
    submission = pd.read_csv(subs / f"{name}.csv", dtype={"id": str})
    return {"metrics": metrics, "wall": wall, "submission": submission}


def tfidf_logreg(texts: list[str], labels: np.ndarray, scoring: str, groups: np.ndarray | None = None):
    """TF-IDF word 1-2 grams (sublinear tf) + logistic regression, fitted with its C the best of
    BASELINE_C by 5-fold stratified CV on these texts alone (with `groups`: each group kept whole)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV, StratifiedGroupKFold, StratifiedKFold
    from sklearn.pipeline import make_pipeline
    from threadpoolctl import threadpool_limits

    model = make_pipeline(
        TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True), LogisticRegression(max_iter=5000)
    )
    kind = StratifiedKFold if groups is None else StratifiedGroupKFold
    search = GridSearchCV(
        model,
        {"logisticregression__C": list(BASELINE_C)},
        scoring=scoring,
        cv=kind(5, shuffle=True, random_state=0),
    )
    with threadpool_limits(1):  # as cv_data.fit_probe: spinning BLAS threads slow small fits
        return search.fit(texts, labels, groups=groups)


def baseline(texts: list[str], labels: np.ndarray, train: np.ndarray, scored: np.ndarray) -> dict:
    """TF-IDF word 1-2 grams (sublinear tf) + logistic regression, C by 5-fold CV on `train`."""
    from sklearn.metrics import roc_auc_score

    started = time.perf_counter()
    search = tfidf_logreg([texts[i] for i in train], labels[train], "roc_auc")
    seconds = time.perf_counter() - started
    probabilities = search.predict_proba([texts[i] for i in scored])[:, 1]
    return {
        "auc": float(roc_auc_score(labels[scored], probabilities)),
        "C": search.best_params_["logisticregression__C"],
        "seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "petals" / "real-data")
    parser.add_argument(
        "--seeds", type=int, nargs="+", default=[0, 1, 2], help="one run per seed (config.seed)"
    )
    parser.add_argument("--backend", default="tensorflow", choices=["tensorflow", "jax"])
    parser.add_argument("--validate", action="store_true", help="score a part of train, not the test part")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="config overrides")
    parser.add_argument(
        "--baseline",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="fit TF-IDF + LR too (about a minute here)",
    )
    args = parser.parse_args()
    from sklearn.metrics import roc_auc_score

    try:
        ids, texts, labels = read_snippets(sdist(args.cache))
    except (Unavailable, OSError, tarfile.TarError, KeyError) as error:
        sys.exit(f"bench_text_real: the real reviews are not available: {error}")
    train, scored = split(labels, args.validate)
    part = "validation (a part of train)" if args.validate else "held-out test"
    print(
        f"real reviews: {len(labels)} Rotten Tomatoes sentences ({labels.mean():.1%} positive); "
        f"{len(train)} to train on, {len(scored)} scored ({part})",
        flush=True,
    )
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "download"
        write_competition(folder, ids, texts, labels, train, scored)
        truth = dict(zip([ids[i] for i in scored], labels[scored].tolist(), strict=True))
        for seed in args.seeds:
            done = run_chain(folder, Path(tmp), seed, args.backend, args.overrides)
            submission = done["submission"]
            auc = float(roc_auc_score(submission["id"].map(truth), submission["sentiment"]))
            metrics = done["metrics"]
            runs.append({**done, "auc": auc})
            print(
                f"  seed {seed}: {metrics['backbone']} ROC AUC {auc:.4f} (val {metrics['val_roc_auc']:.4f}, "
                f"best epoch {metrics['best_epoch']}/{metrics['epochs']}), training "
                f"{metrics['train_seconds']:.1f} s, {metrics['images_per_second']:.0f} examples/s, "
                f"train command {done['wall']:.0f} s",
                flush=True,
            )
    if not args.baseline:
        mean = statistics.mean(r["auc"] for r in runs)
        print(f"{runs[0]['metrics']['backbone']}: ROC AUC {mean:.4f}, mean of {len(runs)}")
        return
    base = baseline(texts, labels, train, scored)
    backbone = runs[0]["metrics"]["backbone"]
    aucs = [r["auc"] for r in runs]
    margins = [auc - base["auc"] for auc in aucs]
    seconds = [r["metrics"]["train_seconds"] for r in runs]
    speeds = [r["metrics"]["images_per_second"] for r in runs]
    recipe = " ".join(["cpu", *args.overrides])
    label = f"{backbone} (cpu recipe{', --set below' if args.overrides else ''})"
    spread_note = f"   mean of {len(runs)} seeds, {min(aucs):.4f}-{max(aucs):.4f}" if len(runs) > 1 else ""
    print(f"\n{'model':<44} {'ROC AUC':>8} {'train s':>8} {'examples/s':>11}")
    print(
        f"{label:<44} {statistics.mean(aucs):>8.4f} {statistics.mean(seconds):>8.1f} "
        f"{statistics.mean(speeds):>11.0f}{spread_note}"
    )
    baseline_label = f"TF-IDF 1-2 grams + LogisticRegression C={base['C']}"
    print(f"{baseline_label:<44} {base['auc']:>8.4f} {base['seconds']:>8.1f}")
    if args.overrides:
        print(f"--set {' '.join(args.overrides)}")
    print(f"margin {statistics.mean(margins):+.4f} (per seed {', '.join(f'{m:+.4f}' for m in margins)})")
    if args.validate:
        print("(validation only: nothing recorded)")
        return
    split_settings = {"machine": machine(), "train": len(train), "test": len(scored),
                      "data": "VADER movieReviewSnippets_GroundTruth (Rotten Tomatoes), 20% held out, seed 0",
                      "date": datetime.date.today().isoformat()}  # fmt: skip
    settings = {**split_settings, "competition": "imdb", "recipe": recipe, "backend": args.backend,
                "backbone": backbone, "seeds": args.seeds}  # fmt: skip
    stem = f"text_real_{backbone}_{args.backend}"
    figures = [
        figure(f"{stem}_test_roc_auc", [round(a, 4) for a in aucs], "ROC AUC", settings),
        figure(
            "text_real_tfidf_logreg_test_roc_auc",
            round(base["auc"], 4),
            "ROC AUC",
            {**split_settings, "C": base["C"]},
        ),
        figure(f"{stem}_auc_over_tfidf_logreg", [round(m, 4) for m in margins], "ROC AUC", settings),
        figure(f"{stem}_train_seconds", [round(s, 1) for s in seconds], "s", settings),
        figure(f"{stem}_examples_per_second", [round(s, 1) for s in speeds], "examples/s", settings),
    ]
    record(figures)


if __name__ == "__main__":
    main()
