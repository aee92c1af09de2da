"""Benchmark the fetch stage on the embedded dataset: generation time, size on disk, counts.

Usage: python benchmarks/bench_fetch.py [--size 192] [--seed 0] [--scale N (default: synthetic.DEFAULT_SCALE)]
Writes its figures into benchmarks/latest.json (merged with other benchmarks' figures).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from competition import load_spec
from pipeline.core.files import write_json
from pipeline.data import synthetic
from pipeline.data.layout import fingerprint, verify_layout
from pipeline.data.records import ids_and_labels, list_shards
from pipeline.formats.records import records_of

LATEST = Path(__file__).resolve().parent / "latest.json"


def machine() -> str:
    """The machine a figure was measured on, its CPU named: one fine-tune moved 0.006-0.009 between
    CPUs at one commit and seed (pipeline/core/machine.py, `cpu_name`)."""
    from pipeline.core.machine import cpu_name

    named = cpu_name()
    cpus = f"{os.cpu_count()} CPUs" + (f" ({named})" if named else "")
    return f"{platform.machine()}, {cpus}, {platform.system()} {platform.release()}"


def record(figures: list[dict]) -> None:
    """Merge figures into latest.json by name, atomically."""
    current = json.loads(LATEST.read_text()) if LATEST.is_file() else {}
    current.update({f["name"]: f for f in figures})
    write_json(LATEST, current)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=192)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scale", type=float, default=synthetic.DEFAULT_SCALE)
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args()
    spec = load_spec()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "data"
        started = time.perf_counter()
        counts = synthetic.write_dataset(
            root, spec, size=args.size, seed=args.seed, scale=args.scale, workers=args.workers, progress=False
        )
        generated = time.perf_counter() - started
        verify_layout(str(root), spec)
        checked = time.perf_counter() - started - generated
        fingerprint(str(root), spec, [args.size])
        verified = time.perf_counter() - started - generated
        # What a fold table, CV or a choice reads first: every labelled record's id and label.
        labelled = [
            f
            for split in spec.splits
            if spec.is_labeled(split)
            for f in list_shards(str(root), spec, args.size, split)
        ]
        read = time.perf_counter()
        ids_and_labels(labelled, records_of(spec).schema)
        read = time.perf_counter() - read
        size_mib = sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / 2**20
        shutil.rmtree(root)
    settings = {
        "size": args.size,
        "seed": args.seed,
        "scale": args.scale,
        "workers": args.workers or min(os.cpu_count() or 1, 8),
        "machine": machine(),
    }
    total = sum(counts.values())
    figures = [
        {
            "name": "synthetic_generation_seconds",
            "value": round(generated, 1),
            "unit": "s",
            "settings": settings,
        },
        {
            "name": "synthetic_images_per_second",
            "value": round(total / generated, 1),
            "unit": "img/s",
            "settings": settings,
        },
        {
            "name": "synthetic_verify_fingerprint_seconds",
            "value": round(verified, 1),
            "unit": "s",
            "settings": settings,
        },
        {"name": "synthetic_verify_seconds", "value": round(checked, 2), "unit": "s", "settings": settings},
        {
            "name": "synthetic_ids_and_labels_seconds",
            "value": round(read, 3),
            "unit": "s",
            "settings": settings,
        },
        {"name": "synthetic_size_on_disk", "value": round(size_mib, 1), "unit": "MiB", "settings": settings},
    ] + [
        {"name": f"synthetic_{split}_images", "value": n, "unit": "images", "settings": settings}
        for split, n in counts.items()
    ]
    record(figures)
    print(f"{'figure':40} {'value':>10}  unit")
    for f in figures:
        print(f"{f['name']:40} {f['value']:>10}  {f['unit']}")
    print(f"settings: {settings}\nwritten to {LATEST}")


if __name__ == "__main__":
    main()
