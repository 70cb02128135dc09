r"""CMTRF: clustered monotone transforms for rating factorisation (Hiranandani, Somani,
Koyejo and Acharyya, WSDM 2019), with a grid of ridge penalties and seeds trained in one
program and chosen on validation ratings. See ``docs/cmtrf.md`` and
``jaxcal.recsys._cmtrf_core`` for the formulas.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal import _shapes
from jaxcal._jit import jit
from jaxcal._native import ridge_cpu_available
from jaxcal._pytree import pytree_dataclass, static_field
from jaxcal.data.triples import Interactions
from jaxcal.recsys import _cmtrf_core as core
from jaxcal.recsys._fitted import FactorSizes
from jaxcal.recsys._train import _check_int, check_host_ids, check_indices

__all__ = ["CMTRF", "CMTRFEnsemble", "CMTRFModel"]

_TRANSFORMS = ("none", "global", "per_user", "clustered")
_LOSSES = ("squared", "poisson")
#: bytes of per-pair work arrays one grid point may use before the grid is chunked
_GRID_MEMORY = 1 << 30
#: rating matrices of at most this many cells (padded) are handled densely in the ALS
#: half-steps (one matrix product per Gram batch instead of per-pair scatters)
_DENSE_CELLS = 1 << 23


def _positive_grid(value, name: str) -> np.ndarray:
    arr = np.atleast_1d(np.asarray(value, dtype=float))
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a positive number or a non-empty 1-D sequence.")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"{name} must be finite and > 0; got {value!r}.")
    return arr


def _check_ratings(data, name: str, n_levels: int | None) -> Interactions:
    if not isinstance(data, Interactions):
        raise ValueError(
            f"{name} must be jaxcal.data.Interactions (explicit ratings 1..L); got "
            f"{type(data).__name__}. Build it with Interactions.create or .from_dense."
        )
    r = np.asarray(data.rating)
    if r.size == 0:
        raise ValueError(f"{name} holds no ratings.")
    if r.dtype.kind not in "iu" and not np.all(r == np.round(r)):
        raise ValueError(f"{name} ratings must be integers 1..L; got non-integer values.")
    top = n_levels if n_levels is not None else int(r.max())
    if r.min() < 1 or r.max() > top:
        raise ValueError(
            f"{name} ratings must lie in 1..{top}; got range [{int(r.min())}, {int(r.max())}]."
        )
    for ids, n, side in ((data.user, data.n_users, "user"), (data.item, data.n_items, "item")):
        ids = np.asarray(ids)
        if ids.size and (ids.min() < 0 or ids.max() >= n):
            raise ValueError(f"{name} {side} ids must lie in [0, {n}).")
    return data


def _pairs(rows, cols, ratings, size: int, sort: bool, weight=None) -> core.Pairs:
    """Pairs sorted by ``rows`` (if ``sort``), padded to ``size`` with zero weights (row and
    column ids of the padding: the largest row id, so the rows stay sorted); ``weight``:
    each rating's weight (default 1)."""
    rows, cols, ratings = (np.asarray(a, np.int64) for a in (rows, cols, ratings))
    weight = np.ones(rows.size) if weight is None else np.asarray(weight, np.float64)
    if sort:
        order = np.lexsort((cols, rows))
        rows, cols, ratings, weight = rows[order], cols[order], ratings[order], weight[order]
    fill_row = int(rows.max(initial=0))
    dtype = jax.dtypes.canonicalize_dtype(np.float64)
    out = _shapes.pad_rows(
        size,
        rows.astype(np.int32),
        cols.astype(np.int32),
        (ratings - 1).astype(np.int32),
        weight.astype(dtype),
        fills=[fill_row, 0, 0, 0],
    )
    return core.Pairs(*(jax.device_put(a) for a in out))


def _warm_path(l2_user: np.ndarray, l2_item: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The order of a warm-started grid's points (flat indices of the ``[n_l2_user,
    n_l2_item]`` grid) and where the path restarts: the rows of ``l2_user`` from the largest
    down, each from its own random start at its largest ``l2_item`` and then down
    ``l2_item``, each point from the previous one's fit."""
    items = np.argsort(-l2_item, kind="stable")
    users = np.argsort(-l2_user, kind="stable")
    order = np.asarray([int(u) * l2_item.size + int(i) for u in users for i in items])
    restart = np.zeros(order.size, bool)
    restart[:: l2_item.size] = True
    return order, restart


