"""Which frozen features make the best linear probe on real small image sets: EfficientNet-Lite0
at the CPU recipe's 192 px and at its native 224 px, and Lite0/1/2 side by side at their native
sizes (`efficientnet-lite-trio`), one view (the image) or two (and its mirror, as rows), each
fed to a scaled logistic regression whose C 5-fold CV on the dev part chooses
(`cv_data.fit_probe`); scored once on the set's untouched test part (macro-F1).

This chose the small-data candidates of the CPU image recipe
(pipeline/tasks/recipes/image_classification/candidates/cpu.toml).

Usage: python benchmarks/bench_probes.py [--sets stamps digits-small fashion-small]
Writes benchmarks/probes.json (each set's figures, the commit, the machine).
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

from benchmarks import cv_data  # noqa: E402
from benchmarks.bench_cv import commit  # noqa: E402
from benchmarks.bench_fetch import machine  # noqa: E402
from pipeline.core.files import write_json  # noqa: E402  (atomic)

FEATURES = [("efficientnet-lite0", 192), ("efficientnet-lite0", 224), ("efficientnet-lite-trio", 260)]


def pooled_model(name: str, size: int):
    """The backbone as petals builds it (its preprocessing, ImageNet weights), pooled."""
    import keras

    from pipeline.networks import registry
    from pipeline.networks.backbone import build_backbone, preprocessing_layers, resolve_weights

    backbone = registry.get_backbone(name)
    inputs = keras.Input((size, size, 3))
    x = inputs
    for layer in preprocessing_layers(backbone.preprocess):
        x = layer(x)
    body = build_backbone(backbone, size, resolve_weights(backbone, "imagenet"))
    body.name = "backbone"  # as the classifier names it: its layers are found by name inside
    out = body(x, training=False)
    if len(out.shape) == 4:
        out = keras.layers.GlobalAveragePooling2D()(out)
    return keras.Model(inputs, out)


def features(model, images: list[np.ndarray], size: int, mirror: bool = False) -> np.ndarray:
    out = []
    for start in range(0, len(images), 32):
        batch = np.stack([cv_data.square(i, size) for i in images[start : start + 32]])
        out.append(np.asarray(model.predict_on_batch(batch[:, :, ::-1] if mirror else batch)))
    return np.concatenate(out).astype(np.float32)


def run_set(name: str) -> dict:
    from sklearn.metrics import f1_score

    data = cv_data.load(name)
    (dev, labels), (test, truth) = data.dev, data.test
    found = {"classes": len(data.classes), "dev": len(labels), "test": len(truth)}
    for backbone, size in FEATURES:
        started = time.perf_counter()
        model = pooled_model(backbone, size)
        own, mirrored, held = (
            features(model, dev, size),
            features(model, dev, size, True),
            features(model, test, size),
        )
        seconds = time.perf_counter() - started
        one, c1 = cv_data.fit_probe(own, labels, held)
        two, c2 = cv_data.fit_probe(np.concatenate([own, mirrored]), np.concatenate([labels, labels]), held)
        found[f"{backbone}@{size}"] = {
            "one_view": round(float(f1_score(truth, one.argmax(1), average="macro")), 4),
            "two_views": round(float(f1_score(truth, two.argmax(1), average="macro")), 4),
            "c_one": c1,
            "c_two": c2,
            "feature_seconds": round(seconds, 1),
        }
        print(f"  {name} {backbone}@{size}: {found[f'{backbone}@{size}']}", flush=True)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sets", nargs="+", default=["stamps", "digits-small", "fashion-small"], choices=cv_data.SETS
    )
    args = parser.parse_args()
    path = REPO / "benchmarks" / "probes.json"
    results = json.loads(path.read_text())["sets"] if path.is_file() else {}
    for name in args.sets:
        results[name] = {**run_set(name), "commit": commit()}
        write_json(path, {"machine": machine(), "sets": results})


if __name__ == "__main__":
    main()
