"""The shape policy: every jitted entry point that takes data compiles once per size bucket.

XLA compiles one program per input shape, so a script that fits calibrators on problems of
many sizes would compile on every call. Every public entry point therefore pads its data
axes to a *bucket size* before it calls its jitted core, with entries that cannot change
the result (zero weight, a mask, a repeated valid score whose output is sliced off), and
slices the result back. A script over many sizes compiles each program once per bucket.

The ladder of bucket sizes (:func:`padded_size`):

* Problems of up to ``COARSE_LIMIT`` (65,536) elements, where compiling costs more than
  computing, round each axis up to a power of two (at least ``MIN_SIZE``): at most twice
  the work, very few programs (one per octave).
* Larger problems, up to ``FINE_LIMIT`` elements, round each axis up to the next of four
  steps per octave (``2^k * {1, 1.25, 1.5, 1.75}``): at most 25% more work, where the
  work dominates.
* Problems of more than ``FINE_LIMIT`` (262,144) elements, where padded work costs more
  than compiling a few more programs (a log of 1e5 sessions x 10 results, padded by 15%
  with four steps, spent 20% more time per EM iteration), round up to the next of sixteen
  steps per octave (``2^k * (1 + j / 16)``): at most 6.25% more work.

Everything the shell does with data of the caller's size happens in NumPy, never in eager
JAX: an eager JAX operation on a new shape compiles too (about 50 ms for a slice on CPU).
Results are sliced back on the host by :func:`unpad`.

Padding is exact by construction; tests compare padded and unpadded fits (the
:func:`exact_shapes` context turns the policy off) to float64 rounding. Inside a user's
``jit`` (traced inputs) nothing is padded: the user's program has its own fixed shapes.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import numpy as np

__all__ = [
    "MIN_SIZE",
    "COARSE_LIMIT",
    "FINE_LIMIT",
    "padded_size",
    "padded_shape",
    "pad_axis",
    "pad_rows",
    "exact_shapes",
    "padding_enabled",
    "is_traced",
    "map_padded",
    "unpad",
    "host_buffer",
]

MIN_SIZE = 32
COARSE_LIMIT = 1 << 16
FINE_LIMIT = 1 << 18
_STEPS_PER_OCTAVE = 4
_STEPS_PER_OCTAVE_LARGE = 16
_ALIGN = 64  # bytes: the alignment at which jax.device_put on a CPU shares host memory

_state = threading.local()


def padding_enabled() -> bool:
    """Whether the shape policy pads (off inside :func:`exact_shapes`)."""
    return getattr(_state, "enabled", True)


@contextlib.contextmanager
def exact_shapes() -> Iterator[None]:
    """Turn padding off in this thread: every call compiles for its exact input shape.

    For tests (padded vs unpadded results) and for a script that fits one fixed, large size
    many times and wants no padded work at all.
    """
    before = padding_enabled()
    _state.enabled = False
    try:
        yield
    finally:
        _state.enabled = before


def _bucket(n: int, steps: int, minimum: int) -> int:
    """The bucket of ``n``: the next of ``steps`` sizes per octave (1: powers of two)."""
    if n <= minimum:
        return minimum
    k = (n - 1).bit_length() - 1  # 2^k < n <= 2^(k+1)
    step = max((1 << k) // steps, 1)
    return -(-n // step) * step


def padded_size(n: int, *, total: int | None = None, minimum: int = MIN_SIZE) -> int:
    """Bucket size for an axis of length ``n`` (``n`` itself inside :func:`exact_shapes`).

    Args:
        n: the axis length (``>= 0``).
        total: the number of elements of the whole problem (default ``n``); it decides
            the ladder: powers of two (``total <= COARSE_LIMIT``), four steps per octave
            (``total <= FINE_LIMIT``) or sixteen.
        minimum: the smallest bucket (``MIN_SIZE`` for data axes; 1 for an axis of
            problems, where each padded entry is a whole extra problem).
    """
    n = int(n)
    if not padding_enabled():
        return n
    total = n if total is None else int(total)
    steps = 1 if total <= COARSE_LIMIT else _STEPS_PER_OCTAVE
    steps = _STEPS_PER_OCTAVE_LARGE if total > FINE_LIMIT else steps
    return _bucket(n, steps, minimum)


def padded_shape(shape: Sequence[int]) -> tuple[int, ...]:
    """Bucket sizes for ``[..., B, n]``: the last axis is a data axis, the leading ones are
    axes of problems (smallest bucket 1); the ladder is chosen by the total size."""
    total = math.prod(int(d) for d in shape)
    *batch, n = (int(d) for d in shape)
    return (*(padded_size(b, total=total, minimum=1) for b in batch), padded_size(n, total=total))


def pad_axis(x: Any, size: int, fill: Any = 0, *, axis: int = 0) -> np.ndarray:
    """``x`` (array-like) padded along ``axis`` to ``size`` with ``fill`` (a scalar)."""
    x = np.asarray(x)
    extra = int(size) - x.shape[axis]
    if extra < 0:
        raise ValueError(f"cannot pad an axis of length {x.shape[axis]} to {size}.")
    if extra == 0:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, extra)
    return np.pad(x, widths, constant_values=np.asarray(fill, x.dtype))


def host_buffer(size: int, dtype: Any) -> np.ndarray:
    """An uninitialised ``[size]`` NumPy array whose data starts on a 64-byte boundary.

    ``jax.device_put`` on a CPU takes such an array (C-contiguous, of a dtype JAX keeps)
    without a copy: the device array then shares its memory, so it must not be written
    after the transfer. NumPy's own large allocations start 16 bytes past a boundary, and
    are copied (a millisecond per 8 MB).
    """
    itemsize = np.dtype(dtype).itemsize
    raw = np.empty(int(size) * itemsize + _ALIGN, np.uint8)
    start = -raw.ctypes.data % _ALIGN
    return raw[start : start + int(size) * itemsize].view(dtype)


def pad_rows(size: int, *arrays: Any, fills: Sequence[Any] | None = None) -> list[Any]:
    """Pad each array along axis 0 to ``size`` (``None`` stays ``None``).

    ``fills`` gives one scalar per array (default 0), e.g. a zero weight and a repeated
    valid score, so that the padded entries leave the result unchanged.
    """
    fills = [0] * len(arrays) if fills is None else list(fills)
    return [None if a is None else pad_axis(a, size, f) for a, f in zip(arrays, fills, strict=True)]


def is_traced(*xs: Any) -> bool:
    """Whether any of ``xs`` is a JAX tracer (then the caller's program fixes the shapes)."""
    return any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(xs))


