"""The pure (traced) isotonic fits: ``jaxcal.isotonic_regression`` on tracers and the pure
fits of ``IsotonicCalibration``, ``SmoothedIsotonic`` and ``ENIR``.

Oracles: the eager estimator (host validation, padding, the compiled CPU kernel where it is
built, or the merge tree with ``JAXCAL_NATIVE=0``) for ``jit`` and ``jax.export``; a loop of
single fits for ``vmap``; central finite differences in float64 for ``jvp`` / ``grad``
where the map is differentiable (away from ties of adjacent block means); for ENIR's
derivative with its model selection held fixed, a list-based modified PAV path that keeps
every model's fused groups.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import spearmanr
from sklearn.isotonic import IsotonicRegression

import jaxcal
from jaxcal._fitdata import PureFitData
from jaxcal._native import ENV, pav_cpu_available
from jaxcal.calibrators import _enir_path
from jaxcal.calibrators.isotonic import check_increasing, increasing_pure
from jaxcal.fitting.isotonic import isotonic_regression_in_program
from tests._composition import (
    assert_exports,
    assert_jit_matches_eager,
    assert_jvp_matches_fd,
    assert_nan_policy,
    assert_vmap_matches_loop,
    finite_difference,
    grid_of,
    problem,
)
from tests._enir_path_oracle import breakpoint_models

EXACT = 1e-9  # float64, against scikit-learn and the eager fit (same blocks, other sums)


def _regression_problem(n=80, seed=0):
    """Continuous targets (no two adjacent block means tied), distinct scores, a few zero
    weights, positive bounds that clip some blocks."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    y = x + rng.normal(size=n)
    w = rng.uniform(0.5, 2.0, n)
    w[5::9] = 0.0
    return x, y, w


# --- isotonic_regression --------------------------------------------------------------


def _split(z, *sizes):
    """Consecutive pieces of a flat vector (one jvp check covers several arguments: a
    random direction in all of them at once)."""
    out, start = [], 0
    for size in sizes:
        out.append(z[start : start + size])
        start += size
    return out


@pytest.mark.parametrize("increasing", [True, False])
def test_isotonic_regression_jvp_in_targets_weights_and_bounds(increasing):
    x, y, w = _regression_problem()
    if not increasing:
        y = -y
    group = np.arange(x.size) % 2
    n = x.size

    def fit(z):
        y, w, b = _split(z, n, n, 2)
        return jaxcal.isotonic_regression(
            x, y, sample_weight=w, group=group, increasing=increasing, y_min=b[0], y_max=b[1]
        )

    rng = np.random.default_rng(1)
    dw = rng.normal(size=n) * (w > 0)  # zero weights stay at their boundary
    z = np.concatenate([y, w, [-1.0, 1.5]])
    assert_jvp_matches_fd(jax.jit(fit), z, np.concatenate([rng.normal(size=n), dw, [0.3, -0.7]]))


def test_isotonic_regression_tangent_is_the_block_average():
    """The closed form: the tangent in ``y`` is the weighted block mean of ``dy`` (blocks
    from scikit-learn's fit), zero where a bound clips."""
    x, y, w = _regression_problem(seed=2)
    dy = np.random.default_rng(3).normal(size=y.size)
    _, tangent = jax.jvp(
        lambda y: jaxcal.isotonic_regression(x, y, sample_weight=w, y_max=1.0), (y,), (dy,)
    )
    weighted = w > 0  # (zero-weight points: see the score derivative below)
    x, y, w, dy = x[weighted], y[weighted], w[weighted], dy[weighted]
    fit = IsotonicRegression().fit(x, y, sample_weight=w).predict(x)
    expected = np.zeros(x.size)
    for value in np.unique(fit):
        block = fit == value
        expected[block] = np.sum((w * dy)[block]) / np.sum(w[block])
    expected[fit > 1.0] = 0.0
    assert 0 < np.sum(fit > 1.0) < x.size
    np.testing.assert_allclose(np.asarray(tangent)[weighted], expected, atol=EXACT)


