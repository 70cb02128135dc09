r"""Explicit ratings: simulators with a known monotone transform, and train / validation /
test splits.

Simulated designs (our own, built from the description of the synthetic sets SD-1 and SD-2
in Hiranandani, Somani, Koyejo, Acharyya, *Clustered Monotone Transforms for Rating
Factorization*, WSDM 2019, whose details are not published). A low-rank score matrix

.. math:: x_{ui} = \mathbf u_u^\top \mathbf v_i, \qquad
   \mathbf u_u \sim \mathcal N(0, I_d / d),\ \mathbf v_i \sim \mathcal N(0, I_d)

(so each score is about standard normal) is observed with Gaussian noise,
:math:`\tilde x_{ui} = x_{ui} + \sigma_\varepsilon \varepsilon_{ui}`, and turned into a
*continuous rating* in :math:`[1, L]` by the monotone transform of the user's segment
:math:`s`,

.. math:: c_s(x) = 1 + (L - 1)\, h_s\!\left(\min\!\left(1, \max\!\left(0,
   \frac{x - x_\text{lo}}{x_\text{hi} - x_\text{lo}}\right)\right)\right), \qquad
   x_\text{hi} = -x_\text{lo} = 1.2\,\tau, \quad \tau = \sqrt{1 + \sigma_\varepsilon^2},

with :math:`h_s` an increasing bijection of [0, 1] (``k`` its curvature):

* concave: :math:`h(t) = (1 - e^{-kt}) / (1 - e^{-k})`;
* convex: :math:`h(t) = (e^{kt} - 1) / (e^{k} - 1)`;
* S-shaped: :math:`h(t) = (\sigma(k(t - \tfrac12)) - \sigma(-\tfrac k2)) /
  (\sigma(\tfrac k2) - \sigma(-\tfrac k2))`, :math:`\sigma` the logistic function;
* inverse-S: the inverse function of the S-shaped one.

The observed rating is the nearest level, :math:`r = \mathrm{round}(c_s(\tilde x))`, i.e.
:math:`r` when :math:`\tilde x` lies between the thresholds
:math:`t_{s, r-1} = c_s^{-1}(r - \tfrac12)` and :math:`t_{s, r} = c_s^{-1}(r + \tfrac12)`;
since :math:`\tilde x / \tau` is about standard normal, every level is used. The truth a
learned transform :math:`z` of the rating scale should match up to an affine map is
``level_scores[s, r - 1]`` :math:`= c_s^{-1}(r)`, the latent score at which segment
:math:`s`'s continuous rating equals level :math:`r`: :math:`x_\text{lo}` for level 1 and
:math:`x_\text{hi}` for level :math:`L` in every segment, the interior levels where the
segment's shape puts them.

* ``"sd1"``: one non-linear transform for every user (concave, ``k = 2``: high ratings are
  common, as in real rating data).
* ``"sd2"``: users split evenly at random into ``n_segments`` segments (default 3), each with
  its own transform, in the order of :data:`SEGMENT_TRANSFORMS`: concave (``k = 2``), convex
  (2), S-shaped (6), inverse-S (6), strongly concave (5), strongly convex (5). No single
  transform (no affine map of one) fits all segments.

Each (user, item) pair is observed independently with probability ``density``; every user
gets at least two ratings (the two items with the smallest uniform draws are always
observed), so that per-user quantities are defined.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import numpy as np
from jax.typing import ArrayLike

from jaxcal._rng import numpy_rng
from jaxcal._validation import check_int
from jaxcal.data.triples import Interactions

__all__ = ["RatingSimulation", "simulate_ratings", "split_ratings", "SEGMENT_TRANSFORMS"]

DESIGNS = ("sd1", "sd2")

SEGMENT_TRANSFORMS = (
    ("concave", 2.0),
    ("convex", 2.0),
    ("s", 6.0),
    ("inverse_s", 6.0),
    ("concave", 5.0),
    ("convex", 5.0),
)
"""``(shape, k)`` of the segments' transforms :math:`h_s`, in order (module docstring)."""

_SPAN = 1.2  # x_hi = -x_lo = _SPAN * tau
_MIN_PER_USER = 2


def _logit(p):
    return np.log(p) - np.log1p(-p)


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def _s_curve(t, k, *, inverse: bool):
    lo, hi = _sigmoid(-k / 2), _sigmoid(k / 2)
    if inverse:
        return 0.5 + _logit(lo + t * (hi - lo)) / k
    return (_sigmoid(k * (t - 0.5)) - lo) / (hi - lo)


