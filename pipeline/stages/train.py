"""Train stage: a recipe, under the strategy this machine calls for, into a resumable run directory.

`runs/<run-id>/` holds the resolved config, the data manifest, the git commit, `history.csv`
(one row per epoch: learning rate, loss, accuracy, val macro-F1, seconds, images/s), the best
and last weights, `curves.png` and `metrics.json`. A checkpoint (weights, optimizer, epoch)
is written after every epoch, to the run dir or a `gs://` path: rerunning the same command
after an interruption, even `kill -9`, resumes from the last completed epoch. Nothing is
written before the config, the data and the model have all been checked.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.core import config as config_module
from pipeline.core.config import Config
from pipeline.core.errors import PetalsError
from pipeline.core.files import pyplot, save_figure, write_json

log = logging.getLogger(__name__)

AUTO_RECIPES = {"TPU": "tpu", "GPU": "gpu", "CPU": "cpu"}  # by what the replicas run on
METRICS = "metrics.json"


def add_run_arguments(parser: argparse.ArgumentParser, run_help: str) -> None:
    """--data-dir, --runs-dir, --run and --strategy: how the stages that work on a run find it."""
    parser.add_argument("--data-dir", type=Path, default=Path("data"), help="fetched data dir")
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"), help="where run directories are")
    parser.add_argument("--run", dest="run_id", default=None, help=run_help)
    parser.add_argument("--strategy", default="auto", help="auto | tpu | mirrored | multi-worker | gpu | cpu")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser, "run id (default: recipe, backbone, size and a config hash)")
    parser.add_argument(
        "--checkpoint-dir", default=None, help="checkpoints elsewhere, e.g. gs://bucket/petals"
    )
    parser.add_argument(
        "--tpu", default=None, help="TPU name or address (default: discovered; 'local' on TPU VMs)"
    )
    parser.add_argument("--cpu-replicas", type=int, default=0, help="split the CPU into N logical replicas")
    parser.add_argument("--force", action="store_true", help="train again over a finished run")
    parser.add_argument("--list-backbones", action="store_true", help="list the backbone registry and exit")
    config_module.add_config_arguments(parser)


def run(args: argparse.Namespace) -> None:
    if args.list_backbones:
        from pipeline.modeling.registry import BACKBONES

        print("\n".join(b.describe() for b in BACKBONES.values()))
        return
    from pipeline.core.strategy import pick_strategy

    picked = pick_strategy(args.strategy, args.tpu, args.cpu_replicas)
    log.info("strategy: %s (%s), %d replica(s)", picked.kind, picked.reason, picked.replicas)
    recipe = resolve_recipe(args.recipe, picked.device)
    config = config_module.load_config(recipe, args.overrides)
    job = prepare(config, picked, args.data_dir, args.runs_dir, args.run_id, args.checkpoint_dir)
    if job.finished and not args.force:
        log.info(
            "train: %s is finished (val macro-F1 %s); --force to train again",
            job.run_dir,
            job.finished.get("val_macro_f1"),
        )
        return
    metrics = fit(job, verbose=0 if args.quiet else 1, restart=args.force)
    log.info(
        "train: %s: val macro-F1 %.4f, accuracy %.4f, %.0f s, %.0f img/s",
        job.run_dir,
        metrics["val_macro_f1"],
        metrics["val_accuracy"],
        metrics["train_seconds"],
        metrics["images_per_second"],
    )


def resolve_recipe(recipe: str, device: str) -> str:
    """`auto` -> the recipe for this accelerator (tpu, gpu or cpu)."""
    return AUTO_RECIPES[device] if recipe == "auto" else recipe


# ----------------------------------------------------------------------------- the job


@dataclass
class Job:
    """Everything checked and built before anything is written."""

    config: Config
    picked: Any  # strategy.Picked
    spec: Any  # CompetitionSpec
    manifest: dict
    train_files: list[str]
    val_files: list[str]
    train_images: int
    val_images: int
    global_batch: int
    run_dir: Path
    checkpoint_dir: str
    finished: dict | None  # a finished run's metrics


def held_out(files: list[str], folds: int, fold: int) -> tuple[list[str], list[str]]:
    """Shard-level k-fold: fold `fold` holds out every `folds`-th shard."""
    held = [f for i, f in enumerate(files) if i % folds == fold]
    return [f for f in files if f not in held], held


def run_id(config: Config, fingerprint: str) -> str:
    """Same config and data -> same id, so rerunning a command finds (and resumes) its run."""
    from pipeline.data.datasets import input_size

    digest = hashlib.sha256(json.dumps([config.to_dict(), fingerprint], sort_keys=True).encode()).hexdigest()
    return f"{config.recipe}-{config.model.backbone}-{input_size(config)}-{digest[:8]}"


def prepare(
    config: Config, picked, data_dir: Path, runs_dir: Path, name: str | None, checkpoint_dir: str | None
) -> Job:
    """Check the config against the data and the replicas; nothing is written here."""
    from competition import load_spec
    from pipeline.data import datasets, records
    from pipeline.modeling import registry
    from pipeline.stages.fetch import locate_data, read_manifest

    spec = load_spec(config.competition)
    root = locate_data(data_dir)
    manifest = read_manifest(data_dir)
    size = config.data.image_size
    train_files = datasets.shard_files(root, spec, size, "train")
    val_files = datasets.shard_files(root, spec, size, "val")
    train = config.train
    if train.merge_val:
        train_files, val_files = train_files + val_files, []
    elif train.folds:
        train_files, val_files = held_out(train_files + val_files, train.folds, train.fold)
    registry.get_backbone(config.model.backbone)  # an unknown name fails here, before any work
    global_batch = datasets.global_batch_size(config.data.batch_size, picked.replicas)
    train_images = records.count_images(train_files)
    if global_batch > train_images:
        raise PetalsError(
            f"batch {config.data.batch_size} per replica x {picked.replicas} replicas = {global_batch} "
            f"is more than the {train_images} training images; lower data.batch_size"
        )
    run_dir = runs_dir / (name or run_id(config, manifest.get("fingerprint", "")))
    finished = json.loads((run_dir / METRICS).read_text()) if (run_dir / METRICS).is_file() else None
    return Job(
        config=config,
        picked=picked,
        spec=spec,
        manifest=manifest,
        train_files=train_files,
        val_files=val_files,
        train_images=train_images,
        val_images=records.count_images(val_files) if val_files else 0,
        global_batch=global_batch,
        run_dir=run_dir,
        checkpoint_dir=checkpoint_dir or str(run_dir / "checkpoints"),
        finished=finished,
    )


# ----------------------------------------------------------------------------- outputs


def git_commit() -> str:
    """The checkout's commit, `+dirty` when it has uncommitted changes, or `unknown` outside git."""

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", *args], capture_output=True, text=True, check=True, cwd=Path(__file__).parent
        )
        return done.stdout.strip()

    try:
        return git("rev-parse", "HEAD") + ("+dirty" if git("status", "--porcelain") else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def plot_curves(history, path: Path) -> None:
    plt = pyplot()

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    left.plot(history["epoch"], history["loss"], label="train loss")
    if "val_loss" in history:
        left.plot(history["epoch"], history["val_loss"], label="val loss")
    left.set_xlabel("epoch")
    left.legend()
    right.plot(history["epoch"], history["accuracy"], label="train accuracy")
    for column in ("val_accuracy", "val_macro_f1"):
        if column in history:
            right.plot(history["epoch"], history[column], label=column.replace("_", " "))
    right.set_xlabel("epoch")
    right.set_ylim(0, 1)
    right.legend()
    fig.tight_layout()
    save_figure(fig, path, dpi=80)


# ----------------------------------------------------------------------------- training


def fit(job: Job, verbose: int = 1, restart: bool = False) -> dict:
    """Train the job's recipe to its last epoch, resuming from the last checkpoint; return its metrics."""
    from pipeline.modeling import loops

    config = job.config
    trainer = loops.Trainer(job, verbose=verbose, restart=restart)
    trainer.build()  # weights downloaded or loaded: a failure here leaves no run dir behind
    job.run_dir.mkdir(parents=True, exist_ok=True)
    write_json(job.run_dir / "config.json", config.to_dict())
    write_json(job.run_dir / "data_manifest.json", job.manifest)
    write_json(
        job.run_dir / "run.json",
        {
            "git_commit": git_commit(),
            "strategy": job.picked.kind,
            "strategy_reason": job.picked.reason,
            "replicas": job.picked.replicas,
            "global_batch": job.global_batch,
            "train_images": job.train_images,
            "val_images": job.val_images,
            "precision": trainer.precision,
            "jit_compile": trainer.jit_compile,
            "steps_per_execution": trainer.steps_per_execution,
        },
    )
    if restart:
        (job.run_dir / METRICS).unlink(missing_ok=True)
    history = trainer.run()
    plot_curves(history, job.run_dir / "curves.png")
    best = history.loc[history["val_macro_f1"].idxmax()] if job.val_files else history.iloc[-1]
    seconds = float(history["seconds"].sum())
    metrics = {
        "val_macro_f1": float(best.get("val_macro_f1", float("nan"))),
        "val_accuracy": float(best.get("val_accuracy", float("nan"))),
        "best_epoch": int(best["epoch"]),
        "first_epoch_val_macro_f1": float(history["val_macro_f1"].iloc[0]) if job.val_files else None,
        "epochs": int(history["epoch"].max()),
        "train_seconds": seconds,
        "images_per_second": float(np.sum(history["images"]) / seconds) if seconds else 0.0,
        "epoch_seconds": [round(float(s), 2) for s in history["seconds"]],
        "recipe": config.recipe,
        "backbone": config.model.backbone,
        "image_size": trainer.size,
        "strategy": job.picked.kind,
        "replicas": job.picked.replicas,
        "global_batch": job.global_batch,
        "loop": config.train.loop,
    }
    write_json(job.run_dir / METRICS, metrics)
    return metrics
