"""jaxcal's optional compiled CPU kernels: weighted PAV and ENIR as XLA FFI handlers.

The portable PAV (``jaxcal.fitting.pav``) is a vectorised merge tree in pure JAX that
runs under ``jit`` and ``vmap`` on every backend. On a CPU, XLA's comparator sort and the
merge tree's many small loop steps make it slower than scikit-learn's sequential Cython
loop, so for XLA's *CPU* backend jaxcal also builds (at install, from ``pav_cpu.cc``) the
sequential algorithm as an XLA FFI custom call: a radix sort by (group, score), tie
pooling and stack PAV. It is not a host callback: XLA calls it inside the compiled program,
so it works under ``jit`` and ``vmap`` (every leading batch index is one problem; under
``jax.shard_map`` over those rows each device solves its own), and
``jax.lax.platform_dependent`` picks it only when the program is compiled for CPU (GPU and
TPU programs use the merge tree). :func:`pav_fitted_cpu` returns per-point fitted values
(``isotonic_regression``), :func:`pav_runs_cpu` the runs and blocks of one problem (the
knots of ``IsotonicCalibration``). Both normalise the weights before the call (the largest
becomes ``[1, 2)``, exactly: ``jaxcal._weights.normalize_weights``), so the
kernel's pooling test never underflows or overflows for weights of any scale.

The same library holds a second kernel (from ``enir_cpu.cc``): ENIR's near-isotonic path
and BIC average (``jaxcal.calibrators.enir``), whose pure-JAX version runs one merge per
``lax.while_loop`` iteration. :func:`enir_fit_cpu` returns the averaged run values,
:func:`near_isotonic_cpu` the path's fit at one lambda; ``ENIR.fit`` and
``near_isotonic_regression`` call them when the default backend is a CPU. They have their
own registration and self-test (:func:`enir_cpu_available`), so a library built before
them still serves the PAV kernel, and their own kept work buffers (about 180 bytes per run,
up to 2**21 runs).

Each kernel is used when the shared library was built (a C++17 compiler at install time;
the build is optional) and passes a small self-test against a known answer when first
loaded. ``JAXCAL_NATIVE=0`` in the environment turns it off (the pure-JAX path is then
used on CPU too). The PAV kernel keeps one set of work buffers between calls (64 bytes per
point of the largest problem seen, up to 2**24 points; larger problems allocate and free
their own), so that repeated calls do not pay page faults.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxcal._vma import varying_like
from jaxcal._weights import normalize_weights

__all__ = [
    "pav_cpu_available",
    "pav_fitted_cpu",
    "pav_runs_cpu",
    "enir_cpu_available",
    "enir_fit_cpu",
    "near_isotonic_cpu",
    "ENV",
]

ENV = "JAXCAL_NATIVE"
_TARGET = "jaxcal_pav_cpu"
_RUNS_TARGET = "jaxcal_pav_runs_cpu"


def _library_path() -> Path | None:
    here = Path(__file__).parent
    for pattern in ("_pav_cpu*.so", "_pav_cpu*.pyd", "_pav_cpu*.dylib"):
        found = sorted(here.glob(pattern))
        if found:
            return found[0]
    return None


@functools.cache
def _register() -> bool:
    """Load the shared library and register its handler with XLA's CPU backend."""
    path = _library_path()
    if path is None:
        return False
    try:
        library = ctypes.cdll.LoadLibrary(str(path))
        jax.ffi.register_ffi_target(_TARGET, jax.ffi.pycapsule(library.JaxcalPavCpu), "cpu")
        runs = jax.ffi.pycapsule(library.JaxcalPavRunsCpu)
        jax.ffi.register_ffi_target(_RUNS_TARGET, runs, "cpu")
    except Exception:  # not loadable here (another platform's build, a broken file)
        return False
    return True


@functools.cache
def _load() -> bool:
    """Registered and passing the self-test (a library built against an incompatible XLA
    fails when it first runs)."""
    return _register() and _self_test()


def _passes_in_thread(check: Callable[[], bool], name: str) -> bool:
    """``check()`` run in a thread of its own, ``False`` if it raises (a library built
    against an incompatible XLA fails when it first runs).

    JAX's tracing state is per thread, so the check computes eagerly even when the first
    use of a kernel is inside a ``jit`` / ``vmap`` trace."""
    result: list[bool] = []

    def run() -> None:
        try:
            result.append(bool(check()))
        except Exception:  # a library built against an incompatible XLA
            result.append(False)

    thread = threading.Thread(target=run, name=name)
    thread.start()
    thread.join()
    return bool(result) and result[0]


