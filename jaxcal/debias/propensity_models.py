r"""Absolute propensity models and the propensity scale.

Notation: :math:`R_{ui}` true preference, :math:`O_{ui}` exposure (the pair was observed /
rated), :math:`Y = O R` implicit positive, :math:`\omega_{ui} = P(O_{ui} = 1)`.

* :func:`matrix_propensity`: absolute propensities given as a user x item matrix (Coat
  ships the authors' estimate).
* :func:`naive_bayes_propensity`: Schnabel et al. (ICML 2016), Naive Bayes with a small
  MAR sample, :math:`P(O = 1 \mid Y = y) = P(Y = y \mid O = 1) P(O = 1) / P(Y = y)`.
* :func:`logistic_propensity`: logistic regression of :math:`O` on user and item features
  (Schnabel et al. 2016, Sec. 5.1), fitted by exact Newton steps in JAX.
* :func:`rescale_propensity`: turn *relative* propensities (popularity, the most popular item
  gets 1) into absolute ones with a given mean exposure, keeping their ranking.
* :func:`holdout_propensity`: the probability that a pair appears as a *validation* positive
  when the validation set is a hold-out share :math:`h` of the observed positives.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal._pytree import pytree_dataclass
from jaxcal._validation import check_real
from jaxcal.data.triples import Interactions, as_matrix

__all__ = [
    "matrix_propensity",
    "exposure_rate",
    "rescale_propensity",
    "holdout_propensity",
    "NaiveBayesPropensity",
    "naive_bayes_propensity",
    "LogisticPropensity",
    "logistic_propensity",
]


def matrix_propensity(
    matrix: ArrayLike, users: ArrayLike | None = None, items: ArrayLike | None = None
) -> np.ndarray:
    """Absolute propensities from a ``[n_users, n_items]`` matrix, validated to lie in (0, 1].

    Args:
        matrix: e.g. ``load_coat().propensities``.
        users, items: optional ``[n]`` pair ids; then the ``[n]`` pair propensities are
            returned, else the whole matrix.

    Raises:
        ValueError: values outside (0, 1], non-finite values, ids out of range.

    Example:
        >>> import numpy as np
        >>> from jaxcal.debias import matrix_propensity
        >>> m = np.array([[0.5, 1.0], [0.25, 0.1]])
        >>> matrix_propensity(m, users=[0, 1], items=[1, 0])
        array([1.  , 0.25])
    """
    m = as_matrix(matrix, "matrix").astype(np.float64)
    if (m <= 0).any() or (m > 1).any():
        raise ValueError(
            f"propensities must lie in (0, 1]; got min {m.min():.6g}, max {m.max():.6g}. "
            "Rescale relative propensities with rescale_propensity first."
        )
    if users is None and items is None:
        return m
    if users is None or items is None:
        raise ValueError("pass both users and items, or neither.")
    u, i = np.asarray(users), np.asarray(items)
    if u.shape != i.shape or u.ndim != 1:
        raise ValueError("users and items must be 1-D arrays of the same length.")
    if u.size and (u.min() < 0 or u.max() >= m.shape[0] or i.min() < 0 or i.max() >= m.shape[1]):
        raise ValueError(f"pair ids out of range for a {m.shape} propensity matrix.")
    return m[u, i]


def exposure_rate(observed: ArrayLike | Interactions) -> float:
    r"""Mean exposure :math:`\bar\omega = \#\{O = 1\} / (n_\text{users} n_\text{items})`:
    the density of an explicit-feedback matrix (every rated pair, whatever the rating, was
    exposed). Coat: 24 / 300 = 0.08.

    Example:
        >>> import numpy as np
        >>> from jaxcal.debias import exposure_rate
        >>> exposure_rate(np.array([[5, 0, 0, 1], [0, 0, 3, 0]]))  # 3 of 8 pairs rated
        0.375
    """
    m = as_matrix(observed, "observed") != 0
    return float(m.mean())


def rescale_propensity(
    relative: ArrayLike, target_rate: float, *, weights: ArrayLike | None = None
) -> np.ndarray:
    r"""Scale relative propensities to absolute ones with mean exposure ``target_rate``.

    Finds the :math:`c > 0` with :math:`\sum_j w_j \min(1, c\,\rho_j) / \sum_j w_j =
    \bar\omega` (exactly: the left side is piecewise linear and increasing in :math:`c`) and
    returns :math:`\min(1, c\,\rho_j)`. The map is increasing, so the ranking of the
    propensities is kept (ties appear only among values clipped at 1). Relative
    propensities fix the *shape* of an IPS calibration map but not its level; this fixes the
    level, given the mean exposure (for explicit feedback: :func:`exposure_rate`).

    Args:
        relative: ``[n]`` positive relative propensities (e.g. ``popularity_propensity``).
        target_rate: :math:`\bar\omega \in (0, 1]`.
        weights: ``[n]`` non-negative weights of each entry in the mean (default equal:
            per-item propensities with every item paired with every user).

    Returns:
        ``[n]`` float64 absolute propensities in (0, 1].

    Raises:
        ValueError: non-positive or non-finite relative propensities, target outside
            (0, 1], negative weights.

    Example:
        >>> import numpy as np
        >>> from jaxcal.debias import rescale_propensity
        >>> rescale_propensity(np.array([1.0, 0.5, 0.25]), 0.35)  # mean 0.35, order kept
        array([0.6 , 0.3 , 0.15])
    """
    rho = np.asarray(relative, dtype=np.float64).ravel()
    if rho.size == 0 or not np.isfinite(rho).all() or (rho <= 0).any():
        raise ValueError("relative propensities must be finite and > 0.")
    if not 0 < check_real(target_rate, "target_rate") <= 1:
        raise ValueError(f"target_rate must lie in (0, 1]; got {target_rate}.")
    w = np.ones_like(rho) if weights is None else np.asarray(weights, np.float64).ravel()
    if w.shape != rho.shape or not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
        raise ValueError("weights must be finite, non-negative, with a positive sum, one each.")
    order = np.argsort(-rho, kind="stable")
    r, ws = rho[order], w[order] / w.sum()
    # With the k largest clipped at 1: mean = W_k + c S_k, W_k = sum_{j<k} w_j,
    # S_k = sum_{j>=k} w_j r_j. Valid when c r_{k-1} >= 1 >= c r_k.
    wk = np.concatenate([[0.0], np.cumsum(ws)])[:-1]
    sk = np.cumsum((ws * r)[::-1])[::-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        c = (target_rate - wk) / sk
    prev = np.concatenate([[np.inf], r[:-1]])
    ok = (c > 0) & (c * r <= 1 + 1e-12) & (c * prev >= 1 - 1e-12)
    if not ok.any():  # target_rate == 1 (up to rounding): everything is exposed
        return np.ones_like(rho)
    scale = c[np.argmax(ok)]
    return np.minimum(1.0, scale * rho).reshape(np.shape(relative))


def holdout_propensity(
    propensity: ArrayLike, holdout_rate: ArrayLike, *, unseen_only: bool = True
) -> np.ndarray:
    r"""Propensity of appearing as a *validation* positive after a hold-out.

    Each observed positive goes to validation with probability :math:`h`, so
    :math:`P(V = 1 \mid R = 1) = h\,\omega`. Calibration is fitted on the pairs *not* in the
    training set (the candidates a recommender ranks); conditioning on that,

    .. math::  \omega^{V} = P(V = 1 \mid R = 1, \text{not in train})
               = \frac{h\,\omega}{1 - (1 - h)\,\omega},

    which ``unseen_only=True`` (default) returns; ``unseen_only=False`` returns
    :math:`h\,\omega` (all pairs, training positives included as negatives). The two agree
    to first order in :math:`\omega`.

    Args:
        propensity: absolute propensities :math:`\omega` in (0, 1] (any shape).
        holdout_rate: :math:`h` in (0, 1], broadcastable (a scalar, or ``[n_users, 1]`` for
            the per-user rates of the seed paper's split, see
            :func:`jaxcal.data.preprocessing.holdout_rate`).

    Returns:
        Float64 array of the broadcast shape, in (0, 1].

    Raises:
        ValueError: ``propensity`` or ``holdout_rate`` outside (0, 1] or not finite.

    Example:
        >>> from jaxcal.debias import holdout_propensity
        >>> holdout_propensity([0.5, 1.0], 0.2)  # 0.2 w / (1 - 0.8 w)
        array([0.16666667, 1.        ])
        >>> holdout_propensity([0.5, 1.0], 0.2, unseen_only=False)
        array([0.1, 0.2])
    """
    omega = np.asarray(propensity, np.float64)
    h = np.asarray(holdout_rate, np.float64)
    if not np.isfinite(omega).all() or (omega <= 0).any() or (omega > 1).any():
        raise ValueError("propensity must lie in (0, 1].")
    if not np.isfinite(h).all() or (h <= 0).any() or (h > 1).any():
        raise ValueError("holdout_rate must lie in (0, 1] (drop users with nothing held out).")
    if unseen_only:
        return np.minimum(h * omega / (1.0 - (1.0 - h) * omega), 1.0)  # <= 1 exactly; rounding
    return np.broadcast_to(h * omega, np.broadcast_shapes(h.shape, omega.shape)).copy()


# --------------------------------------------------------------------------- Naive Bayes


@pytree_dataclass
class NaiveBayesPropensity:
    r"""Per-rating-value propensities :math:`P(O = 1 \mid Y = y)` (Schnabel et al. 2016).

    The result of :func:`naive_bayes_propensity`.

    Attributes:
        levels: ``[L]`` sorted rating values.
        propensity: ``[L]`` propensities for each level.
        observed_rate: :math:`P(O = 1)`.

    Example:
        >>> import numpy as np
        >>> from jaxcal.debias import NaiveBayesPropensity
        >>> model = NaiveBayesPropensity(
        ...     levels=np.array([1.0, 5.0]), propensity=np.array([0.1, 0.6]),
        ...     observed_rate=np.array(0.2))
        >>> np.asarray(model.predict(np.array([5.0, 1.0, 5.0]))).tolist()
        [0.6, 0.1, 0.6]
    """

    levels: jax.Array
    propensity: jax.Array
    observed_rate: jax.Array

    def predict(self, ratings: ArrayLike) -> jax.Array:
        """Propensity of each rating value (any shape); values must be among ``levels``.

        Example:
            >>> import numpy as np
            >>> from jaxcal.debias import naive_bayes_propensity
            >>> observed = np.array([[5, 0, 1, 0], [0, 5, 0, 0]])  # 3 of 8 pairs rated
            >>> mar = np.array([1, 1, 1, 5])  # ratings of uniformly drawn pairs
            >>> model = naive_bayes_propensity(observed, mar)
            >>> np.asarray(model.predict(np.array([1, 5]))).round(3).tolist()
            [0.167, 1.0]
        """
        r = jnp.asarray(ratings)
        if not isinstance(r, jax.core.Tracer):
            bad = ~np.isin(np.asarray(r), np.asarray(self.levels))
            if bad.any():
                raise ValueError(
                    f"rating {np.asarray(r)[bad].ravel()[0]!r} is not among the levels "
                    f"{np.asarray(self.levels).tolist()}."
                )
        idx = jnp.searchsorted(self.levels, r)
        return self.propensity[jnp.clip(idx, 0, self.levels.shape[0] - 1)]


def _values(x: Any, name: str) -> tuple[np.ndarray, int | None]:
    """Observed rating values and the number of pairs (None for a plain 1-D array)."""
    if isinstance(x, Interactions):
        return x.rating, x.n_users * x.n_items
    arr = np.asarray(x)
    if arr.ndim == 1:
        if not np.isfinite(arr.astype(float)).all():
            raise ValueError(f"{name} contains non-finite values.")
        return arr, None
    m = as_matrix(arr, name)
    return m[m != 0], m.size


def naive_bayes_propensity(
    observed: ArrayLike | Interactions,
    mar: ArrayLike | Interactions,
    *,
    n_pairs: int | None = None,
    alpha: float = 0.0,
) -> NaiveBayesPropensity:
    r"""Naive Bayes propensities from MNAR ratings and a small MAR sample (Schnabel et al.).

    .. math::
        P(O = 1 \mid Y = y) = \frac{P(Y = y \mid O = 1)\, P(O = 1)}{P(Y = y)},

    with :math:`P(Y = y \mid O = 1)` and :math:`P(O = 1)` counted on the MNAR data and
    :math:`P(Y = y)` counted on the MAR sample (e.g. 5% of Coat's uniformly random test
    ratings). With ``alpha > 0`` both rating distributions get additive (Laplace)
    smoothing: :math:`(n_y + \alpha) / (n + \alpha L)`. Estimates above 1 (sampling noise)
    are clipped to 1.

    Args:
        observed: the MNAR ratings: a dense matrix (0 = unobserved; its size is the number
            of pairs), :class:`Interactions`, or a 1-D array of observed rating values (then
            ``n_pairs`` is required).
        mar: MAR ratings: a dense matrix (0 = not sampled), :class:`Interactions` or a 1-D
            array of rating values.
        n_pairs: number of user-item pairs (overrides the matrix size).
        alpha: additive smoothing >= 0.

    Returns:
        :class:`NaiveBayesPropensity`.

    Raises:
        ValueError: empty inputs, a level seen in the MNAR data but never in the MAR sample
            with ``alpha = 0``, negative ``alpha``, missing ``n_pairs``.

    Example:
        >>> import numpy as np
        >>> from jaxcal.debias import naive_bayes_propensity
        >>> observed = np.array([[5, 0, 1, 0], [0, 5, 0, 0]])  # 3 of 8 pairs rated
        >>> mar = np.array([1, 1, 1, 5])  # ratings of uniformly drawn pairs
        >>> model = naive_bayes_propensity(observed, mar, alpha=1.0)
        >>> np.asarray(model.levels).tolist(), float(model.observed_rate)
        ([1, 5], 0.375)
    """
    obs, n_obs_pairs = _values(observed, "observed")
    mar_vals, _ = _values(mar, "mar")
    n_pairs = n_obs_pairs if n_pairs is None else int(n_pairs)
    if n_pairs is None:
        raise ValueError("pass n_pairs (the number of user-item pairs) with 1-D ratings.")
    if obs.size == 0 or mar_vals.size == 0:
        raise ValueError("observed and mar ratings must both be non-empty.")
    alpha = check_real(alpha, "alpha", minimum=0.0)
    if obs.size > n_pairs:
        raise ValueError(f"{obs.size} observed ratings but only n_pairs={n_pairs} pairs.")
    levels = np.union1d(obs, mar_vals)
    n_levels = levels.size
    c_obs = np.array([(obs == v).sum() for v in levels], np.float64)
    c_mar = np.array([(mar_vals == v).sum() for v in levels], np.float64)
    if alpha == 0 and ((c_mar == 0) & (c_obs > 0)).any():
        v = levels[np.argmax((c_mar == 0) & (c_obs > 0))]
        raise ValueError(
            f"rating {v!r} occurs in the observed data but never in the MAR sample, so "
            "P(Y = y) is 0; use a larger MAR sample or alpha > 0."
        )
    p_y_obs = (c_obs + alpha) / (obs.size + alpha * n_levels)
    p_y = (c_mar + alpha) / (mar_vals.size + alpha * n_levels)
    p_obs = obs.size / n_pairs
    with np.errstate(divide="ignore", invalid="ignore"):
        prop = np.where(p_y > 0, p_y_obs * p_obs / p_y, 1.0)
    prop = np.minimum(prop, 1.0)
    if (prop <= 0).any():
        v = levels[np.argmax(prop <= 0)]
        raise ValueError(
            f"rating {v!r} never occurs in the observed data, so its propensity is 0; "
            "use alpha > 0."
        )
    return NaiveBayesPropensity(
        levels=jnp.asarray(levels),
        propensity=jnp.asarray(prop),
        observed_rate=jnp.asarray(np.float64(p_obs)),
    )


# --------------------------------------------------------------------------- logistic


@pytree_dataclass
class LogisticPropensity:
    r"""Logistic exposure model :math:`\omega_{ui} = \sigma(b + x_u^\top\beta + z_i^\top\gamma)`.

    The result of :func:`logistic_propensity`: :meth:`predict` gives the propensities of
    every user-item pair, :meth:`predict_logit` their logits
    :math:`b + x_u^\top\beta + z_i^\top\gamma` (the convention of every jaxcal model:
    ``predict`` for the main output, ``predict_logit`` for its logits).

    Attributes:
        intercept: scalar :math:`b`.
        user_coef: ``[p]`` :math:`\beta`.
        item_coef: ``[q]`` :math:`\gamma`.

    Example:
        >>> import numpy as np
        >>> from jaxcal.debias import LogisticPropensity
        >>> model = LogisticPropensity(
        ...     intercept=np.array(-1.0), user_coef=np.array([2.0]), item_coef=np.array([0.5]))
        >>> z = model.predict_logit(np.array([[0.0], [1.0]]), np.array([[0.0], [2.0]]))
        >>> np.asarray(z).tolist()  # b + 2 x_u + 0.5 z_i
        [[-1.0, 0.0], [1.0, 2.0]]
    """

    intercept: jax.Array
    user_coef: jax.Array
    item_coef: jax.Array

    def predict_logit(self, user_features: ArrayLike, item_features: ArrayLike) -> jax.Array:
        r"""``[n_users, n_items]`` exposure logits :math:`b + x_u^\top\beta + z_i^\top\gamma`
        of every user-item pair.

        Example:
            >>> import numpy as np
            >>> from jaxcal.debias import LogisticPropensity
            >>> model = LogisticPropensity(
            ...     intercept=np.array(0.5), user_coef=np.zeros(1), item_coef=np.zeros(2))
            >>> np.asarray(model.predict_logit(np.ones((3, 1)), np.ones((2, 2)))).shape
            (3, 2)
        """
        xu = jnp.asarray(user_features, self.user_coef.dtype)
        xi = jnp.asarray(item_features, self.item_coef.dtype)
        return self.intercept + (xu @ self.user_coef)[:, None] + (xi @ self.item_coef)[None, :]

    def predict(self, user_features: ArrayLike, item_features: ArrayLike) -> jax.Array:
        r"""``[n_users, n_items]`` propensities: the sigmoid of :meth:`predict_logit`.

        Example:
            >>> import numpy as np
            >>> from jaxcal.debias import LogisticPropensity
            >>> model = LogisticPropensity(
            ...     intercept=np.array(0.0), user_coef=np.zeros(1), item_coef=np.zeros(2))
            >>> np.asarray(model.predict(np.ones((1, 1)), np.ones((2, 2)))).tolist()
            [[0.5, 0.5]]
        """
        return jax.nn.sigmoid(self.predict_logit(user_features, item_features))


def _objective(theta, xu, xi, obs, l2, p):
    eta = theta[0] + (xu @ theta[1 : 1 + p])[:, None] + (xi @ theta[1 + p :])[None, :]
    nll = jnp.sum(jax.nn.softplus(eta) - obs * eta)
    return nll + 0.5 * l2 * jnp.sum(theta[1:] ** 2)


@jax.jit
def _fit_logistic(xu, xi, obs, l2, tol):
    """Newton's method with backtracking on the convex penalised log-likelihood.

    The Hessian is assembled from [n_users, n_items] weights without forming the
    (n_users n_items) x (1 + p + q) design: blocks X_u' diag(W 1) X_u, X_u' W X_i,
    X_i' diag(W' 1) X_i. A pseudo-inverse solve handles collinear one-hot features.
    """
    p, q = xu.shape[1], xi.shape[1]
    au = jnp.concatenate([jnp.ones((xu.shape[0], 1), xu.dtype), xu], axis=1)
    penalty = jnp.concatenate([jnp.zeros(1, xu.dtype), jnp.full(p + q, l2, xu.dtype)])

    def grad_hess(theta):
        eta = au @ theta[: 1 + p]
        eta = eta[:, None] + (xi @ theta[1 + p :])[None, :]
        prob = jax.nn.sigmoid(eta)
        g = prob - obs
        w = prob * (1.0 - prob)
        grad = jnp.concatenate([au.T @ g.sum(1), xi.T @ g.sum(0)]) + penalty * theta
        huu = au.T @ (w.sum(1)[:, None] * au)
        hui = au.T @ w @ xi
        hii = xi.T @ (w.sum(0)[:, None] * xi)
        hess = jnp.block([[huu, hui], [hui.T, hii]]) + jnp.diag(penalty)
        return grad, hess

    def loss(theta):
        return _objective(theta, xu, xi, obs, l2, p)

    def cond(state):
        _, decrement, k, t = state
        return (decrement > tol) & (k < 100) & (t > 1e-9)

    def body(state):
        theta, _, k, _ = state
        grad, hess = grad_hess(theta)
        step = -jnp.linalg.pinv(hess, hermitian=True) @ grad
        decrement = -0.5 * grad @ step  # half the squared Newton decrement: predicted decrease
        f0 = loss(theta)

        def bt_cond(t):  # Armijo: f(theta + t d) <= f0 + 0.25 t grad'd
            return (loss(theta + t * step) > f0 - 0.5 * t * decrement) & (t > 1e-10)

        t = jax.lax.while_loop(bt_cond, lambda t: 0.5 * t, jnp.asarray(1.0, theta.dtype))
        return theta + t * step, decrement, k + 1, t

    one = jnp.asarray(1.0, xu.dtype)
    theta0 = jnp.zeros(1 + p + q, xu.dtype)
    theta, *_ = jax.lax.while_loop(cond, body, (theta0, jnp.inf * one, 0, one))
    return theta


def logistic_propensity(
    observed: ArrayLike | Interactions,
    user_features: ArrayLike,
    item_features: ArrayLike,
    *,
    l2: float = 1.0,
    tol: float | None = None,
) -> LogisticPropensity:
    r"""Logistic regression of exposure on user and item features.

    Minimises, over every user-item pair,

    .. math::
        \sum_{u,i} [\operatorname{softplus}(\eta_{ui}) - O_{ui}\eta_{ui}]
        + \tfrac{\lambda}{2}(\|\beta\|^2 + \|\gamma\|^2), \quad
        \eta_{ui} = b + x_u^\top\beta + z_i^\top\gamma,

    the objective of scikit-learn's ``LogisticRegression(C=1/l2)`` on the rows
    :math:`[x_u, z_i]` (intercept not penalised), by exact Newton steps with backtracking
    in JAX (no design matrix of all pairs is formed). Schnabel et al. (ICML 2016) estimate
    Coat's propensities this way from its features.

    Args:
        observed: ``[n_users, n_items]`` exposure indicators (non-zero = observed / rated),
            or :class:`Interactions` of every observed pair.
        user_features: ``[n_users, p]`` (e.g. ``load_coat().user_features``).
        item_features: ``[n_items, q]``.
        l2: ridge penalty :math:`\lambda \ge 0` on the slopes (default 1, scikit-learn's
            ``C = 1``). With collinear one-hot blocks and ``l2 = 0`` the coefficients are
            not identified but the fitted propensities are (minimum-norm Newton steps).
        tol: stop when the Newton decrement falls below it (default 1e-16 in float64,
            1e-8 in float32); one more Newton step is taken after that.

    Returns:
        :class:`LogisticPropensity`; ``.predict(user_features, item_features)`` gives the
        ``[n_users, n_items]`` propensities.

    Raises:
        ValueError: shape mismatches, non-finite features, all pairs observed or none,
            ``l2`` not a finite number >= 0, ``tol`` not a finite number > 0.

    Example:
        >>> import numpy as np
        >>> from jaxcal.debias import logistic_propensity
        >>> rng = np.random.default_rng(0)
        >>> xu, xi = rng.normal(size=(40, 2)), rng.normal(size=(30, 1))
        >>> eta = -1.0 + (xu @ [1.0, -0.5])[:, None] + (xi @ [0.8])[None, :]
        >>> omega = 1 / (1 + np.exp(-eta))
        >>> observed = rng.uniform(size=(40, 30)) < omega
        >>> model = logistic_propensity(observed, xu, xi, l2=0.1)
        >>> model.predict(xu, xi).shape
        (40, 30)
    """
    obs = (as_matrix(observed, "observed") != 0).astype(np.float64)
    xu = np.asarray(user_features, np.float64)
    xi = np.asarray(item_features, np.float64)
    if xu.ndim != 2 or xu.shape[0] != obs.shape[0]:
        raise ValueError(
            f"user_features must be [n_users={obs.shape[0]}, p]; got shape {xu.shape}."
        )
    if xi.ndim != 2 or xi.shape[0] != obs.shape[1]:
        raise ValueError(
            f"item_features must be [n_items={obs.shape[1]}, q]; got shape {xi.shape}."
        )
    if not (np.isfinite(xu).all() and np.isfinite(xi).all()):
        raise ValueError("features contain non-finite values.")
    if obs.all() or not obs.any():
        raise ValueError("observed must contain both observed and unobserved pairs.")
    l2 = check_real(l2, "l2", minimum=0.0)
    if tol is not None:
        tol = check_real(tol, "tol", minimum=0.0, strict=True)
    dtype = jnp.asarray(0.0).dtype
    if tol is None:
        tol = 1e-16 if dtype == jnp.float64 else 1e-8
    theta = _fit_logistic(
        jnp.asarray(xu, dtype),
        jnp.asarray(xi, dtype),
        jnp.asarray(obs, dtype),
        jnp.asarray(l2, dtype),
        jnp.asarray(tol, dtype),
    )
    p = xu.shape[1]
    return LogisticPropensity(
        intercept=theta[0], user_coef=theta[1 : 1 + p], item_coef=theta[1 + p :]
    )
