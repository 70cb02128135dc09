"""Fitted ranking models shared by several trainers (immutable pytrees, saved losslessly)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxcal._pytree import pytree_dataclass, static_field
from jaxcal.recsys._train import check_indices

__all__ = ["FactorModel", "DistanceModel", "FactorSizes", "all_items"]


class FactorSizes:
    """``n_users`` / ``n_items`` of a fitted model holding ``user_factors`` and
    ``item_factors`` (``[..., n, rank]``)."""

    @property
    def n_users(self) -> int:
        return self.user_factors.shape[-2]

    @property
    def n_items(self) -> int:
        return self.item_factors.shape[-2]


@dataclasses.dataclass(frozen=True)
class _EmbeddingModel(FactorSizes):
    """User and item vectors; subclasses say how a pair of vectors scores
    (``_pair_scores``: row by row, ``_all_scores``: every user row against every item row)."""

    user_factors: jax.Array
    item_factors: jax.Array
    train_loss: jax.Array
    trainer: str = static_field(default="")

    def predict(self, users: ArrayLike, items: ArrayLike) -> jax.Array:
        """Ranking scores of ``(users, items)`` (integer ids, broadcast together).

        Example:
            >>> import jax.numpy as jnp
            >>> from jaxcal.recsys import FactorModel
            >>> model = FactorModel(jnp.eye(2), jnp.array([[1.0, 2.0]]), jnp.zeros(1))
            >>> model.predict(jnp.array([0, 1]), jnp.array([0, 0])).tolist()
            [1.0, 2.0]
        """
        u, i = check_indices(users, items, self.n_users, self.n_items)
        return self._pair_scores(self.user_factors[u], self.item_factors[i])

    def predict_all(self, users: ArrayLike | None = None) -> jax.Array:
        """``[n, n_items]`` scores of every item for ``users`` (default: all users).

        Example:
            >>> import jax.numpy as jnp
            >>> from jaxcal.recsys import DistanceModel
            >>> model = DistanceModel(jnp.zeros((3, 2)), jnp.eye(2), jnp.zeros(1))
            >>> model.predict_all(jnp.array([0])).tolist()  # -||w_u - h_i||^2
            [[-1.0, -1.0]]
        """
        w = self.user_factors if users is None else self.user_factors[_ids(users, self.n_users)]
        return self._all_scores(w, self.item_factors)


@pytree_dataclass
class FactorModel(_EmbeddingModel):
    """Scores by inner products: :math:`\\hat x_{ui} = \\langle w_u, h_i \\rangle`.

    Returned by ``BPRMF``, ``UBPR``, ``LightGCN`` (propagated embeddings) and ``WRMF``.

    Attributes:
        user_factors: ``[n_users, rank]`` user factors.
        item_factors: ``[n_items, rank]`` item factors.
        train_loss: per-step training loss (``[n_steps]``; WR-MF: objective per sweep).
        trainer: name of the model that produced the factors.

    Example:
        >>> import jax, numpy as np
        >>> from jaxcal.recsys import BPRMF, FactorModel
        >>> train = np.random.default_rng(0).random((30, 40)) < 0.2
        >>> fitted = BPRMF(rank=4, n_steps=20).fit(train, key=jax.random.key(0))
        >>> isinstance(fitted, FactorModel), fitted.predict_all().shape
        (True, (30, 40))
    """

    trainer: str = static_field(default="BPRMF")

    @staticmethod
    def _pair_scores(w: jax.Array, h: jax.Array) -> jax.Array:
        return jnp.sum(w * h, axis=-1)

    @staticmethod
    def _all_scores(w: jax.Array, h: jax.Array) -> jax.Array:
        return w @ h.T


@pytree_dataclass
class DistanceModel(_EmbeddingModel):
    """Scores by negative squared distances: :math:`\\hat x_{ui} = -\\lVert w_u - h_i\\rVert^2`
    (CML, Hsieh et al. 2017: closer items rank higher).

    Attributes:
        user_factors: ``[n_users, rank]`` user points (norms <= 1).
        item_factors: ``[n_items, rank]`` item points (norms <= 1).
        train_loss: ``[n_steps]`` mini-batch losses.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxcal.recsys import DistanceModel
        >>> model = DistanceModel(jnp.array([[0.0, 0.0]]), jnp.array([[1.0, 0.0], [0.0, 0.5]]),
        ...                       jnp.zeros(1))
        >>> model.predict(0, jnp.array([0, 1])).tolist()  # the nearer item scores higher
        [-1.0, -0.25]
    """

    trainer: str = static_field(default="CML")

    @staticmethod
    def _pair_scores(w: jax.Array, h: jax.Array) -> jax.Array:
        diff = w - h
        return -jnp.sum(diff * diff, axis=-1)

    @staticmethod
    def _all_scores(w: jax.Array, h: jax.Array) -> jax.Array:
        sq = jnp.sum(w * w, -1)[:, None] + jnp.sum(h * h, -1)[None, :]
        return -(sq - 2.0 * w @ h.T)


def all_items(pair_fn, users: ArrayLike | None, n_users: int, n_items: int) -> jax.Array:
    """``pair_fn(users[:, None], items[None, :])``: the ``[n, n_items]`` outputs of every item
    for ``users`` (default: every user), through a model's checked pair method."""
    u = jnp.arange(n_users) if users is None else jnp.asarray(users)
    return pair_fn(u[:, None], jnp.arange(n_items)[None, :])


def _ids(users: ArrayLike, n_users: int) -> jax.Array:
    u, _ = check_indices(users, jnp.zeros((), jnp.int32), n_users, 1)
    return u
