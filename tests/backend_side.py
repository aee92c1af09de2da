"""Work a test runs on a given Keras backend: `python -m tests.backend_side TASK JSON`.

pytest's process runs Keras on TensorFlow and a process's Keras backend cannot change, so the
JAX half of a test runs this in a fresh process, with the backend chosen by
`pipeline.core.device.pick` before Keras is imported, and reads back what it printed (one JSON
line) and wrote. The TensorFlow half may call the same functions in pytest's process.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def train_and_inspect(args: dict) -> dict:
    """Train a tiny run on 8 JAX devices, then report how its state is laid out and typed, and
    save predictions of fixed pixels made under JAX for TensorFlow to compare."""
    from pipeline.core import device

    platform = device.pick("jax", "auto", cpu_replicas=8)
    import numpy as np

    from pipeline.modeling.custom_loop import JaxLoop
    from pipeline.modeling.inference import load_inference_model
    from pipeline.modeling.optimizer import averaging
    from pipeline.modeling.trainer import Trainer
    from pipeline.stages import train
    from pipeline.tasks.competitions import load_competition
    from pipeline.tasks.recipe_config import load_config

    out = Path(args["out"])
    config = load_config("default", args["overrides"], device=platform.device)
    job = train.prepare(config, platform, Path(args["data_dir"]), out, args["run"], None)
    metrics = train.fit(job, progress=False)
    trainer = Trainer(job, progress=False)
    trainer.build()  # a second build restores the checkpoint: look at what a resumed run holds
    shardings = [v.value.sharding for v in trainer.net.weights]
    size = config.data.image_size
    batch = JaxLoop(trainer)._on_devices(np.zeros((job.global_batch, size, size, 3), "uint8"))
    convs = [layer for layer in trainer.net.get_layer("backbone").layers if "conv" in layer.name]
    inner = averaging(trainer.optimizer)
    competition = load_competition(config.competition)
    # the optimizer's order
    last = load_inference_model(job.run_dir, competition, weights="last").trainable_variables
    averages = inner._model_variables_moving_average
    gaps = [
        np.abs(average.numpy() - kept.numpy()).max() for average, kept in zip(averages, last, strict=True)
    ]
    net = load_inference_model(job.run_dir, competition)  # float32 and a variable batch, here on JAX
    pixels = np.random.default_rng(0).uniform(0, 255, (64, size, size, 3)).astype("float32")
    np.save(out / "pixels.npy", pixels)
    np.save(out / "jax_probabilities.npy", np.asarray(net.predict(pixels, batch_size=64, verbose=0)))
    return {
        "metrics": metrics,
        "devices": sorted({len(s.device_set) for s in shardings}),
        "replicated": all(s.is_fully_replicated for s in shardings),
        "batch_spec": str(batch.sharding.spec),
        "batch_shards": sorted({tuple(shard.data.shape) for shard in batch.addressable_shards}),
        "conv_dtypes": sorted({(layer.compute_dtype, layer.kernel.dtype) for layer in convs}),
        "output_dtype": str(trainer.net(np.zeros((8, size, size, 3), "uint8")).dtype),
        "resumed_at": trainer.start,
        "average_vs_last_weights": float(max(gaps)),  # the saved weights are the weight average
    }


def same_computation(args: dict) -> dict:
    """Train the cnn recipe as the same computation on either backend: given initial weights (written
    by the first backend to get here), dropout off, records in a fixed order, tf.data's seeded
    augmentation. Returns the history; what differs between backends is then only float rounding."""
    from pipeline.core import device

    platform = device.pick(args["backend"], "cpu")
    import keras
    import numpy as np

    from pipeline.core.rundir import RunDir
    from pipeline.data import datasets
    from pipeline.modeling.optimizer import averaging
    from pipeline.modeling.trainer import Trainer
    from pipeline.stages import train
    from pipeline.tasks.recipe_config import load_config

    read_examples = datasets.read_examples
    datasets.read_examples = lambda *a, **k: read_examples(*a, **{**k, "ordered": True})
    try:
        config = load_config("cnn", args["overrides"], device="CPU")
        job = train.prepare(
            config, platform, Path(args["data_dir"]), Path(args["out"]), args["backend"], None
        )
        trainer = Trainer(job, progress=False)
        trainer.build()
        init = Path(args["init"])
        if not init.is_file():  # renamed into place: a side started beside this one waits for it
            np.savez(init.with_suffix(".partial.npz"), *[v.numpy() for v in trainer.net.weights])
            init.with_suffix(".partial.npz").rename(init)
        with np.load(init) as saved:
            for i, variable in enumerate(trainer.net.weights):
                variable.assign(saved[f"arr_{i}"])
        inner = averaging(trainer.optimizer)
        for variable, average in zip(
            inner._trainable_variables, inner._model_variables_moving_average, strict=True
        ):
            average.assign(variable.numpy())
        for layer in trainer.net._flatten_layers():
            if isinstance(layer, keras.layers.Dropout):
                layer.rate = 0.0
        job.run.path.mkdir(parents=True, exist_ok=True)
        job.run.write_json(RunDir.CONFIG, config.to_dict())
        job.run.write_json(RunDir.DATA_MANIFEST, job.manifest)
        history = trainer.run_epochs()
    finally:
        datasets.read_examples = read_examples
    return {"history": history.to_dict("list")}


TASKS = {"train_and_inspect": train_and_inspect, "same_computation": same_computation}

if __name__ == "__main__":
    task, arguments = sys.argv[1], json.loads(sys.argv[2])
    print(json.dumps(TASKS[task](arguments), default=str))
