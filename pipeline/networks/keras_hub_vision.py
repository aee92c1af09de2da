"""keras-hub's image backbones by name: DINOv2/v3, SigLIP, CLIP, MetaCLIP2, DeiT, ViT, Swin, HGNetV2,
EfficientNet, MobileNetV3/V5, ResNet, DenseNet, CSPNet, Xception, VGG.

Each entry is a family: its keras-hub classes, its main presets with their Kaggle Models handles
(copied from keras-hub's own preset tables, `keras_hub/src/models/<family>/*_presets.py`; a test
holds them to the installed tables), its native size, and how its features are pooled for petals'
head, as the family's own keras-hub task pools them (DINO, SigLIP and CLIP have none; see
`POOLING`). `model.weights` names a preset: a local preset folder anywhere (one a test wrote with
`save_to_preset`), or a preset's name, found where Kaggle mounts the attached model
(`pipeline.core.kaggle_input`): never a download at run time. The model is the same shape as every
image entry's: pixels in [0, 255] -> the preset's own ImageConverter's scaling (and resizing, for a
family whose position embeddings fix its size) -> backbone (one layer named `backbone`) -> pooled
features -> dropout -> a dense layer's logits. A run keeps the backbone's and converter's configs
(`keep_architecture`), so inference rebuilds it without the preset.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import keras
from keras import layers

from pipeline.core.errors import PetalsError
from pipeline.core.foreign_files import load_json
from pipeline.networks.base import PRESET_WEIGHTS, Network, RunFiles, fed

log = logging.getLogger(__name__)

# How each family's own keras-hub task turns the backbone's output into one vector an image:
POOLING = {
    "avg": "global average of the last feature map (the ImageClassifier tasks of the convnets)",
    "token": "the [CLS] token (ViTImageClassifier's and DeiTImageClassifier's pooling='token')",
    "tokens": "mean of the tokens (SwinTransformerImageClassifier)",
    "cls+patches": "[CLS] and the mean of the patch tokens, concatenated (DINOv2's linear probe; no task)",
    "embedding": "the vision tower's pooled, projected embedding (get_vision_embeddings; no task)",
}


@dataclass(frozen=True, eq=False)  # hashable by identity: its handles are a dict
class HubBackbone(Network):
    """One keras-hub image family: its classes, presets, native size and pooling."""

    modality: ClassVar[str] = "image"
    preprocess: ClassVar[str] = "the preset's ImageConverter"
    name: str
    family: str  # keras_hub.models.<family>Backbone, keras_hub.layers.<family>ImageConverter
    handles: dict[str, str]  # preset -> Kaggle Models handle, owner/model/framework/variation/version
    native_size: int  # the resolution its smallest main preset was trained at
    pooling: str  # a key of POOLING
    backends: tuple[str, ...] = ("tensorflow", "jax")

    @property
    def weights(self) -> tuple[str, ...]:
        return (PRESET_WEIGHTS, *self.handles)

    @property
    def unfreeze(self) -> str:
        """What train.unfrozen_layers=N unfreezes in this family (`UNFREEZE`)."""
        return UNFREEZE[self.name]

    def packages(self, weights: str) -> dict[str, list[str]]:
        from pipeline.networks import bert

        return {"keras_hub": list(bert.PIP_INSTALL)}

    def kaggle_model(self, weights: str) -> str | None:
        """The Kaggle Models handle a kernel attaches for `weights`, when it names one of the presets."""
        return self.handles.get(weights)

    def describe(self) -> str:
        presets = ", ".join(self.handles)
        return f"{self.name:<26} pretrained: keras-hub preset ({presets})  {self.native_size} px"

    def input_shape(self, config, batch_size: int | None = None):
        size = config.data.input_size or config.data.image_size
        return (batch_size, size, size, 3)

    def build_classifier(
        self,
        config,
        num_classes: int,
        *,
        weights: str = "none",
        input_dtype: str = "float32",
        batch_size: int | None = None,
        vocabulary_size: int | None = None,
        run_dir: Path | None = None,
        files: RunFiles | None = None,
    ) -> keras.Model:
        """Given a trained run's dir, the architecture it kept (random weights: the run's replace them);
        else the preset's backbone with its weights."""
        kept = run_dir / files.backbone if run_dir is not None and files is not None else None
        if kept is not None and kept.is_file():
            backbone, converter = architecture_from(kept, self)
        else:
            folder = preset_folder(self, weights)
            backbone = _class(self.family, "Backbone").from_preset(str(folder))
            converter = _class(self.family, "ImageConverter").from_preset(str(folder))
        size = self.input_shape(config)[1]
        return classifier(
            self, backbone, converter, size, num_classes,
            dropout=config.model.dropout, input_dtype=input_dtype, batch_size=batch_size,
        )  # fmt: skip

    def keep_architecture(self, net: keras.Model, run_dir: Path, files: RunFiles) -> None:
        """The backbone's and converter's configs: inference rebuilds the network without the preset."""
        from pipeline.core.files import write_atomically

        kept = net.get_layer("backbone").preset_configs
        write_atomically(run_dir / files.backbone, lambda tmp: tmp.write_text(json.dumps(kept, indent=1)))


