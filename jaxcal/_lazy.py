"""Lazy re-exports for subpackage ``__init__`` modules, methods and modules imported on first
use (keeps imports cheap)."""

from __future__ import annotations

import functools
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


class lazy_method:
    """A method whose function lives in a module imported on first use.

    ``fit_bayes = lazy_method("jaxcal.bayes.inference", "fit_bayes")`` in a class body binds
    that function like ``functools.partialmethod(fit_bayes)`` would, but imports its module
    (and NumPyro, about a second) only when the method is first looked up, so that the
    point-estimate calibrators start without it.
    """

    def __init__(self, module: str, name: str):
        self._module, self._name = module, name

    def __set_name__(self, owner: type, attr: str) -> None:
        self.__doc__ = f"``{self._module}.{self._name}`` with this object as its first argument."

    def __get__(self, obj: object, owner: type | None = None) -> Callable:
        fun = getattr(importlib.import_module(self._module), self._name)
        return fun if obj is None else functools.partial(fun, obj)


class lazy_module:
    """A module imported on first attribute access.

    ``numpyro = lazy_module("numpyro")`` at the top of a module that only needs NumPyro in
    its Bayesian methods keeps that module's import free of NumPyro (about a second): the
    score models' point fits never touch it.
    """

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        return getattr(importlib.import_module(self._name), attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"