def test_isotonic_regression_jvp_in_scores_at_zero_weight_points():
    """Zero-weight points take the map's interpolated value between their neighbours with
    weight: differentiable in their own score and in their neighbours'. Targets increase
    with the scores, so every point is its own block and the values differ."""
    rng = np.random.default_rng(4)
    n = 40
    x = np.sort(rng.uniform(0, 10, n))
    y = x + 0.01 * rng.normal(size=n)
    w = np.ones(n)
    w[3:-3:4] = 0.0
    f = jax.jit(lambda x: jaxcal.isotonic_regression(x, y, sample_weight=w))
    tangent = assert_jvp_matches_fd(f, x, rng.normal(size=n))
    assert np.all(np.asarray(tangent)[w > 0] == 0)  # piecewise constant in the scores
    assert np.any(np.abs(np.asarray(tangent)[w == 0]) > 1e-3)


@pytest.mark.parametrize("native", ["1", "0"])
def test_traced_isotonic_regression_is_the_portable_path(monkeypatch, native):
    """On tracers the public function runs the merge tree (no kernel in the program), with
    the kernel built and with it turned off; the numbers are the eager fit's and
    scikit-learn's."""
    monkeypatch.setenv(ENV, native)
    if native == "1" and not pav_cpu_available():
        pytest.skip("compiled CPU kernel not built")
    x, y, w = _regression_problem(200, seed=5)
    kw = dict(sample_weight=w, increasing=False, y_min=-1.0, y_max=1.0)
    eager = np.asarray(jaxcal.isotonic_regression(x, -y, **kw))
    program = jax.jit(lambda x, y: jaxcal.isotonic_regression(x, y, **kw))
    assert "jaxcal_pav" not in program.lower(x, -y).as_text()
    np.testing.assert_allclose(np.asarray(program(x, -y)), eager, atol=EXACT)
    ir = IsotonicRegression(increasing=False, y_min=-1.0, y_max=1.0, out_of_bounds="clip")
    ref = ir.fit(x, -y, sample_weight=w).predict(x)
    np.testing.assert_allclose(eager, ref, atol=EXACT)


def test_in_program_variant_keeps_the_kernel():
    """jaxcal's own programs keep the compiled kernel on CPU, with the same numbers."""
    if not pav_cpu_available():
        pytest.skip("compiled CPU kernel not built")
    x, y, w = _regression_problem(100, seed=6)
    program = jax.jit(lambda x, y: isotonic_regression_in_program(x, y, sample_weight=w))
    assert "jaxcal_pav_cpu" in program.lower(x, y).as_text()
    eager = np.asarray(jaxcal.isotonic_regression(x, y, sample_weight=w))
    np.testing.assert_allclose(np.asarray(program(x, y)), eager, atol=EXACT)


def test_isotonic_regression_vmap_and_export():
    x, y, w = _regression_problem(100, seed=7)
    X = np.stack([x, x[::-1], 2 * x])
    Y = np.stack([y, y, -y])
    batched = jax.vmap(lambda a, b: jaxcal.isotonic_regression(a, b, sample_weight=w))(X, Y)
    loop = [
        np.asarray(jaxcal.isotonic_regression(a, b, sample_weight=w))
        for a, b in zip(X, Y, strict=True)
    ]
    np.testing.assert_allclose(np.asarray(batched), np.stack(loop), atol=EXACT)

    program = jax.jit(lambda y: jaxcal.isotonic_regression(x, y, sample_weight=w, y_max=1.0))
    exp = jax.export.export(program)(y)
    assert "jaxcal_pav" not in exp.mlir_module()  # no kernel call: a portable artifact
    again = jax.export.deserialize(exp.serialize())
    eager = np.asarray(jaxcal.isotonic_regression(x, y, sample_weight=w, y_max=1.0))
    np.testing.assert_allclose(np.asarray(again.call(y)), eager, atol=EXACT)


# --- IsotonicCalibration ----------------------------------------------------------------

