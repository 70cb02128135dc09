"""The fitted CMTRF model (:class:`CMTRFModel`, re-exported by :mod:`jaxcal.recsys.cmtrf`)
and the jitted programs that predict with it."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal import _shapes
from jaxcal._jit import jit
from jaxcal._pytree import pytree_dataclass, static_field
from jaxcal.recsys import _cmtrf_core as core
from jaxcal.recsys._fitted import FactorSizes, all_items
from jaxcal.recsys._train import check_host_ids, check_indices

__all__ = ["CMTRFModel"]


@functools.partial(jit, static_argnames=("objective", "clip"))
def _predict(state: core.State, users, items, *, objective: str, clip: bool):
    pred = core.predict_ratings(state, users, items, loss=objective)
    n_levels = state.transforms.shape[-1]
    return jnp.clip(pred, 1.0, n_levels) if clip else pred


@functools.partial(jit, static_argnames=("objective", "clip"))
def _predict_mean(states: core.State, users, items, *, objective: str, clip: bool):
    """The mean of the predicted ratings of states stacked along a leading axis."""
    pred = jax.vmap(lambda s: core.predict_ratings(s, users, items, loss=objective))(states)
    pred = jnp.mean(pred, axis=0)
    n_levels = states.transforms.shape[-1]
    return jnp.clip(pred, 1.0, n_levels) if clip else pred


def _mean_validation_mse(stacked: core.State, validation: core.Pairs, objective: str) -> float:
    """Validation MSE of the mean of the predicted ratings of states stacked along a leading
    axis (weighted as :func:`core.validation_mse`)."""
    pred = _predict_mean(stacked, validation.row, validation.col, objective=objective, clip=False)
    w = np.asarray(validation.weight)
    err = np.where(w > 0, (np.asarray(pred) - (np.asarray(validation.level) + 1.0)) ** 2, 0.0)
    return float(np.sum(w * err) / max(np.sum(w), 1.0))


#: the fields of :class:`CMTRFModel` with a leading members axis
_MEMBER_FIELDS = (
    "user_factors",
    "item_factors",
    "user_bias",
    "item_bias",
    "transforms",
    "group",
    "offset",
    "validation_mse",
    "pretrain_validation_mse",
    "best_sweep",
)


@pytree_dataclass
class CMTRFModel(FactorSizes):
    r"""A fitted CMTRF model: one or several members (fits of the chosen penalties from
    different random starts) whose predicted ratings are averaged (immutable pytree;
    ``jaxcal.save`` / ``jaxcal.load``).

    :meth:`CMTRF.fit` always returns this type. Its per-fit arrays carry a leading
    ``[S]`` members axis: ``S = 1`` unless ``Search(ensemble=S)`` asked for more (member 0
    is the chosen grid point's fit); :meth:`member` gives one member as a model of its own.

    Attributes:
        user_factors: ``[S, n_users, rank]`` user factors :math:`x_u`.
        item_factors: ``[S, n_items, rank]`` item factors :math:`y_i`.
        user_bias: ``[S, n_users]`` user biases :math:`b_u` (zeros unless ``biases=True``).
        item_bias: ``[S, n_items]`` item biases :math:`c_i`.
        transforms: ``[S, G, L]`` learned transforms :math:`z_g[r]` of the rating scale.
        group: ``[S, n_users]`` each user's transform row.
        offset: ``[S]`` the global offset :math:`\mu` (0 with ``offset=False``).
        validation_mse: ``[S, max_iter]`` validation MSE after each sweep (``nan`` after
            early stopping; ``clustered``: the clustered phase).
        pretrain_validation_mse: ``[S, max_iter]`` the same for the per-user phase of
            ``clustered`` (``nan`` otherwise).
        best_sweep: ``[S]`` the (0-based) sweep whose parameters were kept.
        l2_user, l2_item: the chosen ridge penalties.
        grid_validation_mse: ``[n_l2_user, n_l2_item, n_replicates]`` best validation MSE of
            every point of the search grid.
        l2_user_grid, l2_item_grid: the grid's penalties.
        mean_validation_mse: validation MSE of the members' mean prediction, before any
            refit (one member: its best validation MSE).
        objective, transform, min_gap, anchor: the model's settings.

    Example:
        >>> import jax, numpy as np
        >>> from jaxcal.data import Interactions
        >>> from jaxcal.recsys import CMTRF, CMTRFModel, Search
        >>> every = 1 + np.add.outer(np.arange(40), 2 * np.arange(30)) % 5  # all pairs rated
        >>> model = CMTRF(rank=2, max_iter=5).fit(Interactions.from_dense(every),
        ...                                       key=jax.random.key(0), search=Search(ensemble=2))
        >>> isinstance(model, CMTRFModel), model.n_members, model.transforms.shape
        (True, 2, (2, 1, 5))
    """

    user_factors: jax.Array
    item_factors: jax.Array
    user_bias: jax.Array
    item_bias: jax.Array
    transforms: jax.Array
    group: jax.Array
    offset: jax.Array
    validation_mse: jax.Array
    pretrain_validation_mse: jax.Array
    best_sweep: jax.Array
    l2_user: jax.Array
    l2_item: jax.Array
    grid_validation_mse: jax.Array
    l2_user_grid: jax.Array
    l2_item_grid: jax.Array
    mean_validation_mse: jax.Array
    objective: str = static_field(default="squared")
    transform: str = static_field(default="global")
    min_gap: float = static_field(default=0.5)
    anchor: bool = static_field(default=True)

    @property
    def n_members(self) -> int:
        """The number of members ``S``."""
        return self.user_factors.shape[0]

    @property
    def n_levels(self) -> int:
        """The rating scale ``L``."""
        return self.transforms.shape[-1]

    def member(self, k: int) -> CMTRFModel:
        """Member ``k`` as a model of one member (its own best validation MSE as
        ``mean_validation_mse``).

        Example:
            >>> import jax, numpy as np
            >>> from jaxcal.data import Interactions
            >>> from jaxcal.recsys import CMTRF, Search
            >>> users, items = np.indices((30, 20)).reshape(2, -1)
            >>> ratings = Interactions.create(users, items, 1 + (users * items) % 5)
            >>> model = CMTRF(rank=2, max_iter=5).fit(ratings, key=jax.random.key(0),
            ...                                       search=Search(ensemble=2))
            >>> model.member(1).n_members, model.member(1).user_factors.shape
            (1, (1, 30, 2))
        """
        if isinstance(k, bool) or not (isinstance(k, int | np.integer) and 0 <= k < self.n_members):
            raise ValueError(f"member index must lie in [0, {self.n_members}); got {k!r}.")
        k = int(k)
        one = {f: getattr(self, f)[k : k + 1] for f in _MEMBER_FIELDS}
        best = self.validation_mse[k, self.best_sweep[k]]
        return dataclasses.replace(self, **one, mean_validation_mse=best)

    def _state(self) -> core.State:
        """The members' parameters, stacked along the leading axis."""
        return core.State(
            self.user_factors,
            self.item_factors,
            self.user_bias,
            self.item_bias,
            self.transforms,
            self.group,
            self.offset,
        )

    def _call(self, users, items, clip: bool) -> jax.Array:
        """The predicted ratings on checked ids: one member by :func:`_predict`, several by
        :func:`_predict_mean`; host ids padded to a size bucket (no recompilation for a new
        number of pairs) and unpadded to the broadcast shape, traced ids as they are."""
        kwargs = {"objective": self.objective, "clip": bool(clip)}
        state = self._state()
        if self.n_members == 1:  # the member's own program
            fn, state = _predict, jax.tree.map(lambda a: a[0], state)
        else:
            fn = _predict_mean
        if _shapes.is_traced(users, items):
            u, i = check_indices(users, items, self.n_users, self.n_items)
            return fn(state, u, i, **kwargs)
        u, i = check_host_ids(users, items, self.n_users, self.n_items)
        shape = np.broadcast_shapes(np.shape(u), np.shape(i))
        u, i = (np.broadcast_to(np.asarray(a), shape).reshape(-1) for a in (u, i))
        n = u.size
        size = _shapes.padded_size(max(n, 1))
        u, i = (_shapes.pad_axis(a.astype(np.int32), size, 0) for a in (u, i))
        return _shapes.unpad(fn(state, u, i, **kwargs), n, shape)

    def predict(self, users: ArrayLike, items: ArrayLike, *, clip: bool = False) -> jax.Array:
        r"""Predicted ratings of ``(users, items)`` (integer ids, broadcast together): each
        member's :math:`f(\theta_{ui})` mapped through the inverse of the user's transform
        (piecewise linear through :math:`(z_r, r)`, extended linearly beyond the ends), and
        the mean over the members. Not clipped to ``[1, L]`` unless ``clip=True`` (the
        reference code does not clip). For one member the order of a user's items is that
        of :math:`\theta_{ui} = \langle x_u, y_i \rangle + b_u + c_i + \mu` (the transform's
        inverse is increasing).

        Example:
            >>> import jax, numpy as np
            >>> from jaxcal.data import simulate_ratings
            >>> from jaxcal.recsys import CMTRF
            >>> sim = simulate_ratings("sd2", n_users=30, n_items=40, density=0.4,
            ...                        key=jax.random.key(2))
            >>> model = CMTRF(transform="per_user", rank=2, max_iter=4)
            >>> model = model.fit(sim.ratings, key=jax.random.key(0))
            >>> pred = model.predict(np.array([0, 1]), np.array([2, 3]), clip=True)
            >>> bool(np.all((pred >= 1) & (pred <= 5)))
            True
        """
        return self._call(users, items, clip)

    def predict_all(self, users: ArrayLike | None = None, *, clip: bool = False) -> jax.Array:
        """``[n, n_items]`` predicted ratings (:meth:`predict`) of every item for ``users``
        (integer ids; default: all users).

        Example:
            >>> import jax, numpy as np
            >>> from jaxcal.data import Interactions
            >>> from jaxcal.recsys import CMTRF
            >>> levels = np.tile(np.arange(1, 6), (12, 4))  # 12 users, 20 items
            >>> fitted = CMTRF(transform="none", rank=1, max_iter=3).fit(
            ...     Interactions.from_dense(levels), key=jax.random.key(0))
            >>> fitted.predict_all(np.array([0, 1])).shape
            (2, 20)
        """
        pair = functools.partial(self.predict, clip=clip)
        return all_items(pair, users, self.n_users, self.n_items)
