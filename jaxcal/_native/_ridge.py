"""The ridge kernel (``ridge_cpu.cc``): the per-row ridge systems of an ALS half-step
(``jaxcal.recsys.CMTRF``). :func:`ridge_rows_cpu` accumulates each row's Gram matrix and
right-hand side over its pairs (sorted by row, CSR offsets) in double precision and solves
by Cholesky, where the pure-JAX half-step scatters per-pair outer products
(``segment_sum``), slow on XLA's CPU backend. Leading batch dimensions are problems
(``vmap`` passes the shared index arrays once, not copied per problem), split over the
calling thread and XLA's intra-op thread pool. :func:`pair_scores_cpu` (same library)
returns the scores ``a[row] . b[col]`` of pairs, which XLA's CPU backend would gather row
by row.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxcal._jit import jit
from jaxcal._native._loader import Kernel, require
from jaxcal._vma import varying_like

__all__ = ["KERNEL", "pair_scores_cpu", "ridge_rows_cpu"]

_RIDGE_TARGET = "jaxcal_ridge_cpu"
_PAIR_SCORES_TARGET = "jaxcal_pair_scores_cpu"


def _ridge_self_test() -> bool:
    r"""Two problems (``l2`` = 1 and 2) sharing their index arrays, against the closed
    form: row 0 has two pairs :math:`f = (1, 0)`, so
    :math:`(\mathrm{diag}(2, 0) + \lambda I)\, x = (2, 0) + e_0`; row 1 has none:
    :math:`x = e_1 / \lambda`; row 2 has :math:`f = (1, 1)` with :math:`c = r = 2` and a
    zero-weight pair: :math:`(2 J + \lambda I)\, x = (2, 2)`, :math:`x = 2 / (4 + \lambda)
    (1, 1)`. The pair scores of ``other`` with itself at pairs (2, 0) and (1, 2): 1 and 1."""
    other = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], np.float32)
    col = np.array([0, 0, 2, 1], np.int32)
    row_start = np.array([0, 2, 2, 4], np.int32)
    c = np.array([1.0, 1.0, 2.0, 0.0], np.float32)
    r = np.array([1.0, 1.0, 2.0, 0.0], np.float32)
    extra = np.array([[1.0, 1.0], [3.0, -1.0], [0.0, 0.0]], np.float32)
    l2 = np.array([1.0, 2.0], np.float32)
    expected = [
        [[1.0, 1.0], [3.0, -1.0], [0.4, 0.4]],
        [[0.75, 0.5], [1.5, -0.5], [1.0 / 3.0, 1.0 / 3.0]],
    ]

    cpu = jax.devices("cpu")[0]
    args = [jax.device_put(a, cpu) for a in (other, col, row_start, c, r, extra, l2)]
    x = jax.jit(jax.vmap(ridge_rows_cpu, in_axes=(None,) * 6 + (0,)))(*args)
    ids = jax.device_put(np.array([[2, 1], [0, 2]], np.int32), cpu)
    s = jit(pair_scores_cpu)(args[0], args[0], ids[0], ids[1])
    ok = np.allclose(np.asarray(x), expected, rtol=1e-6, atol=1e-6)
    return ok and np.allclose(np.asarray(s), [1.0, 1.0])


KERNEL = Kernel(
    name="ridge",
    targets=((_RIDGE_TARGET, "JaxcalRidgeCpu"), (_PAIR_SCORES_TARGET, "JaxcalPairScoresCpu")),
    self_test=_ridge_self_test,
    fallback="jaxcal.recsys._cmtrf_als's pure-JAX path",
)


def ridge_rows_cpu(other, col, row_start, c, r, extra, l2) -> jax.Array:
    r"""Every row's ridge solution from the compiled CPU kernel (double precision inside).
    Traceable; CPU programs only.

    Row :math:`n` of a problem solves :math:`\big(\sum_j c_j f_j f_j^\top + \lambda
    I\big)\, x_n = \sum_j r_j f_j + e_n` over its pairs ``j`` in ``row_start[n] ..
    row_start[n + 1] - 1``, with :math:`f_j` = ``other[col[j]]``; a row without pairs gets
    :math:`e_n / \lambda`, one whose matrix is not positive definite NaN.

    Args:
        other: ``[..., m, k]`` float32 or float64 features of the columns.
        col: ``[..., P]`` int32 column of each pair (the pairs sorted by row).
        row_start: ``[..., n + 1]`` int32 CSR offsets of the rows' pairs.
        c: ``[..., P]`` pair weights of the Gram matrices, ``other``'s dtype.
        r: ``[..., P]`` pair weights of the right-hand sides.
        extra: ``[..., n, k]`` added to the right-hand sides.
        l2: ``[...]`` ridge :math:`\lambda`, one per problem.

    Returns:
        ``[..., n, k]`` solutions. Leading dimensions broadcast (each operand's are the
        result's or 1; ``vmap`` does not copy unbatched operands).

    Raises:
        RuntimeError: if the kernel is not available (see :func:`ridge_cpu_available`).
    """
    require(KERNEL)
    dtype = jnp.result_type(other)
    other, c, r, extra = (jnp.asarray(a, dtype) for a in (other, c, r, extra))
    l2 = jnp.asarray(l2, dtype)[..., None]
    col, row_start = (jnp.asarray(a, jnp.int32) for a in (col, row_start))
    n, k = row_start.shape[-1] - 1, other.shape[-1]
    cores = ((other, 2), (col, 1), (row_start, 1), (c, 1), (r, 1), (extra, 2), (l2, 1))
    return _batched_call(_RIDGE_TARGET, cores, (n, k), dtype)


def pair_scores_cpu(a, b, row, col) -> jax.Array:
    """The scores ``a[row[j]] . b[col[j]]`` of pairs, from the compiled CPU kernel (double
    accumulation). Traceable; CPU programs only.

    Args:
        a: ``[..., n, k]`` float32 or float64 row factors.
        b: ``[..., m, k]`` column factors, same dtype.
        row: ``[..., P]`` int32 row of each pair (in ``[0, n)``).
        col: ``[..., P]`` int32 column of each pair (in ``[0, m)``).

    Returns:
        ``[..., P]`` scores; leading dimensions broadcast as in :func:`ridge_rows_cpu`.

    Raises:
        RuntimeError: if the kernel is not available (see :func:`ridge_cpu_available`).
    """
    require(KERNEL)
    dtype = jnp.result_type(a)
    a, b = (jnp.asarray(v, dtype) for v in (a, b))
    row, col = (jnp.asarray(v, jnp.int32) for v in (row, col))
    cores = ((a, 2), (b, 2), (row, 1), (col, 1))
    return _batched_call(_PAIR_SCORES_TARGET, cores, row.shape[-1:], dtype)


def _batched_call(target: str, cores, core_shape: tuple, dtype) -> jax.Array:
    """Call ``target`` on ``(operand, core rank)`` pairs whose leading (batch) dimensions
    broadcast: each gets the batch rank with 1s in front (``vmap`` adds its axes the same
    way, ``expand_dims``, so unbatched operands are not copied)."""
    batch = jnp.broadcast_shapes(*(a.shape[: a.ndim - rank] for a, rank in cores))
    args = [a.reshape((1,) * (len(batch) - a.ndim + rank) + a.shape) for a, rank in cores]
    out = jax.ShapeDtypeStruct((*batch, *core_shape), dtype)
    call = jax.ffi.ffi_call(target, out, vmap_method="expand_dims")
    return varying_like(call(*args), *args)
