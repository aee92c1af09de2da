"""Real data, judged honestly: petals' default on real sets against the best baseline (issue 65).

Each set of `realdata` (images and texts found in packages, two or more grouped) is written as a
user's own competition, its test labels kept outside it. petals then runs as `make train predict`
would for that competition: `fetch --source dir`, `train` and `evaluate,predict`, each in a fresh
process, with the recipe `auto` and the device `auto` (the CPU here), and no override: whatever
the default is at this commit is what is measured. The submission `make submit` would upload (the
newest CSV) is scored once against the held-back labels (macro-F1, scikit-learn's), beside what
petals reported for it: the CV group's out-of-fold score where the default ran CV, else its val
score. The gap |reported - test| says whether the report can be believed.

The baselines, on the same split, C chosen on the dev part alone by 5-fold CV (grouped folds for a
grouped set): images, EfficientNet-Lite0's frozen pooled features + LogisticRegression
(cv_data.fit_probe); texts, TF-IDF word 1-2 grams + LogisticRegression (bench_text_real).

Every test score carries its 95% bootstrap interval over test rows, or whole test groups for a
grouped set. `--seeds 0,1,2` deals each set into dev and test again with each seed (grouped sets
by group; seed 0 is the split above) and records, per seed, the default's reported CV, its test
score and the signed gap, and the fold models' own test scores; `--refit` also trains the chosen
candidate on all of dev (`make predict FOLDS=K CHOOSE=1 REFIT=1`) and scores it on the same test
part: the learning-curve part of the gap (benchmarks/realdata_gaps.py says how the gap is split).

Usage: python benchmarks/bench_realdata.py [--sets stamps faces ...] [--seeds 0,1,2] [--refit]
       [--baselines-only] [--no-baselines] [--quick] [--verdicts]
`--verdicts` judges the stored results again (realdata_verdict: the bar over each set's seeds) and
runs nothing; every run ends with the same verdicts.
Each set's entry in benchmarks/realdata.json (its sizes; `baseline` and `default`, each with the
commit it was measured at) is replaced as its seed 0 finishes; other sets' entries are kept. Each
seed's default is kept under `seeds` (a seed measured again replaced), summed up in `over_seeds`.
`--quick` cuts each set to ~150 dev and ~100 test rows (whole groups) to check the harness end to
end, and records nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks import bench_text_real, cv_data, realdata, realdata_gaps, realdata_verdict  # noqa: E402
from benchmarks.bench_cv import commit  # noqa: E402
from benchmarks.bench_fetch import machine  # noqa: E402
from benchmarks.bench_images_real import stage  # noqa: E402  (a stage in a fresh process, exits on failure)
from pipeline.core.files import write_json  # noqa: E402  (atomic)

RESULTS = REPO / "benchmarks" / "realdata.json"
DEVICE = ["--backend", "auto", "--strategy", "auto", "--cpu-replicas", "0"]  # make's defaults


def baseline(data: realdata.RealSet) -> dict:
    """The best baseline of the set's kind, fitted on dev (C by (grouped) CV there), scored on test."""
    started = time.perf_counter()
    if data.kind == "image":
        dev, test = cv_data.probe_features(data.dev.items), cv_data.probe_features(data.test.items)
        probabilities, c = cv_data.fit_probe(dev, data.dev.labels, test, data.dev.groups)
        predicted, name = probabilities.argmax(axis=1), "Lite0 frozen features + LogisticRegression"
    else:
        search = bench_text_real.tfidf_logreg(data.dev.items, data.dev.labels, "f1_macro", data.dev.groups)
        predicted, name = search.predict(data.test.items), "TF-IDF 1-2 grams + LogisticRegression"
        c = float(search.best_params_["logisticregression__C"])
    return {
        "model": name,
        "C": c,
        "cv": "5-fold, grouped" if data.grouped else "5-fold",
        **realdata_gaps.test_score(data.test.labels, predicted, len(data.classes), data.test.groups),
        "seconds": round(time.perf_counter() - started, 1),
        "commit": commit(),
    }


