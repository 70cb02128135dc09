r"""WR-MF: weighted regularised matrix factorisation by alternating least squares
(Hu, Koren and Volinsky, ICDM 2008, "Collaborative Filtering for Implicit Feedback Datasets").

With preferences :math:`p_{ui} = 1[r_{ui} > 0]` and confidences :math:`c_{ui} = 1 + \alpha
r_{ui}` (``r`` = the interaction strengths: 1 for 0/1 input, counts or ratings otherwise),
WR-MF minimises over *all* user-item pairs

.. math::
    \sum_{u, i} c_{ui} (p_{ui} - x_u^\top y_i)^2 + \lambda \big(\sum_u \lVert x_u \rVert^2
    + \sum_i \lVert y_i \rVert^2\big).

Each ALS half-step solves, per user, :math:`x_u = (Y^\top Y + Y^\top (C^u - I) Y +
\lambda I)^{-1} Y^\top C^u p_u`, where :math:`Y^\top Y` is shared and the correction only
involves the user's positives (Hu et al.'s speed-up). Positives are gathered from padded
per-user (per-item) lists, so memory is :math:`O(n \cdot \max\text{deg} \cdot d)`; the
``[n, d, d]`` systems are solved batched. ``train_loss`` records the objective after each
sweep (it is non-increasing: each half-step is an exact minimisation).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxcal import _shapes
from jaxcal.data.triples import Interactions
from jaxcal.recsys._data import Sizes
from jaxcal.recsys._fitted import FactorModel
from jaxcal.recsys._train import Ranker, _check_settings, fit_doc, init_factors

__all__ = ["WRMF", "als_half_step", "wrmf_objective"]


class Neighbours(NamedTuple):
    """Padded adjacency lists of one side: row ``n`` holds its positives' ids and values."""

    index: jax.Array  # [n, L] int32 (0 where padded)
    value: jax.Array  # [n, L] interaction strengths (0 where padded)
    valid: jax.Array  # [n, L] bool


def _padded(rows: np.ndarray, cols: np.ndarray, values: np.ndarray, n_rows: int) -> Neighbours:
    """Padded adjacency lists; the width (largest degree) is padded to its bucket size
    (``jaxcal._shapes``), so data with a new largest degree in the bucket share programs."""
    order = np.lexsort((cols, rows))
    rows, cols, values = rows[order], cols[order], values[order]
    deg = np.bincount(rows, minlength=n_rows)
    width = max(int(deg.max()), 1)
    width = _shapes.padded_size(width, total=n_rows * width)
    start = np.concatenate([[0], np.cumsum(deg)[:-1]])
    slot = np.arange(rows.size) - start[rows]
    index = np.zeros((n_rows, width), np.int32)
    value = np.zeros((n_rows, width))
    valid = np.zeros((n_rows, width), bool)
    index[rows, slot], value[rows, slot], valid[rows, slot] = cols, values, True
    dtype = jax.dtypes.canonicalize_dtype(np.float64)
    return Neighbours(*(jax.device_put(a) for a in (index, value.astype(dtype), valid)))


def _pairs(data: Interactions) -> tuple[jax.Array, ...]:
    """``(users, items, values, valid)`` of the positive pairs, padded to the bucket size of
    ``nnz`` (padding: pair ``(0, 0)``, value 0, ``valid = False``)."""
    size = _shapes.padded_size(data.user.size)
    dtype = jax.dtypes.canonicalize_dtype(np.float64)
    arrays = (data.user, data.item, data.rating.astype(dtype), np.ones(data.user.size, bool))
    return tuple(jax.device_put(_shapes.pad_axis(a, size, 0)) for a in arrays)


def als_half_step(
    other: jax.Array, neighbours: Neighbours, l2: jax.Array, alpha: jax.Array
) -> jax.Array:
    r"""Exact minimiser of the WR-MF objective over one side's factors, the other fixed.

    Args:
        other: ``[m, d]`` fixed factors of the other side (items when solving users).
        neighbours: padded positives of each row being solved.
        l2: :math:`\lambda` (> 0).
        alpha: confidence slope :math:`\alpha` (>= 0).

    Returns:
        ``[n, d]`` factors :math:`(F^\top F + F^\top (C - I) F + \lambda I)^{-1} F^\top C p`.
    """
    gram = other.T @ other
    rows = other[neighbours.index]  # [n, L, d]
    conf = jnp.where(neighbours.valid, 1.0 + alpha * neighbours.value, 0.0)
    extra = jnp.where(neighbours.valid, conf - 1.0, 0.0)
    a = gram + jnp.einsum("nl,nld,nle->nde", extra, rows, rows)
    a = a + l2 * jnp.eye(other.shape[1], dtype=other.dtype)
    b = jnp.einsum("nl,nld->nd", conf, rows)
    return jnp.linalg.solve(a, b[..., None])[..., 0]


