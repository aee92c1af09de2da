"""Train stage: a recipe, under the strategy this machine calls for, into a resumable run directory.

`runs/<run-id>/` holds the resolved config, the data manifest, the git commit, `history.csv`
(one row per epoch: learning rate, loss, accuracy, the val metric, seconds, examples/s), the best
and last weights, `curves.png` and `metrics.json`. A checkpoint (weights, optimizer, epoch)
is written after every epoch, to the run dir or a `gs://` path: rerunning the same command
after an interruption, even `kill -9`, resumes from the last completed epoch. Nothing is
written before the config, the data and the model have all been checked.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.core import options, rundir
from pipeline.core.config import Config
from pipeline.core.errors import PetalsError
from pipeline.core.files import plain_text, pyplot, save_figure
from pipeline.core.git import git_commit
from pipeline.core.hosts import preemption_sync_jax
from pipeline.core.machine import built_with, cpu_name
from pipeline.core.options import TrainOptions
from pipeline.core.paths import check_name
from pipeline.core.rundir import RunDir
from pipeline.stages import arguments
from pipeline.tasks import recipe_config
from pipeline.tasks.competitions import Competition, size_of

log = logging.getLogger(__name__)
SCRATCH = "petals-process-"  # a scratch run dir's folder, in /tmp: a process other than 0 writes there


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from pipeline.core import device

    arguments.add_data_dir(parser)
    arguments.add_runs_dir(parser)
    parser.add_argument(
        "--run",
        dest="run_id",
        default=None,
        help="run id (default: recipe, backbone, size and a config hash)",
    )
    parser.add_argument(
        "--checkpoint-dir", default=None, help="checkpoints elsewhere, e.g. gs://bucket/petals"
    )
    device.add_arguments(parser)
    parser.add_argument("--force", action="store_true", help="train again over a finished run")
    parser.add_argument(
        "--time-limit",
        type=float,
        default=None,
        help="seconds: stop with a checkpoint at the step reached once this much time has passed "
        "(a kernel's session limit, less what must follow training); the rerun resumes",
    )
    parser.add_argument(
        "--keep-checkpoints",
        type=int,
        default=TrainOptions.keep_checkpoints,
        help="checkpoints kept; resume falls back to an older one",
    )
    parser.add_argument(
        "--list-backbones", action="store_true", help="list the network registry (images, texts) and exit"
    )
    arguments.add_track(parser)
    recipe_config.add_config_arguments(parser)


def run(args: argparse.Namespace, competition: Competition | None = None) -> None:
    if args.list_backbones:
        from pipeline import networks

        print("\n".join(networks.describe_all()))
        return
    train(options.from_args(TrainOptions, args, progress=not args.quiet), competition=competition)


def train(opts: TrainOptions, judge=None, tags: dict | None = None,
          competition: Competition | None = None) -> dict | None:  # fmt: skip
    """Train the run `opts` names (or resume it) on `competition` (the config's; None: resolved here);
    its metrics (and its name, `run`), or None when it was finished before. `tags` (a sweep's study and
    trial) join the run's own in its tracking. `judge(epoch, row)`, a sweep's trial, sees each epoch's
    history row and may stop the run there (a reason in words); it gets a finished run's metrics."""
    from pipeline.core import device

    platform = device.pick_from_args(opts)  # before Keras is imported: it fixes the backend
    config = recipe_config.config_from_args(opts, platform.device)
    log.info("device: %s", platform.describe(device.pick_precision(platform, config.train.precision)))
    job = prepare(config, platform, opts.data_dir, opts.runs_dir, opts.run_id, opts.checkpoint_dir,
                  competition)  # fmt: skip
    job.tags, job.track = {**job.tags, **(tags or {})}, opts.track
    if job.finished and not opts.force:
        log.info("train: %s is finished (val %s %s); --force to train again",
                 job.run, job.spec.metric.title, job.finished.get(job.spec.score_key))  # fmt: skip
        _drop_feature_cache(job.run)
        return {**job.finished, "run": job.run.name} if judge is not None else None
    from pipeline.modeling import preemption

    agreed = preemption_sync_jax(platform.hosts) if platform.backend == "jax" else None
    with preemption.watching(preemption.StopRequest(opts.time_limit, agreed=agreed, judge=judge)) as stop:
        metrics = fit(job, progress=opts.progress, restart=opts.force, stop=stop,
                      keep_checkpoints=opts.keep_checkpoints)  # fmt: skip
    metric = job.spec.metric
    title = job.task.metric_title(job.spec)  # what the loops report beside the loss: accuracy, RMSE
    accuracy = "" if metric.name == title else f", {title} {metrics['val_accuracy']:.4f}"
    if job.val is not None and metrics["best_epoch"] != metrics["epochs"]:  # a choice on these rows
        accuracy += f" at epoch {metrics['best_epoch']}, chosen on these rows (evaluate scores the choice)"
    log.info(
        "train: %s: val %s %.4f%s, %.0f s, %.0f examples/s",
        job.run,
        metric.title,
        metrics[job.spec.score_key],
        accuracy,
        metrics["train_seconds"],
        metrics["images_per_second"],
    )
    return {**metrics, "run": job.run.name}


# ----------------------------------------------------------------------------- the job


@dataclass
class Job:
    """Everything checked and built before anything is written."""

    config: Config
    platform: Any  # device.Platform
    spec: Any  # CompetitionSpec
    task: Any  # its task (pipeline/tasks/): what the trainer asks about the data, by the spec's name
    manifest: dict
    train: Any  # splits.Split
    val: Any  # splits.Split, or None with train.merge_val
    global_batch: int
    run: RunDir
    checkpoint_dir: str
    finished: dict | None  # a finished run's metrics
    pseudo: Any = None  # cv.pseudo.PseudoLabels the training part holds besides its fold, if any
    fold_table: str | None = None  # a fold run's table (its digest): which examples its val part held
    # ids -> their groups, for splits inside the training part (the probe's inner CV); None: ungrouped
    groups_of: Any = None
    tags: dict = field(default_factory=dict)  # its CV group and fold, a sweep's study and trial
    track: str = TrainOptions.track  # where it is tracked besides its TensorBoard events
    tracker: Any = None  # pipeline.runs.tracking.Tracker while `fit` trains it (process 0)

    @property
    def run_dir(self) -> Path:
        return self.run.path

    @property
    def train_images(self) -> int:
        return self.train.count

    @property
    def val_images(self) -> int:
        return self.val.count if self.val is not None else 0


def prepare(config: Config, platform, data_dir: Path, runs_dir: Path, name: str | None,
            checkpoint_dir: str | None, competition: Competition | None = None) -> Job:  # fmt: skip
    """Check the config (on `competition`, else its own) against the data, replicas, backend; no writes."""
    from pipeline.cv.group import fold_tags
    from pipeline.data import augment, datasets, groups, splits
    from pipeline.data.manifest import locate_data, read_manifest
    from pipeline.modeling import probe
    from pipeline.tasks.competitions import check_network, load_competition

    competition = competition or load_competition(config.competition)
    spec = competition.spec
    check_network(config, spec, platform.backend)  # before any work
    probe.check(config, competition.task)
    if platform.kind == "multi-worker" and config.train.loop == "fit":
        # Keras 3's fit hands the strategy's per-replica batches to ops that want one tensor
        # ("Attempt to convert a value (PerReplica...)"); the custom loop runs them itself.
        raise PetalsError(
            "train.loop=fit: Keras 3's fit does not train under MultiWorkerMirroredStrategy "
            "(keras-team/keras#20585); --set train.loop=custom"
        )
    root = locate_data(data_dir)
    manifest = read_manifest(data_dir)
    table = splits.fold_table(data_dir, spec, config)
    train, val = splits.train_and_val(root, spec, config, table)
    pseudo = None
    if config.train.pseudo_labels:  # the teacher's same fold: training part only, never val
        from pipeline.cv import pseudo as pseudo_labels

        pseudo = pseudo_labels.for_fold(runs_dir, config, table, manifest or {}, train.count)
        train = pseudo_labels.attached(train, pseudo, root, spec, config)
    augment.placement(config.augment.where, platform.backend, platform.device)
    global_batch = datasets.global_batch_size(config.data.batch_size, platform.replicas)
    if global_batch > train.count:
        raise PetalsError(
            f"batch {config.data.batch_size} per replica x {platform.replicas} replicas = {global_batch} "
            f"is more than the {train.count} training examples; lower data.batch_size"
        )
    # A run id given by hand is a folder name under runs_dir, never a way out of it.
    name = (
        check_name(name, "run id", "--run (RUN=)")
        if name
        else rundir.run_id(config, rundir.data_identity(manifest), size_of(config, competition))
    )
    run = RunDir(runs_dir / name)
    shared, run = run, _own_run_dir(run, platform.hosts)
    return Job(
        config=config,
        platform=platform,
        spec=spec,
        task=competition.task,
        manifest=manifest,
        train=train,
        val=val,
        global_batch=global_batch,
        run=run,
        checkpoint_dir=checkpoint_dir or shared.checkpoints,
        finished=shared.metrics() if shared.finished else None,
        pseudo=pseudo,
        fold_table=table.digest if table is not None else None,
        groups_of=functools.partial(groups.training_groups, root, spec) if spec.grouped else None,
        tags=fold_tags(config, rundir.data_identity(manifest)) if config.train.folds else {},
    )


def _own_run_dir(run: RunDir, hosts) -> RunDir:
    """Where this process writes: the run dir for process 0, the only writer; a scratch copy of it
    for the others, which read the writer's checkpoints (one folder on this machine; on a slice's
    hosts, `--checkpoint-dir gs://...`) and agree with it on the run id and the epoch."""
    if not hosts.several or hosts.writer:
        return run
    return RunDir(Path(tempfile.gettempdir()) / f"{SCRATCH}{hosts.index}-{os.getpid()}" / run.name)


# ----------------------------------------------------------------------------- outputs


@plain_text
def curves_figure(history, score_key: str = "val_macro_f1", accuracy: str = "accuracy"):
    """Loss on the left, accuracy and the metric on the right; val is drawn where it was scored
    (every `train.val_every`-th epoch), its points joined, not broken by the epochs between."""
    plt = pyplot()

    def draw(axes, column: str, label: str, **style) -> None:
        if column in history:
            scored = history.dropna(subset=[column])
            axes.plot(scored["epoch"], scored[column], label=label, **style)

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    val = {"marker": "o", "markersize": 4}
    draw(left, "loss", "train loss")
    draw(left, "val_loss", "val loss", **val)
    left.set_xlabel("epoch")
    left.legend()
    draw(right, "accuracy", f"train {accuracy}")  # the task's training metric: a regression's RMSE
    for column in dict.fromkeys(("val_accuracy", score_key)):
        draw(right, column, column.replace("_", " ").replace("accuracy", accuracy), **val)
    right.set_xlabel("epoch")
    right.set_ylim(bottom=0)  # log loss may pass 1
    right.legend()
    fig.tight_layout()
    return fig


def plot_curves(history, path: Path, score_key: str = "val_macro_f1", accuracy: str = "accuracy") -> None:
    save_figure(curves_figure(history, score_key, accuracy), path, dpi=80)


# ----------------------------------------------------------------------------- training


def fit(
    job: Job,
    progress: bool = True,
    restart: bool = False,
    stop=None,
    keep_checkpoints: int = TrainOptions.keep_checkpoints,
) -> dict:
    """Train the job's recipe to its last epoch, resuming from the last checkpoint; return its metrics.
    `stop` (a preemption.StopRequest) ends it early, with a checkpoint at the step reached."""
    try:
        with job.run.writing():  # a second `train` of the run is refused
            return _fit(job, progress, restart, stop, keep_checkpoints)
    except BaseException as err:  # in MLflow too, a run that stopped or failed is no longer RUNNING
        if job.tracker is not None:
            job.tracker.stopped(err)
        raise
    finally:
        if job.run.path.parent.name.startswith(SCRATCH):  # process 0 kept what matters
            shutil.rmtree(job.run.path.parent, ignore_errors=True)


def _drop_feature_cache(run: RunDir) -> None:
    """A kill after metrics.json, while the feature cache was being removed, left it for good (the
    run is finished, so nothing trains it again): its rerun removes it, unless another writer holds it.
    The modeling module (Keras, seconds to import) is imported only when there is a cache to remove."""
    if (run.path / RunDir.FEATURES).is_dir():
        from pipeline.modeling import features

        with contextlib.suppress(PetalsError), run.writing():
            features.remove_cache(run.path)


def _fit(job: Job, progress: bool, restart: bool, stop, keep_checkpoints: int) -> dict:
    from pipeline import networks
    from pipeline.modeling.trainer import Trainer
    from pipeline.runs.tracking import Tracker

    config, run, platform = job.config, job.run, job.platform
    trainer = Trainer(job, progress=progress, restart=restart, stop=stop, keep_checkpoints=keep_checkpoints)
    trainer.build()  # weights downloaded or loaded: a failure here leaves no run behind
    run.write_json(RunDir.CONFIG, config.to_dict())
    run.write_json(RunDir.DATA_MANIFEST, job.manifest)
    if job.pseudo is not None:
        from pipeline.cv.pseudo import write_csv

        write_csv(run.file(RunDir.PSEUDO_LABELS), job.pseudo)
    run.write_json(
        RunDir.RUN_INFO,
        {
            "git_commit": git_commit(),
            "backend": platform.backend,
            "device": platform.device,
            "devices": platform.devices,
            "strategy": platform.kind,
            "strategy_reason": platform.reason,
            "replicas": platform.replicas,
            "global_batch": job.global_batch,
            "train_images": job.train_images,
            "val_images": job.val_images,
            "precision": trainer.precision,
            "jit_compile": trainer.jit_compile,
            "steps_per_execution": trainer.steps_per_execution,
            "augment_where": trainer.data_config.augment.where,
            "fold_table": job.fold_table,
            # Where its numbers were computed: another CPU or library moves a fine-tune as a seed does.
            "cpu": cpu_name(),
            "built_with": built_with(platform.backend),
        },
    )
    if trainer.text_inputs is not None:
        trainer.text_inputs.save(run.path)
    networks.keep_architecture(config, trainer.net, run.path)
    if restart:
        run.metrics_file.unlink(missing_ok=True)
    if platform.hosts.writer:  # the others' run dirs are scratch
        job.tracker = Tracker(
            run, job.spec.name, config.to_dict(), job.tags, job.track, new=restart or not trainer.start
        )
    with contextlib.ExitStack() as reading:  # a data file gone mid-run is named in one line
        for split in (job.train, job.val):
            if split is not None:
                reading.enter_context(split.naming_bad(labeled=True))
        history = trainer.run_epochs()
    plot_curves(history, run.file(RunDir.CURVES), job.spec.score_key, job.task.metric_title(job.spec))
    key, metric = job.spec.score_key, job.spec.metric
    if job.val is None or trainer.keeps_latest:  # a CV fold: its latest scored epoch's weights
        best = history.iloc[-1] if job.val is None else history.dropna(subset=[key]).iloc[-1]
    else:
        best = history.loc[history[key].idxmax() if metric.greater_is_better else history[key].idxmin()]
    seconds = float(history["seconds"].sum())
    metrics = {
        "metric": metric.name,
        key: float(best.get(key, float("nan"))),
        "val_accuracy": float(best.get("val_accuracy", float("nan"))),
        "best_epoch": int(best["epoch"]),
        f"first_epoch_{key}": float(history[key].iloc[0]) if job.val is not None else None,
        "epochs": int(history["epoch"].max()),
        "train_seconds": seconds,
        "images_per_second": float(np.sum(history["images"]) / seconds) if seconds else 0.0,
        "epoch_seconds": [round(float(s), 2) for s in history["seconds"]],
        "recipe": config.recipe,
        "backbone": config.model.backbone,
        **job.task.summary_sizes(config, trainer.size),
        "backend": platform.backend,
        "strategy": platform.kind,
        "replicas": platform.replicas,
        "global_batch": job.global_batch,
        "loop": config.train.loop,
    }
    run.write_json(RunDir.METRICS, metrics)  # last: its presence means the run is finished
    if job.tracker is not None:
        job.tracker.trained(metrics)
    if config.train.feature_cache:
        from pipeline.modeling import features

        features.remove_cache(run.path)
    return metrics
