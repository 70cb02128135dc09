"""The compiled CPU PAV kernel (``jaxcal._native``): oracles are scikit-learn's
IsotonicRegression (float64, one fit per group) and a plain-Python stack PAV over an
``np.lexsort`` order; the portable merge tree must agree with it on every input.

The score distributions are chosen to reach every branch of the kernel's sort: value
buckets (dense scores), radix passes (clustered, heavy-tailed, huge ranges, segments above
the in-cache size), insertion sort (tiny problems), ties and signed zeros.
"""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.isotonic import IsotonicRegression

from jaxcal._native import ENV, pav_cpu_available, pav_fitted_cpu, pav_runs_cpu
from jaxcal.calibrators.isotonic import isotonic_regression
from jaxcal.fitting.isotonic import isotonic_knots, isotonic_regression_in_program
from jaxcal.fitting.pav import pav

EXACT = 1e-9  # float64, as against scikit-learn elsewhere

if not pav_cpu_available():
    if os.environ.get("JAXCAL_REQUIRE_NATIVE") == "1":  # set by .ci/run
        raise RuntimeError("the compiled CPU kernel was not built (see setup.py)")
    pytest.skip("compiled CPU kernel not built", allow_module_level=True)


def _reference(x, y, w, group=None):
    """Sequential weighted PAV per group in plain Python: lexsort, exact tie runs, stack
    pooling (pool while mean(left) >= mean(right) or a block has no weight)."""
    group = np.zeros(x.size, np.int64) if group is None else np.asarray(group)
    order = np.lexsort((x, group))
    xs, gs, ys, ws = x[order], group[order], y[order], w[order]
    sorted_out = np.empty(x.size)
    blocks = []  # [sum wy, sum w, first sorted position]
    for p in range(x.size + 1):
        new_group = p == x.size or p == 0 or gs[p] != gs[p - 1]
        if new_group:  # write out the finished group
            for k, (by, bw, first) in enumerate(blocks):
                last = blocks[k + 1][2] if k + 1 < len(blocks) else p
                sorted_out[first:last] = by / bw if bw > 0 else 0.0
            blocks = []
        if p == x.size:
            break
        if new_group or xs[p] != xs[p - 1]:
            blocks.append([0.0, 0.0, p])
            if len(blocks) > 1 and not new_group:  # pool the finished run before it
                last_run = blocks.pop()
                _pool(blocks)
                blocks.append(last_run)
        blocks[-1][0] += ws[p] * ys[p]
        blocks[-1][1] += ws[p]
        if p + 1 == x.size or gs[p + 1] != gs[p] or xs[p + 1] != xs[p]:
            _pool(blocks)  # the run is complete
    out = np.empty(x.size)
    out[order] = sorted_out
    return out


def _pool(blocks):
    while len(blocks) > 1:
        (ly, lw, lp), (ry, rw, _) = blocks[-2], blocks[-1]
        if not (lw == 0 or rw == 0 or ly * rw >= ry * lw):
            break
        blocks[-2:] = [[ly + ry, lw + rw, lp]]


def _sklearn(x, y, w, group=None):
    if group is None:
        return IsotonicRegression().fit(x, y, sample_weight=w).predict(x)
    out = np.empty(x.size)
    for g in np.unique(group):
        m = group == g
        out[m] = IsotonicRegression().fit(x[m], y[m], sample_weight=w[m]).predict(x[m])
    return out


def _native(x, y, w, group=None):
    g = None if group is None else jnp.asarray(group)
    return np.asarray(jax.jit(pav_fitted_cpu)(jnp.asarray(x), jnp.asarray(y), jnp.asarray(w), g))


def _portable(x, y, w, group=None):
    g = None if group is None else jnp.asarray(group)
    r = jax.jit(pav)(jnp.asarray(x), jnp.asarray(y), jnp.asarray(w), g)
    return np.asarray(r.fitted)


SCORES = {
    "normal": lambda rng, n: rng.normal(size=n),
    "rounded (ties)": lambda rng, n: np.round(rng.normal(size=n), 1),
    "cauchy (heavy tails)": lambda rng, n: rng.standard_cauchy(n),
    "clustered + outliers": lambda rng, n: np.concatenate(
        [1.0 + 1e-12 * rng.normal(size=max(n - 2, 0)), [-1e6, 1e6][: min(n, 2)]]
    ),
    "huge range": lambda rng, n: rng.choice([-1.0, 1.0], n) * 10.0 ** rng.uniform(-300, 308, n),
    "signed zeros": lambda rng, n: rng.choice([-0.0, 0.0, 1e-320, -1e-320, 1.0], n),
    "constant": lambda rng, n: np.full(n, 3.0),
}


