"""Real labelled sets found in packages, each split once into a user's competition and a test part.

For `make bench-realdata` (issue 65): data no one here drew, images and texts, five of them grouped
(several rows of one thing), each of 100 to 10,000 development examples:
- `stamps`, `faces`, `fashion` (images): cv_data's Tux Paint photo cut-outs (118 dev / 51 test),
  scikit-image's LFW subset (160 / 40) and Fashion-MNIST at 300 a class (3,000 / 2,000).
- `icons` (images, grouped): the Oxygen icon theme (Debian `oxygen-icon-theme`), its PNGs at 32,
  48, 64 and 128 px; the class is the icon's context folder (apps, devices, places...), the group
  is the icon's name: one icon drawn at several sizes is one group (745 dev images of 219 icons,
  373 test of 110; copies under another name and aliases left out).
- `gnome-icons` (images, grouped): GNOME 3.12's icon theme (Debian `gnome-icon-theme`), the same
  seven contexts drawn by other hands, its PNGs at 32, 48 and 256 px, grouped by icon as `icons`
  (403 dev images of 152 icons, 199 test of 75). Added after every choice of the image candidates
  (the thirty-first session): a check no choice here looked at.
- `manpages` (texts, grouped): passages of the Linux man pages (Debian `manpages`, `manpages-dev`);
  the class is the page's section (2 system calls, 3 library, 4 devices, 5 files, 7 overviews),
  the group is the page (902 dev passages of 127 pages, 448 test of 62). Macros, headers and
  SEE ALSO (which names sections) are left out.
- `amazon` (texts, grouped): VADER's rated sentences of Amazon reviews (the sdist bench_text_real
  fetches); positive if the mean rating is > 0, negative if < 0; the group is the review (2,395
  dev sentences of 203 reviews, 1,215 test of 96).
- `nyt` (texts, grouped) and `tweets` (texts): VADER's rated sentences of New York Times editorials
  (grouped by editorial) and its rated tweets, labelled as amazon's; added after the text
  candidates were chosen, so they check the choice on texts it never saw.
- `fortunes` (texts): the fortune cookies of Debian's `fortunes`, the class the file (computers,
  food, law...; 1,010 dev, 337 test); a text in two files is left out.
Debian packages are `apt-get download`ed and unpacked without root under the cache folder
(cv_data._unpacked); nothing is installed.

Each set is split ONCE (seed 0, stratified; grouped sets by group, no group on both sides; a
third is the test part, a quarter for fortunes) into a development part, written as a user's own
competition (image CSV as cv_data writes it; a CSV `table` for texts; a grouped set names its
`[data] group_column`), and a test part whose labels stay in `test_labels.csv`, outside the
competition's folders, for scoring once at the end. Other seeds deal the same rows again
(`realdata_gaps.resplit`, `bench_realdata.py --seeds`): how much of a gap is one split's luck.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import re
import tarfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from benchmarks import cv_data

CACHE = cv_data.CACHE
SEED = 0
MIN_DEV, MAX_DEV = 100, 10_000  # the bounds on a set's development part
ICON_SIZES = ("32x32", "48x48", "64x64", "128x128")  # 8-22 px icons are a few dots once squared
# GNOME 3.12's theme (another drawing of the same contexts) has 32, 48 and 256 px, and 16-24 px.
GNOME_ICON_SIZES = ("32x32", "48x48", "256x256")
ICON_CONTEXTS = ("actions", "apps", "categories", "devices", "mimetypes", "places", "status")
ICONS_PER_CONTEXT = 50  # icon names (groups) a context keeps: ~1,250 images in all
MAN_SECTIONS = ("2", "3", "4", "5", "7")  # 1, 6 and 8 hold under a dozen pages here
PAGES_PER_SECTION, PASSAGES_PER_PAGE = 40, 8
PASSAGE_WORDS = (12, 120)  # shorter is a heading or a list item; longer is cut
SKIPPED_MAN_SECTIONS = ("SEE ALSO", "COLOPHON")  # lists of pages with their section numbers
FORTUNE_FILES = ("computers", "education", "food", "law", "love", "politics", "science", "sports", "work")
FORTUNES_PER_FILE = 150
OVERSTRUCK = re.compile(r".\x08")  # a typewriter's underline: the character, a backspace
AMAZON = "hutto_ICWSM_2014/amazonReviewSnippets_GroundTruth.txt"
# Added after the text candidates' order was set on manpages, fortunes and amazon (the
# twenty-sixth session): what the default does on texts no choice here looked at.
NYT = "hutto_ICWSM_2014/nytEditorialSnippets_GroundTruth.txt"
TWEETS = "hutto_ICWSM_2014/tweets_GroundTruth.txt"


@dataclass(frozen=True)
class Part:
    """One side of the split: images (uint8 arrays) or texts, class ids, and each row's group."""

    items: list
    labels: np.ndarray
    groups: np.ndarray | None = None

    def take(self, rows: np.ndarray) -> Part:
        groups = None if self.groups is None else self.groups[rows]
        return Part([self.items[r] for r in rows], self.labels[rows], groups)


