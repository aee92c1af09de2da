"""The competitions beyond flowers through the chain on their embedded data, tiny: train, evaluate
with the competition's metric, predict, a submission checked against the sample, submit's dry run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn import metrics as sk

from competition import load_spec
from pipeline.core.errors import PetalsError
from pipeline.modeling.inference import Predictions, predict_split
from pipeline.networks import bert
from pipeline.runs.submission_files import sample_ids, write_submission
from pipeline.stages import evaluate, leaderboard, train
from pipeline.stages.fetch import FetchOptions, fetch
from pipeline.tasks.competitions import check_network, check_submission, load_competition, task_of
from pipeline.tasks.recipe_config import load_config
from tests.conftest import REPO, competition_of, kept_score, run_cli

# Recipes that train in seconds; the rest is each competition's own cpu recipe.
TINY = {
    "dogs-vs-cats": ["data.image_size=32", "data.batch_size=8", "train.epochs=2", "train.steps_per_epoch=4"],
    "imdb": [
        "data.batch_size=8",
        "data.sequence_length=32",
        "data.vocabulary_size=300",
        "train.epochs=2",
        "train.steps_per_epoch=6",
    ],
    "watson": [
        "data.batch_size=8",
        "data.sequence_length=32",
        "data.vocabulary_size=300",
        "train.epochs=2",
        "train.steps_per_epoch=6",
    ],
}
# A tiny preset's WordPiece vocabulary: words of the embedded pairs, the rest [UNK].
PRESET_WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", "the", "a", "is", "in", "on", "at"]
PRESET_WORDS += ["paris", "london", "monday", "##s", "##ed", "was", "not", "le", "la", "el", "en"]
BACKBONES = {
    "dogs-vs-cats": "efficientnet-lite0",
    "imdb": "ngrams",
    "watson": "bert-tiny",
}  # each one's cpu recipe
SKLEARN = {  # each metric as scikit-learn computes it from the saved val predictions
    "log_loss": lambda labels, p: sk.log_loss(labels, p[:, 1], labels=[0, 1]),
    "roc_auc": lambda labels, p: sk.roc_auc_score(labels, p[:, 1]),
    "accuracy": lambda labels, p: sk.accuracy_score(labels, p.argmax(axis=1)),
}


class _Fetched(dict):
    """{name: its data dir}, each competition's embedded data fetched when first asked for: the
    suite's workers share the parametrised tests out, and one that runs only Dogs vs. Cats' chain
    draws only its photos (3 CPU-seconds), not every competition's."""

    def __init__(self, root: Path):
        super().__init__()
        self.root = root

    def __missing__(self, name: str) -> Path:
        options = FetchOptions(source="synthetic", data_dir=self.root / name, scale=0.1, progress=False)
        fetch(options, load_spec(name))
        self[name] = self.root / name
        return self[name]


@pytest.fixture(scope="module")
def fetched(tmp_path_factory):
    return _Fetched(tmp_path_factory.mktemp("competitions"))


