"""Tiny random configurations of keras-hub's vision and text-encoder families, for the tests.

Each builds in well under a second at 32 px (or 16 tokens): a few filters, one or two blocks. They
are saved with keras-hub's own `save_to_preset` into a folder the registry loads as a preset
(`model.weights=<folder>`): the real loading code, without a download.
"""

from __future__ import annotations

SIZE = 32  # pixels: every tiny vision config takes 32 x 32 images
IMAGE = (SIZE, SIZE, 3)
_VIT = {"patch_size": 8, "hidden_dim": 16, "num_layers": 1, "num_heads": 2, "intermediate_dim": 32}


def _clip_like(prefix: str, projection: bool):
    """A two-tower family (CLIP, MetaCLIP2, SigLIP): a tiny vision tower and a tiny text tower."""
    import importlib

    module = prefix.lower().replace("metaclip2", "metaclip_2")
    vision = importlib.import_module(f"keras_hub.src.models.{module}.{module}_vision_encoder")
    text = importlib.import_module(f"keras_hub.src.models.{module}.{module}_text_encoder")
    towers = {
        "vision_encoder": getattr(vision, f"{prefix}VisionEncoder")(image_shape=IMAGE, **_VIT),
        "text_encoder": getattr(text, f"{prefix}TextEncoder")(
            vocabulary_size=32,
            embedding_dim=16,
            hidden_dim=16,
            num_layers=1,
            num_heads=2,
            intermediate_dim=32,
            max_sequence_length=8,
        ),
    }
    return {**towers, "projection_dim": 16} if projection else towers


def vision_config(family: str) -> dict:
    """The keyword arguments of `<family>Backbone` for a tiny random network at 32 px."""
    if family == "DINOV2":
        return {**_VIT, "image_shape": IMAGE, "position_embedding_shape": IMAGE}
    if family == "DINOV3":
        return {**_VIT, "image_shape": IMAGE, "num_register_tokens": 1}
    if family == "ViT":
        vit = {k: v for k, v in _VIT.items() if k != "intermediate_dim"}
        return {**vit, "mlp_dim": 32, "image_shape": IMAGE}
    if family == "DeiT":
        return {**_VIT, "image_shape": IMAGE}
    if family in ("CLIP", "MetaCLIP2"):
        return _clip_like(family, projection=True)
    if family == "SigLIP":
        return _clip_like(family, projection=False)
    if family == "SwinTransformer":
        return {"image_shape": IMAGE, "embed_dim": 8, "depths": [1, 1], "num_heads": [1, 2], "window_size": 4}
    if family == "HGNetV2":
        return {
            "depths": [1, 1],
            "embedding_size": 8,
            "hidden_sizes": [16, 32],
            "stem_channels": [3, 8, 8],
            "hidden_act": "relu",
            "use_learnable_affine_block": False,
            "stackwise_stage_filters": [(8, 8, 16, 1, 1, 3), (16, 8, 32, 1, 1, 3)],
            "apply_downsample": [False, True],
            "use_lightweight_conv_block": [False, False],
            "image_shape": IMAGE,
        }
    if family == "EfficientNet":
        return {
            "stackwise_kernel_sizes": [3, 3],
            "stackwise_num_repeats": [1, 1],
            "stackwise_input_filters": [8, 8],
            "stackwise_output_filters": [8, 16],
            "stackwise_expansion_ratios": [1, 2],
            "stackwise_squeeze_and_excite_ratios": [0.25, 0.25],
            "stackwise_strides": [1, 2],
            "stackwise_block_types": ["v1", "v1"],
            "width_coefficient": 1.0,
            "depth_coefficient": 1.0,
            # Not num_features: keras-hub 0.32's get_config leaves it out, so a preset reloads at 1280.
            "input_shape": (None, None, 3),
        }
    if family == "MobileNet":
        return {
            "stackwise_expansion": [[16], [32]],
            "stackwise_num_blocks": [1, 1],
            "stackwise_num_filters": [[8], [16]],
            "stackwise_kernel_size": [[3], [3]],
            "stackwise_num_strides": [[2], [2]],
            "stackwise_se_ratio": [[None], [0.25]],
            "stackwise_activation": [["relu"], ["hard_swish"]],
            "stackwise_padding": [[1], [1]],
            "output_num_filters": 32,
            "depthwise_filters": 8,
            "depthwise_stride": 2,
            "depthwise_residual": False,
            "last_layer_filter": 32,
            "squeeze_and_excite": 0.5,
            "image_shape": (None, None, 3),
        }
    if family == "MobileNetV5":
        return {
            "stackwise_block_types": [["er"], ["uir"]],
            "stackwise_num_blocks": [1, 1],
            "stackwise_num_filters": [[8], [16]],
            "stackwise_strides": [[2], [2]],
            "stackwise_act_layers": [["relu"], ["relu"]],
            "stackwise_exp_ratios": [[2.0], [2.0]],
            "stackwise_se_ratios": [[0.0], [0.0]],
            "stackwise_dw_kernel_sizes": [[0], [3]],
            "stackwise_dw_start_kernel_sizes": [[0], [0]],
            "stackwise_dw_end_kernel_sizes": [[0], [0]],
            "stackwise_exp_kernel_sizes": [[3], [0]],
            "stackwise_pw_kernel_sizes": [[1], [0]],
            "stackwise_num_heads": [[0], [0]],
            "stackwise_key_dims": [[0], [0]],
            "stackwise_value_dims": [[0], [0]],
            "stackwise_kv_strides": [[0], [0]],
            "stackwise_use_cpe": [[False], [False]],
            "stem_size": 8,
            "num_features": 32,
            "use_msfa": False,
        }
    if family == "ResNet":
        return {
            "input_conv_filters": [64],
            "input_conv_kernel_sizes": [7],
            "stackwise_num_filters": [64, 16],  # keras-hub insists on 64 first
            "stackwise_num_blocks": [1, 1],
            "stackwise_num_strides": [1, 2],
            "block_type": "basic_block",
        }
    if family == "DenseNet":
        return {"stackwise_num_repeats": [1, 1], "growth_rate": 8}
    if family == "CSPNet":
        return {
            "stem_filters": 16,
            "stem_kernel_size": 3,
            "stem_strides": 1,
            "stackwise_depth": [1, 1],
            "stackwise_strides": [1, 2],
            "stackwise_num_filters": [16, 32],
            "block_type": "bottleneck_block",
            "stage_type": "cs3",
            "expand_ratio": [2.0],  # a cross-stage split needs channels to halve
        }
    if family == "Xception":
        return {"stackwise_conv_filters": [[8, 8], [16, 16]], "stackwise_pooling": [True, False]}
    if family == "VGG":
        return {"stackwise_num_repeats": [1, 1], "stackwise_num_filters": [8, 16]}
    raise KeyError(family)