def reported(metrics: dict, score_key: str) -> dict:
    """What petals said its submission's score is: a CV group's out-of-fold score, or the run's val
    score (evaluate's, else train's best epoch), with the rows and groups behind it, under petals'
    own names (a CV group's `examples`, an evaluation's `images`, which counts a text's rows too)."""
    if "cv_score" in metrics:
        said = {"kind": "cv", "score": metrics["cv_score"], "examples": metrics.get("examples")}
        return {**said, "groups": metrics.get("groups"), "interval": metrics.get("interval")}
    evaluation = metrics.get("evaluation", {})
    said = {"kind": "val", "score": evaluation.get(score_key, metrics.get(score_key))}
    return {**said, **{k: evaluation.get(k) for k in ("images", "groups", "interval")}}


def default(spec: Path, download: Path, truth: dict, work: Path, data: realdata.RealSet, refit: bool) -> dict:
    """`make train predict` for the competition `spec`, stage by stage; the newest submission scored
    (over test groups where `data` has them), its fold models too; `refit`: a refit on all of dev."""
    from competition import load_spec
    from pipeline.core.rundir import RunDir

    data_dir, runs, subs = work / "data", work / "runs", work / "submissions"
    config = ["--recipe", "auto", "--set", f"competition={spec}"]
    where = ["--data-dir", str(data_dir), "--runs-dir", str(runs), *DEVICE, *config]
    fetch = ["--source", "dir", "--from", str(download), "--data-dir", str(data_dir)]
    seconds = {"fetch": stage("fetch", *fetch, "--competition", str(spec), "--seed", "0")}
    seconds["train"] = stage("train", *where)
    seconds["evaluate_predict"] = stage(
        "evaluate,predict", *where, "--submissions-dir", str(subs), "--tta", "1"
    )
    loaded = load_spec(str(spec))
    csv, scored = submitted(subs, loaded.name, truth, data)
    made = json.loads(csv.with_suffix(".json").read_text())
    metrics = RunDir(Path(made["run_dir"])).metrics()
    said = reported(metrics, loaded.score_key)
    ids = sorted(truth)  # the test part's rows in order: t000000, t000001...
    folds = realdata_gaps.fold_models(runs, metrics, ids, data.test.labels, len(data.classes))
    refitted = None
    if refit and folds:  # the chosen candidate on all of dev, to the epoch CV chose
        k = str(metrics["folds"])
        seconds["refit"] = stage("cv", "predict", "--folds", k, "--choose", "1", "--refit", *where,
                                 "--submissions-dir", str(subs), "--tta", "1")  # fmt: skip
        refit_csv, refit_scored = submitted(subs, loaded.name, truth, data)
        assert refit_csv != csv, "the refit wrote no submission of its own"
        refitted = refit_scored["test_macro_f1"]
    return {
        "run": Path(made["run_dir"]).name,
        "backbone": metrics.get("backbone"),
        "choice": choice_rows(runs),
        "reported": said,
        **scored,
        "gap": None if said["score"] is None else round(abs(said["score"] - scored["test_macro_f1"]), 4),
        "folds_on_test": folds,
        "refit_test": refitted,
        "seconds": {k: round(v, 1) for k, v in seconds.items()},
        "commit": commit(),
    }


def submitted(subs: Path, name: str, truth: dict, data: realdata.RealSet) -> tuple[Path, dict]:
    """(the newest submission, its test score): what `make submit` would upload, scored once, and
    what it got wrong (`test_confusion`: a row a true class, a column a predicted one)."""
    import pandas as pd
    from sklearn.metrics import confusion_matrix

    from pipeline.runs.submission_files import newest_submission

    csv = newest_submission(subs, name)
    frame = pd.read_csv(csv, dtype=str)
    predicted = dict(zip(frame.iloc[:, 0], frame.iloc[:, 1].astype(int), strict=True))  # id, class
    ids = sorted(truth)
    labels, decided = np.array([truth[i] for i in ids]), np.array([predicted[i] for i in ids])
    confusion = confusion_matrix(labels, decided, labels=range(len(data.classes)))
    scored = realdata_gaps.test_score(labels, decided, len(data.classes), data.test.groups)
    return csv, {**scored, "test_confusion": confusion.tolist()}


