"""Does an equal blend of small data's CV candidates beat the better one? Out of fold and on test.

On real texts CV picks TF-IDF + LR, so petals' default is the baseline itself. Kaggle's habit is to
average two different models' probabilities. This measures that habit on petals' own candidates,
before anything is built on it: each set of `realdata` written as a user's competition (test
labels kept outside, as bench_realdata does), then, each stage in a fresh process,
`fetch`, `train` (small data: every candidate's CV group trained and one chosen), `evaluate,predict`
(the chosen group's submission), `cv predict` of every other candidate's group (its fold mean on
test), and `ensemble --method equal` over the candidates' groups (pipeline/cv/blend.py: the mean of
their out-of-fold probabilities, and of their test means). Every submission is scored once against
the held-back labels (macro-F1, with its 95% bootstrap interval over test rows or groups).

Per set and seed it records, for each candidate and for the blend: the OOF score (`cv`), each
fold's, their mean and spread, and the test score; for each candidate also what the choice judged
(`judged`: the folds at the schedule's end); the blend's searched-weight and stacked OOF scores
beside (the ensemble stage scores all three). `chosen` is the candidate the choice takes among the
candidates alone, `choice_winner` what it took (the blend where a choice judged it: 64deaf8) and
`default_test` the test score of what `make train predict` submitted. The deltas that decide:
blend - the best candidate out of fold, blend - the chosen candidate on test, blend - the better
candidate on test (chosen knowing the test labels: the strictest bar), and fold by fold against the
chosen candidate (`blend_minus_chosen_folds`: the folds' own difficulty cancels). `over_seeds`
sums each delta over a set's seeds (mean, sd, standard error), and `overall` over every set and seed.

Usage: python benchmarks/bench_blend_choice.py [--sets manpages fortunes amazon stamps] [--seeds 0,1]
       [--quick]   (`make bench-blend-choice`; results in benchmarks/blend_choice.json, each set
       and seed replaced as it finishes; `--quick` cuts each set to ~150 dev rows, records nothing)
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

from benchmarks import realdata, realdata_gaps  # noqa: E402
from benchmarks.bench_cv import commit  # noqa: E402
from benchmarks.bench_fetch import machine  # noqa: E402
from benchmarks.bench_images_real import stage  # noqa: E402  (a stage in a fresh process, exits on failure)
from benchmarks.bench_realdata import DEVICE, seed_list  # noqa: E402
from pipeline.core.files import write_json  # noqa: E402  (atomic)

RESULTS = REPO / "benchmarks" / "blend_choice.json"
DEFAULT_SETS = ("manpages", "fortunes", "amazon", "stamps")  # texts first: they are the cheap ones
BLEND = "blend"  # a choice's row for the blend, where it judged one (5b35f3e: 64deaf8, reverted)
DELTAS = ("blend_minus_best_cv", "blend_minus_chosen_test", "blend_minus_best_test")


def scored(csv: Path, truth: dict, data: realdata.RealSet) -> dict:
    """A submission CSV scored once against the held-back labels (id, class id per row)."""
    import pandas as pd

    frame = pd.read_csv(csv, dtype=str)
    predicted = dict(zip(frame.iloc[:, 0], frame.iloc[:, 1].astype(int), strict=True))
    ids = sorted(truth)
    labels, decided = np.array([truth[i] for i in ids]), np.array([predicted[i] for i in ids])
    return realdata_gaps.test_score(labels, decided, len(data.classes), data.test.groups)


def oof_figures(metrics: dict) -> dict:
    """A CV group's (or a group ensemble's) out-of-fold score, and its folds' mean and spread."""
    folds = metrics["fold_scores"]
    return {
        "cv": round(metrics["cv_score"], 4),
        "fold_mean": round(float(np.mean(folds)), 4),
        "fold_std": round(float(np.std(folds, ddof=1)), 4),
        "fold_scores": [round(f, 4) for f in folds],
    }


def measure(spec: Path, download: Path, truth: dict, work: Path, data: realdata.RealSet) -> dict:
    """The chain `make train predict` runs, then every candidate's fold mean and their equal blend,
    each submission scored on the test part."""
    from competition import load_spec
    from pipeline.core.rundir import RunDir
    from pipeline.cv.choose import pick
    from pipeline.runs.submission_files import newest_submission

    data_dir, runs, subs = work / "data", work / "runs", work / "submissions"
    where = ["--data-dir", str(data_dir), "--runs-dir", str(runs), *DEVICE]
    config = ["--recipe", "auto", "--set", f"competition={spec}"]
    out = ["--submissions-dir", str(subs), "--tta", "1"]
    fetch = ["--source", "dir", "--from", str(download), "--data-dir", str(data_dir)]
    seconds = {"fetch": stage("fetch", *fetch, "--competition", str(spec), "--seed", "0")}
    seconds["train"] = stage("train", *where, *config)
    seconds["evaluate_predict"] = stage("evaluate,predict", *where, *config, *out)
    default = scored(
        newest_submission(subs, load_spec(str(spec)).name), truth, data
    )  # what make submit sends
    found = sorted(runs.glob("choose-*/choice.json"))
    if not found:
        sys.exit(f"bench_blend_choice: {data.name}: small data's CV choice did not run (no choice.json)")
    choice = json.loads(found[-1].read_text())
    rows = [row for row in choice["rows"] if row["candidate"] != BLEND]  # the blend's row: judged below
    started, candidates = time.perf_counter(), {}
    for row in rows:  # each candidate's group predicts the test part (one predicted before: reused)
        sets = [arg for override in row["overrides"] for arg in ("--set", override)]
        stage("cv", "predict", "--folds", str(choice["folds"]), *where, *config, *sets, *out)
        metrics = RunDir(runs / row["group"]).metrics()
        candidates[row["candidate"]] = {
            **oof_figures(metrics),
            "judged": round(row["score"], 4),
            "judged_spread": round(row["spread"], 4),
            **scored(subs / f"{row['group']}.csv", truth, data),
        }
    seconds["other_predict"] = time.perf_counter() - started
    groups = [row["group"] for row in rows]
    seconds["ensemble"] = stage("ensemble", "--runs", *groups, "--method", "equal", *where, *out)
    ensemble = next(runs.glob("ensemble-*"))
    metrics = RunDir(ensemble).metrics()
    blend = {
        **oof_figures(metrics),
        "methods_cv": {kind: round(score, 4) for kind, score in metrics["methods"].items()},
        **scored(subs / f"{ensemble.name}.csv", truth, data),
    }
    # the candidate the choice takes among the candidates alone (as before the blend was judged)
    alone = rows[pick(rows, choice["folds"], greater_is_better=True)]["candidate"]
    return {"folds": choice["folds"], "chosen": alone, "choice_winner": choice["winner"],
            "default_test": default["test_macro_f1"], "candidates": candidates, "blend": blend,
            **deltas(candidates, alone, blend),
            "seconds": {k: round(v, 1) for k, v in seconds.items()}, "commit": commit()}  # fmt: skip


