"""A `gs://` (or any tf.io.gfile) folder of TFRecords: copied into the data dir, or read in place."""

from __future__ import annotations

from pathlib import Path

from pipeline.core.errors import PetalsError, first_line
from pipeline.core.paths import inside, shown
from pipeline.core.progress import Progress
from pipeline.data.sources.base import Context, Got, Source, register

GCS_PATH_VARIABLE = "PETALS_GCS_PATH"


def copy_tree(source_root: str, dest: Path, spec, sizes: list[int], progress: bool) -> None:
    """Copy the data files listed under `source_root` into `dest`, keeping their relative paths.
    Object names are the bucket owner's to choose: every one is checked to stay inside `dest`
    before the first copy."""
    import tensorflow as tf

    from pipeline.data.layout import data_files

    prefix = source_root.rstrip("/") + "/"
    targets = []
    for path in data_files(source_root, spec, sizes):
        where = f"listing of {source_root}"
        if not path.startswith(prefix):
            raise PetalsError(f"{where}: object name {shown(path)} is not under it")
        targets.append((path, inside(dest, path[len(prefix) :], "object name", where)))
    with Progress(f"copying from {source_root}", len(targets), "files", enabled=progress) as bar:
        for path, target in targets:
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                tf.io.gfile.copy(path, str(target), overwrite=True)
            except tf.errors.OpError as err:
                raise PetalsError(f"cannot copy {path}: {first_line(err)}") from None
            bar.advance()


# The formats a bucket is read in: the TPU competitions' shards, which Kaggle serves from GCS
# (KaggleDatasets().get_gcs_path()) and TPUs read in place.
READS = ("records",)


@register
class Gcs(Source):
    name = "gcs"
    priority = 30

    def auto_reason(self, context: Context) -> str | None:
        path = context.options.gcs_path
        return f"a GCS path was given ({path})" if path else None

    def get(self, context: Context, staging: Path) -> Got:
        options, spec = context.options, context.spec
        if spec.format not in READS:
            raise PetalsError(f"--source gcs reads TFRecords; competition {spec.name} has {spec.format} data")
        if not options.gcs_path:
            raise PetalsError(f"--source gcs needs --gcs-path gs://... (or the {GCS_PATH_VARIABLE} variable)")
        from pipeline.data.layout import found_sizes  # TensorFlow's file system: on a bucket only

        remote = options.gcs_path.rstrip("/")
        sizes = options.sizes or tuple(found_sizes(remote, spec))
        if options.gcs_in_place:
            return Got(remote, remote, sizes)
        copy_tree(remote, staging, spec, list(sizes), options.progress)
        return Got(str(staging), remote, sizes)
