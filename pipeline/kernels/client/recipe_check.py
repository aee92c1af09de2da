"""What a kernel can run, decided before it is generated: one PetalsError line, with the way out.

A resolution Kaggle does not ship, a backbone its image cannot build, weights or packages a kernel
without internet cannot reach. A code competition's notebook always runs with the internet off
(Kaggle scores it so), so everything it needs beyond the image comes from attached sources.
"""

from __future__ import annotations

from pipeline.core.errors import PetalsError
from pipeline.formats.base import resolutions_of


def kernel_internet(spec, asked: str | None) -> str:
    """The kernel's internet, "on" or "off": what was asked, else off for a code competition and on
    otherwise. A code competition's kernel with the internet on is refused: Kaggle would not score it."""
    if not spec.code_competition:
        return asked or "on"
    if asked == "on":
        raise PetalsError(
            f"competition {spec.name} is a code competition: Kaggle scores its notebook with the internet "
            "off, so INTERNET=on is refused; attach pretrained weights as a dataset or model "
            "(DATASETS=owner/slug, MODELS=...)"
        )
    return "off"


KERAS_OWNER = "keras"  # Keras's own presets on Kaggle Models: kaggle.com/models/keras/<model>


def preset_model(config) -> str | None:
    """The Kaggle Models handle (owner/model/framework/variation/version) of the keras-hub preset a
    recipe's weights name: a preset of the entry's by name (keras-hub's image families), or where Kaggle
    mounts it, /kaggle/input/<model>/<framework>/<variation>/<version>: Keras's own, which a kernel
    attaches unless MODELS= names another. None for other weights."""
    from pipeline import networks
    from pipeline.networks.base import PRESET_WEIGHTS

    weights = config.model.weights
    entry = networks.get(config.model.backbone)
    if PRESET_WEIGHTS not in entry.weights:
        return None
    named = entry.kaggle_model(weights)  # a preset the entry names: its handle in keras-hub's tables
    if named is not None:
        return named
    parts = weights.removeprefix("/kaggle/input/").strip("/").split("/")
    framework = parts[1] if len(parts) == 4 else None
    if not weights.startswith("/kaggle/input/") or framework != "keras":  # Keras's presets are its own
        return None
    return "/".join([KERAS_OWNER, *parts])


def weights_file(backbone: str, weights: str) -> str | None:
    """The file a pretrained backbone downloads, where petals names it (noisy-student); else None:
    its registry entry's to say."""
    if weights != "noisy-student":  # the others are Keras' own downloads, or a text network's preset
        return None
    from pipeline.networks import registry

    return registry.get_backbone(backbone).weights_file(weights)


def _offline(spec) -> str:
    """Why the kernel has no internet: asked for, or (a code competition) how Kaggle scores it."""
    if spec.code_competition:
        return (
            f"competition {spec.name} is a code competition, whose notebook runs offline: it must come "
            "from an attached dataset or model, not a download"
        )
    return "the kernel has no internet"


