"""Training augmentation as batch-level TensorFlow ops, the same code on the host and the device.

Every function takes a batch `[n, h, w, 3]` of float32 pixels in [0, 255], is correct at any
size (odd ones such as 331 included) and keeps shape and range. Nothing here loops over the
images of a batch: each augmentation draws per-image parameters as vectors and applies them
in one op (one projective transform, one einsum, one mask), which is what makes host
augmentation affordable on few cores. Under XLA (`xla=True`: TPUs, jit-compiled steps) the
affine transform samples with batched gathers, because TF's projective-transform op has no
XLA kernel; both samplers map coordinates the same way.
"""

from __future__ import annotations

import math

import tensorflow as tf

from pipeline.core.config import AugmentConfig
from pipeline.core.errors import PetalsError
from pipeline.data import targets
from pipeline.data.image_inputs import image_of, with_image

# ITU-R 601 luma weights, as in tf.image.rgb_to_grayscale / adjust_saturation.
_LUMA = (0.299, 0.587, 0.114)
_RGB_TO_YIQ = ((0.299, 0.587, 0.114), (0.596, -0.274, -0.322), (0.211, -0.523, 0.312))
_GAMMA_TRIALS = 8  # Marsaglia-Tsang candidates per sample; all rejected has probability < 1e-10


# ----------------------------------------------------------------------------- where


def placement(where: str, backend: str, device: str) -> str:
    """Where augmentation runs: `host` (tf.data) or `device` (the train step), for `augment.where`.

    `auto` puts it on the device for TensorFlow on an accelerator (a few host cores then only
    decode), and on the host otherwise: on the CPU, where tf.data's parallel XLA-compiled map was
    the faster place (docs/BENCHMARKS.md), and on JAX, whose jitted step runs no TensorFlow ops;
    a TPU VM's host has dozens of cores for tf.data, as JAX's own input pipelines use them.
    """
    if where == "device" and backend == "jax":
        raise PetalsError(
            "augment.where=device: on the JAX backend augmentation runs in tf.data on the host "
            "(the jitted step runs no TensorFlow ops); use augment.where=auto or host"
        )
    if where != "auto":
        return where
    return "device" if backend == "tensorflow" and device != "CPU" else "host"


# ----------------------------------------------------------------------------- affine


def affine_transforms(n: tf.Tensor, size: int, aug: AugmentConfig, shift_scale: float = 1.0) -> tf.Tensor:
    """`[n, 8]` projective transforms (output pixel -> input pixel), one random affine map per image.

    Composes, about the image centre: flips, rotation, shear, zoom (independent in x and y;
    > 1 magnifies) and shift, all drawn per image. The rotation, shear and shift scales are
    standard deviations, as in the public kernels' recipe. `shift` is in pixels of the records;
    `shift_scale` (model input size / record size) converts it when the images were resized.
    """
    deg = math.pi / 180.0
    rotation = aug.rotation * deg * tf.random.normal([n])
    shear = aug.shear * deg * tf.random.normal([n])
    zoom_x = 1.0 + aug.zoom * tf.random.normal([n])
    zoom_y = 1.0 + aug.zoom * tf.random.normal([n])
    shift_x = aug.shift * shift_scale * tf.random.normal([n])
    shift_y = aug.shift * shift_scale * tf.random.normal([n])
    # A flip is a sign on the sampling axis: free inside the same transform.
    flip_x = _random_sign(n) if aug.flip else tf.ones([n])
    flip_y = _random_sign(n) if aug.flip_vertical else tf.ones([n])
    # Keep zoom positive and bounded: a normal draw may land anywhere.
    zoom_x = tf.clip_by_value(zoom_x, 0.5, 2.0)
    zoom_y = tf.clip_by_value(zoom_y, 0.5, 2.0)
    cos, sin = tf.cos(rotation), tf.sin(rotation)
    tan = tf.tan(shear)
    sx, sy = flip_x / zoom_x, flip_y / zoom_y
    # A = rotation . shear . diag(sx, sy): maps centred output coordinates to centred input ones.
    a00, a01 = cos * sx, (cos * tan - sin) * sy
    a10, a11 = sin * sx, (sin * tan + cos) * sy
    centre = (size - 1) / 2.0  # pixel centres sit on integer coordinates
    a02 = centre - a00 * centre - a01 * centre - shift_x
    a12 = centre - a10 * centre - a11 * centre - shift_y
    zeros = tf.zeros([n])
    return tf.stack([a00, a01, a02, a10, a11, a12, zeros, zeros], axis=1)


