"""One typed configuration: frozen dataclasses, recipe files that override only what differs,
and `--set section.key=value` overrides that reject unknown keys and wrong types.

Precedence: the defaults below < the recipe (`competition/<name>/recipes/<recipe>.toml`, else its
task's `pipeline/tasks/recipes/<task>/<recipe>.toml`) < `--set` overrides.
The resolved config is written beside every run's outputs (`Config.to_dict`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from competition.spec import DEFAULT_COMPETITION, SPEC_DIR, competition_folder, load_spec
from pipeline.core.config_checks import validate
from pipeline.core.errors import PetalsError
from pipeline.core.overrides import apply_updates, leaves, parse_overrides, toml_value

RECIPES = "recipes"  # a competition's own recipes: competition/<name>/recipes/
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
    """The network, by its entry's name in `pipeline.modeling.networks.NETWORKS`: an image backbone
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
    "train.precision": ("auto", "float32", "mixed_float16", "mixed_bfloat16"),
    "train.jit_compile": ("auto", "on", "off"),
}


def recipe_dirs(competition: str = DEFAULT_COMPETITION) -> list[Path]:
    """Where a competition's recipes are, first found first: its folder's `recipes/`, then its
    task's (pipeline/tasks/recipes/<task>/: cpu, gpu and tpu), so a competition file alone trains."""
    try:
        spec = load_spec(competition)
    except ValueError as err:
        raise PetalsError(str(err)) from None
    return [competition_folder(competition) / RECIPES, spec.task.recipes_dir]


def recipe_names(competition: str = DEFAULT_COMPETITION) -> list[str]:
    """A competition's recipes (its own and its task's), plus `default` (no file: the defaults)."""
    found = {p.stem for folder in recipe_dirs(competition) for p in folder.glob("*.toml")}
    return sorted([DEFAULT_RECIPE, *found])


def recipe_path(name: str, competition: str = DEFAULT_COMPETITION) -> Path:
    if name.endswith(".toml"):
        path = Path(name)
    else:
        candidates = [folder / f"{name}.toml" for folder in recipe_dirs(competition)]
        path = next((p for p in candidates if p.is_file()), candidates[0])
    if not path.is_file():
        known = ", ".join(recipe_names(competition))
        raise PetalsError(f"unknown recipe {name!r} for {competition}: no {path} (recipes: {known})")
    return path


def resolve_recipe(recipe: str, device: str | None) -> str:
    """`auto` -> the recipe for the device the replicas run on (TPU, GPU or CPU); others as given."""
    if recipe != AUTO_RECIPE:
        return recipe
    if device not in AUTO_RECIPES:
        raise ValueError(f"recipe auto needs the device (one of {', '.join(AUTO_RECIPES)}), got {device!r}")
    return AUTO_RECIPES[device]


def _competition(overrides: Iterable[str]) -> str:
    """The competition `--set competition=...` names (the recipe is looked up in its folder)."""
    value = parse_overrides(overrides).get("competition", DEFAULT_COMPETITION)
    if not isinstance(value, str):
        raise PetalsError("--set competition: a competition's name, e.g. --set competition=imdb")
    return value


def _recipe_values(recipe: str, competition: str) -> tuple[Path | None, dict[str, Any]]:
    """A resolved recipe's file and the values it sets (none for `default`)."""
    if recipe == DEFAULT_RECIPE:
        return None, {}
    path = recipe_path(recipe, competition)
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise PetalsError(f"{path}: not valid TOML ({err})") from None
    raw.pop("recipe", None)
    return path, raw


def load_config(
    recipe: str = DEFAULT_RECIPE, overrides: Iterable[str] = (), device: str | None = None
) -> Config:
    """Defaults, then the recipe file, then `--set` overrides; all keys and types checked.

    `recipe="auto"` takes the recipe for `device` (TPU, GPU or CPU: `Platform.device`).
    """
    overrides = list(overrides)
    path, raw = _recipe_values(resolve_recipe(recipe, device), _competition(overrides))
    config = Config()
    if path is not None:
        config = dataclasses.replace(apply_updates(config, raw, str(path), CHOICES), recipe=path.stem)
    config = apply_updates(config, parse_overrides(overrides), "--set", CHOICES)
    config = _keep_labels(config, explicit=leaves(raw) | leaves(parse_overrides(overrides)))
    validate(config)
    return config


