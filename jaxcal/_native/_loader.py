"""Finding, registering and self-testing jaxcal's compiled CPU kernels: one generic loader
for every kernel, described by a :class:`Kernel` record.

A kernel is one shared library (``jaxcal/_native/_<name>_cpu<suffix>``, built by
``setup.py``) holding one or more XLA FFI handlers. Looking it up (:func:`available`) goes
through four steps, each done once per process:

1. **find** the library whose file name ends in one of this interpreter's extension suffixes
   (``importlib.machinery.EXTENSION_SUFFIXES``, in their order), so that a build left over
   from another Python version or platform is never picked;
2. **register** its handlers with XLA's CPU backend (``jax.ffi.register_ffi_target``);
3. **self-test** them on a tiny problem with a known answer (a library built against an
   incompatible XLA fails when it first runs);
4. **warn** once (:class:`NativeKernelWarning`) if the kernel is missing or failed, unless
   ``JAXCAL_NATIVE=0`` turned the kernels off on purpose.

A kernel that is not available is never an error: the callers take the portable pure-JAX
path instead, with the same results.
"""

from __future__ import annotations

import ctypes
import dataclasses
import importlib.machinery
import os
import threading
import warnings
from collections.abc import Callable
from pathlib import Path

import jax

__all__ = [
    "ENV",
    "Kernel",
    "KernelStatus",
    "NativeKernelWarning",
    "available",
    "library_path",
    "load",
    "passes_in_thread",
    "register",
    "require",
    "status",
    "turned_off",
]

ENV = "JAXCAL_NATIVE"
_HERE = Path(__file__).resolve().parent


class NativeKernelWarning(UserWarning):
    """A compiled CPU kernel of jaxcal is not built, or is built but fails its self-test;
    jaxcal uses its portable pure-JAX path instead (same results, slower on a CPU).

    Issued once per process and kernel, the first time the kernel is looked up. Rebuild
    with a C++17 compiler (``pip install --force-reinstall --no-deps jaxcal``), see which
    kernels are in place with ``jaxcal.show_config()``, or set ``JAXCAL_NATIVE=0`` to use
    the portable paths without this warning.
    """


@dataclasses.dataclass(frozen=True)
class Kernel:
    """One compiled kernel: a shared library, its FFI handlers and its self-test.

    Attributes:
        name: short name (``"pav"``), also the library's: ``_<name>_cpu<suffix>``.
        targets: ``(FFI target name, exported handler symbol)`` pairs.
        self_test: ``() -> bool``, true when the handlers give a known answer (run in a
            thread of its own by :func:`load`).
        fallback: what is used where the kernel is not available (for error messages).
        folder: where the library lives (this package's folder; tests point elsewhere).
    """

    name: str
    targets: tuple[tuple[str, str], ...]
    self_test: Callable[[], bool]
    fallback: str
    folder: Path = _HERE

    @property
    def module(self) -> str:
        """The extension module name that ``setup.py`` builds."""
        return f"jaxcal._native._{self.name}_cpu"

    def is_available(self) -> bool:
        """Whether the kernel is built, loads, passes its self-test and is not turned off by
        ``JAXCAL_NATIVE=0`` (a missing or failing kernel warns once:
        ``jaxcal._native.NativeKernelWarning``); ``jaxcal._native`` exports it per kernel as
        ``<name>_cpu_available``."""
        return available(self)


@dataclasses.dataclass
class KernelStatus:
    """What this process knows about one kernel (see ``jaxcal.show_config``)."""

    path: Path | None = None
    registered: bool | None = None  # None: not tried yet
    error: str | None = None  # why loading or registering failed
    self_test: bool | None = None  # None: not run yet
    warned: bool = False


_STATUS: dict[Kernel, KernelStatus] = {}
_LOCK = threading.RLock()


def status(kernel: Kernel) -> KernelStatus:
    """The process-wide status record of ``kernel`` (created on first use)."""
    with _LOCK:
        return _STATUS.setdefault(kernel, KernelStatus())