@dataclass(frozen=True)
class RealSet:
    name: str
    kind: str  # "image" or "text"
    classes: list[str]
    dev: Part
    test: Part  # never seen by a choice
    keeps_label: tuple[str, ...] = ()  # images: the transforms after which an image is its class

    @property
    def grouped(self) -> bool:
        return self.dev.groups is not None


# ----------------------------------------------------------------------------- the split


def split_once(labels: np.ndarray, groups: np.ndarray | None, parts: int, seed: int = SEED) -> tuple:
    """(dev rows, test rows): one of `parts` stratified parts is the test part, dealt once by `seed`;
    with `groups`, whole groups to each side (StratifiedGroupKFold's first fold)."""
    from sklearn.model_selection import StratifiedGroupKFold, train_test_split

    rows = np.arange(len(labels))
    if groups is None:
        dev, test = train_test_split(rows, test_size=1 / parts, stratify=labels, random_state=seed)
        return np.sort(dev), np.sort(test)
    folds = StratifiedGroupKFold(n_splits=parts, shuffle=True, random_state=seed)
    dev, test = next(folds.split(rows, labels, groups))
    return dev, test


def at_most(part: Part, most: int) -> Part:
    """`part` cut to at most `most` rows, whole groups (or rows) taken class by class in a seeded
    order, so every class keeps about its share: `--quick`'s smaller sets."""
    units = part.groups if part.groups is not None else np.arange(len(part.labels)).astype(str)
    unique, first, inverse, sizes = np.unique(
        units, return_index=True, return_inverse=True, return_counts=True
    )
    order = np.random.default_rng(SEED).permutation(len(unique))
    rank = np.zeros(len(order), np.int64)  # the unit's place among its class's units, in `order`
    for label in np.unique(part.labels):
        mine = np.flatnonzero(part.labels[first[order]] == label)
        rank[mine] = np.arange(len(mine))
    kept, count = np.zeros(len(unique), bool), 0
    for unit in order[np.argsort(rank, kind="stable")]:  # one unit of each class in turn
        if count + sizes[unit] <= most:
            kept[unit], count = True, count + sizes[unit]
    return part.take(np.flatnonzero(kept[inverse]))


def check_sizes(data: RealSet) -> RealSet:
    """`data` itself, or one line saying which bound its development part is outside of."""
    count = len(data.dev.labels)
    if not MIN_DEV <= count <= MAX_DEV:
        raise ValueError(f"{data.name}: {count} development examples, outside {MIN_DEV}-{MAX_DEV}")
    return data


def made(name, kind, classes, items, labels, groups, parts, keeps=()) -> RealSet:
    """A RealSet of every labelled row, split once: one of `parts` is its test part."""
    labels = np.asarray(labels, np.int64)
    groups = None if groups is None else np.asarray(groups, dtype=object)
    everything = Part(list(items), labels, groups)
    dev, test = split_once(labels, groups, parts)
    return RealSet(name, kind, list(classes), everything.take(dev), everything.take(test), tuple(keeps))


# ----------------------------------------------------------------------------- the images


def _from_cv_data(name: str):
    def load() -> RealSet:
        data = cv_data.load(name)
        parts = [Part(list(images), np.asarray(labels)) for images, labels in (data.dev, data.test)]
        return RealSet(name.split("-")[0], "image", data.classes, *parts, tuple(data.keeps_label))

    return load


