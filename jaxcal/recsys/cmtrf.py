r"""CMTRF: clustered monotone transforms for rating factorisation (Hiranandani, Somani,
Koyejo and Acharyya, WSDM 2019), with a grid of ridge penalties and random starts trained in
one program and chosen on validation ratings (:class:`Search`). See ``docs/cmtrf.md`` and
``jaxcal.recsys._cmtrf_core`` for the formulas.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal import _shapes
from jaxcal._validation import check_int, check_real
from jaxcal.data.triples import Interactions
from jaxcal.recsys import _cmtrf_core as core
from jaxcal.recsys._cmtrf_data import _fit_ratings, _pairs, _training_problem
from jaxcal.recsys._cmtrf_fitted import _MEMBER_FIELDS, CMTRFModel, _mean_validation_mse
from jaxcal.recsys._cmtrf_grid import _chosen_sweeps, _seed_keys, _warm_path, _work_plan
from jaxcal.recsys._cmtrf_options import CMTRFSolver, Search, _check_bool
from jaxcal.recsys._train import _positive_grid, check_fraction, check_key

__all__ = ["CMTRF", "CMTRFModel", "CMTRFSolver", "Search"]

_TRANSFORMS = ("none", "global", "per_user", "clustered")
_OBJECTIVES = ("squared", "poisson")


@dataclasses.dataclass(frozen=True)
class CMTRF:
    r"""Rating factorisation up to learned monotone transforms of the rating scale (CMTRF).

    Hiranandani, Somani, Koyejo and Acharyya, "Clustered Monotone Transforms for Rating
    Factorization", WSDM 2019. A rating :math:`r_{ui} \in 1..L` is fitted through a
    transform :math:`z_{g(u)}[r]` with gaps :math:`\ge \varepsilon` (``min_gap``): learned
    for all users (``transform="global"``), per user (``"per_user"``), per cluster of users
    (``"clustered"``: k-means over the per-user transforms, then users reassigned by
    training loss) or not at all (``"none"``: ridge matrix factorisation of the raw
    ratings). The factors minimise :math:`\sum D_\phi(z \,\|\, f(\theta)) +
    \tfrac{\lambda_u}{2}\sum_u\lVert x_u\rVert^2 + \tfrac{\lambda_i}{2}\sum_i\lVert
    y_i\rVert^2` by ALS (penalties not scaled by counts), alternating with the exact
    transform step. ``anchor=True`` fixes :math:`z[1] = 1`, :math:`z[L] = L`, which makes
    the transform's shape identifiable (without it every gap collapses to
    :math:`\varepsilon`; ``docs/cmtrf.md``).

    The constructor holds the model; how penalties and random starts are searched (a grid
    of penalties, replicates, warm starts, a refit, an ensemble) is a :class:`Search`, and
    how the solver runs a :class:`CMTRFSolver`, both passed to :meth:`fit`.

    Args:
        transform: ``"none"``, ``"global"``, ``"per_user"`` or ``"clustered"``.
        rank: number of factors :math:`d`.
        n_clusters: clusters of ``"clustered"``.
        min_gap: the smallest gap :math:`\varepsilon` between consecutive transformed levels
            :math:`z[r + 1] - z[r]` (> 0; at most 1 with ``anchor``).
        l2_user, l2_item: ridge penalties (> 0); a :class:`Search` may give grids instead.
        objective: ``"squared"`` or ``"poisson"`` (generalised I-divergence,
            :math:`f = \exp`).
        anchor: fix the end levels of the transform at :math:`1` and :math:`L`.
        biases: add user and item biases :math:`b_u + c_i` to :math:`\theta` (penalised with
            the same ridge as their side's factors).
        offset: add a global offset :math:`\mu` to :math:`\theta` (not penalised; refitted
            exactly after every sweep). ``offset=False, anchor=False`` is the authors' model.
        n_levels: the rating scale ``L`` (default: the largest rating seen).
        max_iter: most ALS sweeps (per phase for ``"clustered"``); early stopping on the
            validation ratings usually ends a fit before.
        patience: stop after this many sweeps without progress (default 5; 2 with
            ``Search(warm_start=True)``, whose points start close to their optimum, and then
            for the ensemble's further members too).
        tol: progress is a validation MSE more than ``tol`` (relative) below the one of the
            last progress (default 0: any decrease). The fit keeps the sweep of lowest
            validation MSE either way. ``tol=0.003`` ends the long tails of slowly
            improving fits (``docs/benchmarks.md``).
        validation_fraction: share of the training ratings held out (by ``key``) for early
            stopping and the grid choice when ``fit`` gets no ``validation``.

    Raises:
        ValueError: a hyperparameter out of range (named in the message), when the
            estimator is built.

    Example:
        >>> import jax, numpy as np
        >>> from jaxcal.data import Interactions
        >>> from jaxcal.recsys import CMTRF
        >>> rng = np.random.default_rng(0)
        >>> dense = np.where(rng.random((40, 30)) < 0.5, rng.integers(1, 6, (40, 30)), 0)
        >>> train = Interactions.from_dense(dense)
        >>> model = CMTRF(transform="global", rank=2, max_iter=5).fit(train, key=jax.random.key(0))
        >>> model.transforms.shape  # [members, transforms, levels]
        (1, 1, 5)
        >>> bool(np.all(np.diff(np.asarray(model.transforms)) >= 0.5 - 1e-5))
        True
    """

    transform: str = "global"
    rank: int = 10
    n_clusters: int = 5
    min_gap: float = 0.5
    l2_user: float = 1.0
    l2_item: float = 1.0
    objective: str = "squared"
    anchor: bool = True
    biases: bool = False
    offset: bool = True
    n_levels: int | None = None
    max_iter: int = 50
    patience: int | None = None
    tol: float = 0.0
    validation_fraction: float = 0.1

    fitted_class = CMTRFModel

    def __post_init__(self) -> None:
        if self.transform not in _TRANSFORMS:
            raise ValueError(f"transform must be one of {_TRANSFORMS}; got {self.transform!r}.")
        if self.objective not in _OBJECTIVES:
            raise ValueError(f"objective must be one of {_OBJECTIVES}; got {self.objective!r}.")
        for name in ("rank", "n_clusters", "max_iter"):
            check_int(getattr(self, name), name)
        if self.patience is not None:
            check_int(self.patience, "patience")
        if self.n_levels is not None:
            check_int(self.n_levels, "n_levels", minimum=2)
        for name in ("anchor", "biases", "offset"):
            _check_bool(getattr(self, name), name)
        if not (isinstance(self.tol, int | float) and 0 <= self.tol < 1):
            raise ValueError(f"tol must be a number in [0, 1); got {self.tol!r}.")
        gap = check_real(self.min_gap, "min_gap", minimum=0.0, strict=True)
        if self.anchor and gap > 1:
            raise ValueError(
                f"min_gap must be <= 1 with anchor=True (the anchors z[1] = 1, z[L] = L leave "
                f"L - 1 for L - 1 gaps); got {gap!r}. Use anchor=False for larger gaps."
            )
        check_fraction(self.validation_fraction, "validation_fraction")
        for name in ("l2_user", "l2_item"):
            if not isinstance(getattr(self, name), int | float | np.integer | np.floating):
                raise ValueError(
                    f"{name} must be a number > 0; got {getattr(self, name)!r} (a grid of "
                    f"penalties goes in fit's search=Search({name}=...))."
                )
            check_real(getattr(self, name), name, minimum=0.0, strict=True)

    def fit(
        self,
        train: Interactions,
        *,
        key: jax.Array,
        validation: Interactions | None = None,
        propensity: ArrayLike | None = None,
        search: Search | None = None,
        solver: CMTRFSolver | None = None,
    ) -> CMTRFModel:
        r"""Fit on ``train`` (explicit ratings ``1..L``), early-stopped and grid-chosen on
        ``validation`` ratings; when ``validation`` is None a random
        ``validation_fraction`` of ``train`` (drawn with ``key``) is held out for that and
        not trained on. Test ratings are never needed.

        Args:
            train: the training ratings (``jaxcal.data.Interactions``).
            key: JAX PRNG key: the hold-out (without ``validation``) and the random starts.
            validation: validation ratings of the same users and items.
            propensity: ``[n_users, n_items]`` probabilities that each rating is observed
                (ratings missing not at random, as Coat's self-selected ones). Every loss
                over ratings (the ALS half-steps, the transform step, the global offset and
                the validation MSE) is then weighted by :math:`1 / p_{ui}` (inverse
                propensity scoring, Schnabel et al., ICML 2016): the training weights
                scaled to mean 1, so that the penalties keep their meaning, and the
                validation MSE self-normalised (:math:`\sum w e^2 / \sum w`), an estimate of
                the error on ratings of items drawn at random.
            search: the grid of penalties, replicates, warm start, refit and ensemble
                (:class:`Search`; default: the estimator's penalties, one fit).
            solver: how the solver runs (:class:`CMTRFSolver`; default: its defaults).

        Returns:
            A :class:`CMTRFModel`, always: its per-fit arrays carry a leading members axis
            (one member unless ``search.ensemble > 1``).

        Raises:
            ValueError: ratings not integers in ``1..L``, empty data, ids out of range,
                ``validation`` of another size, too few ratings to hold out,
                ``propensity`` of another shape or outside ``(0, 1]`` where rated, or
                ``search`` / ``solver`` of another type.

        Example:
            >>> import jax
            >>> from jaxcal.data import simulate_ratings
            >>> from jaxcal.recsys import CMTRF, Search
            >>> sim = simulate_ratings("sd1", n_users=40, n_items=30, density=0.5,
            ...                        key=jax.random.key(1))
            >>> search = Search(l2_user=(0.1, 1.0), refit=True)  # l2_item: the model's
            >>> model = CMTRF(rank=2, max_iter=5).fit(sim.ratings, key=jax.random.key(0),
            ...                                       search=search)
            >>> model.grid_validation_mse.shape, float(model.l2_item)
            ((2, 1, 1), 1.0)
        """
        search = Search() if search is None else search
        solver = CMTRFSolver() if solver is None else solver
        if not isinstance(search, Search):
            raise ValueError(f"search must be a jaxcal.recsys.Search; got {type(search).__name__}.")
        if not isinstance(solver, CMTRFSolver):
            raise ValueError(
                f"solver must be a jaxcal.recsys.CMTRFSolver; got {type(solver).__name__}."
            )
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
        l2u = _positive_grid(self.l2_user if search.l2_user is None else search.l2_user, "l2_user")
        l2i = _positive_grid(self.l2_item if search.l2_item is None else search.l2_item, "l2_item")
        n_rep = search.n_replicates
        grid_u, grid_i, reps = np.meshgrid(l2u, l2i, np.arange(n_rep), indexing="ij")
        # replicate r uses fold_in(key, r) whatever n_replicates is: a grid point equals the
        # single fit with its penalties (and n_replicates = r + 1)
        keys = _seed_keys(k_grid, range(n_rep))[reps.reshape(-1)]
        n_users = _shapes.padded_size(train.n_users)
        n_items = _shapes.padded_size(train.n_items)
        dense, native, batch = _work_plan(
            n_users,
            n_items,
            _shapes.padded_size(train.rating.size),
            self.rank + (1 if self.biases else 0),
            self.objective,
            solver.dense,
            solver.grid_batch_size,
        )
        cfg = core.Config(
            n_users=n_users,
            n_items=n_items,
            n_levels=n_levels,
            rank=self.rank,
            transform=self.transform,
            loss=self.objective,
            anchor=self.anchor,
            biases=self.biases,
            offset=self.offset,
            n_clusters=self.n_clusters,
            n_sweeps=self.max_iter,
            n_newton=solver.n_newton,
            init_scale=float(solver.init_scale),
            batch_size=None if batch is None else min(int(batch), grid_u.size),
            dense=dense,
            native=native,
            warm_start=search.warm_start,
        )
        dtype = jax.dtypes.canonicalize_dtype(np.float64)
        order, restart = np.arange(grid_u.size), None
        if search.warm_start:
            order, restart = _warm_path(l2u, l2i)
        patience = self.patience
        if patience is None:
            patience = 2 if search.warm_start else 5
        # the traced settings every fit of this call shares
        shared = (
            np.asarray(self.min_gap, dtype),
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
        if search.warm_start:  # back to the grid's order
            back = np.argsort(order)
            out, starts = jax.tree.map(lambda a: np.asarray(a)[back], (out, starts))
        mse = np.asarray(out.best_mse)
        best = int(np.argmin(np.where(np.isnan(mse), np.inf, mse)))
        pick = lambda a: np.asarray(a)[best]  # noqa: E731
        chosen = jax.tree.map(pick, out)
        lu = grid_u.reshape(-1)[best].astype(dtype)
        li = grid_i.reshape(-1)[best].astype(dtype)
        state, both = chosen.state, None
        if search.refit:  # the training and validation ratings together
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
        members = [self._member(state, chosen, train)]
        if search.ensemble == 1:
            return self._model(members, settings, mse[best])
        # the further members: the replicates after the grid's, from random starts
        n_more = search.ensemble - 1
        more_keys = _seed_keys(k_grid, range(n_rep, n_rep + n_more))
        more_cfg = dataclasses.replace(
            cfg, warm_start=False, batch_size=None if batch is None else min(int(batch), n_more)
        )
        more, _ = core.fit_grid(
            problem, more_keys, np.full(n_more, lu), np.full(n_more, li), *shared, cfg=more_cfg
        )
        more = jax.tree.map(np.asarray, more)
        every = jax.tree.map(lambda a, b: np.concatenate([a[None], b]), chosen.state, more.state)
        mean_mse = _mean_validation_mse(every, validation_pairs, self.objective)
        states = [jax.tree.map(lambda a, m=m: a[m], more.state) for m in range(n_more)]
        if search.refit:
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
        members += [
            self._member(st, jax.tree.map(lambda a, m=m: a[m], more), train)
            for m, st in enumerate(states)
        ]
        return self._model(members, settings, mean_mse)

    def _member(self, state: core.State, fit: core.FitOutput, train) -> dict:
        """One member's arrays (the padding cut off), with ``fit``'s validation record."""
        return {
            "user_factors": jnp.asarray(state.user_factors[: train.n_users]),
            "item_factors": jnp.asarray(state.item_factors[: train.n_items]),
            "user_bias": jnp.asarray(state.user_bias[: train.n_users]),
            "item_bias": jnp.asarray(state.item_bias[: train.n_items]),
            "transforms": jnp.asarray(
                state.transforms[: train.n_users]
                if self.transform == "per_user"
                else state.transforms
            ),
            "group": jnp.asarray(state.group[: train.n_users]),
            "offset": jnp.asarray(state.offset),
            "validation_mse": jnp.asarray(fit.history),
            "pretrain_validation_mse": jnp.asarray(fit.pretrain_history),
            "best_sweep": jnp.asarray(fit.best_sweep),
        }

    def _model(self, members: list[dict], settings: dict, mean_mse) -> CMTRFModel:
        """The fitted model of ``members`` (stacked along a leading axis)."""
        stacked = {f: jnp.stack([m[f] for m in members]) for f in _MEMBER_FIELDS}
        return CMTRFModel(
            **stacked,
            **settings,
            mean_validation_mse=jnp.asarray(mean_mse, settings["l2_user"].dtype),
            objective=self.objective,
            transform=self.transform,
            min_gap=float(self.min_gap),
            anchor=self.anchor,
        )
