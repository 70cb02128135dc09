"""Shared checks that a calibrator composes as a JAX function (tests import these).

Every check compares against an independent oracle: the eager estimator (validated on the
host, padded, possibly through the compiled kernels) for ``jit`` and ``export``, a Python
loop of single fits for ``vmap``, central finite differences in float64 for ``jvp`` /
``grad``. The tests run with x64 on (``tests/conftest.py``), so the pure fits run in
float64 when given float64 arrays.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxcal._jit import cpu_compiler_options

#: float64 agreement of the pure fit with the eager one: both solve the same problem to
#: convergence, by different code (host presort and kernels against the traced path)
PURE_RTOL = 1e-6
PURE_ATOL = 1e-8


def problem(n: int = 300, seed: int = 0, *, shift: float = 0.0):
    """A calibration problem with a real signal: ``(scores, labels)`` float64, both classes,
    distinct scores."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n).astype(np.float64)
    y[:2] = (0.0, 1.0)
    s = rng.normal(1.2 * y, 1.0) + shift
    return s, y


def grid_of(s: np.ndarray, m: int = 41) -> np.ndarray:
    """Prediction points across (and a little beyond) the score range."""
    lo, hi = float(np.min(s)), float(np.max(s))
    pad = 0.05 * (hi - lo)
    return np.linspace(lo - pad, hi + pad, m)


def assert_jit_matches_eager(cal, s, y, *, grid=None, rtol=PURE_RTOL, atol=PURE_ATOL, **fit_kw):
    """``jax.jit(fit + predict)`` equals the eager estimator's ``fit(...).predict``."""
    grid = grid_of(s) if grid is None else grid
    eager = np.asarray(cal.fit(s, y, **fit_kw).predict(grid))
    traced = jax.jit(lambda s, y: cal.fit(s, y, **fit_kw).predict(grid))(s, y)
    np.testing.assert_allclose(np.asarray(traced), eager, rtol=rtol, atol=atol)
    return eager


def assert_vmap_matches_loop(cal, S, Y, *, grid=None, rtol=PURE_RTOL, atol=PURE_ATOL):
    """``jax.vmap`` of the pure fit over problems equals a loop of eager single fits."""
    grid = grid_of(S.ravel()) if grid is None else grid
    batched = jax.vmap(lambda s, y: cal.fit(s, y).predict(grid))(S, Y)
    loop = np.stack([np.asarray(cal.fit(s, y).predict(grid)) for s, y in zip(S, Y, strict=True)])
    np.testing.assert_allclose(np.asarray(batched), loop, rtol=rtol, atol=atol)


def finite_difference(f, x, v, eps: float = 1e-6):
    """Central difference of ``f`` at ``x`` in direction ``v`` (float64)."""
    x, v = np.asarray(x, np.float64), np.asarray(v, np.float64)
    return (np.asarray(f(x + eps * v)) - np.asarray(f(x - eps * v))) / (2 * eps)


def assert_jvp_matches_fd(f, x, v, *, eps=1e-6, rtol=1e-5, atol=1e-7):
    """``jax.jvp(f, x, v)`` equals the central finite difference (and ``grad`` of a scalar
    projection equals the jvp: the reverse mode agrees with the forward mode)."""
    _, tangent = jax.jvp(f, (jnp.asarray(x),), (jnp.asarray(v),))
    fd = finite_difference(jax.jit(f), x, v, eps)
    np.testing.assert_allclose(np.asarray(tangent), fd, rtol=rtol, atol=atol)
    r = np.random.default_rng(1).normal(size=np.shape(tangent))
    g = jax.grad(lambda x: jnp.sum(f(x) * r))(jnp.asarray(x))
    np.testing.assert_allclose(
        float(np.sum(g * v)), float(np.sum(tangent * r)), rtol=1e-6, atol=atol
    )
    return tangent


def assert_exports(cal, s, y, *, grid=None, rtol=PURE_RTOL, atol=PURE_ATOL):
    """The program ``fit + predict`` and the fitted map's ``predict`` both export
    (``jax.export``), serialise, deserialise and give the eager numbers."""
    grid = grid_of(s) if grid is None else grid
    eager = np.asarray(cal.fit(s, y).predict(grid))

    program = jax.jit(lambda s, y: cal.fit(s, y).predict(grid))
    exp = jax.export.export(program)(s, y)
    again = jax.export.deserialize(exp.serialize())
    np.testing.assert_allclose(np.asarray(again.call(s, y)), eager, rtol=rtol, atol=atol)

    fitted = cal.fit(s, y)
    spec = jax.ShapeDtypeStruct(grid.shape, grid.dtype)
    exp = jax.export.export(jax.jit(fitted.predict))(spec)
    again = jax.export.deserialize(exp.serialize())
    np.testing.assert_allclose(np.asarray(again.call(grid)), eager, rtol=rtol, atol=atol)


def assert_nan_policy(cal, s, y):
    """Inside ``jit``, data ``fit`` would refuse gives NaN predictions, never a number."""
    grid = grid_of(s, 7)
    run = jax.jit(lambda s, y: cal.fit(s, y).predict(grid))
    bad_score = s.copy()
    bad_score[3] = np.nan
    bad_label = y.copy()
    bad_label[3] = 2.0
    one_class = np.ones_like(y)
    for s_, y_ in ((bad_score, y), (s, bad_label), (s, one_class)):
        assert np.all(np.isnan(np.asarray(run(s_, y_)))), (s_[:4], y_[:4])
    # a traced predict of a non-finite score is NaN
    fitted = cal.fit(s, y)
    out = jax.jit(fitted.predict)(np.array([np.nan, float(np.median(s))]))
    assert np.isnan(out[0]) and np.isfinite(out[1])


def quick_jit(f):
    """``jax.jit`` with the quick-compiling CPU options of jaxcal's own programs: the
    derivative checks compile three programs each, the numbers are the same."""
    opts = cpu_compiler_options(small=True) if jax.default_backend() == "cpu" else None
    return jax.jit(f, compiler_options=opts)


def check_derivative(f, x, v, *, eps=1e-6, rtol=1e-5, atol=1e-7):
    """``jvp`` of ``f`` at the pytree ``x`` along ``v`` equals the central finite difference,
    and reverse mode (``grad`` of a random projection) agrees with it."""
    primal = quick_jit(f)
    tangent = quick_jit(lambda x, v: jax.jvp(f, (x,), (v,))[1])(x, v)
    plus = jax.tree.map(lambda a, b: a + eps * b, x, v)
    minus = jax.tree.map(lambda a, b: a - eps * b, x, v)
    fd = (np.asarray(primal(plus)) - np.asarray(primal(minus))) / (2 * eps)
    np.testing.assert_allclose(np.asarray(tangent), fd, rtol=rtol, atol=atol)
    r = np.random.default_rng(1).normal(size=np.shape(tangent))
    g = quick_jit(jax.grad(lambda x: jnp.sum(f(x) * r)))(x)
    lhs = sum(
        float(np.sum(a * b)) for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(v), strict=True)
    )
    np.testing.assert_allclose(lhs, float(np.sum(np.asarray(tangent) * r)), rtol=1e-6, atol=atol)
