"""Streamed EM: a log read chunk by chunk on every iteration, optionally across processes.

The E-step's sufficient statistics are sums over sessions (:mod:`jaxcal.clicks._em`), so a
log that does not fit in memory is fitted exactly by summing them chunk by chunk:

1. **Scan.** One pass over the source collects the sorted (query, document) pair keys, the
   longest SERP, the largest chunk and the total weight; with ``jax.distributed`` the keys
   are united and the sizes maxed across processes (:mod:`jaxcal.distributed`), so every
   process holds the same pair table. With a spill directory, each chunk is also written
   there once, deduplicated and encoded (local pair ids and the chunk's keys).
2. **Iterations.** For each chunk (re-read from the source, or from the spill): pair ids by
   lookup in the pair table, rows padded to one fixed chunk size (weight-0, fully masked
   rows pointing at the unseen-pair slot: they add nothing), the E-step's statistics in one
   compiled program per chunk shape, added to a running sum on the device. The sums of all
   processes are added (in process order, the same on every process), and the M-step runs
   once per iteration, exactly as in :func:`jaxcal.clicks._em.run_em`: same stopping rule,
   same objective trace.

Peak memory is two chunks (the loop waits for a chunk's statistics before it queues the
chunk after the next one; JAX's asynchronous dispatch would otherwise queue the whole log)
and the parameter tables: 8 bytes per pair key on the host and, for each pair parameter, its
statistics, current and next value (4 or 8 bytes each, docs/clicks.md gives the total: about
50 bytes a pair for DBN in float32).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from jaxcal import _shapes, distributed
from jaxcal._jit import jit
from jaxcal._progress import log
from jaxcal.clicks._em import Batch, compute_stats, em_update, make_batch
from jaxcal.clicks.sessions import Sessions, _keys

__all__ = [
    "LogScan",
    "scan_log",
    "encoded_chunks",
    "batches",
    "stream_em",
    "stream_closed_form",
    "spill_folder",
]

_SPILL_ARRAYS = ("inv", "keys", "clicks", "mask", "weight")


@dataclass
class LogScan:
    """What one pass over a log found (the same on every process after :func:`scan_log`).

    Attributes:
        keys: ``[P]`` sorted int64 pair keys (``query * 2**31 + doc``) of every process.
        n_results: the longest SERP.
        chunk_rows: rows of the largest chunk (after deduplication).
        sessions: rows read by this process (after deduplication).
        weight: total session weight of this process.
        spill: the folder holding this process's encoded chunks, or ``None``.
        n_chunks: chunks read by this process.
    """

    keys: np.ndarray
    n_results: int
    chunk_rows: int
    sessions: int
    weight: float
    spill: Path | None
    n_chunks: int


def _chunk_keys(chunk: Sessions) -> tuple[np.ndarray, np.ndarray]:
    """``(unique keys, [S, n] local ids)`` of a chunk; masked positions get ``len(keys)``."""
    mask = np.asarray(chunk.mask)
    q = np.broadcast_to(np.asarray(chunk.query)[:, None], mask.shape)
    keys, inv = np.unique(_keys(q[mask], np.asarray(chunk.doc)[mask]), return_inverse=True)
    local = np.full(mask.shape, keys.shape[0], np.int32)
    local[mask] = inv.reshape(-1)
    return keys, local


def _encoded(chunks: Callable[[], Iterator[Sessions]], dedup: bool):
    """``(chunk, keys, local ids)`` of every non-empty chunk (deduplicated if ``dedup``)."""
    for chunk in chunks():
        if chunk.n_sessions:
            chunk = chunk.deduplicate() if dedup else chunk
            yield chunk, *_chunk_keys(chunk)


def _merge(parts: list[np.ndarray]) -> np.ndarray:
    return np.unique(np.concatenate(parts)) if len(parts) > 1 else parts[0]


def scan_log(
    chunks: Callable[[], Iterator[Sessions]], *, dedup: bool, spill: Path | None
) -> LogScan:
    """One pass over the log (see the module docstring); chunks are written to ``spill``
    when it is a folder."""
    parts: list[np.ndarray] = [np.zeros(0, np.int64)]
    merged = 0
    n_results = chunk_rows = rows = n_chunks = 0
    weight = 0.0
    for chunk, keys, local in _encoded(chunks, dedup):
        parts.append(keys)
        merged += keys.shape[0]
        if merged > 4 * parts[0].shape[0] + 1_000_000:  # bounded work and memory
            parts, merged = [_merge(parts)], 0
        if spill is not None:
            arrays = {
                "inv": local,
                "keys": keys,
                "clicks": np.asarray(chunk.clicks, np.int8),
                "mask": np.asarray(chunk.mask, bool),
                "weight": np.asarray(chunk.weight, np.float64),
            }
            for name, a in arrays.items():
                np.save(spill / f"{n_chunks:07d}_{name}.npy", a)
        n_results = max(n_results, chunk.n_results)
        chunk_rows = max(chunk_rows, chunk.n_sessions)
        rows += chunk.n_sessions
        weight += float(np.sum(chunk.weight))
        n_chunks += 1
    keys = distributed.process_union(_merge(parts))
    n_results = int(distributed.process_max(n_results))
    chunk_rows = int(distributed.process_max(chunk_rows))
    total = float(distributed.process_sum(np.asarray(weight)))
    if not total > 0:
        where = " (on every process)" if distributed.process_count() > 1 else ""
        raise ValueError(f"the log holds no session of positive weight{where}.")
    return LogScan(keys, n_results, chunk_rows, rows, weight, spill, n_chunks)


def encoded_chunks(
    chunks: Callable[[], Iterator[Sessions]], scan: LogScan, *, dedup: bool
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """``(qd, clicks, mask, weight)`` of every chunk, pair ids in ``scan.keys`` (padding and
    masked positions -> ``P``), SERPs padded to ``scan.n_results``."""
    P = scan.keys.shape[0]
    n = scan.n_results

    def widen(a: np.ndarray, fill) -> np.ndarray:
        return _shapes.pad_axis(a, n, fill, axis=1)

    if scan.spill is not None:
        for k in range(scan.n_chunks):
            a = {name: np.load(scan.spill / f"{k:07d}_{name}.npy") for name in _SPILL_ARRAYS}
            lut = np.append(np.searchsorted(scan.keys, a["keys"]), P).astype(np.int32)
            qd = widen(lut[a["inv"]], P)
            yield qd, widen(a["clicks"], 0), widen(a["mask"], False), a["weight"]
        return
    for chunk, keys, local in _encoded(chunks, dedup):
        pos = np.searchsorted(scan.keys, keys)
        found = pos < P
        found[found] = scan.keys[pos[found]] == keys[found]
        if not found.all():
            raise ValueError(
                "the source returned sessions on this pass that the first pass did not see "
                "(a callable source must return the same log on every call)."
            )
        qd = widen(np.append(pos, P).astype(np.int32)[local], P)
        yield (
            qd,
            widen(np.asarray(chunk.clicks), 0),
            widen(np.asarray(chunk.mask), False),
            (np.asarray(chunk.weight, np.float64)),
        )


def batches(chunks, scan: LogScan, mesh: Mesh | None, *, dedup: bool) -> Iterator[Batch]:
    """The chunks of this process as device batches of one padded size (pair ids of the
    scan); a process without chunks yields one batch of padding rows (which adds nothing),
    so that every process takes part in the sums across processes."""
    rows = _shapes.padded_size(scan.chunk_rows, total=scan.chunk_rows * scan.n_results)
    P, n = scan.keys.shape[0], scan.n_results
    empty = True
    for qd, clicks, mask, weight in encoded_chunks(chunks, scan, dedup=dedup):
        empty = False
        yield make_batch(qd, clicks, mask, weight, mesh, n_rows=rows, fill_id=P)
    if empty:
        none = np.zeros((0, n), np.int32)
        yield make_batch(none, none, none.astype(bool), np.zeros(0), mesh, n_rows=rows,
                         fill_id=P)  # fmt: skip


@partial(jit, static_argnames=("stats_fn", "mesh"))
def _chunk_stats(stats_fn: Callable, params: Any, batch, acc: Any, *, mesh: Mesh | None):
    """``acc`` plus the statistics of one chunk (the chunk's statistics when ``acc`` is
    ``None``)."""
    stats = compute_stats(stats_fn, params, batch, mesh)
    return stats if acc is None else jax.tree_util.tree_map(jnp.add, acc, stats)


@partial(jit, static_argnames=("mstep_fn",))
def _em_update(mstep_fn: Callable, stats: Any, ll: jax.Array, params: Any, prior, valid):
    """The M-step from summed statistics, the largest parameter change, and the objective
    of the current iterate (as in :func:`jaxcal.clicks._em.run_em`)."""
    return em_update(mstep_fn, stats, ll, params, prior, valid)


@partial(jit, static_argnames=("mstep_fn",))
def _mstep(mstep_fn: Callable, stats: Any, prior):
    return mstep_fn(stats, prior)


def _summed(stats_fn, params, chunks, scan, mesh, *, dedup, timer=None):
    """The statistics of the whole log (every process); the seconds spent summing across
    processes are added to ``timer[0]``."""
    acc = None
    for batch in batches(chunks, scan, mesh, dedup=dedup):
        if acc is not None:  # at most two chunks in flight: bounded memory
            jax.block_until_ready(acc)
        acc = _chunk_stats(stats_fn, params, batch, acc, mesh=mesh)
    host = jax.device_get(acc)
    start = time.perf_counter()
    total = distributed.process_sum(host)
    if timer is not None:
        timer[0] += time.perf_counter() - start
    return total


def stream_em(
    stats_fn: Callable,
    mstep_fn: Callable,
    params0: Any,
    chunks: Callable[[], Iterator[Sessions]],
    scan: LogScan,
    prior: np.ndarray,
    tol: float,
    valid: Any,
    *,
    max_iter: int,
    mesh: Mesh | None,
    dedup: bool,
    progress: bool,
    name: str,
) -> tuple[Any, int, np.ndarray]:
    """EM over a streamed log: ``(params, iterations, objective trace)`` (module docstring)."""
    dtype = jax.tree_util.tree_leaves(params0)[0].dtype
    params = jax.device_put(params0)
    history = np.full(max_iter, np.nan, dtype)
    total_rows = int(distributed.process_sum(np.asarray(scan.sessions, np.int64)))
    multi = distributed.process_count() > 1
    it = 0
    while it < max_iter:
        start, timer = time.perf_counter(), [0.0]
        stats, ll = _summed(stats_fn, params, chunks, scan, mesh, dedup=dedup, timer=timer)
        new, delta, objective = _em_update(mstep_fn, stats, ll, params, prior, valid)
        history[it] = objective
        params = new
        it += 1
        delta = float(delta)
        if progress:
            seconds = time.perf_counter() - start
            log(
                f"{name} iteration {it}: log-likelihood {float(ll):.6f}, log posterior "
                f"{float(objective):.6f}, largest change {delta:.2e}, {seconds:.2f}s, "
                f"{total_rows / seconds:.3g} sessions/s"
                + (f", {timer[0]:.2f}s summing across processes" if multi else "")
            )
        if not delta >= tol:
            break
    return params, it, history


def stream_closed_form(
    stats_fn: Callable,
    mstep_fn: Callable,
    template: Any,
    chunks: Callable[[], Iterator[Sessions]],
    scan: LogScan,
    prior: np.ndarray,
    *,
    mesh: Mesh | None,
    dedup: bool,
) -> Any:
    """A closed-form MLE over a streamed log: one pass of statistics, then the M-step."""
    template = jax.device_put(template)
    stats = _summed(stats_fn, template, chunks, scan, mesh, dedup=dedup)
    return _mstep(mstep_fn, stats, prior)


@contextlib.contextmanager
def spill_folder(spill: Any) -> Iterator[Path | None]:
    """The folder for encoded chunks: ``spill`` itself when it is a path (one subfolder per
    process in a ``jax.distributed`` job), a temporary folder (removed afterwards) when it
    is ``True``, none when it is ``False`` / ``None``."""
    if spill is None or spill is False:
        yield None
    elif spill is True:
        path = Path(tempfile.mkdtemp(prefix="jaxcal-spill-"))
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)
    else:
        path = Path(spill)
        if distributed.process_count() > 1:  # a shared folder: one subfolder each
            path = path / f"process-{distributed.process_index()}"
        path.mkdir(parents=True, exist_ok=True)
        if any(path.iterdir()):
            raise ValueError(f"spill folder {path} is not empty.")
        yield path