def _turned_off() -> bool:
    """Whether ``JAXCAL_NATIVE=0`` (or ``false`` / ``no`` / ``off``) turns the kernels off."""
    return os.environ.get(ENV, "1").strip().lower() in ("0", "false", "no", "off")


def _self_test() -> bool:
    """One tiny problem with a tie, a violation, a zero-weight point and three groups,
    against its known answer (:func:`_passes_in_thread`)."""
    x = np.array([0.0, 1.0, 1.0, 2.0, 0.0, 1.0, 0.0, 1.0, 2.0], np.float32)
    y = np.array([1.0, 0.0, 1.0, 0.0, 2.0, 1.0, 0.0, 5.0, 2.0], np.float32)
    w = np.array([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0], np.float32)
    g = np.array([0, 0, 0, 0, 1, 1, 2, 2, 2], np.int32)
    expected = [0.5, 0.5, 0.5, 0.5, 1.5, 1.5, 0.0, 1.0, 2.0]

    def check() -> bool:
        cpu = jax.devices("cpu")[0]
        args = (jax.device_put(a, cpu) for a in (x, y, w, g))
        fitted = np.asarray(jax.jit(pav_fitted_cpu)(*args))
        return np.allclose(fitted, expected)

    return _passes_in_thread(check, "jaxcal-native-self-test")


def pav_cpu_available() -> bool:
    """Whether the compiled CPU kernel is built, loads, passes its self-test and is not
    turned off by ``JAXCAL_NATIVE=0``."""
    return not _turned_off() and _load()


