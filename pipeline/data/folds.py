"""The fold table: which of K stratified folds holds out each labelled example.

Kaggle is won by K-fold cross-validation: every labelled example is scored once by a model
that never saw it (out of fold), choices are made on those scores, and a final model trains on
everything. The table pools every labelled example (train, and a labelled val split unless
`train.folds_keep_val`), sorts it by id and deals it into K folds stratified by class from
`train.fold_seed`. It is stored beside the data (`<data dir>/folds/k5-seed0.csv`: id, label,
fold), so every recipe's folds line up and their out-of-fold predictions can be blended, and a
later scikit-learn that deals differently cannot move an example between folds. A stored table
whose ids or labels are not the data's is refused, never used.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from competition import CompetitionSpec
from pipeline.core.config import Config
from pipeline.core.csv_bounds import MAX_LABEL_FIELD, CsvBounds, check_csv
from pipeline.core.errors import PetalsError
from pipeline.core.files import write_atomically
from pipeline.core.paths import shown
from pipeline.data import groups, targets

log = logging.getLogger(__name__)

FOLDER = "folds"  # inside the data dir
MAX_TABLE_BYTES = 256 * 2**20  # a fold table is ids and two small numbers a row


@dataclass(frozen=True)
class FoldTable:
    """Every labelled example's id, label and fold, sorted by id."""

    ids: np.ndarray  # str
    labels: np.ndarray  # targets: class ids, or rows of labels (its file holds their strata)
    folds: np.ndarray  # int64, 0..k-1
    k: int
    seed: int

    def __len__(self) -> int:
        return len(self.ids)

    def held_out(self, fold: int) -> np.ndarray:
        """The row numbers fold `fold` holds out (its validation part), in id order."""
        return np.flatnonzero(self.folds == fold)

    def kept(self, fold: int) -> np.ndarray:
        """The row numbers fold `fold` trains on: every other fold's."""
        return np.flatnonzero(self.folds != fold)

    @property
    def digest(self) -> str:
        """What the table says, as a short hash: runs of one CV group must share it."""
        rows = zip(self.ids, targets.strata(self.labels), self.folds, strict=True)  # a class or a combination
        text = "\n".join(f"{i},{label},{fold}" for i, label, fold in rows)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def check_folds(
    k: int, labels: np.ndarray, classes: tuple[str, ...], grouped: np.ndarray | None = None
) -> None:
    """One line when K folds cannot be stratified over these targets: fewer groups than folds, a
    class with fewer examples than folds (for rows of labels, a label; a rarer combination of
    labels is dealt as it comes)."""
    if k < 2:
        raise PetalsError(f"train.folds={k} (FOLDS={k}): cross-validation needs at least 2 folds")
    if grouped is not None and len(set(grouped)) < k:
        raise PetalsError(
            f"train.folds={k} (FOLDS={k}): the labelled examples form {len(set(grouped))} groups, fewer "
            "than the folds: each fold holds whole groups"
        )
    counts = targets.class_counts(labels, len(classes))
    present = np.flatnonzero(counts)
    smallest = present[np.argmin(counts[present])]
    if counts[smallest] < k:
        raise PetalsError(
            f"train.folds={k} (FOLDS={k}): class {classes[smallest]!r} has {counts[smallest]} labelled "
            f"examples, fewer than the folds: at most FOLDS={counts[smallest]}"
        )


def deal(
    ids: np.ndarray, labels: np.ndarray, k: int, seed: int, grouped: np.ndarray | None = None
) -> FoldTable:
    """K stratified folds of the examples, sorted by id first so the deal depends on the data
    only, never on the order files were listed in; with `grouped`, each group whole in one fold
    (scikit-learn's StratifiedGroupKFold: the classes as even as whole groups allow)."""
    from sklearn.model_selection import StratifiedGroupKFold, StratifiedKFold

    order = np.argsort(ids, kind="stable")
    ids, labels = ids[order], labels[order]
    folds = np.zeros(len(ids), np.int64)
    if grouped is None:
        dealer = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
        parts = targets.stratified(dealer, labels)
    else:
        dealer = StratifiedGroupKFold(n_splits=k, shuffle=True, random_state=seed)
        parts = targets.stratified(dealer, labels, grouped[order])
    for fold, (_, held) in enumerate(parts):
        folds[held] = fold
    return FoldTable(ids, labels, folds, k, seed)


def pooled_splits(spec: CompetitionSpec, config: Config) -> list[str]:
    """The labelled splits the folds deal: train, and a labelled val unless `train.folds_keep_val`."""
    keep = config.train.folds_keep_val or "val" not in spec.labeled_splits
    return ["train"] if keep else ["train", "val"]


