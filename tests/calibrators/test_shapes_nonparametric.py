"""The shape policy (``jaxcal._shapes``) in the non-parametric calibrators.

Padded fits and predictions equal unpadded ones (``exact_shapes``) to float64 rounding; new
sizes inside a bucket and new values of numeric hyperparameters compile nothing; BBQ's
one-table predict equals the posterior-weighted average of its models (written out in
NumPy, with edges tied across models and scores exactly at edges).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

import jaxcal
from jaxcal import _shapes
from jaxcal.calibrators.enir import near_isotonic_regression
from jaxcal.calibrators.neural import objective

EXACT = 1e-12  # padded vs unpadded, float64: the padding adds exact zeros to every sum
# NeuralCalibration: the gradient sums over a padded batch associate differently (rounding
# at 1e-16), and a thousand Adam steps carry that into the parameters (seen: 1e-13)
PARAMS = 1e-10

SIZES = (700, 900)  # both pad to 1024, like the warm-up size 600


def _data(n, seed=0, *, ties=False):
    rng = np.random.default_rng(seed + n)
    s = rng.normal(size=n)
    if ties:
        s = np.round(s, 1)
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-2 * s))).astype(float)
    w = rng.uniform(0.2, 2.0, n)
    w[rng.uniform(size=n) < 0.05] = 0.0
    return s, y, w


def _query(s, seed=1):
    rng = np.random.default_rng(seed)
    return np.r_[s[:50], rng.uniform(s.min() - 1, s.max() + 1, 60)]


CALIBRATORS = {
    "isotonic": lambda **h: jaxcal.IsotonicCalibration(**h),
    "isotonic-step": lambda **h: jaxcal.IsotonicCalibration(interpolation="step", **h),
    "isotonic-cir-decreasing": lambda **h: jaxcal.IsotonicCalibration(
        centered=True, increasing=False, **h
    ),
    "histogram-quantile": lambda **h: jaxcal.HistogramBinning(n_bins=12, **h),
    "histogram-uniform": lambda **h: jaxcal.HistogramBinning(strategy="uniform", **h),
    "bbq": lambda **h: jaxcal.BBQ(**h),
    "sir": lambda **h: jaxcal.SmoothedIsotonic(n_buckets=40, **h),
    "sir-cir-decreasing": lambda **h: jaxcal.SmoothedIsotonic(
        n_buckets=40, centered=True, increasing=False, **h
    ),
    "enir": lambda **h: jaxcal.ENIR(**h),
}

# new values of every numeric hyperparameter that does not set a shape
NEW_HYPER = {
    "isotonic": [{"trim": 0.01}, {"trim": 0.02}],
    "isotonic-step": [{"trim": 0.03}, {}],
    "isotonic-cir-decreasing": [{"trim": 0.01}, {}],
    "histogram-quantile": [{}, {}],
    "histogram-uniform": [{}, {}],
    "bbq": [{"equivalent_sample_size": 3.0}, {"equivalent_sample_size": 0.5}],
    "sir": [{}, {}],
    "sir-cir-decreasing": [{}, {}],
    "enir": [{"eps": 1e-2}, {"eps": 1e-4}],
}


def _fields(fitted):
    return {k: np.asarray(v) for k, v in vars(fitted).items() if isinstance(v, jax.Array)}


@pytest.mark.parametrize("name", sorted(CALIBRATORS))
@pytest.mark.parametrize("ties", [False, True])
def test_padded_fit_and_predict_equal_unpadded(name, ties):
    s, y, w = _data(700, ties=ties)
    q = _query(s)
    make = CALIBRATORS[name]
    padded = make().fit(s, y, sample_weight=w)
    with _shapes.exact_shapes():
        exact = make().fit(s, y, sample_weight=w)
        p_exact = np.asarray(exact.predict(q))
    np.testing.assert_allclose(np.asarray(padded.predict(q)), p_exact, rtol=0, atol=EXACT)
    # the unpadded fit predicted with padding, and inside jit (no padding), agree too
    np.testing.assert_allclose(np.asarray(exact.predict(q)), p_exact, rtol=0, atol=EXACT)
    inside = jax.jit(lambda f, x: f.predict(x))(padded, q)
    np.testing.assert_allclose(np.asarray(inside), p_exact, rtol=0, atol=EXACT)
    a, b = _fields(padded), _fields(exact)
    if name == "bbq":  # the padded table has a longer tail of +inf edges; compared above
        for k in ("table_edges", "table_values"):
            a.pop(k), b.pop(k)
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=0, atol=EXACT, err_msg=k)


@pytest.mark.parametrize("name", sorted(CALIBRATORS))
def test_new_sizes_in_a_bucket_compile_nothing(name, compiles):
    make = CALIBRATORS[name]
    s, y, w = _data(600)
    make().fit(s, y, sample_weight=w).predict(_query(s))  # warm-up
    inputs = [_data(n, seed=3) for n in SIZES]
    queries = [_query(s, seed=4)[: 80 + 20 * i] for i, (s, _, _) in enumerate(inputs)]  # 128
    with compiles() as c:
        for (s, y, w), q, hyper in zip(inputs, queries, NEW_HYPER[name], strict=True):
            jax.block_until_ready(make(**hyper).fit(s, y, sample_weight=w).predict(q))
    assert c.count == 0


def test_isotonic_regression_padded_equals_unpadded_and_compiles_once(compiles):
    rng = np.random.default_rng(5)
    for n in (600, *SIZES):
        x, y, w = _data(n, ties=True)
        g = rng.integers(0, 4, n)
        for kw in ({}, {"group": g, "increasing": False, "y_min": -0.1, "y_max": 0.9}):
            ours = np.asarray(jaxcal.isotonic_regression(x, y, sample_weight=w, **kw))
            with _shapes.exact_shapes():
                ref = np.asarray(jaxcal.isotonic_regression(x, y, sample_weight=w, **kw))
            np.testing.assert_allclose(ours, ref, rtol=0, atol=EXACT)
    with compiles() as c:
        for n, bounds in zip(SIZES, ((0.1, 0.8), (0.2, 0.7)), strict=True):
            x, y, w = _data(n, seed=6)
            g = rng.integers(0, 4, n)
            jaxcal.isotonic_regression(x, y, sample_weight=w)
            jaxcal.isotonic_regression(
                x, y, group=g, increasing=False, y_min=bounds[0], y_max=bounds[1]
            )
    assert c.count == 0


def test_near_isotonic_regression_padded_equals_unpadded_and_compiles_once(compiles):
    for n in (600, *SIZES):
        y = np.random.default_rng(n).normal(size=n)
        for lam in (0.3, np.inf):
            ours = np.asarray(near_isotonic_regression(y, lam=lam))
            with _shapes.exact_shapes():
                ref = np.asarray(near_isotonic_regression(y, lam=lam))
            np.testing.assert_allclose(ours, ref, rtol=0, atol=EXACT)
    with compiles() as c:
        for n, lam in zip(SIZES, (0.05, 2.0), strict=True):
            near_isotonic_regression(np.random.default_rng(n + 1).normal(size=n), lam=lam)
    assert c.count == 0


def test_negative_downsampling_correction_compiles_nothing(compiles):
    jaxcal.negative_downsampling_correction(np.full(5, 0.3), 0.2)
    with compiles() as c:
        for n in (7, 300, 1001):
            p = np.random.default_rng(n).uniform(size=n)
            q = np.asarray(jaxcal.negative_downsampling_correction(p, 0.1 + n / 2000))
            r = 0.1 + n / 2000
            np.testing.assert_allclose(q, p / (p + (1 - p) / r), rtol=1e-14)
    assert c.count == 0


# --------------------------------------------------------------------- NeuralCalibration


def _neural_data(n, seed=0):
    s, y, w = _data(n, seed)
    fields = np.random.default_rng(seed + n).integers(0, 3, (n, 2))
    fields[: n // 2, 1] += 2  # cardinalities differ from the other sizes
    return s, y, w, fields


@pytest.mark.parametrize(
    "hyper",
    [{}, {"monotone": "hard"}, {"batch_size": 64}, {"n_knots": 6, "hidden": ()}],
)
@pytest.mark.parametrize("with_fields", [False, True])
def test_neural_padded_equals_unpadded(hyper, with_fields):
    s, y, w, fields = _neural_data(700)
    s[::7] = np.round(s[::7])  # tied quantiles: fewer knots than n_knots
    f = fields if with_fields else None
    cal = jaxcal.NeuralCalibration(n_steps=150, **hyper)
    padded = cal.fit(s, y, f, sample_weight=w, key=jax.random.key(0))
    with _shapes.exact_shapes():
        exact = cal.fit(s, y, f, sample_weight=w, key=jax.random.key(0))
    q, fq = _query(s)[:40], None if f is None else fields[:40]
    np.testing.assert_allclose(
        np.asarray(padded.predict(q, fq)), np.asarray(exact.predict(q, fq)), rtol=0, atol=EXACT
    )
    for a, b in zip(jax.tree.leaves(padded), jax.tree.leaves(exact), strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=PARAMS, atol=PARAMS)
    with _shapes.exact_shapes():
        np.testing.assert_allclose(
            np.asarray(padded.predict(q, fq)), np.asarray(exact.predict(q, fq)), atol=EXACT
        )
    inside = jax.jit(lambda c, a, b: c.predict(a, b))(padded, q, fq)
    np.testing.assert_allclose(np.asarray(inside), np.asarray(padded.predict(q, fq)), atol=EXACT)
    lam = 0.3
    value = objective(padded, s, y, f, sample_weight=w, isotonic_penalty=lam, l2=1e-3)
    with _shapes.exact_shapes():
        ref = objective(padded, s, y, f, sample_weight=w, isotonic_penalty=lam, l2=1e-3)
    np.testing.assert_allclose(float(value), float(ref), rtol=EXACT)
    if f is not None:
        np.testing.assert_allclose(
            np.asarray(padded.predict_logit(q, fq)),
            np.asarray(padded.eta(q)) + np.asarray(padded.field_offset(fq)),
            atol=EXACT,
        )


@pytest.mark.parametrize("hyper", [{}, {"batch_size": 64}])
def test_neural_new_sizes_compile_nothing(hyper, compiles):
    cal = jaxcal.NeuralCalibration(n_steps=20, **hyper)
    s, y, w, fields = _neural_data(600)
    fit = cal.fit(s, y, fields, sample_weight=w, key=jax.random.key(0))
    fit.predict(s, fields)
    objective(fit, s, y, fields)
    inputs = [_neural_data(n, seed=2) for n in SIZES]
    new = [
        {"learning_rate": 0.02, "l2": 1e-3, "isotonic_penalty": 0.5},
        {"learning_rate": 0.1, "l2": 0.0, "isotonic_penalty": 2.0},
    ]
    with compiles() as c:
        for (s, y, w, fields), h in zip(inputs, new, strict=True):
            fit = jaxcal.NeuralCalibration(n_steps=20, **hyper, **h).fit(
                s, y, fields, sample_weight=w, key=jax.random.key(0)
            )
            jax.block_until_ready(fit.predict(s, fields))
            jax.block_until_ready(objective(fit, s, y, fields, isotonic_penalty=h["l2"]))
    assert c.count == 0


# ------------------------------------------------------------------------ BBQ's one table


def _per_model_average(fitted, q):
    """The weighted average of the models, model by model (``[M, n]``, in NumPy)."""
    edges, theta = np.asarray(fitted.edges), np.asarray(fitted.theta)
    weight = np.exp(np.asarray(fitted.log_weight))
    out = np.zeros(q.shape)
    for e, th, wt in zip(edges, theta, weight, strict=True):
        out += wt * th[np.searchsorted(e, q, side="right")]
    return out


@pytest.mark.parametrize("logit", [False, True])
def test_bbq_table_equals_the_per_model_average_at_ties_and_edges(logit):
    """Scores on a coarse grid make the models' edges coincide (many models cut at the same
    training score); queries sit exactly on every edge, between them and beyond the ends."""
    rng = np.random.default_rng(9)
    n = 3000
    p = np.round(rng.beta(2, 3, n), 2)
    s = np.log(p + 1e-3) - np.log1p(-p + 1e-3) if logit else p
    y = (rng.uniform(size=n) < p).astype(float)
    fitted = jaxcal.BBQ(score_scale="logit" if logit else "probability").fit(s, y)
    edges = np.asarray(fitted.edges)
    inner = np.unique(edges[np.isfinite(edges)])
    shared = np.unique(edges[np.isfinite(edges)], return_counts=True)[1]
    assert shared.max() > 10  # edges tied across many models
    table = np.asarray(fitted.table_edges)
    np.testing.assert_array_equal(table[np.isfinite(table)], inner)
    gaps = np.r_[inner[0] - 1, 0.5 * (inner[1:] + inner[:-1]), inner[-1] + 1]
    below = np.nextafter(inner, -np.inf)  # the float just below each edge
    below = below[np.abs(below) >= np.finfo(float).tiny]  # XLA's CPU flushes subnormals
    q = np.r_[inner, gaps, below, s]
    np.testing.assert_allclose(
        np.asarray(fitted.predict(q)), _per_model_average(fitted, q), rtol=0, atol=1e-12
    )


def test_bbq_table_round_trips_through_save_and_load(tmp_path):
    s, y, _ = _data(500)
    fitted = jaxcal.BBQ().fit(s, y)
    fitted.save(tmp_path / "bbq.npz")
    back = jaxcal.load(tmp_path / "bbq.npz")
    for k in ("table_edges", "table_values"):
        np.testing.assert_array_equal(np.asarray(getattr(back, k)), np.asarray(getattr(fitted, k)))
    q = _query(s)
    np.testing.assert_array_equal(np.asarray(back.predict(q)), np.asarray(fitted.predict(q)))


def test_sir_knots_skip_buckets_without_weight_on_both_pav_paths(monkeypatch):
    """Buckets left empty by ties or holding only zero-weight points have no knot, so the
    map does not depend on which neighbour's value a PAV implementation gives them; more
    buckets than points; the compiled kernel and the merge tree agree."""
    from sklearn.isotonic import IsotonicRegression

    from jaxcal._native import ENV

    rng = np.random.default_rng(12)
    s = np.round(rng.normal(size=14), 1)
    y = (rng.uniform(size=14) < 1 / (1 + np.exp(-2 * s))).astype(float)
    y[:2] = [0.0, 1.0]
    w = rng.uniform(0.5, 2.0, 14)
    w[np.isin(s, rng.choice(np.unique(s[2:]), 3, replace=False))] = 0.0  # whole tie classes
    cal = jaxcal.SmoothedIsotonic(n_buckets=16)  # more buckets than points
    ours = cal.fit(s, y, sample_weight=w)
    xs = np.unique(s[w > 0])  # one bucket per tie class
    ws = np.array([w[s == x].sum() for x in xs])
    ts = np.array([(w * y)[s == x].sum() for x in xs]) / ws
    centres = np.array([(w * s)[s == x].sum() for x in xs]) / ws
    v = (
        IsotonicRegression()
        .fit(np.arange(xs.size), ts, sample_weight=ws)
        .predict(np.arange(xs.size))
    )
    np.testing.assert_allclose(np.asarray(ours.knots_x), centres, atol=EXACT)
    np.testing.assert_allclose(np.asarray(ours.knots_y), np.clip(v, 0, 1), atol=1e-9)
    monkeypatch.setenv(ENV, "0")  # the merge tree
    portable = cal.fit(s, y, sample_weight=w)
    q = _query(s)
    np.testing.assert_allclose(
        np.asarray(portable.predict(q)), np.asarray(ours.predict(q)), atol=EXACT
    )
