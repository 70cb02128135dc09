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
    """``[S, n]`` rank (1-based) of the last click above each rank; 0 if none.

    Example:
        >>> import numpy as np
        >>> from jaxcal.clicks.ubm import previous_click
        >>> previous_click(np.array([[0, 1, 0, 1, 0]])).tolist()
        [[0, 0, 2, 2, 4]]
    """
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
    """UBM E-step: ``({"alpha": (num, den), "gamma": (num, den)}, loglik)``.

    Args:
        params: ``{"alpha": [T], "gamma": [n, n]}``.
        batch: the log (:func:`jaxcal.clicks._em.make_batch`).

    Returns:
        The expected sufficient statistics by parameter (``gamma``'s ``[n, n]``: row
        ``r - 1``, column the previous click's rank) and the weighted log-likelihood.

    Example:
        >>> import numpy as np
        >>> from jaxcal.clicks._em import make_batch
        >>> from jaxcal.clicks.ubm import ubm_stats
        >>> batch = make_batch(np.array([[0, 1]]), np.array([[1, 0]]), np.ones((1, 2), bool),
        ...                    np.ones(1), None)
        >>> stats, _ = ubm_stats({"alpha": np.full(3, 0.5), "gamma": np.full((2, 2), 0.5)}, batch)
        >>> stats["gamma"][1].tolist()  # rank 1 seen with no click above, rank 2 after rank 1
        [[1.0, 0.0], [0.0, 1.0]]
    """
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
    """Fitted UBM: ``params["alpha"]`` (``[P + 1]``), ``params["gamma"]`` (``[n, n]``).

    Example:
        >>> import jax
        >>> from jaxcal.clicks import UBM, FittedUBM, example_params, simulate
        >>> log = simulate("UBM", example_params("UBM", n_queries=2, key=jax.random.key(0)),
        ...                300, key=jax.random.key(1))
        >>> fitted = UBM().fit(log, max_iter=10)
        >>> isinstance(fitted, FittedUBM), fitted.params["gamma"].shape
        (True, (10, 10))
    """

    param_shapes = {"alpha": (PAIRS,), "gamma": (RANKS, RANKS)}


@estimator(FittedUBM, ubm_stats, em=True)
class UBM(ClickModel[FittedUBM]):
    """User browsing model fitted by exact EM (see the module docstring); no
    hyperparameters.

    Example:
        >>> import jax
        >>> from jaxcal.clicks import UBM, Sessions
        >>> s = Sessions.from_arrays([0, 0], [[1, 2], [2, 1]], [[1, 0], [0, 1]])
        >>> fitted = UBM().fit(s, max_iter=5)
        >>> fitted.predict_conditional(s).shape  # depends on the rank of the last click
        (2, 2)
    """
