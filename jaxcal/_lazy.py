"""Lazy re-exports for subpackage ``__init__`` modules (keeps imports cheap)."""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable, Callable, list[str]]:
    """Return ``(__getattr__, __dir__, __all__)`` for ``package`` given name -> module.

    A name that maps to the submodule ``f"{package}.{name}"`` exports that submodule."""

    def __getattr__(name: str):
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(exports[name])
        if exports[name] == f"{package}.{name}":
            return module
        return getattr(module, name)

    names = sorted(exports)

    def __dir__() -> list[str]:
        return names

    return __getattr__, __dir__, names
