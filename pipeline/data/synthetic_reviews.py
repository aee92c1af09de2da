"""An embedded offline dataset for `word2vec-nlp-tutorial` (IMDB reviews), in Kaggle's format.

Tab-separated files with a header; every id and review quoted, inner quotes written `\\"`,
paragraphs split by `<br /><br />`; ids are `<number>_<rating>` and a review is positive (1) for a
rating >= 7, negative (0) for one < 5, as in the real data. `sampleSubmission.csv` is
comma-separated `id,sentiment`. Everything is deterministic from one seed.

Reviews are written from phrase lists: each carries its rating's sentiment through a few strong
and mild opinion phrases, but also negated ones ("not bad at all" is praise), praise inside a
negative review and the reverse, and neutral plot sentences, so a bag of words learns it without
solving it in one epoch. Numpy and pandas only (no TensorFlow).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from competition import load_spec
from pipeline.core.files import write_atomically, write_zip
from pipeline.formats.table import TableFile, tables_of
from pipeline.formats.tables import table_text

SPEC = load_spec("imdb")  # file names, quoting, columns
LAYOUT = tables_of(SPEC).splits["train"].layout
UNLABELED = tables_of(SPEC).splits["test"].layout  # the test and unlabelled files: no sentiment
# In the download beside the splits; petals does not read it.
EXTRA = TableFile("unlabeledTrainData.tsv", UNLABELED, "unlabeledTrainData.tsv.zip")
FILES = {**tables_of(SPEC).splits, "unlabeled": EXTRA}
DEFAULT_COUNTS = {"train": 2000, "test": 2000, "unlabeled": 500}

_STRONG = {
    1: ["a masterpiece", "brilliant", "one of the best films I have seen", "utterly captivating", "superb"],
    0: ["a disaster", "awful", "one of the worst films I have seen", "unwatchable", "a waste of time"],
}
_MILD = {
    1: ["enjoyable", "well acted", "worth a look", "charming", "nicely shot"],
    0: ["dull", "poorly acted", "forgettable", "clumsy", "badly edited"],
}
_NEGATED = {1: ["not bad at all", "never boring"], 0: ["not good", "never funny", "not worth it"]}
_TOPICS = ["the plot", "the acting", "the score", "the ending", "the dialogue", "the direction", "the cast"]
_PLOT = [
    "The story follows a {who} who returns to {where} after many years.",
    "It was shot in {where} and runs for almost two hours.",
    "The {who} is played by an actor I had not seen before.",
    'My friend called it "a film about a {who}" before we even sat down.',
    "I saw it on a rainy {day} with my family.",
]
_WHO = ["detective", "teacher", "singer", "soldier", "young doctor", "farmer", "thief"]
_WHERE = ["Chicago", "a small town", "the mountains", "Paris", "a seaside town", "an old hotel"]
_DAYS = ["Sunday", "Tuesday", "Friday night", "holiday"]


def sentiment_of(rating: int) -> int:
    """The real data's rule: 1 for ratings 7-10, 0 for 1-4 (5 and 6 never occur)."""
    return int(rating >= 7)


def _opinion(sentiment: int, rng: np.random.Generator) -> str:
    topic = str(rng.choice(_TOPICS)).capitalize()
    kind = rng.random()
    if kind < 0.3:
        return f"{topic} was {rng.choice(_STRONG[sentiment])}."
    if kind < 0.75:
        return f"{topic} was {rng.choice(_MILD[sentiment])}."
    return f"{topic} was {rng.choice(_NEGATED[sentiment])}."


def _plot(rng: np.random.Generator) -> str:
    return str(rng.choice(_PLOT)).format(
        who=rng.choice(_WHO), where=rng.choice(_WHERE), day=rng.choice(_DAYS)
    )


def review(rating: int, rng: np.random.Generator) -> str:
    """One review: paragraphs of plot and opinion sentences; about one opinion in four leans the
    other way (a fair point in a bad review, a complaint in a good one)."""
    sentiment = sentiment_of(rating)
    paragraphs = []
    for _ in range(int(rng.integers(1, 4))):
        sentences = []
        for _ in range(int(rng.integers(2, 5))):
            if rng.random() < 0.4:
                sentences.append(_plot(rng))
            else:
                lean = sentiment if rng.random() > 0.25 else 1 - sentiment
                sentences.append(_opinion(lean, rng))
        paragraphs.append(" ".join(sentences))
    return "<br /><br />".join(paragraphs)


def _ratings(count: int, rng: np.random.Generator) -> np.ndarray:
    """Half negative (1-4), half positive (7-10), as the real labelled set is balanced."""
    return np.where(rng.random(count) < 0.5, rng.integers(1, 5, count), rng.integers(7, 11, count))


def write_dataset(out_dir: Path, counts: dict[str, int] | None = None, seed: int = 0) -> dict[str, int]:
    """Write the competition's files under `out_dir` as its download unpacks: each table zipped
    on its own (`labeledTrainData.tsv.zip` holding `labeledTrainData.tsv`), the sample
    submission bare. Rows per file."""
    counts = {**DEFAULT_COUNTS, **(counts or {})}
    rng = np.random.default_rng(seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    numbers = iter(rng.permutation(np.arange(1, 10 * sum(counts.values()) + 1)))
    written = {}
    for split, table in FILES.items():
        ratings = _ratings(counts[split], rng)
        rows = [
            {
                "id": f"{next(numbers)}_{rating}",
                "sentiment": sentiment_of(rating),
                "review": review(rating, rng),
            }
            for rating in ratings
        ]
        if split == "unlabeled":  # the real unlabelled ids end in _0: no rating
            rows = [{**row, "id": row["id"].split("_")[0] + "_0"} for row in rows]
        columns = ["id", "sentiment", "review"] if table.layout.label_column else ["id", "review"]
        text = table_text(rows, columns, table.layout).encode("utf-8")
        write_zip(out_dir / table.archive, [(table.file, text)])
        written[split] = len(rows)
        if split == "test":
            sample = pd.DataFrame({SPEC.id_column: [row["id"] for row in rows], SPEC.label_column: 0})
            write_atomically(
                out_dir / SPEC.sample_submission, lambda path, sample=sample: sample.to_csv(path, index=False)
            )
    return written
