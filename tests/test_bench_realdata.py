"""`make bench-realdata`'s split and competitions (benchmarks/realdata.py), on tiny fake data.

The benchmark is only honest if no group sits on both sides of the dev/test split, the test
labels never reach the competition's folders, and every set stays within the issue's bounds; each
check below fails on a split or a writer that broke that. Nothing is downloaded.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import realdata
from competition import load_spec
from pipeline import cli

GROUPS, ROWS, CLASSES = 60, 3, 3  # each group's rows share its class, as one man page's passages


def _grouped_rows() -> tuple[np.ndarray, np.ndarray]:
    groups = np.repeat([f"g{g}" for g in range(GROUPS)], ROWS)
    labels = np.repeat(np.arange(GROUPS) % CLASSES, ROWS)
    return labels, groups


def _fake(kind: str, grouped: bool) -> realdata.RealSet:
    labels, groups = _grouped_rows()
    rng = np.random.default_rng(0)
    if kind == "text":
        items = [
            f"passage {i} of {g}, on topic {c}" for i, (g, c) in enumerate(zip(groups, labels, strict=True))
        ]
    else:
        items = [rng.integers(0, 255, (8, 8, 3), dtype=np.uint8) for _ in labels]
    return realdata.made("fake", kind, [f"c{c}" for c in range(CLASSES)], items, labels,
                         groups if grouped else None, 3, ("flip",))  # fmt: skip


def test_a_grouped_split_puts_each_group_on_one_side_only():
    labels, groups = _grouped_rows()
    dev, test = realdata.split_once(labels, groups, 3)
    assert not set(groups[dev]) & set(groups[test])
    assert sorted([*dev, *test]) == list(range(len(labels)))  # every row once
    assert len(test) == pytest.approx(len(labels) / 3, abs=ROWS)
    assert set(labels[test]) == set(labels[dev]) == set(range(CLASSES))  # stratified
    # the same rows dealt without their groups would split groups: the check has teeth
    dev, test = realdata.split_once(labels, None, 3)
    assert set(groups[dev]) & set(groups[test])


def test_the_split_is_dealt_once_the_same_way():
    labels, groups = _grouped_rows()
    first, second = realdata.split_once(labels, groups, 3), realdata.split_once(labels, groups, 3)
    assert all(np.array_equal(a, b) for a, b in zip(first, second, strict=True))


def test_sizes_are_bounded_and_quick_sets_keep_groups_whole():
    data = _fake("text", grouped=True)
    assert realdata.check_sizes(data) is data  # 120 dev rows
    too_few = realdata.RealSet("small", "text", data.classes, data.dev.take(np.arange(99)), data.test)
    with pytest.raises(ValueError, match="small: 99 development examples, outside 100-10000"):
        realdata.check_sizes(too_few)
    cut = realdata.at_most(data.dev, 50)
    assert 45 <= len(cut.labels) <= 50 and set(cut.labels) == set(range(CLASSES))
    kept = set(cut.groups)
    assert all(np.sum(cut.groups == g) == np.sum(data.dev.groups == g) for g in kept)  # whole groups


def test_an_icon_theme_is_one_class_a_context_and_one_group_an_icon_without_aliases_or_copies(
    tmp_path, monkeypatch
):
    from PIL import Image

    from benchmarks import cv_data

    base = tmp_path / "usr/share/icons/fake"
    rng = np.random.default_rng(0)
    for context in realdata.ICON_CONTEXTS:
        for size in (32, 48):
            folder = base / f"{size}x{size}" / context
            folder.mkdir(parents=True)
            for icon in range(12):  # 12 icons a context, each drawn at both sizes
                pixels = rng.integers(0, 255, (size, size, 4), dtype=np.uint8)
                Image.fromarray(pixels, "RGBA").save(folder / f"{context}-{icon}.png")
            (folder / "alias.png").symlink_to(folder / f"{context}-0.png")  # a link: the same icon
            (folder / f"{context}-copy.png").write_bytes((folder / f"{context}-1.png").read_bytes())
    monkeypatch.setattr(cv_data, "_unpacked", lambda package: tmp_path if package == "fake-theme" else None)
    data = realdata._icon_theme("fake", "fake-theme", "usr/share/icons/fake", ("32x32", "48x48"))
    groups = np.concatenate([data.dev.groups, data.test.groups])
    labels = np.concatenate([data.dev.labels, data.test.labels])
    assert len(labels) == len(realdata.ICON_CONTEXTS) * 12 * 2  # no alias; of a copy and its icon, one
    assert not {"alias", *(f"{context}-copy" for context in realdata.ICON_CONTEXTS)} & set(groups)
    items = [image.tobytes() for image in [*data.dev.items, *data.test.items]]
    assert len(set(items)) == len(items)
    for group in set(groups):  # an icon's two sizes: one group, of its context's class
        assert len(set(labels[groups == group])) == 1 and np.sum(groups == group) == 2
    assert sorted(np.bincount(labels)) == [24] * len(realdata.ICON_CONTEXTS)
    assert not set(data.dev.groups) & set(data.test.groups)
    assert data.dev.items[0].shape[-1] == 3  # RGB on white, as the cut-outs


def _files_with_test_labels(root: Path, truth: dict) -> list[Path]:
    """Files under the competition's folders that pair a test id with its true label."""
    found = []
    for path in [*root.glob("competition/**/*"), *root.glob("download/**/*")]:
        if path.suffix != ".csv":
            continue
        frame = pd.read_csv(path, dtype=str)
        ids, labels = frame.iloc[:, 0], frame.get("label")
        if labels is not None and any(ids.isin(truth)):
            true = [str(truth[i]) for i in ids if i in truth]
            if [v for i, v in zip(ids, labels, strict=True) if i in truth] == true and len(set(true)) > 1:
                found.append(path)
    return found


