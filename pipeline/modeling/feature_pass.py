"""How the feature cache's pass computes its rows: the network below the cut over a split, once per
view, in pieces.

The pass (`rows_of`) saves its outputs every `PIECE_BATCHES` batches as a piece
(`<name>-<view>-<index>.npz`, with the signature of what it was computed from). A stop request
(SIGTERM, the time limit) is looked at between pieces, so a preempted pass keeps what it did; the
rerun reuses every piece whose signature matches and computes only the rest. The whole split is
saved as one file when every piece is there, and the pieces go. Where the rows live and what they
depend on: `feature_cache`.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import itertools
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import tensorflow as tf

from pipeline.core.config import Config
from pipeline.core.errors import PetalsError
from pipeline.core.progress import Progress
from pipeline.modeling.feature_cache import Rows, cached, keep_held, save, stop_if_asked

log = logging.getLogger(__name__)

EXTRACT_BATCH = 128  # examples per predict call while caching
PIECE_BATCHES = 8  # batches per saved piece: what a preemption during the pass can lose


# ----------------------------------------------------------------------------- pieces


def _piece_path(folder: Path, name: str, view: int, index: int) -> Path:
    return folder / f"{name}-{view}-{index}.npz"


def _piece_signature(signature_: dict, view: int, index: int, final: bool) -> dict:
    where = {"view": view, "piece": index, "final": final, "batch": EXTRACT_BATCH, "of": PIECE_BATCHES}
    return {**signature_, "piece": where}


def _pieces_found(folder: Path, name: str, view: int, signature_: dict) -> tuple[list[Rows], bool]:
    """The view's saved pieces from the first on, up to the first missing or stale one, and whether
    the last of them ends the view."""
    found = []
    for index in itertools.count():
        path = _piece_path(folder, name, view, index)
        for final in (False, True):
            piece = cached(path, _piece_signature(signature_, view, index, final))
            if piece is not None:
                found.append(piece)
                break
        else:
            return found, False
        if final:
            return found, True


# ----------------------------------------------------------------------------- the pass


def _piece(outputs: list[np.ndarray], tags: list) -> Rows:
    """A piece: `bottom`'s outputs for a few batches (float16), with the ([labels,] ids) of each
    batch, in order; an unlabelled split's labels are -1."""
    ids = np.concatenate([t[-1] for t in tags])
    ids = np.asarray([i.decode() if isinstance(i, bytes) else str(i) for i in ids])
    labels = np.concatenate([t[0] for t in tags]) if len(tags[0]) == 2 else np.full(len(ids), -1)
    return Rows(np.concatenate(outputs).astype(np.float16)[None], labels, ids)


def _pieces(bottom, batches: Iterator, platform) -> Iterator[tuple[Rows, bool]]:
    """The pass's pieces in order, PIECE_BATCHES batches each, and whether each is the last.

    One process, one replica: the calls stream on across pieces, so saving one never leaves a
    core waiting for the next piece's first call (the main job's pass over 9,607 flowers: 67 and
    87 examples/s against 47 and 59 before, alternated on one day: docs/BENCHMARKS.md). Otherwise
    the processes or replicas predict each piece together.
    """
    from pipeline.modeling import inference

    if not inference.streams(platform):
        yield from _pieces_together(bottom, batches, platform)
        return
    taken: collections.deque = collections.deque()  # the tags of the batches whose calls are in flight

    def images():
        for pixels, *tags in batches:
            taken.append(tags)
            yield pixels

    with contextlib.closing(inference.streamed(bottom, images(), platform)) as outputs:
        done = ((out, taken.popleft()) for out in outputs)
        ahead = next(done, None)
        while ahead is not None:
            chunk = [ahead, *itertools.islice(done, PIECE_BATCHES - 1)]
            ahead = next(done, None)
            yield _piece([out for out, _ in chunk], [tags for _, tags in chunk]), ahead is None


def _pieces_together(bottom, batches: Iterator, platform) -> Iterator[tuple[Rows, bool]]:
    """`_pieces` where several processes predict each piece together (each its share of the
    batches) or several replicas split it: one `predict_batches` call a piece."""
    from pipeline.modeling.inference import predict_batches

    ahead = next(batches, None)
    while ahead is not None:
        chunk = [ahead, *itertools.islice(batches, PIECE_BATCHES - 1)]
        ahead = next(batches, None)
        images = functools.reduce(
            tf.data.Dataset.concatenate, (tf.data.Dataset.from_tensors(images) for images, *_ in chunk)
        )
        yield _piece([predict_batches(bottom, images, platform)], [tags for _, *tags in chunk]), ahead is None


def agreed(platform, value: int) -> int:
    """The smallest of every process's `value` (each one asks, always: the processes predict the
    pass together, so they start it at the same piece)."""
    if not platform.hosts.several:
        return value
    from pipeline.modeling.host_predict import allgather

    return int(np.min(allgather(platform, np.asarray([value]))))


