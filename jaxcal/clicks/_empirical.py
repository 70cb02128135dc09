r"""Priors learned from the log (``fit(..., prior="empirical")``).

**Attractiveness** (every model with an attractiveness table).

In every model of :mod:`jaxcal.clicks` a click at rank :math:`r` is an examined, attractive
result, and the conditional click probability is linear in the result's attractiveness:
:math:`P(C_r = 1 \mid C_{<r}) = e_r \, \alpha_{qd}`, with :math:`e_r` the probability that
rank :math:`r` is examined given the clicks above (:math:`\gamma_r` in PBM, the examination
recursion :math:`\epsilon_r` in the cascade models). The evidence of pair :math:`i` is its
clicks :math:`c_i = \sum_j w_j c_{ij}` against its expected examinations
:math:`n_i = \sum_j w_j e_{ij}` (:func:`evidence`).

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

**Satisfaction** (DBN, SDBN). A click at rank :math:`r` on pair :math:`i` is a trial of
the pair's satisfaction :math:`\sigma_i`: a later click shows the user was not satisfied
(likelihood :math:`1 - \sigma_i`); the last click of a session is explained by satisfaction
or by a continuation that found nothing, :math:`\sigma_i + (1 - \sigma_i)(1 - p)`, where
:math:`p` is the probability of a later click for a user who goes on (DBN:
:math:`\gamma X_{r+1}` from the backward recursion; SDBN: 1, its closed form's assumption),
computed by the model's ``_continuation_fn``. These are the exact factors of the observed
clicks in :math:`\sigma_i` given the other parameters. The evidence of a pair is the
weighted count of clicks with a later click and the sums of :math:`p` and :math:`p^2` over
its last clicks (:func:`evidence`); the prior :math:`\sigma_i \sim
\mathrm{Beta}(a, b)` is fitted by maximising the marginal likelihood of
:mod:`jaxcal.clicks._beta_marginal` (exact for SDBN, where it is the beta-binomial one) by
the same Newton iteration, and enters the M-step as the pseudo-counts ``(a, a + b)``: unseen
pairs predict :math:`a / (a + b)`.

``fit`` alternates EM and these fits :data:`ROUNDS` times (:mod:`jaxcal.clicks._base`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from jaxcal import _shapes, distributed
from jaxcal._jit import jit
from jaxcal.clicks._beta_marginal import homogeneous, log_marginal
from jaxcal.clicks._em import Batch

__all__ = [
    "evidence",
    "learned_priors",
    "learned_prior",
    "learned_satisfaction_prior",
    "ROUNDS",
    "TABLE",
    "SATISFACTION",
    "BOUNDS",
]

#: EM fits alternated with the prior's fit (the first uses the default prior)
ROUNDS = 2
#: the attractiveness table
TABLE = "alpha"
#: the satisfaction table (models with a ``_continuation_fn``)
SATISFACTION = "sigma"


@partial(jit, static_argnames=("fn", "n_pairs"))
def _evidence(fn: Callable, params: dict, batch: Batch, *, n_pairs: int) -> jax.Array:
    """``[n_pairs, 2]``: weighted clicks and examinations (``P(C_r=1|C_<r) / alpha``) by
    pair id."""
    probs = fn(params, batch.qd, batch.clicks, batch.mask)
    theta = params[TABLE][batch.qd]
    w = jnp.where(batch.mask, batch.weight[:, None], 0.0)
    rows = jnp.stack([w * batch.clicks, w * probs / theta], axis=-1).reshape(-1, 2)
    return jax.ops.segment_sum(rows, batch.qd.reshape(-1), num_segments=n_pairs)


@partial(jit, static_argnames=("fn", "n_pairs"))
def _satisfaction_evidence(fn: Callable, params: dict, batch: Batch, *, n_pairs: int):
    """``[n_pairs, 3]``: weighted clicks followed by a later click, and the sums of ``p``
    and ``p**2`` over last clicks, by pair id."""
    clicked = (batch.clicks > 0) & batch.mask
    after = jnp.cumsum(clicked[:, ::-1], axis=1)[:, ::-1] - clicked  # clicks below rank r
    later = after > 0
    p = fn(params, batch.qd, batch.clicks, batch.mask)
    w = jnp.where(clicked, batch.weight[:, None], 0.0)
    last = jnp.where(later, 0.0, w)
    rows = jnp.stack([jnp.where(later, w, 0.0), last * p, last * p * p], axis=-1)
    return jax.ops.segment_sum(rows.reshape(-1, 3), batch.qd.reshape(-1), num_segments=n_pairs)


def evidence(model: type, params: dict, batches: Iterable[Batch]) -> dict[str, np.ndarray]:
    """The evidence of every pair for each learned prior of ``model`` (a fitted click-model
    class), in one pass over ``batches`` (a log's batches on this process), summed across
    processes: ``{"alpha": [table, 2]}`` clicks and effective examinations, and for models
    with a satisfaction table ``{"sigma": [table, 3]}`` (module docstring)."""
    n_pairs = params[TABLE].shape[0]
    parts = {TABLE: (_evidence, model._conditional_fn)}
    if getattr(model, "_continuation_fn", None) is not None:
        parts[SATISFACTION] = (_satisfaction_evidence, model._continuation_fn)
    total: dict = {}
    for batch in batches:
        for name, (step, fn) in parts.items():
            part = step(fn, params, batch, n_pairs=n_pairs)
            total[name] = part if name not in total else total[name] + part
    return {name: distributed.process_sum(np.asarray(v)) for name, v in total.items()}


def learned_priors(
    found: dict[str, np.ndarray], n_pairs: int, init, start: dict | None = None
) -> dict[str, np.ndarray]:
    """The pseudo-counts learned from :func:`evidence` (the first ``n_pairs`` rows), each
    searched from ``start``'s entry when given (the previous round's priors)."""
    fits = {TABLE: learned_prior, SATISFACTION: learned_satisfaction_prior}
    start = start or {}
    return {
        name: fits[name](v, n_pairs, np.asarray(init), start.get(name)) for name, v in found.items()
    }


#: the range of both pseudo-counts of a learned prior
BOUNDS = (1e-3, 1e7)
#: the largest Newton step in log pseudo-counts (a factor e**3)
_MAX_STEP = 3.0


def _neg_binomial_log_marginal(z: jax.Array, c: jax.Array, n: jax.Array) -> jax.Array:
    a, b = jnp.exp(z[0]), jnp.exp(z[1])
    terms = gammaln(a + c) - gammaln(a) + a * jnp.log(b) - (a + c) * jnp.log(b + n)
    return jnp.sum(jnp.where(n > 0, terms, 0.0))


def _with_derivatives(f: Callable) -> Callable:
    """``f``'s value, gradient and Hessian in ``z`` (its first argument), one program."""

    def all_three(z, *args):
        value, grad = jax.value_and_grad(f)(z, *args)
        return value, grad, jax.hessian(f)(z, *args)

    return jit(all_three)


