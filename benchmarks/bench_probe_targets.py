"""Small data's CV choice on real texts with a number or several labels an example (issues 65 and 67):
`make train` with petals' defaults (recipe auto: the text CPU recipe; its candidates, the `tfidf`
probe and the recipe) on two sets no one here drew, each split once (seed 0) into a development
part, written as a user's competition, and a test part whose labels stay here, scored once:
- `tweets` (text_regression, RMSE): VADER's 4,200 tweets (Hutto & Gilbert, ICWSM 2014), each the
  mean of 20 people's sentiment ratings from -4 to 4 (the vaderSentiment sdist that
  bench_text_real.py fetches and checks).
- `debtags` (multi_label_text_classification, mean column ROC AUC): Debian packages' one-line
  descriptions with their debtags (the `Tag` fields of apt's package lists, `apt-cache dumpavail`),
  8 tags as labels, a description of several packages kept once.
For each set: CV's choice and every candidate's score as `make train` reports it (the folds' mean
at its schedule's end, +- their spread), and each candidate's test score: its group's fold mean
predicting the test part (`make predict`), the chosen one's being what `make predict` submits.

Usage: python benchmarks/bench_probe_targets.py [--sets tweets debtags] [--dev 1000] [--test 1000]
Writes benchmarks/probe_targets.json.
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import bench_text_real, cv_data

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "benchmarks" / "probe_targets.json"
WORK = cv_data.CACHE.parent / "probe-targets"
TWEETS = "hutto_ICWSM_2014/tweets_GroundTruth.txt"
# Tags on between ~5% and ~50% of the tagged packages, of several facets: what a package is, what
# it is written in and how it is used. A one-line description says some of it ("Python 3 module").
TAGS = ("role::program", "role::shared-lib", "role::devel-lib", "devel::library", "implemented-in::c",
        "implemented-in::python", "interface::commandline", "interface::x11")  # fmt: skip
HEADER = """name = "{name}"
title = "{title}"
slugs = ["{name}"]
task = "{task}"
metric = "{metric}"

[data]
format = "table"
splits = ["train", "test"]
labeled_splits = ["train"]
sample_submission = "sample_submission.csv"
{labels}
[data.counts]
train = {train}
test = {test}

[data.table]
separator = ","
id_column = "id"
text_columns = ["text"]
{column}
[data.table.train]
file = "train.csv"

[data.table.test]
file = "test.csv"

