"""``jit`` for jaxcal's programs: ``jax.jit`` with short compiles, cached across runs.

Two things set a jaxcal program apart from ``jax.jit``:

* **Compiler options.** jaxcal's programs are many small kernels (a Newton loop on a
  3-parameter problem, a PAV pass, binned sums), so on CPU most of a first call is XLA
  compiling them, kernel by kernel. XLA's classic LLVM IR emitters produce kernels that run
  as fast for these programs as its default MLIR fusion emitters (measured on the
  linear-logit solver at n = 1e4 and 1e6) and compile 2-3x faster, so programs compiled for
  CPU get ``xla_cpu_use_fusion_emitters=False``. The options are checked once on a tiny
  program and dropped if this jaxlib does not know them (``JAXCAL_XLA_DEFAULTS=1`` drops
  them too). Other backends, and the user's own programs, get XLA's defaults, and so do
  programs declared with ``jit(..., xla_defaults=True)``: long loops of many small steps
  (ENIR's path, a training scan), which run 1.5-2x slower with the classic emitters.
  Programs whose inputs are small (no input leaf above ``SMALL_PROGRAM_ELEMENTS``, 65,536
  elements: the size buckets of a research script's calibration problems) also skip
  LLVM's optimisation passes (``xla_backend_optimization_level=0``): they compile in about
  half the time (0.8 instead of 1.7 s for the linear-logit solver under load) and run 3-5x
  slower, which at these sizes is milliseconds (the solver at n = 1e4: 2 -> 6-10 ms under
  load), while larger programs, whose run time a compile pays for within a few calls, keep
  LLVM's full optimisation, and so do programs declared with ``jit(..., optimize=True)``:
  heavy arithmetic per element over stored arrays (BBQ's log-gamma model scores), which
  runs 3-4x faster optimised, at every size, for a compile about 0.1 s longer. XLA fixes
  the order of every reduction and LLVM does not reorder floating-point operations, so
  results agree to the last bit or two (only an optimised program fuses ``a * b + c`` into
  one fused multiply-add).
* **A cache of compiled programs on disk** (``jaxcal._compilation_cache``): with the cache
  on (the default), a call looks its program up by function, static arguments, input
  shapes and dtypes; a hit in memory calls the compiled executable, a hit on disk loads it
  (no tracing, no compiling), and a miss traces, compiles and stores it. With the cache
  off (``JAXCAL_COMPILATION_CACHE=0``) the function is a plain ``jax.jit``. A program that
  JAX itself loaded from its own persistent cache (one the user turned on) is used but not
  stored: XLA cannot serialize such an executable again in full (the copy lacks kernels
  and fails when a fresh process runs it). A program loaded from disk is checked on its
  first call: one that fails to run is compiled anew and replaced. One with LAPACK calls
  (``jnp.linalg`` on CPU) first sets up jaxlib's LAPACK kernels, which JAX does only while
  lowering.

Calls from inside another trace (a user's ``jit`` or ``vmap``) are traced into the outer
program as with ``jax.jit``; inputs sharded over several devices take ``jax.jit``'s path.
"""

from __future__ import annotations

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

__all__ = ["jit", "cpu_compiler_options", "SMALL_PROGRAM_ELEMENTS"]

_CPU_OPTIONS = {"xla_cpu_use_fusion_emitters": False}
_SMALL_OPTIONS = {**_CPU_OPTIONS, "xla_backend_optimization_level": 0}
#: the largest input leaf (elements) of a program that compiles without LLVM's optimisations
SMALL_PROGRAM_ELEMENTS = 1 << 16

# Hits of JAX's own persistent cache, counted per thread (a compile runs in its caller's
# thread), so that jaxcal knows whether ``compile()`` compiled or loaded a program.
_JAX_CACHE_HIT = "/jax/compilation_cache/cache_hits"
_jax_cache_hits = threading.local()


def _count_jax_cache_hit(event: str, **kwargs: Any) -> None:
    if event == _JAX_CACHE_HIT:
        _jax_cache_hits.n = getattr(_jax_cache_hits, "n", 0) + 1


jax.monitoring.register_event_listener(_count_jax_cache_hit)


@functools.cache
def cpu_compiler_options(small: bool = False) -> dict[str, Any] | None:
    """The options given to programs compiled for CPU (``None``: XLA's defaults); ``small``:
    a program whose inputs are small (module docstring)."""
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
        return (x.shape, str(x.dtype), x.weak_type, repr(x.sharding))
    if isinstance(x, np.ndarray | np.generic):
        return (x.shape, str(x.dtype))
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