def choice_rows(runs: Path) -> list[dict] | None:
    """Each candidate's figures where the default was small data's CV choice (choice.json): what
    the choice saw, so a chosen candidate's test score can be read beside the ones passed over."""
    found = sorted(runs.glob("choose-*/choice.json"))
    if not found:
        return None
    rows = json.loads(found[-1].read_text())["rows"]
    keys = ("candidate", "score", "spread", "cv_score", "cv_epoch")
    return [{k: round(r[k], 4) if isinstance(r.get(k), float) else r.get(k) for k in keys} for r in rows]


def sizes(data: realdata.RealSet) -> dict:
    found = {"kind": data.kind, "classes": len(data.classes), "dev": len(data.dev.labels)}
    found["test"] = len(data.test.labels)
    if data.grouped:
        found["groups"] = {"dev": len(set(data.dev.groups)), "test": len(set(data.test.groups))}
    return found


def run_set(
    name: str, quick: bool, run_default: bool, seed: int, refit: bool, baselines: bool = True
) -> dict:
    """The set dealt by `seed`: its sizes, the baseline (at seed 0, or with no default to run: the
    other seeds measure the default's gap, and a baseline costs as much as a train stage on a busy
    machine; none with `baselines` off: the stored ones are kept), and the default."""
    data = realdata_gaps.resplit(realdata.load(name, quick), seed)
    result = sizes(data)
    if baselines and (seed == realdata.SEED or not run_default):
        result["baseline"] = baseline(data)
    print(f"{name} seed {seed}: {json.dumps(result)}", flush=True)
    if run_default:
        with tempfile.TemporaryDirectory() as tmp:
            spec, download, truth = realdata.write_competition(data, Path(tmp) / "set")
            result["default"] = default(spec, download, truth, Path(tmp) / "work", data, refit)
        print(f"{name} seed {seed} default: {json.dumps(result['default'])}", flush=True)
    return result


def table(results: dict) -> str:
    """One line a set: sizes, the default's test and reported scores and their gap, the baseline."""
    lines = [f"{'set':<10} {'dev':>5} {'test':>5} {'default':>8} {'reported':>12} {'gap':>6} {'baseline':>9}"]
    for name, found in results.items():
        run = found.get("default") or {}
        said = run.get("reported") or {}
        shown = f"{said['score']:.4f} {said['kind']}" if said.get("score") is not None else "-"
        lines.append(
            f"{name:<10} {found['dev']:>5} {found['test']:>5} {run.get('test_macro_f1', '-'):>8} "
            f"{shown:>12} {run.get('gap', '-'):>6} {found.get('baseline', {}).get('test_macro_f1', '-'):>9}"
        )
    return "\n".join(lines)


def seed_list(text: str) -> list[int]:
    """`--seeds 0,1,2` -> [0, 1, 2], or one line saying what a seed list is."""
    try:
        seeds = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        seeds = []
    if not seeds:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated integer seeds, e.g. 0,1,2")
    return seeds


