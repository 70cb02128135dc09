"""Cascade model (CM; Craswell et al. 2008; Chuklin et al. 2015, Sec. 3.2).

The user scans top-down and stops at the first click: ``E_1 = 1``, ``E_{r+1} = E_r (1 - C_r)``,
``P(A_r = 1) = alpha_qd``. Closed-form MLE: every rank up to the first click (all ranks when
there is none) was examined, so ``alpha_qd = (a + clicks) / (b + impressions at r <= first
click)``. Predictions are exact: ``P(C_r = 1 | C_<r) = alpha_r`` before the first click and
**0 after it** (a log with several clicks per session has zero likelihood under CM; we do not
replace the 0 by a small constant: pass ``eps`` to the metrics if you must score such logs).
``P(C_r = 1) = alpha_r prod_{i < r} (1 - alpha_i)``.
"""

from __future__ import annotations

import jax.numpy as jnp

from jaxcal.clicks._base import ClickModel, ClickModelFit
from jaxcal.clicks._chain import forward, marginal
from jaxcal.clicks._declare import estimator, fitted_model
from jaxcal.clicks._stats import by_pair, session_weights

__all__ = ["CascadeModel", "FittedCascadeModel", "first_click_or_end"]


def first_click_or_end(clicks, mask):
    """1-based rank of the first click, or the SERP length when there is none; ``[S, 1]``.

    Example:
        >>> import numpy as np
        >>> from jaxcal.clicks.cascade import first_click_or_end
        >>> clicks = np.array([[0, 1, 1], [0, 0, 0], [0, 0, 0]])
        >>> mask = np.array([[1, 1, 1], [1, 1, 1], [1, 1, 0]], bool)
        >>> first_click_or_end(clicks, mask).tolist()
        [[2], [3], [2]]
    """
    n = clicks.shape[1]
    ranks = jnp.arange(1, n + 1)
    first = jnp.min(jnp.where(clicks > 0, ranks, n + 1), axis=1, keepdims=True)
    length = jnp.sum(mask, axis=1, keepdims=True)
    return jnp.where(first > n, length, first)


def _stats(template, batch):
    w = session_weights(batch)
    ranks = jnp.arange(1, batch.qd.shape[1] + 1)
    seen = ranks <= first_click_or_end(batch.clicks, batch.mask)
    n_pairs = template["alpha"].shape[0]
    num = by_pair(w * seen * batch.clicks, batch.qd, n_pairs)
    return {"alpha": (num, by_pair(w * seen, batch.qd, n_pairs))}


def _conditional(params, qd, clicks, mask):
    a = jnp.where(mask, params["alpha"][qd], 0.0)
    return forward(a, jnp.zeros_like(a), jnp.ones_like(a), clicks)[0]


def _marginal(params, qd, clicks, mask):
    a = jnp.where(mask, params["alpha"][qd], 0.0)
    return marginal(a, jnp.zeros_like(a), jnp.ones_like(a))


@fitted_model("CM", _conditional, _marginal)
class FittedCascadeModel(ClickModelFit):
    """Fitted cascade model: ``params["alpha"]`` (``[P + 1]``).

    Example:
        >>> from jaxcal.clicks import CascadeModel, FittedCascadeModel, Sessions
        >>> s = Sessions.from_arrays([0], [[1, 2, 3]], [[0, 1, 0]])
        >>> fitted = CascadeModel().fit(s)  # rank 3 lies after the click: not examined
        >>> isinstance(fitted, FittedCascadeModel), fitted.params["alpha"].round(4).tolist()
        (True, [0.3333, 0.6667, 0.5, 0.5])
    """


@estimator(FittedCascadeModel, _stats)
class CascadeModel(ClickModel[FittedCascadeModel]):
    """Cascade model, closed-form MLE (see the module docstring); no hyperparameters.

    Example:
        >>> import jax
        >>> from jaxcal.clicks import CascadeModel, example_params, simulate
        >>> truth = example_params("CM", n_queries=2, key=jax.random.key(0))
        >>> log = simulate("CM", truth, 500, key=jax.random.key(1))
        >>> fitted = CascadeModel().fit(log)
        >>> bool((fitted.predict_marginal(log).sum(axis=1) <= 1).all())  # one click at most
        True
    """