@pytest.mark.parametrize("kind", list(SCORES))
@pytest.mark.parametrize("n", [1, 2, 23, 300, 20_000, 70_000])
def test_equals_sklearn_on_every_sort_path(kind, n):
    rng = np.random.default_rng(n)
    x = SCORES[kind](rng, n)
    p = 1 / (1 + np.exp(-np.clip(np.nan_to_num(x), -30, 30)))
    y = (rng.uniform(size=n) < p).astype(float) + 0.1 * rng.normal(size=n)
    w = rng.uniform(0.1, 3.0, n)
    ours = _native(x, y, w)
    ref = _reference(x, y, w)
    np.testing.assert_allclose(ours, ref, rtol=0, atol=EXACT * (1 + np.abs(ref).max()))
    if kind in ("normal", "rounded (ties)"):  # scikit-learn pools scores < 1e-15 apart
        np.testing.assert_allclose(ours, _sklearn(x, y, w), rtol=0, atol=EXACT)


@pytest.mark.parametrize("layout", ["contiguous", "interleaved"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_groups_equal_a_loop_of_sklearn_fits(layout, dtype):
    rng = np.random.default_rng(7)
    sizes = rng.integers(1, 400, 60)
    group = np.repeat(rng.permutation(10**6)[: sizes.size] - 500_000, sizes).astype(dtype)
    if layout == "interleaved":
        group = rng.permutation(group)
    x = np.round(rng.normal(size=group.size), 2)
    y = (rng.uniform(size=x.size) < 1 / (1 + np.exp(-x))).astype(float)
    w = rng.uniform(0.1, 2.0, x.size)
    ref = _sklearn(x, y, w, group)
    np.testing.assert_allclose(_native(x, y, w, group), ref, atol=EXACT)
    np.testing.assert_allclose(_portable(x, y, w, group), ref, atol=EXACT)


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(-4, 4),  # scores with many ties
            st.floats(-3, 3),
            st.sampled_from([0.0, 0.5, 1.0, 2.5]),  # zero weights included
            st.integers(0, 2),
        ),
        min_size=1,
        max_size=40,
    )
)
def test_property_equals_reference_and_portable(points):
    """Positive-weight points equal the reference and the portable merge tree; every output
    (zero-weight points too) is monotone in the score within its group."""
    x, y, w, g = (np.array(c) for c in zip(*points, strict=True))
    x, y, w = x.astype(float), y.astype(float), w.astype(float)
    ours = _native(x, y, w, g)
    pos = w > 0
    np.testing.assert_allclose(ours[pos], _reference(x, y, w, g)[pos], atol=EXACT)
    np.testing.assert_allclose(ours[pos], _portable(x, y, w, g)[pos], atol=EXACT)
    for k in np.unique(g):
        m = g == k
        order = np.argsort(x[m], kind="stable")
        assert np.all(np.diff(ours[m][order]) >= -1e-12)
        if not np.any(w[m] > 0):
            np.testing.assert_array_equal(ours[m], 0.0)  # a group with no weight: 0


def test_float32_matches_float64_oracle():
    rng = np.random.default_rng(3)
    x = rng.normal(size=5_000).astype(np.float32)
    y = rng.uniform(size=5_000).astype(np.float32)
    w = rng.uniform(0.5, 1.5, 5_000).astype(np.float32)
    ours = _native(x, y, w)
    assert ours.dtype == np.float32
    ref = _sklearn(x.astype(float), y.astype(float), w.astype(float))
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-6)


def test_vmap_rows_equal_a_loop_and_no_recompile():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(5, 300))
    y = (rng.uniform(size=x.shape) < 0.5).astype(float)
    w = rng.uniform(0.2, 2.0, x.shape)
    f = jax.jit(jax.vmap(pav_fitted_cpu))
    batched = np.asarray(f(x, y, w))
    for row in range(5):
        np.testing.assert_allclose(batched[row], _sklearn(x[row], y[row], w[row]), atol=EXACT)
    before = f._cache_size()
    f(x + 1.0, y, w).block_until_ready()
    assert f._cache_size() == before
    # rows with their own group ids (each row: three interleaved groups)
    g = rng.integers(0, 3, x.shape)
    batched = np.asarray(jax.jit(jax.vmap(pav_fitted_cpu))(x, y, w, g))
    for row in range(5):
        ref = _sklearn(x[row], y[row], w[row], g[row])
        np.testing.assert_allclose(batched[row], ref, atol=EXACT)


