"""``jit`` for jaxcal's programs: ``jax.jit`` with short compiles, cached across runs.

Two things set a jaxcal program apart from ``jax.jit``:

* **Compiler options, in tiers.** jaxcal's programs are many small kernels (a Newton loop
  on a 3-parameter problem, a PAV pass, binned sums), so on CPU most of a first call is XLA
  compiling them, kernel by kernel. A program is therefore compiled fast first and compiled
  again optimised once its calls show that it pays, on CPU in three tiers:

  - ``"classic-o0"``: XLA's classic LLVM IR emitters (``xla_cpu_use_fusion_emitters=False``,
    2-3x faster to compile than the default MLIR fusion emitters) without LLVM's
    optimisation passes (``xla_backend_optimization_level=0``: half the compile time again,
    for a program that runs 3-5x slower). The first tier of a program whose inputs are
    small (no input leaf above ``SMALL_PROGRAM_ELEMENTS``, 65,536 elements: the size
    buckets of a research script's calibration problems), where that is milliseconds.
    After ``TIER_UP_CALLS`` calls of the same program (function, static arguments, input
    shapes and dtypes; the callers pad inputs to size buckets, ``jaxcal._shapes``, so this
    counts the calls of a bucket) it is promoted to ``"classic"``.
  - ``"classic"``: the classic emitters with LLVM's passes; at small sizes they run as fast
    as the fusion emitters (the linear-logit solver at n = 1e4) and compile in about half
    the time. The first tier of programs with a large input (their run time pays for LLVM's
    passes at once) and of small programs declared with ``jit(..., optimize=True)`` (heavy
    arithmetic per element over stored arrays: BBQ's log-gamma model scores, 3-4x faster
    optimised); a program with a large input is promoted to ``"default"`` from its second
    call (``TIER_UP_CALLS_LARGE``; a large fit run once pays no second compile).
  - ``"default"``: XLA's default options, the fusion emitters with LLVM's passes, which run
    large programs fastest (an EM iteration on 1e5 sessions x 10 results 1.1-1.2x, 200
    batched Platt fits of 1e4 scores 1.1x faster than ``"classic"``; the linear-logit
    solver alone at 2^20 rows about as fast in both). Also the only tier of programs
    declared with ``jit(..., xla_defaults=True)`` (long loops of many small steps: ENIR's
    path, a training scan, which the classic emitters run 1.5-2x slower), of other
    backends, and of every program with ``JAXCAL_XLA_DEFAULTS=1``.

  A program declared with ``jit(..., kernel_call=True)`` is a compiled kernel's call (an
  XLA FFI handler of ``jaxcal._native``) and little else: it keeps ``"classic-o0"`` at
  every size and is never promoted, since no compiler option speeds up the kernel's work.

  A promotion compiles in a background thread; the new executable replaces the running one
  for the calls that follow (a process waits for such compiles before it exits). The
  options are checked once on a tiny program and dropped if this jaxlib does not know them.
  XLA fixes the order of every reduction and LLVM does not reorder floating-point
  operations, so the tiers agree to the last bit or two (an optimised program may fuse
  ``a * b + c`` into one fused multiply-add).
* **A cache of compiled programs on disk** (``jaxcal._compilation_cache``): with the cache
  on (the default), a call looks its program up by function, static arguments, input
  shapes and dtypes; a hit in memory calls the compiled executable, a hit on disk loads it
  (no tracing, no compiling; the tier it is promoted to first, so a program promoted once
  starts promoted in every later process), and a miss traces, compiles and stores it. Each
  tier of a program is stored once. With the cache off (``JAXCAL_COMPILATION_CACHE=0``)
  the function is a plain ``jax.jit`` in its first tier (no count of calls). A program
  that JAX itself loaded from its own persistent cache (one the user turned on) is used
  but not stored: XLA cannot serialize such an executable again in full (the copy lacks
  kernels and fails when a fresh process runs it). A program loaded from disk is checked
  on its first call: one that fails to run is compiled anew and replaced. One with LAPACK
  calls (``jnp.linalg`` on CPU) first sets up jaxlib's LAPACK kernels, which JAX does only
  while lowering.

Calls from inside another trace (a user's ``jit`` or ``vmap``) are traced into the outer
program as with ``jax.jit``; inputs sharded over several devices take ``jax.jit``'s path.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import inspect
import os
import threading
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.experimental import serialize_executable

from jaxcal import _compilation_cache

__all__ = [
    "jit",
    "cpu_compiler_options",
    "SMALL_PROGRAM_ELEMENTS",
    "TIER_UP_CALLS",
    "TIER_UP_CALLS_LARGE",
]

_CPU_OPTIONS = {"xla_cpu_use_fusion_emitters": False}
_SMALL_OPTIONS = {**_CPU_OPTIONS, "xla_backend_optimization_level": 0}
#: the largest input leaf (elements) of a program compiled without LLVM's passes first
SMALL_PROGRAM_ELEMENTS = 1 << 16
#: calls after which a program compiled without LLVM's passes is compiled with them
TIER_UP_CALLS = 16
#: calls after which a program with a larger input leaf gets XLA's default options
TIER_UP_CALLS_LARGE = 2

# The tiers of a program on CPU (module docstring) and the options each asks for.
_UNOPTIMIZED, _CLASSIC, _DEFAULT = "classic-o0", "classic", "default"
_ASKED = {_UNOPTIMIZED: _SMALL_OPTIONS, _CLASSIC: _CPU_OPTIONS, _DEFAULT: {}}

# Hits of JAX's own persistent cache, counted per thread (a compile runs in its caller's
# thread), so that jaxcal knows whether ``compile()`` compiled or loaded a program.
_JAX_CACHE_HIT = "/jax/compilation_cache/cache_hits"
_jax_cache_hits = threading.local()


def _count_jax_cache_hit(event: str, **kwargs: Any) -> None:
    if event == _JAX_CACHE_HIT:
        _jax_cache_hits.n = getattr(_jax_cache_hits, "n", 0) + 1


jax.monitoring.register_event_listener(_count_jax_cache_hit)

# Optimising compiles running in background threads; joined before the interpreter exits
# (an XLA compile must not outlive the runtime it compiles for).
_pending: set[threading.Thread] = set()
_pending_lock = threading.Lock()


def _wait_for_tier_ups(timeout: float | None = None) -> None:
    """Wait until every optimising compile started so far has finished (tests, benchmarks,
    and the interpreter's exit)."""
    with _pending_lock:
        threads = list(_pending)
    for thread in threads:
        thread.join(timeout)


atexit.register(_wait_for_tier_ups)


@functools.cache
def cpu_compiler_options(small: bool = False) -> dict[str, Any] | None:
    """The options of the ``"classic"`` tier on CPU, or with ``small`` of the
    ``"classic-o0"`` tier (``None``: XLA's defaults; module docstring)."""
    if os.environ.get("JAXCAL_XLA_DEFAULTS") == "1":
        return None
    options = _SMALL_OPTIONS if small else _CPU_OPTIONS
    try:
        jax.jit(lambda x: x + 1, compiler_options=options).lower(1.0).compile()
    except Exception:  # an unknown option in this jaxlib: keep XLA's defaults
        return None
    return dict(options)


def _is_small(leaves: list) -> bool:
    """Whether no input leaf has more than ``SMALL_PROGRAM_ELEMENTS`` elements."""
    return all(int(np.size(x)) <= SMALL_PROGRAM_ELEMENTS for x in leaves)


def _leaf_spec(x: Any) -> Any:
    """What of an input leaf decides its compiled program (``None``: not cacheable)."""
    if isinstance(x, jax.Array):
        if not isinstance(x.sharding, jax.sharding.SingleDeviceSharding):
            return None
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):  # typed keys: jax.jit's path
            return None
        return (x.shape, x.dtype, x.weak_type, repr(x.sharding))
    if isinstance(x, np.ndarray | np.generic):
        return (x.shape, x.dtype)
    if isinstance(x, bool | int | float | complex):
        return type(x).__name__  # weakly typed; its dtype follows jax_enable_x64 (in the key)
    return None