def _ips_weights(propensity, train: Interactions, validation: Interactions):
    """Inverse-propensity weights ``1 / p`` of the training and of the validation ratings
    (:meth:`CMTRF.fit`)."""
    p = np.asarray(propensity, np.float64)
    if p.shape != (train.n_users, train.n_items):
        raise ValueError(
            f"propensity must be [n_users, n_items] = [{train.n_users}, {train.n_items}]; "
            f"got shape {p.shape}."
        )
    weights = []
    for name, data in (("train", train), ("validation", validation)):
        at = p[np.asarray(data.user), np.asarray(data.item)]
        bad = ~(np.isfinite(at) & (at > 0) & (at <= 1))
        if bad.any():
            k = int(np.argmax(bad))
            raise ValueError(
                f"propensity must lie in (0, 1] at every {name} rating; got {at[k]!r} at "
                f"user {int(data.user[k])}, item {int(data.item[k])}."
            )
        weights.append(1.0 / at)
    return tuple(weights)


def _training_problem(train: Interactions, weight, validation: core.Pairs) -> core.Problem:
    """The training ratings sorted both ways (``weight``: inverse propensities, scaled here to
    mean 1 so that the penalties keep their meaning; None: 1 each)."""
    weight = None if weight is None else weight / weight.mean()
    size = _shapes.padded_size(train.rating.size)
    return core.Problem(
        by_user=_pairs(train.user, train.item, train.rating, size, True, weight),
        by_item=_pairs(train.item, train.user, train.rating, size, True, weight),
        validation=validation,
    )


def _chosen_sweeps(pretrain_history, best_sweep, transform: str):
    """Sweeps per phase of a chosen fit (:func:`core.replay`): ``clustered`` ran its per-user
    phase up to its best validation sweep (the first minimum, as early stopping keeps)."""
    second = np.int32(best_sweep + 1)
    if transform != "clustered":
        return second, np.int32(0)
    return np.int32(np.nanargmin(pretrain_history) + 1), second


@functools.partial(jit, static_argnames=("loss", "clip"))
def _predict(state: core.State, users, items, *, loss: str, clip: bool):
    pred = core.predict_ratings(state, users, items, loss=loss)
    n_levels = state.transforms.shape[-1]
    return jnp.clip(pred, 1.0, n_levels) if clip else pred


@jit
def _scores(state: core.State, users, items):
    return core.scores(state, users, items)


@functools.partial(jit, static_argnames=("loss", "clip"))
def _predict_mean(states: core.State, users, items, *, loss: str, clip: bool):
    """The mean of the predicted ratings of states stacked along a leading axis."""
    pred = jax.vmap(lambda s: core.predict_ratings(s, users, items, loss=loss))(states)
    pred = jnp.mean(pred, axis=0)
    n_levels = states.transforms.shape[-1]
    return jnp.clip(pred, 1.0, n_levels) if clip else pred


def _mean_validation_mse(stacked: core.State, validation: core.Pairs, loss: str) -> float:
    """Validation MSE of the mean of the predicted ratings of states stacked along a leading
    axis (weighted as :func:`core.validation_mse`)."""
    pred = np.asarray(_predict_mean(stacked, validation.row, validation.col, loss=loss, clip=False))
    w = np.asarray(validation.weight)
    err = np.where(w > 0, (pred - (np.asarray(validation.level) + 1.0)) ** 2, 0.0)
    return float(np.sum(w * err) / max(np.sum(w), 1.0))


class _PairCalls(FactorSizes):
    """``fn(self._state(), users, items)`` on checked ids: host ids padded to a size
    bucket (no recompilation for a new number of pairs) and unpadded to the broadcast
    shape; traced ids as they are."""

    def _call(self, fn, users, items, **kwargs) -> jax.Array:
        if _shapes.is_traced(users, items):
            u, i = check_indices(users, items, self.n_users, self.n_items)
            return fn(self._state(), u, i, **kwargs)
        u, i = check_host_ids(users, items, self.n_users, self.n_items)
        shape = np.broadcast_shapes(np.shape(u), np.shape(i))
        u, i = (np.broadcast_to(np.asarray(a), shape).reshape(-1) for a in (u, i))
        n = u.size
        size = _shapes.padded_size(max(n, 1))
        u, i = (_shapes.pad_axis(a.astype(np.int32), size, 0) for a in (u, i))
        return _shapes.unpad(fn(self._state(), u, i, **kwargs), n, shape)