def _keras_hub():
    from pipeline.networks import bert

    return bert._keras_hub()  # one line when keras-hub is missing


def _class(family: str, kind: str):
    """keras_hub's `<family>Backbone` (models) or `<family>ImageConverter` (layers)."""
    keras_hub = _keras_hub()
    return getattr(keras_hub.models if kind == "Backbone" else keras_hub.layers, f"{family}{kind}")


def _holds_preset(family: str):
    """Whether a folder holds a preset of `family`'s backbone (its config.json names the class)."""

    def holds(folder: Path) -> bool:
        config = folder / "config.json"
        try:  # a folder Kaggle mounts, or anyone's: read by the rule for foreign files
            described = load_json(folder, "config.json", "preset config") if config.is_file() else {}
        except PetalsError:
            return False
        return (
            isinstance(described, dict) and described.get("registered_name") == f"keras_hub>{family}Backbone"
        )

    return holds


def preset_folder(entry: HubBackbone, weights: str, root: Path | None = None) -> Path:
    """The preset folder `weights` names: a folder anywhere, or a preset of the entry's found where
    Kaggle mounts the attached model (under `root`, Kaggle's input folder). Never a download."""
    from pipeline.core import kaggle_input

    if weights in entry.handles:
        handle, family = entry.handles[weights], _holds_preset(entry.family)
        # Kaggle mounts a model under its variation's name (.../<variation>/<version>): another preset
        # of the family attached beside it is not taken for it.
        holds = lambda folder: weights in folder.parts and family(folder)  # noqa: E731
        root = kaggle_input.KAGGLE_INPUT if root is None else root
        found = kaggle_input.find("model", handle, holds, f"a {entry.family} preset", root)
        if found is None:
            raise PetalsError(
                f"model.weights={weights}: the Kaggle model {handle} is not attached here (make kernel "
                f"attaches it); elsewhere pass a preset folder: model.weights=/path/to/{weights}"
            )
        log.info("%s: preset %s at %s", entry.name, weights, found)
        return found.path
    if weights in ("none", PRESET_WEIGHTS) or not (Path(weights) / "config.json").is_file():
        raise PetalsError(
            f"model.weights={weights!r}: {entry.name} loads a keras-hub preset: a folder holding its "
            f"config.json, model.weights.h5 and preprocessor (save_to_preset writes one), or one of "
            f"{', '.join(entry.handles)} attached to a kernel"
        )
    return Path(weights)


def architecture_from(path: Path, entry: HubBackbone):
    """The backbone (random weights) and converter a run kept (`keep_architecture`)."""
    if not path.is_file():
        raise PetalsError(f"{path}: missing; a {entry.name} run keeps its architecture there, train it again")
    _keras_hub()  # registers keras-hub's classes for deserialization
    kept = load_json(path.parent, path.name, "run file")  # a run may come from a kernel's output
    return tuple(keras.saving.deserialize_keras_object(kept[part]) for part in ("backbone", "converter"))


