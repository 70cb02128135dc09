"""The grid of a CMTRF fit (:mod:`jaxcal.recsys.cmtrf`): the keys of its seeds, how its
points share programs (dense or per-pair half-steps, chunks that fit in memory), the order
of a warm-started grid and the sweeps a chosen point is replayed for. Private helpers of
:class:`jaxcal.recsys.CMTRF`."""

from __future__ import annotations

import jax
import numpy as np

from jaxcal._native import ridge_cpu_available
from jaxcal.recsys._cmtrf_als import _LINE_SEARCH

#: bytes of per-pair work arrays one grid point may use before the grid is chunked
_GRID_MEMORY = 1 << 30
#: rating matrices of at most this many cells (padded) are handled densely in the ALS
#: half-steps (one matrix product per Gram batch instead of per-pair scatters)
_DENSE_CELLS = 1 << 23


def _seed_keys(key: jax.Array, seeds) -> np.ndarray:
    """``[S, 2]`` raw data of the keys ``fold_in(key, s)`` of the given seeds."""
    return np.stack([np.asarray(jax.random.key_data(jax.random.fold_in(key, s))) for s in seeds])


def _work_plan(n_users, n_items, n_pairs, k, loss, dense, batch):
    """How the ALS half-steps run, given the padded sizes, ``k`` columns per factor row
    and the estimator's ``dense`` and ``grid_batch_size``: ``(dense, native, batch)``,
    dense matrices or pairs (by the compiled ridge kernel where it is built), and how many
    grid points share a ``vmap`` chunk (``None``: one after another)."""
    cells = n_users * n_items
    if dense is None:  # scatters are cheap on CPUs, matrix products on accelerators
        dense = cells <= _DENSE_CELLS and jax.default_backend() != "cpu"
    # the compiled ridge kernel (CPU programs) needs no per-pair outer products
    native = not dense and ridge_cpu_available()
    if dense:  # dense weights, targets, scores (and poisson's line-search trials)
        per_point = cells * 8 * (4 + (len(_LINE_SEARCH) if loss == "poisson" else 0))
    else:  # per-pair outer products
        per_point = n_pairs * (k * k + 2 * k + 8) * 8 * 3
    if batch is None and jax.default_backend() != "cpu":
        batch = max(1, _GRID_MEMORY // per_point)
    return dense, native, batch


def _warm_path(l2_user: np.ndarray, l2_item: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The order of a warm-started grid's points (flat indices of the ``[n_l2_user,
    n_l2_item]`` grid) and where the path restarts: the rows of ``l2_user`` from the largest
    down, each from its own random start at its largest ``l2_item`` and then down
    ``l2_item``, each point from the previous one's fit."""
    items = np.argsort(-l2_item, kind="stable")
    users = np.argsort(-l2_user, kind="stable")
    order = np.asarray([int(u) * l2_item.size + int(i) for u in users for i in items])
    restart = np.zeros(order.size, bool)
    restart[:: l2_item.size] = True
    return order, restart


def _chosen_sweeps(pretrain_history, best_sweep, transform: str):
    """Sweeps per phase of a chosen fit (:func:`core.replay`): ``clustered`` ran its per-user
    phase up to its best validation sweep (the first minimum, as early stopping keeps)."""
    second = np.int32(best_sweep + 1)
    if transform != "clustered":
        return second, np.int32(0)
    return np.int32(np.nanargmin(pretrain_history) + 1), second