@pytest.mark.slow
@pytest.mark.parametrize("name", list(TINY))
def test_a_competition_trains_scores_with_its_own_metric_and_writes_a_valid_submission(
    name, fetched, cpu, tmp_path
):
    spec, data_dir, subs = load_spec(name), fetched[name], tmp_path / "subs"
    assert load_config("cpu", [f"competition={name}"]).model.backbone == BACKBONES[name]
    overrides = [f"competition={name}", *TINY[name]]
    if name == "watson":  # BERT from a preset folder on disk, as from a model attached to a kernel
        preset = bert.write_tiny_preset(tmp_path / "preset", PRESET_WORDS, 64)
        overrides += ["model.backbone=bert", f"model.weights={preset}"]
    config = load_config("cpu", overrides)
    job = train.prepare(config, cpu, data_dir, tmp_path / "runs", None, None)
    assert not set(job.train.examples.ids) & set(job.val.examples.ids)  # val is held out of train
    metrics = train.fit(job, progress=False)
    if name == "watson":  # the run tokenizes as the preset does, kept in the run
        import keras_hub

        kept = bert.load_tokenizer(job.run_dir / "tokenizer").get_vocabulary()
        assert kept == keras_hub.models.BertTokenizer.from_preset(str(preset)).get_vocabulary()
    key = spec.score_key
    assert metrics["metric"] == spec.metric.name and np.isfinite(metrics[key])
    history = pd.read_csv(job.run_dir / "history.csv")
    best = history[key].max() if spec.metric.greater_is_better else history[key].min()
    assert metrics[key] == pytest.approx(best)

    # Evaluate scores the best weights in the serving model (a free batch): the training score.
    if name == "watson":  # the run alone rebuilds its network: the preset is not needed again
        import shutil

        shutil.rmtree(preset)
    evaluation = evaluate.evaluate(job.run, competition_of(job.run), data_dir, 1, cpu, subs)
    val = Predictions.load(job.run.predictions("val", 1))
    kept = kept_score(evaluation, key)  # the kept epoch's score, beside its choice's cross-fitted one
    assert kept == pytest.approx(SKLEARN[spec.metric.name](val.labels, val.probabilities))
    # Training scored val on the activations it cached (float16) where the recipe caches them;
    # evaluate runs the whole network on the photos in float32.
    assert kept == pytest.approx(metrics[key], abs=1e-3 if config.train.feature_cache else 1e-5)
    board = leaderboard.read(leaderboard.board_file(subs, name)).set_index("entry")
    assert board.loc[job.run.name, key] == pytest.approx(evaluation[key], abs=1e-5)
    shown = evaluation["mistakes"]  # the most confident wrong rows: a grid of images, a table of texts
    assert shown["wrong"] == int((val.predicted != val.labels).sum())
    if shown["wrong"]:
        assert shown["file"] == str(
            job.run.file("mistakes.csv" if job.task.modality == "text" else "mistakes.png")
        )
        assert Path(shown["file"]).is_file()

    # Predict: P(class 1) or the class per test id, in the sample submission's order, checked.
    test = predict_split(job.run, competition_of(job.run), data_dir, "test", 1, cpu)
    path = write_submission(
        subs,
        job.run.name,
        test.ids,
        task_of(spec).submission_values(test.probabilities, spec),
        spec,
        data_dir,
        {},
        evaluation[key],
        job.run.path,
    )
    expected = sample_ids(data_dir, spec)
    assert check_submission(path, spec, expected).rows == len(expected)
    written = pd.read_csv(path, dtype={spec.id_column: str})
    assert written.columns.tolist() == [spec.id_column, spec.label_column]
    assert written[spec.id_column].tolist() == expected
    in_order = test.by_ids(np.array(expected)).probabilities
    if spec.submission_value == "probability":
        np.testing.assert_allclose(written[spec.label_column], in_order[:, 1], atol=1e-6)
    else:
        assert written[spec.label_column].tolist() == in_order.argmax(axis=1).tolist()

    # Submit's dry run checks it and ends with the competition's metric.
    home = tmp_path / "empty-home"
    home.mkdir()
    no_credentials = {"HOME": str(home), "KAGGLE_CONFIG_DIR": str(home / "kaggle"),
                      "XDG_CONFIG_HOME": str(home), "KAGGLE_USERNAME": "", "KAGGLE_KEY": "",
                      "KAGGLE_API_TOKEN": ""}  # fmt: skip
    result = run_cli(
        "submit", "--competition", name, "--data-dir", str(data_dir), "--submissions-dir", str(subs),
        env=no_credentials,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "DRY RUN, NOT UPLOADED" in result.stdout
    # ... and says what the score is worth: its held-out rows and a 95% interval around the score
    worth = f"on {evaluation['images']:,} rows (95% interval "
    assert f"scored   val {spec.metric.title} {evaluation[key]:.4f} {worth}" in result.stdout
    low, high = evaluation["interval"]
    assert low <= evaluation[key] <= high and f"{low:.3f}-{high:.3f})" in result.stdout


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.alone
def test_on_jax_over_8_devices_text_runs_train_and_serve_what_they_scored_on_tensorflow(
    fetched, cpu, tmp_path
):
    """Keras on JAX as on a TPU (8 devices, one static batch of 16): the bag of n-grams under `fit` and BERT
    under the custom loop, in one process; TensorFlow on the CPU then predicts val with each run's
    weights and tokenization and gets the score the JAX run recorded."""
    import json

    from pipeline.core.rundir import RunDir
    from tests.conftest import run_python

    runs = {"imdb": "fit", "watson": "custom"}
    commands = []
    for name, loop in runs.items():
        args = ["train", "--data-dir", str(fetched[name]), "--runs-dir", str(tmp_path), "--recipe", "cpu",
                "--run", name, "--backend", "jax", "--cpu-replicas", "8"]  # fmt: skip
        for override in [f"competition={name}", *TINY[name], "data.batch_size=2", f"train.loop={loop}"]:
            args += ["--set", override]
        commands.append(args)
    done = run_python(
        f"""
        from pipeline import cli
        for args in {commands!r}:
            assert cli.main(args) == 0, args
        """
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for name in runs:
        run = RunDir(tmp_path / name)
        info, metrics = (json.loads(run.file(f).read_text()) for f in (RunDir.RUN_INFO, RunDir.METRICS))
        assert info["backend"] == "jax" and info["replicas"] == 8 and info["global_batch"] == 16
        key = load_spec(name).score_key
        evaluation = evaluate.evaluate(run, competition_of(run), fetched[name], 1, cpu, tmp_path / "subs")
        assert kept_score(evaluation, key) == pytest.approx(metrics[key], abs=1e-4), name


def test_text_tta_is_refused_in_one_line(capsys, tmp_path):
    from pipeline import cli
    from pipeline.modeling.inference import check_tta

    check_tta(load_spec("dogs-vs-cats"), 4)  # a mirrored pet is a pet
    with pytest.raises(PetalsError, match=r"^--tta 2: competition imdb does not keep the label"):
        check_tta(load_spec("imdb"), 2)
    # A kernel is refused before it is made, not after it trained on Kaggle.
    args = ["kernel", "generate", "--set", "competition=imdb", "--tta", "2", "--owner", "me",
            "--model", "keras/bert/keras/bert_base_en_uncased/3", "--kernels-dir", str(tmp_path)]  # fmt: skip
    assert cli.main(args) == 2 and "--tta 2: competition imdb" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


@pytest.mark.thorough  # 3 kernels, each running its --help; test_gpu_recipes attaches in make test
def test_a_kernel_of_a_keras_preset_attaches_that_preset_unless_told_another(capsys, tmp_path):
    import json

    from pipeline import cli

    base = ["kernel", "generate", "--owner", "me", "--kernels-dir", str(tmp_path), "--accelerator", "TpuV5E8"]
    for competition, handle in (("imdb", "keras/bert/keras/bert_base_en_uncased/3"),
                                ("watson", "keras/xlm_roberta/keras/xlm_roberta_large_multi/3")):  # fmt: skip
        assert cli.main([*base, "--set", f"competition={competition}"]) == 0
        meta = json.loads((tmp_path / f"petals-{competition}-tpu" / "kernel-metadata.json").read_text())
        assert meta["model_sources"] == [handle]
        assert f"kernel: attaches the Kaggle model {handle}, the preset" in capsys.readouterr().out
    mine = "me/bert/keras/my-bert/1"
    assert cli.main([*base, "--set", "competition=watson", "--model", mine]) == 0
    meta = json.loads((tmp_path / "petals-watson-tpu" / "kernel-metadata.json").read_text())
    assert meta["model_sources"] == [mine] and "attaches" not in capsys.readouterr().out


def test_a_network_for_the_wrong_inputs_is_refused_in_one_line():

    with pytest.raises(PetalsError, match=r"^model.backbone=cnn: competition imdb has texts; its networks"):
        check_network(
            load_config("cpu", ["competition=imdb", "model.backbone=cnn"]), load_spec("imdb"), "jax"
        )
    with pytest.raises(PetalsError, match=r"^model.backbone=bilstm reads texts; competition dogs-vs-cats"):
        config = load_config("cpu", ["competition=dogs-vs-cats", "model.backbone=bilstm"])
        check_network(config, load_spec("dogs-vs-cats"), "tensorflow")


def test_each_competition_has_its_own_cpu_and_tpu_recipes():
    from pipeline.tasks import recipe_config

    for name in BACKBONES:
        assert {"cpu", "tpu"} <= set(recipe_config.recipe_names(load_competition(name)))
        for recipe in ("cpu", "tpu"):
            loaded = load_config(recipe, [f"competition={name}"])
            assert loaded.competition == name and loaded.recipe == recipe
    with pytest.raises(PetalsError, match=r"^unknown recipe 'densenet201' for imdb: no "):
        load_config("densenet201", ["competition=imdb"])


def test_the_readme_names_each_competition_and_links_each_page_of_sources():
    """README's opening says what `COMPETITION=` picks: every folder in competition/ by the name it
    takes; and each competition page in docs/competitions/ is linked (it said "five more" while
    eight trained, and left Jigsaw's page out)."""
    readme = (REPO / "README.md").read_text()
    opening = readme.split("\n## ", 1)[0]
    names = sorted(p.parent.name for p in (REPO / "competition").glob("*/competition.toml"))
    others = [name for name in names if name != "flowers"]
    assert [name for name in others if f"`{name}`" not in opening] == []
    assert "picks eight more" in opening and len(others) == 8
    pages = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs" / "competitions").glob("*.md"))
    assert [page for page in pages if f"]({page})" not in readme] == []


@pytest.mark.slow
@pytest.mark.heavy  # a whole chain (`make test-heavy`)
def test_a_kernel_for_a_table_competition_fetches_its_kaggle_mount_and_writes_a_valid_submission(tmp_path):
    """The imdb kernel, run outside the repo as Kaggle would: the competition mounted under
    input/<slug>/ as the download holds it (each table zipped again), fetched, trained, scored."""
    import json
    import os
    import subprocess
    import sys

    from pipeline import cli
    from pipeline.data import embedded
    from pipeline.kernels.client import metadata as kernel

    spec = load_spec("imdb")
    mount = tmp_path / "input" / spec.default_slug
    embedded.draw(spec, mount, size=0, seed=3, scale=0.05, progress=False)
    args = ["kernel", "generate", "--kernels-dir", str(tmp_path / "kernels"), "--recipe", "cpu",
            "--accelerator", "None", "--owner", "petals-user"]  # fmt: skip
    for override in ["competition=imdb", *TINY["imdb"]]:
        args += ["--set", override]
    assert cli.main(args) == 0
    folder = tmp_path / "kernels" / "petals-imdb-cpu"  # the default name says the competition
    assert json.loads((folder / kernel.METADATA).read_text())["competition_sources"] == [spec.default_slug]
    working = tmp_path / "working"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, str(folder / kernel.SCRIPT), "--working", str(working), "--input",
         str(tmp_path / "input"), "--strategy", "cpu"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((working / kernel.SUMMARY).read_text())
    assert summary["competition"] == "imdb" and summary["data_source"] == "kaggle-input"
    assert 0 <= summary["metrics"]["evaluation"]["val_roc_auc"] <= 1
    submission = pd.read_csv(working / "submission.csv", dtype={"id": str})
    assert submission.columns.tolist() == ["id", "sentiment"] and len(submission) == 100
    assert submission["sentiment"].between(0, 1).all()


def test_a_bert_kernel_needs_its_preset_attached_as_a_kaggle_model(tmp_path):
    from pipeline.core.options import KernelOptions
    from pipeline.kernels.client import metadata
    from pipeline.kernels.client.recipe_check import check_recipe

    spec = load_spec("watson")
    config = load_config("mbert-tpu", ["competition=watson"])  # model.weights=/kaggle/input/bert/...
    assert config.model.backbone == "bert" and config.model.weights.startswith("/kaggle/input/")
    with pytest.raises(
        PetalsError, match=r"attached to hold it; attach it: MODELS=<owner>/bert/keras/bert_base_multi/2"
    ):
        check_recipe(config, spec, "tpu", internet=True, datasets=[])
    check_recipe(config, spec, "tpu", internet=False, datasets=["keras/bert/keras/bert_base_multi/2"])
    local = load_config("mbert-tpu", ["competition=watson", f"model.weights={tmp_path}"])
    with pytest.raises(PetalsError, match=r"is a folder on this machine, which the kernel cannot see"):
        check_recipe(local, spec, "tpu", internet=True, datasets=["keras/bert/keras/bert_base_multi/2"])
    options = KernelOptions(
        accelerator="TpuV5E8", internet="off", model=("keras/bert/keras/bert_base_multi/2",)
    )
    meta = metadata.metadata(options, "me", "petals-watson-tpu", spec.default_slug)
    assert meta["model_sources"] == ["keras/bert/keras/bert_base_multi/2"] and meta["enable_tpu"]


@pytest.mark.slow
@pytest.mark.thorough  # the ensemble's search: test_evaluate's, here on log loss
def test_an_ensemble_of_two_runs_searches_lower_log_loss_and_submits_probabilities(fetched, cpu, tmp_path):
    """dogs-vs-cats: the blend's weights are searched on the competition's metric (log loss, lower
    is better) and its submission holds P(dog)."""
    from pipeline import cli

    name, data_dir, subs = "dogs-vs-cats", fetched["dogs-vs-cats"], tmp_path / "subs"
    spec = load_spec(name)
    names = []
    # The blend is the same for any network: the small cnn keeps the two runs quick.
    small = [
        "model.backbone=cnn",
        "model.weights=none",
        "train.feature_cache=false",
        "train.unfrozen_layers=0",
    ]
    for seed in (0, 1):
        config = load_config("cpu", [f"competition={name}", *TINY[name], *small, f"seed={seed}"])
        job = train.prepare(config, cpu, data_dir, tmp_path / "runs", f"seed{seed}", None)
        train.fit(job, progress=False)
        names.append(job.run.name)
    common = [
        "--data-dir",
        str(data_dir),
        "--runs-dir",
        str(tmp_path / "runs"),
        "--submissions-dir",
        str(subs),
    ]
    assert cli.main(["ensemble", "--runs", *names, "--search", "--name", "blend", *common]) == 0
    metrics = pd.read_json(tmp_path / "runs" / "blend" / "metrics.json", typ="series")
    blended = Predictions.load(tmp_path / "runs" / "blend" / "val_predictions.npz")
    assert metrics["val_log_loss"] == pytest.approx(
        SKLEARN["log_loss"](blended.labels, blended.probabilities)
    )
    assert metrics["val_log_loss"] <= min(metrics["member_val_log_loss"].values()) + 1e-9
    submission = pd.read_csv(subs / "blend.csv", dtype={"id": str})
    assert submission["label"].between(0, 1).all() and check_submission(
        subs / "blend.csv", spec, sample_ids(data_dir, spec)
    ).rows == len(submission)
    board = leaderboard.read(leaderboard.board_file(subs, name)).set_index("entry")
    assert board.loc["blend", "val_log_loss"] == pytest.approx(metrics["val_log_loss"], abs=1e-5)


@pytest.mark.parametrize("name", ["imdb", "watson"])
def test_inspect_of_a_text_task_writes_the_batchs_texts_with_their_class_names(
    fetched, name, tmp_path, capsys
):
    """What the text tasks show: training texts as the data holds them, each with its class name."""
    from pipeline.data import file_examples
    from pipeline.stages import inspect

    spec = load_spec(name)
    config = load_config("cpu", [f"competition={name}"])
    paths = inspect.inspect(config, fetched[name], tmp_path, 6)
    table = pd.read_csv(paths["batch"], dtype=str, keep_default_na=False)
    train = file_examples.examples(fetched[name], spec, "train")
    by_id = {i: k for k, i in enumerate(train.ids)}
    columns = ["text"] if len(train.inputs) == 1 else ["text_1", "text_2"]
    assert len(table) == 6 and list(table.columns[:2]) == ["id", "label"]
    for _, row in table.iterrows():
        k = by_id[row["id"]]
        assert row["label"] == spec.classes[train.labels[k]]
        assert [row[c] for c in columns] == [column[k] for column in train.inputs]
    assert "class_counts.csv" in str(paths["counts"]) and "label" in capsys.readouterr().out
