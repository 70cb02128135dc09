"""jaxcal's cache of compiled programs on disk, so that a second run compiles nothing.

JAX's own persistent compilation cache skips XLA's compile, but a call still traces and
lowers its program first (0.2-0.5 s for a calibrator's solver) to compute the cache key.
jaxcal keeps its own cache of its own programs instead: an entry is the serialized XLA
executable of one jitted jaxcal function for one set of static arguments and input shapes
in one tier of compiler options (``jaxcal._jit``: a program promoted to optimised options
is stored once more, and a later process loads that entry first), stored under a key that
also covers everything that could change the program (jaxcal's source, the JAX / jaxlib
versions, the backend and its devices, the CPU, JAX's configuration). A hit loads the
executable in a few milliseconds, with no tracing.

Where: ``$JAXCAL_COMPILATION_CACHE`` if set, else ``$XDG_CACHE_HOME/jaxcal/xla`` (default
``~/.cache/jaxcal/xla``); ``JAXCAL_COMPILATION_CACHE=0`` turns it off. It is on by default
and only ever holds jaxcal's programs: JAX's global settings, and the user's own programs,
are left as they are (a JAX cache the user configured still serves jaxcal's compiles on a
miss, but such a program is not copied into jaxcal's cache: see ``jaxcal._jit``). Entries
are written atomically and read defensively: an unreadable or stale entry is compiled
anew and replaced. Results do not depend on the cache (the same executable).

Like ``__pycache__`` or JAX's own cache, the folder holds compiled code that is loaded and
run: keep it private to the user (it is created with mode 0700).
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import pickle
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

import jax

__all__ = ["CACHE_ENV", "cache_dir", "fingerprint", "load", "source_digest", "store"]

CACHE_ENV = "JAXCAL_COMPILATION_CACHE"
_FORMAT = 2  # bump when the entry layout changes (2: no entries copied from JAX's cache)


def cache_dir() -> Path | None:
    """The cache folder, or ``None`` when the cache is off (``JAXCAL_COMPILATION_CACHE=0``)."""
    value = os.environ.get(CACHE_ENV, "")
    if value == "0":
        return None
    if value:
        return Path(value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "jaxcal" / "xla"


@functools.cache
def source_digest() -> str:
    """Digest of jaxcal's source files (an edited checkout invalidates its entries)."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.suffix in (".py", ".cc") and "__pycache__" not in path.parts:
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


@functools.cache
def _cpu_signature() -> str:
    """The CPU model and instruction-set flags (XLA compiles for the host's features)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.machine() + platform.processor()
    lines = [ln for ln in text.splitlines() if ln.startswith(("model name", "flags", "Features"))]
    return "\n".join(sorted(set(lines)))


def fingerprint(backend: str) -> str:
    """Everything outside a call that can change its compiled program."""
    import jaxlib

    devices = jax.devices(backend)
    parts = [
        str(_FORMAT),
        source_digest(),
        jax.__version__,
        jaxlib.__version__,
        sys.version,
        backend,
        devices[0].client.platform_version,
        devices[0].device_kind,
        str(len(devices)),
        _cpu_signature(),
        repr(sorted((k, v) for k, v in jax.config.values.items() if not _unrelated(k))),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _unrelated(flag: str) -> bool:
    """JAX settings that cannot change a compiled program (logging, caches, tracebacks)."""
    return any(word in flag for word in ("log", "cache", "traceback", "profil", "explain"))


def _path(key: str) -> Path | None:
    folder = cache_dir()
    return None if folder is None else folder / f"{key}.bin"


class _TreeUnpickler(pickle.Unpickler):
    """Unpickles only pytree definitions: JAX's tree types and jaxcal's own classes."""

    _BUILTINS = {"tuple", "list", "dict", "set", "frozenset", "int", "float", "complex"}
    _BUILTINS |= {"str", "bytes", "bool", "slice", "NoneType"}

    def find_class(self, module: str, name: str) -> Any:
        allowed = (
            module.startswith(("jaxcal.", "jaxlib."))
            or module in ("jax._src.tree_util", "jaxcal")
            or (module == "builtins" and name in self._BUILTINS)
        )
        if not allowed:
            raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a cache entry")
        return super().find_class(module, name)


def load(key: str) -> tuple[bytes, Any] | None:
    """``(serialized executable, output tree)`` of an entry, or ``None`` (miss or unreadable)."""
    path = _path(key)
    if path is None:
        return None
    try:
        data = path.read_bytes()
        payload = _TreeUnpickler(io.BytesIO(data)).load()
        executable, out_tree = payload
        if not isinstance(executable, bytes):
            return None
        return executable, out_tree
    except Exception:  # a missing, truncated or foreign file: compile anew
        return None


def store(key: str, executable: bytes, out_tree: Any) -> None:
    """Write an entry atomically (a failure to write leaves the cache as it was)."""
    path = _path(key)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        data = pickle.dumps((executable, out_tree), protocol=pickle.HIGHEST_PROTOCOL)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except OSError:  # read-only or full disk: run without storing
        pass
