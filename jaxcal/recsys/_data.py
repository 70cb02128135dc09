"""Training data for the ranking models: eager validation and on-device (u, i, j) sampling.

``as_interactions`` turns any accepted ``train`` input into an ``InteractionData`` of
sorted, de-duplicated positive pairs (validated in NumPy, before any ``jit``).
``SamplerTables`` holds the device arrays the jitted samplers need; ``sample_triples``
draws LearnBPR triples (Rendle et al. 2009) entirely with ``jax.random``:

* ``(u, i)`` uniformly from the observed positive pairs;
* ``j`` uniformly from the items that ``u`` has *not* interacted with (``negatives=
  "non_positive"``, Rendle's :math:`D_S`), drawn *exactly*, without rejection: for user
  ``u`` with sorted positives :math:`p_0 < \\dots < p_{m-1}`, draw
  :math:`r \\sim U\\{0, \\dots, I - m - 1\\}` and return the r-th non-positive item
  :math:`j = r + \\#\\{k : p_k - k \\le r\\}` (a binary search in the user's segment);
* or ``j`` uniformly over all items (``negatives="all"``, what UBPR's estimator needs,
  since its correction :math:`1 - Y_{uj}/\\omega_{uj}` acts on sampled positives).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["InteractionData", "Sizes", "SamplerTables", "as_interactions", "sample_triples"]


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class Sizes:
    r"""Static problem sizes carried inside ``aux`` pytrees (part of the jit cache key).

    ``max_degree`` (the largest number of positives of one user; 0 = unknown) bounds the
    binary searches of the sampler: :math:`\lceil\log_2(\text{max\_degree} + 1)\rceil + 1`
    steps instead of :math:`\lceil\log_2(n_\text{items} + 1)\rceil + 1`.
    """

    n_users: int
    n_items: int
    max_degree: int = 0

    @property
    def search_bound(self) -> int:
        """Upper bound on a user's segment length, for the sampler's binary searches."""
        return self.max_degree if self.max_degree > 0 else self.n_items


class InteractionData(NamedTuple):
    """Validated positive user-item pairs (NumPy), sorted by ``(user, item)``, unique.

    Attributes:
        users: ``[nnz]`` int32 user ids.
        items: ``[nnz]`` int32 item ids.
        values: ``[nnz]`` float64 interaction strengths (1 for 0/1 input; ratings or counts
            otherwise; summed over duplicate pairs). Only WR-MF uses them (confidence).
        n_users: number of users.
        n_items: number of items.
    """

    users: np.ndarray
    items: np.ndarray
    values: np.ndarray
    n_users: int
    n_items: int

    @property
    def degrees(self) -> tuple[np.ndarray, np.ndarray]:
        """Number of positives per user ``[n_users]`` and per item ``[n_items]``."""
        return (
            np.bincount(self.users, minlength=self.n_users),
            np.bincount(self.items, minlength=self.n_items),
        )

    def dense(self) -> np.ndarray:
        """The ``[n_users, n_items]`` 0/1 matrix of positives (small data only)."""
        out = np.zeros((self.n_users, self.n_items))
        out[self.users, self.items] = 1.0
        return out


def _check_size(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value <= 0:
        raise ValueError(f"{name} must be a positive integer; got {value!r}.")
    return int(value)


def _check_ids(ids: Any, name: str) -> np.ndarray:
    arr = np.asarray(ids)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D; got shape {arr.shape}.")
    if arr.size == 0:
        raise ValueError(f"{name} is empty; need at least one positive interaction.")
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            raise ValueError(f"{name} must hold integer ids; got non-integer values.")
        arr = arr.astype(np.int64)
    elif arr.dtype.kind not in "iu":
        raise ValueError(f"{name} must hold integer ids; got dtype {arr.dtype}.")
    if (arr < 0).any():
        raise ValueError(f"{name} must be >= 0; got min {int(arr.min())}.")
    return arr.astype(np.int64)


def as_interactions(
    train: Any, *, n_users: int | None = None, n_items: int | None = None
) -> InteractionData:
    """Validate ``train`` and return its positive pairs.

    Args:
        train: one of
            * a ``[n_users, n_items]`` matrix (NumPy / JAX): non-zero entries are positive
              interactions (binarise ratings first, e.g. ``coat.train >= 4``); their values
              are kept as interaction strengths;
            * a tuple ``(users, items)`` or ``(users, items, values)`` of 1-D arrays;
            * ``jaxcal.data.Interactions`` (``user``, ``item``, ``rating`` triples; every
              non-zero rating is a positive, so binarise explicit ratings first with
              ``jaxcal.data.binarize``), or any object with ``users`` / ``items`` (and
              optionally ``values`` / ``n_users`` / ``n_items``) attributes.
        n_users: number of users (pairs input; default ``max(users) + 1``).
        n_items: number of items (pairs input; default ``max(items) + 1``).

    Returns:
        ``InteractionData`` with unique pairs sorted by ``(user, item)``.

    Raises:
        ValueError: on NaN/inf or negative values, non-integer or out-of-range ids, length
            mismatches, a matrix that is not 2-D, or no positive interaction at all.
    """
    if train is None:
        raise ValueError("train is required; got None.")
    if hasattr(train, "user") and hasattr(train, "item") and hasattr(train, "rating"):
        # jaxcal.data.Interactions: (user, item, rating) triples; rating 0 = not positive
        n_users = n_users if n_users is not None else getattr(train, "n_users", None)
        n_items = n_items if n_items is not None else getattr(train, "n_items", None)
        train = (train.user, train.item, train.rating)
    elif hasattr(train, "users") and hasattr(train, "items"):
        values = getattr(train, "values", None)
        values = None if callable(values) else values
        n_users = n_users if n_users is not None else getattr(train, "n_users", None)
        n_items = n_items if n_items is not None else getattr(train, "n_items", None)
        train = (train.users, train.items) if values is None else (train.users, train.items, values)
    if isinstance(train, tuple | list):
        if len(train) not in (2, 3):
            raise ValueError(
                f"train as a tuple must be (users, items) or (users, items, values); "
                f"got {len(train)} arrays."
            )
        users = _check_ids(train[0], "users")
        items = _check_ids(train[1], "items")
        if users.shape != items.shape:
            raise ValueError(f"length mismatch: {users.size} users but {items.size} items.")
        if len(train) == 3:
            values = np.asarray(train[2], dtype=np.float64)
            if values.shape != users.shape:
                raise ValueError(f"length mismatch: {users.size} users but {values.size} values.")
        else:
            values = np.ones(users.shape)
        n_users = int(users.max()) + 1 if n_users is None else _check_size(n_users, "n_users")
        n_items = int(items.max()) + 1 if n_items is None else _check_size(n_items, "n_items")
        if users.max() >= n_users:
            raise ValueError(f"user id {int(users.max())} is out of range for n_users={n_users}.")
        if items.max() >= n_items:
            raise ValueError(f"item id {int(items.max())} is out of range for n_items={n_items}.")
    else:
        try:
            matrix = np.asarray(train)
        except Exception as exc:  # pragma: no cover - exotic inputs
            raise ValueError(f"train could not be converted to an array: {exc}") from exc
        if matrix.ndim != 2:
            raise ValueError(
                "train must be a [n_users, n_items] matrix or a (users, items) tuple; "
                f"got an array of shape {matrix.shape}."
            )
        if matrix.dtype.kind not in "biuf":
            raise ValueError(f"train must be numeric; got dtype {matrix.dtype}.")
        for name, given, actual in (("n_users", n_users, 0), ("n_items", n_items, 1)):
            if given is not None and given != matrix.shape[actual]:
                raise ValueError(
                    f"{name}={given} does not match the train matrix shape {matrix.shape}."
                )
        n_users, n_items = matrix.shape
        matrix = matrix.astype(np.float64)
        users, items = np.nonzero(matrix)
        values = matrix[users, items]
        if not np.isfinite(matrix).all():
            raise ValueError("train contains NaN or inf; use 0 for 'no interaction'.")
    if not np.isfinite(values).all():
        raise ValueError("train values contain NaN or inf.")
    if (values < 0).any():
        raise ValueError(
            f"train values must be >= 0 (interaction strengths); got min {values.min():.6g}."
        )
    keep = values > 0
    users, items, values = users[keep], items[keep], values[keep]
    if users.size == 0:
        raise ValueError("train has no positive interaction; nothing to learn from.")
    key = users * n_items + items
    uniq, inverse = np.unique(key, return_inverse=True)
    summed = np.bincount(inverse, weights=values, minlength=uniq.size)
    return InteractionData(
        users=(uniq // n_items).astype(np.int32),
        items=(uniq % n_items).astype(np.int32),
        values=summed,
        n_users=int(n_users),
        n_items=int(n_items),
    )


class SamplerTables(NamedTuple):
    """Device arrays for on-device sampling (a pytree; pass it into ``jit``)."""

    users: jax.Array  # [nnz] int32, sorted by (user, item)
    items: jax.Array  # [nnz] int32
    indptr: jax.Array  # [n_users + 1] int32: user u's positives are [indptr[u], indptr[u+1])
    shifted: jax.Array  # [nnz] int32: p_k - k within each user's segment (non-decreasing)


def sampler_tables(data: InteractionData, *, need_negatives: bool = True) -> SamplerTables:
    """Build the sampling tables; with ``need_negatives`` every user with a positive must
    also have at least one non-positive item (else there is no j to sample)."""
    deg_u, _ = data.degrees
    if need_negatives:
        full = np.flatnonzero(deg_u >= data.n_items)
        if full.size:
            raise ValueError(
                f"user {int(full[0])} interacted with every item, so no negative item can "
                f"be sampled for it ({full.size} such user(s)); drop them or add items."
            )
    indptr = np.concatenate([[0], np.cumsum(deg_u)]).astype(np.int32)
    within = np.arange(data.users.size) - indptr[data.users]
    shifted = (data.items - within).astype(np.int32)
    return SamplerTables(
        users=jnp.asarray(data.users),
        items=jnp.asarray(data.items),
        indptr=jnp.asarray(indptr),
        shifted=jnp.asarray(shifted),
    )


def search_steps(bound: int) -> int:
    """Binary-search iterations that settle any interval of length <= ``bound``."""
    return max(1, int(np.ceil(np.log2(bound + 1))) + 1)


def nth_non_positive(tables: SamplerTables, users: jax.Array, r: jax.Array, bound: int):
    """The ``r``-th (0-based) item that ``users`` have not interacted with (vectorised).

    ``bound`` (static) is any upper bound on the users' numbers of positives (``n_items``
    always works; ``Sizes.search_bound`` is tighter and faster)."""
    start = tables.indptr[users]
    lo, hi = start, tables.indptr[users + 1]

    def body(_, bounds):
        # first index in [start, end) with shifted > r (positives "before" the r-th gap)
        lo, hi = bounds
        active = lo < hi
        mid = (lo + hi) // 2
        le = tables.shifted[jnp.minimum(mid, tables.shifted.size - 1)] <= r
        return jnp.where(active & le, mid + 1, lo), jnp.where(active & ~le, mid, hi)

    lo, _ = jax.lax.fori_loop(0, search_steps(bound), body, (lo, hi), unroll=True)
    return (r + (lo - start)).astype(jnp.int32)


def sample_triples(
    key: jax.Array,
    tables: SamplerTables,
    *,
    n_items: int,
    batch_size: int,
    negatives: str = "non_positive",
    max_degree: int = 0,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Draw ``batch_size`` LearnBPR triples ``(u, i, j)`` on device (see the module doc).

    ``max_degree`` (static; 0 = unknown) bounds the users' numbers of positives and so the
    length of the binary search."""
    k_pair, k_neg = jax.random.split(key)
    idx = jax.random.randint(k_pair, (batch_size,), 0, tables.users.size)
    u, i = tables.users[idx], tables.items[idx]
    if negatives == "all":
        j = jax.random.randint(k_neg, (batch_size,), 0, n_items, dtype=jnp.int32)
    elif negatives == "non_positive":
        n_neg = n_items - (tables.indptr[u + 1] - tables.indptr[u])
        r = jax.random.randint(k_neg, (batch_size,), 0, n_neg, dtype=jnp.int32)
        j = nth_non_positive(tables, u, r, max_degree if max_degree > 0 else n_items)
    else:
        raise ValueError(f"negatives must be 'non_positive' or 'all'; got {negatives!r}.")
    return u, i, j
