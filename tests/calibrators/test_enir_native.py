"""The compiled ENIR kernel (``jaxcal._native``, ``enir_cpu.cc``) against the pure-JAX path
(``enir._path_core`` + ``enir._average_core``, what ``JAXCAL_NATIVE=0`` and GPU / TPU run):
the same breakpoint models, the same pruning, the same averaged run values to float64
rounding. The JAX path itself is checked against a list-based oracle in test_enir.py.

Tolerance: 1e-12 in float64, IPS targets included. (On larger IPS problems, 1e4 points
with targets up to 20, the path's rounding grows to ~1e-11 in both implementations alike:
each is that far from an 80-bit evaluation of the same algorithm.) float32 runs: the kernel
computes in double, so it is compared with the float64 JAX path at float32 resolution.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxcal
from jaxcal import _native, _shapes
from jaxcal.calibrators import enir

EXACT = 1e-12
F32 = 1e-5

if not _native.enir_cpu_available():
    if os.environ.get("JAXCAL_REQUIRE_NATIVE") == "1":  # set by .ci/run
        raise RuntimeError("the compiled ENIR kernel was not built (see setup.py)")
    pytest.skip("compiled ENIR kernel not built", allow_module_level=True)


def _runs(s, t, w=None, dtype=np.float64):
    """Tie-pooled, padded runs as ``ENIR.fit`` builds them, and ``n_eff``."""
    w = np.ones(s.size) if w is None else w
    _, W, y, s1, s0, real = enir._runs_host(s, t, w)
    return (*(np.asarray(a, dtype) for a in (W, y, s1, s0)), real), dtype(np.sum(w > 0))


def _both(runs, n_eff, eps=1e-3):
    """(kernel, JAX path) outputs: ``(acc, n_models, n_scored)`` as NumPy."""
    eps = np.asarray(eps, runs[0].dtype)
    kernel = enir._native_core(*runs, n_eff, eps)
    portable = enir._average_core(enir._path_core(*runs), *runs, n_eff, eps)
    return tuple(tuple(np.asarray(a) for a in out[:3]) for out in (kernel, portable))


def _assert_same(runs, n_eff, atol, eps=1e-3):
    (acc, models, scored), (ref, ref_models, ref_scored) = _both(runs, n_eff, eps)
    assert int(models) == int(ref_models)
    assert int(scored) == int(ref_scored)
    np.testing.assert_allclose(acc, ref, rtol=0, atol=atol)
    return acc, int(models), int(scored)


def _problem(kind, n, seed):
    rng = np.random.default_rng(seed)
    z = rng.normal(size=n)
    if kind == "ties":
        z = np.round(z, 1)
    elif kind == "heavy ties":
        z = rng.integers(0, 4, n).astype(float)
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-2 * z))).astype(float)
    w = None
    if kind == "weighted":
        w = rng.uniform(0.2, 2.0, n)
        w[rng.uniform(size=n) < 0.05] = 0.0
    if kind == "ips":
        return z, y / rng.uniform(0.05, 1.0, n), rng.uniform(0.2, 2.0, n)
    return z, y, w


@pytest.mark.parametrize("kind", ["labels", "ties", "heavy ties", "weighted", "ips"])
@pytest.mark.parametrize("n", [1, 2, 3, 40, 1500])
def test_kernel_equals_the_jax_path(kind, n):
    for seed in range(2):
        s, t, w = _problem(kind, n, seed)
        runs, n_eff = _runs(s, t, w)
        _assert_same(runs, n_eff, EXACT)


@pytest.mark.parametrize("label", [0.0, 1.0])
def test_all_equal_labels(label):
    """One class: no merge violates anything, the single (isotonic) model is the data."""
    s = np.random.default_rng(0).normal(size=50)
    runs, n_eff = _runs(s, np.full(50, label))
    acc, models, scored = _assert_same(runs, n_eff, EXACT)
    assert models == scored == 1
    np.testing.assert_array_equal(acc[:50], label)


def test_no_positive_weight():
    """Every point of zero weight: no real run, the final model alone (all zeros)."""
    runs, n_eff = _runs(np.array([0.3, 0.1]), np.array([1.0, 0.0]), np.zeros(2))
    acc, models, scored = _assert_same(runs, n_eff, EXACT)
    assert models == scored == 1
    np.testing.assert_array_equal(acc, 0.0)


def test_pruning_is_exercised_and_identical():
    """At a size where the BIC bound skips most models, the same ones are scored."""
    for kind in ("labels", "weighted"):
        s, t, w = _problem(kind, 1500, 3)
        _, models, scored = _assert_same(*_runs(s, t, w), EXACT)
        assert scored < models / 3


@pytest.mark.parametrize("eps", [1e-6, 0.02, 0.3])
def test_clipping(eps):
    s, t, w = _problem("ties", 800, 4)
    _assert_same(*_runs(s, t, w), EXACT, eps=eps)


def test_float32_runs_are_computed_in_double():
    """float32 runs: the kernel works in double (its float32 tolerance for "already equal"
    aside), so it matches the float64 JAX path on the same (float32) runs to float32
    resolution; the float32 JAX path itself drifts further (lambdas of a few hundred)."""
    for kind, n in (("labels", 1500), ("ties", 1500), ("ips", 1500)):
        s, t, w = _problem(kind, n, 5)
        runs32, n_eff = _runs(s, t, w, np.float32)
        runs64 = (*(np.asarray(a, np.float64) for a in runs32[:4]), runs32[4])
        eps = np.float32(1e-3)
        acc, _, _, _ = enir._native_core(*runs32, n_eff, eps)
        assert acc.dtype == np.float32
        ref = enir._average_core(
            enir._path_core(*runs64), *runs64, np.float64(n_eff), np.float64(eps)
        )[0]
        scale = 1.0 + np.abs(np.asarray(ref)).max()
        np.testing.assert_allclose(np.asarray(acc), np.asarray(ref), rtol=0, atol=F32 * scale)


@pytest.mark.parametrize("kind", ["weighted", "ips"])
def test_fit_equals_the_jax_fit(kind, monkeypatch):
    s, t, w = _problem("ties", 1200, 6)
    rng = np.random.default_rng(7)
    y = (t > 0).astype(int)
    kw = {"sample_weight": w}
    if kind == "ips":
        kw = {"propensity": rng.uniform(0.05, 1.0, s.size), "loss": "ips"}
    q = rng.normal(size=300)
    native = jaxcal.ENIR().fit(s, y, **kw)
    monkeypatch.setenv(_native.ENV, "0")
    assert not enir._use_kernel()
    portable = jaxcal.ENIR().fit(s, y, **kw)
    assert int(native.n_models) == int(portable.n_models)
    assert int(native.n_scored) == int(portable.n_scored)
    np.testing.assert_array_equal(np.asarray(native.knots_x), np.asarray(portable.knots_x))
    np.testing.assert_allclose(native.knots_y, portable.knots_y, rtol=0, atol=EXACT)
    np.testing.assert_allclose(native.predict(q), portable.predict(q), rtol=0, atol=EXACT)


def test_float32_fit(monkeypatch):
    s, t, _ = _problem("labels", 2000, 8)
    with jax.enable_x64(False):
        fitted = jaxcal.ENIR().fit(s, t)
        assert fitted.knots_y.dtype == jnp.float32
        got = np.asarray(fitted.predict(s))
    ref = np.asarray(jaxcal.ENIR().fit(s, t).predict(s))  # float64
    np.testing.assert_allclose(got, ref, rtol=0, atol=F32)


@pytest.mark.parametrize("lam", [0.0, 1e-3, 0.05, 0.7, 5.0, np.inf])
def test_near_isotonic_path_equals_the_jax_path(lam):
    rng = np.random.default_rng(9)
    y = np.round(rng.normal(size=300), 1)  # equal neighbours fuse at lambda = 0
    w = rng.uniform(0.5, 2.0, 300)
    size = _shapes.padded_size(300)
    args = [_shapes.pad_axis(a, size) for a in (w, y)] + [np.arange(size) < 300]
    ours = np.asarray(enir._near_isotonic_native(*args, np.float64(lam)))[:300]
    ref = np.asarray(enir._near_isotonic_core(*args, np.float64(lam)))[:300]
    np.testing.assert_allclose(ours, ref, rtol=0, atol=EXACT)


def test_batched_problems_under_vmap():
    problems = [_runs(*_problem(kind, 500, 10)) for kind in ("labels", "ties", "weighted")]
    size = max(r[0][0].size for r in problems)
    pad = [_shapes.pad_axis(a, size) for r in problems for a in r[0]]  # 5 arrays a problem
    stacked = [np.stack(pad[i::5]) for i in range(5)]
    n_eff = np.array([r[1] for r in problems])
    eps = np.full(3, 1e-3)
    acc, models, scored, _ = jax.jit(jax.vmap(_native.enir_fit_cpu))(*stacked, n_eff, eps)
    for i, (runs, ne) in enumerate(problems):
        one = enir._native_core(*runs, ne, np.float64(1e-3))
        n = runs[0].size
        np.testing.assert_array_equal(np.asarray(acc[i])[:n], np.asarray(one[0]))
        assert int(models[i]) == int(one[1]) and int(scored[i]) == int(one[2])


def test_real_must_be_a_prefix():
    runs, n_eff = _runs(*_problem("labels", 40, 11)[:2])
    real = runs[4].copy()
    real[-1] = True  # a padding run flagged real after the padding began
    with pytest.raises(Exception, match="prefix"):
        jax.block_until_ready(enir._native_core(*runs[:4], real, n_eff, np.float64(1e-3)))


def test_new_sizes_in_a_bucket_compile_nothing(compiles):
    def fit_predict(n, seed):
        s, t, w = _problem("weighted", n, seed)
        jax.block_until_ready(jaxcal.ENIR().fit(s, t, sample_weight=w).predict(s[:50]))

    fit_predict(600, 12)  # warm-up: bucket 1024
    with compiles() as c:
        fit_predict(700, 13)
        fit_predict(1000, 14)
    assert c.count == 0


_VALUES = st.sampled_from([0.0, 0.25, 0.5, 1.0, 2.0])


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 6), _VALUES, st.floats(0.1, 3.0)), min_size=1, max_size=24)
)
def test_property_kernel_equals_the_jax_path(points):
    """Any small problem: few distinct scores (ties), targets with repeats (equal runs that
    fuse at lambda = 0) and above 1 (IPS-like), any weights."""
    s, t, w = (np.array(v, float) for v in zip(*points, strict=True))
    _assert_same(*_runs(s, t, w), EXACT)
