"""jaxcal's optional compiled CPU kernel: weighted PAV as an XLA FFI handler.

The portable PAV (``jaxcal.calibrators._pav``) is a vectorised merge tree in pure JAX that
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
knots of ``IsotonicCalibration``).

The kernel is used when the shared library was built (a C++17 compiler at install time;
the build is optional) and passes a small self-test against a known answer when first
loaded. ``JAXCAL_NATIVE=0`` in the environment turns it off (the pure-JAX path is then
used on CPU too). The library keeps one set of work buffers between calls (64 bytes per
point of the largest problem seen, up to 2**24 points; larger problems allocate and free
their own), so that repeated calls do not pay page faults.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxcal._vma import varying_like

__all__ = ["pav_cpu_available", "pav_fitted_cpu", "pav_runs_cpu", "ENV"]

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


def _self_test() -> bool:
    """One tiny problem with a tie, a violation and two groups, against its known answer.

    Run in a thread of its own: JAX's tracing state is per thread, so the test computes
    eagerly even when the first use of the kernel is inside a ``jit`` / ``vmap`` trace."""
    x = np.array([0.0, 1.0, 1.0, 2.0, 0.0, 1.0], np.float32)
    y = np.array([1.0, 0.0, 1.0, 0.0, 2.0, 1.0], np.float32)
    g = np.array([0, 0, 0, 0, 1, 1], np.int32)
    result: list[bool] = []

    def run() -> None:
        try:
            cpu = jax.devices("cpu")[0]
            args = (jax.device_put(a, cpu) for a in (x, y, np.ones_like(y), g))
            fitted = np.asarray(jax.jit(pav_fitted_cpu)(*args))
            result.append(bool(np.allclose(fitted, [0.5, 0.5, 0.5, 0.5, 1.5, 1.5])))
        except Exception:  # a library built against an incompatible XLA
            result.append(False)

    thread = threading.Thread(target=run, name="jaxcal-native-self-test")
    thread.start()
    thread.join()
    return bool(result) and result[0]


def pav_cpu_available() -> bool:
    """Whether the compiled CPU kernel is built, loads, passes its self-test and is not
    turned off by ``JAXCAL_NATIVE=0``."""
    if os.environ.get(ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    return _load()


def pav_fitted_cpu(
    x: jax.Array, y: jax.Array, w: jax.Array, group: jax.Array | None = None
) -> jax.Array:
    """Fitted values of the weighted isotonic (non-decreasing) regression of ``y`` on ``x``
    per group, from the compiled CPU kernel. Traceable; CPU programs only.

    Args:
        x: ``[..., n]`` float32 or float64 scores; each leading index is one problem.
        y: ``[..., n]`` targets, same dtype.
        w: ``[..., n]`` non-negative weights, same dtype.
        group: optional ``[..., n]`` int32 / int64 group ids (PAV never pools across them).

    Returns:
        ``[..., n]`` fitted values (block means; 0 for a group whose weights are all zero).

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
    out = call(x, y.astype(x.dtype), w.astype(x.dtype), group, has_group=has_group)
    return varying_like(out, x, y, w, group)  # FFI calls drop shard_map's varying axes


def pav_runs_cpu(x: jax.Array, y: jax.Array, w: jax.Array):
    """The run-level result of the weighted isotonic regression of ``y`` on ``x`` (one
    problem per leading index, no groups), from the compiled CPU kernel; what a fitted
    calibrator's knots need. Traceable; CPU programs only.

    Args:
        x: ``[..., n]`` float32 or float64 scores.
        y: ``[..., n]`` targets, same dtype.
        w: ``[..., n]`` non-negative weights, same dtype.

    Returns:
        ``(run_x, run_weight, run_value, block_start, n_runs)``: the distinct scores in
        increasing order, their total weights and fitted values, whether each run starts a
        PAV block (``[..., n]`` each, valid for the first ``n_runs``), and ``n_runs``
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
    run_x, run_w, run_v, start, n_runs = call(x, y.astype(x.dtype), w.astype(x.dtype))
    out = (run_x, run_w, run_v, start.astype(bool), n_runs)
    return varying_like(out, x, y, w)


def _require() -> None:
    if not _register():
        raise RuntimeError(
            "jaxcal's compiled CPU kernel is not available (not built at install, or built "
            "against an incompatible jaxlib); use jaxcal.calibrators._pav.pav instead."
        )
