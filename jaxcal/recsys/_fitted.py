"""Fitted ranking models shared by several trainers (immutable pytrees, saved losslessly)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxcal._pytree import pytree_dataclass, static_field
from jaxcal.recsys._train import check_indices

__all__ = ["FactorModel", "DistanceModel", "FactorSizes"]


class FactorSizes:
    """``n_users`` / ``n_items`` of a fitted model holding ``user_factors`` and
    ``item_factors`` (``[..., n, dim]``)."""

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

    def score(self, users: ArrayLike, items: ArrayLike) -> jax.Array:
        """Ranking scores of ``(users, items)`` (integer ids, broadcast together)."""
        u, i = check_indices(users, items, self.n_users, self.n_items)
        return self._pair_scores(self.user_factors[u], self.item_factors[i])

    def score_all(self, users: ArrayLike | None = None) -> jax.Array:
        """``[n, n_items]`` scores of every item for ``users`` (default: all users)."""
        w = self.user_factors if users is None else self.user_factors[_ids(users, self.n_users)]
        return self._all_scores(w, self.item_factors)


@pytree_dataclass
class FactorModel(_EmbeddingModel):
    """Scores by inner products: :math:`\\hat x_{ui} = \\langle w_u, h_i \\rangle`.

    Returned by ``BPRMF``, ``UBPR``, ``LightGCN`` (propagated embeddings) and ``WRMF``.

    Attributes:
        user_factors: ``[n_users, dim]`` user factors.
        item_factors: ``[n_items, dim]`` item factors.
        train_loss: per-step training loss (``[n_steps]``; WR-MF: objective per sweep).
        trainer: name of the model that produced the factors.
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
        user_factors: ``[n_users, dim]`` user points (norms <= 1).
        item_factors: ``[n_items, dim]`` item points (norms <= 1).
        train_loss: ``[n_steps]`` mini-batch losses.
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


def _ids(users: ArrayLike, n_users: int) -> jax.Array:
    u, _ = check_indices(users, jnp.zeros((), jnp.int32), n_users, 1)
    return u