# (calibrator, whether vmap is checked too: every option is checked under jit, export and
# the NaN policy; vmap batches the same program, once per direction)
ISOTONIC = [
    (jaxcal.IsotonicCalibration(), True),
    (jaxcal.IsotonicCalibration(centered=True), False),
    (jaxcal.IsotonicCalibration(increasing=False, interpolation="step", trim=0.05), True),
    (jaxcal.IsotonicCalibration(out_of_bounds="nan", y_min=0.1, y_max=0.8), False),
]


def _batch(n, seeds=(0, 1, 2), shift=0.0):
    S, Y = zip(*(problem(n, k, shift=shift) for k in seeds), strict=True)
    return np.stack(S), np.stack(Y)


@pytest.mark.parametrize("cal, batched", ISOTONIC, ids=[repr(c) for c, _ in ISOTONIC])
def test_isotonic_calibration_composes(cal, batched):
    s, y = problem(150)
    flip = cal.increasing is False
    if flip:
        y = 1.0 - y
    assert_jit_matches_eager(cal, s, y)
    if batched:
        S, Y = _batch(100)
        assert_vmap_matches_loop(cal, S, 1 - Y if flip else Y)
    assert_exports(cal, s, y)
    if cal.out_of_bounds == "clip":
        assert_nan_policy(cal, s, y)


@pytest.mark.parametrize("native", ["1", "0"])
def test_isotonic_calibration_pure_fit_equals_eager_with_and_without_kernel(monkeypatch, native):
    monkeypatch.setenv(ENV, native)
    if native == "1" and not pav_cpu_available():
        pytest.skip("compiled CPU kernel not built")
    s, y = problem(300, seed=3)
    s[::5] = np.round(s[::5], 1)  # ties
    w = np.random.default_rng(3).uniform(0.0, 2.0, s.size)
    w[::11] = 0.0
    for cal in (jaxcal.IsotonicCalibration(), jaxcal.IsotonicCalibration(centered=True)):
        assert_jit_matches_eager(cal, s, y, sample_weight=w)


def test_isotonic_calibration_jvp_in_propensity_weights_and_scores():
    """Finite differences where the map is differentiable: in the propensities (IPS
    weights of the positives) and sample weights (block means move), and in the training
    scores (the knots move; the map between knots is linear): one direction in all three."""
    s, y = problem(100, seed=4)
    n = s.size
    rng = np.random.default_rng(4)
    omega = rng.uniform(0.3, 1.0, n)
    v = rng.uniform(0.5, 2.0, n)
    grid = grid_of(s, 23)
    z = np.concatenate([omega, v, s])
    dz = np.concatenate([rng.normal(size=2 * n), 0.1 * rng.normal(size=n)])
    for cal in (jaxcal.IsotonicCalibration(), jaxcal.IsotonicCalibration(centered=True)):

        def f(z, cal=cal):
            o, v, s = _split(z, n, n, n)
            fitted = cal.fit(s, y, sample_weight=v, propensity=o, loss="ips_positive")
            return fitted.predict(grid)

        tangent = assert_jvp_matches_fd(jax.jit(f), z, dz)
        assert np.any(np.abs(np.asarray(tangent)) > 1e-3)


def test_isotonic_calibration_derivative_in_targets_and_labels():
    """In the targets, against finite differences of the fit on real-valued targets (the
    label check of ``fit`` would poison 0/1 +- eps); in the labels, the tangent at the
    training scores is ``isotonic_regression``'s (itself checked against differences)."""
    s, y = problem(150, seed=5)
    rng = np.random.default_rng(5)
    t = 1.0 / (1.0 + np.exp(-(2.0 * y - 1.0 + rng.normal(size=s.size))))  # no ties
    w = np.ones_like(s)
    grid = grid_of(s, 23)
    cal = jaxcal.IsotonicCalibration()

    def by_targets(t):
        data = PureFitData(jnp.asarray(s), jnp.asarray(y), t, jnp.asarray(w), jnp.asarray(False))
        return cal._fit_pure(data).predict(grid)

    assert_jvp_matches_fd(jax.jit(by_targets), t, rng.normal(size=s.size))

    dy = rng.normal(size=s.size)
    _, fit_tangent = jax.jvp(lambda y: cal.fit(s, y).predict(s), (y,), (dy,))
    _, ref = jax.jvp(lambda y: jaxcal.isotonic_regression(s, y), (y,), (dy,))
    np.testing.assert_allclose(np.asarray(fit_tangent), np.asarray(ref), atol=EXACT)