def turned_off() -> bool:
    """Whether ``JAXCAL_NATIVE=0`` (or ``false`` / ``no`` / ``off``) turns the kernels off."""
    return os.environ.get(ENV, "1").strip().lower() in ("0", "false", "no", "off")


def library_path(kernel: Kernel) -> Path | None:
    """The kernel's shared library built for this interpreter, or ``None``.

    Only file names that end in one of ``importlib.machinery.EXTENSION_SUFFIXES`` are
    considered, in that order (the interpreter's own ABI tag first): a stale build for
    another Python version or platform in the same folder is ignored.
    """
    stem = f"_{kernel.name}_cpu"
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = kernel.folder / f"{stem}{suffix}"
        if candidate.is_file():
            return candidate
    return None


def register(kernel: Kernel) -> bool:
    """Load the kernel's library and register its handlers with XLA's CPU backend (once per
    process); ``False`` if it is not built or cannot be loaded here."""
    record = status(kernel)
    if record.registered is not None:
        return record.registered
    with _LOCK:
        if record.registered is not None:
            return record.registered
        path = library_path(kernel)
        record.path = path
        if path is None:
            record.error = f"not built: no library for this Python in {kernel.folder}"
            record.registered = False
            return False
        # The CPU backend first: registered with a running backend, a handler whose XLA FFI
        # API version this jaxlib does not accept fails here, where it is caught; registered
        # before, it would fail the backend's start, and all of JAX with it.
        try:
            jax.devices("cpu")
        except RuntimeError:  # no CPU backend (JAX_PLATFORMS): no CPU program to serve
            record.error = "unused: JAX has no CPU backend here"
            record.warned = True  # nothing is missing: no warning
            record.registered = False
            return False
        try:
            library = ctypes.cdll.LoadLibrary(str(path))
            for target, symbol in kernel.targets:
                handler = jax.ffi.pycapsule(getattr(library, symbol))
                jax.ffi.register_ffi_target(target, handler, "cpu")
        except Exception as e:  # another platform's build, a broken file, a missing symbol
            record.error = f"not loadable: {type(e).__name__}: {e}"
            record.registered = False
            return False
        record.registered = True
        return True


def load(kernel: Kernel) -> bool:
    """Registered and passing its self-test (each done once per process)."""
    if not register(kernel):
        return False
    record = status(kernel)
    if record.self_test is None:
        passed = passes_in_thread(kernel.self_test, f"jaxcal-native-{kernel.name}-self-test")
        record.self_test = passed
        if not passed:
            record.error = "built but fails its self-test (built against an incompatible jaxlib?)"
    return record.self_test


def available(kernel: Kernel, *, warn: bool = True) -> bool:
    """Whether ``kernel`` is built, loads, passes its self-test and is not turned off by
    ``JAXCAL_NATIVE=0``.

    The first lookup of a kernel that is missing or failed issues a
    :class:`NativeKernelWarning` (once per process and kernel; never while the kernels are
    turned off, nor with ``warn=False``).
    """
    if turned_off():
        return False
    ok = load(kernel)
    if not ok and warn:
        record = status(kernel)
        with _LOCK:
            first = not record.warned
            record.warned = True
        if first:
            warnings.warn(
                f"jaxcal's compiled {kernel.name} kernel ({kernel.module}) is {record.error}. "
                f"jaxcal uses {kernel.fallback} instead (same results, slower on a CPU); "
                f"jaxcal.show_config() lists the kernels; {ENV}=0 turns them off without "
                "this warning.",
                NativeKernelWarning,
                stacklevel=3,
            )
    return ok


def require(kernel: Kernel) -> None:
    """Raise ``RuntimeError`` unless the kernel's handlers are registered (a wrapper's
    guard: it is then traceable into CPU programs)."""
    if not register(kernel):
        raise RuntimeError(
            f"jaxcal's compiled {kernel.name} kernel is not available ({status(kernel).error}); "
            f"use {kernel.fallback} instead."
        )


def passes_in_thread(check: Callable[[], bool], name: str) -> bool:
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
