r"""CML: collaborative metric learning (Hsieh et al., WWW 2017).

Users and items are points in :math:`\mathbb R^d`; a user's preferred items should lie closer
to the user than the others by a margin ``m``. The loss over LearnBPR triples is the hinge

.. math::
    \frac1B \sum_{(u, i, j)} \big[m + d(u, i)^2 - d(u, j)^2\big]_+ ,
    \qquad d(u, i) = \lVert w_u - h_i \rVert,

and after every update all points are projected back into the unit ball
(:math:`w \leftarrow w / \max(1, \lVert w \rVert)`, CML's norm clipping). The score is
:math:`-d(u, i)^2`. Simplifications (documented choices): one negative per triple and
uniform weighting (the paper's WARP rank weights over ``U`` negatives and its covariance
regulariser are not implemented); an optional L2 term ``l2`` on the sampled rows (default 0).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from jaxcal._validation import check_real
from jaxcal.recsys._fitted import DistanceModel
from jaxcal.recsys._train import fit_doc
from jaxcal.recsys.bpr import BPRMF

__all__ = ["CML", "cml_loss", "clip_norms"]


def cml_loss(user_rows, pos_rows, neg_rows, margin, l2) -> jax.Array:
    """Mean hinge ``[margin + ||w_u - h_i||^2 - ||w_u - h_j||^2]_+`` plus ``l2/2`` times the
    squared norms of the sampled rows."""
    d_pos = jnp.sum((user_rows - pos_rows) ** 2, axis=-1)
    d_neg = jnp.sum((user_rows - neg_rows) ** 2, axis=-1)
    sq = jnp.sum(user_rows**2 + pos_rows**2 + neg_rows**2, axis=-1)
    return jnp.mean(jax.nn.relu(margin + d_pos - d_neg) + 0.5 * l2 * sq)


def clip_norms(rows: jax.Array, max_norm: float = 1.0) -> jax.Array:
    """Scale each row with norm above ``max_norm`` back onto the ball (CML's clipping)."""
    norms = jnp.sqrt(jnp.sum(rows * rows, axis=-1, keepdims=True))
    return rows * jnp.minimum(1.0, max_norm / jnp.maximum(norms, 1e-30))


@dataclasses.dataclass(frozen=True)
class CML(BPRMF):
    """Collaborative metric learning (Hsieh et al. 2017); see the module docstring.

    Args:
        rank, learning_rate, n_steps, batch_size, optimizer, init_scale: as in ``BPRMF``.
        l2: optional L2 strength on sampled rows (default 0; CML regularises by clipping).
        margin: hinge margin ``m`` (> 0).

    Example:
        >>> import jax, numpy as np
        >>> from jaxcal.recsys import CML
        >>> train = np.random.default_rng(0).random((30, 40)) < 0.2
        >>> fitted = CML(rank=8, n_steps=100).fit(train, key=jax.random.key(0))
        >>> norms = np.linalg.norm(np.asarray(fitted.item_factors), axis=1)
        >>> bool(np.all(norms <= 1 + 1e-6))  # the points are clipped to the unit ball
        True
    """

    l2: float = 0.0
    margin: float = 0.5

    ARRAY_HPARAMS = ("learning_rate", "l2", "margin")
    fitted_class = DistanceModel

    def fit(
        self,
        train: Any,
        *,
        key: jax.Array,
        n_users: int | None = None,
        n_items: int | None = None,
    ) -> DistanceModel:
        return self._fit(train, key=key, n_users=n_users, n_items=n_items)

    fit.__doc__ = fit_doc(
        "The fitted :class:`DistanceModel` (scores: negative squared distances).",
        """            >>> import jax
            >>> from jaxcal.data import Interactions
            >>> from jaxcal.recsys import CML
            >>> ratings = Interactions.create([0, 1, 1, 2], [2, 0, 3, 1], [5, 4, 0, 3])
            >>> fitted = CML(rank=2, n_steps=20).fit(ratings, key=jax.random.key(0))
            >>> fitted.predict_all().shape  # rating 0 is not a positive
            (3, 4)""",
    )

    def _validate(self) -> None:
        self._validate_common()
        check_real(self.margin, "margin", minimum=0.0, strict=True)

    def _row_loss(self, rows, batch, aux, hp):
        return cml_loss(rows["user"], rows["pos"], rows["neg"], hp["margin"], hp["l2"])

    def _project(self, params, hp):
        return {"user": clip_norms(params["user"]), "item": clip_norms(params["item"])}

    def _finish(self, params, aux, hp, losses):
        return DistanceModel(params["user"], params["item"], losses)
