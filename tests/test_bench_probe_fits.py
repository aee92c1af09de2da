"""benchmarks/bench_probe_fits.py: its shrinkage LDA, solved in the dual, is scikit-learn's to the
rounding (else its arm would measure another classifier than the one it names), and its taps'
blocks are each network's tap, whole."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import bench_probe_fits


def _rows(seed: int, n: int = 90, p: int = 300, classes: int = 4):
    """More columns than rows, as the trio's 5,176 columns against a hundred-odd images, scaled
    unevenly; a class with two rows, one constant column."""
    rng = np.random.default_rng(seed)
    y = np.concatenate([np.arange(n - 2) % (classes - 1), [classes - 1] * 2])
    centres = np.eye(classes)[y] @ rng.normal(size=(classes, p))
    x = rng.normal(size=(n, p)) * rng.uniform(0.2, 3.0, p) + centres
    x[:, 7] = 1.5
    return x, y


def test_its_ledoit_wolf_shrinkage_is_scikit_learns():
    from sklearn.covariance import ledoit_wolf_shrinkage

    for seed in range(3):
        x, _ = _rows(seed)
        x = x - x.mean(axis=0)
        assert bench_probe_fits.ledoit_wolf_shrinkage(x) == pytest.approx(ledoit_wolf_shrinkage(x), rel=1e-10)


@pytest.mark.parametrize("seed", [0, 1])
def test_its_shrinkage_lda_is_scikit_learns(seed):
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

    x, y = _rows(seed)
    theirs = LinearDiscriminantAnalysis(solver="lsqr", shrinkage="auto").fit(x, y)
    coef, intercept, classes = bench_probe_fits.shrinkage_lda(x, y)
    np.testing.assert_allclose(coef, theirs.coef_, rtol=1e-8, atol=1e-10 * np.abs(theirs.coef_).max())
    np.testing.assert_allclose(intercept, theirs.intercept_, rtol=1e-8, atol=1e-8)
    np.testing.assert_array_equal(classes, theirs.classes_)


def test_each_run_of_a_taps_columns_is_one_networks_block():
    columns = np.concatenate([np.arange(0, 4), np.arange(10, 12), np.arange(20, 23)])
    assert list(bench_probe_fits._runs(columns)) == [(0, 4), (4, 2), (6, 3)]