@pytree_dataclass
class CMTRFModel(_PairCalls):
    r"""A fitted CMTRF model (immutable pytree; ``jaxcal.save`` / ``jaxcal.load``).

    Attributes:
        user_factors: ``[n_users, rank]`` user factors :math:`x_u`.
        item_factors: ``[n_items, rank]`` item factors :math:`y_i`.
        user_bias: ``[n_users]`` user biases :math:`b_u` (zeros unless ``biases=True``).
        item_bias: ``[n_items]`` item biases :math:`c_i`.
        offset: the global offset :math:`\mu` (0 with ``offset=False``).
        transforms: ``[G, L]`` learned transforms :math:`z_g[r]` of the rating scale.
        group: ``[n_users]`` each user's transform row.
        l2_user, l2_item: the chosen ridge penalties.
        validation_mse: ``[n_sweeps]`` validation MSE after each sweep of the chosen grid
            point (``nan`` after early stopping; ``clustered``: the clustered phase).
        pretrain_validation_mse: ``[n_sweeps]`` the same for the per-user phase of
            ``clustered`` (``nan`` otherwise).
        best_sweep: the (0-based) sweep whose parameters were kept.
        grid_validation_mse: ``[n_l2_user, n_l2_item, n_seeds]`` best validation MSE of
            every grid point.
        l2_user_grid, l2_item_grid: the grid's penalties.
        loss, transform, epsilon, anchor: the model's settings.
    """

    user_factors: jax.Array
    item_factors: jax.Array
    user_bias: jax.Array
    item_bias: jax.Array
    transforms: jax.Array
    group: jax.Array
    l2_user: jax.Array
    l2_item: jax.Array
    validation_mse: jax.Array
    pretrain_validation_mse: jax.Array
    best_sweep: jax.Array
    grid_validation_mse: jax.Array
    offset: jax.Array
    l2_user_grid: jax.Array
    l2_item_grid: jax.Array
    loss: str = static_field(default="squared")
    transform: str = static_field(default="global")
    epsilon: float = static_field(default=0.5)
    anchor: bool = static_field(default=True)

    @property
    def n_levels(self) -> int:
        return self.transforms.shape[-1]

    def _state(self) -> core.State:
        return core.State(
            self.user_factors,
            self.item_factors,
            self.user_bias,
            self.item_bias,
            self.transforms,
            self.group,
            self.offset,
        )

    def score(self, users: ArrayLike, items: ArrayLike) -> jax.Array:
        r"""Natural parameters :math:`\theta_{ui} = \langle x_u, y_i \rangle + b_u + c_i + \mu`
        (monotone in the predicted rating: usable for ranking)."""
        return self._call(_scores, users, items)

    def predict(self, users: ArrayLike, items: ArrayLike, *, clip: bool = False) -> jax.Array:
        r"""Predicted ratings: :math:`f(\theta_{ui})` mapped through the inverse of the user's
        transform (piecewise linear through :math:`(z_r, r)`, extended linearly beyond the
        ends). Not clipped to ``[1, L]`` unless ``clip=True`` (the reference code does not
        clip)."""
        return self._call(_predict, users, items, loss=self.loss, clip=bool(clip))