def labelled(
    root: str, spec: CompetitionSpec, config: Config
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The ids, labels and groups (None where the competition names none) the folds deal: train,
    and a labelled val split unless `train.folds_keep_val`; an id twice is refused (its out-of-fold
    row would be ambiguous)."""
    from pipeline.data.readers import reader_for

    splits = pooled_splits(spec, config)
    ids, labels = reader_for(spec).pool(root, spec, config, splits).ids_and_labels()
    unique_ids(ids, splits, root)
    return ids, labels, groups.group_ids(root, spec, splits, ids)


def unique_ids(ids: np.ndarray, splits: list[str], root: str) -> None:
    """One line when an id labels two examples: its out-of-fold row would be ambiguous."""
    unique, counts = np.unique(ids, return_counts=True)
    if len(unique) < len(ids):
        raise PetalsError(
            f"{root}: id {unique[counts > 1][0]!r} labels {counts.max()} examples of {' + '.join(splits)}; "
            "cross-validation needs one id per example"
        )


def table_path(data_dir: Path, config: Config, grouping: str = "") -> Path:
    """Where the table of `train.folds` and `train.fold_seed` is stored; `grouping`, the digest of
    the groups it keeps whole (`groups.digest`): a table dealt before a group was named, or by
    another grouping, is another file and is never taken for this one."""
    keep = "-trainonly" if config.train.folds_keep_val else ""
    grouped = f"-g{grouping}" if grouping else ""
    return data_dir / FOLDER / f"k{config.train.folds}-seed{config.train.fold_seed}{keep}{grouped}.csv"


def stored_path(data_dir: Path, spec: CompetitionSpec, config: Config) -> Path:
    """Where this data's table is stored: `table_path`, with the digest of its groups where the
    competition names them (the labelled examples read to know it)."""
    if not spec.grouped:
        return table_path(data_dir, config)
    from pipeline.data.manifest import locate_data

    ids, _, grouped = labelled(locate_data(data_dir), spec, config)
    return table_path(data_dir, config, groups.digest(ids, grouped))


def fold_table(data_dir: Path, spec: CompetitionSpec, config: Config) -> FoldTable:
    """The data's fold table for `train.folds` and `train.fold_seed`: the stored one, after
    checking it deals exactly the data's labelled examples; else one another machine dealt for the
    same data (a kernel's, carried in its script); else dealt now. Stored either way."""
    from pipeline.data.manifest import locate_data

    root = locate_data(data_dir)
    ids, labels, grouped = labelled(root, spec, config)
    k = config.train.folds
    check_folds(k, labels, spec.classes, grouped)
    if grouped is None:
        groups.warn_if_suspected(root, spec, tuple(pooled_splits(spec, config)), ids, labels)
    path = table_path(data_dir, config, "" if grouped is None else groups.digest(ids, grouped))
    if path.is_file():
        table = _checked(read_table(path, k), ids, labels, path)
    else:
        table = _carried(path, ids, labels, k) or deal(ids, labels, k, config.train.fold_seed, grouped)
        _write(path, table)
    _check_grouped(table, ids, grouped, path)
    return table


def _check_grouped(table: FoldTable, ids: np.ndarray, grouped: np.ndarray | None, path: Path) -> None:
    """No group with rows in two folds (a carried or stored table is checked as a dealt one)."""
    if grouped is None:
        return
    by_id = dict(zip(ids.astype(str), grouped, strict=True))
    fold_of: dict[object, int] = {}
    for example, fold in zip(table.ids, table.folds, strict=True):
        group = by_id[str(example)]
        if fold_of.setdefault(group, fold) != fold:
            raise PetalsError(
                f"{path}: group {shown(group)} has examples in folds {fold_of[group]} and {fold}; delete "
                "the table to deal the folds again"
            )


# ----------------------------------------------------------------------------- carried to a kernel
# A kernel deals its folds from Kaggle's copy of the data, with Kaggle's scikit-learn: a version
# that deals differently would train folds the local group refuses to merge. So a FOLDS kernel
# carries the table dealt here, and uses it if it deals exactly the kernel's data.

CARRIED = ".carried"  # beside where the table goes: `k5-seed0.csv.carried`
MAX_CARRIED_BYTES = 4 * 2**20  # compressed; a kernel script carries it inline


def carried_table(data_dir: Path, spec: CompetitionSpec, config: Config) -> tuple[dict | None, str]:
    """This data's fold table to carry in a kernel's settings (the stored one, checked against the
    data, else dealt now), or None and why not. The table holds ids, not pixels: a kernel reading
    another resolution of the same records deals the same examples, and checks it before use."""
    import base64
    import gzip

    from pipeline.data.manifest import read_manifest

    if read_manifest(data_dir) is None:
        return None, f"no data fetched in {data_dir}"
    try:
        path = stored_path(data_dir, spec, config)
        fold_table(data_dir, spec, config)  # a stored table is checked against the data here
    except PetalsError as err:
        if spec.grouped:  # the grouped formats are plain files: no resolution can be missing
            return None, str(err)
        path = table_path(data_dir, config)
        if not path.is_file() or "of other data" in str(err):
            return None, str(err)
        # Only the kernel's resolution is missing here: the stored table's ids are the same.
    table = FoldTable(*read_table(path, config.train.folds), config.train.folds, config.train.fold_seed)
    packed = base64.b64encode(gzip.compress(path.read_bytes(), mtime=0)).decode()
    if len(packed) > MAX_CARRIED_BYTES:
        return None, f"{path} is {len(packed)} bytes packed, over the {MAX_CARRIED_BYTES} a kernel carries"
    carried = {"name": path.name, "digest": table.digest, "examples": len(table), "gzip_base64": packed}
    return carried, ""


def receive_table(data_dir: Path, carried: dict) -> Path:
    """Write a carried table beside where this data's table goes; `fold_table` uses it if it fits."""
    import base64
    import gzip
    import io
    import re

    name = str(carried.get("name", ""))
    if not re.fullmatch(
        r"k\d{1,3}-seed\d{1,10}(-trainonly)?(-g[0-9a-f]{8})?\.csv", name
    ):  # a plain file name, no path
        raise PetalsError(f"a carried fold table named {name!r}: not a fold table's name")
    packed = str(carried.get("gzip_base64", ""))
    if len(packed) > MAX_CARRIED_BYTES:
        raise PetalsError(f"a carried fold table of {len(packed)} bytes, over {MAX_CARRIED_BYTES}")
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(base64.b64decode(packed))) as stream:
            text = stream.read(MAX_TABLE_BYTES + 1)  # bounded before memory is
    except (ValueError, OSError, EOFError) as err:
        raise PetalsError(f"a carried fold table {name}: not gzip and base64 ({err})") from None
    if len(text) > MAX_TABLE_BYTES:
        raise PetalsError(f"a carried fold table {name}: over {MAX_TABLE_BYTES} bytes unpacked")
    path = data_dir / FOLDER / (name + CARRIED)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, lambda tmp: tmp.write_bytes(text))
    return path


