"""AUC against scikit-learn and brute-force pair enumeration."""

from __future__ import annotations

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import assume, given, settings
from sklearn.metrics import roc_auc_score

from jaxcal.metrics import auc
from jaxcal.metrics import discrimination as disc

TOL = 1e-10


def brute_force_auc(s, y, w):
    num = 0.0
    for i in np.flatnonzero(y == 1):
        for j in np.flatnonzero(y == 0):
            num += w[i] * w[j] * ((s[i] > s[j]) + 0.5 * (s[i] == s[j]))
    return num / (w[y == 1].sum() * w[y == 0].sum())


@pytest.mark.parametrize("weighted", [False, True])
def test_matches_sklearn_with_ties(weighted):
    rng = np.random.default_rng(0)
    n = 4000
    y = (rng.uniform(size=n) < 0.3).astype(float)
    s = np.round(rng.normal(size=n) + y, 1)  # heavy ties
    w = rng.uniform(0.2, 3.0, size=n) if weighted else None
    assert abs(float(auc(s, y, sample_weight=w)) - roc_auc_score(y, s, sample_weight=w)) < TOL


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(-3, 3), st.booleans(), st.integers(0, 4)), min_size=2, max_size=30
    )
)
def test_matches_brute_force(rows):
    s = np.array([r[0] for r in rows], float)
    y = np.array([r[1] for r in rows], float)
    w = np.array([r[2] for r in rows], float)
    assume((w * y).sum() > 0 and (w * (1 - y)).sum() > 0)
    assert abs(float(auc(s, y, sample_weight=w)) - brute_force_auc(s, y, w)) < TOL


def test_invariant_to_monotone_maps_and_closed_form():
    rng = np.random.default_rng(1)
    # binormal model: AUC = Phi((mu1 - mu0) / sqrt(2)) for unit variances
    from scipy.stats import norm

    y = (rng.uniform(size=200_000) < 0.5).astype(float)
    s = rng.normal(size=y.size) + 1.0 * y
    a = float(auc(s, y))
    assert abs(a - norm.cdf(1 / np.sqrt(2))) < 4e-3  # ~ 4 standard errors
    assert abs(float(auc(1 / (1 + np.exp(-3 * s + 1)), y)) - a) < TOL
    assert abs(float(auc(-s, y)) - (1 - a)) < TOL


def test_no_recompile_same_shape():
    rng = np.random.default_rng(2)
    y = (rng.uniform(size=100) < 0.5).astype(float)
    auc(rng.normal(size=100), y)
    before = disc._auc_sorted._cache_size()
    auc(rng.normal(size=100), y)
    assert disc._auc_sorted._cache_size() == before


@pytest.mark.parametrize("weighted", [False, True])
def test_in_program_sort_matches_sklearn(weighted):
    """The path of non-CPU backends (XLA's sort inside the program) on unsorted input."""
    rng = np.random.default_rng(3)
    n = 3000
    y = (rng.uniform(size=n) < 0.4).astype(float)
    s = np.round(rng.normal(size=n) + y, 1)
    w = rng.uniform(0.2, 3.0, size=n) if weighted else np.ones(n)
    got = float(disc._auc_core(s, y, w))
    assert abs(got - roc_auc_score(y, s, sample_weight=w)) < 1e-5  # float32 sums


@pytest.mark.parametrize(
    "args, kw, match",
    [
        (([0.1, np.inf], [0, 1]), {}, "non-finite"),
        (([0.1, 0.2], [1, 1]), {}, "one class"),
        (([0.1, 0.2], [0, 1]), {"sample_weight": [1.0, 0.0]}, "one class"),
        (([0.1, 0.2], [0, 3]), {}, "0/1"),
        (([0.1, 0.2], [0, 1, 0]), {}, "length mismatch"),
        (([0.1, 0.2], [0, 1]), {"sample_weight": [-1.0, 1.0]}, "non-negative"),
    ],
)
def test_bad_inputs(args, kw, match):
    with pytest.raises(ValueError, match=match):
        auc(*args, **kw)
