"""The compiled per-row ridge kernel (``jaxcal._native.ridge_rows_cpu``, ``ridge_cpu.cc``)
against numpy's per-row closed form, its pair scores (``pair_scores_cpu``) against numpy's
row-wise dot products, and CMTRF's kernel path against its ``segment_sum`` path (what
``JAXCAL_NATIVE=0`` and GPU / TPU programs run).

Oracle: for each row, ``numpy.linalg.solve(F^T C F + l2 I, F^T r + e)`` in float64 over the
row's pairs. Tolerances: 1e-10 in float64; float32 inputs are accumulated and solved in
double inside the kernel, so they are compared with the float64 solution of the same
float32 data at float32 resolution (1e-5 relative to the solution's scale).
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcal import _native
from jaxcal.data import Interactions
from jaxcal.recsys import CMTRF, CMTRFSolver, Search
from jaxcal.recsys import _cmtrf_core as core

F64 = 1e-10
F32 = 1e-5

if not _native.ridge_cpu_available():
    if os.environ.get("JAXCAL_REQUIRE_NATIVE") == "1":  # set by .ci/run
        raise RuntimeError("the compiled ridge kernel was not built (see setup.py)")
    pytest.skip("compiled ridge kernel not built", allow_module_level=True)

ridge = jax.jit(_native.ridge_rows_cpu)


def _problem(seed, n=7, m=9, k=3, long_row=0, dtype=np.float64):
    """Pairs sorted by row (rows 1 and n - 1 empty; row 0 gets ``long_row`` extra pairs, to
    span several of the kernel's blocks of 128), positive ``c``, random ``r`` and ``extra``."""
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, n, 4 * n)
    rows = np.concatenate([rows[(rows != 1) & (rows != n - 1)], np.zeros(long_row, int)])
    rows = np.sort(rows)
    col = rng.integers(0, m, rows.size).astype(np.int32)
    row_start = np.searchsorted(rows, np.arange(n + 1)).astype(np.int32)
    other = rng.normal(size=(m, k)).astype(dtype)
    c = rng.uniform(0.1, 2.0, rows.size).astype(dtype)
    r = rng.normal(size=rows.size).astype(dtype)
    extra = rng.normal(size=(n, k)).astype(dtype)
    return other, col, row_start, c, r, extra


def _closed_form(other, col, row_start, c, r, extra, l2):
    other, c, r, extra = (np.asarray(a, np.float64) for a in (other, c, r, extra))
    n, k = extra.shape
    out = np.empty((n, k))
    for i in range(n):
        j = slice(row_start[i], row_start[i + 1])
        f = other[col[j]]
        gram = f.T @ (c[j, None] * f) + l2 * np.eye(k)
        out[i] = np.linalg.solve(gram, f.T @ r[j] + extra[i])
    return out


@pytest.mark.parametrize("k", [1, 3, 10, 20])  # 20: the generic (run-time rank) path
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_kernel_is_the_per_row_closed_form(k, dtype):
    args = _problem(k, k=k, long_row=300, dtype=dtype)
    got = np.asarray(ridge(*args, dtype(0.7)))
    assert got.dtype == dtype
    want = _closed_form(*args, 0.7)
    scale = np.max(np.abs(want))
    np.testing.assert_allclose(
        got, want, rtol=0, atol=(F64 if dtype == np.float64 else F32) * scale
    )
    # the empty rows: extra / l2
    np.testing.assert_allclose(
        got[[1, -1]], np.asarray(args[5], np.float64)[[1, -1]] / 0.7, rtol=F32
    )


def test_vmap_shares_the_index_arrays_and_equals_a_loop():
    """A grid of problems (factors, right-hand sides and penalties batched; the index arrays
    and ``c`` shared, passed once: ``vmap_method="expand_dims"``) equals the loop."""
    other, col, row_start, c, r, extra = _problem(3, k=4, long_row=40)
    rng = np.random.default_rng(4)
    others = other + 0.1 * rng.normal(size=(5, *other.shape))
    rs = r + rng.normal(size=(5, r.size))
    l2 = np.linspace(0.2, 3.0, 5)
    f = jax.jit(jax.vmap(_native.ridge_rows_cpu, in_axes=(0, None, None, None, 0, None, 0)))
    got = np.asarray(f(others, col, row_start, c, rs, extra, l2))
    for b in range(5):
        want = _closed_form(others[b], col, row_start, c, rs[b], extra, l2[b])
        np.testing.assert_allclose(got[b], want, rtol=0, atol=F64)
    text = f.lower(others, col, row_start, c, rs, extra, l2).as_text()
    assert "jaxcal_ridge_cpu" in text
    # direct call with broadcast leading dimensions: [2, 1] x [1, 3] problems
    ob = np.stack([others[:3], others[1:4]])  # [2, 3, m, k]
    direct = np.asarray(ridge(ob, col, row_start, c, rs[None, :3], extra, l2[None, :3]))
    assert direct.shape == (2, 3, *extra.shape)
    for a in range(2):
        for b in range(3):
            want = _closed_form(ob[a, b], col, row_start, c, rs[b], extra, l2[b])
            np.testing.assert_allclose(direct[a, b], want, rtol=0, atol=F64)


