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

import jax
import jax.numpy as jnp

from jaxcal.clicks._base import PAIRS, ClickModel, ClickModelFit
from jaxcal.clicks._chain import backward_rank_major, forward, marginal, posterior_ratio
from jaxcal.clicks._declare import estimator, fitted_model
from jaxcal.clicks._em import rank_major
from jaxcal.clicks._stats import pair_sums

__all__ = ["CCM", "FittedCCM", "ccm_posteriors", "ccm_posteriors_rank_major", "ccm_stats"]


def _chain_params(alpha, tau, mask):
    a = jnp.where(mask, alpha, 0.0)
    kappa = (1.0 - a) * tau[1] + a * tau[2]
    return a, kappa, jnp.broadcast_to(tau[0], a.shape)


def _rank_step(tau, eps, a_r, c_r, xn, above, nxt):
    """One rank of the forward recursion on ``[S]`` rows: ``eps_{r+1}`` and the
    posteriors of rank ``r``, ``(p_attr, p_rel, cond, tau1_num, tau2_num, tau3_num,
    tau1_den, tau2_den, tau3_den)``, from ``eps_r``, the attractiveness, the clicks,
    ``X_{r+1}`` (``xn``), whether a click lies below (``above``) and whether rank ``r + 1``
    exists (``nxt``)."""
    t1, t2, t3 = tau[0], tau[1], tau[2]
    x_r = a_r + (1.0 - a_r) * t1 * xn
    kappa = (1.0 - a_r) * t2 + a_r * t3
    inv_below = posterior_ratio(1.0, 1.0 - eps * x_r)
    inv_z = posterior_ratio(1.0, 1.0 - kappa * xn)
    r_above = posterior_ratio(a_r * t3, a_r * t3 + (1.0 - a_r) * t2)
    p_attr = jnp.where(c_r, 1.0, jnp.where(above, 0.0, a_r * (1.0 - eps) * inv_below))
    p_rel = jnp.where(c_r, jnp.where(above, r_above, a_r * (1.0 - t3 * xn) * inv_z), 0.0)
    skip = ~c_r & nxt
    click = c_r & nxt
    eb = eps * (1.0 - a_r) * inv_below
    t1n = jnp.where(skip, jnp.where(above, 1.0, eb * t1 * (1.0 - xn)), 0.0)
    t1d = jnp.where(skip, jnp.where(above, 1.0, eb * (1.0 - t1 * xn)), 0.0)
    last = (1.0 - a_r) * inv_z  # not relevant, at the last click
    t2n = jnp.where(click, jnp.where(above, 1.0 - r_above, last * t2 * (1.0 - xn)), 0.0)
    t2d = jnp.where(click, jnp.where(above, 1.0 - r_above, last * (1.0 - t2 * xn)), 0.0)
    rel = a_r * inv_z  # relevant, at the last click
    t3n = jnp.where(click, jnp.where(above, r_above, rel * t3 * (1.0 - xn)), 0.0)
    t3d = jnp.where(click, jnp.where(above, r_above, rel * (1.0 - t3 * xn)), 0.0)
    eps_next = jnp.where(c_r, kappa, posterior_ratio(eps * (1.0 - a_r) * t1, 1.0 - a_r * eps))
    return eps_next, (p_attr, p_rel, a_r * eps, t1n, t2n, t3n, t1d, t2d, t3d)


def _backward(a, tau, clicks, mask):
    """The forward scan's inputs besides ``a``: the clicks (bool), ``X_{r+1}``, "a click
    below rank r" and whether rank ``r + 1`` exists, all ``[n, S]``."""
    c = clicks > 0
    has_next = jnp.concatenate([mask[1:], jnp.zeros_like(mask[:1])], axis=0)
    x_next, later = backward_rank_major(a, tau[0], c)  # X_{r+1}; any click at ranks > r
    return c, x_next, later, has_next


def ccm_posteriors_rank_major(a, tau, clicks, mask) -> dict[str, jax.Array]:
    """Exact CCM posteriors on rank-major ``[n, S]`` arrays (the E-step's core).

    As :func:`jaxcal.clicks.dbn.dbn_posteriors_rank_major`: a backward scan for
    ``X_{r+1}`` and "a click below rank r", then a forward scan carrying ``eps_r`` that
    computes every posterior of rank ``r`` in the same step.

    Args:
        a: ``[n, S]`` attractiveness, 0 on padded ranks.
        tau: ``[3]`` continuation probabilities.
        clicks: ``[n, S]`` 0/1.
        mask: ``[n, S]`` bool, real results.

    Returns:
        dict of ``[n, S]`` arrays: ``p_attr``, ``p_rel``, ``cond`` and ``tau{k}_num`` /
        ``tau{k}_den`` for ``k = 1, 2, 3``.

    Example:
        >>> import numpy as np
        >>> from jaxcal.clicks.ccm import ccm_posteriors_rank_major
        >>> a, tau = np.full((2, 1), 0.5), np.array([1.0, 0.5, 0.5])
        >>> post = ccm_posteriors_rank_major(a, tau, np.array([[1], [1]]), np.ones((2, 1), bool))
        >>> post["cond"][:, 0].tolist()  # P(C_2 = 1 | C_1 = 1) = 0.5 (tau_2 = tau_3) * 0.5
        [0.5, 0.25]
    """
    xs = (a, *_backward(a, tau, clicks, mask))
    _, out = jax.lax.scan(lambda eps, x: _rank_step(tau, eps, *x), jnp.ones_like(a[0]), xs)
    keys = ("p_attr", "p_rel", "cond", "tau1_num", "tau2_num", "tau3_num")
    keys += ("tau1_den", "tau2_den", "tau3_den")
    return dict(zip(keys, out, strict=True))


