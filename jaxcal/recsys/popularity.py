"""The popularity baseline: every user gets items ranked by their number of positives."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal._pytree import pytree_dataclass, static_field
from jaxcal.recsys._data import as_interactions
from jaxcal.recsys._train import check_indices

__all__ = ["Popularity", "PopularityModel"]


@pytree_dataclass
class PopularityModel:
    """Fitted popularity baseline: :math:`\\hat x_{ui} = n_i`, the item's training positives.

    Attributes:
        item_counts: ``[n_items]`` positives per item (float).
        n_users: number of users.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxcal.recsys import PopularityModel
        >>> PopularityModel(jnp.array([3.0, 1.0]), n_users=2).predict_all().tolist()
        [[3.0, 1.0], [3.0, 1.0]]
    """

    item_counts: jax.Array
    n_users: int = static_field(default=1)

    @property
    def n_items(self) -> int:
        return self.item_counts.shape[-1]

    def predict(self, users: ArrayLike, items: ArrayLike) -> jax.Array:
        """Item popularity for ``(users, items)`` (integer ids, broadcast together).

        Example:
            >>> import jax.numpy as jnp
            >>> from jaxcal.recsys import PopularityModel
            >>> model = PopularityModel(jnp.array([3.0, 1.0]), n_users=2)
            >>> model.predict(jnp.array([0, 1]), jnp.array([1, 0])).tolist()
            [1.0, 3.0]
        """
        u, i = check_indices(users, items, self.n_users, self.n_items)
        return jnp.broadcast_to(self.item_counts[i], jnp.broadcast_shapes(u.shape, i.shape))

    def predict_all(self, users: ArrayLike | None = None) -> jax.Array:
        """``[n, n_items]`` scores (the same row for every user).

        Example:
            >>> import jax.numpy as jnp
            >>> from jaxcal.recsys import PopularityModel
            >>> model = PopularityModel(jnp.array([3.0, 1.0]), n_users=4)
            >>> model.predict_all(jnp.array([2])).tolist()
            [[3.0, 1.0]]
        """
        n = self.n_users if users is None else int(jnp.size(users))
        return jnp.broadcast_to(self.item_counts, (n, self.n_items))


@dataclasses.dataclass(frozen=True)
class Popularity:
    """Popularity baseline: no hyperparameters, and no randomness (``fit`` takes no key).

    Example:
        >>> import numpy as np
        >>> from jaxcal.recsys import Popularity
        >>> fitted = Popularity().fit(np.array([[1, 0], [1, 1]]))
        >>> fitted.predict(np.array([0, 0]), np.array([0, 1])).tolist()
        [2.0, 1.0]
    """

    fitted_class = PopularityModel

    def fit(
        self,
        train: Any,
        *,
        n_users: int | None = None,
        n_items: int | None = None,
    ) -> PopularityModel:
        """Count each item's positives (the data validated as in every other model's
        ``fit``).

        Args:
            train: positive interactions, in any form ``BPRMF.fit`` accepts.
            n_users: number of users (pairs input only; default ``max(users) + 1``).
            n_items: number of items (pairs input only; default ``max(items) + 1``).

        Returns:
            The fitted :class:`PopularityModel`.

        Raises:
            ValueError: on invalid training data.

        Example:
            >>> import numpy as np
            >>> from jaxcal.recsys import Popularity
            >>> Popularity().fit(np.array([[1, 0, 1], [1, 1, 0]])).item_counts.tolist()
            [2.0, 1.0, 1.0]
        """
        data = as_interactions(train, n_users=n_users, n_items=n_items)
        dtype = jax.dtypes.canonicalize_dtype(np.float64)
        counts = np.bincount(data.item, minlength=data.n_items).astype(dtype)  # host: no jit
        return PopularityModel(jax.device_put(counts), n_users=data.n_users)