@pytest.mark.parametrize("kind", ["text", "image"])
def test_the_competition_holds_the_dev_part_and_names_its_group_never_the_test_labels(tmp_path, kind):
    data = _fake(kind, grouped=True)
    spec_file, download, truth = realdata.write_competition(data, tmp_path / "set")
    assert len(truth) == len(data.test.labels) and (tmp_path / "set" / "test_labels.csv").is_file()
    assert not _files_with_test_labels(tmp_path / "set", truth)  # its teeth: the last test
    spec = load_spec(str(spec_file))
    assert spec.group_column == realdata.GROUP_COLUMN
    train = pd.read_csv(download / "train.csv", dtype=str)
    assert train[realdata.GROUP_COLUMN].tolist() == list(data.dev.groups)
    assert not set(train[realdata.GROUP_COLUMN]) & set(data.test.groups)
    code = cli.main(["fetch", "--no-progress", "--competition", str(spec_file), "--source", "dir",
                     "--from", str(download), "--data-dir", str(tmp_path / "data")])  # fmt: skip
    assert code == 0  # petals takes it as a user's competition


def test_an_ungrouped_text_set_names_no_group(tmp_path):
    spec_file, download, _ = realdata.write_competition(_fake("text", grouped=False), tmp_path / "set")
    assert load_spec(str(spec_file)).group_column is None
    assert list(pd.read_csv(download / "train.csv").columns) == ["id", "text", "label"]
    assert list(pd.read_csv(download / "test.csv").columns) == ["id", "text"]


def test_the_teeth_of_the_test_label_check(tmp_path):
    """A writer that left the test labels in the sample submission would be caught."""
    data = _fake("text", grouped=True)
    _, download, truth = realdata.write_competition(data, tmp_path / "set")
    sample = pd.read_csv(download / "sample_submission.csv", dtype=str)
    sample["label"] = sample["id"].map(lambda i: str(truth[i]))
    sample.to_csv(download / "sample_submission.csv", index=False)
    assert _files_with_test_labels(tmp_path / "set", truth) == [download / "sample_submission.csv"]


