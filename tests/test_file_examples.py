"""Image-folder and table competitions read into examples and tf.data batches."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from competition import load_spec
from pipeline.data import file_examples
from pipeline.stages.fetch import FetchOptions, fetch


@pytest.fixture(scope="module")
def fetched(tmp_path_factory) -> dict[str, Path]:
    """Each file-kind competition's embedded dataset, fetched small."""
    root = tmp_path_factory.mktemp("fetched")
    dirs = {}
    for name in ("dogs-vs-cats", "imdb", "watson"):
        dirs[name] = root / name
        options = FetchOptions(source="synthetic", data_dir=dirs[name], scale=0.05, progress=False)
        fetch(options, load_spec(name))
    return dirs


def test_an_image_folder_split_lists_its_images_with_labels_from_their_names(fetched):
    spec = load_spec("dogs-vs-cats")
    train = file_examples.examples(fetched["dogs-vs-cats"], spec, "train")
    assert len(train) == 50 and set(train.labels) == {0, 1}
    for path, label in zip(train.inputs[0], train.labels, strict=True):
        assert Path(path).name.startswith(spec.classes[label] + ".")
    test = file_examples.examples(fetched["dogs-vs-cats"], spec, "test")
    assert test.labels is None and test.ids.tolist() == [str(n) for n in range(1, 26)]  # 2 after 1, not 10


def test_a_table_split_keeps_its_texts_exactly_and_pairs_stay_pairs(fetched):
    reviews = file_examples.examples(fetched["imdb"], load_spec("imdb"), "train")
    assert len(reviews.inputs) == 1 and len(reviews) == 100 and reviews.labels.dtype == np.int64
    pairs = file_examples.examples(fetched["watson"], load_spec("watson"), "test")
    assert len(pairs.inputs) == 2 and pairs.labels is None and len(pairs) == 20


def test_the_held_out_val_split_is_stratified_seeded_and_disjoint(fetched):
    train = file_examples.examples(fetched["watson"], load_spec("watson"), "train")
    kept, val = file_examples.hold_out(train, 0.2, seed=0)
    assert len(kept) + len(val) == len(train) and not set(kept.ids) & set(val.ids)
    for label in range(3):  # a fifth of each class
        assert abs(np.sum(val.labels == label) - 0.2 * np.sum(train.labels == label)) <= 0.5
    again, _ = file_examples.hold_out(train, 0.2, seed=0)
    other, _ = file_examples.hold_out(train, 0.2, seed=1)
    assert again.ids.tolist() == kept.ids.tolist() and other.ids.tolist() != kept.ids.tolist()


def test_photos_of_any_size_come_out_as_static_square_batches(fetched):
    spec = load_spec("dogs-vs-cats")
    train = file_examples.examples(fetched["dogs-vs-cats"], spec, "train")
    batches = file_examples.image_dataset(train, 48, 8, training=True)
    images, labels = next(iter(batches))
    assert images.shape == (8, 48, 48, 3) and images.dtype.name == "uint8" and labels.shape == (8,)
    test = file_examples.examples(fetched["dogs-vs-cats"], spec, "test")
    ids = np.concatenate(
        [tags.numpy() for _, tags in file_examples.image_dataset(test, 48, 8, training=False)]
    )
    assert [i.decode() for i in ids] == test.ids.tolist()  # every test image once, in order


def test_text_batches_carry_strings_and_pairs(fetched):
    pairs = file_examples.examples(fetched["watson"], load_spec("watson"), "train")
    (premise, hypothesis), labels = next(iter(file_examples.text_dataset(pairs, 4, training=False)))
    assert premise.shape == hypothesis.shape == labels.shape == (4,)
    assert premise.numpy()[0].decode() == pairs.inputs[0][0]
