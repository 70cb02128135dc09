"""The pieces of the sufficient statistics: weighted sums by pair id / rank, the
log-likelihood of a chain model, and the M-step."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxcal.clicks._em import prior_of, ratio

__all__ = [
    "by_pair",
    "by_rank",
    "chain_loglik",
    "mstep_ratios",
    "pair_sums",
    "session_weights",
]


def session_weights(batch) -> jax.Array:
    """``[S, n]`` weight of each (session, rank): the session weight on real results, else 0."""
    return jnp.where(batch.mask, batch.weight[:, None], 0.0)


def by_pair(values: jax.Array, qd: jax.Array, n_pairs: int) -> jax.Array:
    """``segment_sum`` of ``[S, n]`` values by query-document id (``n_pairs`` segments)."""
    return jax.ops.segment_sum(values.reshape(-1), qd.reshape(-1), num_segments=n_pairs)


def by_rank(values: jax.Array) -> jax.Array:
    """Sum of ``[S, n]`` values over sessions: ``[n]``."""
    return jnp.sum(values, axis=0)


def pair_sums(rows: list[jax.Array], qd: jax.Array, n_pairs: int) -> jax.Array:
    """Sums of ``k`` same-shape arrays by query-document id in one ``segment_sum``:
    ``[n_pairs, k]`` (column ``j`` sums ``rows[j]``)."""
    stacked = jnp.stack(rows, axis=-1).reshape(-1, len(rows))
    return jax.ops.segment_sum(stacked, qd.reshape(-1), num_segments=n_pairs)


def chain_loglik(w: jax.Array, cond: jax.Array, clicks: jax.Array, mask: jax.Array) -> jax.Array:
    """Weighted log-likelihood ``sum w log P(C_r = c_r | C_<r)`` from the conditional click
    probabilities ``cond`` (masked entries add nothing)."""
    q = jnp.where(clicks > 0, cond, jnp.where(mask, 1.0 - cond, 1.0))
    return jnp.sum(w * jnp.log(q))


def mstep_ratios(stats: dict, prior: jax.Array) -> dict:
    """M-step of every model: ``{name: (num, den)} -> {name: (a + num) / (b + den)}``, with
    each parameter's pseudo-counts ``(a, b)`` (:func:`jaxcal.clicks._em.prior_of`)."""
    return {k: ratio(num, den, prior_of(prior, k)) for k, (num, den) in stats.items()}
