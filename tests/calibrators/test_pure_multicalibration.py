"""MulticalibrationBoosting as a pure function: the fit inside ``jit`` (the eager fit's
numbers; NaN for a bad code or score), forward-mode derivatives against finite differences,
``vmap`` over problems (``fit_batch``: tests/calibrators/test_multicalibration_boosting.py) and an
exported predict."""

from __future__ import annotations

import jax
import numpy as np

from jaxcal import _shapes
from jaxcal.calibrators import MulticalibrationBoosting

PURE_RTOL = 1e-9  # the same float64 program on padded and unpadded rows


def sigmoid(z):
    return 1 / (1 + np.exp(-z))


def _data(seed, n=700):
    rng = np.random.default_rng(seed)
    s = rng.normal(size=n)
    c, d = rng.integers(0, 5, n), rng.integers(0, 3, n)
    y = (rng.uniform(size=n) < sigmoid(s + 0.4 * c - 0.3 * d - 0.5)).astype(float)
    return s, y, {"c": c, "d": d}


def test_predict_exports():
    """predict_codes exports with jax.export, serialises, and gives predict's numbers."""
    s, y, table = _data(5)
    cal = MulticalibrationBoosting(n_rounds=20).fit(s, y, table)
    codes = cal.codes(table)
    exported = jax.export.export(jax.jit(cal.predict_codes))(s, codes)
    restored = jax.export.deserialize(exported.serialize())
    np.testing.assert_allclose(
        np.asarray(restored.call(s, codes)), np.asarray(cal.predict(s, table)), rtol=1e-12
    )


def test_jit_of_the_pure_fit_equals_the_eager_fit():
    """jit(fit_pure) on the table's codes gives the eager fit (padded rows, the program
    cache) to float64 rounding; a code outside n_levels or a NaN score gives NaN."""
    rng = np.random.default_rng(8)
    n = 700
    s = rng.normal(size=n)
    c, d = rng.integers(0, 5, n), rng.integers(0, 3, n)
    y = (rng.uniform(size=n) < sigmoid(s + 0.4 * c - 0.3 * d - 0.5)).astype(float)
    est = MulticalibrationBoosting(n_rounds=20, max_depth=3)
    eager = est.fit(s, y, {"c": c, "d": d})
    codes = eager.codes({"c": c, "d": d})
    levels = eager.n_levels
    pure = jax.jit(lambda s, y, x: est.fit_pure(s, y, x, n_levels=levels).predict_codes(s, x))
    np.testing.assert_allclose(
        np.asarray(pure(s, y, codes)),
        np.asarray(eager.predict(s, {"c": c, "d": d})),
        rtol=PURE_RTOL,
    )
    bad = codes.copy()
    bad[0, 0] = levels[0]
    assert np.isnan(np.asarray(pure(s, y, bad))).all()
    s_nan = s.copy()
    s_nan[3] = np.nan
    assert np.isnan(np.asarray(pure(s_nan, y, codes))).all()
    with _shapes.exact_shapes():  # padding changes nothing
        exact = est.fit(s, y, {"c": c, "d": d}).predict(s, {"c": c, "d": d})
    np.testing.assert_allclose(
        np.asarray(exact), np.asarray(eager.predict(s, {"c": c, "d": d})), rtol=PURE_RTOL
    )


def test_jvp_of_the_fit_and_of_predict_match_finite_differences():
    """Forward-mode derivatives: of the fitted probabilities in the sample weights (through
    the Newton leaves, the boosting loop and the rescaling, at a fixed tree structure), and
    of predict_codes in the scores, a q (1 - q) inside a score bin (the trees are constant
    there), against central differences in float64."""
    rng = np.random.default_rng(11)
    n = 700
    s, c = rng.normal(size=n), rng.integers(0, 5, n)
    y = (rng.uniform(size=n) < sigmoid(s + 0.4 * c - 0.5)).astype(float)
    codes = c[:, None].astype(np.int32)
    est = MulticalibrationBoosting(n_rounds=20, max_depth=2)

    def fitted_probs(w):
        return est.fit_pure(s, y, codes, n_levels=(5,), sample_weight=w).predict_codes(s, codes)

    w0, v = rng.uniform(0.5, 1.5, n), rng.normal(size=n)
    f = jax.jit(fitted_probs)
    _, tangent = jax.jvp(f, (w0,), (v,))
    eps = 1e-6  # no split, bin or stopping round changes within eps (checked: same rounds)
    fd = (np.asarray(f(w0 + eps * v)) - np.asarray(f(w0 - eps * v))) / (2 * eps)
    np.testing.assert_allclose(np.asarray(tangent), fd, rtol=1e-5, atol=1e-8)
    cal = est.fit(s, y, {"c": c})
    edges = np.asarray(cal.score_edges)
    inside = np.min(np.abs(s[:, None] - edges[None, :]), axis=1) > 1e-4
    x = cal.codes({"c": c})
    q, dq = jax.jvp(lambda s: cal.predict_codes(s, x), (s,), (np.ones(n),))
    q, dq = np.asarray(q), np.asarray(dq)
    np.testing.assert_allclose(dq[inside], float(cal.a) * (q * (1 - q))[inside], rtol=1e-10)


def test_vmap_of_the_pure_fit_equals_a_loop():
    """jax.vmap of fit_pure over problems gives each problem's own pure fit."""
    problems = [_data(seed, n=300) for seed in (1, 2, 3)]
    est = MulticalibrationBoosting(n_rounds=10, max_depth=2)
    levels = (6, 4)
    codes = np.stack([np.stack([t["c"], t["d"]], axis=1) for _, _, t in problems]).astype(np.int32)
    S = np.stack([p[0] for p in problems])
    Y = np.stack([p[1] for p in problems])

    def one(s, y, x):
        return est.fit_pure(s, y, x, n_levels=levels).predict_codes(s, x)

    batched = np.asarray(jax.jit(jax.vmap(one))(S, Y, codes))
    for b in range(len(problems)):
        np.testing.assert_allclose(
            batched[b], np.asarray(jax.jit(one)(S[b], Y[b], codes[b])), rtol=PURE_RTOL, atol=1e-12
        )