def test_the_default_records_what_its_cv_choice_saw_of_each_candidate(tmp_path):
    import json

    from benchmarks.bench_realdata import choice_rows

    assert choice_rows(tmp_path) is None  # one run: no choice made
    (tmp_path / "choose-cpu-1").mkdir()
    figures = [("trio", 0.912345, 0.05, 0.9, 1), ("recipe", 0.8, 0.1, 0.85, 4)]
    keys = ("candidate", "score", "spread", "cv_score", "cv_epoch")
    rows = [{**dict(zip(keys, row, strict=True)), "group": "g"} for row in figures]
    (tmp_path / "choose-cpu-1" / "choice.json").write_text(json.dumps({"rows": rows}))
    found = choice_rows(tmp_path)
    assert [r["candidate"] for r in found] == ["trio", "recipe"] and found[0]["score"] == 0.9123


def test_another_seed_deals_the_same_rows_again_keeping_groups_whole():
    from benchmarks.realdata_gaps import resplit

    data = _fake("text", grouped=True)
    assert resplit(data, realdata.SEED) is data  # seed 0: the split every figure before was of
    other = resplit(data, 1)
    assert not set(other.dev.groups) & set(other.test.groups)
    assert sorted(other.dev.items + other.test.items) == sorted(data.dev.items + data.test.items)
    assert abs(len(other.test.labels) - len(data.test.labels)) <= ROWS  # as large a test part
    assert set(other.test.groups) != set(data.test.groups)  # dealt otherwise: the seed counts


def test_a_grouped_test_score_draws_whole_groups_and_so_is_wider():
    from benchmarks.realdata_gaps import test_score

    labels, groups = _grouped_rows()
    predicted = labels.copy()
    wrong = np.isin(groups, ["g0", "g5", "g10", "g20", "g31", "g44"])  # errors come by the group,
    predicted[wrong] = (labels[wrong] + 1) % CLASSES  # as one man page's passages fail together
    by_rows = test_score(labels, predicted, CLASSES, None, draws=100)
    by_groups = test_score(labels, predicted, CLASSES, groups, draws=100)
    assert by_rows["test_macro_f1"] == by_groups["test_macro_f1"]
    assert (by_rows["test_95_over"], by_groups["test_95_over"]) == ("rows", "groups")
    low, high = by_rows["test_95"]
    assert low < by_rows["test_macro_f1"] < high
    # a row-wise draw splits the groups: 3 rows of one group, all wrong, count as 3 chances, not 1
    width = {
        name: found["test_95"][1] - found["test_95"][0]
        for name, found in (("rows", by_rows), ("groups", by_groups))
    }
    assert width["groups"] > width["rows"]


def test_the_seeds_sum_up_to_a_mean_gap_and_its_spread():
    from benchmarks.realdata_gaps import over_seeds

    def row(gap, seed):
        return {"cv_minus_test": gap, "reported": 0.5, "test_macro_f1": 0.5 - gap, "baseline_test": 0.5,
                "test_95": [0.4, 0.6], "commit": "abc", "learning_curve": 0.01 if seed else None}  # fmt: skip

    summary = over_seeds({str(s): row(g, s) for s, g in enumerate([-0.1, 0.0, 0.1])})
    assert summary["seeds"] == ["0", "1", "2"]
    assert summary["cv_minus_test"]["mean"] == pytest.approx(0.0, abs=1e-9)
    assert summary["cv_minus_test"]["sd"] == pytest.approx(0.1)
    assert summary["test_95_width_mean"] == pytest.approx(0.2)
    assert "learning_curve" not in summary  # seed 0 did not measure it: no mean of a subset


