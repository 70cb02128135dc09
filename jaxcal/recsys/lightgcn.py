r"""LightGCN (He et al., SIGIR 2020): BPR on embeddings smoothed over the user-item graph.

With the bipartite adjacency :math:`A = \begin{pmatrix} 0 & R \\ R^\top & 0 \end{pmatrix}`
and degrees :math:`D`, each layer propagates :math:`E^{(l+1)} = D^{-1/2} A D^{-1/2} E^{(l)}`,
i.e. per edge ``(u, i)`` a message weighted :math:`1/\sqrt{|N_u| |N_i|}`; the final
embedding is the layer mean :math:`E = \frac{1}{L+1} \sum_{l=0}^{L} E^{(l)}` and the score
is :math:`\langle e_u, e_i \rangle`. Propagation uses ``jax.ops.segment_sum`` over the edge
list (:math:`O(|R| d)` per layer, no dense matrix). The loss is the BPR loss on the final
embeddings plus :math:`\tfrac{\lambda}{2}` times the squared norms of the sampled rows of
:math:`E^{(0)}` (the paper's regulariser); negatives as in ``BPRMF``.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal import _shapes
from jaxcal._validation import check_int
from jaxcal.data.triples import Interactions
from jaxcal.recsys._fitted import FactorModel
from jaxcal.recsys.bpr import BPRMF

__all__ = ["LightGCN", "Graph", "build_graph", "propagate"]


class Graph(NamedTuple):
    """The normalised bipartite graph as an edge list (one entry per positive pair)."""

    users: jax.Array  # [nnz (padded)] int32
    items: jax.Array  # [nnz (padded)] int32
    weights: jax.Array  # [nnz (padded)] 1 / sqrt(deg_u deg_i), 0 on padding


def build_graph(data: Interactions) -> Graph:
    """Edge list with symmetric normalisation :math:`1/\\sqrt{|N_u||N_i|}`.

    The edges are padded to the bucket size of ``nnz`` (``jaxcal._shapes``) with edges
    ``(0, 0)`` of weight 0, which add exact zeros to the propagation sums.
    """
    deg_u, deg_i = data.degrees
    w = 1.0 / np.sqrt(deg_u[data.user].astype(np.float64) * deg_i[data.item])
    size = _shapes.padded_size(w.size)
    dtype = jax.dtypes.canonicalize_dtype(np.float64)
    edges = (data.user.astype(np.int32), data.item.astype(np.int32), w.astype(dtype))
    return Graph(*(jax.device_put(_shapes.pad_axis(a, size, 0)) for a in edges))


def propagate(
    user_emb: ArrayLike, item_emb: ArrayLike, graph: Graph, n_layers: int
) -> tuple[jax.Array, jax.Array]:
    """LightGCN layer-mean embeddings :math:`\\frac{1}{L+1}\\sum_{l \\le L} E^{(l)}`.

    Args:
        user_emb: ``[n_users, d]`` layer-0 user embeddings.
        item_emb: ``[n_items, d]`` layer-0 item embeddings.
        graph: ``Graph`` from ``build_graph``.
        n_layers: number of propagation layers ``L`` (static, >= 0).

    Returns:
        ``(users, items)`` final embeddings, same shapes as the inputs.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxcal.data import Interactions
        >>> from jaxcal.recsys import propagate
        >>> from jaxcal.recsys.lightgcn import build_graph
        >>> graph = build_graph(Interactions.from_dense(jnp.array([[1, 0], [1, 1]])))
        >>> users, items = propagate(jnp.ones((2, 3)), jnp.zeros((2, 3)), graph, n_layers=1)
        >>> users.shape, items.shape
        ((2, 3), (2, 3))
    """
    e_u, e_i = jnp.asarray(user_emb), jnp.asarray(item_emb)
    n_users, n_items = e_u.shape[0], e_i.shape[0]
    w = graph.weights.astype(e_u.dtype)[:, None]
    sum_u, sum_i = e_u, e_i
    for _ in range(n_layers):
        new_u = jax.ops.segment_sum(w * e_i[graph.items], graph.users, num_segments=n_users)
        new_i = jax.ops.segment_sum(w * e_u[graph.users], graph.items, num_segments=n_items)
        e_u, e_i = new_u, new_i
        sum_u, sum_i = sum_u + e_u, sum_i + e_i
    return sum_u / (n_layers + 1), sum_i / (n_layers + 1)


@dataclasses.dataclass(frozen=True)
class LightGCN(BPRMF):
    """LightGCN (He et al. 2020); see the module docstring.

    Args:
        rank, learning_rate, l2, n_steps, batch_size, optimizer, init_scale: as in
            ``BPRMF``.
        n_layers: propagation layers ``L`` (the paper uses 1 to 4; default 2).

    ``fit`` returns a :class:`FactorModel` of the propagated embeddings (as ``BPRMF.fit``).

    Example:
        >>> import jax, numpy as np
        >>> from jaxcal.recsys import LightGCN
        >>> train = np.random.default_rng(0).random((30, 40)) < 0.2
        >>> fitted = LightGCN(rank=8, n_steps=100).fit(train, key=jax.random.key(0))
        >>> fitted.predict_all(np.array([0, 1])).shape  # every item's score for users 0 and 1
        (2, 40)
    """

    n_layers: int = 2

    SPARSE_SGD = False  # the loss reads every row (propagation)

    def _validate(self) -> None:
        self._validate_common()
        check_int(self.n_layers, "n_layers", minimum=0)

    def _prepare(self, data: Interactions) -> dict:
        aux = super()._prepare(data)
        aux["graph"] = build_graph(data)
        return aux

    def _loss(self, params, batch, aux, hp):
        u, i, j = batch
        w0, h0 = params["user"], params["item"]
        w, h = propagate(w0, h0, aux["graph"], self.n_layers)
        x = jnp.sum(w[u] * (h[i] - h[j]), axis=-1)
        sq = jnp.sum(w0[u] ** 2 + h0[i] ** 2 + h0[j] ** 2, axis=-1)
        return jnp.mean(jax.nn.softplus(-x) + 0.5 * hp["l2"] * sq)

    def _finish(self, params, aux, hp, losses):
        w, h = propagate(params["user"], params["item"], aux["graph"], self.n_layers)
        return FactorModel(w, h, losses, trainer="LightGCN")
