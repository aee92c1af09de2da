"""Transfer on a CPU: the cut, the cached views, and a run trained on them that scores the same
on images; the epoch lines and the curves a person reads."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipeline.core.errors import PetalsError
from pipeline.modeling import feature_cache, features, network_cut
from pipeline.modeling.epoch_lines import epoch_header, epoch_line
from pipeline.modeling.inference import predict_split
from pipeline.networks import efficientnet_lite, registry
from pipeline.stages import train
from pipeline.tasks.competitions import check_network
from pipeline.tasks.recipe_config import load_config
from tests.conftest import TINY, TINY_SIZE, competition_of, run_python

# Lite0 with its ImageNet weights at the tiny size, the head and two blocks trained on cached views.
TRANSFER = [
    *TINY,
    "model.backbone=efficientnet-lite0",
    "model.weights=imagenet",
    "train.epochs=2",
    "train.frozen_epochs=1",
    "train.unfrozen_layers=11",
    "train.feature_cache=true",
    "train.feature_views=2",
    "train.steps_per_epoch=0",
]


def test_a_cut_falls_on_a_block_boundary_of_lite0():
    backbone = efficientnet_lite.build("lite0", (64, 64, 3))
    assert network_cut.crossing_layers(backbone, 3) == 3  # the head's conv, BatchNorm and ReLU6
    assert network_cut.crossing_layers(backbone, 11) == 11  # the last block and the head
    assert network_cut.crossing_layers(backbone, 12) == 21  # inside a residual block: up to its start


@pytest.mark.parametrize(("backbone", "unfrozen", "train_backbone"), [("efficientnet-lite0", 11, True),
                                                                      ("efficientnet-lite0", 0, False),
                                                                      ("cnn", 4, True)])  # fmt: skip
def test_bottom_then_top_is_the_whole_classifier(backbone, unfrozen, train_backbone):
    net = registry.build_classifier(backbone, TINY_SIZE, 7)
    cut = network_cut.cut(net, unfrozen, train_backbone)
    pixels = np.random.default_rng(0).uniform(0, 255, (3, TINY_SIZE, TINY_SIZE, 3)).astype("float32")
    np.testing.assert_allclose(cut.top(cut.bottom(pixels)), net(pixels), atol=1e-5)
    assert {id(v) for v in cut.top.weights} <= {id(v) for v in net.weights}  # training top trains net
    assert (cut.at == "head") == (not train_backbone)


def test_cached_training_batches_show_every_example_once_an_epoch_with_its_label():
    views, examples = 3, 40
    # Each cached row says which view and which example it is; the label is the example's index.
    cached = np.stack(
        [np.stack([np.full((2,), v * 100 + i, np.float16) for i in range(examples)]) for v in range(views)]
    )
    split = features.FeatureSplit(cached, np.arange(examples), num_classes=examples, seed=1)
    config = load_config()
    seen, drawn_views = [], set()
    for rows, labels in split.train_dataset(config, 8).take(10):  # two epochs of five batches
        rows = rows.numpy().astype(int)
        assert (rows[:, 0] % 100).tolist() == labels.numpy().tolist()
        drawn_views |= set((rows[:, 0] // 100).tolist())
        seen += labels.numpy().tolist()
    assert sorted(seen[:40]) == sorted(seen[40:]) == list(range(examples))  # every example once an epoch
    assert drawn_views == {0, 1, 2} and seen[:40] != seen[40:]
    padded = list(split.eval_dataset(config, 16, labeled=True, pad_to_batch=True))
    labels = np.concatenate([b[1].numpy() for b in padded])
    assert labels[:40].tolist() == list(range(40)) and labels[40:].tolist() == [-1] * 8


@pytest.mark.slow
def test_a_run_on_cached_views_scores_the_same_when_evaluated_on_images(cpu, tiny_data_dir, tmp_path, caplog):
    caplog.set_level("INFO")
    config = load_config(overrides=TRANSFER)
    job = train.prepare(config, cpu, tiny_data_dir, tmp_path, None, None)
    metrics = train.fit(job, progress=False)
    log = caplog.text
    assert "the network below block15_expand_conv runs once per example and view" in log
    assert "cached train features: 2 views x" in log and "cached val features: 1 views x" in log
    assert not (job.run_dir / features.FOLDER).exists()  # a finished run's cache goes
    # The val score training recorded (on cached activations) is the score of the saved weights on
    # the images themselves, through the whole network.
    competition = competition_of(job.run)
    predictions = predict_split(job.run, competition, tiny_data_dir, "val", 1, cpu, as_scored=False)
    picked = predictions.probabilities[np.arange(len(predictions.labels)), predictions.labels]
    history = pd.read_csv(job.run.history_file)
    best = history.loc[history["val_macro_f1"].idxmax()]
    assert -np.log(np.clip(picked, 1e-7, 1)).mean() == pytest.approx(best["val_loss"], rel=2e-3)
    assert job.spec.metric.score(predictions.labels, predictions.probabilities) == pytest.approx(
        best["val_macro_f1"], abs=1e-3
    )
    assert metrics["epochs"] == 2
    # A kill while the cache was being removed left it for good (the run is finished, so nothing
    # trained it again): the finished run's rerun removes it.
    from pipeline import api

    (job.run_dir / features.FOLDER / "train").mkdir(parents=True)
    (job.run_dir / features.FOLDER / "train" / "pooled-0.npz").write_bytes(b"x" * 1000)
    again = api.TrainOptions(
        data_dir=tiny_data_dir, runs_dir=tmp_path, strategy="cpu", recipe="default", overrides=tuple(TRANSFER)
    )
    assert api.train(again) is None and "is finished" in caplog.text
    assert not (job.run_dir / features.FOLDER).exists() and job.run.finished


@pytest.mark.slow
@pytest.mark.heavy  # a whole chain (`make test-heavy`)
def test_an_interrupted_cached_run_resumes_from_its_cache(cpu, tiny_data_dir, tmp_path, caplog):
    """Stopped (as SIGTERM stops it) once its first epoch is checkpointed: the rerun reads the
    cached features instead of computing them again, and resumes."""
    from pipeline.core.errors import Preempted
    from pipeline.modeling import preemption
    from pipeline.stages import train

    index = tmp_path / "cached" / "checkpoints" / "latest.json"

    class AfterTheFirstCheckpoint(preemption.StopRequest):
        def __call__(self):
            if index.is_file():
                self.reason = self.reason or "a test stop"
            return self.reason

    config = load_config(overrides=[*TRANSFER, "train.epochs=3"])
    with pytest.raises(Preempted):
        train.fit(
            train.prepare(config, cpu, tiny_data_dir, tmp_path, "cached", None),
            0,
            stop=AfterTheFirstCheckpoint(),
        )
    assert (tmp_path / "cached" / features.FOLDER / "train.npz").is_file()
    caplog.set_level("INFO")
    train.fit(train.prepare(config, cpu, tiny_data_dir, tmp_path, "cached", None), progress=False)
    assert "train features cached already" in caplog.text and "resuming" in caplog.text
    assert pd.read_csv(tmp_path / "cached" / "history.csv")["epoch"].tolist() == [1, 2, 3]


@pytest.mark.slow
@pytest.mark.heavy  # JAX compiles a whole ImageNet network
def test_the_feature_cache_trains_under_jax(tiny_data_dir, tmp_path):
    done = run_python(
        f"""
        from pathlib import Path
        from pipeline.core import device
        from pipeline.tasks.recipe_config import load_config
        from pipeline.stages import train
        platform = device.pick("jax", "cpu")
        config = load_config(overrides={TRANSFER!r})
        job = train.prepare(config, platform, Path("{tiny_data_dir}"), Path("{tmp_path}"), "jax", None)
        metrics = train.fit(job, progress=False)
        print("val", metrics["val_macro_f1"], metrics["epochs"])
        """,
        env={"KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "val " in done.stdout and done.stdout.split()[-1] == "2"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["train.feature_cache=true", "train.epochs=3", "train.frozen_epochs=1"],
            "set train.unfrozen_layers",
        ),
        (
            ["train.feature_cache=true", "train.unfrozen_layers=3", "augment.cutmix=0.5"],
            "set augment.cutmix=0",
        ),
        (["train.feature_cache=true", "train.unfrozen_layers=3", "train.feature_views=0"], "at least 1"),
        (["train.feature_cache=true", "train.unfrozen_layers=3", "train.feature_views_up_to=-1"], ">= 0"),
        (["train.unfrozen_layers=-1"], "must be >= 0"),
    ],
)
def test_what_the_cache_cannot_do_is_one_line(overrides, message):
    with pytest.raises(PetalsError, match=message):
        load_config(overrides=overrides)


def test_cached_rows_are_reused_only_for_what_they_were_computed_from(tmp_path):
    """A run dir reused under another config or other data (`--run NAME`) must compute its cache
    again: rows computed at another size, fold, augmentation or from other data are stale."""
    from types import SimpleNamespace

    cut_, split = SimpleNamespace(at="block15", layers=11), SimpleNamespace(count=5)
    config = load_config(overrides=TRANSFER)

    def signature(config, source="sha256:data", pooled=""):
        return feature_cache.signature(cut_, config, split, source, pooled)

    path = tmp_path / "train.npz"
    rows = feature_cache.Rows(np.ones((2, 5, 3), np.float16), np.arange(5), np.array(list("abcde")))
    feature_cache.save(path, rows, signature(config))
    saved = feature_cache.cached(path, signature(config))
    assert saved is not None and np.array_equal(saved.features, rows.features)
    assert np.array_equal(saved.labels, rows.labels) and saved.ids.tolist() == list("abcde")
    for other in (
        ["data.image_size=64"],
        ["augment.zoom=0.3"],
        ["train.folds=5", "train.fold=1"],
        ["seed=1"],
    ):
        changed = load_config(overrides=[*TRANSFER, *other])
        assert feature_cache.cached(path, signature(changed)) is None, other
    assert feature_cache.cached(path, signature(config, "sha256:other")) is None
    # what a finished run would not have trained on: the epochs, the learning rate
    same = load_config(overrides=[*TRANSFER, "train.epochs=5", "train.lr_max=0.01"])
    assert feature_cache.cached(path, signature(same)) is not None
    # A group's pooled cache holds every fold: the same rows whichever fold asks, not other examples'.
    folds = [load_config(overrides=[*TRANSFER, "train.folds=5", f"train.fold={k}"]) for k in (0, 3)]
    assert signature(folds[0], pooled="d1") == signature(folds[1], pooled="d1") != signature(folds[1])
    assert signature(folds[0], pooled="d1") != signature(folds[0], pooled="d2")


@pytest.mark.parametrize(
    ("competition", "overrides", "message"),
    [
        ("imdb", ["train.feature_cache=true", "train.unfrozen_layers=3"], "caches an image backbone's"),
        ("imdb", ["train.unfrozen_layers=3"], "cuts an image backbone; ngrams reads texts"),
        ("watson", ["train.unfrozen_layers=3"], "cuts an image backbone; bert-tiny reads texts"),
        ("imdb", ["train.frozen_epochs=1"], "ngrams has no pretrained part to freeze"),
    ],
)
def test_what_a_text_network_cannot_do_is_one_line(competition, overrides, message):
    from competition import load_spec

    config = load_config("cpu", [f"competition={competition}", *overrides])
    with pytest.raises(PetalsError, match=message):
        check_network(config, load_spec(competition), "tensorflow")


def test_an_epoch_is_a_line_of_fixed_columns_with_dashes_where_val_was_not_scored():
    header = epoch_header("macro-F1")
    scored = {"epoch": 4, "lr": 1e-3, "loss": 0.5, "accuracy": 0.8, "val_loss": 0.4, "val_accuracy": 0.85,
              "val_macro_f1": 0.8312, "images_per_second": 612.4, "seconds": 15.7}  # fmt: skip
    unscored = {
        **scored,
        "epoch": 5,
        "val_loss": float("nan"),
        "val_accuracy": float("nan"),
        "val_macro_f1": None,
    }
    lines = [
        epoch_line(scored, 18, "val_macro_f1", "macro-F1"),
        epoch_line(unscored, 18, "val_macro_f1", "macro-F1"),
    ]
    assert header.split() == ["epoch", "lr", "loss", "acc", "val", "loss", "val", "acc", "val", "macro-F1",
                              "img/s", "s"]  # fmt: skip
    assert lines[0].split() == [
        "4/18",
        "1.00e-03",
        "0.5000",
        "0.8000",
        "0.4000",
        "0.8500",
        "0.8312",
        "612",
        "15.7",
    ]
    assert lines[1].split()[4:7] == ["-", "-", "-"]
    assert len({len(line) for line in [header, *lines]}) == 1  # the columns line up


@pytest.mark.parametrize(
    ("metric", "unit", "accuracy"),
    [("MCRMSE", "ex", "mcrmse"), ("mean column ROC AUC", "ex", "accuracy"), ("RMSE", "img", "rmse")],
)
def test_no_column_title_is_cut_and_the_columns_still_line_up(metric, unit, accuracy):
    # A several-numbers regression trains on `mcrmse`: its columns once read `mcr` and `val mcr`.
    header = epoch_header(metric, unit, accuracy)
    row = {"epoch": 2, "lr": 1e-3, "loss": 0.5, "accuracy": 0.61, "val_loss": 0.4, "val_accuracy": 0.55,
           "val_score": 0.55, "images_per_second": 80.0, "seconds": 3.2}  # fmt: skip
    line = epoch_line(row, 3, "val_score", metric, unit, accuracy)
    shown = "acc" if accuracy == "accuracy" else accuracy  # accuracy alone is shortened, as people do
    assert f" {shown} " in header and f" val {shown} " in header and f" val {metric} " in header
    assert len(header) == len(line)  # the columns line up: each cell ends where its title ends
    assert len(ends(line)) == 9 and ends(line) <= ends(header)


def ends(text: str) -> set[int]:
    """Where each word of a line ends."""
    return {i for i, c in enumerate(text) if c != " " and (i + 1 == len(text) or text[i + 1] == " ")}


def test_the_curves_draw_val_where_it_was_scored(tmp_path):
    history = pd.DataFrame(
        {
            "epoch": [1, 2, 3, 4, 5],
            "loss": [2.0, 1.5, 1.2, 1.0, 0.9],
            "accuracy": [0.3, 0.5, 0.6, 0.7, 0.75],
            "val_loss": [1.8, None, None, 1.1, 1.0],
            "val_accuracy": [0.4, None, None, 0.7, 0.72],
            "val_macro_f1": [0.35, None, None, 0.66, 0.7],
        }
    )
    figure = train.curves_figure(history, "val_macro_f1")
    left, right = figure.axes
    lines = {line.get_label(): line for axes in (left, right) for line in axes.get_lines()}
    assert list(lines["val macro f1"].get_xdata()) == [1, 4, 5]  # joined points, not broken by NaN
    assert list(lines["val loss"].get_ydata()) == [1.8, 1.1, 1.0]
    train.plot_curves(history, tmp_path / "curves.png", "val_macro_f1")
    assert (tmp_path / "curves.png").stat().st_size > 1000