def _shape(t: np.ndarray, name: str, k: float, *, inverse: bool = False) -> np.ndarray:
    """:math:`h(t)` (or :math:`h^{-1}(t)`) of a segment shape on [0, 1], closed form."""
    t = np.asarray(t, dtype=np.float64)
    if name == "concave":
        c = -math.expm1(-k)
        return -np.log1p(-t * c) / k if inverse else -np.expm1(-k * t) / c
    if name == "convex":
        c = math.expm1(k)
        return np.log1p(t * c) / k if inverse else np.expm1(k * t) / c
    if name == "s":
        return _s_curve(t, k, inverse=inverse)
    return _s_curve(t, k, inverse=not inverse)  # inverse_s


class RatingSimulation(NamedTuple):
    r"""Simulated ratings and the truth behind them (module docstring: the design).

    Attributes:
        ratings: all observed entries as :class:`~jaxcal.data.Interactions`, int64 ratings
            1..L, sorted by (user, item).
        scores: ``[n_users, n_items]`` float64 noiseless low-rank scores :math:`x_{ui}`.
        segment: ``[n_users]`` int64, the segment (true transform) of each user; all 0 for
            ``"sd1"``.
        level_scores: ``[n_segments, L]`` float64, the latent score at which segment
            ``s``'s continuous rating equals level ``r`` (column ``r - 1``): what a learned
            transform should match up to an affine map.
        thresholds: ``[n_segments, L - 1]`` float64 cut points on the noisy latent score:
            rating ``r`` iff ``thresholds[s, r - 2] <= latent < thresholds[s, r - 1]``.
        latent: ``[n]`` float64, the noisy latent score :math:`\tilde x` of each observed
            rating (same order as ``ratings``).
        transforms: ``n_segments`` pairs ``(shape, k)`` (from :data:`SEGMENT_TRANSFORMS`).
        latent_range: :math:`(x_\text{lo}, x_\text{hi})`.

    Made by :func:`simulate_ratings`.

    Example:
        >>> import jax, numpy as np
        >>> from jaxcal.data import simulate_ratings
        >>> sim = simulate_ratings("sd1", n_users=20, n_items=30, key=jax.random.key(0))
        >>> x = sim.ratings
        >>> cuts = sim.thresholds[sim.segment[x.user]]  # the rating is the latent's level
        >>> bool(np.array_equal(x.rating, 1 + (sim.latent[:, None] >= cuts).sum(1)))
        True
    """

    ratings: Interactions
    scores: np.ndarray
    segment: np.ndarray
    level_scores: np.ndarray
    thresholds: np.ndarray
    latent: np.ndarray
    transforms: tuple[tuple[str, float], ...]
    latent_range: tuple[float, float]

    def continuous_rating(self, latent: ArrayLike, segment: int) -> np.ndarray:
        """The continuous rating :math:`c_s(x)` in [1, L] of latent scores ``latent`` under
        segment ``segment``'s transform (rounded, it is the rating).

        Example:
            >>> import jax, numpy as np
            >>> from jaxcal.data import simulate_ratings
            >>> sim = simulate_ratings("sd1", n_users=20, n_items=30, key=jax.random.key(0))
            >>> np.round(sim.continuous_rating(sim.level_scores[0], 0), 6)  # c_s(c_s^-1(r))
            array([1., 2., 3., 4., 5.])
        """
        lo, hi = self.latent_range
        t = np.clip((np.asarray(latent, dtype=np.float64) - lo) / (hi - lo), 0.0, 1.0)
        n_levels = self.level_scores.shape[1]
        return 1.0 + (n_levels - 1) * _shape(t, *self.transforms[int(segment)])


def _inverse_transform(level, transform, n_levels: int, latent_range) -> np.ndarray:
    """:math:`c_s^{-1}` at continuous ratings ``level`` in [1, L], closed form."""
    lo, hi = latent_range
    t = _shape(
        (np.asarray(level, dtype=np.float64) - 1.0) / (n_levels - 1), *transform, inverse=True
    )
    return lo + (hi - lo) * t


def _check_real(value: Any, name: str, low: float, high: float, *, open_low: bool) -> float:
    ok = isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool)
    v = float(value) if ok else math.nan
    inside = (v > low if open_low else v >= low) and v <= high
    if not (math.isfinite(v) and inside):
        bounds = f"{'(' if open_low else '['}{low}, {high}]"
        raise ValueError(f"{name} must be a number in {bounds}; got {value!r}.")
    return v