def _view_rows(name, split, view_index, view, bottom, config, folder, platform, signature_, stop,
               labeled, bar) -> Rows:  # fmt: skip
    """One view of a split: its saved pieces, then the rest computed piece by piece (each batch
    counted on `bar` as it goes in)."""
    from pipeline.data import datasets, passes
    from pipeline.data.image_inputs import image_of

    found, done = _pieces_found(folder, name, view_index, signature_)
    never = 2**31  # a finished view's count, above any start
    start = agreed(platform, never if done else len(found))
    found = found[:start]  # all of them when the view is done
    bar.advance(sum(len(p.ids) for p in found))
    if start < never:
        tf.random.set_seed(config.seed * 1000 + view_index)  # each random view the same on a rerun
        batches = split.eval_dataset(config, EXTRACT_BATCH, labeled=labeled, with_ids=True)
        # The view's random draws run for the skipped batches too (only the network is skipped):
        # the pieces computed now are those an uninterrupted pass computes.
        batches = batches.map(lambda inputs, *tags: (view(image_of(inputs)), *tags))  # pixels alone
        batches = passes.untuned(batches.skip(start * PIECE_BATCHES).prefetch(datasets.AUTOTUNE))
        batches = _counted(batches.as_numpy_iterator(), bar)
        with (
            split.naming_bad(labeled=labeled),
            contextlib.closing(_pieces(bottom, batches, platform)) as pieces,
        ):
            for index, (piece, final) in enumerate(pieces, start):
                stamp = _piece_signature(signature_, view_index, index, final)
                save(_piece_path(folder, name, view_index, index), piece, stamp)
                found.append(piece)
                if final:
                    break
                stop_if_asked(
                    stop,
                    f"in the feature cache's pass ({name}, view {view_index + 1}: {len(found)} pieces kept)",
                )
            else:  # no last piece: the split had no examples
                raise PetalsError(f"{name}: no examples to cache features of")
    return Rows(
        np.concatenate([p.features[0] for p in found]),
        np.concatenate([p.labels for p in found]),
        np.concatenate([p.ids for p in found]),
    )


def _counted(batches: Iterator, bar: Progress) -> Iterator:
    """The batches as they come, each counted on `bar` once taken."""
    for batch in batches:
        yield batch
        bar.advance(len(batch[0]))


def _examples(split) -> int:
    """The examples a split's eval dataset reads: pseudo-labelled ones are trained on, not cached
    (a split of pseudo-labelled examples alone, cached in its fold's folder, has no such part)."""
    pseudo = split.pseudo_part() if hasattr(split, "pseudo_part") else None
    return split.count - (pseudo.count if pseudo is not None else 0)


def rows_of(name: str, split, views: list, bottom, config: Config, folder: Path, platform, signature_: dict,
            stop=None, by_id: bool = False, labeled: bool = True, hold: bool = False) -> Rows:  # fmt: skip
    """The cached views of one split (`folder/<name>.npz`), computed (in pieces) unless saved
    already; sorted by id with `by_id`; an unlabelled split's (`labeled=False`) labels are -1;
    kept in this process for the next caller with `hold` (a group's pooled rows)."""
    path = folder / f"{name}.npz"
    saved = cached(path, signature_)
    if agreed(platform, int(saved is not None)) == 0:
        saved = None  # the processes predict the pass together: all of them, or none, compute it
    if saved is not None:
        log.info("train: %s features cached already (%s)", name, path)
        if hold:
            keep_held(path, signature_, saved)
        return saved
    started = time.perf_counter()
    total = len(views) * _examples(split)
    with Progress(f"feature cache, {name}", total, "img", enabled=platform.hosts.writer) as bar:
        per_view = [
            _view_rows(name, split, k, view, bottom, config, folder, platform, signature_, stop, labeled, bar)
            for k, view in enumerate(views)
        ]
    first = per_view[0]
    if any(not np.array_equal(first.ids, v.ids) for v in per_view):
        raise RuntimeError(f"{name}: views came in different orders")  # a reader's bug
    rows = Rows(np.stack([v.features for v in per_view]), first.labels, first.ids)
    if by_id:
        rows = rows.take(np.argsort(rows.ids, kind="stable"))
    save(path, rows, signature_)
    if hold:
        keep_held(path, signature_, rows)
    for piece in folder.glob(f"{name}-*-*.npz"):
        piece.unlink(missing_ok=True)
    _log_pass(name, rows, time.perf_counter() - started)
    return rows


def _log_pass(name: str, rows: Rows, seconds: float) -> None:
    views, examples = rows.features.shape[:2]
    log.info(
        "train: cached %s features: %d views x %d examples -> %s, %.0f s (%.0f examples/s)",
        name,
        views,
        examples,
        "x".join(map(str, rows.features.shape[2:])),
        seconds,
        views * examples / max(seconds, 1e-9),
    )
