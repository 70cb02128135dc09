r"""UBPR: unbiased pairwise learning from biased implicit feedback (Saito, ICTIR 2020).

Implicit feedback is :math:`Y_{ui} = O_{ui} R_{ui}`: a click needs exposure
(:math:`P(O_{ui} = 1) = \omega_{ui}`, the propensity) and relevance :math:`R_{ui}`. The
ideal pairwise loss over relevant ``i`` and irrelevant ``j`` is estimated without bias by

.. math::
    \hat L = \sum_{u} \sum_{i, j} \frac{Y_{ui}}{\omega_{ui}}
    \Big(1 - \frac{Y_{uj}}{\omega_{uj}}\Big)\, \ell(\hat x_{ui} - \hat x_{uj}),
    \qquad \ell(x) = -\ln\sigma(x),

since :math:`E[Y_{ui}/\omega_{ui}] = R_{ui}` and :math:`E[1 - Y_{uj}/\omega_{uj}] = 1 - R_{uj}`.
Training draws ``(u, i)`` uniformly from the clicks and ``j`` uniformly from *all* items
(the correction acts on clicked ``j`` too: their weight :math:`1 - 1/\omega_{uj}` is
negative), so the mini-batch mean is an unbiased estimate of :math:`\hat L` up to a
constant factor. The estimator itself is not clipped (Saito's non-negative variant is not
implemented); clip small propensities instead (``popularity_propensity(clip=...)``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal.data.triples import Interactions
from jaxcal.debias.propensity import popularity_propensity
from jaxcal.recsys._data import is_positive
from jaxcal.recsys._fitted import FactorModel
from jaxcal.recsys._train import fit_doc
from jaxcal.recsys.bpr import BPRMF, bpr_loss

__all__ = ["UBPR"]


@dataclasses.dataclass(frozen=True)
class UBPR(BPRMF):
    """Unbiased BPR (Saito 2020): BPR-MF trained with the inverse-propensity pairwise loss.

    Same hyperparameters as ``BPRMF``. ``fit`` takes ``propensity=``: ``[n_items]`` item
    propensities or a ``[n_users, n_items]`` matrix, all in (0, 1]; default
    ``jaxcal.debias.popularity_propensity(train)``. Each sampled triple gets weight
    :math:`(1/\\omega_{ui})(1 - Y_{uj}/\\omega_{uj})` in the BPR loss.

    Example:
        >>> import jax, numpy as np
        >>> from jaxcal.recsys import UBPR
        >>> train = np.random.default_rng(0).random((30, 40)) < 0.2
        >>> fitted = UBPR(rank=8, n_steps=100).fit(train, key=jax.random.key(0))
        >>> fitted.predict_all().shape
        (30, 40)
    """

    NEGATIVES = "all"

    def fit(
        self,
        train: Any,
        *,
        key: jax.Array,
        propensity: ArrayLike | None = None,
        n_users: int | None = None,
        n_items: int | None = None,
    ) -> FactorModel:
        return self._fit(train, key=key, n_users=n_users, n_items=n_items, propensity=propensity)

    fit.__doc__ = fit_doc(
        "The fitted :class:`FactorModel`.",
        """            >>> import jax, numpy as np
            >>> from jaxcal.recsys import UBPR
            >>> train = np.random.default_rng(0).random((30, 40)) < 0.2
            >>> omega = np.linspace(0.2, 1.0, 40)  # item propensities
            >>> fitted = UBPR(rank=4, n_steps=20).fit(train, key=jax.random.key(0),
            ...                                       propensity=omega)
            >>> fitted.trainer
            'UBPR'""",
        """            propensity: ``[n_items]`` item propensities or a ``[n_users, n_items]``
                matrix, all in (0, 1]; default
                ``jaxcal.debias.popularity_propensity(train)``.
""",
    )

    def _prepare(self, data: Interactions, propensity: ArrayLike | None = None) -> dict:
        aux = super()._prepare(data)
        if propensity is None:
            omega = popularity_propensity(data)
        else:
            omega = np.asarray(propensity, dtype=np.float64)
            if omega.shape not in ((data.n_items,), (data.n_users, data.n_items)):
                raise ValueError(
                    f"propensity must have shape ({data.n_items},) (per item) or "
                    f"({data.n_users}, {data.n_items}) (per pair); got {omega.shape}."
                )
            if not np.isfinite(omega).all():
                raise ValueError("propensity contains NaN or inf.")
            if (omega <= 0).any() or (omega > 1).any():
                raise ValueError(
                    f"propensity must lie in (0, 1]; got min {omega.min():.6g}, "
                    f"max {omega.max():.6g}. Clip small propensities, e.g. at 0.1."
                )
        aux["propensity"] = jnp.asarray(omega)
        return aux

    def _row_loss(self, rows, batch, aux, hp):
        u, i, j = batch
        omega = aux["propensity"]
        om_i = omega[i] if omega.ndim == 1 else omega[u, i]
        om_j = omega[j] if omega.ndim == 1 else omega[u, j]
        y_j = is_positive(aux["tables"], u, j, aux["sizes"].search_bound).astype(om_j.dtype)
        weights = (1.0 / om_i) * (1.0 - y_j / om_j)
        return bpr_loss(rows["user"], rows["pos"], rows["neg"], hp["l2"], weights)
