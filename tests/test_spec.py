from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import f1_score

from competition import load_spec
from competition.metric import macro_f1
from pipeline.formats.base import layout_of
from pipeline.formats.image_folder import image_folder_of
from pipeline.formats.records import records_of
from pipeline.formats.table import tables_of

SHARED_CLASSES = Path(__file__).resolve().parents[2] / "shared" / "facts" / "flowers-104-classes.txt"


def test_flowers_spec_matches_the_competition(spec):
    assert spec.num_classes == 104
    assert spec.classes[0] == "pink primrose" and spec.classes[-1] == "wild rose"
    assert "cyclamen" in spec.classes and "hippeastrum" in spec.classes  # trailing spaces stripped
    assert spec.default_slug == "tpu-getting-started"
    assert "flower-classification-with-tpus" in spec.slugs
    assert spec.split_counts == {"train": 12753, "val": 3712, "test": 7382}
    assert records_of(spec).resolutions == (192, 224, 331, 512)
    assert spec.is_labeled("train") and spec.is_labeled("val") and not spec.is_labeled("test")
    assert (records_of(spec).schema.image, records_of(spec).schema.label, records_of(spec).schema.id) == (
        "image",
        "class",
        "id",
    )


@pytest.mark.skipif(not SHARED_CLASSES.is_file(), reason="shared/facts not beside the checkout")
def test_class_names_are_the_shared_list_in_order(spec):
    shared = [line.strip() for line in SHARED_CLASSES.read_text().splitlines() if line.strip()]
    assert list(spec.classes) == shared


def test_layout_names_round_trip(spec):
    assert records_of(spec).record_dir(331) == "tfrecords-jpeg-331x331"
    assert records_of(spec).shard_name(0, 192, 798) == "00-192x192-798.tfrec"
    assert records_of(spec).size_from_record_dir("tfrecords-jpeg-512x512") == 512
    assert records_of(spec).size_from_record_dir("tfrecords-jpeg-512x224") is None
    assert records_of(spec).size_from_record_dir("sample_submission.csv") is None


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
    # Counted, not asked of scikit-learn: the same on any labels, few or many classes, a class only
    # predicted or only true, one row, unsigned ids.
    for seed in range(200):
        rng = np.random.default_rng(seed)
        n, classes = int(rng.integers(1, 60)), int(rng.integers(1, 12))
        y_true, y_pred = rng.integers(0, classes, n), rng.integers(0, classes + 2, n)
        kind = rng.choice([np.int64, np.uint8])
        y_pred = np.where(rng.random(n) < rng.random(), y_true, y_pred).astype(kind)
        expected = f1_score(y_true, y_pred, average="macro", zero_division=0)
        assert macro_f1(y_true, y_pred) == pytest.approx(expected, rel=1e-12, abs=1e-15), seed
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        macro_f1([0, 1], [0])  # what is not two vectors of class ids is scikit-learn's own, errors too
    names = (["a", "b"], ["a", "a"])
    assert macro_f1(*names) == f1_score(*names, average="macro", zero_division=0)


@pytest.fixture
def scored():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(300, 4))
    labels = np.where(rng.random(300) < 0.6, logits.argmax(1), rng.integers(0, 4, 300))
    probabilities = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    return labels, probabilities


def test_every_metric_is_scikit_learns_on_classes_or_probabilities(scored):
    from sklearn import metrics as sk

    from competition.metric import METRICS

    labels, p = scored
    expected = {
        "macro_f1": sk.f1_score(labels, p.argmax(1), average="macro"),
        "accuracy": sk.accuracy_score(labels, p.argmax(1)),
        "log_loss": sk.log_loss(labels, p),
        "roc_auc": sk.roc_auc_score(labels, p, multi_class="ovr"),
    }
    assert set(METRICS) == set(expected) | {"mean_f1", "mean_column_roc_auc", "rmse", "mae", "mcrmse"}
    for name, value in expected.items():
        assert METRICS[name].score(labels, p) == pytest.approx(value, rel=1e-12), name
    # Rows of labels, each held at 0.5 or more: scikit-learn's F1 per row, averaged over rows.
    rows, held = (p > 0.3).astype(int), p[::-1] >= 0.5
    assert METRICS["mean_f1"].score(rows, p[::-1]) == pytest.approx(
        sk.f1_score(rows, held, average="samples", zero_division=0), rel=1e-12
    )
    binary, p2 = labels % 2, np.stack([1 - p[:, 0], p[:, 0]], axis=1)
    # a binary task scores P(class 1), the one column of its submission
    assert METRICS["log_loss"].score(binary, p2) == pytest.approx(sk.log_loss(binary, p2[:, 1]))
    assert METRICS["roc_auc"].score(binary, p2) == pytest.approx(sk.roc_auc_score(binary, p2[:, 1]))
    assert METRICS["log_loss"].better(0.2, 0.3) and METRICS["roc_auc"].better(0.9, 0.8)


