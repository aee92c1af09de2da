"""Two runs scored on the same held-out rows: is the second ahead of the first beyond those rows' noise?

Each run's val predictions (`val_predictions.npz`, what evaluate scores: the kept weights'
probabilities), matched by id: both scores, the second's less the first's, and its standard error
and 95% interval from one bootstrap that draws the same rows for both runs (whole groups where the
competition names them and `--data-dir` holds them), so what both runs get right or wrong together
cancels. Two runs' own intervals overlap long after a paired difference is clear of zero; this is
how a recipe change was judged on the embedded flowers (docs/BENCHMARKS.md: label smoothing).

Usage: python benchmarks/compare_runs.py RUNS/first RUNS/second [--data-dir DATA]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.core.errors import PetalsError


def compare(first: Path, second: Path, data_dir: Path | None = None) -> dict:
    """The two runs' scores on their common val rows, and the paired difference (second - first)."""
    from pipeline.core.rundir import RunDir
    from pipeline.data.groups import held_out_groups
    from pipeline.modeling.inference import Predictions
    from pipeline.tasks.competitions import load_competition

    runs = [RunDir(path) for path in (first, second)]
    names = {run.competition() for run in runs}
    if len(names) != 1:
        raise PetalsError(
            f"{first} and {second} are runs of different competitions ({', '.join(sorted(names))})"
        )
    spec = load_competition(names.pop()).spec
    found = [Predictions.load(run.predictions("val", 1)) for run in runs]
    ids = np.sort(found[0].ids)
    if len(ids) != len(found[1].ids) or not np.array_equal(ids, np.sort(found[1].ids)):
        raise PetalsError(f"{first} and {second} were scored on different val rows: their ids differ")
    a, b = (p.by_ids(ids) for p in found)
    if not np.array_equal(a.labels, b.labels):
        raise PetalsError(f"{first} and {second} hold different labels for the same val ids")
    groups = held_out_groups(data_dir, spec, ids) if data_dir is not None else None
    paired = spec.metric.difference(a.labels, a.probabilities, b.probabilities, groups)
    if paired is None:
        raise PetalsError(f"{spec.metric.title} cannot be bootstrapped on these rows")
    gap, se, low, high = paired
    return {
        "metric": spec.metric.title + ("" if spec.metric.greater_is_better else " (lower is better)"),
        "rows": len(ids),
        "groups": None if groups is None else len(set(groups.tolist())),
        "first": spec.metric.score(a.labels, a.probabilities),
        "second": spec.metric.score(b.labels, b.probabilities),
        "difference": gap,
        "se": se,
        "interval": [low, high],
        "rows_predicted_differently": int((a.probabilities.argmax(1) != b.probabilities.argmax(1)).sum()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path)
    parser.add_argument(
        "--data-dir", type=Path, help="the fetched data: its groups, where the competition names them"
    )
    args = parser.parse_args()
    try:
        found = compare(args.first, args.second, args.data_dir)
    except PetalsError as err:
        sys.exit(f"compare_runs: {err}")
    low, high = found["interval"]
    over = f"{found['rows']:,} val rows" + (f" ({found['groups']:,} groups)" if found["groups"] else "")
    print(
        f"{found['metric']} on {over}: {found['first']:.4f} then {found['second']:.4f}; second - first "
        f"{found['difference']:+.4f} (se {found['se']:.4f}, 95% {low:+.4f} to {high:+.4f}); "
        f"{found['rows_predicted_differently']:,} rows predicted differently"
    )


if __name__ == "__main__":
    main()
