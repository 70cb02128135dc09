"""Shape policy of the score-model fits: the data are padded to bucket sizes with copies of a
valid score carrying zero class weights (exact: every statistic is weighted), and the
real-valued hyperparameters are traced, so new sizes in a bucket and new values compile
nothing."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from jaxcal import _shapes
from jaxcal.scoremodels import (
    EqualVarianceGaussianScoreModel,
    ExponentialScoreModel,
    GammaScoreModel,
    GaussianMixtureScoreModel,
    GaussianScoreModel,
    KanoulasScoreModel,
    ManmathaScoreModel,
)

EXACT = 1e-12  # float64: padding adds exact zeros; only the order of the sums changes

FAMILIES = [
    GaussianScoreModel(),
    EqualVarianceGaussianScoreModel(),
    ExponentialScoreModel(),
    GammaScoreModel(),
    ManmathaScoreModel(),
    KanoulasScoreModel(),
    GaussianMixtureScoreModel(),
]


def _data(sm, n, seed):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.35).astype(float)
    y[:2] = [0, 1]
    if sm.support == "real":
        s = rng.normal(np.where(y == 1, 1.5, 0.0), 1.0)
    else:
        s = rng.gamma(np.where(y == 1, 5.0, 2.0), 1.0)
    return s, y, rng.uniform(0.0, 2.0, n)


@pytest.mark.parametrize("sm", FAMILIES, ids=lambda m: type(m).__name__)
def test_padded_fit_equals_unpadded(sm):
    """700 points pad to 1024: the same parameters (and EM / Newton iteration counts)."""
    s, y, w = _data(sm, 700, 0)
    padded = sm.fit(s, y, sample_weight=w)
    with _shapes.exact_shapes():
        exact = sm.fit(s, y, sample_weight=w)
    for f in dataclasses.fields(padded):
        a, b = getattr(padded, f.name), getattr(exact, f.name)
        np.testing.assert_allclose(a, b, rtol=EXACT, atol=EXACT, err_msg=f.name)


@pytest.mark.parametrize("sm", FAMILIES, ids=lambda m: type(m).__name__)
def test_new_size_and_hyperparameters_do_not_compile(compiles, sm):
    """Sizes 700, 800 and 900 share the bucket 1024; new values of the real-valued fields
    (prior scales, the mixture's tol and sd floor) are traced."""
    sm.fit(*_data(sm, 700, 1)[:2])
    floats = [f.name for f in dataclasses.fields(sm) if f.type == "float"]
    assert floats
    with compiles() as c:
        for k, n in enumerate((800, 900)):
            changed = {name: getattr(sm, name) * (1.5 + k) for name in floats}
            s, y, w = _data(sm, n, k + 2)
            dataclasses.replace(sm, **changed).fit(s, y, sample_weight=w)
    assert c.count == 0
