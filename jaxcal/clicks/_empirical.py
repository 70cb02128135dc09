r"""The attractiveness prior learned from the log (``fit(..., prior="empirical")``).

In every model of :mod:`jaxcal.clicks` a click at rank :math:`r` is an examined, attractive
result, and the conditional click probability is linear in the result's attractiveness:
:math:`P(C_r = 1 \mid C_{<r}) = e_r \, \alpha_{qd}`, with :math:`e_r` the probability that
rank :math:`r` is examined given the clicks above (:math:`\gamma_r` in PBM, the examination
recursion :math:`\epsilon_r` in the cascade models). The evidence of pair :math:`i` is its
clicks :math:`c_i = \sum_j w_j c_{ij}` against its expected examinations
:math:`n_i = \sum_j w_j e_{ij}` (:func:`pair_evidence`).

Clicks are rare events of rate :math:`\alpha_i` per examination, so the prior is fitted as in
Gamma-Poisson empirical Bayes: :math:`c_i \sim \mathrm{Poisson}(\alpha_i n_i)`,
:math:`\alpha_i \sim \mathrm{Gamma}(a, b)` (shape :math:`a`, rate :math:`b`), whose marginal
likelihood is closed form (negative binomial),

.. math::

    \log L(a, b) = \sum_i \log\Gamma(a + c_i) - \log\Gamma(a) + a \log b - (a + c_i) \log(b + n_i)

(up to terms free of :math:`a, b`; a pair with no examination adds 0), and whose posterior
mean :math:`(a + c_i) / (b + n_i)` has exactly the form of the M-step: :math:`(a, b)` are
the pseudo-counts ``(numerator, denominator)`` of the attractiveness table, and unseen pairs
predict :math:`a / b`. :func:`learned_prior` maximises :math:`\log L` by Newton's method
in :math:`(\log a, \log b)` (exact derivatives by ``jax.grad`` / ``jax.hessian``, steps
halved until :math:`\log L` does not fall), inside :math:`[10^{-3}, 10^{7}]` for both.
Without overdispersion (every pair the same rate) the maximum lies at infinity at a fixed
mean; the fit then stops at the bound, a prior that pins every pair near the pooled rate.

(The E-step's expected counts are not a usable evidence: they are fractional and already
pulled towards the current estimates, so they look less dispersed than any binomial sample
and drive a Beta-binomial marginal likelihood to a point mass: measured on the TianGong-ST
log. The clicks are observed; only the examination counts depend on the model.)

``fit`` alternates EM and this fit :data:`ROUNDS` times (:mod:`jaxcal.clicks._base`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from jaxcal import distributed
from jaxcal._jit import jit
from jaxcal.clicks._em import Batch

__all__ = ["pair_evidence", "learned_prior", "ROUNDS", "TABLE", "BOUNDS"]

#: EM fits alternated with the prior's fit (the first uses the default prior)
ROUNDS = 2
#: the table whose prior is learned
TABLE = "alpha"


@partial(jit, static_argnames=("fn", "n_pairs"))
def _evidence(fn: Callable, params: dict, batch: Batch, *, n_pairs: int) -> jax.Array:
    """``[n_pairs, 2]``: weighted clicks and examinations (``P(C_r=1|C_<r) / alpha``) by
    pair id."""
    probs = fn(params, batch.qd, batch.clicks, batch.mask)
    theta = params[TABLE][batch.qd]
    w = jnp.where(batch.mask, batch.weight[:, None], 0.0)
    rows = jnp.stack([w * batch.clicks, w * probs / theta], axis=-1).reshape(-1, 2)
    return jax.ops.segment_sum(rows, batch.qd.reshape(-1), num_segments=n_pairs)


def pair_evidence(fn: Callable, params: dict, batches: Iterable[Batch]) -> np.ndarray:
    """``[table, 2]`` clicks and effective trials of every pair, summed over ``batches`` (a
    log's batches on this process) and across processes."""
    n_pairs = params[TABLE].shape[0]
    total = None
    for batch in batches:
        part = _evidence(fn, params, batch, n_pairs=n_pairs)
        total = part if total is None else total + part
    return distributed.process_sum(np.asarray(total))


#: the range of both pseudo-counts of a learned prior
BOUNDS = (1e-3, 1e7)


def _neg_binomial_log_marginal(z: jax.Array, c: jax.Array, n: jax.Array) -> jax.Array:
    a, b = jnp.exp(z[0]), jnp.exp(z[1])
    terms = gammaln(a + c) - gammaln(a) + a * jnp.log(b) - (a + c) * jnp.log(b + n)
    return jnp.sum(jnp.where(n > 0, terms, 0.0))


@jit
def _value(z: jax.Array, c: jax.Array, n: jax.Array) -> jax.Array:
    return _neg_binomial_log_marginal(z, c, n)


@jit
def _derivatives(z: jax.Array, c: jax.Array, n: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Gradient and Hessian of the log marginal likelihood in ``(log a, log b)``."""
    grad = jax.grad(_neg_binomial_log_marginal)(z, c, n)
    return grad, jax.hessian(_neg_binomial_log_marginal)(z, c, n)


def learned_prior(evidence: np.ndarray, n_pairs: int, init: np.ndarray) -> np.ndarray:
    """``[2]`` pseudo-counts ``(a, b)`` of the attractiveness prior (module docstring) from
    the first ``n_pairs`` rows of :func:`pair_evidence` (the padding and unseen slots
    excluded); ``init`` when no pair was examined."""
    c = np.asarray(evidence[:n_pairs, 0], np.float64)
    n = np.asarray(evidence[:n_pairs, 1], np.float64)
    if not np.any(n > 0):
        return np.asarray(init, np.float64)
    lo, hi = np.log(BOUNDS[0]), np.log(BOUNDS[1])
    mean = max(c.sum() / n.sum(), 1e-6)
    z = np.array([0.0, -np.log(mean)])  # a = 1 at the pooled mean
    dtype = jax.dtypes.canonicalize_dtype(np.float64)
    c, n = c.astype(dtype), n.astype(dtype)
    value = float(_value(z.astype(dtype), c, n))
    for _ in range(100):
        g, h = (np.asarray(d, np.float64) for d in _derivatives(z.astype(dtype), c, n))
        shift = max(0.0, np.max(np.linalg.eigvalsh(h))) + 1e-9  # ascent: h negative definite
        step = np.linalg.solve(h - shift * np.eye(2), -g)
        for _ in range(40):
            new = np.clip(z + step, lo, hi)
            new_value = float(_value(new.astype(dtype), c, n))
            if new_value >= value - 1e-12 * abs(value):
                break
            step = step / 2
        moved = np.max(np.abs(new - z))
        z, value = new, new_value
        if moved < 1e-9:
            break
    return np.exp(z)