@functools.cache
def _init_lapack() -> bool:
    """Set up jaxlib's LAPACK kernels (``jnp.linalg`` on CPU), as JAX does when it lowers
    such an operation, which a program loaded from disk skips: the kernels take their
    function pointers from SciPy (about 0.1 s of imports) and would run through null
    pointers (a segmentation fault) in a process that only loaded them. ``False`` where
    this jaxlib has no such hook: such programs are then compiled, not loaded."""
    try:
        from jax._src.lib import lapack

        lapack._lapack.initialize()
    except Exception:
        return False
    return True


class _Program:
    """A compiled program of one key: its executable, tier and count of calls."""

    __slots__ = ("executable", "tier", "calls", "target", "tier_up_calls", "tiering")

    def __init__(self, executable: Any, tier: str, target: str | None, tier_up_calls: int):
        self.executable = executable
        self.tier = tier
        self.calls = 0
        self.target = None if tier == target else target  # the tier it is promoted to
        self.tier_up_calls = tier_up_calls  # the calls after which it is promoted
        self.tiering = False  # the optimising compile has been started


class _Jit:
    """A jitted jaxcal function (see the module docstring)."""

    def __init__(self, fun: Callable, kwargs: dict[str, Any]):
        functools.update_wrapper(self, fun)
        self._fun = fun
        self._xla_defaults = bool(kwargs.pop("xla_defaults", False))
        self._optimize = bool(kwargs.pop("optimize", False))
        self._kernel_call = bool(kwargs.pop("kernel_call", False))
        self._kwargs = kwargs
        self._jitted: dict[Any, Any] = {}
        self._programs: dict[Any, _Program] = {}
        names = kwargs.get("static_argnames") or ()
        names = (names,) if isinstance(names, str) else tuple(names)
        nums = kwargs.get("static_argnums")
        nums = () if nums is None else (nums,) if isinstance(nums, int) else tuple(nums)
        params = list(inspect.signature(fun).parameters)
        self._static_names = frozenset(names) | {params[i] for i in nums if i < len(params)}
        self._static_nums = frozenset(nums) | {params.index(n) for n in names if n in params}
        self._cacheable = set(kwargs) <= {"static_argnames", "static_argnums"}

    def _plan(self, small: bool) -> tuple[str, str | None, int]:
        """The tier a program is compiled in first, the tier it is promoted to (``None``:
        none) and after how many calls (module docstring). No probe compile."""
        if (
            self._xla_defaults
            or jax.default_backend() != "cpu"
            or os.environ.get("JAXCAL_XLA_DEFAULTS") == "1"
        ):
            return _DEFAULT, None, 0
        if self._kernel_call:
            return _UNOPTIMIZED, None, 0
        if not small:
            return _CLASSIC, _DEFAULT, TIER_UP_CALLS_LARGE
        if self._optimize:
            return _CLASSIC, None, 0
        return _UNOPTIMIZED, _CLASSIC, TIER_UP_CALLS

    def _get(self, nested: bool = False, tier: str = _CLASSIC) -> Any:
        # inside another trace the outer program is what gets compiled (and JAX refuses
        # options on a nested jit): the plain jitted function
        cpu = not nested and jax.default_backend() == "cpu" and tier != _DEFAULT
        key = "nested" if nested else (jax.default_backend() == "cpu", tier)
        jitted = self._jitted.get(key)
        if jitted is None:
            options = cpu_compiler_options(tier == _UNOPTIMIZED) if cpu else None
            jitted = jax.jit(self._fun, compiler_options=options, **self._kwargs)
            self._jitted[key] = jitted
        return jitted

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        leaves, in_tree = jax.tree.flatten((args, kwargs))
        if any(isinstance(x, jax.core.Tracer) for x in leaves):
            return self._get(nested=True)(*args, **kwargs)
        dyn_args = tuple(a for i, a in enumerate(args) if i not in self._static_nums)
        dyn_kwargs = {k: v for k, v in kwargs.items() if k not in self._static_names}
        dyn_leaves, dyn_tree = jax.tree.flatten((dyn_args, dyn_kwargs))
        small = _is_small(dyn_leaves)
        # the cache's switch, as _compilation_cache.cache_dir() reads it (no path built)
        if not self._cacheable or os.environ.get(_compilation_cache.CACHE_ENV) == "0":
            return self._get(tier=self._plan(small)[0])(*args, **kwargs)
        specs = tuple(_leaf_spec(x) for x in dyn_leaves)
        if any(s is None for s in specs):
            return self._get(tier=self._plan(small)[0])(*args, **kwargs)
        statics = (
            tuple((i, a) for i, a in enumerate(args) if i in self._static_nums),
            tuple(sorted((k, v) for k, v in kwargs.items() if k in self._static_names)),
        )
        backend = jax.default_backend()
        key = (dyn_tree, specs, statics, backend, jax.config.jax_enable_x64)
        program = self._programs.get(key)
        if program is None:
            program, out = self._load_or_compile(key, *self._plan(small), args, kwargs)
            self._programs[key] = program
            if out is not None:  # loaded from disk and run once to check it
                program.calls += 1
                return out
        program.calls += 1
        if program.target and program.calls >= program.tier_up_calls and not program.tiering:
            self._tier_up(program, key, args, kwargs)
        return program.executable(*dyn_args, **dyn_kwargs)

    def _load_or_compile(
        self, key: tuple, first: str, target: str | None, calls: int, args: tuple, kwargs: dict
    ) -> tuple[_Program, Any]:
        """The program of ``key``: from disk (tier ``target`` first, then ``first``), with its
        checked first output, or compiled in tier ``first`` (output ``None``)."""
        dyn_args = tuple(a for i, a in enumerate(args) if i not in self._static_nums)
        dyn_kwargs = {k: v for k, v in kwargs.items() if k not in self._static_names}
        for tier in (target, first) if target else (first,):
            disk_key, executable = self._load(key, tier)
            if executable is None:
                continue
            try:  # loaded from disk: run it once before trusting it
                out = jax.block_until_ready(executable(*dyn_args, **dyn_kwargs))
            except jax.errors.JaxRuntimeError:  # an entry that loads but cannot run
                executable, out = self._compile(disk_key, tier, args, kwargs), None
            return _Program(executable, tier, target, calls), out
        executable = self._compile(self._disk_key(key, first), first, args, kwargs)
        return _Program(executable, first, target, calls), None

    def _disk_key(self, key: tuple, tier: str) -> str | None:
        """The key of ``key``'s program of tier ``tier`` on disk (``None``: not stored)."""
        dyn_tree, specs, statics, backend, _ = key
        # the options asked for (whether this jaxlib takes them follows from its version,
        # in the fingerprint): no probe compile on a cache hit
        cpu = backend == "cpu" and not self._xla_defaults
        options = (_ASKED[tier], os.environ.get("JAXCAL_XLA_DEFAULTS")) if cpu else None
        text = repr((self.__module__, self.__qualname__, dyn_tree, specs, options))
        text += _static_text(statics)
        # an address in a repr (an object without a stable repr) would never hit: no disk
        if " at 0x" in text:
            return None
        digest = hashlib.sha256((_compilation_cache.fingerprint(backend) + text).encode())
        return digest.hexdigest()

    def _load(self, key: tuple, tier: str) -> tuple[str | None, Any]:
        """The disk key of ``key``'s program of tier ``tier`` and its executable loaded from
        disk, or ``None`` (a miss, or an entry to compile anew)."""
        disk_key = self._disk_key(key, tier)
        entry = None if disk_key is None else _compilation_cache.load(disk_key)
        if entry is None:
            return disk_key, None
        if key[3] == "cpu" and b"lapack_" in entry[0] and not _init_lapack():
            return disk_key, None  # compiled (and lowered) anew: JAX sets them up
        try:
            return disk_key, serialize_executable.deserialize_and_load(entry[0], key[0], entry[1])
        except Exception:  # stale or damaged: compiled anew by the caller
            return disk_key, None

    def _compile(self, disk_key: str | None, tier: str, args: tuple, kwargs: dict) -> Any:
        """Trace and compile a program in tier ``tier``, and store it under ``disk_key``."""
        hits = getattr(_jax_cache_hits, "n", 0)
        compiled = self._get(tier=tier).lower(*args, **kwargs).compile()
        if disk_key is None or getattr(_jax_cache_hits, "n", 0) != hits:
            return compiled  # JAX loaded it from its own cache: not serializable in full
        try:
            executable, _, out_tree = serialize_executable.serialize(compiled)
        except Exception:  # a program XLA cannot serialize: keep it in memory only
            return compiled
        _compilation_cache.store(disk_key, executable, out_tree)
        return compiled

    def _tier_up(self, program: _Program, key: tuple, args: tuple, kwargs: dict) -> None:
        """Compile ``program`` in its target tier in a background thread; the new executable
        replaces the running one when it is ready (and is stored on disk once). The thread
        lowers the call's own arguments (only their shapes and dtypes are read)."""
        program.tiering = True
        tier = program.target
        x64 = key[4]  # the caller's setting (a thread may see another)
        disk_key = self._disk_key(key, tier)

        def compile_optimized() -> None:
            try:
                if jax.config.jax_enable_x64 == x64:  # a thread-local setting of the caller
                    executable = self._compile(disk_key, tier, args, kwargs)
                    program.executable, program.tier = executable, tier
            except Exception:  # keep the running program
                pass
            finally:
                with _pending_lock:
                    _pending.discard(threading.current_thread())

        thread = threading.Thread(target=compile_optimized, name="jaxcal-tier-up", daemon=True)
        with _pending_lock:
            _pending.add(thread)
        thread.start()

    def _cache_size(self) -> int:
        """Programs compiled or loaded by this function in this process."""
        return len(self._programs) + sum(j._cache_size() for j in self._jitted.values())

    def __getattr__(self, name: str) -> Any:  # lower, trace, eval_shape...
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._get(), name)

    def __get__(self, obj: Any, objtype: Any = None) -> Any:  # usable as a method
        return self if obj is None else functools.partial(self, obj)


