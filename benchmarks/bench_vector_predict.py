"""A CV group's test predictions through the sentence encoder's vectors against the whole network's.

Fold models of a sentence encoder's texts (`sentence-bert`, small data's `joined` candidate)
predict through their vectors (`pipeline/modeling/vector_predict.py`): each text encoded once a
process, each fold's layers above the vector reading the vectors. This predicts a finished CV
group's test set both ways in one process, the whole network first (every fold running the encoder,
as before vector_predict), then through the vectors with the memo emptied (as a fresh `make
evaluate` starts), and prints each way's seconds, the largest probability difference and how many
predicted labels differ. The runs' kept test predictions are put back as they were.

Usage: python benchmarks/bench_vector_predict.py GROUP_DIR --data-dir DATA
  (GROUP_DIR: `runs/cv5-...-tfidf-sentence-...` of a finished group, e.g. small data's choice)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


@contextlib.contextmanager
def kept_aside(paths: list[Path]):
    """The files at `paths` moved aside (so each prediction is made, not read back), then restored."""
    with tempfile.TemporaryDirectory() as tmp:
        aside = {path: Path(tmp) / f"{i}.npz" for i, path in enumerate(paths) if path.is_file()}
        for path, copy in aside.items():
            shutil.move(path, copy)
        try:
            yield
        finally:
            for path in paths:
                path.unlink(missing_ok=True)
            for path, copy in aside.items():
                shutil.move(copy, path)


def predict_all(runs, competition, data_dir: Path, platform) -> tuple[list, float]:
    from pipeline.modeling.inference import predict_split

    started = time.perf_counter()
    found = [predict_split(run, competition, data_dir, "test", 1, platform) for run in runs]
    return found, time.perf_counter() - started


def main() -> None:
    from pipeline.core import device
    from pipeline.core.rundir import RunDir
    from pipeline.modeling import probe, vector_predict
    from pipeline.modeling.inference import load_inference_model
    from pipeline.tasks.competitions import load_competition

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("group", type=Path)
    parser.add_argument("--data-dir", type=Path, required=True)
    args = parser.parse_args()
    platform = device.pick("tensorflow", "cpu")
    folds = json.loads((args.group / "group.json").read_text())["fold_runs"]
    runs = [RunDir(args.group.parent / folds[fold]) for fold in sorted(folds, key=int)]
    competition = load_competition(runs[0].competition())
    if vector_predict.above(load_inference_model(runs[0], competition)) is None:
        sys.exit(f"{args.group}: its networks read no sentence encoder's mean vector")
    paths = [run.predictions("test") for run in runs]
    with kept_aside(paths):
        above = vector_predict.above
        vector_predict.above = lambda net: None  # every fold through the whole network
        try:
            whole, whole_s = predict_all(runs, competition, args.data_dir, platform)
        finally:
            vector_predict.above = above
        for path in paths:
            path.unlink(missing_ok=True)
        probe._VECTORS.clear()  # as a fresh process starts
        through, through_s = predict_all(runs, competition, args.data_dir, platform)
    pairs = list(zip(whole, through, strict=True))
    diff = max(float(np.abs(a.probabilities - b.probabilities).max()) for a, b in pairs)
    differ = sum(int((a.predicted != b.predicted).sum()) for a, b in pairs)
    rows = len(whole[0].ids)
    print(
        f"{len(runs)} fold models x {rows} test examples: whole network {whole_s:.1f} s, through the "
        f"vectors {through_s:.1f} s ({whole_s / through_s:.1f}x); max |difference| {diff:.2e}, "
        f"{differ} predicted labels differ of {len(runs) * rows}"
    )


if __name__ == "__main__":
    main()
