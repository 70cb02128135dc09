"""Click chain model (CCM; Guo et al. 2009; Chuklin et al. 2015, Sec. 3.7).

``E_1 = 1``; ``C_r = E_r A_r``, ``P(A_r = 1) = alpha_qd``. After a skip the user continues
with ``tau_1``; after a click she continues with ``tau_2`` if the document is not relevant
(``R_r = 0``) and ``tau_3`` if it is, where ``R_r ~ Bernoulli(alpha_qd)`` (the same
parameter). ``params["tau"] = [tau_1, tau_2, tau_3]``.

Exact EM (``l`` = last click, ``eps_r`` / ``X_r`` from :mod:`jaxcal.clicks._chain` with
``nu = tau_1`` and ``kappa_r = (1 - alpha_r) tau_2 + alpha_r tau_3``):

* ``P(A_r = 1 | C)``: 1 on clicks, 0 on skips above ``l``, ``alpha (1 - eps_r) / (1 - eps_r
  X_r)`` below ``l``.
* ``P(R_r = 1 | C)`` on clicks: ``alpha tau_3 / (alpha tau_3 + (1 - alpha) tau_2)`` above ``l``;
  at ``l``: ``alpha (1 - tau_3 X_{l+1}) / Z`` with ``Z = 1 - ((1 - alpha) tau_2 + alpha tau_3)
  X_{l+1}``.
* ``alpha`` pools both kinds of evidence: ``(a + sum P(A = 1 | C) + sum P(R = 1 | C)) /
  (b + impressions + clicks)``.
* ``tau_1``: over skips with a next rank, ``P(E_r = 1, C_r = 0, E_{r+1} = 1 | C) /
  P(E_r = 1, C_r = 0 | C)`` (1 / 1 above ``l``; ``eps_r (1 - alpha_r) tau_1 (1 - X_{r+1}) / D'``
  and ``eps_r (1 - alpha_r)(1 - tau_1 X_{r+1}) / D'`` below, ``D' = 1 - eps_r X_r``).
* ``tau_2`` / ``tau_3``: over clicks with a next rank, ``P(R_r = 0 / 1, E_{r+1} = 1 | C)`` over
  ``P(R_r = 0 / 1 | C)``; above ``l`` both equal ``P(R_r | C)``; at ``l`` they are
  ``(1 - alpha) tau_2 (1 - X) / Z``, ``(1 - alpha)(1 - tau_2 X) / Z`` and
  ``alpha tau_3 (1 - X) / Z``, ``alpha (1 - tau_3 X) / Z`` with ``X = X_{l+1}``.

Checked against brute-force enumeration of all hidden states (tests).
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from jaxcal._pytree import pytree_dataclass
from jaxcal.clicks._base import ClickModel, ClickModelFit
from jaxcal.clicks._chain import backward, bernoulli_loglik, forward, last_click, marginal, safe_div
from jaxcal.clicks._stats import by_pair, mstep_ratios, session_weights

__all__ = ["CCM", "FittedCCM", "ccm_posteriors", "ccm_stats"]


def _chain_params(alpha, tau, mask):
    a = jnp.where(mask, alpha, 0.0)
    kappa = (1.0 - a) * tau[1] + a * tau[2]
    return a, kappa, jnp.broadcast_to(tau[0], a.shape)


def ccm_posteriors(alpha, tau, clicks, mask):
    """Exact CCM posteriors and transition statistics for ``[S, n]`` per-rank ``alpha``."""
    a, kappa, nu = _chain_params(alpha, tau, mask)
    t1, t2, t3 = tau[0], tau[1], tau[2]
    cond, eps = forward(a, kappa, nu, clicks)
    x = backward(a, nu)
    x_here, x_next = x[:, :-1], x[:, 1:]
    ranks = jnp.arange(1, clicks.shape[1] + 1)
    last = last_click(clicks)
    above, at, below = ranks < last, ranks == last, ranks > last
    c = clicks > 0
    has_next = jnp.concatenate([mask[:, 1:], jnp.zeros_like(mask[:, :1])], axis=1)
    # attractiveness
    d_below = 1.0 - eps * x_here
    p_attr = jnp.where(c, 1.0, jnp.where(below, safe_div(a * (1.0 - eps), d_below), 0.0))
    # relevance after a click
    z = 1.0 - ((1.0 - a) * t2 + a * t3) * x_next
    r_above = safe_div(a * t3, a * t3 + (1.0 - a) * t2)
    p_rel = jnp.where(c, jnp.where(at, safe_div(a * (1.0 - t3 * x_next), z), r_above), 0.0)
    # tau_1: skips with a next rank
    skip = (~c) & has_next
    t1_num = jnp.where(above, 1.0, safe_div(eps * (1.0 - a) * t1 * (1.0 - x_next), d_below))
    t1_den = jnp.where(above, 1.0, safe_div(eps * (1.0 - a) * (1.0 - t1 * x_next), d_below))
    # tau_2, tau_3: clicks with a next rank
    click = c & has_next
    t2_num = jnp.where(at, safe_div((1.0 - a) * t2 * (1.0 - x_next), z), 1.0 - r_above)
    t2_den = jnp.where(at, safe_div((1.0 - a) * (1.0 - t2 * x_next), z), 1.0 - r_above)
    t3_num = jnp.where(at, safe_div(a * t3 * (1.0 - x_next), z), r_above)
    t3_den = jnp.where(at, safe_div(a * (1.0 - t3 * x_next), z), r_above)
    zero = jnp.zeros_like(a)
    return {
        "p_attr": p_attr,
        "p_rel": p_rel,
        "tau_num": jnp.stack(
            [
                jnp.where(skip, t1_num, zero),
                jnp.where(click, t2_num, zero),
                jnp.where(click, t3_num, zero),
            ]
        ),
        "tau_den": jnp.stack(
            [
                jnp.where(skip, t1_den, zero),
                jnp.where(click, t2_den, zero),
                jnp.where(click, t3_den, zero),
            ]
        ),
        "cond": cond,
    }


def ccm_stats(params, batch):
    """CCM E-step: ``({"alpha", "tau": (num, den)}, loglik)``."""
    alpha = params["alpha"][batch.qd]
    post = ccm_posteriors(alpha, params["tau"], batch.clicks, batch.mask)
    w = session_weights(batch)
    n_pairs = params["alpha"].shape[0]
    wc = w * batch.clicks
    num = by_pair(w * post["p_attr"] + wc * post["p_rel"], batch.qd, n_pairs)
    den = by_pair(w + wc, batch.qd, n_pairs)
    stats = {
        "alpha": (num, den),
        "tau": (
            jnp.sum(w * post["tau_num"], axis=(1, 2)),
            jnp.sum(w * post["tau_den"], axis=(1, 2)),
        ),
    }
    ll = jnp.sum(batch.weight * bernoulli_loglik(post["cond"], batch.clicks, batch.mask))
    return stats, ll


def _conditional(params, qd, clicks, mask):
    return forward(*_chain_params(params["alpha"][qd], params["tau"], mask), clicks)[0]


def _marginal(params, qd, clicks, mask):
    return marginal(*_chain_params(params["alpha"][qd], params["tau"], mask))


@pytree_dataclass
class FittedCCM(ClickModelFit):
    """Fitted CCM: ``params["alpha"]`` (``[P + 1]``), ``params["tau"]`` (``[3]``)."""

    model_name = "CCM"
    _conditional_fn = staticmethod(_conditional)
    _marginal_fn = staticmethod(_marginal)


@dataclasses.dataclass(frozen=True)
class CCM(ClickModel):
    """Click chain model fitted by exact EM (module docstring)."""

    fitted_cls = FittedCCM
    uses_em = True
    _stats = staticmethod(ccm_stats)
    _mstep = staticmethod(mstep_ratios)

    @staticmethod
    def _init(n_pairs, n, dtype):
        return {"alpha": jnp.full((n_pairs,), 0.5, dtype), "tau": jnp.full((3,), 0.5, dtype)}