def unpad(out: Any, n: int, shape: Sequence[int] | None = None) -> jax.Array:
    """The first ``n`` entries of ``out`` along axis 0 (reshaped to ``shape``), sliced on
    the host and put back on the device: no compiled program per ``n``. A traced ``out``
    (a fitted calibrator whose leaves are tracers, inside a caller's ``grad``) is sliced in
    the caller's program instead."""
    if is_traced(out):
        sliced = out[:n]
        return sliced if shape is None else sliced.reshape(tuple(shape))
    host = np.asarray(out)[:n]
    return jax.device_put(host if shape is None else host.reshape(tuple(shape)))


def map_padded(fn: Callable[[Any], Any], values: Any) -> Any:
    """``fn`` applied to ``values`` (any shape) through one padded 1-D call.

    ``values`` is flattened, padded to its bucket size with copies of its first element (a
    valid input of ``fn``), and ``fn``'s output is sliced back and reshaped
    (:func:`unpad`). ``fn`` must act on each element independently (a calibrator's
    predict). Traced values are passed through unchanged.
    """
    if is_traced(values):
        return fn(values)
    arr = np.asarray(values)
    flat = arr.reshape(-1)
    n = flat.shape[0]
    if n == 0:
        return unpad(fn(pad_axis(flat, MIN_SIZE, 0)), 0, arr.shape)
    return unpad(fn(pad_axis(flat, padded_size(n), flat[0])), n, arr.shape)