def fixed_size(backbone) -> int | None:
    """The side a family's position embeddings fix (ViT-like), or None for a convnet that takes any."""
    tower = getattr(backbone, "vision_encoder", backbone)
    shape = getattr(tower, "image_shape", None) or tower.input_shape
    side = shape[0] if len(shape) == 3 else shape[1]
    return side if side is not None and getattr(tower, "image_shape", None) is not None else None


def converter_layers(converter, size: int, backbone) -> list[layers.Layer]:
    """The converter's own arithmetic as plain Keras layers on [0, 255] pixels: resizing (only where
    the backbone fixes its size), then x * scale + offset."""
    out = []
    side = fixed_size(backbone)
    if side is not None and side != size:
        out.append(layers.Resizing(side, side, interpolation=converter.interpolation, name="to_native_size"))
    scale = 1.0 if converter.scale is None else converter.scale
    offset = 0.0 if converter.offset is None else converter.offset
    out.append(layers.Rescaling(scale, offset=offset, name="converter_scaling"))
    return out


def _body(entry: HubBackbone, backbone, size: int):
    """The part a frozen warm-up freezes, as one layer with one output (what the feature cache cuts):
    the backbone, or a two-tower family's vision tower with its pooling and projection (its text
    tower is left out)."""
    if entry.pooling == "embedding":
        side = fixed_size(backbone) or size
        images = keras.Input(shape=(side, side, 3), name="images")
        return keras.Model(images, backbone.get_vision_embeddings(images))
    if isinstance(backbone.output, dict):  # HGNetV2: a feature map a stage; its task pools the last
        return keras.Model(backbone.input, backbone.output[backbone.stage_names[-1]])
    return backbone


def pooled(entry: HubBackbone, body, features):
    """One vector an image, as the family's own task pools (`POOLING`)."""
    if entry.pooling == "avg":
        return layers.GlobalAveragePooling2D(name="pool")(features)
    if entry.pooling == "token":
        return layers.Lambda(lambda x: x[:, 0], name="pool")(features)
    if entry.pooling == "tokens":
        return layers.Lambda(lambda x: keras.ops.mean(x, axis=1), name="pool")(features)
    if entry.pooling == "cls+patches":
        first_patch = 1 + int(body.get_config().get("num_register_tokens", 0))
        return layers.Lambda(
            lambda x: keras.ops.concatenate([x[:, 0], keras.ops.mean(x[:, first_patch:], axis=1)], axis=-1),
            name="pool",
        )(features)
    return features  # "embedding": pooled by the tower


def classifier(
    entry: HubBackbone,
    backbone,
    converter,
    size: int,
    num_classes: int,
    *,
    dropout: float,
    input_dtype: str = "float32",
    batch_size: int | None = None,
) -> keras.Model:
    """pixels [batch, size, size, 3] in [0, 255] -> logits [batch, num_classes]."""
    inputs = keras.Input(shape=(size, size, 3), batch_size=batch_size, dtype=input_dtype, name="image")
    x = (
        layers.Activation("linear", dtype="float32", name="to_float")(inputs)
        if input_dtype != "float32"
        else inputs
    )
    for layer in converter_layers(converter, size, backbone):
        x = layer(x)
    body = _body(entry, backbone, size)
    parts = {"backbone": backbone, "converter": converter}
    configs = {part: keras.saving.serialize_keras_object(obj) for part, obj in parts.items()}
    body.name = "backbone"  # one nested layer: freezing it is one switch
    body.preset_configs = configs  # what `keep_architecture` writes
    features = fed(body, x)  # DINO's backbones take {name: pixels}
    features = layers.Dropout(dropout, name="head_dropout")(pooled(entry, body, features))
    logits = layers.Dense(num_classes, name="logits")(features)
    return keras.Model(inputs, logits, name=f"{entry.name}-{size}")