def test_number_metrics_are_scikit_learns_lower_is_better_and_have_an_interval():
    from sklearn import metrics as sk

    from competition.metric import METRICS

    rng = np.random.default_rng(2)
    true = rng.uniform(1, 100, (200, 3))
    predicted = true + rng.normal(0, 5, true.shape)
    rmse, mae, mcrmse = METRICS["rmse"], METRICS["mae"], METRICS["mcrmse"]
    column = true[:, 0], predicted[:, :1]  # one number an example: labels [n], outputs [n, 1]
    assert rmse.score(*column) == pytest.approx(sk.root_mean_squared_error(true[:, 0], predicted[:, 0]))
    assert mae.score(*column) == pytest.approx(sk.mean_absolute_error(true[:, 0], predicted[:, 0]))
    columns = sk.root_mean_squared_error(true, predicted, multioutput="raw_values")
    assert mcrmse.score(true, predicted) == pytest.approx(columns.mean())  # Feedback Prize ELL's
    assert mcrmse.score(true[:, :1], predicted[:, :1]) == pytest.approx(rmse.score(*column))
    assert all(
        m.reads == "number" and not m.greater_is_better and m.better(4.0, 5.0) for m in (rmse, mae, mcrmse)
    )
    low, high = rmse.interval(*column)
    assert low < rmse.score(*column) < high and high - low < 2


def test_two_predictions_of_the_same_rows_are_compared_paired_and_whole_groups_move_together():
    """`Metric.difference`: the second's score less the first's, and a bootstrap over the same draws
    for both. A change confined to one group is judged as one group's worth of evidence."""
    from competition.metric import METRICS

    metric = METRICS["macro_f1"]
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 4, 400)
    first = np.eye(4)[np.where(rng.random(400) < 0.7, labels, rng.integers(0, 4, 400))]
    assert metric.difference(labels, first, first) == (0.0, 0.0, 0.0, 0.0)
    fixed = first.copy()
    wrong = np.flatnonzero(first.argmax(axis=1) != labels)[:40]
    fixed[wrong] = np.eye(4)[labels[wrong]]  # forty of its mistakes put right, nothing else changed
    gap, se, low, high = metric.difference(labels, first, fixed)
    assert gap == pytest.approx(metric.score(labels, fixed) - metric.score(labels, first))
    assert 0 < low < gap < high and 0 < se < (high - low) / 2
    unpaired = metric.interval(labels, first), metric.interval(labels, fixed)
    # pairing cancels what both share: narrower than either run's own interval (two unpaired
    # intervals' difference would be about 1.4 times as wide as one)
    assert high - low < min(hi - lo for lo, hi in unpaired)
    groups = np.arange(400).astype(str)
    groups[wrong] = "one"  # the forty put right are one group's rows: they move together
    _, _, low_grouped, _ = metric.difference(labels, first, fixed, groups)
    assert low_grouped <= 0 < low