_value = jit(_neg_binomial_log_marginal)
_objective = _with_derivatives(_neg_binomial_log_marginal)


def _maximise(objective: Callable, z: np.ndarray, args: tuple) -> np.ndarray:
    """Newton ascent from ``z`` on a log marginal likelihood in ``z = log(pseudo-counts)``
    (``objective`` returns its value, gradient and Hessian) inside :data:`BOUNDS` (Hessian
    shifted to negative definite, steps halved until the value does not fall), in float64
    whatever ``jax_enable_x64`` says: near the upper bound the log marginal is a difference
    of terms of order 1e7 per pair."""
    lo, hi = np.log(BOUNDS[0]), np.log(BOUNDS[1])

    def at(z):
        return tuple(np.asarray(x, np.float64) for x in objective(z, *args))

    with jax.enable_x64(True):
        args = tuple(np.asarray(x, np.float64) for x in args)
        z = np.clip(np.asarray(z, np.float64), lo, hi)
        current, g, h = at(z)
        for _ in range(100):
            low, high = np.linalg.eigvalsh(h)
            # ascent needs h negative definite: where it is not, shift it well past 0
            shift = 0.0 if high < 0 else high + max(high, 1e-3 * abs(low), 1e-9)
            step = np.linalg.solve(h - shift * np.eye(2), -g)
            step *= min(1.0, _MAX_STEP / max(np.max(np.abs(step)), 1e-300))
            for _ in range(60):
                new = np.clip(z + step, lo, hi)
                value, g_new, h_new = at(new)
                if value >= current - 1e-12 * abs(current):  # False for NaN
                    break
                step = step / 2
            else:
                break  # no step up: z is a maximum to working precision
            moved, gain = np.max(np.abs(new - z)), value - current
            z, current, g, h = new, float(value), g_new, h_new
            if moved < 1e-9 or gain <= 1e-10 * abs(current):  # converged, or on a flat ridge
                break
    return np.exp(z)


def learned_prior(
    evidence: np.ndarray, n_pairs: int, init: np.ndarray, start: np.ndarray | None = None
) -> np.ndarray:
    """``[2]`` pseudo-counts ``(a, b)`` of the attractiveness prior (module docstring) from
    the first ``n_pairs`` rows of its :func:`evidence` (the padding and unseen slots
    excluded), searched from ``start`` (default: ``a = 1`` at the pooled rate); ``init``
    when no pair was examined."""
    c = np.asarray(evidence[:n_pairs, 0], np.float64)
    n = np.asarray(evidence[:n_pairs, 1], np.float64)
    if not np.any(n > 0):
        return np.asarray(init, np.float64)
    mean = max(c.sum() / n.sum(), 1e-6)
    z = np.array([0.0, -np.log(mean)]) if start is None else np.log(start)
    return _maximise(_objective, z, (c, n))


def _beta_log_marginal(z: jax.Array, c: jax.Array, m1: jax.Array, m2: jax.Array) -> jax.Array:
    trials, q = homogeneous(m1, m2)
    return jnp.sum(log_marginal(jnp.exp(z[0]), jnp.exp(z[1]), c, trials, q))


_beta_objective = _with_derivatives(_beta_log_marginal)


def learned_satisfaction_prior(
    evidence: np.ndarray, n_pairs: int, init: np.ndarray, start: np.ndarray | None = None
) -> np.ndarray:
    """``[2]`` pseudo-counts ``(numerator, denominator)`` of the satisfaction prior (module
    docstring: ``(a, a + b)`` for the fitted ``Beta(a, b)``) from the first ``n_pairs`` rows
    of its :func:`evidence`, searched from ``start`` (same form; default ``Beta(1, 1)``);
    ``init`` when no pair was clicked."""
    c, m1, m2 = (np.asarray(evidence[:n_pairs, k], np.float64) for k in range(3))
    seen = (c > 0) | (m2 > 0)
    if not np.any(seen):
        return np.asarray(init, np.float64)
    # the pairs with trials, padded with trial-free ones (which add 0) to a bucket size, so
    # that logs of similar sizes share one compiled program
    size = _shapes.padded_size(int(seen.sum()))
    args = tuple(_shapes.pad_axis(x[seen], size, 0.0) for x in (c, m1, m2))
    z = np.zeros(2) if start is None else np.log([start[0], start[1] - start[0]])
    ab = _maximise(_beta_objective, z, args)
    return np.array([ab[0], ab[0] + ab[1]])