def _icon_theme(name: str, package: str, base: str, sizes: tuple[str, ...]) -> RealSet:
    """A Debian icon theme's PNGs at `sizes`: the class is the icon's context folder, the group its
    name (one icon drawn at several sizes); aliases (links) and copies under another name left out."""
    root = cv_data._unpacked(package) / base
    rng = np.random.default_rng(SEED)
    seen, items, labels, groups = set(), [], [], []
    for label, context in enumerate(ICON_CONTEXTS):
        files = [p for size in sizes for p in sorted((root / size / context).glob("*.png"))]
        files = [p for p in files if not p.is_symlink()]  # an alias of another icon: the same image
        names = sorted({p.stem for p in files})
        chosen = set(rng.permutation(names)[:ICONS_PER_CONTEXT])
        for path in files:
            digest = hashlib.sha256(path.read_bytes()).digest()
            if path.stem in chosen and digest not in seen:  # a copy under another name: left out
                seen.add(digest)
                items.append(cv_data._stamp_image(path))  # on white, as a cut-out
                labels.append(label)
                groups.append(path.stem)
    keeps = ("flip", "zoom", "shift", "brightness", "contrast")
    return made(name, "image", ICON_CONTEXTS, items, labels, groups, 3, keeps)


def icons() -> RealSet:
    return _icon_theme("icons", "oxygen-icon-theme", "usr/share/icons/oxygen/base", ICON_SIZES)


def gnome_icons() -> RealSet:
    return _icon_theme("gnome-icons", "gnome-icon-theme", "usr/share/icons/gnome", GNOME_ICON_SIZES)


# ----------------------------------------------------------------------------- the texts

_ESCAPES = [
    (re.compile(r'\\".*$'), ""),  # a comment to the line's end
    (re.compile(r"\\f(\[[^\]]*\]|\(..|.)"), ""),  # font changes
    (re.compile(r"\\\*(\[[^\]]*\]|\(..|.)"), ""),  # strings
    (re.compile(r"\\\((em|en|hy|aq|dq|lq|rq|oq|cq)"), "-"),
    (re.compile(r"\\\(..|\\\[[^\]]*\]"), " "),  # other special characters
    (re.compile(r"\\[-e]"), "-"),
    (re.compile(r"\\[&~ 0|^,/:%]"), " "),
]
_FONT_MACROS = re.compile(r"^\.(B|I|BI|BR|IB|IR|RB|RI|SM|SB)\s+(.*)$")


def _roff_text(line: str) -> str:
    for pattern, by in _ESCAPES:
        line = pattern.sub(by, line)
    return line.replace('"', " ").replace("\\", "")


def man_passages(source: str) -> list[str]:
    """The prose paragraphs of one man page's roff source: a macro line ends a paragraph (font
    macros give their words), the header and SEE ALSO-like sections are left out."""
    passages, words, section = [], [], ""

    def close() -> None:
        if words and section not in SKIPPED_MAN_SECTIONS and len(words) >= PASSAGE_WORDS[0]:
            passages.append(" ".join(words[: PASSAGE_WORDS[1]]))
        words.clear()

    for line in source.splitlines():
        font = _FONT_MACROS.match(line)
        if line.startswith((".", "'")) and not font:
            close()
            if line.startswith((".SH", ".SS")):
                section = _roff_text(line[3:]).strip().upper()
            continue
        words.extend(_roff_text(font.group(2) if font else line).split())
    close()
    return passages


def manpages() -> RealSet:
    rng = np.random.default_rng(SEED)
    pages: dict[str, dict[str, list[str]]] = {s: {} for s in MAN_SECTIONS}
    for package in ("manpages", "manpages-dev"):
        for path in sorted((cv_data._unpacked(package) / "usr/share/man").glob("man[0-9]/*.gz")):
            section = path.parent.name[3:]
            source = gzip.decompress(path.read_bytes()).decode("utf-8", "replace")
            if section in pages and not source.lstrip().startswith(".so"):  # .so: a link to a page
                found = man_passages(source)
                if len(found) >= 2:
                    pages[section][path.name.split(".")[0]] = found
    texts, labels, groups = [], [], []
    for label, section in enumerate(MAN_SECTIONS):
        for page in rng.permutation(sorted(pages[section]))[:PAGES_PER_SECTION]:
            found = pages[section][page]
            for row in sorted(rng.permutation(len(found))[:PASSAGES_PER_PAGE]):
                texts.append(found[row])
                labels.append(label)
                groups.append(f"{page}.{section}")
    return made("manpages", "text", [f"section{s}" for s in MAN_SECTIONS], texts, labels, groups, 3)


