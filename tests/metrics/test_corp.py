"""CORP decomposition and reliability curves. Oracles: scikit-learn's IsotonicRegression
(ties pooled) with the direct score formulas; the consistency band recomputed from the same
Bernoulli draws with scikit-learn and ``np.quantile``."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from sklearn.isotonic import IsotonicRegression

import jaxcal
from jaxcal.metrics import corp_decomposition, corp_reliability

EXACT = 1e-12


def _scores(q, y, w, score):
    with np.errstate(divide="ignore", invalid="ignore"):
        if score == "brier":
            loss = (q - y) ** 2
        else:
            loss = -np.where(y == 1, np.log(q), np.log1p(-q))
    return np.sum(w * loss) / np.sum(w)


def _problem(rng, n, ties=True):
    p = rng.uniform(0.02, 0.98, n)
    if ties:
        p = np.round(p, 1)
    y = (rng.uniform(size=n) < p**1.4).astype(float)
    return p, y


@pytest.mark.parametrize("score", ["brier", "log"])
@pytest.mark.parametrize("weighted", [False, True])
def test_decomposition_equals_sklearn_pav_and_direct_formulas(score, weighted):
    rng = np.random.default_rng(0)
    for n, ties in ((40, True), (300, True), (300, False)):
        p, y = _problem(rng, n, ties)
        w = rng.uniform(0.2, 2.0, n) if weighted else np.ones(n)
        out = corp_decomposition(p, y, score=score, sample_weight=w if weighted else None)
        recal = IsotonicRegression().fit(p, y, sample_weight=w).predict(p)
        base = np.sum(w * y) / np.sum(w)
        s_p, s_c = _scores(p, y, w, score), _scores(recal, y, w, score)
        s_r = _scores(np.full(n, base), y, w, score)
        np.testing.assert_allclose(float(out.mcb), s_p - s_c, rtol=0, atol=EXACT)
        np.testing.assert_allclose(float(out.dsc), s_r - s_c, rtol=0, atol=EXACT)
        np.testing.assert_allclose(float(out.unc), s_r, rtol=0, atol=EXACT)
        # the identity, and the mean score it reproduces
        mcb, dsc, unc = out
        np.testing.assert_allclose(float(mcb - dsc + unc), s_p, rtol=0, atol=EXACT)
        assert float(out.score) == float(mcb - dsc + unc)
        assert float(mcb) >= -EXACT and float(dsc) >= -EXACT


def test_recalibrated_forecasts_have_no_miscalibration():
    rng = np.random.default_rng(1)
    p, y = _problem(rng, 200)
    recal = IsotonicRegression().fit(p, y).predict(p)
    for score in ("brier", "log"):
        assert abs(float(corp_decomposition(recal, y, score=score).mcb)) < EXACT


def test_log_score_of_a_confident_mistake_is_infinite():
    out = corp_decomposition(np.array([0.0, 0.5, 0.9]), np.array([1, 0, 1]), score="log")
    assert np.isinf(float(out.mcb)) and np.isfinite(float(out.unc))


def test_reliability_curve_and_band_equal_sklearn_on_the_same_draws():
    rng = np.random.default_rng(2)
    p, y = _problem(rng, 120)
    key, b, level = jax.random.key(3), 40, 0.8
    curve = corp_reliability(p, y, key=key, n_resamples=b, level=level)
    x = np.unique(p)
    np.testing.assert_array_equal(np.asarray(curve.forecast), x)
    recal = IsotonicRegression().fit(p, y).predict(x)
    np.testing.assert_allclose(np.asarray(curve.recalibrated), recal, rtol=0, atol=EXACT)
    draws = jax.vmap(lambda k: jax.random.bernoulli(k, p))(jax.random.split(key, b))
    curves = np.stack([IsotonicRegression().fit(p, np.asarray(d, float)).predict(x) for d in draws])
    lo, hi = np.quantile(curves, [(1 - level) / 2, (1 + level) / 2], axis=0)
    np.testing.assert_allclose(np.asarray(curve.lower), lo, rtol=0, atol=EXACT)
    np.testing.assert_allclose(np.asarray(curve.upper), hi, rtol=0, atol=EXACT)


def test_band_covers_calibrated_curves_and_not_miscalibrated_ones():
    """At level 0.9 the pointwise band holds most of a calibrated forecast's CORP curve
    (tolerance: at least 75% of the distinct forecasts), and much less of a clearly
    miscalibrated one (y ~ Bernoulli(p^3): at most 40%)."""
    rng = np.random.default_rng(4)
    p = np.round(rng.uniform(size=2000), 2)
    key = jax.random.key(5)
    for labels, inside_ok in (
        (rng.uniform(size=2000) < p, lambda share: share >= 0.75),
        (rng.uniform(size=2000) < p**3, lambda share: share <= 0.4),
    ):
        c = corp_reliability(p, labels, key=key, n_resamples=200)
        r, lo, hi = (np.asarray(a) for a in (c.recalibrated, c.lower, c.upper))
        assert inside_ok(np.mean((r >= lo - EXACT) & (r <= hi + EXACT)))


def test_no_band_without_resamples_and_no_recompile(compiles):
    rng = np.random.default_rng(6)
    p, y = _problem(rng, 100)
    c = corp_reliability(p, y, n_resamples=0)
    assert np.all(np.isnan(np.asarray(c.lower))) and not np.isnan(np.asarray(c.recalibrated)).any()
    corp_reliability(p, y, key=jax.random.key(0), n_resamples=30)
    corp_decomposition(p, y)
    with compiles() as count:  # new sizes in the same buckets
        p2, y2 = _problem(rng, 90)
        jax.block_until_ready(corp_reliability(p2, y2, key=jax.random.key(1), n_resamples=30))
        jax.block_until_ready(corp_decomposition(p2, y2))
    assert count.count == 0


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda p, y: corp_decomposition(p, y, score="crps"), "score"),
        (lambda p, y: corp_decomposition(p * 2, y), r"\[0, 1\]"),
        (lambda p, y: corp_decomposition(p, y + 1), "0/1"),
        (lambda p, y: corp_reliability(p, y), "key"),
        (lambda p, y: corp_reliability(p, y, key=jax.random.key(0), level=1.0), "level"),
        (lambda p, y: corp_reliability(p, y, n_resamples=-1), "n_resamples"),
    ],
)
def test_invalid_inputs_raise(call, match):
    p, y = np.array([0.2, 0.4, 0.7, 0.9]), np.array([0, 1, 0, 1])
    with pytest.raises(ValueError, match=match):
        call(p, y)


def test_corp_plot_draws_the_metric_curve(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from jaxcal.plot import corp as corp_plot

    rng = np.random.default_rng(7)
    p, y = _problem(rng, 300)
    drawn = []
    real_save = corp_plot.save_figure
    monkeypatch.setattr(
        corp_plot,
        "save_figure",
        lambda fig, path, dpi: drawn.append(fig) or real_save(fig, path, dpi=dpi),
    )
    key = jax.random.key(8)
    out = jaxcal.plot.corp_reliability_diagram(
        p, y, tmp_path / "c" / "corp.png", key=key, n_resamples=50
    )
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ax = drawn[0].axes[0]
    curve = corp_reliability(p, y, key=key, n_resamples=50)
    line = ax.get_lines()[0]
    np.testing.assert_allclose(line.get_ydata()[:-1], np.asarray(curve.recalibrated))
    np.testing.assert_allclose(line.get_xdata()[:-1], np.asarray(curve.forecast))
    mcb, dsc, unc = (float(v) for v in corp_decomposition(p, y))
    assert f"MCB {mcb:.4f}" in ax.get_title() and f"UNC {unc:.4f}" in ax.get_title()