def _random_sign(n: tf.Tensor) -> tf.Tensor:
    return tf.where(tf.random.uniform([n]) < 0.5, -1.0, 1.0)


def transform(
    images: tf.Tensor, transforms: tf.Tensor, interpolation: str, fill_mode: str, xla: bool = False
) -> tf.Tensor:
    """Apply one affine transform per image: TF's projective-transform op, or gathers under XLA."""
    if not xla:
        return tf.raw_ops.ImageProjectiveTransformV3(
            images=images,
            transforms=transforms,
            output_shape=tf.shape(images)[1:3],
            interpolation=interpolation.upper(),
            fill_mode=fill_mode.upper(),
            fill_value=0.0,
        )
    return _transform_by_gather(images, transforms, interpolation, fill_mode)


def _map_coordinate(coord: tf.Tensor, length: int, fill_mode: str) -> tf.Tensor:
    """Where a sampling coordinate outside [0, length - 1] reads from (TF's op's rules)."""
    size = float(length)
    if fill_mode == "reflect":  # (d c b a | a b c d | d c b a)
        coord = tf.math.floormod(coord, 2.0 * size)
        coord = tf.where(coord >= size, 2.0 * size - coord - 1.0, coord)
    elif fill_mode == "constant":
        return coord  # out-of-range samples read the fill value (0)
    return tf.clip_by_value(coord, 0.0, size - 1.0)


def _transform_by_gather(
    images: tf.Tensor, transforms: tf.Tensor, interpolation: str, fill_mode: str
) -> tf.Tensor:
    """The projective-transform op's affine case with batched gathers (compiles under XLA)."""
    n = tf.shape(images)[0]
    height, width, channels = images.shape[1], images.shape[2], images.shape[3]
    ys, xs = tf.meshgrid(tf.range(height, dtype=tf.float32), tf.range(width, dtype=tf.float32), indexing="ij")
    grid = tf.stack([tf.reshape(xs, [-1]), tf.reshape(ys, [-1]), tf.ones([height * width])], axis=0)
    matrix = tf.reshape(transforms[:, :6], [n, 2, 3])
    source = tf.einsum("nij,jp->nip", matrix, grid)  # [n, 2, pixels]: (x, y) read for each output pixel
    src_x = _map_coordinate(source[:, 0], width, fill_mode)
    src_y = _map_coordinate(source[:, 1], height, fill_mode)
    flat = tf.reshape(images, [n, height * width, channels])

    def read(y: tf.Tensor, x: tf.Tensor) -> tf.Tensor:
        inside = (x >= 0) & (x <= width - 1) & (y >= 0) & (y <= height - 1)
        index = tf.cast(
            tf.clip_by_value(y, 0, height - 1) * width + tf.clip_by_value(x, 0, width - 1), tf.int32
        )
        values = tf.gather(flat, index, batch_dims=1)
        return values * tf.cast(inside, values.dtype)[..., None]  # outside reads the fill value, 0

    if interpolation == "nearest":
        out = read(tf.floor(src_y + 0.5), tf.floor(src_x + 0.5))
    else:
        x0, y0 = tf.floor(src_x), tf.floor(src_y)
        wx, wy = (src_x - x0)[..., None], (src_y - y0)[..., None]
        top = (1.0 - wx) * read(y0, x0) + wx * read(y0, x0 + 1.0)
        bottom = (1.0 - wx) * read(y0 + 1.0, x0) + wx * read(y0 + 1.0, x0 + 1.0)
        out = (1.0 - wy) * top + wy * bottom
    return tf.reshape(out, [n, height, width, channels])


def has_geometry(aug: AugmentConfig) -> bool:
    """Whether the affine map does more than flip, so that pixels must be resampled."""
    return any((aug.rotation, aug.shear, aug.zoom, aug.shift))


