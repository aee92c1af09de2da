"""Issue 65's bar, judged over the seeds a set ran (`make bench-realdata`, benchmarks/realdata.json).

The bar: petals' default beats the best baseline on every set, by at least 0.02 macro-F1 on the
small image sets; its reported val or CV is within 0.05 of its test score. One split cannot say
either on these sets: a test part of a few hundred rows (62-110 groups) is uncertain by +-0.04-0.09
of macro-F1 by itself, more than either bar. So each verdict is over the seeds the set was dealt
with (`--seeds`), its mean and spread beside the test interval's half-width, and a verdict that a
single split's noise exceeds says so: "not judgeable from one split". Where a seed's row holds
`expected_minus_test` (a probe's CV carried to all of dev along its folds' learning curve, measured
at 66366cb and not shipped: docs/BENCHMARKS.md, "Real data, judged honestly"), the same bar is
judged for it on the same seeds, and the two gaps side by side: whether it lands closer to test.

A gap is also judged against its own noise, seed by seed: the reported figure is uncertain by its
own 95% interval (over dev's rows or groups, as the run's summary says it) and the test score by
its test part's, so an honest report misses its test score by more than the two together
(sqrt(a^2 + b^2) of the half-widths) on about one seed in twenty. More than that is a report that
says more than it knows.
"""

from __future__ import annotations

import numpy as np

BASELINE_BAR = 0.02  # small image sets: the default beats the best baseline by at least this
SMALL_IMAGES = 1_000  # development images: a set below is "small" (stamps, faces, icons)
GAP_BAR = 0.05  # |reported - test|
NOT_JUDGEABLE = "not judgeable from one split"


def seed_rows(entry: dict) -> list[dict]:
    """Each seed's figures: the stored rows, or for a set run at seed 0 only, its entry's."""
    if entry.get("seeds"):
        return [entry["seeds"][k] for k in sorted(entry["seeds"], key=int)]
    run, base = entry.get("default") or {}, entry.get("baseline") or {}
    if run.get("test_macro_f1") is None:
        return []
    said = (run.get("reported") or {}).get("score")
    row = {"test_macro_f1": run["test_macro_f1"], "test_95": run.get("test_95"), "reported": said}
    row["cv_minus_test"] = None if said is None else round(said - run["test_macro_f1"], 4)
    if base.get("test_macro_f1") is not None:
        row["baseline_test"] = base["test_macro_f1"]
    return [row]


def spread(values: list[float]) -> dict:
    """Mean, sample sd and the mean's standard error (None for one value) of `values`."""
    sd = float(np.std(values, ddof=1)) if len(values) > 1 else None
    return {
        "n": len(values),
        "mean": round(float(np.mean(values)), 4),
        "sd": None if sd is None else round(sd, 4),
        "se": None if sd is None else round(sd / np.sqrt(len(values)), 4),
    }


def half_width(rows: list[dict]) -> float | None:
    """The test score's own uncertainty: half its 95% interval, averaged over the seeds."""
    widths = [(r["test_95"][1] - r["test_95"][0]) / 2 for r in rows if r.get("test_95")]
    return round(float(np.mean(widths)), 3) if widths else None


def against_baseline(rows: list[dict], bar: float) -> dict | None:
    """Default - baseline over the seeds that measured both: met when the mean clears `bar`."""
    paired = [r for r in rows if r.get("baseline_test") is not None]
    if not paired:
        return None
    found = spread([r["test_macro_f1"] - r["baseline_test"] for r in paired])
    found["bar"] = bar
    found["met"] = bool(found["mean"] >= bar if bar > 0 else found["mean"] > 0)
    return _judgeable(found, half_width(paired), bar)


def gap(rows: list[dict], key: str) -> dict | None:
    """A reported figure's signed gap to test (`key`, reported - test) over the seeds that have it:
    within GAP_BAR on the mean, and on how many seeds one by one."""
    values = [r[key] for r in rows if r.get(key) is not None]
    if not values:
        return None
    found = spread(values)
    found["mean_abs"] = round(float(np.mean(np.abs(values))), 4)
    found["within_on_mean"] = bool(abs(found["mean"]) <= GAP_BAR)
    found["seeds_within"] = int(sum(abs(v) <= GAP_BAR for v in values))
    half = half_width([r for r in rows if r.get(key) is not None])
    return _judgeable(found, half, GAP_BAR, abs(found["mean"]))


