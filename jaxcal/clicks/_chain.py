"""Recursions over ranks shared by the cascade family (CM, DCM, DBN, SDBN, CCM).

All of these models are a two-state chain over the examination variable ``E_r``:
``E_1 = 1``; a result is clicked iff it is examined and attractive (``P(A_r) = alpha_r``);
after an examined rank the user goes on with probability ``kappa_r`` if it was clicked and
``nu_r`` if it was not; an unexamined rank is never followed by an examined one.

=========  ===========================================  ==============
model      ``kappa_r`` (after a click)                  ``nu_r``
=========  ===========================================  ==============
CM         0                                            1
DCM        ``lambda_r``                                 1
DBN        ``gamma (1 - sigma_r)``                      ``gamma``
SDBN       ``1 - sigma_r``                              1
CCM        ``(1 - alpha_r) tau_2 + alpha_r tau_3``      ``tau_1``
=========  ===========================================  ==============

Forward (examination given the clicks above, Chuklin et al. 2015, Ch. 3):
``eps_1 = 1``, ``eps_{r+1} = kappa_r`` if ``c_r = 1`` else
``eps_r (1 - alpha_r) nu_r / (1 - alpha_r eps_r)``; ``P(C_r = 1 | C_<r) = alpha_r eps_r``.
Backward: ``X_r = P(some click at ranks >= r | E_r = 1) = alpha_r + (1 - alpha_r) nu_r
X_{r+1}`` with ``X_{n+1} = 0``. Marginal: ``e_1 = 1``, ``e_{r+1} = e_r (alpha_r kappa_r +
(1 - alpha_r) nu_r)``, ``P(C_r = 1) = alpha_r e_r``.

Arrays are ``[S, n]``; padded ranks must carry ``alpha = 0`` so that they add nothing.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = [
    "safe_div",
    "posterior_ratio",
    "forward",
    "backward_rank_major",
    "marginal",
    "last_click",
    "bernoulli_loglik",
]


def safe_div(num: jax.Array, den: jax.Array) -> jax.Array:
    """``num / den`` where ``den > 0``, else 0 (only reached on zero-probability paths)."""
    ok = den > 0
    return jnp.where(ok, num / jnp.where(ok, den, 1.0), 0.0)


def posterior_ratio(num: jax.Array, den: jax.Array) -> jax.Array:
    """``num / den`` for posterior ratios, where ``0 <= num <= den``: a zero denominator
    (a path of probability 0, so ``num = 0`` too) gives 0. One ``max`` instead of
    :func:`safe_div`'s two selects; equal to it whenever ``den`` exceeds the smallest normal
    float."""
    return num / jnp.maximum(den, jnp.finfo(den.dtype).tiny)


def forward(alpha, kappa, nu, clicks) -> tuple[jax.Array, jax.Array]:
    """``(P(C_r = 1 | C_<r), eps_r = P(E_r = 1 | C_<r))``, both ``[S, n]``."""

    def step(eps, xs):
        a, k, v, c = xs
        nxt = jnp.where(c > 0, k, safe_div(eps * (1.0 - a) * v, 1.0 - a * eps))
        return nxt, (a * eps, eps)

    xs = tuple(jnp.swapaxes(x, 0, 1) for x in jnp.broadcast_arrays(alpha, kappa, nu, clicks))
    # carries derived from the data (not fresh constants) so that they are device-varying
    # under shard_map like the inputs
    _, (p, eps) = jax.lax.scan(step, jnp.ones_like(xs[0][0]), xs)
    return jnp.swapaxes(p, 0, 1), jnp.swapaxes(eps, 0, 1)


def backward_rank_major(alpha, nu, clicked) -> tuple[jax.Array, jax.Array]:
    """Backward scan on rank-major ``[n, S]`` arrays (``nu`` a scalar, ``clicked`` bool):
    ``(X_{r+1}, any click at ranks > r)`` for ``r = 1..n``, both ``[n, S]``
    (``X_{n+1} = 0``)."""

    def step(carry, xs):
        x_next, later = carry
        a, c = xs
        return (a + (1.0 - a) * nu * x_next, later | c), (x_next, later)

    init = (jnp.zeros_like(alpha[0]), jnp.zeros_like(clicked[0]))
    _, out = jax.lax.scan(step, init, (alpha, clicked), reverse=True)
    return out


def marginal(alpha, kappa, nu) -> jax.Array:
    """Unconditional ``P(C_r = 1)``, ``[S, n]``."""

    def step(e, xs):
        a, k, v = xs
        return e * (a * k + (1.0 - a) * v), a * e

    xs = tuple(jnp.swapaxes(x, 0, 1) for x in jnp.broadcast_arrays(alpha, kappa, nu))
    _, p = jax.lax.scan(step, jnp.ones_like(xs[0][0]), xs)
    return jnp.swapaxes(p, 0, 1)


def last_click(clicks: jax.Array) -> jax.Array:
    """1-based rank of the last click, 0 when there is none; ``[S, 1]``."""
    ranks = jnp.arange(1, clicks.shape[1] + 1)
    return jnp.max(jnp.where(clicks > 0, ranks, 0), axis=1, keepdims=True)


def bernoulli_loglik(p: jax.Array, clicks: jax.Array, mask: jax.Array) -> jax.Array:
    """``sum_r log P(C_r = c_r | ...)`` per session over unmasked ranks; ``[S]``."""
    q = jnp.where(clicks > 0, p, 1.0 - p)
    return jnp.sum(jnp.where(mask, jnp.log(jnp.where(mask, q, 1.0)), 0.0), axis=1)