@pytree_dataclass
class CMTRFEnsemble(_PairCalls):
    r"""The mean of several CMTRF fits of the same penalties from different random starts
    (``CMTRF(ensemble=S)``; immutable pytree, ``jaxcal.save`` / ``jaxcal.load``).

    Attributes:
        members: a :class:`CMTRFModel` whose arrays carry a leading ``[S]`` member axis
            (member 0 is the chosen grid point's fit); :meth:`member` gives one of them.
        mean_validation_mse: validation MSE of the members' mean prediction, before any
            refit (weighted as the validation MSE of the fit).
    """

    members: CMTRFModel
    mean_validation_mse: jax.Array

    @property
    def user_factors(self) -> jax.Array:
        """``[S, n_users, rank]``."""
        return self.members.user_factors

    @property
    def item_factors(self) -> jax.Array:
        """``[S, n_items, rank]``."""
        return self.members.item_factors

    @property
    def transforms(self) -> jax.Array:
        """``[S, G, L]`` each member's transforms."""
        return self.members.transforms

    @property
    def n_members(self) -> int:
        return self.members.user_factors.shape[0]

    @property
    def n_levels(self) -> int:
        return self.members.n_levels

    @property
    def l2_user(self) -> jax.Array:
        return self.members.l2_user[0]

    @property
    def l2_item(self) -> jax.Array:
        return self.members.l2_item[0]

    def member(self, k: int) -> CMTRFModel:
        """Member ``k`` as a fitted :class:`CMTRFModel`."""
        if not (isinstance(k, int | np.integer) and 0 <= k < self.n_members):
            raise ValueError(f"member index must lie in [0, {self.n_members}); got {k!r}.")
        return jax.tree.map(lambda a: a[k], self.members)

    def _state(self) -> core.State:
        return self.members._state()

    def predict(self, users: ArrayLike, items: ArrayLike, *, clip: bool = False) -> jax.Array:
        """The mean of the members' predicted ratings (:meth:`CMTRFModel.predict`), clipped
        to ``[1, L]`` only with ``clip=True``."""
        return self._call(_predict_mean, users, items, loss=self.members.loss, clip=bool(clip))

    def score(self, users: ArrayLike, items: ArrayLike) -> jax.Array:
        """Ranking scores: the mean predicted rating (the members' natural parameters live on
        different scales, so they are not averaged)."""
        return self.predict(users, items)


