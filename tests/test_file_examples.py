"""Image-folder and table competitions read into examples and tf.data batches."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from competition import load_spec
from pipeline.core.errors import PetalsError
from pipeline.data import file_examples, splits
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


def test_the_held_out_val_fold_is_stratified_fixed_and_disjoint(fetched):
    train = file_examples.examples(fetched["watson"], load_spec("watson"), "train")
    kept, val = (train.take(rows) for rows in splits.held_out(train.labels, 5, 0))
    assert len(kept) + len(val) == len(train) and not set(kept.ids) & set(val.ids)
    for label in range(3):  # a fifth of each class
        assert abs(np.sum(val.labels == label) - 0.2 * np.sum(train.labels == label)) <= 1
    again, _ = splits.held_out(train.labels, 5, 0)
    _, other_val = splits.held_out(train.labels, 5, 1)
    assert train.ids[again].tolist() == kept.ids.tolist() and not set(val.ids) & set(train.ids[other_val])
    held = np.concatenate([train.ids[splits.held_out(train.labels, 5, k)[1]] for k in range(5)])
    assert sorted(held) == sorted(train.ids)  # the folds cover train once


def test_a_val_split_that_cannot_be_stratified_is_refused_in_one_line():
    """Eight photos of each class cannot be dealt into ten stratified parts: one line, never
    scikit-learn's traceback (a user's first small folder of photos)."""
    with pytest.raises(PetalsError, match=r"24 labelled examples, at most 8 of a class: .* needs 10"):
        splits.held_out(np.arange(24) % 3, 10, 0)
    kept, held = splits.held_out(np.arange(30) % 3, 10, 0)
    assert len(held) == 3 and len(kept) == 27


def test_photos_of_any_size_come_out_as_static_square_batches(fetched):
    spec = load_spec("dogs-vs-cats")
    train = file_examples.examples(fetched["dogs-vs-cats"], spec, "train")
    batches = file_examples.file_dataset(train, 8, training=True, image_size=48)
    images, labels = next(iter(batches))
    assert images.shape == (8, 48, 48, 3) and images.dtype.name == "uint8" and labels.shape == (8,)
    test = file_examples.examples(fetched["dogs-vs-cats"], spec, "test")
    batches = file_examples.file_dataset(test, 8, training=False, image_size=48, pad_to_batch=True)
    ids = np.concatenate([tags.numpy() for _, tags in batches])
    assert len(ids) == 32 and [i.decode() for i in ids[:25]] == test.ids.tolist()  # every test image once
    assert set(ids[25:]) == {b""}  # then padding to full batches


def test_labelled_batches_can_carry_their_ids_and_padding_has_label_minus_one(fetched):
    train = file_examples.examples(fetched["imdb"], load_spec("imdb"), "train")
    batches = list(file_examples.file_dataset(train, 64, training=False, pad_to_batch=True, with_ids=True))
    texts, labels, ids = (np.concatenate([b[k].numpy() for b in batches]) for k in range(3))
    assert len(texts) == 128 and labels[100:].tolist() == [-1] * 28 and ids[99].decode() == train.ids[99]
    assert set(texts[100:]) == {texts[0]}  # padding texts copy the first: no all-padding token row


def test_cached_training_batches_mix_the_classes_though_train_lists_all_cats_first(fetched):
    train = file_examples.examples(fetched["dogs-vs-cats"], load_spec("dogs-vs-cats"), "train")
    assert train.labels[:25].tolist() == [0] * 25  # cat.0 ... before dog.0 ...
    batches = file_examples.file_dataset(
        train, 16, training=True, image_size=16, cache=True, shuffle_buffer=1
    )
    _, labels = next(iter(batches))  # a buffer of one: the order drawn before the cache
    assert set(labels.numpy().tolist()) == {0, 1}


def test_text_batches_carry_strings_and_pairs(fetched):
    pairs = file_examples.examples(fetched["watson"], load_spec("watson"), "train")
    (premise, hypothesis), labels = next(iter(file_examples.file_dataset(pairs, 4, training=False)))
    assert premise.shape == hypothesis.shape == labels.shape == (4,)
    assert premise.numpy()[0].decode() == pairs.inputs[0][0]


def test_a_photo_with_a_good_header_and_a_broken_body_is_named_in_one_line(fetched, tmp_path):
    import shutil

    from pipeline.core.errors import PetalsError
    from pipeline.data import splits
    from pipeline.tasks import recipe_config

    spec = load_spec("dogs-vs-cats")
    root = tmp_path / "data"
    shutil.copytree(fetched["dogs-vs-cats"], root)
    config = recipe_config.load_config("cpu", ["competition=dogs-vs-cats", "data.image_size=32"])
    _, val = splits.train_and_val(str(root), spec, config)
    broken = Path(val.examples.inputs[0][3])
    body = broken.read_bytes()
    broken.write_bytes(body[:200] + bytes(len(body) - 200))  # the header stays, the scan data is zeros
    batches = val.eval_dataset(config, 8, labeled=True)
    with pytest.raises(PetalsError, match=rf"^{broken}: does not decode \("), val.naming_bad(labeled=True):
        for _ in batches:
            pass
