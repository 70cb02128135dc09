"""Small helpers for sufficient statistics: weighted sums by pair id / rank, and the M-step."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxcal.clicks._em import ratio

__all__ = ["by_pair", "by_rank", "mstep_ratios", "session_weights"]


def session_weights(batch) -> jax.Array:
    """``[S, n]`` weight of each (session, rank): the session weight on real results, else 0."""
    return jnp.where(batch.mask, batch.weight[:, None], 0.0)


def by_pair(values: jax.Array, qd: jax.Array, n_pairs: int) -> jax.Array:
    """``segment_sum`` of ``[S, n]`` values by query-document id (``n_pairs`` segments)."""
    return jax.ops.segment_sum(values.reshape(-1), qd.reshape(-1), num_segments=n_pairs)


def by_rank(values: jax.Array) -> jax.Array:
    """Sum of ``[S, n]`` values over sessions: ``[n]``."""
    return jnp.sum(values, axis=0)


def mstep_ratios(stats: dict, prior: jax.Array) -> dict:
    """M-step of every model: ``{name: (num, den)} -> {name: (a + num) / (b + den)}``."""
    return {k: ratio(num, den, prior) for k, (num, den) in stats.items()}
