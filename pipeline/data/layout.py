"""What a competition's data looks like on disk, checked: every split and resolution present,
shard counts that agree with their names, readable first records, a sample submission that lists
the test ids, and a content fingerprint. Works on any tf.io.gfile path (local, `gs://`)."""

from __future__ import annotations

import hashlib

import pandas as pd
import tensorflow as tf

from competition import CompetitionSpec
from pipeline.core.csv_bounds import LABEL_CSV, check_csv_stream
from pipeline.core.errors import PetalsError, first_line
from pipeline.data import competition_files, records
from pipeline.formats.records import records_of


def _check_first_record(path: str, spec: CompetitionSpec, size: int, split: str) -> None:
    """Parse one record of a shard against the split's schema and decode its image."""
    try:
        serialized = next(iter(tf.data.TFRecordDataset(path).take(1))).numpy()
    except StopIteration:
        raise PetalsError(f"{path}: shard holds no records") from None
    features = tf.train.Example.FromString(serialized).features.feature
    schema = records_of(spec).schema
    for key in (schema.image, schema.id):
        if key not in features:
            raise PetalsError(f"{split} record in {path} has no {key!r} feature")
    if spec.is_labeled(split):
        if schema.label not in features:
            raise PetalsError(f"{split} record in {path} has no {schema.label!r} feature (labels missing)")
        label = features[schema.label].int64_list.value[0]
        if not 0 <= label < spec.num_classes:
            raise PetalsError(
                f"{split} record in {path} has class {label}, outside 0..{spec.num_classes - 1}"
            )
    try:
        jpeg = features[schema.image].bytes_list.value[0]
        height, width = (int(v) for v in tf.io.extract_jpeg_shape(jpeg)[:2])  # read before decoding
        if (height, width) != (size, size):
            raise PetalsError(f"{path}: image is {height} x {width} px, expected {size} x {size}")
        image = tf.io.decode_jpeg(jpeg, channels=3)
    except tf.errors.OpError as err:
        raise PetalsError(f"{path}: first image is not a readable JPEG ({first_line(err)})") from None
    if tuple(image.shape) != (size, size, 3):
        raise PetalsError(f"{path}: image is {tuple(image.shape)}, expected ({size}, {size}, 3)")


def found_sizes(root: str, spec: CompetitionSpec) -> list[int]:
    """Resolutions present under a data root, from its folder names."""
    try:
        names = tf.io.gfile.listdir(root)
    except tf.errors.OpError as err:
        raise PetalsError(f"cannot read {root}: {first_line(err)}") from None
    return sorted(s for n in names if (s := records_of(spec).size_from_record_dir(n.rstrip("/"))) is not None)


def verify_layout(
    root: str, spec: CompetitionSpec, sizes: tuple[int, ...] | None = None
) -> dict[int, dict[str, dict[str, int]]]:
    """Check a data root against the spec; return {size: {split: {images, shards}}}.

    Every split present with the spec's number of shards; every shard's record count
    (which reading also checksums) equal to the count in its name; one record per
    split parsed against its schema; sample_submission listing the test ids' count.
    """
    present = found_sizes(root, spec)
    if not present:
        expected = records_of(spec).record_dir_pattern.format(size="<size>")
        raise PetalsError(f"{root}: no {expected} folder: not a {spec.name} data dir")
    missing = sorted(set(sizes or ()) - set(present))
    if missing:
        raise PetalsError(
            f"{root}: no {records_of(spec).record_dir(missing[0])} folder (resolutions present: {present})"
        )
    counts: dict[int, dict[str, dict[str, int]]] = {}
    for size in sizes or tuple(present):
        counts[size] = {}
        for split in spec.splits:
            shards = records.list_shards(root, spec, size, split)
            where = f"{root}/{records_of(spec).record_dir(size)}/{split}"
            if not shards:
                raise PetalsError(f"{where}: split missing (no .tfrec shards)")
            if len(shards) != records_of(spec).shards_per_split:
                raise PetalsError(
                    f"{where}: {len(shards)} shards, expected {records_of(spec).shards_per_split}"
                )
            images = 0
            for path, n in zip(shards, _counts(shards), strict=True):
                named = records.count_from_name(path)
                if named is not None and named != n:
                    raise PetalsError(f"{path}: its name says {named} records but it holds {n}")
                images += n
            _check_first_record(shards[0], spec, size, split)
            counts[size][split] = {"images": images, "shards": len(shards)}
    _check_sample_submission(root, spec, counts)
    return counts


def _counts(shards: list[str]) -> list[int]:
    """Each shard's record count, read in one pass; a corrupt one is named by reading each alone."""
    try:
        return records.count_records_each(shards)
    except tf.errors.OpError:
        for path in shards:
            try:
                records.count_records(path)
            except tf.errors.OpError as err:
                raise PetalsError(f"corrupt shard {path}: {first_line(err)}") from None
        raise


def _check_sample_submission(root: str, spec: CompetitionSpec, counts: dict) -> None:
    path = f"{root.rstrip('/')}/{spec.sample_submission}"
    if not tf.io.gfile.exists(path):
        raise PetalsError(f"{path}: missing")
    with tf.io.gfile.GFile(path, "rb") as f:  # bounded before pandas reads it whole
        check_csv_stream(f, path, f.size(), LABEL_CSV, spec.id_column)
    with tf.io.gfile.GFile(path) as f:
        frame = pd.read_csv(f, dtype=str)
    header = [spec.id_column, *spec.submission_columns]
    if list(frame.columns) != header:
        raise PetalsError(f"{path}: header is {list(frame.columns)}, expected {','.join(header)}")
    test = next(s for s in spec.splits if not spec.is_labeled(s))
    for size, splits in counts.items():
        images = splits[test]["images"]
        if images != len(frame):
            raise PetalsError(
                f"{path}: {len(frame)} rows but the {size}px {test} split holds {images} images"
            )


def data_files(root: str, spec: CompetitionSpec, sizes: list[int], labelled_only: bool = False) -> list[str]:
    """The files a data root is made of: the sample submission and every shard at these
    resolutions; or only the labelled splits' shards."""
    paths = [] if labelled_only else [f"{root.rstrip('/')}/{spec.sample_submission}"]
    for size in sizes:
        for split in spec.splits:
            if spec.is_labeled(split) or not labelled_only:
                paths += records.list_shards(root, spec, size, split)
    return paths


def fingerprints(root: str, spec: CompetitionSpec, sizes: list[int]) -> tuple[str, str]:
    """(every data file's fingerprint, the labelled splits' fingerprint), each file read once: see
    `competition_files.fingerprints`."""
    start = len(root.rstrip("/")) + 1
    digests = {}
    for path in sorted(data_files(root, spec, sizes)):
        file_digest = hashlib.sha256()
        with tf.io.gfile.GFile(path, "rb") as f:
            while chunk := f.read(1 << 22):
                file_digest.update(chunk)
        digests[path[start:]] = file_digest.digest()
    labelled = {path[start:] for path in data_files(root, spec, sizes, labelled_only=True)}
    return competition_files.combine(digests), competition_files.combine(
        {name: d for name, d in digests.items() if name in labelled}
    )


def fingerprint(root: str, spec: CompetitionSpec, sizes: list[int]) -> str:
    """sha256 over the relative path and content of every data file."""
    return fingerprints(root, spec, sizes)[0]
