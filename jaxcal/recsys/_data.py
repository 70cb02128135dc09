"""Training data for the ranking models: eager validation and on-device (u, i, j) sampling.

``as_interactions`` turns any accepted ``train`` input into ``jaxcal.data.Interactions`` of
sorted, de-duplicated positive pairs (validated in NumPy, before any ``jit``).
``SamplerTables`` holds the device arrays the jitted samplers need; ``sample_triples``
draws LearnBPR triples (Rendle et al. 2009) entirely with ``jax.random``:

* ``(u, i)`` uniformly from the observed positive pairs;
* ``j`` uniformly from the items that ``u`` has *not* interacted with (``negatives=
  "non_positive"``, Rendle's :math:`D_S`), drawn *exactly*, without rejection. For user
  ``u`` with ``m`` positives draw :math:`r \\sim U\\{0, \\dots, I - m - 1\\}` and map it
  through a bijection onto the user's :math:`I - m` non-positive items:

  - **remap** (default, when a packed bitmap of the positives fits in
    ``max_bitmap_bytes``): :math:`f_u(r) = r` if ``r`` is not a positive of ``u``; else,
    with ``k`` the rank of ``r`` among the user's positives, :math:`f_u(r)` is the k-th
    non-positive item of the tail :math:`\\{I - m, \\dots, I - 1\\}`. The positives below
    :math:`I - m` and the non-positives in the tail are equally many, so :math:`f_u` is a
    bijection and ``j`` is exactly uniform. One bitmap word gives both the test and the
    rank (a per-word prefix count plus a popcount): three gathers per triple, no search;
  - **search** (the fallback for very large ``n_users x n_items``): the r-th non-positive
    item itself, :math:`j = r + \\#\\{k : p_k - k \\le r\\}` for the sorted positives
    :math:`p_0 < \\dots < p_{m-1}` (a binary search in the user's CSR segment);
* or ``j`` uniformly over all items (``negatives="all"``, what UBPR's estimator needs,
  since its correction :math:`1 - Y_{uj}/\\omega_{uj}` acts on sampled positives).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxcal import _shapes
from jaxcal.data.triples import Interactions

__all__ = [
    "Sizes",
    "SamplerTables",
    "as_interactions",
    "sampler_tables",
    "sample_triples",
    "sample_non_positive",
    "uniform_below",
    "nth_non_positive",
    "remap_non_positive",
    "is_positive",
]


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

    @staticmethod
    def degree_bound(max_degree: int) -> int:
        """``max_degree`` rounded up to ``2^b - 1``: the same number of binary-search steps
        (:func:`search_steps`), so data whose largest degree changes within the octave share
        the compiled program."""
        return (1 << int(max_degree).bit_length()) - 1

    @property
    def search_bound(self) -> int:
        """Upper bound on a user's segment length, for the sampler's binary searches."""
        return self.max_degree if self.max_degree > 0 else self.n_items


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
) -> Interactions:
    """Validate ``train`` and return its positive pairs.

    Args:
        train: one of
            * a ``[n_users, n_items]`` matrix (NumPy / JAX): non-zero entries are positive
              interactions (binarise ratings first, e.g. ``coat.train >= 4``); their values
              are kept as interaction strengths;
            * a tuple ``(users, items)`` or ``(users, items, values)`` of 1-D arrays;
            * ``jaxcal.data.Interactions`` (every non-zero rating is a positive, so binarise
              explicit ratings first with ``jaxcal.data.binarize``; the result of this
              function is accepted too).
        n_users: number of users (pairs input; default ``max(users) + 1``).
        n_items: number of items (pairs input; default ``max(items) + 1``).

    Returns:
        ``jaxcal.data.Interactions`` of the positives: unique pairs sorted by
        ``(user, item)``, int32 ids, float64 strengths as ``rating``.

    Raises:
        ValueError: on NaN/inf or negative values, non-integer or out-of-range ids, length
            mismatches, a matrix that is not 2-D, or no positive interaction at all.
    """
    if train is None:
        raise ValueError("train is required; got None.")
    if isinstance(train, Interactions):  # rating 0 = not a positive
        n_users = train.n_users if n_users is None else n_users
        n_items = train.n_items if n_items is None else n_items
        train = (train.user, train.item, train.rating)
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
        if matrix.dtype.kind == "f" and not np.isfinite(matrix).all():
            raise ValueError("train contains NaN or inf; use 0 for 'no interaction'.")
        flat = np.flatnonzero(matrix)  # row-major: sorted by (user, item), unique
        users, items = np.divmod(flat, n_items)
        values = matrix.reshape(-1)[flat].astype(np.float64)
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
    key = users.astype(np.int64) * n_items + items
    if key.size > 1 and not (np.diff(key) > 0).all():  # pairs input: sort, sum duplicates
        key, inverse = np.unique(key, return_inverse=True)
        values = np.bincount(inverse, weights=values, minlength=key.size)
    return Interactions(
        user=(key // n_items).astype(np.int32),
        item=(key % n_items).astype(np.int32),
        rating=values,
        n_users=int(n_users),
        n_items=int(n_items),
    )


MAX_BITMAP_BYTES = 256 * 2**20  # default memory cap of the remap sampler's bitmap tables


class SamplerTables(NamedTuple):
    """Device arrays for on-device sampling (a pytree; pass it into ``jit``).

    The per-pair arrays are padded to the bucket size of ``nnz`` (``jaxcal._shapes``) so that
    data with a new number of positives in the same bucket reuse the compiled sampler; the
    padding (zeros) lies outside every user's CSR segment, so no search uses it, and the pair
    index is drawn below the traced count ``n_pairs``: the sampled stream does not depend on
    the padding.

    The bitmap fields are ``None`` when the tables would exceed ``max_bitmap_bytes``; the
    samplers then use the binary searches over the CSR arrays (same laws, slower)."""

    users: jax.Array  # [nnz (padded)] int32, sorted by (user, item)
    items: jax.Array  # [nnz (padded)] int32
    indptr: jax.Array  # [n_users + 1] int32: user u's positives are [indptr[u], indptr[u+1])
    shifted: jax.Array  # [nnz (padded)] int32: p_k - k within each user's segment
    n_pairs: jax.Array  # int32 scalar: the number of positive pairs nnz
    # packed positives: word u * W + w, bit b <-> item 32 w + b (W = ceil(n_items / 32));
    # column 0 the bits (uint32 stored as int32), column 1 the CSR position of the first
    # positive of u at or after item 32 w (indptr[u] + #positives of u in earlier words)
    bitmap: jax.Array | None = None  # [n_users * W, 2] int32
    remap: jax.Array | None = None  # [nnz (padded)] int32: k-th non-positive item of u's tail


def bitmap_words(n_items: int) -> int:
    """Number of 32-bit words per user in the packed bitmap."""
    return (n_items + 31) // 32


def sampler_tables(
    data: Interactions,
    *,
    need_negatives: bool = True,
    max_bitmap_bytes: int = MAX_BITMAP_BYTES,
) -> SamplerTables:
    """Build the sampling tables (NumPy, once per fit).

    Args:
        data: validated positive pairs.
        need_negatives: require every user with a positive to also have a non-positive item
            (else there is no j to sample).
        max_bitmap_bytes: build the packed bitmap and remap tables of the fast exact sampler
            only if they take at most this many bytes (``8 * n_users * ceil(n_items / 32)``
            + ``4 * nnz``); ``0`` forces the binary-search sampler.

    Returns:
        The ``SamplerTables``.

    Raises:
        ValueError: if ``need_negatives`` and some user interacted with every item.
    """
    deg_u, _ = data.degrees
    if need_negatives:
        full = np.flatnonzero(deg_u >= data.n_items)
        if full.size:
            raise ValueError(
                f"user {int(full[0])} interacted with every item, so no negative item can "
                f"be sampled for it ({full.size} such user(s)); drop them or add items."
            )
    indptr = np.concatenate([[0], np.cumsum(deg_u)]).astype(np.int64)
    owner = data.user.astype(np.int64)
    nnz = data.user.size
    within = np.arange(nnz) - indptr[owner]
    shifted = (data.item - within).astype(np.int32)
    size = _shapes.padded_size(nnz)

    def pairs(a):  # a per-pair array, padded to the bucket size and put on the device
        return jax.device_put(_shapes.pad_axis(np.asarray(a, np.int32), size, 0))

    tables = SamplerTables(
        users=pairs(data.user),
        items=pairs(data.item),
        indptr=jax.device_put(indptr.astype(np.int32)),
        shifted=pairs(shifted),
        n_pairs=jax.device_put(np.int32(nnz)),
    )
    n_words = bitmap_words(data.n_items)
    if 8 * data.n_users * n_words + 4 * nnz > max_bitmap_bytes:
        return tables
    bitmap, remap = _bitmap_tables(data, indptr, deg_u)
    return tables._replace(bitmap=jax.device_put(bitmap), remap=pairs(remap))


def _bitmap_tables(data: Interactions, indptr: np.ndarray, deg_u: np.ndarray):
    """The packed bitmap with per-word CSR positions, and the tail remap (see module doc)."""
    n_words = bitmap_words(data.n_items)
    items = data.item.astype(np.int64)
    word = data.user.astype(np.int64) * n_words + items // 32
    # pairs are unique, so the bits of a word are distinct powers of two: their float64
    # sum (< 2^32) is exact
    bits = np.bincount(word, weights=2.0 ** (items % 32), minlength=data.n_users * n_words)
    counts = np.bincount(word, minlength=data.n_users * n_words)
    first = np.cumsum(counts) - counts  # = indptr[u] + #positives of u in words < w
    bitmap = np.stack([bits.astype(np.uint32).view(np.int32), first.astype(np.int32)], axis=1)
    # tail remap: user u's candidates are the items I - m_u + t, t = 0..m_u - 1, laid out
    # on u's CSR segment; its non-positive candidates, in order, fill remap[indptr[u] + k]
    owner = data.user.astype(np.int64)
    cand = data.n_items - deg_u[owner] + (np.arange(owner.size) - indptr[owner])
    cand_word = owner * n_words + cand // 32
    is_pos = (bits.astype(np.uint64)[cand_word] >> (cand % 32).astype(np.uint64)) & 1
    free = is_pos == 0
    seen = np.cumsum(free)
    rank = seen - 1 - np.concatenate([[0], seen])[indptr[owner]]
    remap = np.zeros(owner.size, np.int32)
    remap[indptr[owner[free]] + rank[free]] = cand[free]
    return bitmap, remap


def search_steps(bound: int) -> int:
    """Binary-search iterations that settle any interval of length <= ``bound``."""
    return max(1, int(np.ceil(np.log2(bound + 1))) + 1)


def _first_above(values: jax.Array, lo: jax.Array, hi: jax.Array, x: jax.Array, bound: int):
    """First index in ``[lo, hi)`` whose entry of the sorted segment ``values[lo:hi]`` is
    ``> x`` (``hi`` if none), by a vectorised binary search of ``search_steps(bound)``
    steps (``bound``, static: an upper bound on the segment lengths)."""

    def body(_, bounds):
        lo, hi = bounds
        active = lo < hi
        mid = (lo + hi) // 2
        le = values[jnp.minimum(mid, values.size - 1)] <= x
        return jnp.where(active & le, mid + 1, lo), jnp.where(active & ~le, mid, hi)

    lo, _ = jax.lax.fori_loop(0, search_steps(bound), body, (lo, hi), unroll=True)
    return lo


def nth_non_positive(tables: SamplerTables, users: jax.Array, r: jax.Array, bound: int):
    """The ``r``-th (0-based) item that ``users`` have not interacted with (vectorised).

    ``bound`` (static) is any upper bound on the users' numbers of positives (``n_items``
    always works; ``Sizes.search_bound`` is tighter and faster)."""
    start = tables.indptr[users]
    # positives "before" the r-th gap: those whose shifted value is <= r
    lo = _first_above(tables.shifted, start, tables.indptr[users + 1], r, bound)
    return (r + (lo - start)).astype(jnp.int32)


def _bitmap_words(tables: SamplerTables, users: jax.Array, items: jax.Array):
    """The bitmap word holding ``(users, items)`` (uint32), the CSR position of the word's
    first bit, and the item's bit index in the word (one row gather per pair)."""
    n_words = tables.bitmap.shape[0] // (tables.indptr.shape[0] - 1)
    row = tables.bitmap[users * n_words + (items >> 5)]
    word = jax.lax.bitcast_convert_type(row[..., 0], jnp.uint32)
    return word, row[..., 1], (items & 31).astype(jnp.uint32)