[submission]
id_column = "id"
{submission}
[augment]
keeps_label = []
"""


def tweets() -> tuple[list[str], np.ndarray, dict]:
    """The tweets' texts and their mean ratings [n, 1]; the competition file's parts."""
    with tarfile.open(bench_text_real.sdist(cv_data.CACHE)) as outer:
        inner = outer.extractfile(bench_text_real.INNER).read()
    with tarfile.open(fileobj=io.BytesIO(inner)) as opened:
        lines = opened.extractfile(TWEETS).read().decode("utf-8", "replace").splitlines()
    rows = [line.split("\t", 2) for line in lines if line.strip()]
    texts = [" ".join(text.split()) for _, _, text in rows]
    parts = {"title": "VADER tweets, mean sentiment rating", "task": "text_regression", "metric": "rmse",
             "labels": "", "column": 'label_column = "rating"\nlabels_are = "numbers"\n',
             "submission": 'label_column = "rating"\nvalue = "number"\n'}  # fmt: skip
    return texts, np.array([[float(mean)] for _, mean, _ in rows]), parts


def debtags() -> tuple[list[str], np.ndarray, dict]:
    """Tagged packages' descriptions and their 0/1 rows over TAGS; the competition file's parts."""
    listed = subprocess.run(["apt-cache", "dumpavail"], capture_output=True, text=True, check=True).stdout
    seen, texts, rows = set(), [], []
    for record in listed.split("\n\n"):
        fields, last = {}, None
        for line in record.splitlines():
            if line.startswith(" ") and last:
                fields[last] += line
            elif ":" in line:
                last, _, value = line.partition(":")
                fields[last] = value.strip()
        description, tags = fields.get("Description", ""), fields.get("Tag", "")
        if not tags or not description or description in seen or "special::auto-inst-parts" in tags:
            continue
        seen.add(description)
        held = {tag.strip() for tag in tags.split(",")}
        texts.append(description)
        rows.append([int(tag in held) for tag in TAGS])
    if not texts:
        raise SystemExit("bench_probe_targets: apt's package lists hold no Tag fields (run apt-get update)")
    columns = ", ".join(f'"{tag}"' for tag in TAGS)
    parts = {"title": "Debian packages' debtags", "task": "multi_label_text_classification",
             "metric": "mean_column_roc_auc", "labels": f"label_columns = [{columns}]\n", "column": "",
             "submission": 'value = "label_probabilities"\n'}  # fmt: skip
    return texts, np.array(rows), parts


SETS = {"tweets": tweets, "debtags": debtags}


def write_competition(folder: Path, name: str, texts, targets, parts: dict, dev, test) -> Path:
    """The dev part (labelled train.csv) and the test part (texts only) in a CSV table layout."""
    import pandas as pd

    folder.mkdir(parents=True, exist_ok=True)
    ids = np.array([f"{name}{i:05d}" for i in range(len(texts))])
    names = ["rating"] if parts["task"] == "text_regression" else list(TAGS)
    labelled = pd.DataFrame({"id": ids[dev], "text": [texts[i] for i in dev]})
    labelled[names] = targets[dev]
    labelled.to_csv(folder / "train.csv", index=False)
    pd.DataFrame({"id": ids[test], "text": [texts[i] for i in test]}).to_csv(folder / "test.csv", index=False)
    sample = pd.DataFrame({"id": ids[test]})
    sample[names] = 0.0
    sample.to_csv(folder / "sample_submission.csv", index=False)
    toml = folder / "competition" / "competition.toml"
    toml.parent.mkdir(exist_ok=True)
    toml.write_text(HEADER.format(name=name, train=len(dev), test=len(test), **parts))
    return toml


def test_score(task: str, truth: np.ndarray, submission) -> float:
    """The test part's RMSE, or its labels' mean ROC AUC (over labels the part holds both ways)."""
    from sklearn.metrics import roc_auc_score

    predicted = submission.drop(columns="id").to_numpy(np.float64)
    if task == "text_regression":
        return float(np.sqrt(np.mean((predicted - truth) ** 2)))
    both = [k for k in range(truth.shape[1]) if 0 < truth[:, k].sum() < len(truth)]
    return float(np.mean([roc_auc_score(truth[:, k], predicted[:, k]) for k in both]))


def run(name: str, dev_size: int, test_size: int) -> dict:
    import pandas as pd

    from pipeline import api
    from pipeline.core.options import CVOptions
    from pipeline.core.rundir import RunDir
    from pipeline.cv import choose

    texts, targets, parts = SETS[name]()
    order = np.random.default_rng(0).permutation(len(texts))
    dev, test = order[:dev_size], order[dev_size : dev_size + test_size]
    work = WORK / f"{name}-{dev_size}"
    toml = write_competition(work / "download", name, texts, targets, parts, dev, test)
    data, runs, subs = work / "data", work / "runs", work / "submissions"
    if not (data / "manifest.json").is_file():
        bench_text_real.pipeline("fetch", "--source", "dir", "--from", str(work / "download"),
                                 "--competition", str(toml), "--data-dir", str(data))  # fmt: skip
    common = ["--data-dir", str(data), "--runs-dir", str(runs), "--backend", "tensorflow",
              "--strategy", "cpu", "--recipe", "cpu", "--set", f"competition={toml}"]  # fmt: skip
    started = time.perf_counter()
    bench_text_real.pipeline("train", *common)  # small data: the CV choice among the candidates
    seconds = time.perf_counter() - started
    (place,) = runs.glob(f"choose-cpu-*/{choose.FILE}")
    choice = json.loads(place.read_text())
    rows = []
    for row in choice["rows"]:
        opts = CVOptions(folds=choice["folds"], data_dir=data, runs_dir=runs, submissions_dir=subs,
                         recipe="cpu", overrides=(f"competition={toml}", *row["overrides"]),
                         backend="tensorflow", strategy="cpu", progress=False)  # fmt: skip
        submission = pd.read_csv(api.cv_predict(opts), dtype={"id": str})
        rows.append({
            "candidate": row["candidate"], "cv_score": row["score"], "cv_spread": row["spread"],
            "test_score": test_score(parts["task"], targets[test], submission),
            "group_seconds": RunDir(runs / row["group"]).metrics().get("train_seconds"),
        })  # fmt: skip
    # What no text tells: the dev part's mean number, or every label at one probability (AUC 0.5).
    regression = parts["task"] == "text_regression"
    constant = float(np.sqrt(np.mean((targets[test] - targets[dev].mean(0)) ** 2))) if regression else 0.5
    return {"task": parts["task"], "metric": parts["metric"], "dev": len(dev), "test": len(test),
            "constant_test_score": constant,
            "folds": choice["folds"], "winner": choice["winner"], "train_wall_seconds": round(seconds, 1),
            "candidates": rows}  # fmt: skip


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--sets", nargs="+", default=list(SETS), choices=list(SETS))
    parser.add_argument("--dev", type=int, default=1000, help="development examples (default: 1000)")
    parser.add_argument("--test", type=int, default=1000, help="test examples (default: 1000)")
    args = parser.parse_args()
    results = json.loads(OUT.read_text()) if OUT.is_file() else {}
    for name in args.sets:
        results[name] = run(name, args.dev, args.test)
        print(json.dumps({name: results[name]}, indent=1))
        OUT.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