@dataclasses.dataclass(frozen=True)
class CMTRF:
    r"""Rating factorisation up to learned monotone transforms of the rating scale (CMTRF).

    Hiranandani, Somani, Koyejo and Acharyya, "Clustered Monotone Transforms for Rating
    Factorization", WSDM 2019. A rating :math:`r_{ui} \in 1..L` is fitted through a
    transform :math:`z_{g(u)}[r]` with gaps :math:`\ge \varepsilon`: learned for all users
    (``transform="global"``), per user (``"per_user"``), per cluster of users
    (``"clustered"``: k-means over the per-user transforms, then users reassigned by
    training loss) or not at all (``"none"``: ridge matrix factorisation of the raw
    ratings). The factors minimise :math:`\sum D_\phi(z \,\|\, f(\theta)) +
    \tfrac{\lambda_u}{2}\sum_u\lVert x_u\rVert^2 + \tfrac{\lambda_i}{2}\sum_i\lVert
    y_i\rVert^2` by ALS (penalties not scaled by counts), alternating with the exact
    transform step. ``anchor=True`` fixes :math:`z[1] = 1`, :math:`z[L] = L`, which makes
    the transform's shape identifiable (without it every gap collapses to
    :math:`\varepsilon`; ``docs/cmtrf.md``).

    ``l2_user`` / ``l2_item`` may be sequences: every ``(l2_user, l2_item, seed)`` point of
    the grid is trained in one ``vmap``-ped program, and the point with the lowest
    validation MSE is kept.

    Args:
        transform: ``"none"``, ``"global"``, ``"per_user"`` or ``"clustered"``.
        rank: number of factors :math:`d`.
        n_clusters: clusters of ``"clustered"``.
        epsilon: smallest gap :math:`\varepsilon` between consecutive levels (> 0; at most
            1 with ``anchor``).
        l2_user, l2_item: ridge penalties (> 0), a number or a sequence (the grid).
        loss: ``"squared"`` or ``"poisson"`` (generalised I-divergence, :math:`f = \exp`).
        anchor: fix the end levels of the transform at :math:`1` and :math:`L`.
        biases: add user and item biases :math:`b_u + c_i` to :math:`\theta` (penalised with
            the same ridge as their side's factors).
        offset: add a global offset :math:`\mu` to :math:`\theta` (not penalised; refitted
            exactly after every sweep). ``offset=False, anchor=False`` is the authors' model.
        n_sweeps: most ALS sweeps (per phase for ``"clustered"``).
        patience: stop after this many sweeps without progress (default 5; 2 with
            ``warm_start``, whose points start close to their optimum, and then for the
            ``ensemble``'s further members too).
        tol: progress is a validation MSE more than ``tol`` (relative) below the one of the
            last progress (default 0: any decrease). The fit keeps the sweep of lowest
            validation MSE either way. ``tol=0.003`` ends the long tails of slowly
            improving fits (``docs/benchmarks.md``).
        n_seeds: random initialisations per penalty pair (part of the grid).
        n_levels: the rating scale ``L`` (default: the largest rating seen).
        validation_fraction: share of the training ratings held out (by ``key``) for early
            stopping and the grid choice when ``fit`` gets no ``validation``.
        init_scale: standard deviation of the initial item factors.
        n_newton: Newton steps per half-step (``loss="poisson"``).
        grid_batch_size: grid points per ``vmap`` chunk. Default: on a CPU one point after
            another (a ``vmap``-ped chunk runs every point for as many sweeps as its
            slowest point needs; ``docs/cmtrf.md``); on a GPU / TPU as many points as fit
            in about 1 GiB of work arrays.
        warm_start: train each ``l2_user``'s points one after another, from the largest
            ``l2_item`` down: the first from its own random start, each next one from the
            factors of the previous point, instead of each from its own random start: fewer
            sweeps per point. Needs ``n_seeds=1``; a grid point then no longer equals the
            single fit with its penalties (but for the first of each ``l2_user``).
        refit: after the choice, train the chosen grid point again on the training and
            validation ratings together: from the same start (its random draw, or with
            ``warm_start`` the state it started from), with the same penalties, for the
            number of sweeps chosen on validation (per phase for ``"clustered"``), without
            early stopping. The model then learns from every rating given to ``fit``, as
            the final fit after cross-validation does. ``validation_mse`` and
            ``grid_validation_mse`` stay those of the choice.
        ensemble: number of fits averaged (default 1: no ensemble). With ``ensemble=S``
            the chosen penalties are also trained from ``S - 1`` further random starts
            (the seeds after the grid's, early-stopped on validation as the grid's points;
            each refitted with ``refit``), and ``fit`` returns a
            :class:`CMTRFEnsemble` predicting the mean of the ``S`` members' predicted
            ratings. The members of a low-rank fit from different starts land on different
            local optima; their mean has a lower error than a typical member (by
            convexity never a higher one than their average error).
        dense: solve the ALS half-steps on dense ``[n_users, n_items]`` rating matrices
            (matrix products) instead of per-rating scatters (same result). Default: dense
            on GPU / TPU when the padded matrix has at most 2^23 cells, per-rating on CPU
            (there by jaxcal's compiled ridge kernel when it is built, ``jaxcal._native``;
            ``JAXCAL_NATIVE=0``: ``segment_sum`` scatters).

    Example:
        >>> import jax, numpy as np
        >>> from jaxcal.data import Interactions
        >>> from jaxcal.recsys import CMTRF
        >>> rng = np.random.default_rng(0)
        >>> dense = np.where(rng.random((40, 30)) < 0.5, rng.integers(1, 6, (40, 30)), 0)
        >>> train = Interactions.from_dense(dense)
        >>> model = CMTRF(transform="global", rank=2, n_sweeps=5).fit(train, key=jax.random.key(0))
        >>> model.transforms.shape
        (1, 5)
        >>> bool(np.all(np.diff(np.asarray(model.transforms)) >= 0.5 - 1e-5))
        True
    """

    transform: str = "global"
    rank: int = 10
    n_clusters: int = 5
    epsilon: float = 0.5
    l2_user: float | Sequence[float] = 1.0
    l2_item: float | Sequence[float] = 1.0
    loss: str = "squared"
    anchor: bool = True
    biases: bool = False
    offset: bool = True
    n_sweeps: int = 50
    patience: int | None = None
    tol: float = 0.0
    n_seeds: int = 1
    n_levels: int | None = None
    validation_fraction: float = 0.1
    init_scale: float = 0.1
    n_newton: int = 8
    grid_batch_size: int | None = None
    warm_start: bool = False
    refit: bool = False
    ensemble: int = 1
    dense: bool | None = None

    def __post_init__(self) -> None:
        if self.transform not in _TRANSFORMS:
            raise ValueError(f"transform must be one of {_TRANSFORMS}; got {self.transform!r}.")
        if self.loss not in _LOSSES:
            raise ValueError(f"loss must be one of {_LOSSES}; got {self.loss!r}.")
        _check_int(self.rank, "rank")
        _check_int(self.n_clusters, "n_clusters")
        _check_int(self.n_sweeps, "n_sweeps")
        if self.patience is not None:
            _check_int(self.patience, "patience")
        for name in ("warm_start", "refit"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False; got {getattr(self, name)!r}.")
        if self.warm_start and self.n_seeds != 1:
            raise ValueError("warm_start=True needs n_seeds=1 (seeds would start from each other).")
        if not (isinstance(self.tol, int | float) and 0 <= self.tol < 1):
            raise ValueError(f"tol must be a number in [0, 1); got {self.tol!r}.")
        _check_int(self.n_seeds, "n_seeds")
        _check_int(self.ensemble, "ensemble")
        _check_int(self.n_newton, "n_newton")
        if self.grid_batch_size is not None:
            _check_int(self.grid_batch_size, "grid_batch_size")
        if self.n_levels is not None:
            _check_int(self.n_levels, "n_levels", minimum=2)
        eps = self.epsilon
        if isinstance(eps, bool) or not isinstance(eps, int | float) or not math.isfinite(eps):
            raise ValueError(f"epsilon must be a finite number; got {eps!r}.")
        if eps <= 0:
            raise ValueError(f"epsilon must be > 0; got {eps!r}.")
        if self.anchor and eps > 1:
            raise ValueError(
                f"epsilon must be <= 1 with anchor=True (the anchors z[1] = 1, z[L] = L leave "
                f"L - 1 for L - 1 gaps); got {eps!r}. Use anchor=False for larger gaps."
            )
        if self.dense not in (None, True, False):
            raise ValueError(f"dense must be None, True or False; got {self.dense!r}.")
        if not all(isinstance(v, bool) for v in (self.anchor, self.biases, self.offset)):
            raise ValueError("anchor, biases and offset must be True or False.")
        if not 0 < self.validation_fraction < 1:
            raise ValueError(
                f"validation_fraction must lie in (0, 1); got {self.validation_fraction!r}."
            )
        if not (isinstance(self.init_scale, int | float) and self.init_scale > 0):
            raise ValueError(f"init_scale must be > 0; got {self.init_scale!r}.")
        _positive_grid(self.l2_user, "l2_user")
        _positive_grid(self.l2_item, "l2_item")

    def _split(self, train: Interactions, key) -> tuple[Interactions, Interactions]:
        seed = int(jax.random.randint(key, (), 0, np.iinfo(np.int32).max))
        n = train.rating.size
        n_val = max(1, int(round(self.validation_fraction * n)))
        if n_val >= n:
            raise ValueError(
                f"train holds {n} rating(s): too few to hold out a validation share; pass "
                "validation= explicitly."
            )
        perm = np.random.default_rng(seed).permutation(n)
        take = lambda idx: Interactions(  # noqa: E731
            train.user[idx], train.item[idx], train.rating[idx], train.n_users, train.n_items
        )
        return take(np.sort(perm[n_val:])), take(np.sort(perm[:n_val]))

    def fit(
        self,
        train: Interactions,
        *,
        key: jax.Array,
        validation: Interactions | None = None,
        propensity: ArrayLike | None = None,
    ) -> CMTRFModel | CMTRFEnsemble:
        r"""Fit on ``train`` (explicit ratings ``1..L``), early-stopped and grid-chosen on
        ``validation`` ratings; when ``validation`` is None a random
        ``validation_fraction`` of ``train`` (drawn with ``key``) is held out for that and
        not trained on. Test ratings are never needed.

        ``propensity``: ``[n_users, n_items]`` probabilities that each rating is observed
        (ratings missing not at random, as Coat's self-selected ones). Every loss over
        ratings (the ALS half-steps, the transform step, the global offset and the
        validation MSE) is then weighted by :math:`1 / p_{ui}` (inverse propensity scoring,
        Schnabel et al., ICML 2016): the training weights scaled to mean 1, so that the
        penalties keep their meaning, and the validation MSE self-normalised
        (:math:`\sum w e^2 / \sum w`), an estimate of the error on ratings of items drawn
        at random.

        Raises:
            ValueError: ratings not integers in ``1..L``, empty data, ids out of range,
                ``validation`` of another size, too few ratings to hold out, or
                ``propensity`` of another shape or outside ``(0, 1]`` where rated.
        """
        train = _check_ratings(train, "train", self.n_levels)
        key = (
            key
            if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
            else jax.random.wrap_key_data(key)
        )
        k_split, k_grid = jax.random.split(key)
        if validation is None:
            train, validation = self._split(train, k_split)
        else:
            validation = _check_ratings(validation, "validation", self.n_levels)
            if (validation.n_users, validation.n_items) != (train.n_users, train.n_items):
                raise ValueError(
                    f"validation is {validation.n_users} x {validation.n_items} but train is "
                    f"{train.n_users} x {train.n_items}."
                )
        train_w = val_w = None
        if propensity is not None:
            train_w, val_w = _ips_weights(propensity, train, validation)
        n_levels = self.n_levels or int(max(train.rating.max(), validation.rating.max()))
        if n_levels < 2:
            raise ValueError("the rating scale needs at least 2 levels (set n_levels).")
        if self.transform == "clustered" and self.n_clusters > train.n_users:
            raise ValueError(
                f"n_clusters={self.n_clusters} exceeds the number of users ({train.n_users})."
            )
        n_users = _shapes.padded_size(train.n_users)
        n_items = _shapes.padded_size(train.n_items)
        size = _shapes.padded_size(train.rating.size)
        validation_pairs = _pairs(
            validation.user,
            validation.item,
            validation.rating,
            _shapes.padded_size(validation.rating.size),
            sort=False,
            weight=val_w,
        )
        problem = _training_problem(train, train_w, validation_pairs)
        l2u = _positive_grid(self.l2_user, "l2_user")
        l2i = _positive_grid(self.l2_item, "l2_item")
        grid_u, grid_i, seeds = np.meshgrid(l2u, l2i, np.arange(self.n_seeds), indexing="ij")
        # seed s uses fold_in(key, s) whatever n_seeds is: a grid point equals the single
        # fit with its penalties (and n_seeds = s + 1)
        seed_keys = [
            jax.random.key_data(jax.random.fold_in(k_grid, s)) for s in range(self.n_seeds)
        ]
        keys = np.stack([np.asarray(k) for k in seed_keys])[seeds.reshape(-1)]
        k = self.rank + (1 if self.biases else 0)
        cells = n_users * n_items
        dense = self.dense
        if dense is None:  # scatters are cheap on CPUs, matrix products on accelerators
            dense = cells <= _DENSE_CELLS and jax.default_backend() != "cpu"
        # the compiled ridge kernel (CPU programs) needs no per-pair outer products
        native = not dense and ridge_cpu_available()
        if dense:  # dense weights, targets, scores (and poisson's line-search trials)
            per_point = cells * 8 * (4 + (len(core._LINE_SEARCH) if self.loss == "poisson" else 0))
        else:  # per-pair outer products
            per_point = size * (k * k + 2 * k + 8) * 8 * 3
        n_points = grid_u.size
        batch = self.grid_batch_size
        if batch is None and jax.default_backend() != "cpu":
            batch = max(1, _GRID_MEMORY // per_point)
        cfg = core.Config(
            n_users=n_users,
            n_items=n_items,
            n_levels=n_levels,
            rank=self.rank,
            transform=self.transform,
            loss=self.loss,
            anchor=self.anchor,
            biases=self.biases,
            offset=self.offset,
            n_clusters=self.n_clusters,
            n_sweeps=self.n_sweeps,
            n_newton=self.n_newton,
            init_scale=float(self.init_scale),
            batch_size=None if batch is None else min(int(batch), n_points),
            dense=dense,
            native=native,
            warm_start=self.warm_start,
        )
        dtype = jax.dtypes.canonicalize_dtype(np.float64)
        order, restart = np.arange(n_points), None
        if self.warm_start:
            order, restart = _warm_path(l2u, l2i)
        patience = self.patience
        if patience is None:
            patience = 2 if self.warm_start else 5
        epsilon = np.asarray(self.epsilon, dtype)
        out, starts = core.fit_grid(
            problem,
            keys[order],
            grid_u.reshape(-1)[order].astype(dtype),
            grid_i.reshape(-1)[order].astype(dtype),
            epsilon,
            np.asarray(patience, np.int32),
            np.asarray(self.tol, dtype),
            restart,
            cfg=cfg,
        )
        if self.warm_start:  # back to the grid's order
            back = np.argsort(order)
            out, starts = jax.tree.map(lambda a: np.asarray(a)[back], (out, starts))
        mse = np.asarray(out.best_mse)
        best = int(np.argmin(np.where(np.isnan(mse), np.inf, mse)))
        pick = lambda a: np.asarray(a)[best]  # noqa: E731
        chosen = jax.tree.map(pick, out)
        lu = grid_u.reshape(-1)[best].astype(dtype)
        li = grid_i.reshape(-1)[best].astype(dtype)
        state, both = chosen.state, None
        if self.refit:  # the training and validation ratings together
            both = _training_problem(
                train.concat(validation),
                None if propensity is None else np.concatenate([train_w, val_w]),
                validation_pairs,
            )
            state = core.replay(
                both,
                keys[best],
                lu,
                li,
                epsilon,
                None if starts is None else jax.tree.map(pick, starts),
                _chosen_sweeps(chosen.pretrain_history, chosen.best_sweep, self.transform),
                cfg=dataclasses.replace(cfg, batch_size=None),
            )
            state = jax.tree.map(np.asarray, state)
        settings = {
            "grid_validation_mse": jnp.asarray(mse.reshape(grid_u.shape)),
            "l2_user_grid": jnp.asarray(l2u, dtype),
            "l2_item_grid": jnp.asarray(l2i, dtype),
            "l2_user": jnp.asarray(lu, dtype),
            "l2_item": jnp.asarray(li, dtype),
        }
        model = self._model(state, chosen, train, settings)
        if self.ensemble == 1:
            return model
        # the further members: the seeds after the grid's, from random starts
        n_more = self.ensemble - 1
        more_keys = np.stack(
            [
                np.asarray(jax.random.key_data(jax.random.fold_in(k_grid, self.n_seeds + m)))
                for m in range(n_more)
            ]
        )
        more_cfg = dataclasses.replace(
            cfg, warm_start=False, batch_size=None if batch is None else min(int(batch), n_more)
        )
        more, _ = core.fit_grid(
            problem,
            more_keys,
            np.full(n_more, lu),
            np.full(n_more, li),
            epsilon,
            np.asarray(patience, np.int32),
            np.asarray(self.tol, dtype),
            cfg=more_cfg,
        )
        more = jax.tree.map(np.asarray, more)
        every = jax.tree.map(lambda a, b: np.concatenate([a[None], b]), chosen.state, more.state)
        mean_mse = _mean_validation_mse(every, validation_pairs, self.loss)
        states = [jax.tree.map(lambda a, m=m: a[m], more.state) for m in range(n_more)]
        if self.refit:
            sweeps = [
                _chosen_sweeps(more.pretrain_history[m], more.best_sweep[m], self.transform)
                for m in range(n_more)
            ]
            stacked = core.replay_starts(
                both,
                more_keys,
                lu,
                li,
                epsilon,
                tuple(np.stack(a) for a in zip(*sweeps, strict=True)),
                cfg=more_cfg,
            )
            stacked = jax.tree.map(np.asarray, stacked)
            states = [jax.tree.map(lambda a, m=m: a[m], stacked) for m in range(n_more)]
        models = [model] + [
            self._model(st, jax.tree.map(lambda a, m=m: a[m], more), train, settings)
            for m, st in enumerate(states)
        ]
        return CMTRFEnsemble(
            members=jax.tree.map(lambda *a: jnp.stack(a), *models),
            mean_validation_mse=jnp.asarray(mean_mse, dtype),
        )

    def _model(self, state: core.State, fit: core.FitOutput, train, settings) -> CMTRFModel:
        """The fitted model of ``state`` (the padding cut off), with ``fit``'s validation
        record."""
        return CMTRFModel(
            user_factors=jnp.asarray(state.user_factors[: train.n_users]),
            item_factors=jnp.asarray(state.item_factors[: train.n_items]),
            user_bias=jnp.asarray(state.user_bias[: train.n_users]),
            item_bias=jnp.asarray(state.item_bias[: train.n_items]),
            transforms=jnp.asarray(
                state.transforms[: train.n_users]
                if self.transform == "per_user"
                else state.transforms
            ),
            group=jnp.asarray(state.group[: train.n_users]),
            validation_mse=jnp.asarray(fit.history),
            pretrain_validation_mse=jnp.asarray(fit.pretrain_history),
            best_sweep=jnp.asarray(fit.best_sweep),
            offset=jnp.asarray(state.offset),
            loss=self.loss,
            transform=self.transform,
            epsilon=float(self.epsilon),
            anchor=self.anchor,
            **settings,
        )