def remap_non_positive(tables: SamplerTables, users: jax.Array, r: jax.Array) -> jax.Array:
    r"""Image of ``r`` in :math:`\{0, \dots, I - m_u - 1\}` under the bijection onto the
    non-positive items of ``users`` (vectorised; needs the bitmap tables).

    :math:`f_u(r) = r` if ``r`` is not a positive of ``u``; otherwise ``r`` is the k-th
    positive of ``u`` (``k`` from the bitmap word's CSR position plus a popcount of the
    lower bits) and lies below :math:`I - m_u`, and :math:`f_u(r)` is the k-th non-positive
    item of the tail :math:`\{I - m_u, \dots, I - 1\}` (there are as many as positives
    below :math:`I - m_u`).
    """
    word, first, shift = _bitmap_words(tables, users, r)
    hit = ((word >> shift) & 1).astype(bool)
    below = word & ((jnp.uint32(1) << shift) - jnp.uint32(1))
    rank = first + jax.lax.population_count(below).astype(jnp.int32)
    return jnp.where(hit, tables.remap[rank], r).astype(jnp.int32)


def has_bitmap(tables: SamplerTables) -> bool:
    """Whether the tables carry the bitmap (static: it decides the sampler at trace time)."""
    return tables.bitmap is not None


def is_positive(tables: SamplerTables, users: jax.Array, items: jax.Array, bound: int):
    """Whether each ``(users, items)`` pair is a training positive, on device: a bitmap bit
    test, or a binary search in the user's CSR segment when there is no bitmap (``bound``,
    static, is an upper bound on the users' numbers of positives, e.g. ``n_items``)."""
    if has_bitmap(tables):
        word, _, shift = _bitmap_words(tables, users, items)
        return ((word >> shift) & 1).astype(bool)
    start = tables.indptr[users]
    lo = _first_above(tables.items, start, tables.indptr[users + 1], items, bound)
    last = jnp.maximum(lo - 1, 0)
    return (lo > start) & (tables.items[last] == items)