def test_a_metric_given_the_wrong_shape_says_so(scored):
    from competition.metric import get_metric

    labels, p = scored
    with pytest.raises(ValueError, match=r"log_loss: probabilities of shape \(300,\) for 300 labels"):
        get_metric("log_loss").score(labels, p[:, 0])
    with pytest.raises(
        ValueError,
        match=r"unknown metric 'auc' \(known: macro_f1, accuracy, log_loss, roc_auc, mean_f1, "
        r"mean_column_roc_auc, rmse, mae, mcrmse\)",
    ):
        get_metric("auc")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (('metric = "macro_f1"', 'metric = "f2"'), "unknown metric 'f2'"),
        (
            ('value = "class"', 'value = "rank"'),
            "submission value 'rank' is not one of class, probability, labels",
        ),
        (("[data.records.schema]", "[data.records.shape]"), "not a competition file .key 'schema'"),
        (
            ('format = "records"', 'format = "folder"'),
            "data format 'folder' is not one of image_csv, image_folder, records, table",
        ),
        (('format = "records"', 'format = "table"'), "not a competition file .key 'table'"),
        (
            ('task = "image_classification"', 'task = "image_classification"\nclasses_file = "x.txt"'),
            "classes_file 'x.txt' cannot be read .No such file",
        ),
    ],
)
def test_a_wrong_competition_file_is_named(tmp_path, edit, message):
    from competition.spec import SPEC_DIR

    text = (SPEC_DIR / "flowers" / "competition.toml").read_text()
    assert edit[0] in text
    path = tmp_path / "odd.toml"
    path.write_text(text.replace(*edit, 1))
    (tmp_path / "classes.txt").write_text((SPEC_DIR / "flowers" / "classes.txt").read_text())
    with pytest.raises(ValueError, match=f"^{path}: {message}"):
        layout_of(load_spec(str(path)))  # the format's table is read by the format


def test_the_flowers_file_says_how_it_is_scored_and_submitted(spec):
    assert spec.metric.name == "macro_f1" and spec.metric.reads == "class"
    assert spec.submission_value == "class"
    assert {"flip", "rotation", "cutmix"} <= spec.keeps_label


COMPETITIONS = sorted(
    p.parent.name
    for p in Path(__file__).resolve().parents[1].joinpath("competition").glob("*/competition.toml")
)


@pytest.mark.parametrize("name", COMPETITIONS)
def test_every_competition_file_loads_and_agrees_with_itself(name):
    """Like a model registry that tests every entry: each file loads, its metric reads what its
    submission holds, every split has its layout, and its transforms are recipe keys."""
    from pipeline.core.config import TRANSFORMS
    from pipeline.formats import FORMATS
    from pipeline.tasks import TASKS
    from pipeline.tasks.competitions import load_competition
    from pipeline.tasks.recipe_config import recipe_path

    spec = load_spec(name)
    assert spec.name == name
    # a class list of two or more; a number's one output column, named as its submission's
    assert spec.num_classes >= 2 or spec.classes == (spec.label_column,)
    if spec.submission_value == "number":  # its outputs: the submission's one column, or one a label column
        assert spec.classes == spec.submission_columns
    else:
        assert spec.num_classes >= 2
    assert spec.format in FORMATS and spec.task in TASKS  # names: the spec is plain data
    competition = load_competition(name)  # its task takes it: the file as every stage loads it
    assert competition.spec is spec and competition.format is FORMATS[spec.format]
    assert competition.task is TASKS[spec.task]
    for device_recipe in ("cpu", "gpu", "tpu"):  # its own, or its task's
        assert recipe_path(device_recipe, competition).is_file()
    assert spec.metric.reads == spec.submission_value, "a class metric needs class ids, and so on"
    assert set(spec.labeled_splits) < set(spec.splits) and set(spec.split_counts) == set(spec.splits)
    assert spec.keeps_label <= set(TRANSFORMS)
    if spec.format == "records":
        assert records_of(spec).resolutions
    elif spec.format == "image_folder":
        for split, folder in image_folder_of(spec).splits.items():
            fields = {"label": spec.classes[-1], "number": 7} if spec.is_labeled(split) else {"id": 7}
            parsed = folder.parse(folder.member(**fields))
            assert parsed == {k: str(v) for k, v in fields.items()}, split
    elif spec.format == "table":
        for split, table in tables_of(spec).splits.items():  # a label column, or [data] label_columns
            labelled = table.layout.label_column is not None or bool(spec.label_columns)
            assert labelled >= spec.is_labeled(split) and (
                table.layout.label_column is None or spec.is_labeled(split)
            )
        assert competition.format.label_reading(spec, competition.layout).columns
    with pytest.raises(ValueError, match=f"competition {name} has {spec.format} data"):
        (tables_of(spec) if spec.format == "records" else records_of(spec))


