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
    return f"{platform.machine()}, {os.cpu_count()} CPUs{cpu()}, {platform.system()} {platform.release()}"


def cpu(info: Path = Path("/proc/cpuinfo")) -> str:
    """` (<model>, with/without AVX-512)`, or nothing where the file is not there. One fine-tune
    scored 0.9075 on one session's CPU and 0.8986 on another's, same commit and seed: oneDNN picks
    its kernels, so its round-off, by instruction set (docs/BENCHMARKS.md), so a figure names it."""
    try:
        with info.open(errors="replace") as lines:
            head = lines.read(1 << 16)  # the first processor's block is enough
    except OSError:
        return ""
    fields = dict(line.split(":", 1) for line in head.split("\n\n")[0].splitlines() if ":" in line)
    fields = {key.strip(): value.strip() for key, value in fields.items()}
    avx512 = "with" if "avx512f" in fields.get("flags", "").split() else "without"
    return f" ({fields.get('model name', 'unknown model')[:80]}, {avx512} AVX-512)"


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
