"""An image and its row's numeric columns in: the input part of every image_table task (composed
with each target in pipeline/tasks/composed.py). Pawpularity's photo and its 12 0/1 flags.

Everything an image decides is ImageInput's (sizes, networks, views, grids); what this adds:
- the competition names its columns (`[data] feature_columns`), read from the split's CSV by the
  format (pipeline/formats/feature_columns.py: a bad cell refused in one line naming file, line
  and column) as a second input, `{"image", "columns"}` in every batch (pipeline/data/image_inputs.py);
- augmentation and test-time views touch the image alone; CutMix and MixUp, which would mix two
  images under one row's columns, are refused;
- the network is the image network's pooled features and the standardised columns under one
  head (pipeline/networks/columns.py); `fit_input` sets the standardisation from the training rows.
- the feature cache (`train.feature_cache`) caches the image network's activations alone and the
  columns join them after, in the part that trains (pipeline/modeling/network_cut.py,
  features.py); a CV group's test predictions go through the whole network, not the shared cut
  (pipeline/modeling/cut_predict.py).
"""

from __future__ import annotations

from pipeline.core.errors import PetalsError
from pipeline.tasks.inputs.image import ImageInput


class ImageTableInput(ImageInput):
    """One photo and its row's numbers an example."""

    reads_columns = True

    def check_spec(self, spec) -> None:
        if len(set(spec.feature_columns)) != len(spec.feature_columns):
            raise ValueError(f"[data] feature_columns name a column twice: {', '.join(spec.feature_columns)}")

    def check_network(self, config, spec, backend: str) -> None:
        super().check_network(config, spec, backend)
        mixing = {"augment.cutmix": config.augment.cutmix, "augment.mixup": config.augment.mixup}
        for key, value in mixing.items():
            if value:
                raise PetalsError(
                    f"{key}={value} mixes two images under one row's [data] feature_columns "
                    f"(competition {spec.name} reads them): leave it at 0"
                )

    def fit_input(self, net, train) -> None:
        """The columns' means and variances, from the training rows (their own, pseudo ones too)."""
        from pipeline.networks import columns

        columns.fit_scale(net, train.training_examples.inputs[1])