def simulate_ratings(
    design: str = "sd1",
    *,
    key: jax.Array,
    n_users: int = 300,
    n_items: int = 400,
    rank: int = 5,
    density: float = 0.1,
    noise: float = 0.1,
    n_segments: int | None = None,
    n_levels: int = 5,
) -> RatingSimulation:
    r"""Simulate explicit ratings from a low-rank score matrix through known monotone
    transforms (designs ``"sd1"`` and ``"sd2"``: module docstring).

    Args:
        design: ``"sd1"`` (one transform for all users) or ``"sd2"`` (``n_segments``
            segments of users, each with its own transform).
        key: a JAX PRNG key (``jax.random.key(seed)``); the draws are made by NumPy from
            it (:func:`jaxcal._rng.numpy_rng`), so the result is a deterministic function
            of the arguments.
        n_users, n_items: matrix size (each >= 2).
        rank: rank ``d`` of the score matrix (>= 1).
        density: probability that a pair is observed, in (0, 1] (every user still gets at
            least two ratings).
        noise: standard deviation :math:`\sigma_\varepsilon` of the Gaussian noise added to
            the score before it is discretised (>= 0).
        n_segments: number of segments; ``"sd1"``: 1 (the default), ``"sd2"``: 2..6
            (default 3).
        n_levels: number of rating levels ``L`` (>= 2); ratings are 1..L.

    Returns:
        A :class:`RatingSimulation`.

    Raises:
        ValueError: an unknown design, an argument out of range (the message names it),
            or ``key`` not a JAX PRNG key.

    Example:
        >>> import jax
        >>> from jaxcal.data import simulate_ratings
        >>> key = jax.random.key(1)
        >>> sim = simulate_ratings("sd2", n_users=60, n_items=80, density=0.2, key=key)
        >>> sim.scores.shape, sim.level_scores.shape, sorted(set(sim.segment.tolist()))
        ((60, 80), (3, 5), [0, 1, 2])
        >>> sorted(set(sim.ratings.rating.tolist()))
        [1, 2, 3, 4, 5]
    """
    if design not in DESIGNS:
        raise ValueError(f"design must be one of {DESIGNS}; got {design!r}.")
    n_users = check_int(n_users, "n_users", minimum=2)
    n_items = check_int(n_items, "n_items", minimum=2)
    rank = check_int(rank, "rank", minimum=1)
    n_levels = check_int(n_levels, "n_levels", minimum=2)
    density = _check_real(density, "density", 0.0, 1.0, open_low=True)
    noise = _check_real(noise, "noise", 0.0, math.inf, open_low=False)
    rng = numpy_rng(key)
    if design == "sd1":
        if n_segments not in (None, 1):
            raise ValueError(f"design 'sd1' has one segment; got n_segments={n_segments!r}.")
        n_segments = 1
    else:
        n_max = len(SEGMENT_TRANSFORMS)
        n_segments = 3 if n_segments is None else n_segments
        if isinstance(n_segments, bool) or not isinstance(n_segments, int | np.integer):
            raise ValueError(f"n_segments must be an integer; got {n_segments!r}.")
        if not 2 <= n_segments <= n_max:
            raise ValueError(
                f"design 'sd2' needs 2..{n_max} segments; got n_segments={n_segments} "
                "(one segment is design 'sd1')."
            )
        n_segments = int(n_segments)

    u = rng.normal(scale=1.0 / math.sqrt(rank), size=(n_users, rank))
    v = rng.normal(size=(n_items, rank))
    scores = u @ v.T
    segment = rng.permutation(np.arange(n_users) % n_segments).astype(np.int64)
    draws = rng.random((n_users, n_items))
    kth = np.partition(draws, _MIN_PER_USER - 1, axis=1)[:, _MIN_PER_USER - 1 : _MIN_PER_USER]
    observed = (draws < density) | (draws <= kth)
    user, item = np.nonzero(observed)  # row-major: sorted by (user, item)
    latent = scores[user, item] + noise * rng.normal(size=user.size)

    scale = math.sqrt(1.0 + noise**2)
    latent_range = (-_SPAN * scale, _SPAN * scale)
    transforms = SEGMENT_TRANSFORMS[:n_segments]
    levels = np.arange(1, n_levels + 1, dtype=np.float64)
    level_scores = np.stack(
        [_inverse_transform(levels, f, n_levels, latent_range) for f in transforms]
    )
    thresholds = np.stack(
        [_inverse_transform(levels[:-1] + 0.5, f, n_levels, latent_range) for f in transforms]
    )
    rating = 1 + np.sum(latent[:, None] >= thresholds[segment[user]], axis=1)
    ratings = Interactions(
        user.astype(np.int64), item.astype(np.int64), rating.astype(np.int64), n_users, n_items
    )
    return RatingSimulation(
        ratings, scores, segment, level_scores, thresholds, latent, transforms, latent_range
    )


