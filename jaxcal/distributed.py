"""Sums, maxima and unions across the processes of a ``jax.distributed`` job.

Data-parallel fits (streamed EM, streamed sums of Newton steps, histograms of scores) compute
their sufficient statistics on each process's own part of the data and combine them here.
Everything goes through JAX's own collectives (``multihost_utils.process_allgather``; on CPU
the Gloo implementation, :func:`initialize`), and every process then combines the gathered
values on the host in the same order, so all processes end with bit-identical results.

Values cross processes bit for bit: 64-bit arrays travel as pairs of 32-bit words, so a sum
of float64 statistics (or a union of int64 keys) is exact even when JAX runs in 32-bit mode.
In a single process (no ``jax.distributed`` job) every function here returns its input.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils

from jaxcal._validation import check_int

__all__ = [
    "initialize",
    "process_count",
    "process_index",
    "process_sum",
    "process_max",
    "process_union",
]


def process_count() -> int:
    """Number of processes in the job (1 without ``jax.distributed``).

    Example:
        >>> from jaxcal import distributed
        >>> distributed.process_count()  # a single process
        1
    """
    return jax.process_count()


def process_index() -> int:
    """This process's index in the job (0 without ``jax.distributed``).

    Example:
        >>> from jaxcal import distributed
        >>> distributed.process_index()  # a single process
        0
    """
    return jax.process_index()


def initialize(coordinator: str, n_processes: int, process_id: int) -> None:
    """Join a ``jax.distributed`` job, with Gloo collectives on CPU.

    Every process of the job calls it once, before any other JAX computation, with the same
    ``coordinator`` and ``n_processes`` and its own ``process_id``.

    Args:
        coordinator: ``host:port`` of process 0 (every process passes the same address).
        n_processes: processes in the job.
        process_id: this process's index, ``0 .. n_processes - 1``.

    Raises:
        ValueError: on a malformed address or inconsistent process numbers.

    Example:
        In process ``i`` of a job of two, ``jaxcal.distributed.initialize("host0:8476", 2,
        i)``; the arguments are checked before anything is started:

        >>> from jaxcal import distributed
        >>> distributed.initialize("host0:8476", 2, 2)
        Traceback (most recent call last):
        ...
        ValueError: process_id must lie in [0, 1]; got 2.
    """
    host, _, port = str(coordinator).rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"coordinator must be host:port; got {coordinator!r}.")
    n_processes = check_int(n_processes, "n_processes", minimum=1)
    if isinstance(process_id, bool) or not isinstance(process_id, int | np.integer):
        raise ValueError(f"process_id must be an integer; got {process_id!r}.")
    if not 0 <= process_id < n_processes:
        raise ValueError(f"process_id must lie in [0, {n_processes - 1}]; got {process_id!r}.")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=coordinator, num_processes=n_processes, process_id=int(process_id)
    )


def _as_words(x: np.ndarray) -> np.ndarray:
    """A 1-D array of 32-bit words holding the bytes of ``x`` (64-bit values split in two)."""
    x = np.ascontiguousarray(x).reshape(-1)
    if x.dtype.itemsize in (4, 8):
        return x.view(np.uint32)
    return x.astype(np.int32)  # bool / 8- and 16-bit integers: widened (values preserved)


def _gather(x: np.ndarray) -> np.ndarray:
    """``[process_count, *x.shape]``: every process's ``x`` (same shape and dtype on all)."""
    x = np.asarray(x)
    words = _as_words(x)
    gathered = np.asarray(multihost_utils.process_allgather(words))
    if x.dtype.itemsize in (4, 8):
        out = np.ascontiguousarray(gathered.astype(np.uint32)).view(x.dtype)
    else:
        out = gathered.astype(x.dtype)
    return out.reshape((process_count(), *x.shape))


def process_sum(tree: Any) -> Any:
    """The sum over processes of a pytree of arrays (NumPy arrays back, same on every
    process; summed in process order). Leaves must have the same shape and dtype on every
    process.

    Example:
        >>> import numpy as np
        >>> from jaxcal import distributed
        >>> stats = {"count": np.array([3, 4]), "sum": np.array([1.5, 2.0])}
        >>> distributed.process_sum(stats)["count"]  # one process: its own statistics
        array([3, 4])
    """
    if process_count() == 1:
        return tree
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    out = []
    for leaf in leaves:
        host = np.asarray(leaf)
        g = _gather(host)
        total = g[0].copy()
        for part in g[1:]:
            total = total + part
        out.append(total.astype(host.dtype))
    return jax.tree_util.tree_unflatten(treedef, out)


def process_max(value: int | float) -> int | float:
    """The largest ``value`` over processes (same on every process).

    Example:
        >>> from jaxcal import distributed
        >>> distributed.process_max(7)  # one process: its own value
        7
    """
    if process_count() == 1:
        return value
    g = _gather(np.asarray([value], np.float64))
    return type(value)(g.max())


def process_union(keys: np.ndarray) -> np.ndarray:
    """The sorted union of 1-D int64 ``keys`` over processes (lengths may differ).

    Example:
        >>> from jaxcal import distributed
        >>> distributed.process_union([5, 2, 5, 9]).tolist()  # one process: sorted, unique
        [2, 5, 9]
    """
    keys = np.unique(np.asarray(keys, np.int64))
    if process_count() == 1:
        return keys
    sizes = _gather(np.asarray([keys.shape[0]], np.int64)).reshape(-1)
    longest = int(sizes.max())
    padded = np.full(longest, -1, np.int64)
    padded[: keys.shape[0]] = keys
    g = _gather(padded)
    parts = [g[p, : int(sizes[p])] for p in range(g.shape[0])]
    return np.unique(np.concatenate(parts))