def test_a_seed_row_splits_the_gap_into_its_parts():
    from benchmarks.realdata_gaps import seed_row

    folds = {"fold_test": [0.64, 0.66], "fold_test_mean": 0.65}  # two fold models on the test part
    default = {"reported": {"score": 0.60, "kind": "cv"}, "test_macro_f1": 0.68, "test_95": [0.6, 0.75],
               "test_95_over": "groups", "backbone": "tfidf", "refit_test": 0.67, "seconds": {},
               "commit": "abc", "folds_on_test": folds}  # fmt: skip
    row = seed_row({"dev": 900, "test": 450, "default": default})
    assert row["cv_minus_test"] == pytest.approx(-0.08)  # signed: CV below test
    assert row["cv_minus_folds_on_test"] == pytest.approx(-0.05)  # the same fold models, dev vs test
    assert row["fold_mean_gain"] == pytest.approx(0.03)  # what averaging the fold models adds
    assert row["learning_curve"] == pytest.approx(0.02)  # all of dev against (K-1)/K of it
    parts = row["cv_minus_folds_on_test"] - row["fold_mean_gain"]
    assert parts == pytest.approx(row["cv_minus_test"])  # the parts add up to the gap
    assert "baseline_test" not in row  # measured at seed 0 only


def test_the_submission_is_scored_once_with_what_it_got_wrong_class_by_class(tmp_path):
    from benchmarks.bench_realdata import submitted
    from benchmarks.realdata_gaps import seed_row

    data = _fake("image", grouped=True)
    truth = {f"t{i:06d}": int(label) for i, label in enumerate(data.test.labels)}
    predicted = {  # every fourth test row one class along
        i: (label + 1) % CLASSES if n % 4 == 0 else label for n, (i, label) in enumerate(truth.items())
    }
    pd.DataFrame({"id": list(predicted), "label": list(predicted.values())}).to_csv(
        tmp_path / "fake.csv", index=False
    )
    _, scored = submitted(tmp_path, "fake", truth, data)
    confusion = np.array(scored["test_confusion"])  # a row a true class, a column a predicted one
    assert confusion.sum() == len(truth) and np.trace(confusion) == sum(n % 4 != 0 for n in range(len(truth)))
    for true in range(CLASSES):
        assert confusion[true].sum() == np.sum(data.test.labels == true)
        assert confusion[true, (true + 2) % CLASSES] == 0  # each mistake one class along, none two
    default = {"reported": {"score": 0.6, "kind": "cv"}, "seconds": {}, "commit": "abc", **scored}
    assert seed_row({"default": default})["test_confusion"] == scored["test_confusion"]


def test_seed_0s_default_alone_is_judged_against_the_baseline_stored_for_its_split():
    from benchmarks.bench_realdata import record

    default = {"reported": {"score": 0.72, "kind": "cv"}, "test_macro_f1": 0.736, "test_95": [0.7, 0.77],
               "test_95_over": "groups", "backbone": "tfidf", "seconds": {}, "commit": "abc"}  # fmt: skip
    stored = {"amazon": {"kind": "text", "dev": 2395, "baseline": {"test_macro_f1": 0.740}}}
    record(stored, "amazon", 0, {"dev": 2395, "test": 1215, "default": default})  # --no-baselines
    assert stored["amazon"]["seeds"]["0"]["baseline_test"] == 0.740
    assert stored["amazon"]["verdict"]["against_baseline"]["mean"] == pytest.approx(-0.004)
    record(stored, "amazon", 1, {"dev": 2395, "test": 1215, "default": default})
    assert "baseline_test" not in stored["amazon"]["seeds"]["1"]  # another split: its own baseline


def _seeds(defaults, baselines, gaps, half=0.05, expected=None) -> dict:
    """A fabricated set's seed rows: test scores, baselines, signed CV - test gaps, the test
    interval's half-width, and where given the carried CV's gaps."""
    rows = {}
    for seed, (test, base, gap) in enumerate(zip(defaults, baselines, gaps, strict=True)):
        row = {"test_macro_f1": test, "test_95": [test - half, test + half], "cv_minus_test": gap}
        if base is not None:
            row["baseline_test"] = base
        if expected is not None:
            row["expected_minus_test"] = expected[seed]
        rows[str(seed)] = row
    return rows


