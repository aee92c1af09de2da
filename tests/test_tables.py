"""Tables of texts: Kaggle's quoting read exactly, bad files refused in one line, and the
embedded IMDB-review dataset of `word2vec-nlp-tutorial`."""

from __future__ import annotations

import zipfile

import pandas as pd
import pytest

from pipeline.core.errors import PetalsError
from pipeline.data import synthetic_reviews
from pipeline.formats.labels import LabelReading
from pipeline.formats.tables import TableLayout, read_table, write_table

REVIEWS = synthetic_reviews.LAYOUT
SENTIMENT = LabelReading("ids", ("sentiment",), ("negative", "positive"))  # how imdb reads its labels
TRICKY = [  # what real reviews hold: escaped quotes, a backslash, tags, a tab, a review reading NA
    {
        "id": "12311_10",
        "sentiment": 1,
        "review": 'He said "wow" and left.<br /><br />A \\ in the title, and a\ttab.',
    },
    {"id": "8348_2", "sentiment": 0, "review": "NA"},
    {"id": "5828_4", "sentiment": 0, "review": '"Quoted from start to end"'},
]


def test_what_is_written_in_kaggles_quoting_reads_back_exactly(tmp_path):
    path = tmp_path / "labeledTrainData.tsv"
    write_table(path, TRICKY, ["id", "sentiment", "review"], REVIEWS)
    assert path.read_text().splitlines()[1].startswith('"12311_10"\t1\t"He said \\"wow\\" and left.')
    table = read_table(path, REVIEWS, SENTIMENT)
    assert table.to_dict("records") == TRICKY


@pytest.fixture(scope="module")
def reviews(tmp_path_factory):
    root = tmp_path_factory.mktemp("reviews")
    counts = synthetic_reviews.write_dataset(root, {"train": 600, "test": 400, "unlabeled": 50}, seed=3)
    names = sorted(p.name for p in root.iterdir())
    for archive in root.glob("*.zip"):  # what fetch will unpack
        with zipfile.ZipFile(archive) as opened:
            assert opened.namelist() == [archive.stem], archive  # one table each, named as the zip
            opened.extractall(root)
    return root, counts, names


def test_the_embedded_reviews_are_kaggles_files_and_pandas_defaults_garble_them(reviews):
    root, counts, names = reviews
    assert names == [
        "labeledTrainData.tsv.zip", "sampleSubmission.csv", "testData.tsv.zip", "unlabeledTrainData.tsv.zip",
    ]  # fmt: skip
    train = read_table(root / "labeledTrainData.tsv", REVIEWS, SENTIMENT)
    assert len(train) == counts["train"] == 600
    ratings = train["id"].str.split("_").str[1].astype(int)
    assert train["sentiment"].tolist() == (ratings >= 7).astype(int).tolist()  # the real data's rule
    assert set(ratings) <= {1, 2, 3, 4, 7, 8, 9, 10} and 0.4 < train["sentiment"].mean() < 0.6
    assert train["review"].str.contains('"').any() and train["review"].str.contains("<br />").any()
    garbled = pd.read_csv(root / "labeledTrainData.tsv", sep="\t")  # pandas' defaults
    assert garbled["review"].tolist() != train["review"].tolist()
    test = read_table(root / "testData.tsv", synthetic_reviews.UNLABELED)
    sample = pd.read_csv(root / "sampleSubmission.csv", dtype=str)
    assert list(sample.columns) == ["id", "sentiment"] and sample["id"].tolist() == test["id"].tolist()
    unlabeled = read_table(root / "unlabeledTrainData.tsv", synthetic_reviews.UNLABELED)
    assert unlabeled["id"].str.endswith("_0").all()
    assert not set(train["id"]) & set(test["id"])