def noise(rows: list[dict], reported_95: list[float] | None = None) -> dict | None:
    """On how many seeds |reported - test| lies within the 95% noise of the two figures together:
    sqrt(reported half-width^2 + test half-width^2). A seed's own reported interval where its row
    keeps one (`reported_95`), else `reported_95` (the set's newest run's, on a dev part of the same
    size), counted as borrowed."""
    inside, borrowed, judged = 0, 0, 0
    for row in rows:
        own = row.get("reported_95")
        interval = own or reported_95
        if row.get("cv_minus_test") is None or not interval or not row.get("test_95"):
            continue
        reach = np.hypot((interval[1] - interval[0]) / 2, (row["test_95"][1] - row["test_95"][0]) / 2)
        inside += int(abs(row["cv_minus_test"]) <= reach)
        borrowed += int(own is None)
        judged += 1
    if not judged:
        return None
    return {"n": judged, "within_noise": inside, "borrowed": borrowed, "expected_share": 0.95}


def pooled_noise(verdicts: list[dict]) -> dict | None:
    """`noise` summed over the sets: seeds within, seeds judged, and how likely that many misses or
    more are when each report is honest (a miss on 5% of seeds: the binomial tail)."""
    held = [v["reported_noise"] for v in verdicts if v.get("reported_noise")]
    if not held:
        return None
    from scipy.stats import binom

    judged, inside = sum(h["n"] for h in held), sum(h["within_noise"] for h in held)
    misses = judged - inside
    return {
        "n": judged,
        "within_noise": inside,
        "p_as_many_misses": round(float(binom.sf(misses - 1, judged, 0.05)), 3),
    }


def _judgeable(found: dict, half: float | None, bar: float, mean: float | None = None) -> dict:
    """Beside a verdict: the test interval's half-width against the bar (one split), and whether the
    seeds' mean lies beyond two standard errors of the bar (`mean`: the figure judged; default the
    mean) or within their noise."""
    found["test_95_half_width"] = half
    found["one_split"] = NOT_JUDGEABLE if half is not None and half > bar else "judgeable"
    mean = found["mean"] if mean is None else mean
    if found["se"] is None:
        found["over_seeds"] = "one seed"
    else:
        found["over_seeds"] = (
            "clear of the bar by > 2 se" if abs(mean - bar) > 2 * found["se"] else "the bar within 2 se"
        )
    return found


def closer(rows: list[dict]) -> dict | None:
    """On the seeds with both: mean |expected - test| against mean |CV - test|, and on how many
    seeds the carried figure lands closer."""
    both = [
        r for r in rows if r.get("expected_minus_test") is not None and r.get("cv_minus_test") is not None
    ]
    if not both:
        return None
    raw = [abs(r["cv_minus_test"]) for r in both]
    carried = [abs(r["expected_minus_test"]) for r in both]
    return {
        "n": len(both),
        "cv_mean_abs": round(float(np.mean(raw)), 4),
        "expected_mean_abs": round(float(np.mean(carried)), 4),
        "seeds_closer": int(sum(c < r for c, r in zip(carried, raw, strict=True))),
        "closer": bool(np.mean(carried) < np.mean(raw)),
    }


def verdict(entry: dict) -> dict:
    """The set's verdict over its seeds: against the baseline, the reported gap, the carried CV."""
    rows = seed_rows(entry)
    small = entry.get("kind") == "image" and entry.get("dev", 0) < SMALL_IMAGES
    return {
        "seeds": len(rows),
        "baseline_bar": BASELINE_BAR if small else 0.0,
        "against_baseline": against_baseline(rows, BASELINE_BAR if small else 0.0),
        "reported_gap": gap(rows, "cv_minus_test"),
        "reported_noise": noise(rows, ((entry.get("default") or {}).get("reported") or {}).get("interval")),
        "expected_gap": gap(rows, "expected_minus_test"),
        "expected_vs_cv": closer(rows),
    }


