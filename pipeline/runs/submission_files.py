"""A submission CSV written as Kaggle expects it, checked before it replaces an earlier one, with
its provenance beside it; the test ids a data dir's sample submission lists; and finding the newest
CSV of a competition with what was recorded about it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from competition import CompetitionSpec
from pipeline.core.config import DEFAULT_COMPETITION
from pipeline.core.csv_bounds import LABEL_CSV, check_csv, check_csv_stream
from pipeline.core.errors import PetalsError
from pipeline.core.files import sha256, write_atomically, write_json
from pipeline.core.foreign_files import json_record


def sample_ids(data_dir: Path, spec: CompetitionSpec) -> list[str]:
    """The test ids of the data dir's `sample_submission.csv` (local, or gs:// through TensorFlow)."""
    from competition.submission import SubmissionError, read_sample_ids
    from pipeline.data.manifest import locate_data

    path = f"{locate_data(data_dir).rstrip('/')}/{spec.sample_submission}"
    if "://" not in path:  # a local file: no TensorFlow import (submit starts in a second)
        check_csv(Path(path), LABEL_CSV, id_column=spec.id_column)  # read whole below: bounded first
        try:
            text = Path(path).read_text()
        except OSError as err:
            raise PetalsError(f"cannot read {path}: {err.strerror}; fetch the data again") from None
    else:
        import tensorflow as tf

        try:
            with tf.io.gfile.GFile(path, "rb") as f:
                check_csv_stream(f, path, f.size(), LABEL_CSV, spec.id_column)
            with tf.io.gfile.GFile(path) as f:
                text = f.read()
        except tf.errors.OpError as err:
            raise PetalsError(
                f"cannot read {path}: {err.message.splitlines()[0]}; fetch the data again"
            ) from None
    try:
        return read_sample_ids(text, spec, path)
    except SubmissionError as err:
        raise PetalsError(str(err)) from None


def write_submission(
    submissions_dir: Path,
    entry: str,
    ids: np.ndarray,
    values: np.ndarray,
    spec: CompetitionSpec,
    data_dir: Path,
    manifest: dict[str, Any],
    val_score: float | None,
    made_in: Path,
) -> Path:
    """`<entry>.csv` in the sample submission's id order, checked, then its provenance `<entry>.json`
    (`made_in`: the run or ensemble directory it came from)."""
    from competition.submission import SubmissionError, submission_frame
    from pipeline.runs import leaderboard
    from pipeline.tasks.competitions import check_submission, task_of

    expected = sample_ids(data_dir, spec)
    by_id = dict(zip(ids.tolist(), values.tolist(), strict=True))
    missing = [i for i in expected if i not in by_id]
    if missing or len(by_id) != len(expected):
        raise PetalsError(
            f"{entry}: predictions cover {len(by_id)} ids but {spec.sample_submission} lists {len(expected)} "
            f"({len(missing)} missing, e.g. {missing[:2]}): "
            "the test split and the sample submission disagree"
        )
    task = task_of(spec)
    frame = submission_frame(spec, expected, task.submission_column([by_id[i] for i in expected], spec))
    submissions_dir.mkdir(parents=True, exist_ok=True)
    path = submissions_dir / f"{entry}.csv"

    def write(tmp: Path) -> None:
        frame.to_csv(tmp, index=False)
        try:
            check_submission(tmp, spec, expected)
        except SubmissionError as err:  # a bug here, never the user's: keep the old file
            raise PetalsError(f"refusing to write {path}: {str(err).split(': ', 1)[-1]}") from None

    write_atomically(path, write)
    write_json(
        path.with_suffix(".json"),
        {
            "entry": entry,
            "run_dir": str(made_in),
            "csv_sha256": sha256(path),
            "competition": spec.name,
            "slug": manifest.get("slug"),
            "data_source": manifest.get("source"),
            "data_origin": manifest.get("origin"),
            "data_fingerprint": manifest.get("fingerprint"),
            "rows": len(frame),
            "metric": spec.metric.name,
            spec.score_key: val_score,
            "created": leaderboard.now(),
        },
    )
    return path


def newest_submission(submissions_dir: Path, competition: str = DEFAULT_COMPETITION) -> Path:
    """The newest CSV predict or ensemble wrote for `competition` (one without a record: any)."""
    from pipeline.runs import leaderboard

    def made_for(path: Path) -> str:
        return json_record(path.with_suffix(".json"), "submission record").get("competition", competition)

    files = [
        p for p in submissions_dir.glob("*.csv") if not leaderboard.is_board(p) and made_for(p) == competition
    ]
    if not files:
        raise PetalsError(
            f"{submissions_dir}: no {competition} submission CSV; run `make predict` (or pass FILE=)"
        )
    return max(files, key=lambda p: p.stat().st_mtime)


def sidecar(path: Path, digest: str) -> dict:
    """What `predict`/`ensemble` recorded about the file, if it is still the file they wrote."""
    recorded = json_record(path.with_suffix(".json"), "submission record")
    return recorded if recorded.get("csv_sha256") == digest else {}
