"""An embedded offline dataset for `contradictory-my-dear-watson` (sentence pairs), in Kaggle's format.

`train.csv`: id (10 hex characters), premise, hypothesis, lang_abv, language, label (0
entailment, 1 neutral, 2 contradiction); `test.csv` the same without label;
`sample_submission.csv` is `id,prediction`. Standard CSV quoting (commas and quotes inside texts).
Most pairs are English, the rest French and Spanish, as the real data is mostly English.

A premise says who was where and when. Each hypothesis sentence names a place, and whether it
is entailed, contradicted or neither depends on whether that place is the premise's ("was at"
the same place is entailed, another place contradicted; "never went to" the same place is
contradicted, another place neither), so the words of either sentence alone do not give the label.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from competition import load_spec
from pipeline.core.files import write_atomically
from pipeline.formats.table import tables_of
from pipeline.formats.tables import write_table

SPEC = load_spec("watson")  # file names, columns, classes
LAYOUT = tables_of(SPEC).splits["train"].layout
UNLABELED = tables_of(SPEC).splits["test"].layout  # test.csv: no label
CLASSES = SPEC.classes
DEFAULT_COUNTS = {"train": 1200, "test": 400}

# Per language: its name, words, a premise's sentences and one hypothesis of each kind. {W} who,
# {p} the premise's place, {d} its day, {X} the place a hypothesis names.
LANGUAGES = {
    "en": {
        "language": "English",
        "who": [
            "the teacher",
            "my neighbour",
            "the old doctor",
            "a young singer",
            "the mayor",
            "her brother",
        ],
        "place": ["Paris", "the market", "the harbour", "a small village", "the museum", "the station"],
        "day": ["on Monday", "last winter", "in the evening", "on her birthday", "at dawn"],
        "premise": [
            "{W} travelled to {p} {d}.",
            "{W} was seen at {p} {d}, laughing.",
            '{W} called {d}: "I am at {p} now."',
        ],
        "at": "{W} was at {X} {d}.",
        "never": "{W} never went to {X}.",
        "someone": "Someone was at {X}.",
        "home": "{W} stayed home {d}.",
        "yearly": "{W} goes to {X} every year.",
    },
    "fr": {
        "language": "French",
        "who": ["le professeur", "mon voisin", "le vieux médecin", "une jeune chanteuse", "le maire"],
        "place": ["Paris", "le marché", "le port", "un petit village", "le musée", "la gare"],
        "day": ["lundi", "l'hiver dernier", "le soir", "à l'aube"],
        "premise": [
            "{W} est allé à {p} {d}.",
            "{W} était à {p} {d}, en riant.",
            "{W} a appelé {d} : « je suis à {p} maintenant ».",
        ],
        "at": "{W} était à {X} {d}.",
        "never": "{W} n'est jamais allé à {X}.",
        "someone": "Quelqu'un était à {X}.",
        "home": "{W} est resté chez lui {d}.",
        "yearly": "{W} va à {X} chaque année.",
    },
    "es": {
        "language": "Spanish",
        "who": ["el profesor", "mi vecino", "el viejo médico", "una joven cantante", "el alcalde"],
        "place": ["París", "el mercado", "el puerto", "un pequeño pueblo", "el museo", "la estación"],
        "day": ["el lunes", "el invierno pasado", "por la tarde", "al amanecer"],
        "premise": [
            "{W} viajó a {p} {d}.",
            "{W} estuvo en {p} {d}, riendo.",
            '{W} llamó {d}: "estoy en {p} ahora".',
        ],
        "at": "{W} estuvo en {X} {d}.",
        "never": "{W} nunca fue a {X}.",
        "someone": "Alguien estuvo en {X}.",
        "home": "{W} se quedó en casa {d}.",
        "yearly": "{W} va a {X} cada año.",
    },
}
_SHARE = {"en": 0.6, "fr": 0.2, "es": 0.2}
_CONTRACTIONS = {"fr": (("à le ", "au "),), "es": ((" a el ", " al "),)}
# Which (hypothesis kind, names the premise's place?) pairs give each class: the same sentence is
# entailed, contradicted or neither depending on the place, so the premise must be read.
RELATIONS = {
    0: [("at", True), ("someone", True)],
    1: [("never", False), ("someone", False), ("yearly", True), ("yearly", False)],
    2: [("at", False), ("never", True), ("home", None)],
}


def pair(language: str, label: int, rng: np.random.Generator) -> tuple[str, str]:
    """One (premise, hypothesis) in `language` whose relation is CLASSES[label]."""
    lexicon = LANGUAGES[language]
    who = str(rng.choice(lexicon["who"]))
    place, other = (str(p) for p in rng.choice(lexicon["place"], 2, replace=False))
    words = {"W": who[0].upper() + who[1:], "p": place, "d": str(rng.choice(lexicon["day"]))}
    kind, same_place = RELATIONS[label][int(rng.integers(len(RELATIONS[label])))]
    premise = str(rng.choice(lexicon["premise"])).format(**words)
    hypothesis = lexicon[kind].format(**words, X=place if same_place else other)
    return _contract(premise, language), _contract(hypothesis, language)


def _contract(text: str, language: str) -> str:
    """French and Spanish contract a preposition and an article: au marché, al museo."""
    for long, short in _CONTRACTIONS.get(language, ()):
        text = text.replace(long, short)
    return text


def _rows(count: int, rng: np.random.Generator, ids: set[str]) -> list[dict[str, object]]:
    rows = []
    for _ in range(count):
        language = str(rng.choice(list(_SHARE), p=list(_SHARE.values())))
        label = int(rng.integers(len(CLASSES)))
        premise, hypothesis = pair(language, label, rng)
        row_id = _new_id(rng, ids)
        rows.append({"id": row_id, "premise": premise, "hypothesis": hypothesis, "lang_abv": language,
                     "language": LANGUAGES[language]["language"], "label": label})  # fmt: skip
    return rows


def _new_id(rng: np.random.Generator, taken: set[str]) -> str:
    while True:
        candidate = rng.bytes(5).hex()  # 10 hex characters, as the real ids
        if candidate not in taken:
            taken.add(candidate)
            return candidate


def write_dataset(out_dir: Path, counts: dict[str, int] | None = None, seed: int = 0) -> dict[str, int]:
    """Write the competition's files under `out_dir` (`train.csv`, `test.csv`,
    `sample_submission.csv`); rows per file."""
    counts = {**DEFAULT_COUNTS, **(counts or {})}
    rng = np.random.default_rng(seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    ids: set[str] = set()
    train, test = _rows(counts["train"], rng, ids), _rows(counts["test"], rng, ids)
    columns = ["id", "premise", "hypothesis", "lang_abv", "language"]
    tables = tables_of(SPEC).splits
    write_table(out_dir / tables["train"].file, train, [*columns, "label"], LAYOUT)
    write_table(out_dir / tables["test"].file, test, columns, UNLABELED)
    sample = pd.DataFrame({SPEC.id_column: [row["id"] for row in test], SPEC.label_column: 0})
    write_atomically(out_dir / SPEC.sample_submission, lambda path: sample.to_csv(path, index=False))
    return {"train": len(train), "test": len(test)}