def _static_text(value: Any) -> str:
    """A repr of static arguments that is the same in every process.

    A function's repr holds its address; a function of jaxcal (or of JAX / NumPy) is named
    by its module and qualified name instead, which is stable since the cache's fingerprint
    holds jaxcal's source digest and JAX's version (the EM programs take their E- and
    M-steps as static arguments). Other functions keep their repr, address included, so
    their programs are not stored (a user's function can change under the same name)."""
    if isinstance(value, (tuple, list)):
        return f"{type(value).__name__}({', '.join(_static_text(v) for v in value)})"
    if isinstance(value, dict):
        items = (f"{_static_text(k)}: {_static_text(v)}" for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    if isinstance(value, functools.partial):
        keywords = tuple(sorted(value.keywords.items()))
        return f"partial({_static_text((value.func, value.args, keywords))})"
    if inspect.ismethod(value):
        return f"{_static_text(value.__self__)}.{value.__func__.__name__}"
    if inspect.isfunction(value) or inspect.isbuiltin(value):
        return _named(value) or repr(value)
    return repr(value)


def _named(fun: Callable) -> str | None:
    """``module.qualname`` of a module-level function of jaxcal, JAX or NumPy, else ``None``."""
    module, qualname = getattr(fun, "__module__", None) or "", fun.__qualname__
    if "<" in qualname or module.split(".")[0] not in ("jaxcal", "jax", "jaxlib", "numpy"):
        return None
    return f"{module}.{qualname}"


def jit(fun: Callable | None = None, **kwargs: Any) -> Any:
    """``jax.jit(fun, **kwargs)`` with jaxcal's tiers of compiler options and its program
    cache (module docstring). Usable as ``@jit``, ``@functools.partial(jit,
    static_argnames=...)`` or ``jit(f, ...)``; ``xla_defaults=True`` keeps XLA's default
    compiler options from the first call, ``kernel_call=True`` the fastest to compile (a
    program that calls a compiled kernel), ``optimize=True`` LLVM's optimisation passes at
    every input size."""
    if fun is None:
        return functools.partial(jit, **kwargs)
    return _Jit(fun, kwargs)
