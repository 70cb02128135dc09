"""Dynamic Bayesian network model (DBN; Chapelle & Zhang 2009) and its simplified variant
(SDBN; Chuklin et al. 2015, Sec. 3.5).

``E_1 = 1``; ``C_r = E_r A_r`` with ``P(A_r = 1) = alpha_qd``; after a click the user is
satisfied with ``P(S_r = 1) = sigma_qd`` and stops; otherwise she continues with
``gamma`` (``E_{r+1} = 1``). SDBN fixes ``gamma = 1``.

Exact EM for DBN (all posteriors given the whole click vector; ``l`` = last click, 0 if none;
``eps_r = P(E_r = 1 | C_<r)`` and ``X_r = P(any click at >= r | E_r = 1)`` from the forward /
backward recursions of :mod:`jaxcal.clicks._chain` with ``kappa = gamma (1 - sigma)``,
``nu = gamma``, computed in :func:`dbn_posteriors_rank_major` by two fused scans):

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

import jax
import jax.numpy as jnp

from jaxcal.clicks._base import PAIRS, ClickModel, ClickModelFit
from jaxcal.clicks._chain import backward_rank_major, forward, marginal, posterior_ratio
from jaxcal.clicks._declare import estimator, fitted_model
from jaxcal.clicks._em import rank_major
from jaxcal.clicks._stats import by_pair, chain_loglik, pair_sums, session_weights
from jaxcal.clicks.dcm import last_click_or_end

__all__ = [
    "DBN",
    "SDBN",
    "FittedDBN",
    "FittedSDBN",
    "dbn_posteriors",
    "dbn_posteriors_rank_major",
    "dbn_stats",
]


def dbn_posteriors_rank_major(a, sigma, gamma, clicks, mask) -> dict[str, jax.Array]:
    """Exact DBN posteriors on rank-major ``[n, S]`` arrays (the E-step's core).

    Two scans over the ``n`` ranks with ``[S]`` carries: a backward one for
    ``X_{r+1}`` and "is there a click below rank r", then a forward one that carries
    ``eps_r`` and computes every posterior of rank ``r`` in the same step (one fused pass per
    rank; no ``[S, n]`` temporaries between the recursions and the posteriors).

    Args:
        a: ``[n, S]`` attractiveness, 0 on padded ranks.
        sigma: ``[n, S]`` satisfaction.
        gamma: scalar continuation probability.
        clicks: ``[n, S]`` 0/1.
        mask: ``[n, S]`` bool, real results.

    Returns:
        dict of ``[n, S]`` arrays (keys as :func:`dbn_posteriors`).

    Example:
        >>> import numpy as np
        >>> from jaxcal.clicks.dbn import dbn_posteriors_rank_major
        >>> a = np.full((2, 1), 0.5)  # two ranks, one session
        >>> clicks, mask = np.array([[1], [0]]), np.ones((2, 1), bool)
        >>> post = dbn_posteriors_rank_major(a, a, 1.0, clicks, mask)
        >>> post["p_sat"][:, 0].tolist()  # satisfied at the last click: 0.5 / (1 - 0.25)
        [0.666..., 0.0]
    """
    c = clicks > 0
    has_next = jnp.concatenate([mask[1:], jnp.zeros_like(mask[:1])], axis=0)

    x_next, later = backward_rank_major(a, gamma, c)  # X_{r+1}; any click at ranks > r

    def fwd(eps, xs):
        a_r, s_r, c_r, xn, above, nxt = xs
        x_r = a_r + (1.0 - a_r) * gamma * xn
        at = c_r & ~above  # the last click
        inv_below = posterior_ratio(1.0, 1.0 - eps * x_r)  # 1 / P(no click at >= r | C_<r)
        inv_at = posterior_ratio(1.0, 1.0 - (1.0 - s_r) * gamma * xn)
        p_attr = jnp.where(c_r, 1.0, jnp.where(above, 0.0, a_r * (1.0 - eps) * inv_below))
        p_sat = jnp.where(at, s_r * inv_at, 0.0)
        # P(E_r = 1, S_r = 0 | C) at / below the last click, before the continuation factor
        f = jnp.where(at, (1.0 - s_r) * inv_at, eps * (1.0 - a_r) * inv_below)
        g_num = jnp.where(nxt, jnp.where(above, 1.0, f * gamma * (1.0 - xn)), 0.0)
        g_den = jnp.where(nxt, jnp.where(above, 1.0, f * (1.0 - gamma * xn)), 0.0)
        skip = posterior_ratio(eps * (1.0 - a_r) * gamma, 1.0 - a_r * eps)
        eps_next = jnp.where(c_r, gamma * (1.0 - s_r), skip)
        return eps_next, (p_attr, p_sat, g_num, g_den, a_r * eps)

    xs = (a, sigma, c, x_next, later, has_next)
    _, out = jax.lax.scan(fwd, jnp.ones_like(a[0]), xs)
    return dict(zip(("p_attr", "p_sat", "gamma_num", "gamma_den", "cond"), out, strict=True))


def dbn_posteriors(alpha, sigma, gamma, clicks, mask):
    """Exact DBN posteriors for ``[S, n]`` per-rank parameters.

    Returns:
        dict with ``p_attr`` ``P(A_r = 1 | C)``, ``p_sat`` ``P(S_r = 1 | C)`` (0 on skips),
        ``gamma_num`` / ``gamma_den`` (0 where rank ``r + 1`` does not exist), ``cond``
        ``P(C_r = 1 | C_<r)``; all ``[S, n]``.

    Example:
        >>> import numpy as np
        >>> from jaxcal.clicks.dbn import dbn_posteriors
        >>> half = np.full((1, 2), 0.5)
        >>> post = dbn_posteriors(half, half, 1.0, np.array([[0, 1]]), np.ones((1, 2), bool))
        >>> post["p_attr"].tolist()  # a skip above a click: not attractive
        [[0.0, 1.0]]
    """
    a = jnp.where(mask, alpha, 0.0)
    post = dbn_posteriors_rank_major(a.T, sigma.T, gamma, clicks.T, mask.T)
    return {k: v.T for k, v in post.items()}


def dbn_stats(params, batch):
    """DBN E-step: ``({"alpha", "sigma", "gamma": (num, den)}, loglik)``.

    Works on the rank-major copies of the log; the four pair sums are one ``segment_sum``
    of ``[S n, 4]`` rows.

    Example:
        >>> import numpy as np
        >>> from jaxcal.clicks._em import make_batch
        >>> from jaxcal.clicks.dbn import dbn_stats
        >>> batch = make_batch(np.array([[0, 1]]), np.array([[1, 0]]), np.ones((1, 2), bool),
        ...                    np.ones(1), None)
        >>> params = {"alpha": np.full(3, 0.5), "sigma": np.full(3, 0.5), "gamma": 0.5}
        >>> stats, loglik = dbn_stats(params, batch)
        >>> stats["sigma"][1].tolist()  # satisfaction trials: the clicks on each pair
        [1.0, 0.0, 0.0]
    """
    qd, clicks, mask = rank_major(batch)
    a = jnp.where(mask, params["alpha"][qd], 0.0)
    post = dbn_posteriors_rank_major(a, params["sigma"][qd], params["gamma"], clicks, mask)
    w = jnp.where(mask, batch.weight[None, :], 0.0)
    wc = w * clicks
    rows = [w * post["p_attr"], w, wc * post["p_sat"], wc]
    sums = pair_sums(rows, qd, params["alpha"].shape[0])
    stats = {
        "alpha": (sums[:, 0], sums[:, 1]),
        "sigma": (sums[:, 2], sums[:, 3]),
        "gamma": (jnp.sum(w * post["gamma_num"]), jnp.sum(w * post["gamma_den"])),
    }
    return stats, chain_loglik(w, post["cond"], clicks, mask)


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


def _dbn_continuation(params, qd, clicks, mask):
    """``gamma X_{r+1}``: the probability of a click below rank ``r`` for a user who goes on
    after it (the satisfaction evidence of :mod:`jaxcal.clicks._empirical`)."""
    a = jnp.where(mask, params["alpha"][qd], 0.0)
    x_next, _ = backward_rank_major(a.T, params["gamma"], (clicks > 0).T)
    return params["gamma"] * x_next.T


def _sdbn_continuation(params, qd, clicks, mask):
    """1: SDBN's closed form takes every last click for a satisfied one."""
    return jnp.ones(qd.shape, params["alpha"].dtype)


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


@fitted_model("DBN", _dbn_conditional, _dbn_marginal, continuation=_dbn_continuation)
class FittedDBN(ClickModelFit):
    """Fitted DBN: ``params["alpha"]``, ``params["sigma"]`` (``[P + 1]``), ``params["gamma"]``.

    Example:
        >>> import jax
        >>> from jaxcal.clicks import DBN, FittedDBN, example_params, simulate
        >>> log = simulate("DBN", example_params("DBN", n_queries=2, key=jax.random.key(0)),
        ...                300, key=jax.random.key(1))
        >>> fitted = DBN().fit(log, max_iter=10)
        >>> isinstance(fitted, FittedDBN), fitted.params["gamma"].shape  # one continuation
        (True, ())
    """

    param_shapes = {"alpha": (PAIRS,), "sigma": (PAIRS,), "gamma": ()}


@fitted_model("SDBN", _sdbn_conditional, _sdbn_marginal, continuation=_sdbn_continuation)
class FittedSDBN(ClickModelFit):
    """Fitted SDBN: ``params["alpha"]``, ``params["sigma"]`` (``[P + 1]``).

    Example:
        >>> from jaxcal.clicks import SDBN, FittedSDBN, Sessions
        >>> s = Sessions.from_arrays([0, 0], [[1, 2], [1, 2]], [[1, 1], [1, 0]])
        >>> fitted = SDBN().fit(s)  # doc 1: clicked twice, the last click once
        >>> isinstance(fitted, FittedSDBN), fitted.pair_value("sigma", 0, 1).tolist()
        (True, [0.5])
    """

    param_shapes = {"alpha": (PAIRS,), "sigma": (PAIRS,)}


@estimator(FittedDBN, dbn_stats, em=True)
class DBN(ClickModel[FittedDBN]):
    """Dynamic Bayesian network click model fitted by exact EM (module docstring); no
    hyperparameters.

    Example:
        >>> import jax
        >>> from jaxcal.clicks import DBN, example_params, simulate
        >>> truth = example_params("DBN", n_queries=2, key=jax.random.key(0))
        >>> log = simulate("DBN", truth, 2000, key=jax.random.key(1))
        >>> fitted = DBN().fit(log, max_iter=30)
        >>> bool(abs(fitted.params["gamma"] - truth["gamma"]) < 0.1)  # true gamma: 0.9
        True
    """


@estimator(FittedSDBN, _sdbn_stats)
class SDBN(ClickModel[FittedSDBN]):
    """Simplified DBN (``gamma = 1``), closed-form MLE (module docstring); no
    hyperparameters.

    Example:
        >>> import jax
        >>> from jaxcal.clicks import SDBN, example_params, simulate
        >>> truth = example_params("SDBN", n_queries=2, key=jax.random.key(0))
        >>> log = simulate("SDBN", truth, 500, key=jax.random.key(1))
        >>> SDBN().fit(log).predict_conditional(log).shape
        (500, 10)
    """