def write_vision_preset(entry, folder, scale=None, offset=None):
    """A tiny random preset of `entry`'s family in `folder`: its backbone and its own ImageConverter
    at 32 px (`scale`/`offset`: the converter's, keras-hub's defaults when None), both saved with
    keras-hub's `save_to_preset`; the folder."""
    import keras_hub

    backbone = getattr(keras_hub.models, f"{entry.family}Backbone")(**vision_config(entry.family))
    converter = getattr(keras_hub.layers, f"{entry.family}ImageConverter")(
        image_size=(SIZE, SIZE), scale=scale, offset=offset
    )
    backbone.save_to_preset(str(folder))
    converter.save_to_preset(str(folder))  # the preprocessor's converter, the family's own class
    return folder


def sentencepiece_proto(texts: list[str]) -> bytes:
    """A unigram SentencePiece model of `texts`, trained in memory by the `sentencepiece` package, with
    every family's special pieces (ALBERT's <pad>, DeBERTa's [PAD], XLM-R's through its own offsets)."""
    import io

    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_writer=model, vocab_size=40, model_type="unigram",
        pad_id=0, unk_id=1, bos_id=2, eos_id=3, pad_piece="<pad>", unk_piece="<unk>", bos_piece="[CLS]",
        eos_piece="[SEP]", user_defined_symbols="[MASK],[PAD]", hard_vocab_limit=False, minloglevel=2,
    )  # fmt: skip
    return model.getvalue()


def write_text_preset(entry, folder, tokenizer, length: int):
    """A tiny random preset of `entry`'s keras-hub text family in `folder`: a one-layer backbone sized
    to `tokenizer`'s vocabulary and `length` tokens, and the tokenizer, both saved with keras-hub's
    `save_to_preset`; the folder."""
    sizes = {"vocabulary_size": tokenizer.vocabulary_size(), "num_layers": 1, "num_heads": 2,
             "hidden_dim": 16, "intermediate_dim": 32, "max_sequence_length": length}  # fmt: skip
    if entry.family == "Albert":
        sizes["embedding_dim"] = 8
    entry._class("Backbone")(**sizes).save_to_preset(str(folder))
    tokenizer.save_to_preset(str(folder))
    return folder
