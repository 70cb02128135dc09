"""Dependent click model (DCM; Guo, Liu & Wang 2009; Chuklin et al. 2015, Sec. 3.4).

``E_1 = 1``; ``P(A_r = 1) = alpha_qd``; after a click the user continues with the rank
parameter ``lambda_r``, after a skip always. Closed-form (approximate) MLE, as in the papers:
every rank up to the last click ``l`` is taken as examined (all ranks when there is no
click, which is exact: without clicks the DCM user never stops), and the last click as the
end of the session:

    alpha_qd = (a + clicks) / (b + impressions at r <= l),
    lambda_r = (a + clicks at r that are not the last) / (b + clicks at r).

Predictions are exact under the model (:mod:`jaxcal.clicks._chain` with ``kappa_r =
lambda_r``, ``nu = 1``).
"""

from __future__ import annotations

import jax.numpy as jnp

from jaxcal.clicks._base import PAIRS, RANKS, ClickModel, ClickModelFit
from jaxcal.clicks._chain import forward, last_click, marginal
from jaxcal.clicks._declare import estimator, fitted_model
from jaxcal.clicks._stats import by_pair, by_rank, session_weights

__all__ = ["DCM", "FittedDCM", "last_click_or_end"]


def last_click_or_end(clicks, mask):
    """1-based rank of the last click, or the SERP length when there is none; ``[S, 1]``.

    Example:
        >>> import numpy as np
        >>> from jaxcal.clicks.dcm import last_click_or_end
        >>> clicks = np.array([[1, 1, 0], [0, 0, 0]])
        >>> last_click_or_end(clicks, np.ones((2, 3), bool)).tolist()
        [[2], [3]]
    """
    last = last_click(clicks)
    return jnp.where(last > 0, last, jnp.sum(mask, axis=1, keepdims=True))


def _stats(template, batch):
    w = session_weights(batch)
    c = batch.clicks
    ranks = jnp.arange(1, c.shape[1] + 1)
    last = last_click_or_end(c, batch.mask)
    seen = ranks <= last
    n_pairs = template["alpha"].shape[0]
    return {
        "alpha": (by_pair(w * c, batch.qd, n_pairs), by_pair(w * seen, batch.qd, n_pairs)),
        "lambda": (by_rank(w * c * (ranks < last)), by_rank(w * c)),
    }


def _kappa(params, qd, mask):
    a = jnp.where(mask, params["alpha"][qd], 0.0)
    lam = jnp.broadcast_to(params["lambda"][None, : qd.shape[1]], qd.shape)
    return a, lam


def _conditional(params, qd, clicks, mask):
    a, lam = _kappa(params, qd, mask)
    return forward(a, lam, jnp.ones_like(a), clicks)[0]


def _marginal(params, qd, clicks, mask):
    a, lam = _kappa(params, qd, mask)
    return marginal(a, lam, jnp.ones_like(a))


@fitted_model("DCM", _conditional, _marginal)
class FittedDCM(ClickModelFit):
    """Fitted DCM: ``params["alpha"]`` (``[P + 1]``), ``params["lambda"]`` (``[n]``).

    Example:
        >>> from jaxcal.clicks import DCM, FittedDCM, Sessions
        >>> s = Sessions.from_arrays([0, 0], [[1, 2], [1, 2]], [[1, 1], [1, 0]])
        >>> fitted = DCM().fit(s)  # rank 1: 2 clicks, 1 not the last; rank 2: 1 click, last
        >>> isinstance(fitted, FittedDCM), fitted.params["lambda"].tolist()
        (True, [0.5, 0.333...])
    """

    param_shapes = {"alpha": (PAIRS,), "lambda": (RANKS,)}


@estimator(FittedDCM, _stats)
class DCM(ClickModel[FittedDCM]):
    """Dependent click model, closed-form MLE (see the module docstring); no
    hyperparameters.

    Example:
        >>> import jax
        >>> from jaxcal.clicks import DCM, example_params, simulate
        >>> truth = example_params("DCM", n_queries=2, key=jax.random.key(0))
        >>> log = simulate("DCM", truth, 500, key=jax.random.key(1))
        >>> DCM().fit(log).params["lambda"].shape  # one continuation per rank
        (10,)
    """