def test_not_positive_definite_rows_are_nan_and_bad_indices_raise():
    other, col, row_start, c, r, extra = _problem(5)
    got = np.asarray(ridge(other, col, row_start, -c, r, extra, -0.5))
    assert np.all(np.isnan(got))  # -(F^T C F) - 0.5 I is negative definite
    with pytest.raises(Exception, match="col out of"):
        jax.block_until_ready(ridge(other, col + 100, row_start, c, r, extra, 1.0))
    with pytest.raises(Exception, match="row_start"):
        jax.block_until_ready(ridge(other, col, row_start[::-1], c, r, extra, 1.0))


@pytest.mark.parametrize("k", [3, 20])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_pair_scores_are_the_row_dot_products(k, dtype):
    rng = np.random.default_rng(k)
    a, b = rng.normal(size=(2, 6, k)).astype(dtype), rng.normal(size=(7, k)).astype(dtype)
    row, col = rng.integers(0, 6, 50).astype(np.int32), rng.integers(0, 7, 50).astype(np.int32)
    f = jax.jit(jax.vmap(_native.pair_scores_cpu, in_axes=(0, None, None, None)))
    got = np.asarray(f(a, b, row, col))
    assert got.dtype == dtype
    want = np.einsum("bpk,pk->bp", a[:, row].astype(float), b[col].astype(float))
    np.testing.assert_allclose(got, want, rtol=0, atol=F64 if dtype == np.float64 else F32 * k)
    with pytest.raises(Exception, match="out of range"):
        jax.block_until_ready(jax.jit(_native.pair_scores_cpu)(a[0], b, row, col + 7))


def _half_problem(seed, n=8, m=11, k=3):
    rng = np.random.default_rng(seed)
    mask = rng.random((n, m)) < 0.5
    mask[3] = False  # a row without ratings
    rows, cols = np.nonzero(mask)  # sorted by row
    pairs = core.Pairs(
        jnp.asarray(np.append(rows, n - 1), jnp.int32),  # a padding pair (weight 0) at the end
        jnp.asarray(np.append(cols, 0), jnp.int32),
        jnp.zeros(rows.size + 1, jnp.int32),
        jnp.asarray(np.append(np.ones(rows.size), 0.0)),
    )
    other = jnp.asarray(rng.normal(size=(m, k)) * 0.5)
    offset = jnp.asarray(rng.normal(size=rows.size + 1) * 0.1)
    target = jnp.asarray(rng.uniform(0.5, 4.0, rows.size + 1))
    x0 = jnp.asarray(rng.normal(size=(n, k)) * 0.1)
    return x0, other, pairs, offset, target


@pytest.mark.parametrize("loss", ["squared", "poisson"])
def test_half_step_kernel_path_equals_the_segment_sum_path(loss):
    x0, other, pairs, offset, target = _half_problem(1)
    step = jax.jit(core.half_step, static_argnames=("loss", "n_newton", "native"))
    feats = other[pairs.col]
    a = step(x0, feats, offset, target, pairs, 0.6, loss=loss, native=True)
    b = step(x0, feats, offset, target, pairs, 0.6, loss=loss, native=False)
    np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-11)
    # the core's own entry (features gathered by the kernel from the other side's rows)
    inner = jax.jit(
        lambda x: core._half_step(
            x, other, pairs.col, offset, target, pairs, 0.6, loss=loss, n_newton=8, native=True
        )
    )
    np.testing.assert_allclose(inner(x0), b, rtol=1e-9, atol=1e-11)


def _ratings(seed=0, n_users=25, n_items=20):
    rng = np.random.default_rng(seed)
    dense = np.where(
        rng.random((n_users, n_items)) < 0.5, rng.integers(1, 6, (n_users, n_items)), 0
    )
    dense[:, 0] = rng.integers(1, 6, n_users)
    return Interactions.from_dense(dense)


@pytest.mark.parametrize(
    ("kwargs", "search", "solver"),
    [
        ({"transform": "global"}, {"l2_user": [0.5, 2.0]}, {}),
        ({"transform": "per_user", "biases": True, "objective": "poisson"}, {}, {"n_newton": 4}),
    ],
)
def test_fit_without_the_kernel_equals_the_kernel_fit(kwargs, search, solver, monkeypatch):
    data = _ratings()
    model = CMTRF(rank=2, max_iter=4, **kwargs)
    options = {"search": Search(**search), "solver": CMTRFSolver(dense=False, **solver)}
    kernel = model.fit(data, key=jax.random.key(0), **options)
    monkeypatch.setenv(_native.ENV, "0")
    assert not _native.ridge_cpu_available()
    portable = model.fit(data, key=jax.random.key(0), **options)
    for a, b in zip(jax.tree.leaves(kernel), jax.tree.leaves(portable), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-7, atol=1e-9)