def check_recipe(
    config, spec, session: str, internet: bool, datasets: list[str], wheels: bool = False,
    shipped: bool = False,
) -> None:  # fmt: skip
    """What a kernel cannot run: a resolution Kaggle does not ship, a backbone its image cannot build,
    weights or packages it cannot reach (`datasets`: the attached datasets and models; `wheels`: the
    packages' wheels come attached, `wheels.py`; `shipped`: the weights file does, `weights.py`).
    One line, with the way out."""
    from pipeline import networks
    from pipeline.networks import registry, text_networks
    from pipeline.networks.backbone import WEIGHT_CHOICES
    from pipeline.tasks.competitions import check_network

    size = config.data.image_size
    if resolutions_of(spec) and size not in resolutions_of(spec):
        raise PetalsError(
            f"data.image_size={size}: Kaggle ships "
            f"{', '.join(map(str, resolutions_of(spec)))} px records only; "
            "the kernel cannot run this recipe"
        )
    backbone = config.model.backbone
    entry = networks.get(backbone)
    if config.model.weights in entry.packaged:  # a wheel: from the index, or the attached wheels
        if not (internet or wheels):
            raise PetalsError(
                f"model.weights={config.model.weights}: {backbone}'s model installs as a wheel, and "
                f"{_offline(spec)}: let make kernel attach its wheels"
            )
        return
    if text_networks.PRESET_WEIGHTS in entry.weights:  # its weights: a preset folder, or a preset's name
        named = entry.kaggle_model(config.model.weights) is not None  # found where Kaggle mounts it
        if not named and not config.model.weights.startswith("/kaggle/input/"):
            raise PetalsError(
                f"model.weights={config.model.weights!r} is a folder on this machine, which the kernel "
                "cannot see: attach the model (MODELS=keras/bert/keras/bert_base_multi/2) and set "
                "model.weights=/kaggle/input/<model>/<framework>/<variation>/<version>"
            )
        if not datasets:
            mounted = config.model.weights.removeprefix("/kaggle/input/").strip("/").split("/")
            handle = "/".join(mounted[:4]) if len(mounted) >= 4 else "model/framework/variation/version"
            raise PetalsError(
                f"model.weights={config.model.weights}: no model or dataset is attached to hold it; "
                f"attach it: MODELS=<owner>/{handle} (keras for Keras's own presets), or DATASETS=owner/slug"
            )
        if entry.modality == "text":
            return
    if session == "tpu":  # Kaggle's TPU image has a CPU-only TensorFlow: Keras trains on JAX there
        try:
            check_network(config, spec, "jax")
        except PetalsError as err:
            raise PetalsError(f"{err}; Kaggle's TPU image trains on JAX") from None
    else:
        check_network(config, spec, "tensorflow")
    if text_networks.PRESET_WEIGHTS in entry.weights:  # a keras-hub image family's preset: checked above
        return
    weights = config.model.weights
    if shipped:  # its weights file goes up as a private dataset the kernel attaches
        weights = "none"
    if weights not in WEIGHT_CHOICES and not weights.startswith("/kaggle/input/"):
        raise PetalsError(
            f"model.weights={weights!r} is a file on this machine, which the kernel cannot see: "
            "upload it as a Kaggle dataset, attach it (DATASETS=owner/slug) "
            "and set model.weights=/kaggle/input/<path>/<file>"
        )
    if internet or datasets:
        return
    # keras-hub: the TPU image brings it (keras-nlp stands on it); elsewhere the kernel checks at start.
    missing = [pip[-1] for name, pip in networks.packages(config).items() if name != "keras_hub"]
    online = "" if spec.code_competition else ", or INTERNET=on"
    if missing and not wheels:
        raise PetalsError(
            f"backbone {backbone} with model.weights={weights} needs the package {missing[0]}, which "
            f"Kaggle's images lack, and {_offline(spec)}: attach a dataset holding its wheel "
            f"(DATASETS=owner/slug){online}"
        )
    from_package = wheels and weights == "imagenet" and registry.get_backbone(backbone).package is not None
    if weights in ("imagenet", "noisy-student") and not from_package:  # a package's wheel holds them
        needed = weights_file(backbone, weights) or f"the {weights} weights file of {backbone}"
        raise PetalsError(
            f"model.weights={weights} downloads {needed}, but {_offline(spec)}: attach a "
            f"dataset holding it (DATASETS=owner/slug){online}{_cache_hint(backbone, weights)}"
        )


def _cache_hint(backbone: str, weights: str) -> str:
    """How petals ships a keras.applications backbone's ImageNet file itself (`weights.py`)."""
    from pipeline.networks import keras_weights, registry

    if weights != "imagenet" or keras_weights.imagenet_file(registry.get_backbone(backbone)) is None:
        return ""
    return (
        f"; or let petals ship it: build {backbone} once with imagenet weights where there is internet "
        f"(Keras keeps the file in {keras_weights.cache_folder()}), or pass it with model.weights=/path"
    )