def random_flips(images: tf.Tensor, aug: AugmentConfig) -> tf.Tensor:
    """Flips alone: each image reversed along its axis or left as it is, no resampling.

    Exact at any size and dtype, and far cheaper than sampling the same flips as an affine map:
    the CPU recipe's cached training batches come 9x faster (`make bench-input`, cpu-recipe).
    """
    n = tf.shape(images)[0]
    for wanted, axis in ((aug.flip, 2), (aug.flip_vertical, 1)):
        if wanted:
            mirror = tf.random.uniform([n, 1, 1, 1]) < 0.5
            images = tf.where(mirror, tf.reverse(images, [axis]), images)
    return images


# ----------------------------------------------------------------------------- colour


def colour_matrices(n: tf.Tensor, aug: AugmentConfig) -> tf.Tensor:
    """`[n, 3, 3]` per-image colour maps combining saturation and hue (both linear in RGB)."""
    luma = tf.constant([_LUMA], tf.float32)  # [1, 3]
    saturation = 1.0 + tf.random.uniform([n, 1, 1], -aug.saturation, aug.saturation)
    # Saturation mixes each pixel with its grey: s * I + (1 - s) * (1 . luma).
    sat = saturation * tf.eye(3)[None] + (1.0 - saturation) * tf.ones([3, 1]) @ luma
    if not aug.hue:
        return sat
    # Hue turns the chroma plane (I, Q of YIQ) about the grey axis.
    angle = 2.0 * math.pi * tf.random.uniform([n], -aug.hue, aug.hue)
    cos, sin = tf.cos(angle), tf.sin(angle)
    ones, zeros = tf.ones([n]), tf.zeros([n])
    turn = tf.reshape(tf.stack([ones, zeros, zeros, zeros, cos, -sin, zeros, sin, cos], axis=1), [n, 3, 3])
    to_yiq = tf.constant(_RGB_TO_YIQ, tf.float32)
    return tf.linalg.inv(to_yiq)[None] @ turn @ to_yiq[None] @ sat


def colour_jitter(images: tf.Tensor, aug: AugmentConfig) -> tf.Tensor:
    """Brightness, contrast, saturation and hue in one einsum per batch.

    out = c * M (x - mean) + M mean + b, with M the saturation/hue map, c the contrast
    factor about each image's channel means and b the brightness shift.
    """
    n = tf.shape(images)[0]
    matrix = colour_matrices(n, aug)  # [n, 3, 3]
    contrast = 1.0 + tf.random.uniform([n, 1, 1], -aug.contrast, aug.contrast)
    brightness = 255.0 * tf.random.uniform([n, 1, 1], -aug.brightness, aug.brightness)
    mean = tf.reduce_mean(images, axis=[1, 2])[:, None, :]  # [n, 1, 3]
    mapped_mean = tf.einsum("nkc,ndc->nkd", mean, matrix)
    offset = (1.0 - contrast) * mapped_mean + brightness  # [n, 1, 3]
    out = tf.einsum("nhwc,ndc->nhwd", images, contrast * matrix)
    return tf.clip_by_value(out + offset[:, :, None, :], 0.0, 255.0)


def has_colour(aug: AugmentConfig) -> bool:
    return any((aug.brightness, aug.contrast, aug.saturation, aug.hue))


# ----------------------------------------------------------------------------- occlusion


def _pixel_grid(height: int, width: int) -> tuple[tf.Tensor, tf.Tensor]:
    """Row and column index of every pixel, shaped `[1, h, 1]` and `[1, 1, w]` for broadcasting."""
    rows = tf.range(height, dtype=tf.float32)[None, :, None]
    cols = tf.range(width, dtype=tf.float32)[None, None, :]
    return rows, cols