def test_isotonic_calibration_grad_through_fit_and_predict():
    """``grad`` of ``fit(s, y).predict(s).sum()`` runs, and equals the finite difference."""
    s, y = problem(120, seed=6)
    cal = jaxcal.IsotonicCalibration()
    g = jax.grad(lambda s: cal.fit(s, y).predict(s).sum())(s)
    v = np.random.default_rng(6).normal(size=s.size)
    fd = finite_difference(jax.jit(lambda s: cal.fit(s, y).predict(s).sum()), s, v)
    np.testing.assert_allclose(float(np.dot(g, v)), float(fd), atol=1e-7)


def test_out_of_bounds_raise_gives_nan_under_a_trace():
    """``out_of_bounds="raise"`` cannot raise inside ``jit``: out-of-range scores get NaN
    (in the fit and in a traced predict); eager predict still raises."""
    s, y = problem(100, seed=7)
    cal = jaxcal.IsotonicCalibration(out_of_bounds="raise")
    q = np.array([s.min() - 1.0, float(np.median(s)), s.max() + 1.0])
    out = np.asarray(jax.jit(lambda s, y: cal.fit(s, y).predict(q))(s, y))
    assert np.isnan(out[0]) and np.isfinite(out[1]) and np.isnan(out[2])
    fitted = jax.jit(cal.fit)(s, y)
    assert np.isnan(np.asarray(jax.jit(fitted.predict)(q))[[0, 2]]).all()
    with pytest.raises(ValueError, match="outside the training range"):
        fitted.predict(q)


AUTO = [
    jaxcal.IsotonicCalibration(increasing="auto"),
    jaxcal.IsotonicCalibration(increasing="auto", interpolation="step", out_of_bounds="nan"),
]


@pytest.mark.parametrize("cal", AUTO, ids=repr)
def test_auto_direction_composes(cal):
    """``increasing="auto"`` inside a trace: the sign of the weighted Spearman correlation,
    computed in the program, is ``check_increasing``'s (the eager fit's) in both directions;
    ``jit`` equals the eager estimator, ``vmap`` over problems of both directions a loop of
    eager fits, and the program exports; invalid data gives NaN."""
    s, y = problem(150)
    for labels in (y, 1 - y):
        assert_jit_matches_eager(cal, s, labels)
    S, Y = _batch(100)
    Y[1] = 1 - Y[1]  # a decreasing problem between two increasing ones
    fitted = jax.vmap(cal.fit)(S, Y)
    assert fitted.increasing == "auto"
    eager = [check_increasing(s, y) for s, y in zip(S, Y, strict=True)]
    assert eager == [True, False, True]
    np.testing.assert_array_equal(np.asarray(fitted.sign), np.where(eager, 1.0, -1.0))
    assert_vmap_matches_loop(cal, S, Y)
    assert_exports(cal, s, 1 - y)
    assert_nan_policy(cal, s, 1 - y)


# weak correlations are the point here: check_increasing warns that their direction is unsure
@pytest.mark.filterwarnings("ignore:the 95% confidence interval:UserWarning")
def test_auto_direction_matches_check_increasing_on_weak_and_tied_data():
    """The traced direction against ``check_increasing`` where it is hardest to get right:
    weak correlations (about half of the problems each way), tied scores and targets,
    integer and zero weights, and constant targets (undefined correlation: increasing)."""
    rng = np.random.default_rng(11)
    n, m = 24, 60
    x = np.round(rng.normal(size=(m, n)), 1)
    t = rng.integers(0, 2, (m, n)).astype(float)
    w = rng.integers(0, 3, (m, n)).astype(float)
    w[:, 0] = 1.0
    t[-1] = 1.0  # constant targets
    traced = np.asarray(jax.jit(jax.vmap(increasing_pure))(x, t, w))
    eager = np.array([check_increasing(*row) for row in zip(x, t, w, strict=True)])
    np.testing.assert_array_equal(traced, eager)
    assert 0.25 < eager.mean() < 0.95 and eager[-1]
    # integer weights act as repeated points: scipy's Spearman correlation of the repeats
    for xi, ti, wi, up in zip(x[:10], t[:10], w[:10], traced[:10], strict=True):
        k = wi.astype(int)
        rho = spearmanr(np.repeat(xi, k), np.repeat(ti, k)).statistic
        assert up == (rho >= 0)


