"""``jaxcal.show_config()``: the versions, backend and settings jaxcal runs with, and the
state of every compiled CPU kernel (built, where, self-test, turned off)."""

from __future__ import annotations

import os
from typing import Any

import jax

from jaxcal import _compilation_cache
from jaxcal._native import _enir, _linear_logit, _pav, _ridge, _venn_abers
from jaxcal._native._loader import ENV, Kernel, available, library_path, load, status, turned_off

__all__ = ["KERNELS", "show_config"]

# every compiled kernel, in the order show_config lists them
KERNELS: tuple[Kernel, ...] = (
    _pav.KERNEL,
    _enir.KERNEL,
    _ridge.KERNEL,
    _venn_abers.KERNEL,
    _linear_logit.KERNEL,
)


def _kernel_info(kernel: Kernel) -> dict[str, Any]:
    off = turned_off()
    if not off:
        load(kernel)  # registers and self-tests (once per process); no warning from here
    record = status(kernel)
    path = record.path if record.registered is not None else library_path(kernel)
    return {
        "module": kernel.module,
        "built": path is not None,
        "path": None if path is None else str(path),
        "loaded": record.registered,
        "self_test": {True: "passed", False: "failed", None: "not run"}[record.self_test],
        "turned_off": off,
        "available": not off and available(kernel, warn=False),
        "targets": [target for target, _ in kernel.targets],
        "error": record.error,
    }


def _config() -> dict[str, Any]:
    import jaxlib

    import jaxcal

    cache = _compilation_cache.cache_dir()
    return {
        "jaxcal": {"version": jaxcal.__version__},
        "jax": {
            "version": jax.__version__,
            "jaxlib_version": jaxlib.__version__,
            "backend": jax.default_backend(),
            "devices": [str(d) for d in jax.devices()],
            "x64": bool(jax.config.jax_enable_x64),
            "compilation_cache_dir": jax.config.jax_compilation_cache_dir,
        },
        "compilation_cache": {
            "enabled": cache is not None,
            "dir": None if cache is None else str(cache),
            "env": _compilation_cache.CACHE_ENV,
        },
        "native": {
            "env": f"{ENV}={os.environ.get(ENV, '')}" if ENV in os.environ else None,
            "turned_off": turned_off(),
            "kernels": {kernel.name: _kernel_info(kernel) for kernel in KERNELS},
        },
    }


def _format(config: dict[str, Any]) -> str:
    jx, cache, native = config["jax"], config["compilation_cache"], config["native"]
    lines = [
        f"jaxcal {config['jaxcal']['version']}",
        f"jax {jx['version']}, jaxlib {jx['jaxlib_version']}",
        f"backend: {jx['backend']} ({', '.join(jx['devices'])})",
        f"x64: {jx['x64']}",
        f"compilation cache ({cache['env']}): "
        + (f"on, {cache['dir']}" if cache["enabled"] else "off"),
        f"JAX's own compilation cache: {jx['compilation_cache_dir'] or 'off'}",
        "compiled CPU kernels"
        + (f" (turned off by {native['env']}):" if native["turned_off"] else ":"),
    ]
    for name, k in native["kernels"].items():
        if k["turned_off"]:
            state = "built, turned off" if k["built"] else "not built, turned off"
        elif k["available"]:
            state = "built, self-test passed"
        elif not k["built"]:
            state = "not built"
        elif not k["loaded"]:
            state = "built, not loadable"
        else:
            state = f"built, self-test {k['self_test']}"
        lines.append(f"  {name:<13}{state}")
        lines.append(f"  {'':<13}{k['path'] or k['module']}")
        if k["error"] and not k["available"] and not k["turned_off"]:
            lines.append(f"  {'':<13}{k['error']}")
    return "\n".join(lines)


def show_config(mode: str = "stdout") -> dict[str, Any] | None:
    """Show the versions, backend and settings jaxcal runs with, and the state of each of
    its compiled CPU kernels, like ``numpy.show_config()``.

    For every kernel (``pav``, ``enir``, ``ridge``, ``venn_abers``, ``linear_logit``): whether
    its shared library was built for this interpreter and where it is, whether it loads and
    passes its self-test (both run here if they have not yet), and whether ``JAXCAL_NATIVE=0``
    turns it off. A kernel that is not available is replaced by jaxcal's portable pure-JAX
    path (the same results, slower on a CPU); the first use of such a kernel issues a
    ``jaxcal._native.NativeKernelWarning``, once per process and kernel.

    Args:
        mode: ``"stdout"`` prints a summary; ``"dicts"`` returns it as nested dicts instead
            (keys ``"jaxcal"``, ``"jax"``, ``"compilation_cache"`` and ``"native"``, whose
            ``"kernels"`` maps each kernel to ``built``, ``path``, ``loaded``, ``self_test``
            (``"passed"`` / ``"failed"`` / ``"not run"``), ``turned_off``, ``available``,
            ``targets`` and ``error``).

    Returns:
        ``None`` with ``mode="stdout"``, the dict with ``mode="dicts"``.

    Raises:
        ValueError: if ``mode`` is neither ``"stdout"`` nor ``"dicts"``.

    Example:
        >>> import jaxcal
        >>> config = jaxcal.show_config(mode="dicts")
        >>> sorted(config["native"]["kernels"])
        ['enir', 'linear_logit', 'pav', 'ridge', 'venn_abers']
    """
    if mode not in ("stdout", "dicts"):
        raise ValueError(f"mode must be 'stdout' or 'dicts'; got {mode!r}.")
    config = _config()
    if mode == "dicts":
        return config
    print(_format(config))
    return None