def uniform_below(higher: jax.Array, lower: jax.Array, span: jax.Array) -> jax.Array:
    """Integers in ``[0, span)`` (int32) from two uint32 random words each, by the same
    arithmetic as ``jax.random.randint`` (:math:`(2^{32} h + l) \\bmod s`, evaluated modulo
    ``s`` in 32-bit words; a bias of order :math:`s^2 / 2^{64}`).

    With ``k1, k2 = jax.random.split(key)`` and ``higher, lower = bits(k1), bits(k2)`` it
    equals ``jax.random.randint(key, shape, 0, span, dtype=jnp.int32)`` (tested); drawing all
    the words of a step in one ``jax.random.bits`` call is ~3x cheaper on CPU (one threefry
    loop instead of four, and no key splits).
    """
    span = jnp.maximum(span, 1).astype(jnp.uint32)  # randint returns 0 when span <= 0
    multiplier = jax.lax.rem(jnp.uint32(2**16), span)
    multiplier = jax.lax.rem(multiplier * multiplier, span)
    offset = jax.lax.rem(higher, span) * multiplier + jax.lax.rem(lower, span)
    return jax.lax.rem(offset, span).astype(jnp.int32)


def _non_positive(tables, users, higher, lower, n_items: int, max_degree: int) -> jax.Array:
    n_free = n_items - (tables.indptr[users + 1] - tables.indptr[users])
    r = uniform_below(higher, lower, n_free)
    if has_bitmap(tables):
        return remap_non_positive(tables, users, r)
    return nth_non_positive(tables, users, r, max_degree if max_degree > 0 else n_items)