def test_the_embedded_reviews_are_learnable_but_not_solved(reviews):
    """A bag of words (TF-IDF, logistic regression) scored with the competition's metric, ROC AUC,
    on the test reviews, whose ids carry their rating."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    root, _, _ = reviews
    train = read_table(root / "labeledTrainData.tsv", REVIEWS, SENTIMENT)
    test = read_table(root / "testData.tsv", synthetic_reviews.UNLABELED)
    truth = (test["id"].str.split("_").str[1].astype(int) >= 7).astype(int)
    words = TfidfVectorizer(ngram_range=(1, 2)).fit(train["review"])
    model = LogisticRegression(max_iter=1000).fit(words.transform(train["review"]), train["sentiment"])
    score = roc_auc_score(truth, model.predict_proba(words.transform(test["review"]))[:, 1])
    assert 0.8 < score < 0.995, score


def test_the_same_seed_draws_the_same_files(tmp_path):
    for name in ("a", "b"):
        synthetic_reviews.write_dataset(tmp_path / name, {"train": 20, "test": 10, "unlabeled": 5}, seed=7)
    for file_name in ("labeledTrainData.tsv.zip", "testData.tsv.zip", "sampleSubmission.csv"):
        assert (tmp_path / "a" / file_name).read_bytes() == (tmp_path / "b" / file_name).read_bytes()


H = "id\tsentiment\treview\n"  # the labelled file's header


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (H + '"1_9"\t1\t"fine"\n"2_1"\t0\t"cut short\n"3_8"\t1\t"ok"\n', "does not parse as a tab-sep"),
        ('id\treview\n"1_9"\t"no label column"\n', r"no column 'sentiment' \(columns: id, review\)"),
        (H + '"1_9"\t1\t"fine"\n"2_1"\t2\t"two"\n', r"line 3: label '2' is not a class id \(0 to 1\)"),
        (H + '"1_9"\tpositive\t"fine"\n', r"line 2: label 'positive' is not a class id"),
        (H + '"1_9"\t1\t"fine"\n"1_9"\t1\t"again"\n', r"id '1_9' appears more than once"),
        (H + '""\t1\t"no id"\n', r"empty id on line 2"),
        (H + '"1_9"\t1\t""\n', r"empty review on line 2"),
        ("", r"empty file"),
    ],
)  # fmt: skip
def test_a_bad_table_is_one_line_naming_the_file(tmp_path, content, message):
    path = tmp_path / "labeledTrainData.tsv"
    path.write_text(content)
    with pytest.raises(PetalsError, match=message) as raised:
        read_table(path, REVIEWS, SENTIMENT)
    assert str(raised.value).startswith(f"{path}: ") and "\n" not in str(raised.value)


def test_a_missing_table_is_named(tmp_path):
    with pytest.raises(PetalsError, match=r"testData\.tsv: no such file"):
        read_table(tmp_path / "testData.tsv", synthetic_reviews.UNLABELED)


def test_pairs_of_texts_in_a_comma_separated_table(tmp_path):
    """Contradictory, My Dear Watson's shape: premise and hypothesis, standard CSV quoting."""
    layout = TableLayout(
        separator=",", id_column="id", text_columns=("premise", "hypothesis"), label_column="label"
    )
    rows = [
        {"id": "5130fd2cb5", "premise": 'comments were considered, "in formulating"', "hypothesis": "x, y",
         "label": 0},
        {"id": "5b72532a0b", "premise": "These are issues", "hypothesis": "Ceci n'est pas", "label": 2},
    ]  # fmt: skip
    path = tmp_path / "train.csv"
    write_table(path, rows, ["id", "premise", "hypothesis", "label"], layout)
    assert (
        read_table(path, layout, LabelReading("ids", ("label",), ("e", "n", "c"))).to_dict("records") == rows
    )


def test_the_embedded_sentence_pairs_need_both_sentences(tmp_path):
    """contradictory-my-dear-watson's files; a bag of words over the pair (TF-IDF, logistic
    regression) is far above chance (1/3) but far from solving it: the same hypothesis sentence
    is entailed or contradicted depending on the premise's place."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    from pipeline.data import synthetic_pairs

    counts = synthetic_pairs.write_dataset(tmp_path, {"train": 1600, "test": 30}, seed=0)
    assert counts == {"train": 1600, "test": 30}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sample_submission.csv", "test.csv", "train.csv"]
    header = (tmp_path / "train.csv").read_text().splitlines()[0]
    assert header == "id,premise,hypothesis,lang_abv,language,label"
    train = read_table(
        tmp_path / "train.csv", synthetic_pairs.LAYOUT, LabelReading("ids", ("label",), ("e", "n", "c"))
    )
    assert train["id"].str.fullmatch(r"[0-9a-f]{10}").all()
    raw = pd.read_csv(tmp_path / "train.csv")  # standard CSV: pandas' defaults read it
    assert raw["premise"].tolist() == train["premise"].tolist() and raw["premise"].str.contains('"|,').any()
    assert set(raw["lang_abv"]) == {"en", "fr", "es"} and (raw["lang_abv"] == "en").mean() > 0.5
    assert train["label"].value_counts().min() > 400  # three balanced classes
    test = read_table(tmp_path / "test.csv", synthetic_pairs.UNLABELED)
    sample = pd.read_csv(tmp_path / "sample_submission.csv", dtype=str)
    assert list(sample.columns) == ["id", "prediction"] and sample["id"].tolist() == test["id"].tolist()

    pairs = train["premise"] + " || " + train["hypothesis"]
    words = TfidfVectorizer(ngram_range=(1, 2)).fit(pairs[:1200])
    model = LogisticRegression(max_iter=2000).fit(words.transform(pairs[:1200]), train["label"][:1200])
    accuracy = (model.predict(words.transform(pairs[1200:])) == train["label"][1200:]).mean()
    assert 0.45 < accuracy < 0.85, accuracy
