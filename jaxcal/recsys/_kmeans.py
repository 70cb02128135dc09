"""k-means over weighted points (CMTRF clusters its users' transforms with it): k-means++
seeding and Lloyd's iterations, pure functions of arrays (jittable, ``vmap``-able)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

__all__ = ["kmeans_plus_plus", "kmeans"]


def _sq_distances(x: jax.Array, centres: jax.Array) -> jax.Array:
    return jnp.sum((x[:, None, :] - centres[None, :, :]) ** 2, axis=-1)


def kmeans_plus_plus(key: jax.Array, x: jax.Array, weight: jax.Array, k: int) -> jax.Array:
    """k-means++ centres (Arthur and Vassilvitskii 2007): the first drawn by ``weight``, each
    next one with probability proportional to ``weight`` times the squared distance to the
    nearest centre so far. ``[k, dim]``."""
    keys = jax.random.split(key, k)
    logw = jnp.log(jnp.where(weight > 0, weight, 0.0))
    first = jax.random.categorical(keys[0], logw)
    centres = jnp.broadcast_to(x[first], (k, x.shape[1]))

    def body(j, centres):
        d2 = jnp.min(jnp.where(jnp.arange(k)[None, :] < j, _sq_distances(x, centres), jnp.inf), 1)
        logits = logw + jnp.log(jnp.maximum(d2, 0.0))
        logits = jnp.where(jnp.all(jnp.isneginf(logits)), logw, logits)  # all points covered
        return centres.at[j].set(x[jax.random.categorical(keys[j], logits)])

    return lax.fori_loop(1, k, body, centres)


def kmeans(x: jax.Array, weight: jax.Array, centres: jax.Array, n_iters: int = 100):
    """Lloyd's k-means from ``centres`` until the centres stop moving (or ``n_iters``); an
    empty cluster keeps its centre. Returns ``(centres [k, dim], labels [n])``."""
    k = centres.shape[0]

    def step(centres):
        labels = jnp.argmin(_sq_distances(x, centres), axis=1)
        mass = jax.ops.segment_sum(weight, labels, num_segments=k)
        sums = jax.ops.segment_sum(weight[:, None] * x, labels, num_segments=k)
        return jnp.where(mass[:, None] > 0, sums / jnp.where(mass > 0, mass, 1)[:, None], centres)

    def cond(carry):
        i, old, new = carry
        return (i < n_iters) & jnp.any(old != new)

    def body(carry):
        i, _, new = carry
        return i + 1, new, step(new)

    _, _, centres = lax.while_loop(cond, body, (1, centres, step(centres)))
    return centres, jnp.argmin(_sq_distances(x, centres), axis=1).astype(jnp.int32)