def _fraction(value: Any, name: str) -> float:
    return _check_real(value, name, 0.0, 1.0, open_low=False)


def split_ratings(
    x: Interactions,
    *,
    validation: float = 0.1,
    test: float = 0.2,
    key: jax.Array | None = None,
    timestamp: ArrayLike | None = None,
) -> tuple[Interactions, Interactions, Interactions]:
    """Split ratings into training, validation and test parts.

    Without ``timestamp``: ``round(test * n)`` ratings chosen uniformly at random go to
    test and ``round(validation * n)`` of the rest to validation (reproducible from
    ``key``). With ``timestamp`` (one per rating): chronological, as in the CMTRF paper's
    80 / 20 split: the oldest ratings train, the next validate, the newest test (ties in
    time keep the input order).

    Args:
        x: the ratings (:class:`~jaxcal.data.Interactions`).
        validation: share of all ratings for validation, in [0, 1).
        test: share of all ratings for test, in [0, 1); ``validation + test < 1``.
        key: a JAX PRNG key (``jax.random.key(seed)``), required for the random split
            (the permutation is drawn by NumPy from it, :func:`jaxcal._rng.numpy_rng`);
            unused by the chronological one.
        timestamp: ``[n]`` times of the ratings (any real numbers); chronological split.

    Returns:
        ``(train, validation, test)``: :class:`~jaxcal.data.Interactions` with the input's
        ``n_users`` / ``n_items``, each in the input's order; together they hold every
        rating exactly once.

    Raises:
        ValueError: ``x`` is not Interactions or is empty, fractions out of range,
            ``timestamp`` of the wrong length or with NaN, or no valid ``key`` for a random
            split.

    Example:
        >>> import numpy as np
        >>> from jaxcal.data import Interactions, split_ratings
        >>> x = Interactions.create([0, 0, 1, 1, 2], [0, 1, 0, 1, 1], [5, 3, 4, 1, 2])
        >>> train, val, test = split_ratings(
        ...     x, validation=0.2, test=0.2, timestamp=[50, 10, 40, 20, 30])
        >>> train.rating, val.rating, test.rating
        (array([3, 1, 2]), array([4]), array([5]))
        >>> import jax  # a random split needs a key
        >>> parts = split_ratings(x, validation=0.2, test=0.2, key=jax.random.key(0))
        >>> [p.size for p in parts]
        [3, 1, 1]
    """
    if not isinstance(x, Interactions):
        raise ValueError(f"x must be jaxcal.data.Interactions; got {type(x).__name__}.")
    n = x.size
    if n == 0:
        raise ValueError("no ratings to split.")
    validation = _fraction(validation, "validation")
    test = _fraction(test, "test")
    if validation + test >= 1:
        raise ValueError(
            f"validation + test must be < 1 (something must train); got {validation} + {test}."
        )
    n_test = int(round(test * n))
    n_val = int(round(validation * n))
    if timestamp is None:
        if key is None:
            raise ValueError(
                "key is required for a random split: pass key=jax.random.key(seed), or "
                "timestamp= for a chronological one."
            )
        order = numpy_rng(key).permutation(n)
        rank = np.empty(n, np.int64)
        rank[order] = np.arange(n)
        part = np.where(rank < n_test, 2, np.where(rank < n_test + n_val, 1, 0))
    else:
        t = np.asarray(timestamp)
        if t.shape != (n,):
            raise ValueError(f"timestamp must have one value per rating ({n}); got {t.shape}.")
        if t.dtype.kind not in "biuf" or (t.dtype.kind == "f" and np.isnan(t).any()):
            raise ValueError("timestamp must be numeric without NaN.")
        rank = np.empty(n, np.int64)
        rank[np.argsort(t, kind="stable")] = np.arange(n)
        part = np.where(rank >= n - n_test, 2, np.where(rank >= n - n_test - n_val, 1, 0))
    return x.select(part == 0), x.select(part == 1), x.select(part == 2)