# One family a line: petals' name, keras-hub's family, its Kaggle model, native size (px), pooling;
# then its main presets, smallest first, as preset/version (keras-hub's own tables). Not the
# efficientnet_el/em/es presets: their handles are another model's (efficientnet_b1_ft).
FAMILIES = """
dinov2 DINOV2 dinov2 224 cls+patches
    dinov2_small/1 dinov2_base/1 dinov2_large/1 dinov2_with_registers_small/1 dinov2_with_registers_base/1
dinov3 DINOV3 dinov3 224 cls+patches
    dinov3_vit_small_lvd1689m/1 dinov3_vit_base_lvd1689m/1 dinov3_vit_large_lvd1689m/1
siglip SigLIP siglip 224 embedding
    siglip2_base_patch16_224/1 siglip2_base_patch16_384/1 siglip2_so400m_patch14_384/1
    siglip_base_patch16_224/1
clip CLIP clip 224 embedding
    clip_vit_base_patch16/3 clip_vit_large_patch14/3 clip_vit_large_patch14_336/3
metaclip2 MetaCLIP2 metaclip2 224 embedding
    metaclip_2_vit_huge_patch14_224/1
deit DeiT deit 224 token
    deit_tiny_distilled_patch16_224_imagenet/1 deit_small_distilled_patch16_224_imagenet/1
    deit_base_distilled_patch16_384_imagenet/1
vit ViT vit 224 token
    vit_base_patch16_224_imagenet/4 vit_base_patch16_384_imagenet/4 vit_large_patch16_384_imagenet/4
swin SwinTransformer swin-transformer 224 tokens
    swin_tiny_patch4_window7_224/1 swin_base_patch4_window12_384/1 swin_large_patch4_window12_384/1
hgnetv2 HGNetV2 hgnetv2 224 avg
    hgnetv2_b4_ssld_stage2_ft_in1k/1 hgnetv2_b5_ssld_stage2_ft_in1k/1 hgnetv2_b6_ssld_stage2_ft_in1k/1
hub-efficientnet EfficientNet efficientnet 224 avg
    efficientnet_b0_ra_imagenet/2 efficientnet_b3_ra2_imagenet/2 efficientnet_b5_sw_ft_imagenet/2
    efficientnet2_rw_s_ra2_imagenet/2
mobilenetv3 MobileNet mobilenetv3 224 avg
    mobilenet_v3_small_100_imagenet/1 mobilenet_v3_large_100_imagenet/1 mobilenet_v3_large_100_imagenet_21k/1
mobilenetv5 MobileNetV5 mobilenetv5 768 avg
    mobilenetv5_300m_enc_gemma3n/1
hub-resnet ResNet resnetv1 224 avg
    resnet_18_imagenet/3 resnet_50_imagenet/3 resnet_152_imagenet/3
hub-densenet DenseNet densenet 224 avg
    densenet_121_imagenet/3 densenet_201_imagenet/3
cspnet CSPNet cspdarknet 256 avg
    csp_darknet_53_ra_imagenet/2 csp_resnext_50_ra_imagenet/1
hub-xception Xception xception 299 avg
    xception_41_imagenet/2
vgg VGG vgg 224 avg
    vgg_16_imagenet/3 vgg_19_imagenet/3
"""


# What `train.unfrozen_layers=N` can unfreeze: the backbone layer's own top-level layers, counted
# back from its output (pipeline/modeling/classifier.py), which keras-hub cuts differently a family.
_WHOLE_ENCODER = "the whole encoder is one layer: fine-tune it whole (train.frozen_epochs, then all)"
UNFREEZE = {
    **dict.fromkeys(("dinov2", "dinov3"), "1: the final LayerNorm; 2: it and the whole encoder"),
    **dict.fromkeys(("vit", "deit"), "1: " + _WHOLE_ENCODER),
    "siglip": "1: the whole vision tower, its attention-pooling head included",
    **dict.fromkeys(("clip", "metaclip2"), "1: the projection; 2: and the pooler; then the whole encoder"),
    "swin": "a stage at a time from the top (the final LayerNorm first)",
    "hgnetv2": "1: every stage (its encoder is one layer)",
    **dict.fromkeys(("mobilenetv3", "mobilenetv5"), "a block at a time from the top"),
    **dict.fromkeys(
        ("hub-efficientnet", "hub-resnet", "hub-densenet", "cspnet", "hub-xception", "vgg"),
        "layer by layer from the top, rounded up to a block boundary by the feature cache",
    ),
}


