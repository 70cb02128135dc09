"""jaxcal's optional compiled CPU kernels: weighted PAV, ENIR and per-row ridge solves as
XLA FFI handlers.

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

A third (from ``ridge_cpu.cc``) solves the per-row ridge systems of an ALS half-step
(``jaxcal.recsys.CMTRF``): :func:`ridge_rows_cpu` accumulates each row's Gram matrix and
right-hand side over its pairs (sorted by row, CSR offsets) in double precision and solves
by Cholesky, where the pure-JAX half-step scatters per-pair outer products
(``segment_sum``), slow on XLA's CPU backend. Leading batch dimensions are problems
(``vmap`` passes the shared index arrays once, not copied per problem), split over the
calling thread and XLA's intra-op thread pool. :func:`pair_scores_cpu` (same file) returns
the scores ``a[row] . b[col]`` of pairs, which XLA's CPU backend would gather row
by row. They have their own registration and self-test (:func:`ridge_cpu_available`).

A fourth (from ``venn_abers_cpu.cc``) builds the Venn-Abers tables
(``jaxcal.calibrators._venn_abers_core``): :func:`va_tables_cpu` runs the cumulative sum
diagrams, the hull pointers and the bridge sweeps of every problem as plain loops, where
the pure-JAX version's data-dependent inner ``while_loop`` s pay XLA's loop runtime per
point. Same comparisons and arithmetic in the same order and precision: the same tables.
Its own registration and self-test (:func:`venn_abers_cpu_available`).

A fifth (from ``linear_logit_cpu.cc``) is the exact constrained fit of the parametric
families (``jaxcal.fitting.solver``, without its sketch): :func:`linear_logit_cpu` takes a
problem's feature matrix and runs the same standardisation, damped Newton steps on the faces
of the constraints and active-set search as plain loops in double precision. The pure-JAX
solver is a program of nested while loops that XLA compiles in about half a second, on the
first fit of each family in a process; the program around this call compiles in a tenth of
that. Its own registration and self-test (:func:`linear_logit_cpu_available`).

Each kernel is used when the shared library was built (a C++17 compiler at install time;
the build is optional) and passes a small self-test against a known answer when first
loaded (its program goes through jaxcal's program cache, so a later process loads it
instead of compiling it). ``JAXCAL_NATIVE=0`` in the environment turns it off (the pure-JAX
path is then used on CPU too). The PAV kernel keeps one set of work buffers between calls
(64 bytes per point of the largest problem seen, up to 2**24 points; larger problems
allocate and free their own), so that repeated calls do not pay page faults.
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

from jaxcal._jit import jit
from jaxcal._vma import varying_like
from jaxcal._weights import normalize_weights

__all__ = [
    "pav_cpu_available",
    "pav_fitted_cpu",
    "pav_runs_cpu",
    "enir_cpu_available",
    "enir_fit_cpu",
    "near_isotonic_cpu",
    "ridge_cpu_available",
    "ridge_rows_cpu",
    "pair_scores_cpu",
    "venn_abers_cpu_available",
    "va_tables_cpu",
    "linear_logit_cpu_available",
    "linear_logit_cpu",
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
        fitted = np.asarray(jit(pav_fitted_cpu)(*args))
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


def _register_more(handlers) -> bool:
    """Register further ``(target, symbol)`` handlers of the library (a library built before
    they existed lacks them: the PAV handlers keep working then)."""
    if not _register():
        return False
    try:
        library = ctypes.cdll.LoadLibrary(str(_library_path()))  # the handle already loaded
        for target, symbol in handlers:
            jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(getattr(library, symbol)), "cpu")
    except Exception:  # an older build without these handlers
        return False
    return True


@functools.cache
def _register_enir() -> bool:
    """Register the ENIR handlers as well (:func:`_register_more`)."""
    return _register_more(
        ((_ENIR_TARGET, "JaxcalEnirCpu"), (_NEAR_ISOTONIC_TARGET, "JaxcalNearIsotonicCpu"))
    )


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
        acc, n_models, n_scored, _ = jit(enir_fit_cpu)(*(jax.device_put(a, cpu) for a in args))
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


# Per-row ridge systems (``ridge_cpu.cc``, compiled into the same library) -----------------

_RIDGE_TARGET = "jaxcal_ridge_cpu"
_PAIR_SCORES_TARGET = "jaxcal_pair_scores_cpu"


@functools.cache
def _register_ridge() -> bool:
    """Register the ridge and pair-score handlers as well (:func:`_register_more`)."""
    return _register_more(
        ((_RIDGE_TARGET, "JaxcalRidgeCpu"), (_PAIR_SCORES_TARGET, "JaxcalPairScoresCpu"))
    )


def _ridge_self_test() -> bool:
    r"""Two problems (``l2`` = 1 and 2) sharing their index arrays, against the closed
    form (:func:`_passes_in_thread`): row 0 has two pairs :math:`f = (1, 0)`, so
    :math:`(\mathrm{diag}(2, 0) + \lambda I)\, x = (2, 0) + e_0`; row 1 has none:
    :math:`x = e_1 / \lambda`; row 2 has :math:`f = (1, 1)` with :math:`c = r = 2` and a
    zero-weight pair: :math:`(2 J + \lambda I)\, x = (2, 2)`, :math:`x = 2 / (4 + \lambda)
    (1, 1)`. The pair scores of ``other`` with itself at pairs (2, 0) and (1, 2): 1 and 1."""
    other = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], np.float32)
    col = np.array([0, 0, 2, 1], np.int32)
    row_start = np.array([0, 2, 2, 4], np.int32)
    c = np.array([1.0, 1.0, 2.0, 0.0], np.float32)
    r = np.array([1.0, 1.0, 2.0, 0.0], np.float32)
    extra = np.array([[1.0, 1.0], [3.0, -1.0], [0.0, 0.0]], np.float32)
    l2 = np.array([1.0, 2.0], np.float32)
    expected = [
        [[1.0, 1.0], [3.0, -1.0], [0.4, 0.4]],
        [[0.75, 0.5], [1.5, -0.5], [1.0 / 3.0, 1.0 / 3.0]],
    ]

    def check() -> bool:
        cpu = jax.devices("cpu")[0]
        args = [jax.device_put(a, cpu) for a in (other, col, row_start, c, r, extra, l2)]
        x = jax.jit(jax.vmap(ridge_rows_cpu, in_axes=(None,) * 6 + (0,)))(*args)
        ids = jax.device_put(np.array([[2, 1], [0, 2]], np.int32), cpu)
        s = jit(pair_scores_cpu)(args[0], args[0], ids[0], ids[1])
        ok = np.allclose(np.asarray(x), expected, rtol=1e-6, atol=1e-6)
        return ok and np.allclose(np.asarray(s), [1.0, 1.0])

    return _passes_in_thread(check, "jaxcal-native-ridge-self-test")


@functools.cache
def _load_ridge() -> bool:
    """The ridge handler registered and passing its self-test."""
    return _register_ridge() and _ridge_self_test()


def ridge_cpu_available() -> bool:
    """Whether the compiled ridge kernel is built, loads, passes its self-test and is not
    turned off by ``JAXCAL_NATIVE=0``."""
    return not _turned_off() and _load_ridge()


def ridge_rows_cpu(other, col, row_start, c, r, extra, l2) -> jax.Array:
    r"""Every row's ridge solution from the compiled CPU kernel (double precision inside).
    Traceable; CPU programs only.

    Row :math:`n` of a problem solves :math:`\big(\sum_j c_j f_j f_j^\top + \lambda
    I\big)\, x_n = \sum_j r_j f_j + e_n` over its pairs ``j`` in ``row_start[n] ..
    row_start[n + 1] - 1``, with :math:`f_j` = ``other[col[j]]``; a row without pairs gets
    :math:`e_n / \lambda`, one whose matrix is not positive definite NaN.

    Args:
        other: ``[..., m, k]`` float32 or float64 features of the columns.
        col: ``[..., P]`` int32 column of each pair (the pairs sorted by row).
        row_start: ``[..., n + 1]`` int32 CSR offsets of the rows' pairs.
        c: ``[..., P]`` pair weights of the Gram matrices, ``other``'s dtype.
        r: ``[..., P]`` pair weights of the right-hand sides.
        extra: ``[..., n, k]`` added to the right-hand sides.
        l2: ``[...]`` ridge :math:`\lambda`, one per problem.

    Returns:
        ``[..., n, k]`` solutions. Leading dimensions broadcast (each operand's are the
        result's or 1; ``vmap`` does not copy unbatched operands).

    Raises:
        RuntimeError: if the kernel is not available (see :func:`ridge_cpu_available`).
    """
    _require_ridge()
    dtype = jnp.result_type(other)
    other, c, r, extra = (jnp.asarray(a, dtype) for a in (other, c, r, extra))
    l2 = jnp.asarray(l2, dtype)[..., None]
    col, row_start = (jnp.asarray(a, jnp.int32) for a in (col, row_start))
    n, k = row_start.shape[-1] - 1, other.shape[-1]
    cores = ((other, 2), (col, 1), (row_start, 1), (c, 1), (r, 1), (extra, 2), (l2, 1))
    return _batched_call(_RIDGE_TARGET, cores, (n, k), dtype)


def pair_scores_cpu(a, b, row, col) -> jax.Array:
    """The scores ``a[row[j]] . b[col[j]]`` of pairs, from the compiled CPU kernel (double
    accumulation). Traceable; CPU programs only.

    Args:
        a: ``[..., n, k]`` float32 or float64 row factors.
        b: ``[..., m, k]`` column factors, same dtype.
        row: ``[..., P]`` int32 row of each pair (in ``[0, n)``).
        col: ``[..., P]`` int32 column of each pair (in ``[0, m)``).

    Returns:
        ``[..., P]`` scores; leading dimensions broadcast as in :func:`ridge_rows_cpu`.

    Raises:
        RuntimeError: if the kernel is not available (see :func:`ridge_cpu_available`).
    """
    _require_ridge()
    dtype = jnp.result_type(a)
    a, b = (jnp.asarray(v, dtype) for v in (a, b))
    row, col = (jnp.asarray(v, jnp.int32) for v in (row, col))
    cores = ((a, 2), (b, 2), (row, 1), (col, 1))
    return _batched_call(_PAIR_SCORES_TARGET, cores, row.shape[-1:], dtype)


def _batched_call(target: str, cores, core_shape: tuple, dtype) -> jax.Array:
    """Call ``target`` on ``(operand, core rank)`` pairs whose leading (batch) dimensions
    broadcast: each gets the batch rank with 1s in front (``vmap`` adds its axes the same
    way, ``expand_dims``, so unbatched operands are not copied)."""
    batch = jnp.broadcast_shapes(*(a.shape[: a.ndim - rank] for a, rank in cores))
    args = [a.reshape((1,) * (len(batch) - a.ndim + rank) + a.shape) for a, rank in cores]
    out = jax.ShapeDtypeStruct((*batch, *core_shape), dtype)
    call = jax.ffi.ffi_call(target, out, vmap_method="expand_dims")
    return varying_like(call(*args), *args)


def _require_ridge() -> None:
    if not _register_ridge():
        raise RuntimeError(
            "jaxcal's compiled ridge kernel is not available (not built at install, or built "
            "against an incompatible jaxlib); use jaxcal.recsys._cmtrf_core's JAX path instead."
        )


# Venn-Abers tables (``venn_abers_cpu.cc``, compiled into the same library) -----------------

_VENN_ABERS_TARGET = "jaxcal_venn_abers_cpu"


@functools.cache
def _register_venn_abers() -> bool:
    """Register the Venn-Abers handler as well (:func:`_register_more`)."""
    return _register_more(((_VENN_ABERS_TARGET, "JaxcalVennAbersCpu"),))


def _venn_abers_self_test() -> bool:
    """Two problems (three runs, then two with another test weight) against their known
    tables (computed by the pure-JAX path; :func:`_passes_in_thread`)."""
    inc_w = np.array([0, 1, 2, 1, 0, 1, 3], np.float32)
    inc_y = np.array([0, 1, 0, 1, 0, 0, 2], np.float32)
    omega = np.array([1, 1, 1, 1, 1.5, 1.5, 1.5], np.float32)
    first = np.array([1, 0, 0, 0, 1, 0, 0], bool)
    last = np.array([0, 0, 0, 1, 0, 0, 1], bool)
    p0 = [0.0, 0.25, 0.25, 0.5, 0.0, 0.0, 4 / 9]
    p1 = [0.5, 0.5, 1.0, 1.0, 0.6, 7 / 9, 1.0]

    def check() -> bool:
        cpu = jax.devices("cpu")[0]
        args = (jax.device_put(a, cpu) for a in (inc_w, inc_y, omega, first, last))
        got0, got1 = jit(va_tables_cpu)(*args)
        return np.allclose(got0, p0, atol=1e-6) and np.allclose(got1, p1, atol=1e-6)

    return _passes_in_thread(check, "jaxcal-native-venn-abers-self-test")


@functools.cache
def _load_venn_abers() -> bool:
    return _register_venn_abers() and _venn_abers_self_test()


def venn_abers_cpu_available() -> bool:
    """Whether the compiled Venn-Abers kernel is built, loads, passes its self-test and is
    not turned off by ``JAXCAL_NATIVE=0``."""
    return not _turned_off() and _load_venn_abers()


def va_tables_cpu(inc_w, inc_y, omega, first, last) -> tuple[jax.Array, jax.Array]:
    """``(p0, p1)`` of the Venn-Abers tables at every point of a flat layout of problems
    (``jaxcal.calibrators._venn_abers_core.va_tables``), from the compiled CPU kernel.
    Traceable; CPU programs only.

    Args:
        inc_w, inc_y: ``[..., N]`` float32 or float64 CSD increments (0 at every problem's
            first point).
        omega: ``[..., N]`` the test point's weight at every point, same dtype.
        first, last: ``[..., N]`` bool: a problem's first / last point; each layout starts
            with a first and ends with a last point.

    Raises:
        RuntimeError: if the kernel is not available (see :func:`venn_abers_cpu_available`).
    """
    if not _register_venn_abers():
        raise RuntimeError(
            "jaxcal's compiled Venn-Abers kernel is not available (not built at install, or "
            "built against an incompatible jaxlib); use the pure-JAX tables instead."
        )
    dtype = jnp.result_type(inc_w)
    row = jax.ShapeDtypeStruct(jnp.shape(inc_w), dtype)
    call = jax.ffi.ffi_call(_VENN_ABERS_TARGET, (row, row), vmap_method="broadcast_all")
    args = (inc_w, jnp.asarray(inc_y, dtype), jnp.asarray(omega, dtype))
    args += tuple(jnp.asarray(v, bool) for v in (first, last))
    return varying_like(call(*args), *args)


# Linear-logit fits (``linear_logit_cpu.cc``, compiled into the same library) ---------------

_LINEAR_LOGIT_TARGET = "jaxcal_linear_logit_cpu"


@functools.cache
def _register_linear_logit() -> bool:
    """Register the linear-logit handler as well (:func:`_register_more`)."""
    return _register_more(((_LINEAR_LOGIT_TARGET, "JaxcalLinearLogitCpu"),))


def _linear_logit_self_test() -> bool:
    """Platt scaling of four weighted points (:func:`_passes_in_thread`): labels (0, 1, 0, 1)
    at scores (-1, -1, 1, 1) give a positive slope and a zero gradient; labels (1, 1, 0, 0)
    violate the constraint ``slope >= 0``, whose optimum is then slope 0 and the logit of
    the weighted mean label 1/3, log(1/2)."""
    s = np.array([-1.0, -1.0, 1.0, 1.0], np.float32)
    X = np.stack([s, np.ones(4, np.float32)], axis=1)
    w = np.array([1.0, 1.0, 1.0, 3.0], np.float32)
    C = np.array([[1.0, 0.0]], np.float32)
    scalars = (np.float32(0.0), np.float32(1e-9), np.int32(50))

    def check() -> bool:
        cpu = jax.devices("cpu")[0]
        fit = functools.partial(jit(linear_logit_cpu, static_argnames="intercept"), intercept=1)
        ok = True
        for t, expected in (([0, 1, 0, 1], None), ([1, 1, 0, 0], [0.0, np.log(0.5)])):
            t = np.asarray(t, np.float32)
            args = (jax.device_put(a, cpu) for a in (X, t, w, C, *scalars))
            theta, info = (np.asarray(v) for v in fit(*args))
            if expected is None:  # the unconstrained optimum: zero gradient
                z = X @ theta
                grad = X.T @ (w * (1 / (1 + np.exp(-z)) - t))
                ok &= bool(np.all(np.abs(grad) < 1e-4)) and theta[0] > 0 and info[0] == 0
            else:
                ok &= bool(np.allclose(theta, expected, atol=1e-5)) and info[4] == 1
        return ok

    return _passes_in_thread(check, "jaxcal-native-linear-logit-self-test")


@functools.cache
def _load_linear_logit() -> bool:
    return _register_linear_logit() and _linear_logit_self_test()


def linear_logit_cpu_available() -> bool:
    """Whether the compiled linear-logit kernel is built, loads, passes its self-test and is
    not turned off by ``JAXCAL_NATIVE=0``."""
    return not _turned_off() and _load_linear_logit()


def linear_logit_cpu(X, t, w, C, l2, tol, max_iter, *, intercept: int | None):
    """The exact constrained fit of one linear-logit problem from the compiled CPU kernel
    (``jaxcal.fitting.solver.solve`` without the sketch; double precision inside).
    Traceable; CPU programs only.

    Args:
        X: ``[n, p]`` float32 or float64 features (``p <= 16``).
        t, w: ``[n]`` targets and weights, same dtype.
        C: ``[k, p]`` constraint rows (``k <= 8``), same dtype.
        l2, tol: scalars, same dtype; max_iter: int32 scalar.
        intercept: the intercept column, or ``None``.

    Returns:
        ``(theta, info)``: ``[p]`` coefficients and ``[4 + 2 k]`` ``(code, n_iter,
        objective, kkt_residual, active[k], multipliers[k])`` in ``X``'s dtype.

    Raises:
        RuntimeError: if the kernel is not available (see :func:`linear_logit_cpu_available`).
    """
    if not _register_linear_logit():
        raise RuntimeError(
            "jaxcal's compiled linear-logit kernel is not available (not built at install, or "
            "built against an incompatible jaxlib); use jaxcal.fitting.solver.solve instead."
        )
    dtype = jnp.result_type(X)
    p, k = X.shape[-1], C.shape[0]
    out = (jax.ShapeDtypeStruct((p,), dtype), jax.ShapeDtypeStruct((4 + 2 * k,), dtype))
    call = jax.ffi.ffi_call(_LINEAR_LOGIT_TARGET, out, vmap_method="sequential")
    args = [jnp.asarray(a, dtype) for a in (X, t, w, C, l2, tol)]
    args.append(jnp.asarray(max_iter, jnp.int32))
    index = -1 if intercept is None else int(intercept)
    return varying_like(call(*args, intercept=np.int64(index)), *args)
