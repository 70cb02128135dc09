"""User browsing model (UBM; Dupret & Piwowarski 2008; Chuklin et al. 2015, Sec. 3.6).

``C_r = E_r A_r``; ``P(A_r = 1) = alpha_qd``; examination depends on the rank ``r`` and on
the rank ``r'`` of the previous click (``r' = 0`` when there is none):
``P(E_r = 1 | C_<r) = gamma_{r, r'}``. Given the clicks above, ranks are independent, so the
exact E-step is PBM's with ``gamma_{r, r'}`` in place of ``gamma_r``, and

    P(C_r = 1 | C_<r) = alpha_qd gamma_{r, r'}.

Marginal (clicks above summed out), with ``P(C_0 = 1) := 1`` standing for "no click yet":

    P(C_r = 1) = sum_{r' < r} P(C_{r'} = 1) prod_{k = r'+1}^{r-1} (1 - alpha_k gamma_{k, r'})
                 alpha_r gamma_{r, r'}.

``params["gamma"]`` is ``[n, n]``: row ``r - 1``, column ``r'`` (only ``r' < r`` is used).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxcal.clicks._base import PAIRS, RANKS, ClickModel, ClickModelFit
from jaxcal.clicks._declare import estimator, fitted_model
from jaxcal.clicks._stats import by_pair, session_weights
from jaxcal.clicks.pbm import examination_posteriors

__all__ = ["UBM", "FittedUBM", "ubm_stats", "previous_click"]


def previous_click(clicks: jax.Array) -> jax.Array:
    """``[S, n]`` rank (1-based) of the last click above each rank; 0 if none."""
    n = clicks.shape[1]
    idx = jnp.where(clicks > 0, jnp.arange(1, n + 1), 0)
    run = jax.lax.cummax(idx, axis=1)
    return jnp.concatenate([jnp.zeros_like(run[:, :1]), run[:, :-1]], axis=1)


def _gamma_ids(clicks: jax.Array) -> jax.Array:
    n = clicks.shape[1]
    return jnp.arange(n)[None, :] * n + previous_click(clicks)


def _conditional(params, qd, clicks, mask):
    n = qd.shape[1]
    g = params["gamma"][:n, :n].reshape(-1)[_gamma_ids(clicks)]
    return params["alpha"][qd] * g


def _marginal(params, qd, clicks, mask):
    S, n = qd.shape
    a = jnp.where(mask, params["alpha"][qd], 0.0)
    gamma = params["gamma"][:n, :n]

    def step(u, xs):
        # u[:, p] = P(last click so far at rank p), p = 0 (none) .. n
        a_r, g_r, r = xs
        g_full = jnp.concatenate([g_r, jnp.zeros((1,), g_r.dtype)])  # pad to n + 1
        click = a_r[:, None] * g_full[None, :]
        p_r = jnp.sum(u * click, axis=1)
        u = u * (1.0 - click)
        u = u.at[:, r + 1].set(p_r)
        return u, p_r

    u0 = jnp.zeros((S, n + 1), a.dtype).at[:, 0].set(1.0)
    _, p = jax.lax.scan(step, u0, (jnp.swapaxes(a, 0, 1), gamma, jnp.arange(n)))
    return jnp.swapaxes(p, 0, 1)


def ubm_stats(params, batch):
    """UBM E-step: ``({"alpha": (num, den), "gamma": (num, den)}, loglik)``."""
    alpha, gamma = params["alpha"], params["gamma"]
    n = gamma.shape[0]
    gid = _gamma_ids(batch.clicks)
    p_a, p_e, ll = examination_posteriors(alpha[batch.qd], gamma.reshape(-1)[gid], batch)
    w = session_weights(batch)
    n_pairs = alpha.shape[0]
    stats = {
        "alpha": (by_pair(w * p_a, batch.qd, n_pairs), by_pair(w, batch.qd, n_pairs)),
        "gamma": (
            by_pair(w * p_e, gid, n * n).reshape(n, n),
            by_pair(w, gid, n * n).reshape(n, n),
        ),
    }
    return stats, ll


@fitted_model("UBM", _conditional, _marginal)
class FittedUBM(ClickModelFit):
    """Fitted UBM: ``params["alpha"]`` (``[P + 1]``), ``params["gamma"]`` (``[n, n]``)."""

    param_shapes = {"alpha": (PAIRS,), "gamma": (RANKS, RANKS)}


@estimator(FittedUBM, ubm_stats, em=True)
class UBM(ClickModel):
    """User browsing model fitted by exact EM (see the module docstring)."""