def table_rows(table: str) -> list[list[str]]:
    """The rows of a table of families (`FAMILIES`'s layout): a family a row, its presets continued
    on indented lines."""
    rows: list[list[str]] = []
    for line in table.strip().splitlines():
        if line.startswith(" "):
            rows[-1] += line.split()
        else:
            rows.append(line.split())
    return rows


def handles(model: str, presets: list[str]) -> dict[str, str]:
    """{preset: its Kaggle Models handle}: Keras's own presets, keras/<model>/keras/<preset>/<version>."""
    return {p.split("/")[0]: f"keras/{model}/keras/{p}" for p in presets}


def _entries(table: str) -> Iterator[HubBackbone]:
    """The families of `table` (`FAMILIES`'s layout), each with {preset: Kaggle Models handle}."""
    for name, family, model, size, pooling, *presets in table_rows(table):
        yield HubBackbone(name, family, handles(model, presets), int(size), pooling)


BACKBONES: dict[str, HubBackbone] = {entry.name: entry for entry in _entries(FAMILIES)}


def _out(reason: str, *families: str) -> dict[str, str]:
    return dict.fromkeys(families, reason)


# keras-hub's backbones (`keras_hub.models.<family>Backbone`) that no entry wires, each with why: a
# test fails on a backbone keras-hub adds that is neither wired (here, keras_hub_text, bert) nor
# named here. The wired ones classify an image or a text (pair) into classes, petals' tasks.
LEFT_OUT: dict[str, str] = {
    **_out("the base class of every backbone, no family", "", "FeaturePyramid"),
    **_out("a decoder-only language model (generation; a classifier head on an LLM is not petals' scope "
           "on Kaggle's 16 GB accelerators)", "Bloom", "Falcon", "GPT2", "GPTNeoX", "Gemma", "Gemma3",
           "Gemma3n", "Gemma4", "GptOss", "Llama", "Llama3", "Mistral", "Mixtral", "OPT", "Phi3", "Qwen",
           "Qwen2", "Qwen3", "Qwen3Moe", "Qwen3_5", "Qwen3_5Moe", "QwenMoe", "RWKV7", "SmolLM", "SmolLM3"),
    **_out("an encoder-decoder for text generation", "Bart", "T5", "T5Gemma", "T5Gemma2", "EdRec"),
    **_out("a vision-language generator (captions, answers)", "BLIP2", "PaliGemma"),
    **_out("object detection: boxes, not classes", "DFine", "RetinaNet", "ViTDet"),
    **_out("segmentation or depth: a map a pixel, not a class an image", "BASNet", "DeepLabV3",
           "DepthAnything", "SAM", "SAM3PromptableConcept", "SegFormer"),
    **_out("SegFormer's encoder: its presets are trained on ADE20k/Cityscapes segmentation, not ImageNet",
           "MiT"),
    **_out("image generation", "Flux", "StableDiffusion3"),
    **_out("audio", "Moonshine", "Whisper"),
    **_out("video", "VideoPrism"),
    **_out("text recognition (OCR): a string an image", "PARSeq"),
    **_out("protein sequences", "ESM", "ESM2"),
    **_out("a text encoder without a TextClassifier task or preprocessor in keras-hub 0.32 "
           "(DeBERTa-v3 supersedes it on Kaggle)", "Electra", "XLNet"),
    **_out("a text encoder whose presets are Chinese-only or that trails BERT-likes on Kaggle "
           "(FNet's Fourier mixing)", "FNet", "RoformerV2"),
}  # fmt: skip