def _box_masks(n: tf.Tensor, height: int, width: int, box_h: tf.Tensor, box_w: tf.Tensor) -> tf.Tensor:
    """`[n, h, w]` booleans: one box of the given sides per image, placed uniformly inside it."""
    top = tf.random.uniform([n]) * (height - box_h)
    left = tf.random.uniform([n]) * (width - box_w)
    rows, cols = _pixel_grid(height, width)
    in_rows = (rows >= top[:, None, None]) & (rows < (top + box_h)[:, None, None])
    in_cols = (cols >= left[:, None, None]) & (cols < (left + box_w)[:, None, None])
    return in_rows & in_cols


def random_erasing(images: tf.Tensor, probability: float, max_area: float) -> tf.Tensor:
    """Replace one rectangle (2% to `max_area` of the image, aspect 1:3 to 3:1) with noise."""
    n = tf.shape(images)[0]
    height, width = images.shape[1], images.shape[2]
    area = tf.random.uniform([n], min(0.02, max_area), max_area) * height * width
    aspect = tf.exp(tf.random.uniform([n], math.log(1 / 3), math.log(3)))
    box_h = tf.minimum(tf.sqrt(area * aspect), float(height))
    box_w = tf.minimum(tf.sqrt(area / aspect), float(width))
    mask = _box_masks(n, height, width, box_h, box_w) & (tf.random.uniform([n]) < probability)[:, None, None]
    noise = tf.random.uniform(tf.shape(images), 0.0, 255.0)
    return tf.where(mask[..., None], noise, images)


def grid_mask(images: tf.Tensor, probability: float, ratio: float) -> tf.Tensor:
    """GridMask: zero a regular grid of squares (cell 1/7 to 1/3 of the side, random offset)."""
    n = tf.shape(images)[0]
    height, width = images.shape[1], images.shape[2]
    side = float(min(height, width))
    cell = tf.floor(tf.random.uniform([n], side / 7, side / 3))[:, None, None]
    drop = ratio * cell
    offset_y = tf.random.uniform([n])[:, None, None] * cell
    offset_x = tf.random.uniform([n])[:, None, None] * cell
    rows, cols = _pixel_grid(height, width)
    dropped = (tf.math.floormod(rows + offset_y, cell) < drop) & (
        tf.math.floormod(cols + offset_x, cell) < drop
    )
    mask = dropped & (tf.random.uniform([n]) < probability)[:, None, None]
    return tf.where(mask[..., None], 0.0, images)


# ----------------------------------------------------------------------------- mixing


def sample_gamma(n: tf.Tensor, alpha: float) -> tf.Tensor:
    """`[n]` Gamma(alpha, 1) draws by Marsaglia-Tsang with a fixed number of candidates.

    tf.random.gamma has no XLA kernel; this compiles anywhere and is exact unless all
    candidates of a draw are rejected (probability below 1e-10), when it returns the mode.
    """
    boost = alpha < 1.0  # Gamma(a) = Gamma(a + 1) * U^(1/a)
    a = alpha + 1.0 if boost else alpha
    d = a - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    x = tf.random.normal([n, _GAMMA_TRIALS])
    v = tf.maximum((1.0 + c * x) ** 3, 1e-12)
    u = tf.random.uniform([n, _GAMMA_TRIALS])
    accept = (1.0 + c * x > 0) & (tf.math.log(u) < 0.5 * x * x + d - d * v + d * tf.math.log(v))
    first = tf.argmax(tf.cast(accept, tf.int32), axis=1, output_type=tf.int32)  # first accepted
    value = d * tf.gather(v, first[:, None], batch_dims=1)[:, 0]
    value = tf.where(tf.reduce_any(accept, axis=1), value, d)
    if boost:
        value *= tf.random.uniform([n]) ** (1.0 / alpha)
    return value


def sample_beta(n: tf.Tensor, alpha: float) -> tf.Tensor:
    """Beta(alpha, alpha) draws, `[n]`."""
    if alpha == 1.0:
        return tf.random.uniform([n])
    x, y = sample_gamma(n, alpha), sample_gamma(n, alpha)
    return x / tf.maximum(x + y, 1e-12)