def _keep_labels(config: Config, explicit: set[str]) -> Config:
    """Only the transforms the competition says keep the label: a default one that does not is
    turned off, one a recipe or `--set` turns on is refused."""
    from pipeline.core.competitions import load_competition

    spec = load_competition(config.competition)
    unknown = sorted(spec.keeps_label - set(TRANSFORMS))
    if unknown:
        raise PetalsError(
            f"competition {spec.name}: keeps_label names {unknown}, which are not transforms "
            f"(known: {', '.join(TRANSFORMS)})"
        )
    off: dict[str, Any] = {}
    for name in TRANSFORMS:
        value = getattr(config.augment, name)
        if name in spec.keeps_label or not value:
            continue
        if f"augment.{name}" in explicit:
            raise PetalsError(
                f"augment.{name}={toml_value(value)}: competition {spec.name} does not keep the label "
                f"under {name} (its keeps_label: {', '.join(sorted(spec.keeps_label)) or 'none'})"
            )
        off[name] = type(value)(0)
    return dataclasses.replace(config, augment=dataclasses.replace(config.augment, **off)) if off else config


def describe(recipe: str, overrides: Iterable[str] = (), device: str | None = None) -> str:
    """The resolved config as TOML (a file `--recipe` reads back), each value with where it came
    from: the defaults, the recipe file, or `--set`."""
    overrides = list(overrides)
    config = load_config(recipe, overrides, device)
    path, raw = _recipe_values(resolve_recipe(recipe, device), config.competition)
    from_recipe, from_set = leaves(raw), leaves(parse_overrides(overrides))
    chosen = f"{recipe} -> {config.recipe} (the {device} recipe)" if recipe == AUTO_RECIPE else config.recipe
    shown = (
        path.resolve().relative_to(SPEC_DIR.parent)
        if path and path.resolve().is_relative_to(SPEC_DIR.parent)
        else path
    )
    lines = [f"# recipe {chosen}: {shown or 'no file, the defaults'}"]
    top, sections = [], []
    for item in dataclasses.fields(config):
        value = getattr(config, item.name)
        if dataclasses.is_dataclass(value):
            sections.append(
                (item.name, [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)])
            )
        elif item.name != "recipe":  # the recipe is the header's
            top.append((item.name, value))
    sections.insert(0, ("", top))  # top-level keys come before any [section] in TOML
    for section, items in sections:
        if section:
            lines.append(f"\n[{section}]")
        for key, value in items:
            full = f"{section}.{key}" if section else key
            source = (
                "--set"
                if full in from_set
                else f"recipe {config.recipe}"
                if full in from_recipe
                else f"off: competition {config.competition} does not keep the label"
                if section == "augment" and key in TRANSFORMS and value != getattr(AugmentConfig(), key)
                else "default"
            )
            lines.append(f"{f'{key} = {toml_value(value)}':<34} # {source}")
    return "\n".join(lines)


def read_config(path: Path) -> Config:
    """A resolved config saved beside a run's outputs (`config.json`), every key checked again."""
    try:
        raw = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise PetalsError(f"{path}: unreadable config ({err})") from None
    config = apply_updates(Config(), raw, str(path), CHOICES)
    validate(config)
    return config


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """`--recipe`, `--set` and `--print-config`, for every stage that reads the config."""
    parser.add_argument(
        "--recipe",
        default=AUTO_RECIPE,
        help="recipe under competition/<name>/recipes/ (else its task's), a .toml path, or auto: tpu, "
        "gpu or cpu by the device the stage runs on; `default` is the bare defaults "
        f"(known: {', '.join(recipe_names())}) "
        f"(default: {AUTO_RECIPE})",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one config value, e.g. --set augment.cutmix=0.5 (repeatable)",
    )
    parser.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved config as TOML, each value with its source (default, recipe, --set); exit",
    )


def config_from_args(args, device: str | None = None) -> Config:
    """The config of a stage's command line or options (`recipe`, `overrides`), resolved once for
    `device`; with `--print-config`, printed, and the process exits 0 (like `--help`)."""
    if getattr(args, "print_config", False):
        print(describe(args.recipe, args.overrides, device))
        raise SystemExit(0)
    return load_config(args.recipe, args.overrides, device)
