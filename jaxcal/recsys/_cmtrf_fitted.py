"""The fitted CMTRF models (:class:`CMTRFModel`, :class:`CMTRFEnsemble`; re-exported by
:mod:`jaxcal.recsys.cmtrf`) and the jitted programs that score and predict with them."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal import _shapes
from jaxcal._jit import jit
from jaxcal._pytree import pytree_dataclass, static_field
from jaxcal.recsys import _cmtrf_core as core
from jaxcal.recsys._fitted import FactorSizes
from jaxcal.recsys._train import check_host_ids, check_indices

__all__ = ["CMTRFModel", "CMTRFEnsemble"]


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