def cutmix_mixup(images: tf.Tensor, labels: tf.Tensor, aug: AugmentConfig) -> tuple[tf.Tensor, tf.Tensor]:
    """Mix each image with a random partner from the batch; soft labels follow the pixel shares.

    Per image: CutMix with probability `cutmix` (a box of the partner pasted in), else MixUp
    with probability `mixup` (a blend), else unchanged. Labels are one-hot `[n, classes]`; each
    image's label is (its kept share) x own + (1 - share) x partner's, so every row sums to 1.
    """
    n = tf.shape(images)[0]
    height, width = images.shape[1], images.shape[2]
    partner = tf.argsort(tf.random.uniform([n]))  # a random permutation (XLA-friendly)
    share = sample_beta(n, aug.mix_alpha)  # share of the image kept
    choice = tf.random.uniform([n])
    use_cutmix = choice < aug.cutmix
    use_mixup = ~use_cutmix & (choice < aug.cutmix + aug.mixup)
    cut = tf.sqrt(1.0 - share)  # the box's side, as a fraction, so its area is 1 - share
    box = _centred_boxes(n, height, width, cut * height, cut * width)
    # Per-pixel weight of the image's own pixels: 1 - box for CutMix, share for MixUp, 1 otherwise.
    keep = tf.where(use_cutmix[:, None, None], 1.0 - tf.cast(box, tf.float32), 1.0)
    keep = tf.where(use_mixup[:, None, None], share[:, None, None], keep)[..., None]
    mixed = keep * images + (1.0 - keep) * tf.gather(images, partner)
    kept_share = tf.reduce_mean(keep, axis=[1, 2, 3])[:, None]  # exact, after the box is clipped
    soft = kept_share * labels + (1.0 - kept_share) * tf.gather(labels, partner)
    return mixed, soft


def _centred_boxes(n: tf.Tensor, height: int, width: int, box_h: tf.Tensor, box_w: tf.Tensor) -> tf.Tensor:
    """CutMix boxes: a uniformly placed centre, the box clipped to the image."""
    centre_y = tf.random.uniform([n]) * height
    centre_x = tf.random.uniform([n]) * width
    rows, cols = _pixel_grid(height, width)
    in_rows = tf.abs(rows + 0.5 - centre_y[:, None, None]) < (box_h / 2)[:, None, None]
    in_cols = tf.abs(cols + 0.5 - centre_x[:, None, None]) < (box_w / 2)[:, None, None]
    return in_rows & in_cols


def mixes_labels(aug: AugmentConfig) -> bool:
    """Whether training labels are soft (one-hot mixes) rather than class indices."""
    return aug.cutmix > 0 or aug.mixup > 0


# ----------------------------------------------------------------------------- the batch


def augment_batch(
    images: tf.Tensor,
    labels: tf.Tensor,
    aug: AugmentConfig,
    num_classes: int,
    xla: bool = False,
    shift_scale: float = 1.0,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Every enabled augmentation on one batch: float32 images in [0, 255], labels.

    Labels come in as class indices and leave as indices, or as soft one-hot rows when
    CutMix/MixUp is on.
    """
    if not has_geometry(aug):
        images = random_flips(images, aug)  # on the incoming pixels (uint8: a quarter of the bytes)
    images = tf.cast(images, tf.float32)
    size = images.shape[1]
    if has_geometry(aug):
        transforms = affine_transforms(tf.shape(images)[0], size, aug, shift_scale)
        images = transform(images, transforms, aug.interpolation, aug.fill_mode, xla=xla)
    if has_colour(aug):
        images = colour_jitter(images, aug)
    if aug.erasing:
        images = random_erasing(images, aug.erasing, aug.erasing_area)
    if aug.gridmask:
        images = grid_mask(images, aug.gridmask, aug.gridmask_ratio)
    if mixes_labels(aug):
        images, labels = cutmix_mixup(images, targets.dense_tf(labels, num_classes), aug)
    return images, labels


def augment_inputs(
    inputs,
    labels: tf.Tensor,
    aug: AugmentConfig,
    num_classes: int,
    xla: bool = False,
    shift_scale: float = 1.0,
):
    """`augment_batch` on the inputs' pixels alone: an image_table batch's columns pass as they are."""
    images, labels = augment_batch(image_of(inputs), labels, aug, num_classes, xla, shift_scale)
    return with_image(inputs, images), labels