def lines(name: str, found: dict) -> list[str]:
    """The verdict in words, a line per bar."""
    out = [f"{name}: over {found['seeds']} seed(s)"]
    base = found["against_baseline"]
    if base:
        bar = f">= {base['bar']}" if base["bar"] > 0 else "> 0"
        out.append(
            f"  beats the baseline ({bar}): {'met' if base['met'] else 'NOT met'}: default - baseline "
            f"{_shown(base)} over {base['n']} seed(s), {base['over_seeds']}; {_noise(base)}"
        )
    for key, title in (("reported_gap", "reported CV/val"), ("expected_gap", "CV carried to all of dev")):
        got = found[key]
        if got:
            met = "met" if got["within_on_mean"] else "NOT met"
            out.append(
                f"  |{title} - test| <= {GAP_BAR}: on the mean {met} ({_shown(got)}, {got['over_seeds']}), "
                f"per seed {got['seeds_within']} of {got['n']}; {_noise(got)}"
            )
    held = found.get("reported_noise")
    if held:
        borrowed = f"; {held['borrowed']} with the newest run's reported interval" if held["borrowed"] else ""
        out.append(
            f"  |reported CV/val - test| within the two figures' 95% noise: {held['within_noise']} of "
            f"{held['n']} seed(s) (an honest report: about {held['expected_share']:.0%}){borrowed}"
        )
    both = found["expected_vs_cv"]
    if both:
        out.append(
            f"  carried CV closer to test than raw CV: {'yes' if both['closer'] else 'no'} (mean |gap| "
            f"{both['expected_mean_abs']} against {both['cv_mean_abs']}; closer on {both['seeds_closer']} of "
            f"{both['n']} seeds)"
        )
    return out


def _noise(found: dict) -> str:
    said = f"test 95% +-{found['test_95_half_width']}"
    return said + (f" > the bar: {NOT_JUDGEABLE}" if found["one_split"] == NOT_JUDGEABLE else "")


def _shown(found: dict) -> str:
    return f"{found['mean']:+.3f}" + (f" +-{found['sd']:.3f} (sd)" if found["sd"] is not None else "")


def markdown(stored: dict, names: list[str]) -> str:
    """Where each set stands, one row a set, from the stored results (`--markdown`): what
    docs/BENCHMARKS.md shows first, so its table is the file's and never typed by hand."""
    head = (
        "| set | kind | dev / test (groups), seed 0 | classes | seeds | default: test, mean (min-max) | "
        "default - baseline (bar) | CV/val - test, mean +- sd; seeds within 0.05; within its noise | "
        "commits |"
    )
    out = [head, "| --- " * 9 + "|"]
    for name in names:
        entry = stored.get(name)
        if not entry or not entry.get("verdict"):
            continue
        found, rows = entry["verdict"], seed_rows(entry)
        groups = entry.get("groups") or {}
        sizes = f"{entry['dev']:,} / {entry['test']:,}" + (
            f" ({groups['dev']} / {groups['test']})" if groups else ""
        )
        tests = [r["test_macro_f1"] for r in rows]
        base, said = found["against_baseline"], found["reported_gap"]
        bar = f">= {base['bar']}" if base and base["bar"] > 0 else "> 0"
        beats = (
            "-"
            if not base
            else (f"**{_shown(base)}** ({bar}: {'met' if base['met'] else 'not met'}; {base['over_seeds']})")
        )
        held = found.get("reported_noise")
        gap_cell = "-" if not said else f"{_shown(said)}; {said['seeds_within']} of {said['n']}"
        if said and held:
            gap_cell += f"; within noise {held['within_noise']} of {held['n']}"
        commits = ", ".join((entry.get("over_seeds") or {}).get("commits") or [])
        out.append(
            f"| {name} | {entry['kind']} | {sizes} | {entry['classes']} | {found['seeds']} | "
            f"{np.mean(tests):.3f} ({min(tests):.3f}-{max(tests):.3f}) | {beats} | {gap_cell} | {commits} |"
        )
    return "\n".join(out)
