"""The options of a CMTRF fit that are not the model (:mod:`jaxcal.recsys.cmtrf`):
:class:`Search`, how the penalties and random starts are searched and combined, and
:class:`CMTRFSolver`, how the solver runs. Both are frozen dataclasses, checked when built
and passed to :meth:`jaxcal.recsys.CMTRF.fit`."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from jaxcal._validation import check_int, check_real
from jaxcal.recsys._train import _positive_grid

__all__ = ["Search", "CMTRFSolver"]


def _check_bool(value, name: str) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False; got {value!r}.")


@dataclasses.dataclass(frozen=True)
class Search:
    r"""How :meth:`CMTRF.fit <jaxcal.recsys.CMTRF.fit>` searches penalties and random starts
    and combines its fits (the model itself is the estimator's business).

    Every ``(l2_user, l2_item, replicate)`` point of the grid is trained (in one
    ``vmap``-ped program, or point after point), each early-stopped on the validation
    ratings, and the point with the lowest validation MSE is kept. Replicate ``r`` starts
    from the random draw of ``fold_in(k, r)`` (``k``: the grid's half of ``fit``'s key),
    whatever the grid around it, so a grid point equals the single fit with its penalties.

    Args:
        l2_user: the grid of user penalties (numbers > 0); default: the estimator's
            ``l2_user`` alone.
        l2_item: the grid of item penalties; default: the estimator's ``l2_item`` alone.
        n_replicates: random starts per penalty pair (part of the grid).
        warm_start: train each ``l2_user``'s points one after another, from the largest
            ``l2_item`` down: the first from its own random start, each next one from the
            factors of the previous point, instead of each from its own random start: fewer
            sweeps per point. Needs ``n_replicates=1``; a grid point then no longer equals
            the single fit with its penalties (but for the first of each ``l2_user``).
            The estimator's default ``patience`` is then 2 instead of 5.
        refit: after the choice, train the chosen grid point again on the training and
            validation ratings together: from the same start (its random draw, or with
            ``warm_start`` the state it started from), with the same penalties, for the
            number of sweeps chosen on validation (per phase for ``"clustered"``), without
            early stopping. The model then learns from every rating given to ``fit``, as
            the final fit after cross-validation does. ``validation_mse`` and
            ``grid_validation_mse`` stay those of the choice.
        ensemble: number of members averaged (default 1). With ``ensemble=S`` the chosen
            penalties are also trained from ``S - 1`` further random starts (the
            replicates after the grid's, early-stopped on validation as the grid's points,
            with patience 2 under ``warm_start``; each refitted with ``refit``), and the
            model predicts the mean of the ``S`` members' predicted ratings. The members of
            a low-rank fit from different starts land on different local optima; their mean
            has a lower error than a typical member (by convexity never a higher one than
            their average error).

    Raises:
        ValueError: a setting out of range (named in the message), or ``warm_start`` with
            several replicates.

    Example:
        >>> import jax, numpy as np
        >>> from jaxcal.data import Interactions
        >>> from jaxcal.recsys import CMTRF, Search
        >>> rng = np.random.default_rng(1)
        >>> rated = rng.integers(1, 6, (40, 30)) * (rng.random((40, 30)) < 0.6)  # 0: unrated
        >>> search = Search(l2_user=(0.1, 1.0), l2_item=(0.1, 1.0), n_replicates=2)
        >>> model = CMTRF(rank=2, max_iter=5).fit(Interactions.from_dense(rated),
        ...                                       key=jax.random.key(0), search=search)
        >>> model.grid_validation_mse.shape  # l2_user x l2_item x replicates
        (2, 2, 2)
    """

    l2_user: Sequence[float] | None = None
    l2_item: Sequence[float] | None = None
    n_replicates: int = 1
    warm_start: bool = False
    refit: bool = False
    ensemble: int = 1

    def __post_init__(self) -> None:
        for name in ("l2_user", "l2_item"):
            value = getattr(self, name)
            if value is not None:
                # stored as a tuple of floats: hashable, and the same grid however given
                object.__setattr__(self, name, tuple(_positive_grid(value, name).tolist()))
        check_int(self.n_replicates, "n_replicates")
        check_int(self.ensemble, "ensemble")
        _check_bool(self.warm_start, "warm_start")
        _check_bool(self.refit, "refit")
        if self.warm_start and self.n_replicates != 1:
            raise ValueError(
                "warm_start=True needs n_replicates=1 (replicates would start from each other)."
            )


@dataclasses.dataclass(frozen=True)
class CMTRFSolver:
    r"""How :meth:`CMTRF.fit <jaxcal.recsys.CMTRF.fit>` runs its solver: memory, speed and
    the start of the factors, not the model (options of the fit, not hyperparameters).
    ``dense`` and ``grid_batch_size`` change no result beyond rounding.

    Args:
        grid_batch_size: grid points per ``vmap`` chunk. Default: on a CPU one point after
            another (a ``vmap``-ped chunk runs every point for as many sweeps as its
            slowest point needs; ``docs/cmtrf.md``); on a GPU / TPU as many points as fit
            in about 1 GiB of work arrays.
        dense: solve the ALS half-steps on dense ``[n_users, n_items]`` rating matrices
            (matrix products) instead of per-rating scatters (same result). Default: dense
            on GPU / TPU when the padded matrix has at most 2^23 cells, per-rating on CPU
            (there by jaxcal's compiled ridge kernel when it is built, ``jaxcal._native``;
            ``JAXCAL_NATIVE=0``: ``segment_sum`` scatters).
        n_newton: Newton steps per half-step (``objective="poisson"``).
        init_scale: standard deviation of the random initial item factors.

    Raises:
        ValueError: a setting out of range (named in the message).

    Example:
        >>> import jax, numpy as np
        >>> from jaxcal.data import Interactions
        >>> from jaxcal.recsys import CMTRF, CMTRFSolver
        >>> users, items = np.indices((25, 20)).reshape(2, -1)
        >>> data = Interactions.create(users, items, 1 + (users + 3 * items) % 5)
        >>> key = jax.random.key(0)
        >>> a = CMTRF(rank=2, max_iter=3).fit(data, key=key, solver=CMTRFSolver(dense=True))
        >>> b = CMTRF(rank=2, max_iter=3).fit(data, key=key, solver=CMTRFSolver(dense=False))
        >>> bool(np.allclose(a.transforms, b.transforms, atol=1e-4))
        True
    """

    grid_batch_size: int | None = None
    dense: bool | None = None
    n_newton: int = 8
    init_scale: float = 0.1

    def __post_init__(self) -> None:
        if self.grid_batch_size is not None:
            check_int(self.grid_batch_size, "grid_batch_size")
        if self.dense is not None and not isinstance(self.dense, bool):
            raise ValueError(f"dense must be None, True or False; got {self.dense!r}.")
        check_int(self.n_newton, "n_newton")
        check_real(self.init_scale, "init_scale", minimum=0.0, strict=True)