def sample_non_positive(
    key: jax.Array, tables: SamplerTables, users: jax.Array, *, n_items: int, max_degree: int = 0
) -> jax.Array:
    """One item drawn uniformly from the non-positive items of each of ``users`` (exact):
    ``r ~ U{0, ..., I - m_u - 1}`` mapped by ``remap_non_positive`` (bitmap tables) or
    ``nth_non_positive`` (binary search; ``max_degree``, static, bounds its length)."""
    words = jax.random.bits(key, (2, *users.shape), jnp.uint32)
    return _non_positive(tables, users, words[0], words[1], n_items, max_degree)


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

    All randomness of the batch comes from one ``jax.random.bits(key, (4, batch_size))``
    call: two words per draw of the pair index and of ``j`` (``uniform_below``).
    ``max_degree`` (static; 0 = unknown) bounds the users' numbers of positives and so the
    length of the binary search (used only without the bitmap tables)."""
    if negatives not in ("non_positive", "all"):
        raise ValueError(f"negatives must be 'non_positive' or 'all'; got {negatives!r}.")
    words = jax.random.bits(key, (4, batch_size), jnp.uint32)
    idx = uniform_below(words[0], words[1], tables.n_pairs)
    u, i = tables.users[idx], tables.items[idx]
    if negatives == "all":
        j = uniform_below(words[2], words[3], jnp.int32(n_items))
    else:
        j = _non_positive(tables, u, words[2], words[3], n_items, max_degree)
    return u, i, j
