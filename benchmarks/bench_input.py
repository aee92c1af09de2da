"""Benchmark the input pipeline: images/second and peak memory of four tf.data variants.

  decode-only   read + parse + decode + batch: the ceiling any pipeline on this host can reach
  petals        petals' training dataset, default recipe (augmentation placed on the device)
  petals-host   petals' training dataset with the same augmentation run on the host
  petals-host-starter-aug   the same, with the starter kernel's augmentation choices
  starter       the public starter-kernel approach: a per-image map with a per-image
                gather-based rotation/shear/zoom/shift and flip, deterministic read order
  cpu-recipe    petals' training dataset under the CPU recipe (its batch of 32, flips on the
                host, decoded images cached in memory), measured once a first pass has filled
                the cache: what feeds every epoch after the first of `make train` on a laptop

Each variant runs in its own process (so its peak RSS is its own) for `--seconds` after a
warm-up. Usage: python benchmarks/bench_input.py [--data-dir data] [--size 192] [--batch 128]
Writes the figures into benchmarks/latest.json (merged with other benchmarks' figures).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.bench_fetch import machine, record  # noqa: E402
from pipeline.formats.records import records_of  # noqa: E402

VARIANTS = ("decode-only", "petals", "petals-host", "petals-host-starter-aug", "starter", "cpu-recipe")
# The starter kernel's augmentation in petals' terms: flip and affine, nearest neighbour, no colour.
STARTER_AUGMENTATION = [
    "augment.brightness=0",
    "augment.contrast=0",
    "augment.saturation=0",
    "augment.interpolation=nearest",
    "augment.fill_mode=nearest",
]


# ----------------------------------------------------------------------------- the baseline


def starter_kernel_dataset(files, spec, size: int, batch: int):
    """The public starter kernels' training input, rebuilt here as the baseline to beat.

    Records read in file order, each image decoded and augmented alone: float32 in [0, 1],
    a random left-right flip, then a random affine map applied by computing every output
    pixel's source index and gathering it (nearest neighbour, edges clamped).
    """
    import tensorflow as tf

    from pipeline.data import records

    auto = tf.data.AUTOTUNE

    def read(serialized):
        image, label = records.read_record(serialized, records_of(spec).schema, size, labeled=True)
        return tf.cast(image, tf.float32) / 255.0, label

    def affine_matrix():
        deg = math.pi / 180.0
        rotation = 15.0 * deg * tf.random.normal([])
        shear = 5.0 * deg * tf.random.normal([])
        zoom_y, zoom_x = 1.0 + tf.random.normal([]) / 10.0, 1.0 + tf.random.normal([]) / 10.0
        shift_y, shift_x = 16.0 * tf.random.normal([]), 16.0 * tf.random.normal([])
        one, zero = tf.constant(1.0), tf.constant(0.0)
        rotate = tf.reshape(
            tf.stack(
                [
                    tf.cos(rotation),
                    tf.sin(rotation),
                    zero,
                    -tf.sin(rotation),
                    tf.cos(rotation),
                    zero,
                    zero,
                    zero,
                    one,
                ]
            ),
            [3, 3],
        )
        shearing = tf.reshape(
            tf.stack([one, tf.sin(shear), zero, zero, tf.cos(shear), zero, zero, zero, one]), [3, 3]
        )
        zooming = tf.reshape(
            tf.stack([one / zoom_y, zero, zero, zero, one / zoom_x, zero, zero, zero, one]), [3, 3]
        )
        shifting = tf.reshape(tf.stack([one, zero, shift_y, zero, one, shift_x, zero, zero, one]), [3, 3])
        return rotate @ shearing @ zooming @ shifting

    def augment(image, label):
        image = tf.image.random_flip_left_right(image)
        # Destination pixel coordinates, centred, mapped to their source by the matrix.
        half = size // 2
        x = tf.repeat(tf.range(half, -half, -1), size)
        y = tf.tile(tf.range(-half, half), [size])
        destination = tf.cast(tf.stack([x, y, tf.ones([size * size], tf.int32)]), tf.float32)
        source = tf.cast(tf.round(affine_matrix() @ destination), tf.int32)
        source = tf.clip_by_value(source, -half + 1, half)
        index = tf.stack([half - source[0], half - 1 + source[1]])
        pixels = tf.gather_nd(image, tf.transpose(index))
        return tf.reshape(pixels, [size, size, 3]), label

    dataset = tf.data.TFRecordDataset(files, num_parallel_reads=auto)  # deterministic order
    dataset = dataset.map(read, num_parallel_calls=auto).map(augment, num_parallel_calls=auto)
    return dataset.repeat().shuffle(2048).batch(batch, drop_remainder=True).prefetch(auto)


# ----------------------------------------------------------------------------- one variant


def build(variant: str, data_dir: Path, size: int, batch: int):
    from competition import load_spec
    from pipeline.data import datasets
    from pipeline.data.manifest import locate_data
    from pipeline.tasks.recipe_config import load_config

    spec = load_spec()
    files = datasets.shard_files(locate_data(data_dir), spec, size, "train")
    overrides = [f"data.image_size={size}"]
    if variant == "decode-only":
        examples = datasets.read_examples(files, spec, size, labeled=True, ordered=False)
        return examples.repeat().batch(batch, drop_remainder=True).prefetch(datasets.AUTOTUNE)
    if variant == "starter":
        return starter_kernel_dataset(files, spec, size, batch)
    if variant == "cpu-recipe":
        config = load_config("cpu", overrides)
        return datasets.train_dataset(files, spec, config, config.data.batch_size)
    overrides.append("augment.where=" + ("host" if variant.startswith("petals-host") else "device"))
    if variant == "petals-host-starter-aug":
        overrides += STARTER_AUGMENTATION
    return datasets.train_dataset(files, spec, load_config("default", overrides), batch)


def measure(variant: str, data_dir: Path, size: int, batch: int, seconds: float) -> dict:
    """Run one variant in this process: images/second after a warm-up, and peak RSS."""
    import tensorflow as tf  # noqa: F401  (imported before measuring the start-up footprint)

    startup_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    batches = iter(build(variant, data_dir, size, batch))
    warmup = 5  # tracing, thread pools, autotuning's first guesses
    if variant == "cpu-recipe":  # and a whole pass, which fills the cache
        from pipeline.data.manifest import read_manifest
        from pipeline.tasks.recipe_config import load_config

        train_images = read_manifest(data_dir)["sizes"][str(size)]["train"]["images"]
        warmup += math.ceil(train_images / load_config("cpu").data.batch_size)
    for _ in range(warmup):
        next(batches)
    images, started = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        image_batch, _ = next(batches)
        images += int(image_batch.shape[0])
    return {
        "variant": variant,
        "images_per_second": images / elapsed,
        "images": images,
        "seconds": elapsed,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "startup_rss_mib": startup_mib,
    }


# ----------------------------------------------------------------------------- the table


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path, default=REPO / "data")
    parser.add_argument("--size", type=int, default=192, help="record resolution to read")
    parser.add_argument(
        "--batch", type=int, default=128, help="global batch (a TPU v3-8's 16 x 8 by default)"
    )
    parser.add_argument("--seconds", type=float, default=20.0, help="measured time per variant")
    parser.add_argument("--variant", choices=VARIANTS, help="run one variant in this process and print JSON")
    args = parser.parse_args()
    if args.variant:
        print(json.dumps(measure(args.variant, args.data_dir, args.size, args.batch, args.seconds)))
        return

    results = {}
    for variant in VARIANTS:
        command = [sys.executable, __file__, "--variant", variant, "--data-dir", str(args.data_dir)]
        command += ["--size", str(args.size), "--batch", str(args.batch), "--seconds", str(args.seconds)]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            sys.exit(f"bench_input: {variant} failed:\n{done.stderr[-2000:]}")
        results[variant] = json.loads(done.stdout.strip().splitlines()[-1])

    ceiling, ours, host, host_same, starter = (
        results[v]["images_per_second"]
        for v in ("decode-only", "petals", "petals-host", "petals-host-starter-aug", "starter")
    )
    print(f"\ninput pipeline, {args.size} px, batch {args.batch}, {machine()}")
    print(f"{'variant':<26}{'images/s':>10}{'peak RSS MiB':>14}")
    for variant in VARIANTS:
        r = results[variant]
        print(f"{variant:<26}{r['images_per_second']:>10.0f}{r['peak_rss_mib']:>14.0f}")
    ratios = {
        "input_petals_over_decode_only": ours / ceiling,
        "input_petals_over_starter": ours / starter,
        "input_petals_host_over_decode_only": host / ceiling,
        "input_petals_host_over_starter": host / starter,
        "input_petals_host_starter_aug_over_starter": host_same / starter,
    }
    for name, value in ratios.items():
        print(f"{name:<44}{value:>6.2f}")

    settings = {"size": args.size, "batch": args.batch, "seconds": args.seconds, "machine": machine()}
    figures = []
    for variant, r in results.items():
        key = variant.replace("-", "_")
        figures.append(
            {
                "name": f"input_{key}_images_per_second",
                "value": round(r["images_per_second"], 1),
                "unit": "img/s",
                "settings": settings,
            }
        )
        figures.append(
            {
                "name": f"input_{key}_peak_rss",
                "value": round(r["peak_rss_mib"]),
                "unit": "MiB",
                "settings": settings,
            }
        )
    figures += [
        {"name": k, "value": round(v, 2), "unit": "ratio", "settings": settings} for k, v in ratios.items()
    ]
    record(figures)


if __name__ == "__main__":
    main()
