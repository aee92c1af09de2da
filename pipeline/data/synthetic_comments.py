"""An embedded offline dataset for `jigsaw-toxic-comment-classification-challenge` (Wikipedia
talk-page comments, six toxicity labels), in Kaggle's format.

Four zips, each holding its CSV: `train.csv` (id, comment_text, toxic, severe_toxic, obscene,
threat, insult, identity_hate: a 0/1 column per label), `test.csv` (id, comment_text),
`sample_submission.csv` (id and a 0.5 per label) and `test_labels.csv` (-1 for a test row
that was not scored, as the real one; petals does not read it). Ids are 16 hex characters;
standard CSV quoting, some comments spanning lines. Everything is deterministic from one seed.

The labels co-occur as in the real data: every severe_toxic comment is toxic, and obscene,
insult, threat and identity_hate come almost only with toxic (obscene and insult most often
together). They are commoner than in the real data (toxic 30% here, 9.6% there; threat 3.6%
here, 0.3% there) so that a few thousand comments hold enough of every label to learn and score.
Each label has its own words, but a comment quotes some of them without meaning them ("removed
the word idiot from the article") and a few labels are flipped, so a bag of words learns every
label without solving one. Numpy and pandas only (no TensorFlow).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from competition import load_spec
from pipeline.core.files import write_zip
from pipeline.formats.table import tables_of
from pipeline.formats.tables import table_text

SPEC = load_spec("jigsaw-toxic")  # file names, columns, labels
LABELS = SPEC.label_columns
TRAIN, TEST = (tables_of(SPEC).splits[split] for split in ("train", "test"))
DEFAULT_COUNTS = {"train": 2000, "test": 500}
TOXIC_RATE = 0.3
# P(label | toxic) and P(label | not toxic): severe_toxic never without toxic, the rest rarely.
GIVEN_TOXIC = {"severe_toxic": 0.2, "obscene": 0.45, "threat": 0.12, "insult": 0.4, "identity_hate": 0.15}
GIVEN_CLEAN = {"severe_toxic": 0.0, "obscene": 0.02, "threat": 0.0, "insult": 0.02, "identity_hate": 0.0}
FLIPPED = 0.02  # labels written wrong, as raters disagree

_WORDS = {
    "toxic": ["shut up", "get lost", "nobody cares", "pathetic", "garbage edit", "useless"],
    "severe_toxic": ["SHUT UP NOW", "DISGUSTING", "I HATE YOU", "ROT"],
    "obscene": ["crap", "damn", "bloody hell", "freaking", "screw this"],
    "threat": ["watch your back", "you will regret this", "I will find you", "you will pay"],
    "insult": ["idiot", "moron", "loser", "clown", "fool"],
    "identity_hate": ["your kind", "people like you", "your whole tribe", "go back where you came from"],
}
_NEUTRAL = [  # {year}: no two comments alike, as no two real ones are
    "I have added a source for the {year} {topic} section.",
    "Please see the talk page before reverting the {year} {topic} changes.",
    "The {topic} paragraph on {year} needs a citation.",
    "Thanks for fixing the {topic} infobox, the {year} figure was wrong.",
    "I moved the {year} {topic} discussion to the archive.",
    "Could someone check the dates in the {topic} article? {year} looks wrong.",
    "Per the style guide, the {topic} heading should be lower case (see the {year} discussion).",
]
_TOPICS = ["history", "geography", "football", "chemistry", "album", "election", "railway", "biography"]
_QUOTING = "I removed the word {word} from the {topic} article, it was vandalism."


def _labels(count: int, rng: np.random.Generator) -> np.ndarray:
    """Rows of 0/1 over LABELS, co-occurring as described above, a few flipped."""
    rows = np.zeros((count, len(LABELS)), np.int32)
    rows[:, 0] = rng.random(count) < TOXIC_RATE
    for k, label in enumerate(LABELS[1:], start=1):
        rate = np.where(rows[:, 0] == 1, GIVEN_TOXIC[label], GIVEN_CLEAN[label])
        rows[:, k] = rng.random(count) < rate
    rows ^= (rng.random(rows.shape) < FLIPPED).astype(np.int32)
    rows[rows[:, 1] == 1, 0] = 1  # severe_toxic is toxic, whatever was flipped
    return rows


def comment(labels: np.ndarray, rng: np.random.Generator) -> str:
    """A comment: neutral editing talk, a phrase of most labels it holds, sometimes a label's word
    quoted by a clean comment; a line break now and then."""
    sentences = [
        str(rng.choice(_NEUTRAL)).format(topic=rng.choice(_TOPICS), year=rng.integers(1800, 2018))
        for _ in range(rng.integers(1, 4))
    ]
    for label, held in zip(LABELS, labels, strict=True):
        if held and rng.random() < 0.85:  # not every labelled comment says it in these words
            sentences.insert(int(rng.integers(0, len(sentences) + 1)), f"{rng.choice(_WORDS[label])}!")
    if not labels.any() and rng.random() < 0.1:
        word = rng.choice(_WORDS[str(rng.choice(LABELS))])
        sentences.append(_QUOTING.format(word=word, topic=rng.choice(_TOPICS)))
    joiner = "\n" if rng.random() < 0.1 else " "
    return joiner.join(sentences)


def write_dataset(out_dir: Path, counts: dict[str, int] | None = None, seed: int = 0) -> dict[str, int]:
    """Write the competition's files under `out_dir` as its download holds them: each CSV zipped
    on its own. Rows per split."""
    counts = {**DEFAULT_COUNTS, **(counts or {})}
    rng = np.random.default_rng(seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    ids = iter(f"{n:016x}" for n in rng.choice(2**62, sum(counts.values()), replace=False))
    written = {}
    for split, table in (("train", TRAIN), ("test", TEST)):
        labels = _labels(counts[split], rng)
        rows = [
            {
                "id": next(ids),
                "comment_text": comment(row, rng),
                **dict(zip(LABELS, row.tolist(), strict=True)),
            }
            for row in labels
        ]
        columns = ["id", "comment_text", *(LABELS if split == "train" else ())]
        write_zip(out_dir / table.archive, [(table.file, table_text(rows, columns, table.layout).encode())])
        written[split] = len(rows)
        if split == "test":
            _write_test_files(out_dir, rows, labels, rng)
    return written


def _write_test_files(out_dir: Path, rows: list[dict], labels: np.ndarray, rng: np.random.Generator) -> None:
    """`sample_submission.csv` (0.5 everywhere) and `test_labels.csv` (-1 on the rows not scored)."""
    layout = TEST.layout
    sample = [{"id": row["id"], **dict.fromkeys(LABELS, 0.5)} for row in rows]
    scored = rng.random(len(rows)) < 0.4  # the real test set scored about 40% of its rows
    published = np.where(scored[:, None], labels, -1)
    truth = [
        {"id": row["id"], **dict(zip(LABELS, p.tolist(), strict=True))}
        for row, p in zip(rows, published, strict=True)
    ]
    for name, table in (("sample_submission.csv", sample), ("test_labels.csv", truth)):
        text = table_text(table, ["id", *LABELS], layout).encode()
        write_zip(out_dir / f"{name}.zip", [(name, text)])
