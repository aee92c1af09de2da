"""Value checks on a resolved config that a field's type alone cannot express: ranges,
probabilities, and settings that exclude each other."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline.core.errors import PetalsError

if TYPE_CHECKING:
    from pipeline.core.config import Config


def validate(config: Config) -> None:
    """Value checks that a type alone cannot express."""
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
    if not 0 <= config.model.dropout < 1:
        raise PetalsError(f"model.dropout={config.model.dropout}: must be in [0, 1)")
    for name in ("brightness", "contrast", "saturation", "hue", "rotation", "shear", "zoom", "shift"):
        if getattr(aug, name) < 0:
            raise PetalsError(
                f"augment.{name}={getattr(aug, name)}: a magnitude, must be >= 0 (0 turns it off)"
            )
