"""Benchmark what a run's tracking costs: the seconds spent writing its TensorBoard events (and with
`--track mlflow`, its MLflow run) while the recipe trains, is evaluated and predicts, against the
seconds of those three stages.

Each call of `pipeline.runs.tracking` (the tracker's start, each epoch's row, the run's end,
evaluate's scores and pictures, predict's submission) is timed where the stage makes it, in one
process, on the data dir's real run; the stages are `pipeline.api`'s, as `make train evaluate
predict` runs them. The fraction is of these stages only: the main job adds install and fetch.

Usage: python benchmarks/bench_tracking.py --data-dir data-flowers [--track mlflow] [--set K=V ...]
Writes the figures into benchmarks/latest.json (merged with other benchmarks' figures).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.bench_fetch import machine, record  # noqa: E402


def timed(spent: dict, name: str, function):
    """`function`, its seconds added to `spent[name]` at each call."""

    def call(*args, **kwargs):
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            spent[name] += time.perf_counter() - started

    return call


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--recipe", default="auto")
    parser.add_argument("--track", choices=("none", "mlflow"), default="none")  # options.TRACKS
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()

    from pipeline import api, cli
    from pipeline.runs import tracking

    cli.hush(False)
    cli.set_up_logging()
    spent: dict[str, float] = defaultdict(float)
    for name in ("__init__", "epoch", "trained"):
        setattr(tracking.Tracker, name, timed(spent, f"train: {name}", getattr(tracking.Tracker, name)))
    for name in ("evaluated", "predicted"):
        setattr(tracking, name, timed(spent, name, getattr(tracking, name)))
    with tempfile.TemporaryDirectory() as folder:
        where = {"data_dir": args.data_dir, "runs_dir": Path(folder) / "runs", "track": args.track}
        config = {"recipe": args.recipe, "overrides": tuple(args.overrides)}
        stages = {}
        for stage, function, options in (
            ("train", api.train, api.TrainOptions(**where, **config)),
            ("evaluate", api.evaluate, api.ScoreOptions(**where, **config, submissions_dir=Path(folder))),
            ("predict", api.predict, api.ScoreOptions(**where, **config, submissions_dir=Path(folder))),
        ):
            started = time.perf_counter()
            function(options)
            stages[stage] = time.perf_counter() - started
    total, tracked = sum(stages.values()), sum(spent.values())
    lines = [f"{stage} {seconds:.1f} s" for stage, seconds in stages.items()]
    lines += [f"tracking, {name}: {seconds:.2f} s" for name, seconds in spent.items()]
    print("\n".join(lines))
    print(f"tracking ({args.track}): {tracked:.2f} s of {total:.1f} s, {100 * tracked / total:.2f}%")
    record(
        [
            {
                "name": f"tracking-{args.track}",
                "stages_seconds": {k: round(v, 1) for k, v in stages.items()},
                "tracking_seconds": {k: round(v, 3) for k, v in spent.items()},
                "fraction": round(tracked / total, 4),
                "recipe": args.recipe,
                "overrides": args.overrides,
                "machine": machine(),
            }
        ]
    )


if __name__ == "__main__":
    main()