def test_the_bar_is_judged_over_the_seeds_and_a_small_image_set_needs_two_points():
    from benchmarks.realdata_verdict import NOT_JUDGEABLE, verdict

    seeds = _seeds([0.61, 0.62, 0.60], [0.60, 0.61, 0.59], [-0.08, 0.01, 0.02])
    image = verdict({"kind": "image", "dev": 745, "seeds": seeds})
    text = verdict({"kind": "text", "dev": 902, "seeds": seeds})
    # +0.01 over the baseline on every seed: beats it, but not by the small image sets' 0.02
    assert image["against_baseline"]["mean"] == pytest.approx(0.01) and image["against_baseline"]["n"] == 3
    assert (image["baseline_bar"], image["against_baseline"]["met"]) == (0.02, False)
    assert (text["baseline_bar"], text["against_baseline"]["met"]) == (0.0, True)
    assert image["against_baseline"]["one_split"] == NOT_JUDGEABLE  # +-0.05 of test noise > 0.02
    gap = image["reported_gap"]
    assert gap["mean"] == pytest.approx(-0.0167, abs=1e-4) and gap["within_on_mean"]  # met on the mean,
    assert (gap["seeds_within"], gap["n"]) == (2, 3)  # not on the first seed
    assert gap["test_95_half_width"] == pytest.approx(0.05) and gap["one_split"] == "judgeable"
    wide = verdict({"kind": "text", "dev": 902, "seeds": _seeds([0.6] * 3, [0.5] * 3, [0.0] * 3, half=0.09)})
    assert wide["reported_gap"]["one_split"] == NOT_JUDGEABLE  # +-0.09 > 0.05


def test_a_gap_beyond_the_bar_on_every_seed_is_not_met_and_clear():
    from benchmarks.realdata_verdict import lines, verdict

    found = verdict({"kind": "text", "dev": 900, "seeds": _seeds([0.5] * 3, [None] * 3, [0.07, 0.08, 0.075])})
    gap = found["reported_gap"]
    assert not gap["within_on_mean"] and gap["seeds_within"] == 0
    assert gap["over_seeds"] == "clear of the bar by > 2 se"
    assert found["against_baseline"] is None  # no seed measured a baseline: no verdict made up
    said = "\n".join(lines("set", found))
    assert "|reported CV/val - test| <= 0.05: on the mean NOT met (+0.075" in said and "beats" not in said


def test_the_carried_cv_is_judged_against_raw_cv_on_the_same_seeds():
    from benchmarks.realdata_verdict import verdict

    seeds = _seeds([0.5] * 3, [0.5] * 3, [-0.03, -0.01, -0.06], expected=[0.0, 0.03, -0.05])
    both = verdict({"kind": "text", "dev": 1010, "seeds": seeds})["expected_vs_cv"]
    assert (both["cv_mean_abs"], both["expected_mean_abs"]) == (0.0333, 0.0267)
    assert both["closer"] and (both["seeds_closer"], both["n"]) == (2, 3)  # not on the second seed
    del seeds["0"]["expected_minus_test"]  # a seed run before the carry: left out of the pairing
    worse = verdict({"kind": "text", "dev": 1010, "seeds": seeds})["expected_vs_cv"]
    assert worse["n"] == 2 and not worse["closer"]  # 0.04 against 0.035 on the two seeds with both


