"""The weighted PAV kernel (``pav_cpu.cc``): per-point fitted values with groups and bounds
(:func:`pav_fitted_cpu`, ``isotonic_regression``) and the runs and blocks of one problem
(:func:`pav_runs_cpu`, the knots of ``IsotonicCalibration``).

Both normalise the weights before the call (the largest becomes ``[1, 2)``, exactly:
``jaxcal._weights.normalize_weights``), so the kernel's pooling test never underflows or
overflows for weights of any scale. The kernel keeps one set of work buffers between calls
(64 bytes per point of the largest problem seen, up to 2**24 points; larger problems
allocate and free their own), so that repeated calls do not pay page faults.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxcal._jit import jit
from jaxcal._native._loader import Kernel, require
from jaxcal._vma import varying_like
from jaxcal._weights import normalize_weights

__all__ = ["KERNEL", "pav_fitted_cpu", "pav_runs_cpu"]

_TARGET = "jaxcal_pav_cpu"
_RUNS_TARGET = "jaxcal_pav_runs_cpu"


def _self_test() -> bool:
    """One tiny problem with a tie, a violation, a zero-weight point and three groups,
    against its known answer."""
    x = np.array([0.0, 1.0, 1.0, 2.0, 0.0, 1.0, 0.0, 1.0, 2.0], np.float32)
    y = np.array([1.0, 0.0, 1.0, 0.0, 2.0, 1.0, 0.0, 5.0, 2.0], np.float32)
    w = np.array([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0], np.float32)
    g = np.array([0, 0, 0, 0, 1, 1, 2, 2, 2], np.int32)
    expected = [0.5, 0.5, 0.5, 0.5, 1.5, 1.5, 0.0, 1.0, 2.0]

    cpu = jax.devices("cpu")[0]
    args = (jax.device_put(a, cpu) for a in (x, y, w, g))
    fitted = np.asarray(jit(pav_fitted_cpu)(*args))
    return np.allclose(fitted, expected)


KERNEL = Kernel(
    name="pav",
    targets=((_TARGET, "JaxcalPavCpu"), (_RUNS_TARGET, "JaxcalPavRunsCpu")),
    self_test=_self_test,
    fallback="the pure-JAX merge tree (jaxcal.fitting.pav.pav)",
)


def pav_fitted_cpu(
    x: jax.Array,
    y: jax.Array,
    w: jax.Array,
    group: jax.Array | None = None,
    lo: jax.Array | None = None,
    hi: jax.Array | None = None,
    *,
    normalized: bool = False,
) -> jax.Array:
    """Fitted values of the weighted isotonic (non-decreasing) regression of ``y`` on ``x``
    per group, from the compiled CPU kernel. Traceable; CPU programs only.

    Args:
        x: ``[..., n]`` float32 or float64 scores; each leading index is one problem.
        y: ``[..., n]`` targets, same dtype.
        w: ``[..., n]`` non-negative weights, same dtype (normalised here, so their scale
            does not matter).
        group: optional ``[..., n]`` int32 / int64 group ids (PAV never pools across them).
        lo: optional lower bound of the fitted values: a scalar, one per problem or one per
            point (broadcastable to ``x``).
        hi: optional upper bound, as ``lo``.
        normalized: the weights are normalised already (the largest in ``[1, 2)``, by
            ``jaxcal._weights.normalize_weights_host``): the program then passes them to the
            kernel as they are (no pass over them), which counts weights below the dtype's
            smallest normal number as zero, as the normalisation here does.

    Returns:
        ``[..., n]`` fitted values: block means clipped to ``[lo, hi]``; points of a
        zero-weight run get the fitted map's value at their score (the linear interpolation
        between the clipped values of the nearest runs with weight in the group, constant
        beyond them; 0, clipped, in a group whose weights are all zero).

    Raises:
        RuntimeError: if the kernel is not available (see :func:`pav_cpu_available`).
    """
    require(KERNEL)
    has_group = group is not None
    if not has_group:
        group = jnp.zeros((*x.shape[:-1], 1), jnp.int32)
    elif group.dtype not in (jnp.int32, jnp.int64):  # ids only need to stay distinct
        group = group.astype(jnp.int64 if group.dtype.itemsize == 8 else jnp.int32)
    call = jax.ffi.ffi_call(
        _TARGET, jax.ShapeDtypeStruct(x.shape, x.dtype), vmap_method="broadcast_all"
    )
    w = w.astype(x.dtype) if normalized else normalize_weights(w.astype(x.dtype))
    bounds = (_bound(v, fill, x) for v, fill in ((lo, -jnp.inf), (hi, jnp.inf)))
    out = call(x, y.astype(x.dtype), w, group, *bounds, has_group=has_group)
    return varying_like(out, x, y, w, group)  # FFI calls drop shard_map's varying axes


def _bound(v, fill: float, x: jax.Array) -> jax.Array:
    """A bound as the kernel takes it: ``[..., 1]`` (one per problem) or ``[..., n]``."""
    v = jnp.asarray(fill if v is None else v, x.dtype)
    if v.size == 1:
        return jnp.broadcast_to(v.reshape((1,) * x.ndim), (*x.shape[:-1], 1))
    if v.ndim and v.shape[-1] == 1:
        return jnp.broadcast_to(v, (*x.shape[:-1], 1))
    return jnp.broadcast_to(v, x.shape)


def pav_runs_cpu(x: jax.Array, y: jax.Array, w: jax.Array):
    """The run-level result of the weighted isotonic regression of ``y`` on ``x`` (one
    problem per leading index, no groups), from the compiled CPU kernel; what a fitted
    calibrator's knots need. Traceable; CPU programs only.

    Args:
        x: ``[..., n]`` float32 or float64 scores.
        y: ``[..., n]`` targets, same dtype.
        w: ``[..., n]`` non-negative weights, same dtype (normalised here).

    Returns:
        ``(run_x, run_weight, run_value, block_start, n_runs)``: the distinct scores in
        increasing order, their total (normalised) weights and fitted values (a zero-weight
        run has the value of the block it pooled with), whether each run starts a PAV
        block (``[..., n]`` each, valid for the first ``n_runs``), and ``n_runs``
        (``[...]`` int32).

    Raises:
        RuntimeError: if the kernel is not available (see :func:`pav_cpu_available`).
    """
    require(KERNEL)
    row = jax.ShapeDtypeStruct(x.shape, x.dtype)
    flags = jax.ShapeDtypeStruct(x.shape, jnp.int32)
    count = jax.ShapeDtypeStruct(x.shape[:-1], jnp.int32)
    call = jax.ffi.ffi_call(
        _RUNS_TARGET, (row, row, row, flags, count), vmap_method="broadcast_all"
    )
    w = normalize_weights(w.astype(x.dtype))
    run_x, run_w, run_v, start, n_runs = call(x, y.astype(x.dtype), w)
    out = (run_x, run_w, run_v, start.astype(bool), n_runs)
    return varying_like(out, x, y, w)
