"""Click-through-rate baselines: global (GCTR), rank (RCTR) and document (DCTR) CTR.

Closed-form estimates with Beta pseudo-counts ``(a, b)`` (Chuklin, Markov & de Rijke,
*Click Models for Web Search*, 2015, Sec. 3.1): ``rho = (a + clicks) / (b + impressions)``,
pooled over the whole log (GCTR), per rank (RCTR), or per query-document pair (DCTR). The
three predict the same probability with or without the clicks above (no dependence on them).
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from jaxcal._pytree import pytree_dataclass
from jaxcal.clicks._base import RANKS, ClickModel, ClickModelFit
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


@pytree_dataclass
class FittedGCTR(ClickModelFit):
    """Fitted global CTR: ``params["rho"]`` (scalar)."""

    model_name = "GCTR"
    param_shapes = {"rho": ()}
    _conditional_fn = _marginal_fn = staticmethod(_gctr_probs)


@pytree_dataclass
class FittedRCTR(ClickModelFit):
    """Fitted rank CTR: ``params["rho"]`` (``[n]``)."""

    model_name = "RCTR"
    param_shapes = {"rho": (RANKS,)}
    _conditional_fn = _marginal_fn = staticmethod(_rctr_probs)


@pytree_dataclass
class FittedDCTR(ClickModelFit):
    """Fitted document CTR: ``params["alpha"]`` (``[P + 1]``)."""

    model_name = "DCTR"
    _conditional_fn = _marginal_fn = staticmethod(_dctr_probs)


@dataclasses.dataclass(frozen=True)
class GCTR(ClickModel):
    """Global CTR: one click probability for every result.

    Example:
        >>> from jaxcal.clicks import GCTR, Sessions
        >>> s = Sessions.from_arrays([0, 0], [[1, 2], [1, 2]], [[1, 0], [0, 0]])
        >>> float(GCTR().fit(s).params["rho"])  # (1 + 1) / (2 + 4)
        0.333...
    """

    fitted_cls = FittedGCTR
    _stats = staticmethod(_gctr_stats)


@dataclasses.dataclass(frozen=True)
class RCTR(ClickModel):
    """Rank CTR: ``rho_r = (a + clicks at r) / (b + impressions at r)``."""

    fitted_cls = FittedRCTR
    _stats = staticmethod(_rctr_stats)


@dataclasses.dataclass(frozen=True)
class DCTR(ClickModel):
    """Document CTR: ``alpha_qd = (a + clicks on (q, d)) / (b + impressions of (q, d))``."""

    fitted_cls = FittedDCTR
    _stats = staticmethod(_dctr_stats)
