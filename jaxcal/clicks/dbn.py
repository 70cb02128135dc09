"""Dynamic Bayesian network model (DBN; Chapelle & Zhang 2009) and its simplified variant
(SDBN; Chuklin et al. 2015, Sec. 3.5).

``E_1 = 1``; ``C_r = E_r A_r`` with ``P(A_r = 1) = alpha_qd``; after a click the user is
satisfied with ``P(S_r = 1) = sigma_qd`` and stops; otherwise she continues with
``gamma`` (``E_{r+1} = 1``). SDBN fixes ``gamma = 1``.

Exact EM for DBN (all posteriors given the whole click vector; ``l`` = last click, 0 if none;
``eps_r = P(E_r = 1 | C_<r)`` and ``X_r = P(any click at >= r | E_r = 1)`` from the forward /
backward recursions of :mod:`jaxcal.clicks._chain` with ``kappa = gamma (1 - sigma)``,
``nu = gamma``):

* ``P(A_r = 1 | C)`` = 1 if clicked; 0 if skipped above ``l``;
  ``alpha (1 - eps_r) / (1 - eps_r X_r)`` if skipped below ``l``.
* ``P(S_r = 1 | C)`` (clicked ranks only) = 0 above ``l``;
  ``sigma / (1 - (1 - sigma) gamma X_{l+1})`` at ``l``.
* ``gamma``: expected continuations over expected chances, for ``r < n``:
  ``sum P(E_r = 1, S_r = 0, E_{r+1} = 1 | C) / sum P(E_r = 1, S_r = 0 | C)``; above ``l`` both
  are 1; at ``l`` they are ``(1 - sigma) gamma (1 - X_{l+1}) / D`` and
  ``(1 - sigma)(1 - gamma X_{l+1}) / D`` with ``D = 1 - (1 - sigma) gamma X_{l+1}``; below ``l``
  ``eps_r (1 - alpha_r) gamma (1 - X_{r+1}) / D'`` and ``eps_r (1 - alpha_r)(1 - gamma X_{r+1})
  / D'`` with ``D' = 1 - eps_r X_r``.

These were checked against brute-force enumeration of all hidden states (tests). SDBN uses
the closed-form MLE: ``alpha`` over ranks up to the last click (all ranks when there is none,
which is exact for ``gamma = 1``), ``sigma = (a + last clicks) / (b + clicks)``.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from jaxcal._pytree import pytree_dataclass
from jaxcal.clicks._base import ClickModel, ClickModelFit
from jaxcal.clicks._chain import backward, bernoulli_loglik, forward, last_click, marginal, safe_div
from jaxcal.clicks._stats import by_pair, mstep_ratios, session_weights
from jaxcal.clicks.dcm import last_click_or_end

__all__ = ["DBN", "SDBN", "FittedDBN", "FittedSDBN", "dbn_posteriors", "dbn_stats"]


def _next_valid(mask):
    return jnp.concatenate([mask[:, 1:], jnp.zeros_like(mask[:, :1])], axis=1)


def dbn_posteriors(alpha, sigma, gamma, clicks, mask):
    """Exact DBN posteriors for ``[S, n]`` per-rank parameters.

    Returns:
        dict with ``p_attr`` ``P(A_r = 1 | C)``, ``p_sat`` ``P(S_r = 1 | C)`` (0 on skips),
        ``gamma_num`` / ``gamma_den`` (0 where rank ``r + 1`` does not exist), ``cond``
        ``P(C_r = 1 | C_<r)``.
    """
    a = jnp.where(mask, alpha, 0.0)
    nu = jnp.broadcast_to(gamma, a.shape)
    kappa = gamma * (1.0 - sigma)
    cond, eps = forward(a, kappa, nu, clicks)
    x = backward(a, nu)
    x_here, x_next = x[:, :-1], x[:, 1:]
    n = clicks.shape[1]
    ranks = jnp.arange(1, n + 1)
    last = last_click(clicks)
    above, at, below = ranks < last, ranks == last, ranks > last
    c = clicks > 0
    d_below = 1.0 - eps * x_here
    d_at = 1.0 - (1.0 - sigma) * gamma * x_next
    p_attr = jnp.where(c, 1.0, jnp.where(below, safe_div(a * (1.0 - eps), d_below), 0.0))
    p_sat = jnp.where(c & at, safe_div(sigma, d_at), 0.0)
    num_at = safe_div((1.0 - sigma) * gamma * (1.0 - x_next), d_at)
    den_at = safe_div((1.0 - sigma) * (1.0 - gamma * x_next), d_at)
    num_below = safe_div(eps * (1.0 - a) * gamma * (1.0 - x_next), d_below)
    den_below = safe_div(eps * (1.0 - a) * (1.0 - gamma * x_next), d_below)
    has_next = _next_valid(mask)
    gamma_num = jnp.where(has_next, jnp.where(above, 1.0, jnp.where(at, num_at, num_below)), 0.0)
    gamma_den = jnp.where(has_next, jnp.where(above, 1.0, jnp.where(at, den_at, den_below)), 0.0)
    return {
        "p_attr": p_attr,
        "p_sat": p_sat,
        "gamma_num": gamma_num,
        "gamma_den": gamma_den,
        "cond": cond,
    }


def dbn_stats(params, batch):
    """DBN E-step: ``({"alpha", "sigma", "gamma": (num, den)}, loglik)``."""
    alpha, sigma = params["alpha"][batch.qd], params["sigma"][batch.qd]
    post = dbn_posteriors(alpha, sigma, params["gamma"], batch.clicks, batch.mask)
    w = session_weights(batch)
    n_pairs = params["alpha"].shape[0]
    wc = w * batch.clicks
    stats = {
        "alpha": (by_pair(w * post["p_attr"], batch.qd, n_pairs), by_pair(w, batch.qd, n_pairs)),
        "sigma": (by_pair(wc * post["p_sat"], batch.qd, n_pairs), by_pair(wc, batch.qd, n_pairs)),
        "gamma": (jnp.sum(w * post["gamma_num"]), jnp.sum(w * post["gamma_den"])),
    }
    ll = jnp.sum(batch.weight * bernoulli_loglik(post["cond"], batch.clicks, batch.mask))
    return stats, ll


def _chain_params(params, qd, mask, gamma):
    a = jnp.where(mask, params["alpha"][qd], 0.0)
    kappa = gamma * (1.0 - params["sigma"][qd])
    return a, kappa, jnp.broadcast_to(gamma, a.shape)


def _dbn_conditional(params, qd, clicks, mask):
    return forward(*_chain_params(params, qd, mask, params["gamma"]), clicks)[0]


def _dbn_marginal(params, qd, clicks, mask):
    return marginal(*_chain_params(params, qd, mask, params["gamma"]))


def _sdbn_conditional(params, qd, clicks, mask):
    return forward(*_chain_params(params, qd, mask, 1.0), clicks)[0]


def _sdbn_marginal(params, qd, clicks, mask):
    return marginal(*_chain_params(params, qd, mask, 1.0))


def _sdbn_stats(template, batch):
    w = session_weights(batch)
    c = batch.clicks
    ranks = jnp.arange(1, c.shape[1] + 1)
    last = last_click_or_end(c, batch.mask)
    n_pairs = template["alpha"].shape[0]
    return {
        "alpha": (
            by_pair(w * c, batch.qd, n_pairs),
            by_pair(w * (ranks <= last), batch.qd, n_pairs),
        ),
        "sigma": (
            by_pair(w * c * (ranks == last), batch.qd, n_pairs),
            by_pair(w * c, batch.qd, n_pairs),
        ),
    }


@pytree_dataclass
class FittedDBN(ClickModelFit):
    """Fitted DBN: ``params["alpha"]``, ``params["sigma"]`` (``[P + 1]``), ``params["gamma"]``."""

    model_name = "DBN"
    _conditional_fn = staticmethod(_dbn_conditional)
    _marginal_fn = staticmethod(_dbn_marginal)


@pytree_dataclass
class FittedSDBN(ClickModelFit):
    """Fitted SDBN: ``params["alpha"]``, ``params["sigma"]`` (``[P + 1]``)."""

    model_name = "SDBN"
    _conditional_fn = staticmethod(_sdbn_conditional)
    _marginal_fn = staticmethod(_sdbn_marginal)


@dataclasses.dataclass(frozen=True)
class DBN(ClickModel):
    """Dynamic Bayesian network click model fitted by exact EM (module docstring)."""

    fitted_cls = FittedDBN
    uses_em = True
    _stats = staticmethod(dbn_stats)
    _mstep = staticmethod(mstep_ratios)

    @staticmethod
    def _init(n_pairs, n, dtype):
        half = jnp.full((n_pairs,), 0.5, dtype)
        return {"alpha": half, "sigma": half, "gamma": jnp.full((), 0.5, dtype)}


@dataclasses.dataclass(frozen=True)
class SDBN(ClickModel):
    """Simplified DBN (``gamma = 1``), closed-form MLE (module docstring)."""

    fitted_cls = FittedSDBN
    _stats = staticmethod(_sdbn_stats)
    _mstep = staticmethod(mstep_ratios)

    @staticmethod
    def _init(n_pairs, n, dtype):
        half = jnp.full((n_pairs,), 0.5, dtype)
        return {"alpha": half, "sigma": half}