def test_auto_direction_derivative_and_saved_file(tmp_path):
    """A decreasing ``"auto"`` fit differentiates in the scores as the map it is (central
    differences), and its fitted map, with its ``sign``, saves and loads exactly."""
    s, y = problem(100, seed=8)
    y = 1 - y
    cal = jaxcal.IsotonicCalibration(increasing="auto")
    grid = grid_of(s, 23)
    v = 0.1 * np.random.default_rng(8).normal(size=s.size)
    tangent = assert_jvp_matches_fd(jax.jit(lambda s: cal.fit(s, y).predict(grid)), s, v)
    assert np.any(np.abs(np.asarray(tangent)) > 1e-3)
    fitted = jax.jit(cal.fit)(s, y)
    fitted.save(tmp_path / "auto.npz")
    again = jaxcal.load(tmp_path / "auto.npz")
    assert again.increasing == "auto" and float(again.sign) == -1.0
    np.testing.assert_array_equal(np.asarray(again.predict(grid)), np.asarray(fitted.predict(grid)))
    eager = np.asarray(cal.fit(s, y).predict(grid))
    np.testing.assert_allclose(np.asarray(again.predict(grid)), eager, atol=EXACT)


# --- SmoothedIsotonic --------------------------------------------------------------------

SMOOTHED = [
    jaxcal.SmoothedIsotonic(n_buckets=20),
    jaxcal.SmoothedIsotonic(n_buckets=20, centered=True),
    jaxcal.SmoothedIsotonic(n_buckets=500, increasing=False),
]


@pytest.mark.parametrize("cal", SMOOTHED, ids=repr)
def test_smoothed_isotonic_composes(cal):
    s, y = problem(300)
    s[::4] = np.round(s[::4], 1)  # ties: some buckets empty
    if not cal.increasing:
        y = 1.0 - y
    w = np.random.default_rng(0).uniform(0.0, 2.0, s.size)
    w[::13] = 0.0
    assert_jit_matches_eager(cal, s, y, sample_weight=w)
    if not cal.centered:  # the centred knots are checked under jit and export
        S, Y = _batch(200)
        assert_vmap_matches_loop(cal, S, Y if cal.increasing else 1 - Y)
    assert_exports(cal, s, y)
    assert_nan_policy(cal, s, y)


@pytest.mark.parametrize("centered", [False, True])
def test_smoothed_isotonic_jvp(centered):
    """Finite differences with the buckets fixed (a perturbation that keeps the order of
    the scores): in the scores (bucket centres), propensities and weights, one direction
    in all three."""
    s, y = problem(200, seed=8)
    n = s.size
    rng = np.random.default_rng(8)
    grid = grid_of(s, 23)
    cal = jaxcal.SmoothedIsotonic(n_buckets=15, centered=centered)

    def f(z):
        o, v, s = _split(z, n, n, n)
        return cal.fit(s, y, sample_weight=v, propensity=o, loss="ips_positive").predict(grid)

    z = np.concatenate([rng.uniform(0.3, 1.0, n), rng.uniform(0.5, 2.0, n), s])
    dz = np.concatenate([rng.normal(size=2 * n), 0.1 * rng.normal(size=n)])
    tangent = assert_jvp_matches_fd(jax.jit(f), z, dz)
    assert np.any(np.abs(np.asarray(tangent)) > 1e-3)


# --- ENIR --------------------------------------------------------------------------------


