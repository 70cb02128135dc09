"""Building blocks of the metrics' traced paths (inside a caller's ``jit``, ``vmap``,
``grad`` or ``jax.export``): what the eager shell does in NumPy, in JAX with fixed shapes.

* :func:`quantile_edges`: ``np.quantile``'s edges (linear method) of sorted values, also of
  a run of them whose start and length are traced (one group of ``gc_n``).
* :func:`dense_ranks`: ``np.unique(x, return_inverse=True)`` with the number of distinct
  values traced: codes ``0..K-1`` in ``[n]`` slots.
* :func:`run_starts`: the first position of each run of equal sorted values, compacted to
  the front of ``[n]`` slots (``np.unique(..., return_index=True)``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["quantile_edges", "dense_ranks", "run_starts"]


def quantile_edges(sorted_values: jax.Array, n_bins: int, *, count=None, start=0) -> jax.Array:
    """``bin_edges(strategy="quantile")`` of ``sorted_values[start:start + count]`` (all of
    them by default): ``np.quantile``'s linear interpolation between order statistics (its
    rounding: ``b - (b - a)(1 - g)`` for ``g >= 0.5``), outer edges 0 and 1, made
    non-decreasing. ``count`` and ``start`` may be traced; a run of length 0 gives
    meaningless edges (no value uses them)."""
    dtype = sorted_values.dtype
    size = sorted_values.shape[0]
    count = size if count is None else count
    q = np.linspace(0.0, 1.0, int(n_bins) + 1)
    virtual = (jnp.asarray(count, dtype) - 1) * jnp.asarray(q, dtype)
    prev = jnp.floor(virtual)
    gamma = virtual - prev
    lo = jnp.clip(prev.astype(jnp.int32), 0, jnp.maximum(count - 1, 0))
    hi = jnp.clip(lo + 1, 0, jnp.maximum(count - 1, 0))
    a = sorted_values[jnp.clip(start + lo, 0, size - 1)]
    b = sorted_values[jnp.clip(start + hi, 0, size - 1)]
    diff = b - a
    edges = jnp.where(gamma >= 0.5, b - diff * (1 - gamma), a + diff * gamma)
    edges = edges.at[0].set(0.0).at[-1].set(1.0)
    return jax.lax.cummax(edges)


def dense_ranks(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(codes, k)``: each entry's rank among the ``k`` distinct values of ``x`` (``[n]``,
    ``0..k-1`` in increasing order of value, as ``np.unique``'s inverse), ``k`` traced."""
    order = jnp.argsort(x, stable=True)
    s = x[order]
    new = jnp.concatenate([jnp.zeros((1,), jnp.int32), (s[1:] != s[:-1]).astype(jnp.int32)])
    rank = jnp.cumsum(new)
    codes = jnp.zeros(x.shape[0], jnp.int32).at[order].set(rank)
    return codes, rank[-1] + 1


def run_starts(sorted_values: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(starts, k)``: the positions where the ``k`` runs of equal values of
    ``sorted_values`` begin, in the first ``k`` of ``[n]`` slots (the others 0)."""
    n = sorted_values.shape[0]
    new = jnp.concatenate([jnp.ones((1,), bool), sorted_values[1:] != sorted_values[:-1]])
    (starts,) = jnp.nonzero(new, size=n, fill_value=0)
    return starts.astype(jnp.int32), jnp.sum(new, dtype=jnp.int32)
