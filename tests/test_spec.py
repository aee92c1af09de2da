from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import f1_score

from competition import load_spec
from competition.metric import macro_f1

SHARED_CLASSES = Path(__file__).resolve().parents[2] / "shared" / "facts" / "flowers-104-classes.txt"


def test_flowers_spec_matches_the_competition(spec):
    assert spec.num_classes == 104
    assert spec.classes[0] == "pink primrose" and spec.classes[-1] == "wild rose"
    assert "cyclamen" in spec.classes and "hippeastrum" in spec.classes  # trailing spaces stripped
    assert spec.default_slug == "tpu-getting-started"
    assert "flower-classification-with-tpus" in spec.slugs
    assert spec.split_counts == {"train": 12753, "val": 3712, "test": 7382}
    assert spec.resolutions == (192, 224, 331, 512)
    assert spec.is_labeled("train") and spec.is_labeled("val") and not spec.is_labeled("test")
    assert (spec.schema.image, spec.schema.label, spec.schema.id) == ("image", "class", "id")


@pytest.mark.skipif(not SHARED_CLASSES.is_file(), reason="shared/facts not beside the checkout")
def test_class_names_are_the_shared_list_in_order(spec):
    shared = [line.strip() for line in SHARED_CLASSES.read_text().splitlines() if line.strip()]
    assert list(spec.classes) == shared


def test_layout_names_round_trip(spec):
    assert spec.record_dir(331) == "tfrecords-jpeg-331x331"
    assert spec.shard_name(0, 192, 798) == "00-192x192-798.tfrec"
    assert spec.size_from_record_dir("tfrecords-jpeg-512x512") == 512
    assert spec.size_from_record_dir("tfrecords-jpeg-512x224") is None
    assert spec.size_from_record_dir("sample_submission.csv") is None


def test_unknown_competition_is_named():
    with pytest.raises(ValueError, match="unknown competition 'roses'"):
        load_spec("roses")


def test_macro_f1_is_scikit_learns_including_a_class_never_predicted():
    rng = np.random.default_rng(0)
    y_true = rng.integers(0, 10, 500)
    y_pred = np.where(rng.random(500) < 0.7, y_true, rng.integers(0, 10, 500))
    y_pred[y_pred == 3] = 4  # class 3 is never predicted
    assert macro_f1(y_true, y_pred) == pytest.approx(f1_score(y_true, y_pred, average="macro"))
    assert macro_f1([0, 1, 2], [0, 1, 2]) == 1.0
