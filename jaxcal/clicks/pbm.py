"""Position-based model (PBM; Craswell et al. 2008; Chuklin et al. 2015, Sec. 3.3).

``C_r = E_r A_r`` with independent ``P(E_r = 1) = gamma_r`` (rank) and
``P(A_r = 1) = alpha_qd`` (query-document). Exact E-step: a click fixes ``E = A = 1``;
for a skip

    P(A = 1 | C = 0) = alpha (1 - gamma) / (1 - alpha gamma),
    P(E = 1 | C = 0) = gamma (1 - alpha) / (1 - alpha gamma).

M-step: ``alpha_qd = (a + sum P(A = 1 | C)) / (b + impressions)``, likewise ``gamma_r``.
Clicks at different ranks are independent, so ``P(C_r = 1 | C_<r) = P(C_r = 1) =
alpha gamma_r``.
"""

from __future__ import annotations

import jax.numpy as jnp

from jaxcal.clicks._base import PAIRS, RANKS, ClickModel, ClickModelFit
from jaxcal.clicks._chain import bernoulli_loglik, safe_div
from jaxcal.clicks._declare import estimator, fitted_model
from jaxcal.clicks._stats import by_pair, by_rank, session_weights

__all__ = ["PBM", "FittedPBM", "examination_posteriors", "pbm_stats"]


def _probs(params, qd, clicks, mask):
    return params["alpha"][qd] * params["gamma"][None, : qd.shape[1]]


def examination_posteriors(a, g, batch):
    """Exact E-step of ``C = E A`` with independent ``P(A = 1) = a`` and ``P(E = 1) = g``
    (``[S, n]`` each; PBM, and UBM with ``g = gamma_{r, r'}``).

    Returns:
        ``(P(A = 1 | C), P(E = 1 | C), loglik)``: two ``[S, n]`` arrays and the weighted
        log-likelihood of the log.

    Example:
        >>> import numpy as np
        >>> from jaxcal.clicks._em import make_batch
        >>> from jaxcal.clicks.pbm import examination_posteriors
        >>> batch = make_batch(np.array([[0, 1]]), np.array([[1, 0]]), np.ones((1, 2), bool),
        ...                    np.ones(1), None)
        >>> half = np.full((1, 2), 0.5)
        >>> p_a, p_e, _ = examination_posteriors(half, half, batch)
        >>> p_a.tolist()  # a click: attractive; a skip: 0.5 * 0.5 / (1 - 0.25)
        [[1.0, 0.333...]]
    """
    c = batch.clicks > 0
    skip = 1.0 - a * g
    p_a = jnp.where(c, 1.0, safe_div(a * (1.0 - g), skip))
    p_e = jnp.where(c, 1.0, safe_div(g * (1.0 - a), skip))
    ll = jnp.sum(batch.weight * bernoulli_loglik(a * g, batch.clicks, batch.mask))
    return p_a, p_e, ll


def pbm_stats(params, batch):
    """PBM E-step: ``({"alpha": (num, den), "gamma": (num, den)}, loglik)``.

    Args:
        params: ``{"alpha": [T], "gamma": [n]}``.
        batch: the log (:func:`jaxcal.clicks._em.make_batch`).

    Returns:
        The expected sufficient statistics by parameter and the weighted log-likelihood.

    Example:
        >>> import numpy as np
        >>> from jaxcal.clicks._em import make_batch
        >>> from jaxcal.clicks.pbm import pbm_stats
        >>> batch = make_batch(np.array([[0, 1]]), np.array([[1, 0]]), np.ones((1, 2), bool),
        ...                    np.ones(1), None)
        >>> stats, _ = pbm_stats({"alpha": np.full(3, 0.5), "gamma": np.full(2, 0.5)}, batch)
        >>> stats["alpha"][1].tolist()  # impressions of pairs 0, 1 and the unseen slot
        [1.0, 1.0, 0.0]
    """
    alpha, gamma = params["alpha"], params["gamma"]
    p_a, p_e, ll = examination_posteriors(alpha[batch.qd], gamma[None, :], batch)
    w = session_weights(batch)
    n_pairs = alpha.shape[0]
    stats = {
        "alpha": (by_pair(w * p_a, batch.qd, n_pairs), by_pair(w, batch.qd, n_pairs)),
        "gamma": (by_rank(w * p_e), by_rank(w)),
    }
    return stats, ll


@fitted_model("PBM", _probs)
class FittedPBM(ClickModelFit):
    """Fitted PBM: ``params["alpha"]`` (``[P + 1]``), ``params["gamma"]`` (``[n]``).

    Example:
        >>> import jax
        >>> from jaxcal.clicks import PBM, FittedPBM, example_params, simulate
        >>> log = simulate("PBM", example_params("PBM", n_queries=2, key=jax.random.key(0)),
        ...                300, key=jax.random.key(1))
        >>> fitted = PBM().fit(log, max_iter=10)
        >>> isinstance(fitted, FittedPBM), fitted.params["gamma"].shape
        (True, (10,))
    """

    param_shapes = {"alpha": (PAIRS,), "gamma": (RANKS,)}


@estimator(FittedPBM, pbm_stats, em=True)
class PBM(ClickModel[FittedPBM]):
    """Position-based model fitted by exact EM (see the module docstring); no
    hyperparameters (``fit`` takes the prior and the EM options).

    Example:
        >>> import jax
        >>> from jaxcal.clicks import PBM, simulate, example_params
        >>> truth = example_params("PBM", key=jax.random.key(0))
        >>> log = simulate("PBM", truth, 1000, key=jax.random.key(0))
        >>> fitted = PBM().fit(log, max_iter=20)
        >>> fitted.predict_marginal(log).shape  # [sessions, ranks]
        (1000, 10)
    """
