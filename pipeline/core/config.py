"""One typed configuration: frozen dataclasses, each default written once, checked on every
update (`--set section.key=value` overrides reject unknown keys and wrong types).

Precedence: the defaults below < the recipe < `--set` overrides; a recipe is found and applied by
pipeline/tasks/recipe_config.py (it needs the competition's folder and its task's recipes). The
resolved config is written beside every run's outputs (`Config.to_dict`) and read back here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.core.errors import PetalsError
from pipeline.core.overrides import apply_updates
from pipeline.core.paths import check_name

# The competition a command works on when none is named: the one place its name is written.
DEFAULT_COMPETITION = "flowers"
DEFAULT_RECIPE = "default"  # the plain defaults below, no recipe file
AUTO_RECIPE = "auto"  # the recipe for what the replicas run on (Platform.device):
AUTO_RECIPES = {"TPU": "tpu", "GPU": "gpu", "CPU": "cpu"}


@dataclass(frozen=True)
class DataConfig:
    """What the input pipeline reads and how it batches."""

    image_size: int = 192  # TFRecords to read (tfrecords-jpeg-<size>x<size>), or the square photos become
    input_size: int = 0  # resolution the model sees; 0 = image_size (else resized in the pipeline)
    # Texts: token ids per text (the start id included; longer texts are cut) and the vocabulary
    # adapted on the training texts, padding and unknown ids included.
    sequence_length: int = 256
    vocabulary_size: int = 20000
    batch_size: int = 16  # per replica; global batch = batch_size x replicas
    shuffle_buffer: int = 2048  # training examples shuffled in memory
    cache: bool = False  # keep decoded records in memory after the first epoch
    skip_bad_records: bool = False  # skip unreadable records (reported per file) instead of failing


@dataclass(frozen=True)
class AugmentConfig:
    """Training augmentation. Each one is off at 0 (or false); all are batch-level ops.

    `where`: `host` runs them in tf.data after batching; `device` runs them at the start of
    the train step on the accelerator (TensorFlow), so a host with few cores only reads, decodes
    and batches (uint8 batches also cross to the device at a quarter of float32's size); `auto`:
    the device for TensorFlow on an accelerator, else the host (the CPU, and JAX, whose jitted
    step runs no TensorFlow ops: `pipeline.data.augment.placement`).
    """

    where: str = "auto"  # auto | host | device
    flip: bool = True  # random left-right flip
    flip_vertical: bool = False  # random up-down flip
    # Colour, drawn uniformly per image: brightness shifts by up to +-brightness x 255,
    # contrast and saturation scale by 1 +- x, hue rotates by up to +-hue turns.
    brightness: float = 0.1
    contrast: float = 0.1
    saturation: float = 0.2
    hue: float = 0.0
    # One affine transform per image (normally distributed, the public kernels' recipe):
    # rotation and shear in degrees (std), zoom 1 +- N(0, zoom), shift in pixels at
    # image_size (std; scaled with the image).
    rotation: float = 15.0
    shear: float = 5.0
    zoom: float = 0.1
    shift: float = 16.0
    interpolation: str = "bilinear"  # bilinear | nearest
    fill_mode: str = "reflect"  # reflect | nearest | constant (black)
    # Occlusion, per image with this probability.
    erasing: float = 0.0  # random erasing: one rectangle of noise
    erasing_area: float = 0.25  # its largest share of the image
    gridmask: float = 0.0  # GridMask: a grid of dropped squares
    gridmask_ratio: float = 0.4  # share of each grid cell's side that is dropped
    # Batch mixing, per image with this probability; labels become soft (one-hot mixes).
    cutmix: float = 0.0
    mixup: float = 0.0
    mix_alpha: float = 1.0  # the mixing share is drawn from Beta(alpha, alpha)


# The augmentation keys that transform a training example, each on when true or > 0; a
# competition file says which of them keep an example's label (`[augment] keeps_label`).
TRANSFORMS = (
    "flip", "flip_vertical", "brightness", "contrast", "saturation", "hue",
    "rotation", "shear", "zoom", "shift", "erasing", "gridmask", "cutmix", "mixup",
)  # fmt: skip


@dataclass(frozen=True)
class ModelConfig:
    """The network, by its entry's name in `pipeline.networks.NETWORKS`: an image backbone
    (`registry.BACKBONES`) and its head, or a text network (`text_networks.NETWORKS`)."""

    backbone: str = "cnn"
    weights: str = "none"  # imagenet | noisy-student | none | a local weights file (offline kernels)
    dropout: float = 0.2  # before the classifier


@dataclass(frozen=True)
class TrainConfig:
    """The training policy and the speed settings (auto: chosen by the strategy)."""

    epochs: int = 12
    loop: str = "fit"  # fit (Keras) | custom (strategy.run)
    steps_per_epoch: int = 0  # 0: training images / global batch
    # At least this many steps an epoch: a small dataset is shown several times an epoch, so one
    # recipe's epochs train a few hundred photos as long as thousands (the LR still steps per epoch).
    min_steps_per_epoch: int = 1
    # ... and at most this many passes over the training examples: the floor above made an epoch of
    # 187 photos 34 passes, which memorised them in the first epoch. 0: no bound.
    max_passes_per_epoch: float = 0.0
    # Score val after every N-th epoch, the first and the last: each scoring predicts the whole
    # val split (on 2 CPU cores, 2 s of an 18 s epoch). The best weights are the best scored.
    val_every: int = 1
    # Learning rate per epoch: ramp linearly from lr_start to lr_max x replicas over
    # lr_ramp_epochs, hold lr_sustain_epochs, then decay exponentially (lr_decay) to lr_min.
    lr_start: float = 1e-5
    lr_max: float = 5e-5  # per replica
    lr_min: float = 1e-5
    lr_ramp_epochs: int = 5
    lr_sustain_epochs: int = 0
    lr_decay: float = 0.8
    label_smoothing: float = 0.0
    # Decoupled weight decay, as AdamW's: each step Keras's Adam shrinks every trainable weight that
    # is not a bias or a scale (ndim > 1) by weight_decay x the step's learning rate, apart from the
    # gradient's update. 0: none.
    weight_decay: float = 0.0
    # tau of the logit-adjusted loss (Menon et al., 2021): the loss sees the logits plus
    # tau x log(class frequency in the training shards), so the network learns scores that
    # do not favour the frequent classes; macro-F1 counts every class alike. 0: plain loss.
    logit_adjustment: float = 0.0
    # Momentum of an exponential moving average of the weights (Polyak averaging): the average is
    # what is scored every epoch and saved as the best and last weights. 0: no average.
    ema: float = 0.0
    frozen_epochs: int = 0  # first epochs train the head only, the backbone frozen
    freeze_batchnorm: bool = True  # when fine-tuning, BatchNorm keeps its statistics
    # Fine-tuning trains the backbone's last N layers after the frozen epochs (rounded up to a
    # block boundary); 0: all of it.
    unfrozen_layers: int = 0
    # Transfer on a CPU: the layers that never train (the whole backbone in the frozen epochs, or
    # the part below unfrozen_layers) run once per training example and view; their outputs are
    # cached in the run and the rest trains on them (pipeline/modeling/features.py). Views: the
    # example, its mirror (with augment.flip), then random views under the recipe's augmentation.
    feature_cache: bool = False
    feature_views: int = 2
    # Views past the first only where train holds at most this many examples (a CV group: every
    # labelled example of its fold table); a larger train set caches one view: each view costs a
    # forward pass of every image, and on real sets of 1,437 images and more the second one did not
    # raise the test score (benchmarks/bench_views.py). 0: views past the first at every size.
    feature_views_up_to: int = 0
    # How the head is fitted: "sgd" (the optimizer, epoch by epoch) or "logistic": once, by
    # scikit-learn's logistic regression on the cached features (one per label for several labels,
    # ridge regression for numbers: the target's `Task.probe`), the penalty by an inner CV over
    # whole examples and groups: the linear probe as a run (pipeline/modeling/probe.py; feature
    # cache on, one epoch, the backbone frozen).
    head_solver: str = "sgd"
    # Small data: where the labelled examples are at most this many, `make train` (evaluate,
    # predict) trains the recipe's candidates as K-fold CV groups and takes the one CV prefers,
    # as FOLDS=5 CHOOSE=1 (pipeline/cv/auto.py). 0: the recipe alone at every size.
    choose_up_to: int = 0
    merge_val: bool = False  # final run: train on train + val (no validation score)
    # K-fold cross-validation (pipeline/data/folds.py): the fold table deals every labelled
    # example (train + a labelled val) into `folds` stratified folds from `fold_seed`; this run
    # trains on the others and is scored on fold `fold`. 0: the competition's val split as it is.
    folds: int = 0
    fold: int = 0
    fold_seed: int = 0
    folds_keep_val: bool = False  # deal train only: a competition's val split stays out of training
    # Pseudo-labels (pipeline/cv/pseudo.py): a CV group's id under the runs dir ("" off); fold f
    # also trains on the test examples its fold-f run predicts with a top probability of at least
    # `pseudo_threshold`, at most `pseudo_max_share` of them per labelled training example.
    pseudo_labels: str = ""
    pseudo_threshold: float = 0.9
    pseudo_max_share: float = 1.0
    precision: str = "auto"  # auto | float32 | mixed_float16 | mixed_bfloat16
    jit_compile: str = "auto"  # auto | on | off
    steps_per_execution: int = 0  # 0: auto (1 on CPU, more on accelerators)


@dataclass(frozen=True)
class Config:
    recipe: str = DEFAULT_RECIPE
    competition: str = DEFAULT_COMPETITION
    seed: int = 0
    data: DataConfig = field(default_factory=DataConfig)
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


CHOICES: dict[str, tuple[str, ...]] = {
    "augment.where": ("auto", "host", "device"),
    "augment.interpolation": ("bilinear", "nearest"),
    "augment.fill_mode": ("reflect", "nearest", "constant"),
    "train.loop": ("fit", "custom"),
    "train.head_solver": ("sgd", "logistic"),
    "train.precision": ("auto", "float32", "mixed_float16", "mixed_bfloat16"),
    "train.jit_compile": ("auto", "on", "off"),
}


# Every value with a size meaning, bounded: (lowest, highest, why the highest). A recipe or `--set`
# past a bound is refused in `validate` before anything of that size is allocated
# (data.image_size=8192 took train past 6 GB in 53 s). Each highest is far above what a shipped
# recipe or test uses (in brackets) and within what one host's process can hold.
RANGES: dict[str, tuple[int, int, str]] = {
    # A 1024 px image is 12 MiB as float32; Kaggle's TFRecords stop at 512 px (shipped: 32-512).
    "data.image_size": (1, 1024, "twice Kaggle's largest TFRecords"),
    "data.input_size": (0, 1024, "as data.image_size"),
    # BERT reads 512 tokens and its positions stop there (shipped: 64-1024).
    "data.sequence_length": (2, 4096, "8 x BERT's 512 positions"),
    # BERT's WordPiece holds 30k, GPT-2's 50k; 500k x 128 floats is a 256 MB embedding (shipped: 300-20k).
    "data.vocabulary_size": (3, 500_000, "10 x GPT-2's vocabulary"),
    # Per replica; the public kernels use 16-128 (shipped: 8-64). See also BATCH_BYTES.
    "data.batch_size": (1, 4096, "32 x the public kernels' largest"),
    # Decoded images held for shuffling: 2,048 (the default) at 512 px is 1.6 GB already.
    "data.shuffle_buffer": (1, 65536, "32 x the default"),
    # Time, not memory, but each epoch keeps a history line and a schedule entry (shipped: 2-20).
    "train.epochs": (1, 1000, "50 x the longest shipped recipe"),
    "train.steps_per_epoch": (0, 1_000_000, "an epoch of 10**6 steps is days"),
    "train.min_steps_per_epoch": (0, 1_000_000, "as train.steps_per_epoch"),
    "train.max_passes_per_epoch": (0, 1_000, "an epoch of a thousand passes is no epoch"),
    # Decoupled: a weight shrinks by weight_decay x lr a step, so the bound keeps that under the
    # learning rate's own order (shipped: 0; AdamW practice 0.01-0.1 over long schedules).
    "train.weight_decay": (0, 10, "a step's shrink is weight_decay x lr, at 10 x 1e-3 already 1% a step"),
    "train.choose_up_to": (0, 10_000_000, "a count of examples, not a size: ten million is every set here"),
    "train.steps_per_execution": (0, 10_000, "Keras on a TPU uses tens to hundreds"),
    "train.val_every": (1, 1000, "as train.epochs"),
    "train.frozen_epochs": (0, 1000, "as train.epochs"),
    "train.lr_ramp_epochs": (0, 1000, "as train.epochs"),
    "train.lr_sustain_epochs": (0, 1000, "as train.epochs"),
    # Each view is a forward pass of every training image, cached in the run (shipped: 2).
    "train.feature_views": (1, 32, "each view caches every training image's features"),
    # Each fold is a run and a model to keep; Kaggle's CV uses 5-10 (shipped: up to 5).
    "train.folds": (0, 50, "5 x the usual 10"),
    "train.fold": (0, 49, "as train.folds"),
    # Test-time passes, each a prediction of the whole split (ScoreOptions.tta; shipped: 1-2).
    "tta": (1, 64, "each pass predicts the whole split"),
}
# The float32 images of one replica's batch: batch x side x side x 3 colours x 4 bytes. 16 images
# at 512 px (the TPU recipes) are 50 MB; 1 GiB leaves the model and tf.data room in 2 GB.
BATCH_BYTES = 1 << 30


def check_range(key: str, value: float, given_as: str | None = None) -> None:
    """Refuse a size past its declared bound (RANGES), in one line naming the key (or the option
    it was `given_as`, e.g. `--size`) and the bound."""
    low, high, why = RANGES[key]
    if not low <= value <= high:
        raise PetalsError(f"{given_as or key}={value}: must be in {low}..{high} ({why})")


def resolve_recipe(recipe: str, device: str | None) -> str:
    """`auto` -> the recipe for the device the replicas run on (TPU, GPU or CPU); others as given."""
    if recipe != AUTO_RECIPE:
        return recipe
    if device not in AUTO_RECIPES:
        raise ValueError(f"recipe auto needs the device (one of {', '.join(AUTO_RECIPES)}), got {device!r}")
    return AUTO_RECIPES[device]


def read_config(path: Path) -> Config:
    """A resolved config saved beside a run's outputs (`config.json`), every key checked again."""
    from pipeline.core.foreign_files import json_object

    try:  # a run may come back in a kernel's output: read by the rule for foreign files
        raw = json_object(path, "run file")
    except PetalsError as err:
        raise PetalsError(f"unreadable config: {err}") from None
    config = apply_updates(Config(), raw, str(path), CHOICES)
    validate(config)
    return config


def validate(config: Config) -> None:
    """Value checks that a type alone cannot express."""
    # Both name the run's folder (`rundir.run_id`): a backbone `x/../../y` from a shared recipe
    # would send predict to read a "run" outside the runs dir. Every registry's names are plain.
    check_name(config.recipe, "recipe")
    check_name(config.model.backbone, "model.backbone")
    data, aug = config.data, config.augment
    if data.image_size <= 0 or data.input_size < 0:
        raise PetalsError(
            f"data.image_size={data.image_size}, data.input_size={data.input_size}: must be > 0"
        )
    if data.sequence_length < 2 or data.vocabulary_size < 3:
        raise PetalsError(
            f"data.sequence_length={data.sequence_length}, data.vocabulary_size={data.vocabulary_size}: "
            "need a start id and a word (>= 2), and padding, unknown and one word (>= 3)"
        )
    if data.batch_size <= 0:
        raise PetalsError(
            f"data.batch_size={data.batch_size}: must be a positive number of images per replica"
        )
    for name in ("erasing", "gridmask", "cutmix", "mixup"):
        if not 0.0 <= getattr(aug, name) <= 1.0:
            raise PetalsError(f"augment.{name}={getattr(aug, name)}: a probability, must be in [0, 1]")
    if not 0.0 < aug.erasing_area <= 1.0 or not 0.0 < aug.gridmask_ratio < 1.0:
        raise PetalsError("augment.erasing_area must be in (0, 1] and augment.gridmask_ratio in (0, 1)")
    if aug.cutmix + aug.mixup > 1.0:
        raise PetalsError(
            f"augment.cutmix={aug.cutmix} + augment.mixup={aug.mixup}: each image gets at most one, "
            "so their sum must be <= 1"
        )
    if aug.mix_alpha <= 0:
        raise PetalsError(f"augment.mix_alpha={aug.mix_alpha}: must be > 0")
    train = config.train
    if train.epochs <= 0 or train.frozen_epochs < 0 or train.frozen_epochs > train.epochs:
        raise PetalsError(
            f"train.epochs={train.epochs}, train.frozen_epochs={train.frozen_epochs}: "
            "need epochs > 0 and 0 <= frozen_epochs <= epochs"
        )
    if train.val_every < 1:
        raise PetalsError(f"train.val_every={train.val_every}: must be >= 1 (1 scores every epoch)")
    if min(train.lr_start, train.lr_max, train.lr_min) <= 0 or not 0 < train.lr_decay <= 1:
        raise PetalsError("train.lr_start, lr_max and lr_min must be > 0 and train.lr_decay in (0, 1]")
    if not 0 <= train.label_smoothing < 1:
        raise PetalsError(f"train.label_smoothing={train.label_smoothing}: must be in [0, 1)")
    if train.logit_adjustment < 0:
        raise PetalsError(f"train.logit_adjustment={train.logit_adjustment}: must be >= 0 (0 turns it off)")
    if not 0 <= train.ema < 1:
        raise PetalsError(f"train.ema={train.ema}: a momentum, must be in [0, 1) (0 turns it off)")
    if train.folds == 1 or train.folds < 0:
        raise PetalsError(
            f"train.folds={train.folds} (FOLDS={train.folds}): cross-validation needs at least 2 folds "
            "(0: the competition's val split)"
        )
    if train.folds and not 0 <= train.fold < train.folds:
        raise PetalsError(
            f"train.fold={train.fold}: folds are 0..{train.folds - 1} with train.folds={train.folds}"
        )
    if train.fold_seed < 0:
        raise PetalsError(f"train.fold_seed={train.fold_seed}: must be >= 0")
    if train.folds and train.merge_val:
        raise PetalsError("train.folds and train.merge_val exclude each other: folds already use train + val")
    if train.pseudo_labels and not train.folds:
        raise PetalsError(
            f"train.pseudo_labels={train.pseudo_labels}: needs train.folds (FOLDS=K): fold f takes the "
            "labels of the teacher group's fold f, the one run that never trained on its val part"
        )
    if not 0 < train.pseudo_threshold <= 1 or train.pseudo_max_share <= 0:
        raise PetalsError(
            f"train.pseudo_threshold={train.pseudo_threshold}, train.pseudo_max_share="
            f"{train.pseudo_max_share}: need a probability in (0, 1] and a share > 0"
        )
    if train.unfrozen_layers < 0:
        raise PetalsError(
            f"train.unfrozen_layers={train.unfrozen_layers}: must be >= 0 (0: all of the backbone)"
        )
    if train.feature_cache:
        if train.epochs > train.frozen_epochs and not train.unfrozen_layers:
            raise PetalsError(
                "train.feature_cache=true caches the layers that never train, but with "
                "train.unfrozen_layers=0 the whole backbone fine-tunes after the frozen epochs: set "
                "train.unfrozen_layers (the backbone's last N layers fine-tune) or "
                "train.frozen_epochs=train.epochs (the head alone)"
            )
        if aug.cutmix or aug.mixup:
            raise PetalsError(
                "train.feature_cache=true caches views of single examples, and CutMix and MixUp mix two: "
                "set augment.cutmix=0 and augment.mixup=0"
            )
        if train.feature_views < 1:
            raise PetalsError(
                f"train.feature_views={train.feature_views}: at least 1 (the examples themselves)"
            )
        if train.feature_views_up_to < 0:
            raise PetalsError(
                f"train.feature_views_up_to={train.feature_views_up_to}: must be >= 0 (0: no limit)"
            )
    if not 0 <= config.model.dropout < 1:
        raise PetalsError(f"model.dropout={config.model.dropout}: must be in [0, 1)")
    for name in ("brightness", "contrast", "saturation", "hue", "rotation", "shear", "zoom", "shift"):
        if getattr(aug, name) < 0:
            raise PetalsError(
                f"augment.{name}={getattr(aug, name)}: a magnitude, must be >= 0 (0 turns it off)"
            )
    _check_sizes(config)


def _check_sizes(config: Config) -> None:
    """Every size in RANGES within its bounds, and one batch's images within BATCH_BYTES."""
    for key in RANGES:
        section, _, name = key.partition(".")
        if name:
            check_range(key, getattr(getattr(config, section), name))
    data = config.data
    side = max(data.image_size, data.input_size)
    batch_bytes = data.batch_size * side * side * 3 * 4
    if batch_bytes > BATCH_BYTES:
        raise PetalsError(
            f"data.batch_size={data.batch_size} at {side} px: {batch_bytes / 2**30:.1f} GiB of float32 "
            f"images a batch, more than {BATCH_BYTES >> 30} GiB; lower data.batch_size or data.image_size"
        )