class _Jit:
    """A jitted jaxcal function (see the module docstring)."""

    def __init__(self, fun: Callable, kwargs: dict[str, Any]):
        functools.update_wrapper(self, fun)
        self._fun = fun
        self._xla_defaults = bool(kwargs.pop("xla_defaults", False))
        self._optimize = bool(kwargs.pop("optimize", False))
        self._kwargs = kwargs
        self._jitted: dict[Any, Any] = {}
        self._programs: dict[Any, Any] = {}
        names = kwargs.get("static_argnames") or ()
        names = (names,) if isinstance(names, str) else tuple(names)
        nums = kwargs.get("static_argnums")
        nums = () if nums is None else (nums,) if isinstance(nums, int) else tuple(nums)
        params = list(inspect.signature(fun).parameters)
        self._static_names = frozenset(names) | {params[i] for i in nums if i < len(params)}
        self._static_nums = frozenset(nums) | {params.index(n) for n in names if n in params}
        self._cacheable = set(kwargs) <= {"static_argnames", "static_argnums"}

    def _get(self, nested: bool = False, small: bool = False) -> Any:
        # inside another trace the outer program is what gets compiled (and JAX refuses
        # options on a nested jit): the plain jitted function
        cpu = not nested and jax.default_backend() == "cpu" and not self._xla_defaults
        key = "nested" if nested else (jax.default_backend() == "cpu", cpu and small)
        jitted = self._jitted.get(key)
        if jitted is None:
            options = cpu_compiler_options(small) if cpu else None
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
        small = not self._optimize and _is_small(dyn_leaves)
        if not self._cacheable or _compilation_cache.cache_dir() is None:
            return self._get(small=small)(*args, **kwargs)
        specs = tuple(_leaf_spec(x) for x in dyn_leaves)
        if any(s is None for s in specs):
            return self._get(small=small)(*args, **kwargs)
        statics = (
            tuple((i, a) for i, a in enumerate(args) if i in self._static_nums),
            tuple(sorted((k, v) for k, v in kwargs.items() if k in self._static_names)),
        )
        backend = jax.default_backend()
        key = (dyn_tree, specs, statics, backend, jax.config.jax_enable_x64, small)
        program = self._programs.get(key)
        if program is not None:
            return program(*dyn_args, **dyn_kwargs)
        disk_key, program = self._program(key, args, kwargs)
        if program is not None:  # loaded from disk: run it once before trusting it
            try:
                out = jax.block_until_ready(program(*dyn_args, **dyn_kwargs))
            except jax.errors.JaxRuntimeError:  # an entry that loads but cannot run
                program = None
            else:
                self._programs[key] = program
                return out
        program = self._compile(disk_key, small, args, kwargs)
        self._programs[key] = program
        return program(*dyn_args, **dyn_kwargs)

    def _program(self, key: tuple, args: tuple, kwargs: dict) -> tuple[str | None, Any]:
        """The disk key of ``key`` (``None``: not stored) and its executable from disk,
        or ``None`` (a miss)."""
        dyn_tree, specs, statics, backend, _, small = key
        # the options asked for (whether this jaxlib takes them follows from its version,
        # in the fingerprint): no probe compile on a cache hit
        cpu = backend == "cpu" and not self._xla_defaults
        asked = _SMALL_OPTIONS if small else _CPU_OPTIONS
        options = (asked, os.environ.get("JAXCAL_XLA_DEFAULTS")) if cpu else None
        text = repr((self.__module__, self.__qualname__, dyn_tree, specs, statics, options))
        # an address in a repr (an object without a stable repr) would never hit: no disk
        if " at 0x" in text:
            return None, None
        digest = hashlib.sha256((_compilation_cache.fingerprint(backend) + text).encode())
        disk_key = digest.hexdigest()
        entry = _compilation_cache.load(disk_key)
        if entry is not None:
            if backend == "cpu" and b"lapack_" in entry[0] and not _init_lapack():
                return disk_key, None  # compiled (and lowered) anew: JAX sets them up
            try:
                return disk_key, serialize_executable.deserialize_and_load(
                    entry[0], dyn_tree, entry[1]
                )
            except Exception:  # stale or damaged: compiled anew by the caller
                pass
        return disk_key, None

    def _compile(self, disk_key: str | None, small: bool, args: tuple, kwargs: dict) -> Any:
        """Trace and compile a program, and store it under ``disk_key``."""
        hits = getattr(_jax_cache_hits, "n", 0)
        compiled = self._get(small=small).lower(*args, **kwargs).compile()
        if disk_key is None or getattr(_jax_cache_hits, "n", 0) != hits:
            return compiled  # JAX loaded it from its own cache: not serializable in full
        try:
            executable, _, out_tree = serialize_executable.serialize(compiled)
        except Exception:  # a program XLA cannot serialize: keep it in memory only
            return compiled
        _compilation_cache.store(disk_key, executable, out_tree)
        return compiled

    def _cache_size(self) -> int:
        """Programs compiled or loaded by this function in this process."""
        return len(self._programs) + sum(j._cache_size() for j in self._jitted.values())

    def __getattr__(self, name: str) -> Any:  # lower, trace, eval_shape...
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._get(), name)

    def __get__(self, obj: Any, objtype: Any = None) -> Any:  # usable as a method
        return self if obj is None else functools.partial(self, obj)


def jit(fun: Callable | None = None, **kwargs: Any) -> Any:
    """``jax.jit(fun, **kwargs)`` with jaxcal's compiler options and program cache (module
    docstring). Usable as ``@jit``, ``@functools.partial(jit, static_argnames=...)`` or
    ``jit(f, ...)``; ``xla_defaults=True`` keeps XLA's default compiler options,
    ``optimize=True`` LLVM's optimisation passes at every input size."""
    if fun is None:
        return functools.partial(jit, **kwargs)
    return _Jit(fun, kwargs)
