"""Click-through-rate baselines: global (GCTR), rank (RCTR) and document (DCTR) CTR.

Closed-form estimates with Beta pseudo-counts ``(a, b)`` (Chuklin, Markov & de Rijke,
*Click Models for Web Search*, 2015, Sec. 3.1): ``rho = (a + clicks) / (b + impressions)``,
pooled over the whole log (GCTR), per rank (RCTR), or per query-document pair (DCTR). The
three predict the same probability with or without the clicks above (no dependence on them).
"""

from __future__ import annotations

import jax.numpy as jnp

from jaxcal.clicks._base import RANKS, ClickModel, ClickModelFit
from jaxcal.clicks._declare import estimator, fitted_model
from jaxcal.clicks._stats import by_pair, by_rank, session_weights

__all__ = ["GCTR", "RCTR", "DCTR", "FittedGCTR", "FittedRCTR", "FittedDCTR"]


def _gctr_stats(template, batch):
    w = session_weights(batch)
    return {"rho": (jnp.sum(w * batch.clicks), jnp.sum(w))}


def _rctr_stats(template, batch):
    w = session_weights(batch)
    return {"rho": (by_rank(w * batch.clicks), by_rank(w))}


def _dctr_stats(template, batch):
    w = session_weights(batch)
    n_pairs = template["alpha"].shape[0]
    return {"alpha": (by_pair(w * batch.clicks, batch.qd, n_pairs), by_pair(w, batch.qd, n_pairs))}


def _gctr_probs(params, qd, clicks, mask):
    return jnp.broadcast_to(params["rho"], qd.shape).astype(clicks.dtype)


def _rctr_probs(params, qd, clicks, mask):
    return jnp.broadcast_to(params["rho"][None, :], qd.shape)


def _dctr_probs(params, qd, clicks, mask):
    return params["alpha"][qd]


@fitted_model("GCTR", _gctr_probs)
class FittedGCTR(ClickModelFit):
    """Fitted global CTR: ``params["rho"]`` (scalar).

    Example:
        >>> from jaxcal.clicks import GCTR, FittedGCTR, Sessions
        >>> s = Sessions.from_arrays([0, 0], [[1, 2], [1, 2]], [[1, 0], [0, 0]])
        >>> fitted = GCTR().fit(s)
        >>> isinstance(fitted, FittedGCTR), fitted.predict_marginal(s).tolist()  # 2 / 6 each
        (True, [[0.333..., 0.333...], [0.333..., 0.333...]])
    """

    param_shapes = {"rho": ()}


@fitted_model("RCTR", _rctr_probs)
class FittedRCTR(ClickModelFit):
    """Fitted rank CTR: ``params["rho"]`` (``[n]``).

    Example:
        >>> from jaxcal.clicks import RCTR, FittedRCTR, Sessions
        >>> s = Sessions.from_arrays([0, 0], [[1, 2], [1, 2]], [[1, 0], [1, 0]])
        >>> fitted = RCTR().fit(s)
        >>> isinstance(fitted, FittedRCTR), fitted.params["rho"].tolist()  # 3 / 4, 1 / 4
        (True, [0.75, 0.25])
    """

    param_shapes = {"rho": (RANKS,)}


@fitted_model("DCTR", _dctr_probs)
class FittedDCTR(ClickModelFit):
    """Fitted document CTR: ``params["alpha"]`` (``[P + 1]``).

    Example:
        >>> from jaxcal.clicks import DCTR, FittedDCTR, Sessions
        >>> s = Sessions.from_arrays([0, 0], [[1, 2], [2, 1]], [[1, 0], [1, 0]])
        >>> fitted = DCTR().fit(s)  # each pair: 1 click in 2 impressions
        >>> isinstance(fitted, FittedDCTR), fitted.pair_value("alpha", 0, [1, 2]).tolist()
        (True, [0.5, 0.5])
    """


@estimator(FittedGCTR, _gctr_stats)
class GCTR(ClickModel[FittedGCTR]):
    """Global CTR: one click probability for every result; no hyperparameters.

    Example:
        >>> from jaxcal.clicks import GCTR, Sessions
        >>> s = Sessions.from_arrays([0, 0], [[1, 2], [1, 2]], [[1, 0], [0, 0]])
        >>> float(GCTR().fit(s).params["rho"])  # (1 + 1) / (2 + 4)
        0.333...
    """


@estimator(FittedRCTR, _rctr_stats)
class RCTR(ClickModel[FittedRCTR]):
    """Rank CTR: ``rho_r = (a + clicks at r) / (b + impressions at r)``; no
    hyperparameters.

    Example:
        >>> from jaxcal.clicks import RCTR, Sessions
        >>> s = Sessions.from_arrays([0, 0], [[1, 2], [1, 2]], [[1, 0], [0, 0]])
        >>> RCTR().fit(s, prior=(1, 4)).params["rho"].tolist()  # (1 + 1) / 6, 1 / 6
        [0.333..., 0.166...]
    """


@estimator(FittedDCTR, _dctr_stats)
class DCTR(ClickModel[FittedDCTR]):
    """Document CTR: ``alpha_qd = (a + clicks on (q, d)) / (b + impressions of (q, d))``;
    no hyperparameters.

    Example:
        >>> from jaxcal.clicks import DCTR, Sessions
        >>> s = Sessions.from_arrays([0, 0], [[1, 2], [1, 2]], [[1, 0], [1, 0]])
        >>> DCTR().fit(s).params["alpha"].tolist()  # docs 1, 2, then unseen pairs
        [0.75, 0.25, 0.5]
    """
