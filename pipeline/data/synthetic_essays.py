"""An embedded offline dataset for `feedback-prize-english-language-learning` (essays by English
language learners, six analytic scores each), in Kaggle's layout.

`train.csv` (text_id, full_text, cohesion, syntax, vocabulary, phraseology, grammar,
conventions), `test.csv` (text_id, full_text) and `sample_submission.csv` (text_id and 3.0 per
score), standard CSV quoting, paragraphs split by a blank line; ids are 12 upper-case hex digits
and scores 1.0 to 5.0 in steps of 0.5, as the real ones. Deterministic from one seed.

Each score follows one feature drawn into the essay, sentence by sentence, each a word-level
sign a bag of words can see (the text networks lower-case the text and drop punctuation):
- cohesion: a sentence opens with a linking phrase ("in addition", "for example");
- syntax: a sentence goes on with a subordinate clause ("because", "although", "which");
- vocabulary: its describing word is an advanced one ("beneficial") rather than a plain one ("good");
- phraseology: its set phrase is the idiomatic one ("make a decision", not "do a decision");
- grammar: its subject and verb agree ("they were", not "they was");
- conventions: its words are spelt right ("because", "a lot", not "becuase", "alot").
A writer has one level (a normal draw) and each feature's rate is that level plus its own
normal noise through a logistic, so the six scores correlate (about 0.45 here; 0.5-0.7 in the
real data); each score is then 2 + 2 x the share of the essay's sentences that show its feature,
plus N(0, 0.25) rater noise, rounded to a half point and kept in 1..5. Predicting each column's
mean scores about 0.67 MCRMSE on 1,200 essays; the rater noise and the rounding leave about 0.3
to a model that counts the features. Numpy and pandas only.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from competition import load_spec
from pipeline.core.files import write_atomically

SPEC = load_spec("feedback-prize-ell")
SCORES = SPEC.label_columns  # cohesion, syntax, vocabulary, phraseology, grammar, conventions
DEFAULT_COUNTS = {"train": 1200, "test": 3}  # the public download's three test essays
SENTENCES = (5, 11)  # an essay's sentences, drawn in [5, 11)
LEVEL_SPREAD = 1.2  # the writers' levels, on the logistic's scale
FEATURE_SPREAD = 0.6  # a feature's own noise around its writer's level
RATER_NOISE = 0.25

_TOPICS = ["online classes", "a four-day school week", "summer projects", "cell phones at school",
           "community service", "sports after school", "working in groups", "a later start"]  # fmt: skip
_LINKS = ["In addition,", "For example,", "However,", "As a result,", "On the other hand,", "Finally,"]
_CLAUSES = ["because it helps them learn more", "although some people disagree with this idea",
            "which gives them more time for their families", "since they can practise at home",
            "when the teachers explain the lesson clearly", "so that they can plan their future"]  # fmt: skip
_WORDS = {  # the plain word, and advanced ones in its place
    "good": ["beneficial", "valuable", "advantageous"], "big": ["substantial", "considerable"],
    "bad": ["detrimental", "harmful"], "important": ["essential", "crucial", "significant"],
    "hard": ["challenging", "demanding"], "nice": ["remarkable", "worthwhile"],
}  # fmt: skip
_PHRASES = [("make a decision", "do a decision"), ("pay attention", "put attention"),
            ("take a break", "make a break"), ("do their homework", "make their homework"),
            ("gain experience", "win experience"), ("have fun", "make fun")]  # fmt: skip
_AGREEMENT = [("students are sure", "students is sure"), ("they were sure", "they was sure"),
              ("the class is sure", "the class are sure"), ("a student feels", "a student feel"),
              ("teachers say", "teachers says"), ("everyone thinks", "everyone think")]  # fmt: skip
_SPELLING = {"because": "becuase", "a lot": "alot", "their": "thier", "which": "wich", "believe": "belive",
             "sure": "shure", "disagree": "dissagree", "teachers": "techers"}  # fmt: skip


def _sentence(topic: str, shows: np.ndarray, rng: np.random.Generator) -> str:
    """One sentence about `topic`, showing the features `shows` says (a bool per score, in SCORES'
    order) and the faults of those it does not."""
    cohesion, syntax, vocabulary, phraseology, grammar, conventions = shows
    plain = str(rng.choice(list(_WORDS)))
    word = str(rng.choice(_WORDS[plain])) if vocabulary else plain
    agreed, broken = _AGREEMENT[rng.integers(len(_AGREEMENT))]
    idiom, odd = _PHRASES[rng.integers(len(_PHRASES))]
    text = f"{agreed if grammar else broken} that {topic} is {word} and I believe it helps them"
    text += f" {idiom if phraseology else odd} a lot"
    if syntax:
        text += f", {rng.choice(_CLAUSES)}"
    if cohesion:
        text = f"{rng.choice(_LINKS)} {text[0].lower() + text[1:]}"
    if not conventions:
        wrong = [right for right in _SPELLING if f" {right} " in f" {text} "]
        for right in rng.permutation(wrong)[:2]:
            text = f" {text} ".replace(f" {right} ", f" {_SPELLING[right]} ", 1).strip()
    return text[0].upper() + text[1:] + "."


def essay(rates: np.ndarray, rng: np.random.Generator) -> tuple[str, np.ndarray]:
    """An essay whose sentences show each feature at its rate, and its six scores."""
    topic = str(rng.choice(_TOPICS))
    shows = rng.random((int(rng.integers(*SENTENCES)), len(SCORES))) < rates
    sentences = [_sentence(topic, row, rng) for row in shows]
    breaks = sorted(rng.choice(np.arange(1, len(sentences)), 2, replace=False))
    paragraphs = [" ".join(part) for part in np.split(np.array(sentences, object), breaks)]
    raw = 2.0 + 2.0 * shows.mean(axis=0) + rng.normal(0, RATER_NOISE, len(SCORES))
    return "\n\n".join(paragraphs), np.clip(np.round(raw * 2) / 2, 1.0, 5.0)


def _rates(count: int, rng: np.random.Generator) -> np.ndarray:
    """Each writer's rate of each feature: one level shared by the six, plus each one's own noise."""
    level = rng.normal(0, LEVEL_SPREAD, (count, 1))
    return 1 / (1 + np.exp(-(level + rng.normal(0, FEATURE_SPREAD, (count, len(SCORES))))))


def write_dataset(out_dir: Path, counts: dict[str, int] | None = None, seed: int = 0) -> dict[str, int]:
    """Write train.csv, test.csv and sample_submission.csv under `out_dir`; rows per split."""
    counts = {**DEFAULT_COUNTS, **(counts or {})}
    rng = np.random.default_rng(seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    ids = iter(f"{n:012X}" for n in rng.choice(16**12, sum(counts.values()), replace=False))
    tables = {}
    for split in ("train", "test"):
        drawn = [essay(rates, rng) for rates in _rates(counts[split], rng)]
        table = pd.DataFrame(
            {"text_id": [next(ids) for _ in drawn], "full_text": [text for text, _ in drawn]}
        )
        if split == "train":
            table[list(SCORES)] = np.array([scores for _, scores in drawn])
        tables[split] = table
    sample = tables["test"][["text_id"]].assign(**dict.fromkeys(SCORES, 3.0))
    for name, table in (
        ("train.csv", tables["train"]),
        ("test.csv", tables["test"]),
        ("sample_submission.csv", sample),
    ):
        write_atomically(out_dir / name, lambda tmp, table=table: table.to_csv(tmp, index=False))
    return {split: len(table) for split, table in tables.items()}