def test_an_image_folder_member_name_gives_its_label_or_id():
    folders = image_folder_of(load_spec("dogs-vs-cats")).splits
    assert folders["train"].parse("train/cat.12.jpg") == {"label": "cat", "number": "12"}
    assert folders["train"].parse("train/") is None and folders["train"].parse("test/1.jpg") is None
    assert folders["test"].parse("test/12500.jpg") == {"id": "12500"}
    assert folders["test"].archive == "test.zip"


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            ('task = "image_classification"', 'task = "segmentation"'),
            "task 'segmentation' is not one of image_classification, image_regression, "
            "image_table_classification, image_table_regression, multi_label_image_classification, "
            "multi_label_image_table_classification, multi_label_text_classification, "
            "multi_label_text_pair_classification, text_classification, text_pair_classification, "
            "text_pair_regression, text_regression",
        ),
        (
            ('task = "image_classification"', 'task = "text_classification"'),
            "task text_classification reads texts; data format records holds images",
        ),
    ],
)
def test_a_file_its_task_cannot_take_is_named_where_it_meets_the_tasks(tmp_path, edit, message):
    """The spec is data: the task's name is checked where a stage loads the competition."""
    from competition.spec import SPEC_DIR
    from pipeline.core.errors import PetalsError
    from pipeline.tasks.competitions import load_competition

    text = (SPEC_DIR / "flowers" / "competition.toml").read_text()
    path = tmp_path / "odd.toml"
    path.write_text(text.replace(*edit, 1))
    (tmp_path / "classes.txt").write_text((SPEC_DIR / "flowers" / "classes.txt").read_text())
    assert load_spec(str(path)).task == edit[1].split('"')[1]  # the plain file loads
    with pytest.raises(PetalsError, match=f"^competition={path}: {path}: {message}$"):
        load_competition(str(path))
    # Every stage reads its config first: the recipe's lookup meets the task, in the same line.
    from pipeline.tasks.recipe_config import load_config

    with pytest.raises(PetalsError, match=f"^competition={path}: {path}: {message}$"):
        load_config("cpu", [f"competition={path}"])


def test_an_unknown_competition_is_refused_in_one_line():
    from pipeline.core.errors import PetalsError
    from pipeline.tasks.competitions import load_competition

    assert load_competition("imdb").format.name == "table"
    with pytest.raises(PetalsError, match=r"^competition=roses: unknown competition 'roses'"):
        load_competition("roses")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (('"train/{label}.{number}.jpg"', '"{label}.{number}.jpg"'), "name the split's folder first"),
        (('members = "test/{id}.jpg"', 'members = "test/{number}.jpg"'), "has no {id}"),
        (('format = "image_folder"', 'format = "table"'), r"not a competition file \(key 'table'\)"),
    ],
)  # fmt: skip
def test_a_wrong_image_folder_layout_is_named(tmp_path, edit, message):
    from competition.spec import SPEC_DIR

    text = (SPEC_DIR / "dogs-vs-cats" / "competition.toml").read_text()
    assert edit[0] in text
    path = tmp_path / "odd.toml"
    path.write_text(text.replace(*edit))
    (tmp_path / "classes.txt").write_text("cat\ndog\n")
    with pytest.raises(ValueError, match=f"^{path}: .*{message}"):
        layout_of(load_spec(str(path)))  # the spec keeps the table; its format reads it


def test_a_format_table_is_read_as_written_even_where_python_calls_two_equal():
    """The layout is read once per table as written: a spec equal to a good one but for
    `shards_per_split = 16.0` (16 == 16.0 in Python) is refused, not handed the good one's layout."""
    import dataclasses

    spec = load_spec("flowers")
    assert records_of(spec).shards_per_split == 16
    odd = dataclasses.replace(spec, format_table={**spec.format_table, "shards_per_split": 16.0})
    assert odd == spec
    with pytest.raises(ValueError, match=r"shards_per_split '16.0' is not a whole number"):
        layout_of(odd)
