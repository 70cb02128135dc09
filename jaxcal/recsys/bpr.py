r"""BPR-MF: matrix factorisation trained with LearnBPR (Rendle et al., UAI 2009).

The model scores :math:`\hat x_{ui} = \langle w_u, h_i \rangle` and maximises BPR-Opt,

.. math::
    \sum_{(u, i, j) \in D_S} \ln \sigma(\hat x_{ui} - \hat x_{uj})
    - \lambda_\Theta \lVert \Theta \rVert^2,

where :math:`D_S` holds the triples of a user ``u``, an item ``i`` the user interacted with
and an item ``j`` the user did not. LearnBPR draws triples uniformly by bootstrap
sampling: here ``(u, i)`` uniformly from the positive pairs and ``j`` uniformly from the
user's non-positive items, exactly (no rejection loop; see ``jaxcal.recsys._data``), all on
device inside the scanned training step.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from jaxcal.data.triples import Interactions
from jaxcal.recsys._data import Sizes, sample_triples, sampler_tables
from jaxcal.recsys._fitted import FactorModel
from jaxcal.recsys._train import GradientRanker, fit_doc, init_factors

__all__ = ["BPRMF", "bpr_loss"]


def bpr_loss(
    user_rows: jax.Array,
    pos_rows: jax.Array,
    neg_rows: jax.Array,
    l2: jax.Array,
    weights: jax.Array | None = None,
) -> jax.Array:
    r"""Mean BPR loss of a mini-batch of triples, with LearnBPR's per-sample L2 penalty.

    .. math::
        \frac1B \sum_b \Big[ v_b \operatorname{softplus}(-(\langle w_u, h_i\rangle -
        \langle w_u, h_j \rangle)) + \tfrac{\lambda}{2}(\lVert w_u\rVert^2 +
        \lVert h_i\rVert^2 + \lVert h_j\rVert^2) \Big]

    (``softplus(-x) = -ln sigma(x)``; the penalty's gradient is LearnBPR's
    :math:`\lambda \theta` term; ``v_b`` are optional per-triple weights, e.g. UBPR's).

    Args:
        user_rows: ``[B, d]`` factors of the sampled users.
        pos_rows: ``[B, d]`` factors of their positive items.
        neg_rows: ``[B, d]`` factors of the sampled items ``j``.
        l2: regularisation strength :math:`\lambda`.
        weights: optional ``[B]`` weights of the pairwise terms.

    Returns:
        The scalar mean loss.
    """
    x = jnp.sum(user_rows * (pos_rows - neg_rows), axis=-1)
    pair = jax.nn.softplus(-x)
    if weights is not None:
        pair = weights * pair
    sq = jnp.sum(user_rows**2 + pos_rows**2 + neg_rows**2, axis=-1)
    return jnp.mean(pair + 0.5 * l2 * sq)


@dataclasses.dataclass(frozen=True)
class BPRMF(GradientRanker):
    """BPR-MF (Rendle et al. 2009): pairwise ranking matrix factorisation.

    Args:
        rank: number of factors.
        learning_rate: the optimizer's step size.
        l2: L2 strength :math:`\\lambda` on the factors of each sampled triple.
        n_steps: optimizer steps (each on ``batch_size`` triples drawn on device).
        batch_size: triples per step.
        optimizer: ``"adam"``, ``"sgd"`` (LearnBPR's plain SGD) or ``"adagrad"``.
        init_scale: standard deviation of the normal initial factors.

    Raises:
        ValueError: a hyperparameter out of range (named in the message), when the
            estimator is built.

    Example:
        >>> import jax, numpy as np
        >>> from jaxcal.recsys import BPRMF
        >>> train = np.random.default_rng(0).random((30, 40)) < 0.2
        >>> fitted = BPRMF(rank=8, n_steps=200).fit(train, key=jax.random.key(0))
        >>> fitted.predict(np.array([0, 1]), np.array([3, 4])).shape
        (2,)
    """

    rank: int = 64
    learning_rate: float = 0.01
    l2: float = 1e-4
    n_steps: int = 2000
    batch_size: int = 1024
    optimizer: str = "adam"
    init_scale: float = 0.1

    NEGATIVES = "non_positive"
    SPARSE_SGD = True  # optimizer="sgd" updates only the sampled rows (LearnBPR's update)
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
        "The fitted :class:`FactorModel` (an immutable pytree with ``predict``).",
        """            >>> import jax
            >>> from jaxcal.recsys import BPRMF
            >>> users, items = [0, 0, 1, 2, 2], [1, 3, 0, 2, 4]  # the positive pairs
            >>> fitted = BPRMF(rank=4, n_steps=20).fit((users, items), key=jax.random.key(0),
            ...                                        n_users=3, n_items=6)
            >>> fitted.user_factors.shape, fitted.item_factors.shape
            ((3, 4), (6, 4))""",
    )

    def _prepare(self, data: Interactions) -> dict:
        tables = sampler_tables(data, need_negatives=self.NEGATIVES == "non_positive")
        # the static bound of the binary searches (only used without the bitmap tables),
        # rounded to its octave: the same searches, fewer programs
        max_degree = Sizes.degree_bound(int(data.degrees[0].max()))
        if tables.bitmap is not None:
            max_degree = 0  # unused: keep it out of the compiled program's cache key
        return {"tables": tables, "sizes": Sizes(data.n_users, data.n_items, max_degree)}

    def _init(self, key, aux, hp, max_rank):
        k_u, k_i = jax.random.split(key)
        n_users, n_items = aux["sizes"].n_users, aux["sizes"].n_items
        return {
            "user": init_factors(k_u, n_users, max_rank, self.init_scale, hp["rank"]),
            "item": init_factors(k_i, n_items, max_rank, self.init_scale, hp["rank"]),
        }

    def _batch(self, key, aux):
        return sample_triples(
            key,
            aux["tables"],
            n_items=aux["sizes"].n_items,
            batch_size=self.batch_size,
            negatives=self.NEGATIVES,
            max_degree=aux["sizes"].max_degree,
        )

    def _gather(self, params, batch):
        u, i, j = batch
        return {"user": params["user"][u], "pos": params["item"][i], "neg": params["item"][j]}

    def _scatter_add(self, params, batch, rows):
        u, i, j = batch
        items = jnp.concatenate([i, j])
        return {
            "user": params["user"].at[u].add(rows["user"]),
            "item": params["item"].at[items].add(jnp.concatenate([rows["pos"], rows["neg"]])),
        }

    def _row_loss(self, rows, batch, aux, hp):
        return bpr_loss(rows["user"], rows["pos"], rows["neg"], hp["l2"])

    def _loss(self, params, batch, aux, hp):
        return self._row_loss(self._gather(params, batch), batch, aux, hp)

    def _finish(self, params, aux, hp, losses):
        return FactorModel(params["user"], params["item"], losses, trainer=type(self).__name__)
