"""Centred isotonic regression (``IsotonicCalibration(centered=True)``) against a direct
NumPy oracle written from the definition (Oron & Flournoy 2017, as the authors' R package
``cir`` computes it in ``cirPAVA``): a plain loop that pools the first adjacent pair of
violators or ties (except ties of two values both at 0 or both at 1) on the sorted distinct
scores, moves a pooled point to its weighted mean score, extends flat to the training
minimum / maximum, and interpolates with ``np.interp``. All in float64 (x64 is on)."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest

import jaxcal

EXACT = 1e-12  # float64 interpolation between identical knots, up to rounding


def cir_oracle(x, y, w, *, flat=(0.0, 1.0)):
    """CIR knots ``(positions, values)`` of the points ``(x, y, w)`` (zero weights dropped),
    increasing in ``x``: plain loops over the distinct ``x``, sums kept exactly (a pooled
    point holds its total weight, weighted target sum and weighted score sum)."""
    keep = w > 0
    x, y, w = x[keep], y[keep], w[keep]
    xs = np.unique(x)
    pts = [[w[x == v].sum(), (w * y)[x == v].sum(), (w * x)[x == v].sum()] for v in xs]
    while True:
        means = [p[1] / p[0] for p in pts]
        pair = next(
            (
                i
                for i in range(len(pts) - 1)
                if means[i] > means[i + 1]
                or (means[i] == means[i + 1] and not (means[i] in flat and means[i + 1] in flat))
            ),
            None,
        )
        if pair is None:
            break
        a, b = pts[pair], pts.pop(pair + 1)
        pts[pair] = [a[0] + b[0], a[1] + b[1], a[2] + b[2]]
    px = [p[2] / p[0] for p in pts]
    py = [p[1] / p[0] for p in pts]
    if px[0] > xs[0]:  # the package's boundary rule: keep the end points, flat
        px, py = [xs[0], *px], [py[0], *py]
    if px[-1] < xs[-1]:
        px, py = [*px, xs[-1]], [*py, py[-1]]
    return np.array(px), np.array(py)


def _data(seed, n, *, weights, slope):
    rng = np.random.default_rng(seed)
    s = np.round(rng.normal(size=n), 1)  # ties in the scores
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-slope * s))).astype(float)
    y[:2] = [0.0, 1.0]
    if weights == "unit":  # integer sums: the oracle and the PAV see exact ties of means
        w = np.ones(n)
    else:
        w = rng.uniform(0.2, 3.0, n)
        if weights == "zeros":
            w[rng.uniform(size=n) < 0.15] = 0.0
            w[:2] = 1.0
    return s, y, w


def _query(s, seed=1):
    rng = np.random.default_rng(seed)
    return np.r_[s, rng.uniform(s.min() - 1, s.max() + 1, 200)]


@pytest.mark.parametrize("increasing", [True, False])
@pytest.mark.parametrize("weights", ["unit", "random", "zeros"])
def test_centered_matches_definition(increasing, weights):
    sign = 1.0 if increasing else -1.0
    for seed, n in ((0, 60), (1, 120), (2, 9)):
        s, y, w = _data(seed, n, weights=weights, slope=2.0 * sign)
        cal = jaxcal.IsotonicCalibration(centered=True, increasing=increasing)
        fitted = cal.fit(s, y, sample_weight=w)
        px, py = cir_oracle(sign * s, y, w)
        q = _query(s, seed)
        ref = np.interp(sign * q, px, py)  # constant beyond the ends: out_of_bounds="clip"
        np.testing.assert_allclose(np.asarray(fitted.predict(q)), ref, rtol=0, atol=EXACT)


def test_centered_ips_targets_and_trim_clip_the_knots():
    """Real-valued (IPS) targets: CIR of the targets ``y / propensity``, then the knot values
    clipped to the probability range."""
    s, y, w = _data(3, 90, weights="random", slope=2.0)
    prop = np.random.default_rng(4).uniform(0.3, 1.0, s.size)
    for trim in (0.0, 0.05):
        cal = jaxcal.IsotonicCalibration(centered=True, trim=trim)
        fitted = cal.fit(s, y, sample_weight=w, propensity=prop, loss="ips")
        px, py = cir_oracle(s, y / prop, w)
        q = _query(s)
        ref = np.interp(q, px, np.clip(py, trim, 1 - trim))
        np.testing.assert_allclose(np.asarray(fitted.predict(q)), ref, rtol=0, atol=EXACT)


def test_worked_example_from_counts():
    """Five doses with 1/7, 3/24, 10/20, 3/12, 4/17 responses (the ``cirPAVA`` help page's
    data): doses 1-2 pool (4/31 at (7 + 2 * 24) / 31), doses 3-5 pool (17/49 at
    (3 * 20 + 4 * 12 + 5 * 17) / 49), and the ends are kept flat."""
    n = np.array([7, 24, 20, 12, 17])
    k = np.array([1, 3, 10, 3, 4])
    s = np.repeat(np.arange(1.0, 6.0), n)
    y = np.concatenate([np.r_[np.ones(a), np.zeros(b - a)] for a, b in zip(k, n, strict=True)])
    fitted = jaxcal.IsotonicCalibration(centered=True).fit(s, y)
    np.testing.assert_allclose(np.asarray(fitted.knots_x), [1, 55 / 31, 193 / 49, 5], atol=EXACT)
    np.testing.assert_allclose(
        np.asarray(fitted.knots_y), [4 / 31, 4 / 31, 17 / 49, 17 / 49], atol=EXACT
    )


def test_flat_stretches_at_zero_and_one_are_kept():
    """Ties at the bounds of a probability are not pooled (the package's default), ties
    inside are: all-negative low scores stay at 0 up to the last of them."""
    s = np.arange(8.0)
    y = np.array([0, 0, 0, 1, 0, 1, 0, 1], float)
    fitted = jaxcal.IsotonicCalibration(centered=True).fit(s, y)
    # 0 at scores 0..2 (kept), then the tie 0.5 = 0.5 of the pooled pairs (3, 4) and (5, 6)
    # pools into one level set {3..6} at 4.5, then 1 at score 7
    np.testing.assert_allclose(np.asarray(fitted.knots_x), [0, 2, 4.5, 7], atol=EXACT)
    np.testing.assert_allclose(np.asarray(fitted.knots_y), [0, 0, 0.5, 1], atol=EXACT)


def test_centered_is_the_only_name_and_is_checked_when_made():
    """``centered`` has no alias (the former ``rank_preserving`` is gone); a copy made by
    ``dataclasses.replace`` (scikit-learn's ``clone``) is checked and warns nothing."""
    for cls, kw in ((jaxcal.IsotonicCalibration, {}), (jaxcal.SmoothedIsotonic, {"n_buckets": 9})):
        with pytest.raises(TypeError, match="rank_preserving"):
            cls(rank_preserving=True, **kw)
        new = cls(centered=True, **kw)
        assert "rank_preserving" not in repr(new)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert dataclasses.replace(new, centered=False) == cls(**kw)
        with pytest.raises(ValueError, match="centered must be True or False"):
            cls(centered="yes", **kw)
        with pytest.raises(ValueError, match="centered must be True or False"):
            dataclasses.replace(new, centered=1)