def record(stored: dict, name: str, seed: int, found: dict) -> None:
    """`found` into the set's entry: at seed 0 its sizes, baseline and default (a default measured
    before kept where none was run now); every seed's default under `seeds`, summed in `over_seeds`
    (a baseline alone into its seed's row, a stored one kept); the bar judged over the seeds."""
    entry = stored.setdefault(name, {})
    if seed == realdata.SEED:
        kept = entry.get("default")  # a default measured before, with its commit
        entry.update(found)
        if kept and "default" not in found:
            entry["default"] = kept
    stored_row = entry.get("seeds", {}).get(str(seed))
    if (
        "baseline" in found and "default" not in found and stored_row
    ):  # `--baselines-only` at a seed run before
        stored_row["baseline_test"] = found["baseline"]["test_macro_f1"]
        entry["over_seeds"] = realdata_gaps.over_seeds(entry["seeds"])
    if "default" in found:
        seeds = entry.setdefault("seeds", {})
        row = realdata_gaps.seed_row(found)
        kept = seeds.get(str(seed), {})
        if "baseline_test" not in row and "baseline_test" in kept:  # the same split's baseline, not rerun
            row["baseline_test"] = kept["baseline_test"]
        if "baseline_test" not in row and seed == realdata.SEED and "baseline" in entry:  # seed 0's split
            row["baseline_test"] = entry["baseline"]["test_macro_f1"]
        seeds[str(seed)] = row
        entry["over_seeds"] = realdata_gaps.over_seeds(seeds)
    entry["verdict"] = realdata_verdict.verdict(entry)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sets", nargs="+", default=list(realdata.SETS), choices=realdata.SETS)
    parser.add_argument(
        "--seeds", type=seed_list, default=[realdata.SEED], help="dev/test splits, e.g. 0,1,2 (default 0)"
    )
    parser.add_argument("--refit", action="store_true", help="also refit the chosen candidate on all of dev")
    parser.add_argument("--baselines-only", action="store_true", help="the baselines, not petals' default")
    parser.add_argument("--no-baselines", action="store_true", help="the default only; stored baselines kept")
    parser.add_argument("--quick", action="store_true", help="~150 dev rows a set; nothing recorded")
    parser.add_argument("--verdicts", action="store_true", help="judge the stored results again; run nothing")
    parser.add_argument(
        "--markdown", action="store_true", help="print where each set stands, a markdown table"
    )
    args = parser.parse_args()
    if args.verdicts:
        return judge_stored(args.sets)
    if args.markdown:
        return print(realdata_verdict.markdown(json.loads(RESULTS.read_text())["sets"], args.sets))
    results = {}
    for name in args.sets:
        for seed in args.seeds:
            found = run_set(
                name, args.quick, not args.baselines_only, seed, args.refit, not args.no_baselines
            )
            results[name] = found
            if args.quick and "default" in found:  # checked, not recorded
                realdata_gaps.over_seeds({str(seed): realdata_gaps.seed_row(found)})
            if not args.quick:  # read again just before: another bench of other sets may have written
                stored = json.loads(RESULTS.read_text())["sets"] if RESULTS.is_file() else {}
                record(stored, name, seed, found)
                write_json(RESULTS, {"machine": f"{machine()}, no GPU", "sets": stored})  # the CPU named
    stored = json.loads(RESULTS.read_text())["sets"] if RESULTS.is_file() else {}
    print(table(results if args.quick else {name: stored[name] for name in args.sets}))  # as recorded
    if not args.quick and not args.baselines_only:
        print(realdata_gaps.seeds_table(stored, args.sets))
    if not args.quick:
        judge_stored(args.sets)
    else:
        print("(--quick: smaller sets, nothing recorded)")


def judge_stored(names: list[str]) -> None:
    """The bar judged over each set's stored seeds (realdata_verdict), written back and printed."""
    document = json.loads(RESULTS.read_text())
    judged = []
    for name in names:
        entry = document["sets"].get(name)
        if entry:
            entry["verdict"] = realdata_verdict.verdict(entry)
            judged.append(entry["verdict"])
            print("\n".join(realdata_verdict.lines(name, entry["verdict"])))
    pooled = realdata_verdict.pooled_noise(judged)
    if pooled and len(judged) > 1:
        print(
            f"over the {len(judged)} sets: |reported - test| within its noise on {pooled['within_noise']} "
            f"of {pooled['n']} seeds; as many misses or more from honest reports: "
            f"p = {pooled['p_as_many_misses']}"
        )
    write_json(RESULTS, document)


if __name__ == "__main__":
    main()