def test_in_program_isotonic_regression_picks_the_kernel_inside_jit_and_vmap():
    """The variant for jaxcal's own programs under jit (platform_dependent picks the kernel
    on CPU) and vmap (each row one problem) equals scikit-learn, both directions, with
    clipping; the public function on tracers takes the merge tree (differentiable,
    exportable), with the same numbers."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(3, 200))
    y = rng.normal(size=(3, 200))
    kw = dict(increasing=False, y_min=-0.5, y_max=0.7)
    f = jax.jit(jax.vmap(lambda a, b: isotonic_regression_in_program(a, b, **kw)))
    public = jax.jit(jax.vmap(lambda a, b: isotonic_regression(a, b, **kw)))
    out, out_public = np.asarray(f(x, y)), np.asarray(public(x, y))
    for row in range(3):
        ir = IsotonicRegression(increasing=False, y_min=-0.5, y_max=0.7).fit(x[row], y[row])
        np.testing.assert_allclose(out[row], ir.predict(x[row]), atol=EXACT)
        np.testing.assert_allclose(out_public[row], ir.predict(x[row]), atol=EXACT)
    text = jax.jit(lambda a, b: isotonic_regression_in_program(a, b)).lower(x[0], y[0]).as_text()
    assert "jaxcal_pav_cpu" in text
    text = jax.jit(lambda a, b: isotonic_regression(a, b)).lower(x[0], y[0]).as_text()
    assert "jaxcal_pav_cpu" not in text


def test_env_switch_turns_the_kernel_off(monkeypatch):
    monkeypatch.setenv(ENV, "0")
    assert not pav_cpu_available()
    rng = np.random.default_rng(6)
    x, y = rng.normal(size=100), rng.normal(size=100)
    np.testing.assert_allclose(
        np.asarray(isotonic_regression(x, y)), IsotonicRegression().fit(x, y).predict(x), atol=EXACT
    )
    monkeypatch.setenv(ENV, "1")
    assert pav_cpu_available()


def test_signed_zero_and_subnormal_scores_in_both_paths():
    """-0.0 and 0.0 tie (as in scikit-learn) and distinct subnormal scores stay distinct, in
    the kernel and in the merge tree (XLA folds ``x + 0.0`` and flushes subnormals, so both
    build their keys with integer operations). Targets increase with the true order, so the
    fit is the targets with the tied pair averaged; a flushed subnormal would pool more."""
    perm = np.array([4, 0, 5, 2, 1, 3])
    y = np.array([0.0, 1.0, 3.0, 4.0, 5.0, 6.0])[perm]
    expected = np.array([0.0, 2.0, 2.0, 4.0, 5.0, 6.0])[perm]
    w = np.ones(6)
    for tiny, dtype in ((1e-320, np.float64), (1e-40, np.float32)):
        x = np.array([-tiny, -0.0, 0.0, tiny, 2 * tiny, 1.0], dtype)[perm]
        assert x[perm.argsort()][3] != 0  # a subnormal of this dtype
        np.testing.assert_allclose(_reference(x, y, w), expected, atol=EXACT)
        np.testing.assert_allclose(_native(x, y.astype(dtype), w.astype(dtype)), expected)
        np.testing.assert_allclose(_portable(x, y.astype(dtype), w.astype(dtype)), expected)
    # scikit-learn ties scores less than 1e-15 apart, so it sees the signed zeros only
    x = np.array([-0.5, -0.0, 0.0, 0.25, 0.5, 1.0])[perm]
    np.testing.assert_allclose(_sklearn(x, y, w), expected, atol=EXACT)
    np.testing.assert_allclose(_native(x, y, w), expected, atol=EXACT)


_SHARDED = """
import os
import jax, numpy as np
jax.config.update("jax_enable_x64", True)
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from sklearn.isotonic import IsotonicRegression
from jaxcal.fitting.isotonic import isotonic_regression_in_program
assert len(jax.devices()) == 4
rng = np.random.default_rng(0)
x, y = rng.normal(size=(8, 500)), rng.uniform(size=(8, 500))
mesh = Mesh(np.array(jax.devices()), ("d",))
rows = NamedSharding(mesh, P("d", None))
solve = jax.vmap(lambda a, b: isotonic_regression_in_program(a, b))
f = jax.jit(jax.shard_map(solve, mesh=mesh, in_specs=(P("d"), P("d")), out_specs=P("d")))
xs, ys = jax.device_put(x, rows), jax.device_put(y, rows)
hlo = f.lower(xs, ys).compile().as_text()
native = os.environ.get("JAXCAL_NATIVE") != "0"
assert ("jaxcal_pav_cpu" in hlo) == native, "kernel missing"
assert "all-gather" not in hlo, "rows gathered"
out = f(xs, ys)
assert out.sharding.is_equivalent_to(rows, 2)
ref = np.stack([IsotonicRegression().fit(a, b).predict(a) for a, b in zip(x, y)])
assert np.abs(np.asarray(out) - ref).max() < 1e-9
print("OK")
"""


@pytest.mark.parametrize("path", ["native", "portable"])
def test_rows_under_shard_map_on_four_devices(path):
    """Rows of problems sharded over 4 CPU devices with ``shard_map``: each device solves
    its own rows (no all-gather in the compiled program), equal to sklearn, with the kernel
    and with the merge tree (whose loop carries must vary over the mesh axis like the
    data); the first use of the kernel is inside the trace (the self-test still runs)."""
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4")
    env["JAX_PLATFORMS"] = "cpu"
    env[ENV] = "0" if path == "portable" else "1"
    out = subprocess.run(
        [sys.executable, "-c", _SHARDED], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("OK")


@pytest.mark.parametrize("n", [1, 7, 300, 20_000])
def test_runs_equal_the_merge_tree_runs(n):
    """The run-level kernel (a calibrator's knots) against the merge tree's runs: the same
    distinct scores, run weights, fitted values and block starts; and the knots of both
    paths (thresholds, CIR centres, decreasing maps) are equal."""
    rng = np.random.default_rng(n)
    x = np.round(rng.normal(size=n), 2)
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-2 * x))).astype(float)
    w = rng.uniform(0.1, 3.0, n)
    run_x, run_w, run_v, start, k = jax.jit(pav_runs_cpu)(x, y, w)
    ref = jax.jit(pav)(x, y, w)
    k = int(k)
    assert k == int(ref.n_runs) == np.unique(x).size
    np.testing.assert_array_equal(np.asarray(run_x)[:k], np.unique(x))
    np.testing.assert_allclose(np.asarray(run_w)[:k], np.asarray(ref.run_weight)[:k])
    np.testing.assert_allclose(np.asarray(run_v)[:k], np.asarray(ref.run_value)[:k], atol=EXACT)
    np.testing.assert_array_equal(np.asarray(start)[:k], np.asarray(ref.block_start)[:k])
    for kw in ({}, {"centred": True}, {"increasing": False}):
        native = isotonic_knots(x, y, w, **kw)
        os.environ[ENV] = "0"
        try:
            portable = isotonic_knots(x, y, w, **kw)
        finally:
            os.environ.pop(ENV)
        for a, b in zip(native, portable, strict=True):
            np.testing.assert_allclose(a, b, atol=EXACT)


def test_knots_ignore_zero_weight_points():
    """As in scikit-learn, zero-weight points add no knots (so both paths agree)."""
    rng = np.random.default_rng(11)
    x, y = rng.normal(size=200), rng.uniform(size=200)
    w = np.where(rng.uniform(size=200) < 0.3, 0.0, 1.0)
    u, v = isotonic_knots(x, y, w)
    u_ref, v_ref = isotonic_knots(x[w > 0], y[w > 0], w[w > 0])
    np.testing.assert_array_equal(u, u_ref)
    np.testing.assert_allclose(v, v_ref, atol=EXACT)
    ir = IsotonicRegression(out_of_bounds="clip").fit(x, y, sample_weight=w)
    np.testing.assert_allclose(np.interp(x, u, v), ir.predict(x), atol=EXACT)


def test_kernel_bounds_of_each_shape_zero_weights_and_weight_scale():
    """The kernel takes bounds per call, per problem (``[B, 1]``) or per point, clips the
    block means and interpolates the clipped values at zero-weight points (scikit-learn's
    fit + transform per row); weights scaled by 2**+-1000 give the same bits."""
    rng = np.random.default_rng(12)
    B, n = 3, 40
    x = np.round(rng.normal(size=(B, n)), 1)
    y = (rng.uniform(size=(B, n)) < 1 / (1 + np.exp(-2 * x))).astype(float)
    w = rng.uniform(0.1, 3.0, (B, n))
    w[rng.uniform(size=(B, n)) < 0.25] = 0.0
    w[:, 0] = 1.0
    f = jax.jit(pav_fitted_cpu)
    rows_lo, rows_hi = np.array([[0.1], [0.3], [-1.0]]), np.array([[0.9], [0.6], [0.5]])
    for lo, hi in ((0.2, 0.8), (rows_lo, rows_hi), (np.broadcast_to(rows_lo, (B, n)), None)):
        out = np.asarray(f(x, y, w, None, lo, hi))
        for b in range(B):
            lo_b = np.broadcast_to(np.asarray(lo), (B, 1) if np.ndim(lo) < 2 else (B, n))[b, 0]
            hi_b = np.inf if hi is None else np.broadcast_to(np.asarray(hi), (B, 1))[b, 0]
            ir = IsotonicRegression(y_min=lo_b, y_max=hi_b, out_of_bounds="clip")
            ref = ir.fit(x[b], y[b], sample_weight=w[b]).transform(x[b])
            np.testing.assert_allclose(out[b], ref, rtol=0, atol=EXACT)
    plain = np.asarray(f(x, y, w))
    for scale in (2.0**-1000, 2.0**1000):
        np.testing.assert_array_equal(np.asarray(f(x, y, w * scale)), plain)