def test_the_text_blocks_bench_joins_blocks_each_of_unit_length_fitted_on_the_given_texts_alone():
    """bench_text_blocks' features: each block of a row at unit length (the vector as given), the
    vectorizers fitted on the training texts only (a word only a scored text holds has no column)."""
    from benchmarks.bench_text_blocks import features

    fit = ["the cat sat", "a dog ran far", "the dog sat"]
    scored = ["the cat ran", "zebra quokka"]
    vectors = {t: np.eye(4)[i % 4] for i, t in enumerate(fit + scored)}
    x = features("words+chars+vec", fit, scored, vectors)
    words = features("words", fit, scored, vectors).shape[1]
    chars = features("chars", fit, fit, vectors).shape[1]
    assert x.shape[1] == words + chars + 4
    dense = x.toarray()
    for block in (slice(0, words), slice(words, words + chars), slice(words + chars, None)):
        norms = np.linalg.norm(dense[0, block])
        assert norms == pytest.approx(1.0)
    assert not dense[1, :words].any()  # words no training text held
    half = features("vec0.5", fit, scored, vectors).toarray()
    assert np.linalg.norm(half[0]) == pytest.approx(0.5)


def test_the_markdown_table_is_the_stored_verdict_a_row_a_set():
    from benchmarks.realdata_verdict import markdown, verdict

    seeds = _seeds([0.61, 0.62, 0.60], [0.60, 0.61, 0.59], [-0.08, 0.01, 0.02])
    for row in seeds.values():
        row["commit"] = "abc1234"
    stored = {
        "icons": {"kind": "image", "dev": 745, "test": 373, "classes": 7, "seeds": seeds,
                  "groups": {"dev": 219, "test": 110}, "over_seeds": {"commits": ["abc1234"]}},
        "unrun": {"kind": "text", "dev": 900, "test": 400, "classes": 2},  # no verdict: no row
    }  # fmt: skip
    stored["icons"]["verdict"] = verdict(stored["icons"])
    table = markdown(stored, ["unrun", "icons"]).splitlines()
    assert len(table) == 3 and table[1].count("---") == 9
    cells = [cell.strip() for cell in table[2].strip("|").split("|")]
    assert cells[:6] == ["icons", "image", "745 / 373 (219 / 110)", "7", "3", "0.610 (0.600-0.620)"]
    assert cells[6].startswith("**+0.010 +-0.000 (sd)** (>= 0.02: not met")  # the small image sets' bar
    assert cells[7] == "-0.017 +-0.055 (sd); 2 of 3" and cells[8] == "abc1234"


def test_a_gap_is_judged_against_the_noise_of_both_figures_with_a_seeds_own_interval_first():
    from benchmarks.realdata_verdict import pooled_noise, verdict

    # test half-width 0.05, reported half-width 0.12 (borrowed): together 0.13; a gap of 0.12
    # is inside, 0.14 is not
    seeds = _seeds([0.6] * 3, [0.5] * 3, [0.12, -0.14, 0.02])
    entry = {"kind": "text", "dev": 300, "seeds": seeds, "default": {"reported": {"interval": [0.5, 0.74]}}}
    held = verdict(entry)["reported_noise"]
    assert (held["within_noise"], held["n"], held["borrowed"]) == (2, 3, 3)
    seeds["1"]["reported_95"] = [0.4, 0.7]  # its own: half-width 0.15, so 0.14 lies inside
    held = verdict(entry)["reported_noise"]
    assert (held["within_noise"], held["borrowed"]) == (3, 2)
    del entry["default"]  # no interval of its own and none to borrow: those seeds are not judged
    assert verdict(entry)["reported_noise"]["n"] == 1
    pooled = pooled_noise([{"reported_noise": {"n": 40, "within_noise": 37}}, {"reported_noise": None}])
    assert (pooled["n"], pooled["within_noise"]) == (40, 37)
    assert pooled["p_as_many_misses"] == pytest.approx(0.323, abs=1e-3)  # 3+ misses of 40 at 5%


def test_a_seed_row_keeps_the_reports_own_interval():
    from benchmarks.realdata_gaps import seed_row

    default = {"reported": {"score": 0.6, "kind": "cv", "interval": [0.512345, 0.68]}, "test_macro_f1": 0.62,
               "test_95": [0.55, 0.7], "seconds": {}, "commit": "abc"}  # fmt: skip
    assert seed_row({"default": default})["reported_95"] == [0.5123, 0.68]
