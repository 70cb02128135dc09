r"""CMTRF: clustered monotone transforms for rating factorisation (Hiranandani, Somani,
Koyejo and Acharyya, WSDM 2019), with a grid of ridge penalties and seeds trained in one
program and chosen on validation ratings. See ``docs/cmtrf.md`` and
``jaxcal.recsys._cmtrf_core`` for the formulas.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal import _shapes
from jaxcal.data.triples import Interactions
from jaxcal.recsys import _cmtrf_core as core
from jaxcal.recsys._cmtrf_data import _fit_ratings, _pairs, _training_problem
from jaxcal.recsys._cmtrf_fitted import CMTRFEnsemble, CMTRFModel, _mean_validation_mse
from jaxcal.recsys._cmtrf_grid import _chosen_sweeps, _seed_keys, _warm_path, _work_plan
from jaxcal.recsys._train import _check_int, _check_settings, _positive_grid, check_key

__all__ = ["CMTRF", "CMTRFEnsemble", "CMTRFModel"]

_TRANSFORMS = ("none", "global", "per_user", "clustered")
_LOSSES = ("squared", "poisson")


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
        _check_settings(
            self, ints=("rank", "n_clusters", "n_sweeps", "n_seeds", "ensemble", "n_newton")
        )
        for name in ("patience", "grid_batch_size"):
            if getattr(self, name) is not None:
                _check_int(getattr(self, name), name)
        if self.n_levels is not None:
            _check_int(self.n_levels, "n_levels", minimum=2)
        for name in ("warm_start", "refit", "anchor", "biases", "offset"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False; got {getattr(self, name)!r}.")
        if self.warm_start and self.n_seeds != 1:
            raise ValueError("warm_start=True needs n_seeds=1 (seeds would start from each other).")
        if not (isinstance(self.tol, int | float) and 0 <= self.tol < 1):
            raise ValueError(f"tol must be a number in [0, 1); got {self.tol!r}.")
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
        if not 0 < self.validation_fraction < 1:
            raise ValueError(
                f"validation_fraction must lie in (0, 1); got {self.validation_fraction!r}."
            )
        if not (isinstance(self.init_scale, int | float) and self.init_scale > 0):
            raise ValueError(f"init_scale must be > 0; got {self.init_scale!r}.")
        _positive_grid(self.l2_user, "l2_user")
        _positive_grid(self.l2_item, "l2_item")

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
        key = check_key(key)
        if not jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
            key = jax.random.wrap_key_data(key)
        k_split, k_grid = jax.random.split(key)
        train, validation, train_w, val_w = _fit_ratings(
            train,
            validation,
            propensity,
            n_levels=self.n_levels,
            fraction=self.validation_fraction,
            key=k_split,
        )
        n_levels = self.n_levels or int(max(train.rating.max(), validation.rating.max()))
        if n_levels < 2:
            raise ValueError("the rating scale needs at least 2 levels (set n_levels).")
        if self.transform == "clustered" and self.n_clusters > train.n_users:
            raise ValueError(
                f"n_clusters={self.n_clusters} exceeds the number of users ({train.n_users})."
            )
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
        keys = _seed_keys(k_grid, range(self.n_seeds))[seeds.reshape(-1)]
        n_users = _shapes.padded_size(train.n_users)
        n_items = _shapes.padded_size(train.n_items)
        dense, native, batch = _work_plan(
            n_users,
            n_items,
            _shapes.padded_size(train.rating.size),
            self.rank + (1 if self.biases else 0),
            self.loss,
            self.dense,
            self.grid_batch_size,
        )
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
            batch_size=None if batch is None else min(int(batch), grid_u.size),
            dense=dense,
            native=native,
            warm_start=self.warm_start,
        )
        dtype = jax.dtypes.canonicalize_dtype(np.float64)
        order, restart = np.arange(grid_u.size), None
        if self.warm_start:
            order, restart = _warm_path(l2u, l2i)
        patience = self.patience
        if patience is None:
            patience = 2 if self.warm_start else 5
        # the traced settings every fit of this call shares
        shared = (
            np.asarray(self.epsilon, dtype),
            np.asarray(patience, np.int32),
            np.asarray(self.tol, dtype),
        )
        out, starts = core.fit_grid(
            problem,
            keys[order],
            grid_u.reshape(-1)[order].astype(dtype),
            grid_i.reshape(-1)[order].astype(dtype),
            *shared,
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
                shared[0],
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
        more_keys = _seed_keys(k_grid, range(self.n_seeds, self.n_seeds + n_more))
        more_cfg = dataclasses.replace(
            cfg, warm_start=False, batch_size=None if batch is None else min(int(batch), n_more)
        )
        more, _ = core.fit_grid(
            problem, more_keys, np.full(n_more, lu), np.full(n_more, li), *shared, cfg=more_cfg
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
                shared[0],
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