def _vader(name: str, member: str, grouped: bool) -> RealSet:
    """VADER's rated snippets in `member`: positive if the raters' mean is > 0, negative if < 0 (0
    left out); with `grouped`, an id `<source>_<sentence>` groups the sentences of one source."""
    from benchmarks import bench_text_real  # its imports reach TensorFlow: only when needed

    with tarfile.open(bench_text_real.sdist(CACHE)) as outer:
        inner = outer.extractfile(bench_text_real.INNER).read()
    with tarfile.open(fileobj=io.BytesIO(inner)) as archive:
        lines = archive.extractfile(member).read().decode("utf-8", "replace").splitlines()
    rows = [line.split("\t", 2) for line in lines if line.strip()]
    rated = [(number, float(mean), text) for number, mean, text in rows if float(mean) != 0]
    labels = [int(mean > 0) for _, mean, _ in rated]
    groups = [number.rsplit("_", 1)[0] for number, _, _ in rated] if grouped else None
    return made(name, "text", ["negative", "positive"], [t for *_, t in rated], labels, groups, 3)


def amazon() -> RealSet:
    return _vader("amazon", AMAZON, grouped=True)  # review _ sentence


def nyt() -> RealSet:
    return _vader("nyt", NYT, grouped=True)  # editorial _ sentence


def tweets() -> RealSet:
    return _vader("tweets", TWEETS, grouped=False)


def fortunes() -> RealSet:
    folder = cv_data._unpacked("fortunes") / "usr/share/games/fortunes"
    rng = np.random.default_rng(SEED)
    found = {}
    for name in FORTUNE_FILES:
        entries = (folder / name).read_bytes().decode("utf-8", "replace").split("\n%\n")
        found[name] = [" ".join(OVERSTRUCK.sub("", e).split()) for e in entries if e.strip()]
    counts: dict[str, int] = {}
    for texts in found.values():
        for text in set(texts):
            counts[text] = counts.get(text, 0) + 1
    texts, labels = [], []
    for label, name in enumerate(FORTUNE_FILES):
        unique = sorted({t for t in found[name] if counts[t] == 1 and t != "%"})
        for text in rng.permutation(unique)[:FORTUNES_PER_FILE]:
            texts.append(str(text))
            labels.append(label)
    return made("fortunes", "text", FORTUNE_FILES, texts, labels, None, 4)


SETS = {  # name -> its loader, cheapest first: a run that is stopped has the most sets done
    "stamps": _from_cv_data("stamps"),
    "faces": _from_cv_data("faces"),
    "manpages": manpages,
    "fortunes": fortunes,
    "amazon": amazon,
    "nyt": nyt,
    "tweets": tweets,
    "gnome-icons": gnome_icons,
    "icons": icons,
    "fashion": _from_cv_data("fashion-medium"),
}
# Sets that bench-realdata's default run leaves out: the probe benchmarks ask of them where the CV
# choice stops paying (Fashion-MNIST whole: 8,000 dev / 2,000 test images, a choice of most of an
# hour on 2 cores).
LARGER = {"fashion-whole": _from_cv_data("fashion")}


def load(name: str, quick: bool = False) -> RealSet:
    """Set `name`, its sizes checked; `quick`: its dev part cut to MIN_DEV-ish rows, test to 100."""
    data = check_sizes({**SETS, **LARGER}[name]())
    if quick:
        data = replace(data, dev=at_most(data.dev, 150), test=at_most(data.test, 100))
    return data


# ----------------------------------------------------------------------------- the competitions

