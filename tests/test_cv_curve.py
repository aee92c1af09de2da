"""CV's learning curve (pipeline/cv/curve.py): a probe group's CV score carried to all its rows."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from pipeline.cv import curve
from pipeline.modeling.curve_point import FULL_ROWS, HALF_ROWS, HALF_SCORE

KEY = "val_macro_f1"


def _history(half: float, full: float) -> pd.DataFrame:
    return pd.DataFrame([{"epoch": 1, KEY: full, HALF_ROWS: 400.0, HALF_SCORE: half, FULL_ROWS: 800.0}])


def test_the_cv_score_is_carried_along_each_folds_slope_in_log_rows():
    histories = [_history(0.40, 0.50), _history(0.45, 0.50)]
    found = curve.expected(histories, KEY, 1000, cv_score=0.48)
    # from 800 to 1,000 rows: log(1.25) / log(2) of each fold's rise from 400 to 800
    gains = [0.10 * math.log(1.25) / math.log(2), 0.05 * math.log(1.25) / math.log(2)]
    assert found["fold_gains"] == pytest.approx(gains, abs=1e-5)
    assert found["gain"] == pytest.approx(sum(gains) / 2, abs=1e-5)
    assert found["score"] == pytest.approx(0.48 + sum(gains) / 2, abs=1e-5)
    assert found["per_doubling"] == pytest.approx(0.075, abs=1e-5) and found["rows"] == 1000


def test_a_half_that_scored_higher_carries_the_score_down_not_up():
    assert curve.expected([_history(0.55, 0.50)], KEY, 1000, 0.5)["gain"] < 0


def test_a_group_whose_folds_measured_no_pair_has_no_expected_score():
    plain = pd.DataFrame([{"epoch": 1, KEY: 0.5}])
    assert curve.expected([_history(0.4, 0.5), plain], KEY, 1000, 0.5) is None  # the recipe's folds
    unscored = _history(0.4, 0.5).assign(**{HALF_SCORE: float("nan")})
    assert curve.expected([unscored], KEY, 1000, 0.5) is None