def wrmf_objective(x, y, users, items, values, l2, alpha, valid=None) -> jax.Array:
    r"""The full WR-MF objective without forming the dense matrix:
    :math:`\operatorname{tr}(X^\top X\, Y^\top Y) + \sum_{(u,i) \in P} [c_{ui}(1 - s_{ui})^2
    - s_{ui}^2] + \lambda(\lVert X\rVert^2 + \lVert Y\rVert^2)` with :math:`s = x_u^\top y_i`
    (``valid``, optional: ``False`` on padding pairs, which are left out)."""
    s = jnp.sum(x[users] * y[items], axis=-1)
    c = 1.0 + alpha * values
    pair_terms = c * (1.0 - s) ** 2 - s**2
    if valid is not None:
        pair_terms = jnp.where(valid, pair_terms, 0.0)
    dense_part = jnp.sum((x.T @ x) * (y.T @ y))
    return dense_part + jnp.sum(pair_terms) + l2 * (jnp.sum(x**2) + jnp.sum(y**2))


@dataclasses.dataclass(frozen=True)
class WRMF(Ranker):
    """WR-MF by ALS (Hu et al. 2008); see the module docstring.

    Args:
        rank: number of factors.
        l2: regularisation :math:`\\lambda` (> 0).
        alpha: confidence slope :math:`\\alpha` in :math:`c = 1 + \\alpha r` (>= 0).
        n_steps: ALS sweeps (each solves users, then items), all run: there is no stopping
            rule.
        init_scale: standard deviation of the initial item factors.

    Example:
        >>> import jax, numpy as np
        >>> from jaxcal.recsys import WRMF
        >>> counts = np.random.default_rng(0).poisson(0.3, (30, 40))  # interaction counts r
        >>> fitted = WRMF(rank=8, n_steps=5).fit(counts, key=jax.random.key(0))
        >>> fitted.train_loss.shape  # the objective after each sweep
        (5,)
    """

    rank: int = 64
    l2: float = 0.1
    alpha: float = 10.0
    n_steps: int = 15
    init_scale: float = 0.01

    ARRAY_HPARAMS = ("l2", "alpha")
    fitted_class = FactorModel

    def fit(
        self,
        train: Any,
        *,
        key: jax.Array,
        n_users: int | None = None,
        n_items: int | None = None,
    ) -> FactorModel:
        return self._fit(train, key=key, n_users=n_users, n_items=n_items)

    fit.__doc__ = fit_doc(
        "The fitted :class:`FactorModel` (``train_loss``: the objective after each sweep).",
        """            >>> import jax, numpy as np
            >>> from jaxcal.recsys import WRMF
            >>> plays = np.array([[3, 0, 1], [0, 2, 0]])  # play counts: confidences 1 + alpha r
            >>> loss = WRMF(rank=2, n_steps=4, alpha=5.0).fit(plays, key=jax.random.key(0))
            >>> bool(np.all(np.diff(np.asarray(loss.train_loss)) <= 1e-5))  # never increases
            True""",
    )

    def _validate(self) -> None:
        _check_settings(
            self, ints=("rank", "n_steps"), positive=("l2", "init_scale"), non_negative=("alpha",)
        )

    def _prepare(self, data: Interactions) -> dict:
        return {
            "by_user": _padded(data.user, data.item, data.rating, data.n_users),
            "by_item": _padded(data.item, data.user, data.rating, data.n_items),
            "pairs": _pairs(data),
            "sizes": Sizes(data.n_users, data.n_items),
        }

    def _fit_core(self, aux, hp, key, max_rank):
        sizes = aux["sizes"]
        y = init_factors(key, sizes.n_items, max_rank, self.init_scale, hp["rank"])
        x = jnp.zeros((sizes.n_users, max_rank), y.dtype)
        l2, alpha = hp["l2"], hp["alpha"]

        def sweep(carry, _):
            x, y = carry
            x = als_half_step(y, aux["by_user"], l2, alpha)
            y = als_half_step(x, aux["by_item"], l2, alpha)
            users, items, values, valid = aux["pairs"]
            return (x, y), wrmf_objective(x, y, users, items, values, l2, alpha, valid)

        (x, y), objective = jax.lax.scan(sweep, (x, y), None, length=self.n_steps)
        return FactorModel(x, y, objective, trainer="WRMF")