def ccm_posteriors(alpha, tau, clicks, mask):
    """Exact CCM posteriors and transition statistics for ``[S, n]`` per-rank ``alpha``.

    Returns:
        dict with ``p_attr`` ``P(A_r = 1 | C)``, ``p_rel`` ``P(R_r = 1 | C)`` (0 on skips),
        ``tau_num`` / ``tau_den`` ``[3, S, n]`` and ``cond`` ``P(C_r = 1 | C_<r)``.

    Example:
        >>> import numpy as np
        >>> from jaxcal.clicks.ccm import ccm_posteriors
        >>> half, tau = np.full((1, 2), 0.5), np.array([1.0, 0.5, 0.5])
        >>> post = ccm_posteriors(half, tau, np.array([[0, 1]]), np.ones((1, 2), bool))
        >>> post["tau_num"].shape, post["p_attr"].tolist()  # a skip above a click
        ((3, 1, 2), [[0.0, 1.0]])
    """
    a = jnp.where(mask, alpha, 0.0)
    post = ccm_posteriors_rank_major(a.T, tau, clicks.T, mask.T)
    return {
        "p_attr": post["p_attr"].T,
        "p_rel": post["p_rel"].T,
        "tau_num": jnp.stack([post[f"tau{k}_num"].T for k in (1, 2, 3)]),
        "tau_den": jnp.stack([post[f"tau{k}_den"].T for k in (1, 2, 3)]),
        "cond": post["cond"].T,
    }


def ccm_stats(params, batch):
    """CCM E-step: ``({"alpha", "tau": (num, den)}, loglik)`` on the rank-major log.

    The posteriors of :func:`ccm_posteriors_rank_major`, summed as they are made: each step
    of the forward scan emits its rank's weighted sums of the transition posteriors and of
    the log-likelihood, and per entry only the attractiveness evidence (summed by pair), so
    that no ``[n, S]`` array of posteriors is written and read back (10-20% less time per
    EM iteration on CPU at 1e5 sessions). The same sums up to the order of float additions.

    Example:
        >>> import numpy as np
        >>> from jaxcal.clicks._em import make_batch
        >>> from jaxcal.clicks.ccm import ccm_stats
        >>> batch = make_batch(np.array([[0, 1]]), np.array([[1, 0]]), np.ones((1, 2), bool),
        ...                    np.ones(1), None)
        >>> params = {"alpha": np.full(3, 0.5), "tau": np.array([0.5, 0.5, 0.5])}
        >>> stats, loglik = ccm_stats(params, batch)
        >>> stats["tau"][1].shape  # denominators of tau_1, tau_2, tau_3
        (3,)
    """
    qd, clicks, mask = rank_major(batch)
    a = jnp.where(mask, params["alpha"][qd], 0.0)
    tau = params["tau"]
    w = jnp.where(mask, batch.weight[None, :], 0.0)
    wc = w * clicks

    def fwd(eps, xs):
        a_r, c_r, xn, above, nxt, m_r, w_r, wc_r = xs
        eps, (p_attr, p_rel, cond, *trans) = _rank_step(tau, eps, a_r, c_r, xn, above, nxt)
        q = jnp.where(c_r, cond, jnp.where(m_r, 1.0 - cond, 1.0))  # as chain_loglik
        # one reduction per sum: a stacked [7, S] array makes the step twice as slow
        sums = jnp.stack([jnp.sum(w_r * v) for v in (*trans, jnp.log(q))])
        return eps, (w_r * p_attr + wc_r * p_rel, sums)

    xs = (a, *_backward(a, tau, clicks, mask), mask, w, wc)
    _, (evidence, sums) = jax.lax.scan(fwd, jnp.ones_like(a[0]), xs)
    counts = pair_sums([evidence, w + wc], qd, params["alpha"].shape[0])
    total = jnp.sum(sums, axis=0)  # 3 numerators, 3 denominators, the log-likelihood
    return {"alpha": (counts[:, 0], counts[:, 1]), "tau": (total[:3], total[3:6])}, total[6]


def _conditional(params, qd, clicks, mask):
    return forward(*_chain_params(params["alpha"][qd], params["tau"], mask), clicks)[0]


def _marginal(params, qd, clicks, mask):
    return marginal(*_chain_params(params["alpha"][qd], params["tau"], mask))


@fitted_model("CCM", _conditional, _marginal)
class FittedCCM(ClickModelFit):
    """Fitted CCM: ``params["alpha"]`` (``[P + 1]``), ``params["tau"]`` (``[3]``).

    Example:
        >>> import jax
        >>> from jaxcal.clicks import CCM, FittedCCM, example_params, simulate
        >>> log = simulate("CCM", example_params("CCM", n_queries=2, key=jax.random.key(0)),
        ...                300, key=jax.random.key(1))
        >>> fitted = CCM().fit(log, max_iter=10)
        >>> isinstance(fitted, FittedCCM), fitted.params["tau"].shape
        (True, (3,))
    """

    param_shapes = {"alpha": (PAIRS,), "tau": (3,)}


@estimator(FittedCCM, ccm_stats, em=True)
class CCM(ClickModel[FittedCCM]):
    """Click chain model fitted by exact EM (module docstring); no hyperparameters.

    Example:
        >>> from jaxcal.clicks import CCM, Sessions
        >>> s = Sessions.from_arrays([0, 0], [[1, 2], [2, 1]], [[1, 1], [0, 1]])
        >>> fitted = CCM().fit(s, max_iter=5)
        >>> p = fitted.predict_marginal(s)
        >>> bool(((p >= 0) & (p <= 1)).all())
        True
    """