def _carried(path: Path, ids: np.ndarray, labels: np.ndarray, k: int) -> FoldTable | None:
    """The carried table for `path`, if one is here and deals exactly this data; else None, said."""
    carried = path.with_name(path.name + CARRIED)
    if not carried.is_file():
        return None
    try:
        table = _checked(read_table(carried, k), ids, labels, carried)
    except PetalsError:
        log.warning(
            "folds: the fold table carried from where the kernel was made is of other data "
            "(%s examples here); the folds are dealt here instead",
            len(ids),
        )
        table = None
    else:
        log.info("folds: the table carried from where the kernel was made (%s)", table.digest)
    carried.unlink()  # considered once: stored as this data's table, or not used
    return table


def read_table(path: Path, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A stored table's ids, labels and folds (size bounded first, folds in 0..k-1)."""
    import pandas as pd

    if path.stat().st_size > MAX_TABLE_BYTES:
        raise PetalsError(f"{path}: {path.stat().st_size} bytes, more than a fold table's {MAX_TABLE_BYTES}")
    check_csv(path, CsvBounds(MAX_TABLE_BYTES, MAX_LABEL_FIELD), id_column="id")  # ids and fields too
    try:
        # Every id as written: pandas would read an id "NA", "null" or "nan" as a missing value.
        frame = pd.read_csv(
            path,
            dtype={"id": str, "label": np.int64, "fold": np.int64},
            keep_default_na=False,
            na_filter=False,
        )
        ids, labels, folds = (frame[c].to_numpy() for c in ("id", "label", "fold"))
    except (ValueError, KeyError, pd.errors.ParserError) as err:
        raise PetalsError(f"{path}: not a fold table (id,label,fold): {str(err).splitlines()[0]}") from None
    if len(folds) and (folds.min() < 0 or folds.max() >= k or len(np.unique(folds)) < k):
        raise PetalsError(f"{path}: its folds are not 0..{k - 1}, each holding examples; delete it")
    return ids.astype(str), labels, folds


def _checked(stored, ids: np.ndarray, labels: np.ndarray, path: Path) -> FoldTable:
    """The stored table, if it deals exactly these examples with these labels (a file holds each
    example's class, or its combination of labels: `targets.strata`), with the data's targets."""
    stored_ids, stored_labels, folds = stored
    order = np.argsort(ids, kind="stable")
    same_labels = np.array_equal(stored_labels, targets.strata(labels[order]))
    if not (np.array_equal(stored_ids, ids[order]) and same_labels):
        raise PetalsError(
            f"{path}: a fold table of other data ({len(stored_ids)} examples; the data has {len(ids)}, "
            "other ids or labels): delete it to deal the folds again"
        )
    k, seed = _k_and_seed(path)
    return FoldTable(stored_ids, labels[order], folds, k, seed)


def _k_and_seed(path: Path) -> tuple[int, int]:
    k, seed = path.name.split(".")[0].split("-")[:2]  # k5-seed0.csv, k5-seed0.csv.carried
    return int(k[1:]), int(seed[4:])


def _write(path: Path, table: FoldTable) -> None:
    import pandas as pd

    frame = pd.DataFrame({"id": table.ids, "label": targets.strata(table.labels), "fold": table.folds})
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, lambda tmp: frame.to_csv(tmp, index=False))