def pav_fitted_cpu(
    x: jax.Array,
    y: jax.Array,
    w: jax.Array,
    group: jax.Array | None = None,
    lo: jax.Array | None = None,
    hi: jax.Array | None = None,
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

    Returns:
        ``[..., n]`` fitted values: block means clipped to ``[lo, hi]``; points of a
        zero-weight run get the fitted map's value at their score (the linear interpolation
        between the clipped values of the nearest runs with weight in the group, constant
        beyond them; 0, clipped, in a group whose weights are all zero).

    Raises:
        RuntimeError: if the kernel is not available (see :func:`pav_cpu_available`).
    """
    _require()
    has_group = group is not None
    if not has_group:
        group = jnp.zeros((*x.shape[:-1], 1), jnp.int32)
    elif group.dtype not in (jnp.int32, jnp.int64):  # ids only need to stay distinct
        group = group.astype(jnp.int64 if group.dtype.itemsize == 8 else jnp.int32)
    call = jax.ffi.ffi_call(
        _TARGET, jax.ShapeDtypeStruct(x.shape, x.dtype), vmap_method="broadcast_all"
    )
    w = normalize_weights(w.astype(x.dtype))
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
    _require()
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


def _require() -> None:
    if not _register():
        raise RuntimeError(
            "jaxcal's compiled CPU kernel is not available (not built at install, or built "
            "against an incompatible jaxlib); use jaxcal.fitting.pav.pav instead."
        )


# ENIR (``enir_cpu.cc``, compiled into the same library) -----------------------------------

_ENIR_TARGET = "jaxcal_enir_cpu"
_NEAR_ISOTONIC_TARGET = "jaxcal_near_isotonic_cpu"


@functools.cache
def _register_enir() -> bool:
    """Register the ENIR handlers as well (a library built before they existed lacks them:
    the PAV handlers keep working then)."""
    if not _register():
        return False
    try:
        library = ctypes.cdll.LoadLibrary(str(_library_path()))  # the handle already loaded
        for target, symbol in (
            (_ENIR_TARGET, "JaxcalEnirCpu"),
            (_NEAR_ISOTONIC_TARGET, "JaxcalNearIsotonicCpu"),
        ):
            jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(getattr(library, symbol)), "cpu")
    except Exception:  # an older build without the ENIR handlers
        return False
    return True


@functools.cache
def _load_enir() -> bool:
    """ENIR handlers registered and passing their self-test."""
    return _register_enir() and _enir_self_test()


def _enir_self_test() -> bool:
    """Six runs and two padding runs, three breakpoint models, against the known average
    (computed by the pure-JAX path; :func:`_passes_in_thread`)."""
    w = np.array([1.0, 2.0, 1.0, 1.0, 3.0, 1.0, 0.0, 0.0], np.float32)
    y = np.array([0.2, 0.9, 0.1, 0.6, 0.3, 1.0, 0.0, 0.0], np.float32)
    real = np.arange(8) < 6
    expected = [0.2, 0.6358582, 0.4199914, 0.4270731, 0.4270731, 1.0, 0.0, 0.0]

    def check() -> bool:
        cpu = jax.devices("cpu")[0]
        args = [w, y, w * y, w * (1 - y), real, np.float32(9.0), np.float32(1e-3)]
        acc, n_models, n_scored, _ = jax.jit(enir_fit_cpu)(*(jax.device_put(a, cpu) for a in args))
        ok = np.allclose(np.asarray(acc), expected, rtol=0, atol=1e-5)
        return ok and int(n_models) == 3 and int(n_scored) == 3

    return _passes_in_thread(check, "jaxcal-native-enir-self-test")


def enir_cpu_available() -> bool:
    """Whether the compiled ENIR kernel is built, loads, passes its self-test and is not
    turned off by ``JAXCAL_NATIVE=0``."""
    return not _turned_off() and _load_enir()


def enir_fit_cpu(w, y, s1, s0, real, n_eff, eps):
    """ENIR's BIC-averaged near-isotonic fit of tie-pooled runs, from the compiled CPU
    kernel (``jaxcal.calibrators.enir``; double precision inside). Traceable; CPU programs
    only.

    Args:
        w: ``[..., N]`` float32 or float64 run weights (positive for the real runs); each
            leading index is one problem.
        y: ``[..., N]`` run mean targets, same dtype.
        s1: ``[..., N]`` positive weights of the runs (``sum w clip(t, 0, 1)``), same dtype.
        s0: ``[..., N]`` negative weights (``sum w (1 - clip(t, 0, 1))``), same dtype.
        real: ``[..., N]`` bool, true for the real runs, which come first (the rest pads).
        n_eff: ``[...]`` number of points (the ``N`` of ``K log N`` in the BIC).
        eps: ``[...]`` clipping of the fitted values inside the likelihood.

    Returns:
        ``(acc, n_models, n_scored, lam)``: the averaged value of each run (``[..., N]``, 0
        for padding), the number of breakpoint models and how many were scored exactly
        (``[...]`` int32), and the lambda of the path's last merge (``[...]``).

    Raises:
        RuntimeError: if the kernel is not available (see :func:`enir_cpu_available`).
    """
    _require_enir()
    dtype = y.dtype
    batch = y.shape[:-1]
    row = jax.ShapeDtypeStruct(y.shape, dtype)
    count = jax.ShapeDtypeStruct(batch, jnp.int32)
    call = jax.ffi.ffi_call(
        _ENIR_TARGET,
        (row, count, count, jax.ShapeDtypeStruct(batch, dtype)),
        vmap_method="broadcast_all",
    )
    args = (
        *(jnp.asarray(a, dtype) for a in (w, y, s1, s0)),
        jnp.asarray(real, bool),
        *(jnp.broadcast_to(jnp.asarray(a, dtype), batch) for a in (n_eff, eps)),
    )
    return varying_like(call(*args), *args)


def near_isotonic_cpu(w, y, real, lam):
    """The near-isotonic fit of runs at penalty ``lam`` (``inf``: the isotonic fit), from
    the compiled CPU kernel's path. Traceable; CPU programs only.

    Args:
        w: ``[..., N]`` float32 or float64 positive weights (any value for padding).
        y: ``[..., N]`` values in sequence order, same dtype.
        real: ``[..., N]`` bool, true for the real entries, which come first.
        lam: ``[...]`` penalty ``>= 0``.

    Returns:
        ``[..., N]`` fitted values (padding takes the last real group's value).

    Raises:
        RuntimeError: if the kernel is not available (see :func:`enir_cpu_available`).
    """
    _require_enir()
    dtype = y.dtype
    call = jax.ffi.ffi_call(
        _NEAR_ISOTONIC_TARGET, jax.ShapeDtypeStruct(y.shape, dtype), vmap_method="broadcast_all"
    )
    args = (
        jnp.asarray(w, dtype),
        y,
        jnp.asarray(real, bool),
        jnp.broadcast_to(jnp.asarray(lam, dtype), y.shape[:-1]),
    )
    return varying_like(call(*args), *args)


def _require_enir() -> None:
    if not _register_enir():
        raise RuntimeError(
            "jaxcal's compiled ENIR kernel is not available (not built at install, or built "
            "against an incompatible jaxlib); use jaxcal.calibrators.enir's JAX path instead."
        )