def deltas(candidates: dict, chosen: str, blend: dict) -> dict:
    """What decides: the blend against the best candidate out of fold, the chosen one on test, and
    the better one on test (the strictest: chosen by the test labels)."""
    best_cv = max(c["cv"] for c in candidates.values())
    best_test = max(c["test_macro_f1"] for c in candidates.values())
    # fold by fold against the chosen one, on the same rows: the folds' own difficulty cancels
    gains = np.subtract(blend["fold_scores"], candidates[chosen]["fold_scores"])
    return {
        "blend_minus_chosen_folds": {
            "mean": round(float(gains.mean()), 4),
            "se": round(float(gains.std(ddof=1) / np.sqrt(len(gains))), 4),
            "wins": int((gains > 0).sum()),
        },
        "blend_minus_best_cv": round(blend["cv"] - best_cv, 4),
        "blend_minus_chosen_test": round(blend["test_macro_f1"] - candidates[chosen]["test_macro_f1"], 4),
        "blend_minus_best_test": round(blend["test_macro_f1"] - best_test, 4),
    }


def summed(rows: list[dict]) -> dict:
    """Each delta over `rows`: mean, sample sd, the mean's standard error, how many rows it won."""
    found = {"n": len(rows)}
    for key in DELTAS:
        values = np.array([r[key] for r in rows])
        sd = float(np.std(values, ddof=1)) if len(values) > 1 else None
        found[key] = {
            "mean": round(float(values.mean()), 4),
            "sd": None if sd is None else round(sd, 4),
            "se": None if sd is None else round(float(sd / np.sqrt(len(values))), 4),
            "wins": int((values > 0).sum()),
        }
    return found


def run_one(name: str, seed: int, quick: bool) -> dict:
    data = realdata_gaps.resplit(realdata.load(name, quick), seed)
    with tempfile.TemporaryDirectory() as tmp:
        spec, download, truth = realdata.write_competition(data, Path(tmp) / "set")
        found = measure(spec, download, truth, Path(tmp) / "work", data)
    print(f"{name} seed {seed}: {json.dumps(found)}", flush=True)
    return found


def record(name: str, seed: int, found: dict) -> dict:
    """`found` into the stored results (read again just before: another run may have written)."""
    stored = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {"sets": {}}
    entry = stored["sets"].setdefault(name, {"seeds": {}})
    entry["seeds"][str(seed)] = found
    entry["over_seeds"] = summed(list(entry["seeds"].values()))
    every = [row for one in stored["sets"].values() for row in one["seeds"].values()]
    stored.update({"machine": f"{machine()}, no GPU", "overall": summed(every)})  # the CPU named
    write_json(RESULTS, stored)
    return stored


def table(stored: dict) -> str:
    lines = [f"{'set':<9} {'seed':>4} {'chosen':>7} " + " ".join(f"{k:>26}" for k in DELTAS)]
    for name, entry in stored["sets"].items():
        for seed, row in sorted(entry["seeds"].items()):
            lines.append(
                f"{name:<9} {seed:>4} {row['chosen']:>7} " + " ".join(f"{row[k]:>+26.4f}" for k in DELTAS)
            )
    overall = stored["overall"]
    lines.append(
        f"overall over {overall['n']} set-seeds: "
        + "; ".join(
            f"{k} {overall[k]['mean']:+.4f} (se {overall[k]['se']}, wins {overall[k]['wins']})"
            for k in DELTAS
        )
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sets", nargs="+", default=list(DEFAULT_SETS), choices=realdata.SETS)
    parser.add_argument(
        "--seeds", type=seed_list, default=[realdata.SEED], help="dev/test splits (default 0)"
    )
    parser.add_argument("--quick", action="store_true", help="~150 dev rows a set; nothing recorded")
    args = parser.parse_args()
    for name in args.sets:
        for seed in args.seeds:
            found = run_one(name, seed, args.quick)
            if not args.quick:
                print(table(record(name, seed, found)), flush=True)


if __name__ == "__main__":
    main()