def test_enir_composes():
    s, y = problem(120, seed=9)
    s[::6] = np.round(s[::6], 1)
    w = np.random.default_rng(9).uniform(0.0, 2.0, s.size)
    w[::7] = 0.0
    cal = jaxcal.ENIR()
    assert_jit_matches_eager(cal, s, y, sample_weight=w)
    assert_exports(cal, s, y)
    assert_nan_policy(cal, s, y)


@pytest.mark.slow
def test_enir_vmap_matches_loop():
    S, Y = _batch(100, seeds=(0, 1))
    assert_vmap_matches_loop(jaxcal.ENIR(), S, Y)


def test_enir_jvp_in_scores():
    """ENIR's values depend on the order of the scores only: the map moves with its knots
    (finite differences, order kept), and at the training scores it does not move."""
    s, y = problem(100, seed=10)
    rng = np.random.default_rng(10)
    grid = grid_of(s, 23)
    cal = jaxcal.ENIR()
    tangent = assert_jvp_matches_fd(
        jax.jit(lambda s: cal.fit(s, y).predict(grid)), s, 0.1 * rng.normal(size=s.size)
    )
    assert np.any(np.abs(np.asarray(tangent)) > 1e-4)
    g = jax.grad(lambda s: cal.fit(s, y).predict(s).sum())(s)
    np.testing.assert_allclose(np.asarray(g), 0.0, atol=1e-9)


def test_enir_derivative_of_the_selected_models():
    """With the breakpoints, the BIC weights and each model's fused groups held fixed, the
    tangent of the averaged run values is ``sum_k omega_k`` of the group-wise derivative
    of ``(sum W y + lambda_k c) / W``: against the list-based path's groups."""
    rng = np.random.default_rng(11)
    n = 60
    W = rng.uniform(0.5, 2.0, n)
    p = np.sort(rng.uniform(0.1, 0.9, n))
    y = np.clip(p + 0.3 * rng.normal(size=n), 0.0, 1.0)
    s1, s0 = W * y, W * (1 - y)
    eps = 1e-3
    dW, dy = rng.normal(size=n), rng.normal(size=n)
    real = np.ones(n, bool)

    def averaged(W, y):
        acc, _, _ = _enir_path.enir_average_differentiable(
            W, y, s1, s0, real, jnp.asarray(float(n)), jnp.asarray(eps)
        )
        return acc

    acc, tangent = jax.jvp(averaged, (W, y), (dW, dy))
    models = breakpoint_models(W, y, s1, s0, n, eps)
    lw = np.array([m[0] for m in models])
    omega = np.exp(lw - lw.max())
    omega /= omega.sum()
    np.testing.assert_allclose(
        np.asarray(acc), sum(o * m[1] for o, m in zip(omega, models, strict=True)), atol=EXACT
    )
    expected = np.zeros(n)
    for o, (_, fit, groups) in zip(omega, models, strict=True):
        for g in groups:
            g = np.asarray(g)
            num = np.sum(W[g] * dy[g] + dW[g] * (y[g] - fit[g]))
            expected[g] += o * num / np.sum(W[g])
    np.testing.assert_allclose(np.asarray(tangent), expected, atol=1e-8)
    # reverse mode: the transpose of the same linear map
    r = rng.normal(size=n)
    gW, gy = jax.grad(lambda W, y: jnp.sum(averaged(W, y) * r), argnums=(0, 1))(W, y)
    np.testing.assert_allclose(
        float(np.dot(gW, dW) + np.dot(gy, dy)), float(np.dot(np.asarray(tangent), r)), rtol=1e-9
    )


def test_enir_grad_in_labels_and_weights_runs():
    """``grad`` through the fit runs (the selected models' derivative) and is finite."""
    s, y = problem(80, seed=12)
    w = np.random.default_rng(12).uniform(0.5, 2.0, s.size)
    grid = grid_of(s, 11)
    cal = jaxcal.ENIR()
    gy, gw = jax.grad(
        lambda y, w: cal.fit(s, y, sample_weight=w).predict(grid).sum(), argnums=(0, 1)
    )(y, w)
    assert np.all(np.isfinite(np.asarray(gy))) and np.any(np.asarray(gy) != 0)
    assert np.all(np.isfinite(np.asarray(gw)))
