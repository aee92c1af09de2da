"""How far a fold's predictions through its cut are from the whole network's, on a real fold run.

A CV group's folds predict through the feature cache's cut (`pipeline/modeling/cut_predict.py`):
their out-of-fold rows as training scored them, the test set below the cut once. This loads what a
finished fold run kept (val and test, TTA 1), predicts the same rows from pixels with the whole
network (`predict_split`), and prints the largest and mean probability difference and how many
predicted labels differ. The run's kept files are put back as they were.

Usage: python benchmarks/bench_cut_predict.py RUN_DIR --data-dir DATA
  (RUN_DIR: a fold run of `make train FOLDS=5` after `make predict FOLDS=5`)
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> None:
    from pipeline.core import device
    from pipeline.core.rundir import RunDir
    from pipeline.modeling.inference import Predictions, predict_split
    from pipeline.tasks.competitions import load_competition

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("run", type=Path)
    parser.add_argument("--data-dir", type=Path, required=True)
    args = parser.parse_args()
    platform = device.pick("tensorflow", "cpu")
    run = RunDir(args.run)
    competition = load_competition(run.competition())  # resolved once, as a stage does
    for split in ("val", "test"):
        kept_path = run.predictions(split)
        kept = Predictions.load(kept_path)
        if "through" not in json.loads(kept.source):
            sys.exit(f"{kept_path}: not predicted through the cut ({kept.source})")
        with tempfile.TemporaryDirectory() as tmp:
            saved = Path(tmp) / kept_path.name
            shutil.copy(kept_path, saved)
            try:
                whole = predict_split(run, competition, args.data_dir, split, 1, platform, as_scored=False)
                whole = whole.by_ids(kept.ids)
            finally:
                shutil.copy(saved, kept_path)  # predict_split replaced it with the whole network's
        diff = np.abs(kept.probabilities - whole.probabilities)
        differ = int((kept.predicted != whole.predicted).sum())
        print(
            f"{split}: {len(kept.ids)} examples, max |difference| {diff.max():.5f}, mean {diff.mean():.2e}, "
            f"{differ} predicted labels differ"
        )


if __name__ == "__main__":
    main()
