r"""NCF / NeuMF: neural collaborative filtering (He et al., WWW 2017).

NeuMF fuses a generalised matrix factorisation branch and an MLP branch:

.. math::
    \phi^{GMF} = p^G_u \odot q^G_i, \quad
    \phi^{MLP} = a_L(\dots a_1([p^M_u; q^M_i] W_1 + b_1) \dots),\quad
    \hat x_{ui} = h^\top [\phi^{GMF}; \phi^{MLP}] + b,

with ReLU activations :math:`a_l`; :math:`\sigma(\hat x_{ui})` is the predicted interaction
probability. Training minimises the binary cross-entropy over each sampled positive and
``n_negatives`` items drawn uniformly from the user's non-positives (the paper's pointwise
negative sampling), :math:`\operatorname{softplus}(-\hat x_{ui}) + \sum_j
\operatorname{softplus}(\hat x_{uj})`, averaged, plus :math:`\tfrac{\lambda}{2}` times the
squared norms of the gathered embedding rows (the MLP weights are not penalised). No
pre-training of the branches. ``predict`` returns the logit :math:`\hat x_{ui}`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxcal._pytree import pytree_dataclass, static_field
from jaxcal._validation import check_int
from jaxcal.recsys._data import sample_non_positive, sample_triples
from jaxcal.recsys._fitted import all_items
from jaxcal.recsys._train import check_indices, fit_doc, init_factors
from jaxcal.recsys.bpr import BPRMF

__all__ = ["NCF", "NeuMFModel", "neumf_logits"]


def neumf_logits(params: dict, users: jax.Array, items: jax.Array) -> jax.Array:
    """NeuMF logits of ``(users, items)`` (any broadcastable integer arrays).

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxcal.recsys.ncf import neumf_logits
        >>> params = {"gmf_user": jnp.ones((2, 1)), "gmf_item": jnp.ones((3, 1)),
        ...           "mlp_user": jnp.ones((2, 1)), "mlp_item": jnp.ones((3, 1)),
        ...           "weights": [jnp.ones((2, 1))], "biases": [jnp.zeros(1)],
        ...           "out_w": jnp.ones(2), "out_b": jnp.zeros(())}
        >>> neumf_logits(params, jnp.array([0]), jnp.array([2])).tolist()  # 1 + relu(2)
        [3.0]
    """
    gmf = params["gmf_user"][users] * params["gmf_item"][items]
    shape = jnp.broadcast_shapes(jnp.shape(users), jnp.shape(items))
    mu = jnp.broadcast_to(params["mlp_user"][users], (*shape, params["mlp_user"].shape[-1]))
    mi = jnp.broadcast_to(params["mlp_item"][items], (*shape, params["mlp_item"].shape[-1]))
    h = jnp.concatenate([mu, mi], axis=-1)
    for w, b in zip(params["weights"], params["biases"], strict=True):
        h = jax.nn.relu(h @ w + b)
    return jnp.concatenate([gmf, h], axis=-1) @ params["out_w"] + params["out_b"]


@pytree_dataclass
class NeuMFModel:
    """Fitted NeuMF: ``params`` (embeddings and MLP weights) and the training losses.

    Attributes:
        params: the embeddings of both branches (``gmf_user``, ``gmf_item``, ``mlp_user``,
            ``mlp_item``), the MLP's ``weights`` and ``biases`` and the output layer
            (``out_w``, ``out_b``).
        train_loss: ``[n_steps]`` mini-batch losses.
        trainer: name of the model that produced it.

    Example:
        >>> import jax, numpy as np
        >>> from jaxcal.recsys import NCF, NeuMFModel
        >>> train = np.random.default_rng(0).random((30, 40)) < 0.2
        >>> fitted = NCF(rank=4, hidden=(8,), n_steps=20).fit(train, key=jax.random.key(0))
        >>> isinstance(fitted, NeuMFModel), fitted.n_users, fitted.n_items
        (True, 30, 40)
    """

    params: dict
    train_loss: jax.Array
    trainer: str = static_field(default="NCF")

    @property
    def n_users(self) -> int:
        return self.params["gmf_user"].shape[-2]

    @property
    def n_items(self) -> int:
        return self.params["gmf_item"].shape[-2]

    def predict(self, users: ArrayLike, items: ArrayLike) -> jax.Array:
        """NeuMF logits for ``(users, items)`` (integer ids, broadcast together).

        Example:
            >>> import jax, numpy as np
            >>> from jaxcal.recsys import NCF
            >>> train = np.random.default_rng(0).random((30, 40)) < 0.2
            >>> fitted = NCF(rank=4, hidden=(8,), n_steps=20).fit(train, key=jax.random.key(0))
            >>> fitted.predict(np.array([0, 1]), np.array([5, 6])).shape
            (2,)
        """
        u, i = check_indices(users, items, self.n_users, self.n_items)
        return neumf_logits(self.params, u, i)

    def predict_all(self, users: ArrayLike | None = None) -> jax.Array:
        """``[n, n_items]`` logits of every item for ``users`` (default: all users).

        Example:
            >>> import jax, numpy as np
            >>> from jaxcal.recsys import NCF
            >>> train = np.random.default_rng(0).random((30, 40)) < 0.2
            >>> fitted = NCF(rank=4, hidden=(8,), n_steps=20).fit(train, key=jax.random.key(0))
            >>> fitted.predict_all(np.array([0, 1])).shape
            (2, 40)
        """
        return all_items(self.predict, users, self.n_users, self.n_items)


@dataclasses.dataclass(frozen=True)
class NCF(BPRMF):
    """NeuMF (He et al. 2017); see the module docstring.

    Args:
        rank: embedding size of each branch (GMF and MLP).
        hidden: MLP layer widths (the first layer takes ``2 * rank`` inputs).
        n_negatives: negatives per sampled positive.
        learning_rate, l2, n_steps, batch_size, optimizer, init_scale: as in ``BPRMF``
            (``batch_size`` counts positives; each step sees ``batch_size *
            (1 + n_negatives)`` examples).

    ``sweep`` can vary ``learning_rate``, ``l2`` and ``replicate`` for NCF, not ``rank``.

    Example:
        >>> import jax, numpy as np
        >>> from jaxcal.recsys import NCF
        >>> train = np.random.default_rng(0).random((30, 40)) < 0.2
        >>> fitted = NCF(rank=8, hidden=(16, 8), n_steps=100).fit(train, key=jax.random.key(0))
        >>> fitted.params["weights"][0].shape  # 2 * rank inputs
        (16, 16)
    """

    rank: int = 32
    hidden: tuple[int, ...] = (64, 32)
    n_negatives: int = 4
    learning_rate: float = 0.001
    batch_size: int = 256
    init_scale: float = 0.01

    SWEEP_RANK = False
    SPARSE_SGD = False  # the loss also reads the MLP weights
    fitted_class = NeuMFModel

    def fit(
        self,
        train: Any,
        *,
        key: jax.Array,
        n_users: int | None = None,
        n_items: int | None = None,
    ) -> NeuMFModel:
        return self._fit(train, key=key, n_users=n_users, n_items=n_items)

    fit.__doc__ = fit_doc(
        "The fitted :class:`NeuMFModel` (``predict`` gives logits).",
        """            >>> import jax, numpy as np
            >>> from jaxcal.recsys import NCF
            >>> clicks = np.eye(5, 7, dtype=bool) | np.eye(5, 7, k=2, dtype=bool)
            >>> model = NCF(rank=2, hidden=(4,), n_negatives=1, n_steps=10)
            >>> len(model.fit(clicks, key=jax.random.key(1)).train_loss)  # one loss per step
            10""",
    )

    def _validate(self) -> None:
        self._validate_common()
        check_int(self.n_negatives, "n_negatives")
        if not isinstance(self.hidden, tuple) or not self.hidden:
            raise ValueError(f"hidden must be a non-empty tuple of widths; got {self.hidden!r}.")
        for width in self.hidden:
            check_int(width, "hidden width")

    def _init(self, key, aux, hp, max_rank):
        sizes = aux["sizes"]
        keys = jax.random.split(key, 5 + len(self.hidden))
        rank = self.rank
        params = {
            "gmf_user": init_factors(keys[0], sizes.n_users, rank, self.init_scale, rank),
            "gmf_item": init_factors(keys[1], sizes.n_items, rank, self.init_scale, rank),
            "mlp_user": init_factors(keys[2], sizes.n_users, rank, self.init_scale, rank),
            "mlp_item": init_factors(keys[3], sizes.n_items, rank, self.init_scale, rank),
        }
        glorot = jax.nn.initializers.glorot_uniform()
        dtype = params["gmf_user"].dtype
        widths = (2 * rank, *self.hidden)
        params["weights"] = [
            glorot(keys[5 + n], (widths[n], widths[n + 1]), dtype) for n in range(len(self.hidden))
        ]
        params["biases"] = [jnp.zeros(w, dtype) for w in self.hidden]
        params["out_w"] = glorot(keys[4], (rank + self.hidden[-1], 1), dtype)[:, 0]
        params["out_b"] = jnp.zeros((), dtype)
        return params

    def _batch(self, key, aux):
        k_pos, k_neg = jax.random.split(key)
        tables, sizes = aux["tables"], aux["sizes"]
        n_items = sizes.n_items
        u, i, _ = sample_triples(
            k_pos, tables, n_items=n_items, batch_size=self.batch_size, max_degree=sizes.max_degree
        )
        uu = jnp.repeat(u, self.n_negatives)
        j = sample_non_positive(k_neg, tables, uu, n_items=n_items, max_degree=sizes.max_degree)
        return u, i, uu, j

    def _loss(self, params, batch, aux, hp):
        u, i, uu, j = batch
        z_pos = neumf_logits(params, u, i)
        z_neg = neumf_logits(params, uu, j)
        n = z_pos.size + z_neg.size
        bce = (jnp.sum(jax.nn.softplus(-z_pos)) + jnp.sum(jax.nn.softplus(z_neg))) / n
        sq = 0.0
        for users, items in ((u, i), (uu, j)):
            sq = sq + jnp.sum(params["gmf_user"][users] ** 2 + params["mlp_user"][users] ** 2)
            sq = sq + jnp.sum(params["gmf_item"][items] ** 2 + params["mlp_item"][items] ** 2)
        return bce + 0.5 * hp["l2"] * sq / n

    def _finish(self, params, aux, hp, losses):
        return NeuMFModel(params, losses)
