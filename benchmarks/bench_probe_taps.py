"""Does the small image sets' probe read more from the trio than its last layer? Each Lite's
pooled head (`efficientnet-lite-trio`, the probe's trio until 2026-11-30) against the same with two
earlier taps beside it (`efficientnet-lite-trio-taps`, `efficientnet_lite.taps`): the last block's
projection (before the 1x1 head convolution) and the last block at 1/16 of the input, each
average-pooled. Both arms are read off one network, the registry's tapped entry: the head arm is its
head columns.

Images are read as petals reads the competition bench-realdata writes (`bench_probe_splits`: each
at its own size, decoded and resized to 260 px), two views (the image and its mirror) as rows,
petals' own fit (`pipeline.modeling.probe.fit`: standardised, C by an inner CV over whole
examples), scored on each split's test part once (bench-realdata's seeds, whole groups).

Usage: python benchmarks/bench_probe_taps.py [--sets stamps icons] [--splits 8]
Prints one line a split and a set, and writes benchmarks/probe_taps.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks import realdata, realdata_gaps  # noqa: E402
from benchmarks.bench_cv import commit  # noqa: E402
from benchmarks.bench_fetch import machine  # noqa: E402
from benchmarks.bench_probe_splits import TRIO, as_petals_reads, difference, splits_of  # noqa: E402
from benchmarks.bench_probes import pooled_model  # noqa: E402
from pipeline.core.files import write_json  # noqa: E402  (atomic)

ARMS = {"head": ("head",), "head+taps": ("head", "projection", "stride16")}


TAPPED = "efficientnet-lite-trio-taps"


def tap_columns(model) -> dict[str, np.ndarray]:
    """{tap: the columns of the tapped trio's features it fills}, read off the model's own pooling
    layers (`{variant}_{tap}_pool`, joined in the order the trio builds them)."""
    from pipeline.networks import efficientnet_lite

    columns: dict[str, list] = {}
    at = 0
    for variant in efficientnet_lite.TRIO:
        for tap in ARMS["head+taps"]:
            width = model.get_layer("backbone").get_layer(f"{variant}_{tap}_pool").output.shape[-1]
            columns.setdefault(tap, []).append(np.arange(at, at + width))
            at += width
    return {tap: np.concatenate(parts) for tap, parts in columns.items()}


def trio_features(model, images: list[np.ndarray], mirror: bool) -> np.ndarray:
    found = []
    for start in range(0, len(images), 16):
        batch = np.stack(images[start : start + 16]).astype(np.float32)
        found.append(np.asarray(model.predict_on_batch(batch[:, :, ::-1] if mirror else batch)))
    return np.concatenate(found)


def run_set(name: str, count: int) -> dict:
    from pipeline.modeling import probe

    data = realdata.load(name, False)
    images = data.dev.items + data.test.items
    labels = np.concatenate([data.dev.labels, data.test.labels])
    groups = (
        np.concatenate([data.dev.groups, data.test.groups])
        if data.grouped
        else np.arange(len(labels)).astype(str)
    )
    started = time.perf_counter()
    model = pooled_model(TAPPED, TRIO[1])  # the registry's entry as petals builds it
    read = [as_petals_reads(image, TRIO[1], None) for image in images]
    both = np.stack([trio_features(model, read, False), trio_features(model, read, True)])
    columns = tap_columns(model)
    views = {
        arm: both[..., np.sort(np.concatenate([columns[t] for t in tapped]))] for arm, tapped in ARMS.items()
    }
    seconds = round(time.perf_counter() - started, 1)
    rows = []
    for seed, dev, test in splits_of(data, count):
        scored = {}
        for arm, found in views.items():
            fitted = probe.fit(found[:, dev], labels[dev], groups[dev], 0, "logistic", int(labels.max()) + 1)
            predicted = (found[0, test] @ fitted.weights + fitted.bias).argmax(axis=1)
            scored[arm] = realdata_gaps.test_score(
                labels[test], predicted, len(data.classes), groups[test] if data.grouped else None
            )["test_macro_f1"]
        rows.append({"seed": seed, "test": len(test), **scored})
        print(f"  {name} seed {seed}: {rows[-1]}", flush=True)
    return {
        "classes": len(data.classes),
        "images": len(labels),
        "widths": {arm: int(found.shape[-1]) for arm, found in views.items()},
        "splits": rows,
        "mean": {arm: round(float(np.mean([row[arm] for row in rows])), 4) for arm in ARMS},
        "head+taps - head": difference(rows, "head+taps", "head"),
        "feature_seconds": seconds,
        "commit": commit(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sets", nargs="+", default=["stamps", "icons"], choices=realdata.SETS)
    parser.add_argument("--splits", type=int, default=8)
    args = parser.parse_args()
    path = REPO / "benchmarks" / "probe_taps.json"
    results = json.loads(path.read_text())["sets"] if path.is_file() else {}
    for name in args.sets:
        results[name] = run_set(name, args.splits)
        found = results[name]["head+taps - head"]
        print(f"{name}: head+taps - head {found['mean']:+.4f} +- {found['se']:.4f} (se) over {args.splits} "
              f"splits; ahead on {found['ahead']}, behind on {found['behind']}", flush=True)  # fmt: skip
        write_json(path, {"machine": machine(), "sets": results})


if __name__ == "__main__":
    main()
