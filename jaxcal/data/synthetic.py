r"""A simulator of implicit feedback with known true preferences and exposure propensities.

The generative model (every user-item pair :math:`(u, i)` of an ``n_users x n_items`` grid):

.. math::

    \mathbf{U}_u, \mathbf{V}_i &\sim \mathcal{N}(0, I_d), \qquad
        x_{ui} = \mathbf{U}_u^\top \mathbf{V}_i / \sqrt{d}
        \quad (\approx \mathcal{N}(0, 1)) \\
    r_{ui} &= \sigma(c_r + \beta\, x_{ui}) \qquad\text{(true preference probability)} \\
    R_{ui} &\sim \mathrm{Bernoulli}(r_{ui}) \qquad\text{(relevance: would the user like it)} \\
    q_i &= \rho_i^{-\alpha}, \quad \rho = \text{a random permutation of } 1..n_\text{items}
        \qquad\text{(Zipf item popularity)} \\
    \omega_{ui} &= \max\bigl(\omega_{\min},\ \sigma(c_o + \log q_i + \gamma\, x_{ui})\bigr)
        \qquad\text{(exposure propensity, absolute)} \\
    O_{ui} &\sim \mathrm{Bernoulli}(\omega_{ui}), \qquad Y_{ui} = O_{ui} R_{ui}
        \qquad\text{(exposure; observed click / positive)} \\
    s_{ui} &= a \, \frac{\operatorname{asinh}\bigl(\kappa\,(c_r + \beta x_{ui}
        + \tau \varepsilon_{ui})\bigr)}{\kappa} + b,
        \quad \varepsilon_{ui} \sim \mathcal{N}(0, 1)
        \qquad\text{(ranking score)}

The offsets :math:`c_r` and :math:`c_o` are solved by bisection so that the mean true
preference equals ``base_rate`` and the mean propensity equals ``exposure_rate`` on the
realised factors. Exposure is missing-not-at-random: popular items (small rank
:math:`\rho_i`) are shown far more often, and with ``exposure_relevance`` :math:`\gamma > 0`
liked items are shown more often too. The score is a noisy (:math:`\tau`), monotonically
distorted (:math:`\kappa`; ``asinh`` compresses the tails, so the true logit is not linear
in the score) and affinely rescaled (:math:`a, b`) version of the true logit: unbounded real
numbers like a matrix-factorisation model's scores, informative but miscalibrated.

Because :math:`E[Y_{ui} \mid s] = E[\omega_{ui} r_{ui} \mid s] \ll E[r_{ui} \mid s]`, a
calibrator fitted naively on clicks under-estimates preference; the IPS loss with the true
:math:`\omega_{ui}` is unbiased for the ideal loss on :math:`R` (Schnabel et al. 2016;
Saito et al. 2020; Kweon, Kang and Yu, AAAI 2022).

Example (fit on ``data.scores[v]``, ``data.clicks[v]`` with ``propensity=data.propensity[v]``,
evaluate on ``data.scores[t]`` against ``data.relevance[t]``, ideal missing-at-random labels):
    >>> import jax
    >>> from jaxcal.data import simulate_preferences
    >>> k_data, k_split = jax.random.split(jax.random.key(0))
    >>> data = simulate_preferences(n_users=200, n_items=300, key=k_data)
    >>> split = data.split(validation_fraction=0.5, key=k_split)
    >>> v, t = split.validation, split.test  # indices of the pairs
    >>> v.shape, t.shape
    ((30000,), (30000,))
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxcal._pytree import pytree_dataclass, static_field
from jaxcal._rng import numpy_rng
from jaxcal._validation import check_key

__all__ = ["SyntheticData", "Split", "simulate_preferences"]


class Split(NamedTuple):
    """Disjoint index arrays into the pairs of a :class:`SyntheticData`
    (:meth:`SyntheticData.split`).

    Example:
        >>> import jax
        >>> from jaxcal.data import simulate_preferences
        >>> data = simulate_preferences(n_users=4, n_items=5, key=jax.random.key(0))
        >>> split = data.split(validation_fraction=0.25, key=jax.random.key(1))
        >>> split.validation.size, split.test.size
        (5, 15)
    """

    validation: np.ndarray  #: pairs for fitting a calibrator (labels: clicks, MNAR)
    test: np.ndarray  #: pairs for evaluation (labels: relevance, the ideal MAR labels)


@pytree_dataclass
class SyntheticData:
    """Simulated implicit feedback on all ``n_users * n_items`` pairs (flat ``[n]`` arrays).

    Fields ``users``, ``items``: pair indices. ``true_prob``: :math:`r_{ui}`. ``relevance``:
    :math:`R_{ui}`. ``propensity``: :math:`\\omega_{ui}` (absolute). ``exposure``:
    :math:`O_{ui}`. ``clicks``: :math:`Y = O R`. ``scores``: ranking scores :math:`s_{ui}`.
    ``item_popularity``: ``[n_items]`` Zipf weights :math:`q_i`. ``item_counts``:
    ``[n_items]`` observed positives per item :math:`\\sum_u Y_{ui}` (the input of
    ``jaxcal.debias.popularity_propensity``). ``settings``: the generating parameters.

    Made by :func:`simulate_preferences`.

    Example:
        >>> import jax
        >>> from jaxcal.data import simulate_preferences
        >>> data = simulate_preferences(n_users=3, n_items=4, key=jax.random.key(0))
        >>> data.n_pairs, data.scores.shape, data.item_counts.shape
        (12, (12,), (4,))
        >>> bool((data.clicks <= data.relevance).all())  # a click needs relevance
        True
    """

    users: jax.Array
    items: jax.Array
    true_prob: jax.Array
    relevance: jax.Array
    propensity: jax.Array
    exposure: jax.Array
    clicks: jax.Array
    scores: jax.Array
    item_popularity: jax.Array
    item_counts: jax.Array
    n_users: int = static_field(default=0)
    n_items: int = static_field(default=0)
    settings: tuple = static_field(default=())

    @property
    def n_pairs(self) -> int:
        """Number of user-item pairs (``n_users * n_items``).

        Example:
            >>> import jax
            >>> from jaxcal.data import simulate_preferences
            >>> simulate_preferences(n_users=3, n_items=4, key=jax.random.key(0)).n_pairs
            12
        """
        return self.n_users * self.n_items

    def split(self, *, key: jax.Array, validation_fraction: float = 0.5) -> Split:
        """Reproducible random split of the pairs into validation and test.

        Validation pairs are meant to be used with their missing-not-at-random clicks
        (``clicks``, ``propensity``); test pairs with their ideal labels (``relevance``, or
        ``true_prob``), i.e. as a missing-at-random test set like Yahoo!R3's or Coat's.

        Args:
            key: a JAX PRNG key (``jax.random.key(seed)``); the permutation of the pairs is
                drawn by :func:`jaxcal._rng.numpy_rng` of it, so the same key gives the same
                split.
            validation_fraction: share of pairs in the validation part, in (0, 1).

        Returns:
            :class:`Split` of sorted, disjoint int64 index arrays covering every pair.

        Raises:
            ValueError: ``key`` is not a JAX PRNG key, or ``validation_fraction`` is
                outside (0, 1) or leaves a part empty.

        Example:
            >>> import jax, numpy as np
            >>> from jaxcal.data import simulate_preferences
            >>> data = simulate_preferences(n_users=10, n_items=20, key=jax.random.key(0))
            >>> split = data.split(validation_fraction=0.3, key=jax.random.key(1))
            >>> split.validation.size, split.test.size
            (60, 140)
            >>> np.array_equal(np.union1d(split.validation, split.test), np.arange(200))
            True
        """
        rng = numpy_rng(key)
        if not 0.0 < validation_fraction < 1.0:
            raise ValueError(f"validation_fraction must be in (0, 1); got {validation_fraction}.")
        n = self.n_pairs
        n_val = round(validation_fraction * n)
        if n_val == 0 or n_val == n:
            raise ValueError(
                f"validation_fraction={validation_fraction} leaves an empty part of {n} pairs."
            )
        perm = rng.permutation(n)
        return Split(np.sort(perm[:n_val]), np.sort(perm[n_val:]))


def _bisect(f, lo: float, hi: float, n_iter: int = 80):
    """Root of the increasing function ``f`` on [lo, hi] by fixed-iteration bisection."""

    def body(_, bounds):
        lo, hi = bounds
        mid = 0.5 * (lo + hi)
        below = f(mid) < 0
        return jnp.where(below, mid, lo), jnp.where(below, hi, mid)

    lo, hi = jax.lax.fori_loop(0, n_iter, body, (jnp.asarray(lo), jnp.asarray(hi)))
    return 0.5 * (lo + hi)


@partial(jax.jit, static_argnames=("n_users", "n_items", "n_factors"))
def _simulate(
    key, *, n_users, n_items, n_factors, base_rate, preference_scale, popularity_power,
    exposure_rate, exposure_relevance, min_propensity, score_noise, score_distortion,
    score_scale, score_shift,
):  # fmt: skip
    k_u, k_v, k_rank, k_r, k_o, k_eps = jax.random.split(key, 6)
    dtype = jnp.result_type(float)
    users_f = jax.random.normal(k_u, (n_users, n_factors), dtype)
    items_f = jax.random.normal(k_v, (n_items, n_factors), dtype)
    x = (users_f @ items_f.T / math.sqrt(n_factors)).reshape(-1)

    c_r = _bisect(lambda c: jnp.mean(jax.nn.sigmoid(c + preference_scale * x)) - base_rate,
                  -30.0, 30.0)  # fmt: skip
    logit = c_r + preference_scale * x
    true_prob = jax.nn.sigmoid(logit)
    relevance = jax.random.bernoulli(k_r, true_prob).astype(dtype)

    rank = jax.random.permutation(k_rank, n_items) + 1
    log_pop = -popularity_power * jnp.log(rank.astype(dtype))
    exposure_logit = log_pop[jnp.tile(jnp.arange(n_items), n_users)] + exposure_relevance * x

    def omega(c):
        return jnp.maximum(min_propensity, jax.nn.sigmoid(c + exposure_logit))

    c_o = _bisect(lambda c: jnp.mean(omega(c)) - exposure_rate, -60.0, 60.0)
    propensity = omega(c_o)
    exposure = jax.random.bernoulli(k_o, propensity).astype(dtype)
    clicks = exposure * relevance

    noisy = logit + score_noise * jax.random.normal(k_eps, logit.shape, dtype)
    safe_k = jnp.where(score_distortion > 0, score_distortion, 1.0)
    noisy = jnp.where(score_distortion > 0, jnp.arcsinh(safe_k * noisy) / safe_k, noisy)
    scores = score_scale * noisy + score_shift
    counts = clicks.reshape(n_users, n_items).sum(0)
    return true_prob, relevance, propensity, exposure, clicks, scores, jnp.exp(log_pop), counts


def simulate_preferences(
    *,
    n_users: int,
    n_items: int,
    key: jax.Array,
    n_factors: int = 8,
    base_rate: float = 0.1,
    preference_scale: float = 2.0,
    popularity_power: float = 1.0,
    exposure_rate: float = 0.2,
    exposure_relevance: float = 0.5,
    min_propensity: float = 0.02,
    score_noise: float = 0.7,
    score_distortion: float = 0.6,
    score_scale: float = 1.0,
    score_shift: float = 0.0,
) -> SyntheticData:
    r"""Simulate implicit feedback with known truth (the model is in the module docstring).

    Args:
        n_users: number of users (>= 1).
        n_items: number of items (>= 2).
        key: a JAX PRNG key (``jax.random.key(seed)``): the same key gives the same data.
        n_factors: latent dimension :math:`d`.
        base_rate: mean true preference :math:`\bar r`, in (0, 1).
        preference_scale: :math:`\beta`, spread of the true preference logits (> 0).
        popularity_power: Zipf exponent :math:`\alpha` of item popularity (>= 0; 0 = uniform).
        exposure_rate: mean propensity :math:`\bar\omega`, in (min_propensity, 1).
        exposure_relevance: :math:`\gamma`, extra exposure of liked items (any real).
        min_propensity: floor :math:`\omega_{\min}` of the propensities, in (0, 1); bounds
            the IPS weights by :math:`1/\omega_{\min}`.
        score_noise: :math:`\tau`, noise of the ranking scores on the logit scale (>= 0).
        score_distortion: :math:`\kappa` of the ``asinh`` distortion (>= 0; 0 = none).
        score_scale: :math:`a > 0`, scale of the scores.
        score_shift: :math:`b`, shift of the scores.

    Returns:
        A :class:`SyntheticData` (float arrays in JAX's default float dtype).

    Raises:
        ValueError: ``key`` is not a JAX PRNG key, or a parameter is out of range.

    Example:
        >>> import jax
        >>> from jaxcal.data import simulate_preferences
        >>> key = jax.random.key(0)
        >>> data = simulate_preferences(n_users=200, n_items=300, key=key, base_rate=0.2)
        >>> round(float(data.true_prob.mean()), 3)
        0.2
    """
    key = check_key(key)
    for name, value, lo in (("n_users", n_users, 1), ("n_items", n_items, 2),
                            ("n_factors", n_factors, 1)):  # fmt: skip
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
            raise ValueError(f"{name} must be an integer >= {lo}; got {value!r}.")
    values = dict(
        base_rate=base_rate, preference_scale=preference_scale,
        popularity_power=popularity_power, min_propensity=min_propensity,
        exposure_rate=exposure_rate, score_noise=score_noise,
        score_distortion=score_distortion, score_scale=score_scale,
        exposure_relevance=exposure_relevance, score_shift=score_shift,
    )  # fmt: skip
    checks = {
        "base_rate": 0 < base_rate < 1,
        "preference_scale": preference_scale > 0,
        "popularity_power": popularity_power >= 0,
        "min_propensity": 0 < min_propensity < 1,
        "exposure_rate": min_propensity < exposure_rate < 1,
        "score_noise": score_noise >= 0,
        "score_distortion": score_distortion >= 0,
        "score_scale": score_scale > 0,
        "exposure_relevance": math.isfinite(exposure_relevance),
        "score_shift": math.isfinite(score_shift),
    }
    bad = [k for k, ok in checks.items() if not ok]
    if bad:
        given = ", ".join(f"{k}={values[k]!r}" for k in bad)
        raise ValueError(
            f"parameter(s) out of range: {given} (see the docstring of simulate_preferences)."
        )
    settings = dict(
        base_rate=float(base_rate),
        preference_scale=float(preference_scale),
        popularity_power=float(popularity_power),
        exposure_rate=float(exposure_rate),
        exposure_relevance=float(exposure_relevance),
        min_propensity=float(min_propensity),
        score_noise=float(score_noise),
        score_distortion=float(score_distortion),
        score_scale=float(score_scale),
        score_shift=float(score_shift),
    )
    out = _simulate(
        key, n_users=int(n_users), n_items=int(n_items), n_factors=int(n_factors), **settings
    )
    true_prob, relevance, propensity, exposure, clicks, scores, popularity, counts = out
    n = int(n_users) * int(n_items)
    return SyntheticData(
        users=jnp.repeat(jnp.arange(n_users), n_items),
        items=jnp.tile(jnp.arange(n_items), n_users),
        true_prob=true_prob,
        relevance=relevance,
        propensity=propensity,
        exposure=exposure,
        clicks=clicks,
        scores=scores,
        item_popularity=popularity,
        item_counts=counts,
        n_users=int(n_users),
        n_items=int(n_items),
        settings=tuple(sorted({**settings, "n_factors": int(n_factors), "n_pairs": n}.items())),
    )