TEXT_SPEC = """name = "{name}"
title = "{name}: real texts split once into development and test parts"
slugs = ["{name}-real"]
task = "text_classification"
classes_file = "classes.txt"
metric = "macro_f1"

[data]
format = "table"
splits = ["train", "test"]
labeled_splits = ["train"]
sample_submission = "sample_submission.csv"
{grouping}
[data.counts]
train = {train}
test = {test}

[data.table]
separator = ","
id_column = "id"
text_columns = ["text"]
label_column = "label"

[data.table.train]
file = "train.csv"

[data.table.test]
file = "test.csv"

[submission]
id_column = "id"
label_column = "label"
value = "class"

[augment]
keeps_label = []
"""
GROUP_COLUMN = "group"


def write_competition(data: RealSet, root: Path) -> tuple[Path, Path, dict[str, int]]:
    """(the competition file, the data folder to fetch, test id -> true label): `root` gets
    `competition/`, `download/` and `test_labels.csv`, outside both."""
    write = _write_images if data.kind == "image" else _write_texts
    return write(data, root)


def _write_images(data: RealSet, root: Path) -> tuple[Path, Path, dict[str, int]]:
    """cv_data's image-CSV competition; a grouped set's train.csv gets its group column, named."""
    import pandas as pd

    labelled = cv_data.LabelledSet(
        data.name, data.classes, list(data.keeps_label),
        (data.dev.items, data.dev.labels), (data.test.items, data.test.labels),
    )  # fmt: skip
    # At their own size, as a user's photos come: squared to 192 px (cv_data's default, the CPU
    # recipe's size), the 512-px stamps lost what `trio` reads at 260 (benchmarks/probe_splits.json).
    spec, folder, truth = cv_data.write_competition(labelled, root, size=None)
    if data.grouped:
        frame = pd.read_csv(folder / "train.csv", dtype=str)
        frame[GROUP_COLUMN] = data.dev.groups  # rows in dev order, as written
        frame.to_csv(folder / "train.csv", index=False)
        text = spec.read_text()
        named = text.replace(
            'format = "image_csv"\n', f'format = "image_csv"\ngroup_column = "{GROUP_COLUMN}"\n'
        )
        assert named != text, "cv_data's competition file no longer says its format"
        spec.write_text(named)
    return spec, folder, truth


def _write_texts(data: RealSet, root: Path) -> tuple[Path, Path, dict[str, int]]:
    """A CSV table per split (quoted as pipeline.formats.tables writes them): train with id, text,
    label (and group), test with id and text; a sample submission of the test ids."""
    import pandas as pd

    from pipeline.formats.table_layout import TableLayout
    from pipeline.formats.tables import table_text

    spec_dir, folder = root / "competition", root / "download"
    spec_dir.mkdir(parents=True)
    folder.mkdir(parents=True)
    (spec_dir / "classes.txt").write_text("\n".join(data.classes) + "\n")
    grouping = f'group_column = "{GROUP_COLUMN}"\n' if data.grouped else ""
    spec = spec_dir / f"{data.name}.toml"
    spec.write_text(TEXT_SPEC.format(name=data.name, grouping=grouping, train=len(data.dev.labels),
                                     test=len(data.test.labels)))  # fmt: skip
    layout = TableLayout(separator=",", id_column="id", text_columns=("text",), label_column="label")
    dev_ids = [f"d{i:06d}" for i in range(len(data.dev.labels))]
    columns = ["id", "text", "label", *([GROUP_COLUMN] if data.grouped else [])]
    rows = [
        {"id": i, "text": text, "label": int(label), GROUP_COLUMN: str(group)}
        for i, text, label, group in zip(dev_ids, data.dev.items, data.dev.labels,
                                         data.dev.groups if data.grouped else dev_ids, strict=True)
    ]  # fmt: skip
    (folder / "train.csv").write_text(table_text(rows, columns, layout))
    test_ids = [f"t{i:06d}" for i in range(len(data.test.labels))]
    tests = [{"id": i, "text": text} for i, text in zip(test_ids, data.test.items, strict=True)]
    (folder / "test.csv").write_text(table_text(tests, ["id", "text"], layout))
    pd.DataFrame({"id": test_ids, "label": 0}).to_csv(folder / "sample_submission.csv", index=False)
    pd.DataFrame({"id": test_ids, "label": data.test.labels}).to_csv(root / "test_labels.csv", index=False)
    return spec, folder, dict(zip(test_ids, data.test.labels.tolist(), strict=True))
