"""Lossless save / load without pickle: one ``.npz`` file of arrays plus a JSON header.

The header describes the object tree: registered dataclasses (by class name), dicts with
string keys, lists, tuples, JSON scalars and arrays (stored under generated keys, with
their exact dtype). ``np.load(..., allow_pickle=False)`` reads it back. Arrays that were
``jax.Array`` come back as ``jax.Array`` (on the default device), NumPy arrays as NumPy.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["save", "load", "register_serializable"]

_FORMAT = "jaxcal-npz"
_FORMAT_VERSION = 1
_HEADER_KEY = "__jaxcal_header__"
_REGISTRY: dict[str, type] = {}


def register_serializable(cls: type) -> type:
    """Make a dataclass loadable by ``jaxcal.load`` (class names must be unique)."""
    name = cls.__qualname__
    if name in _REGISTRY and _REGISTRY[name] is not cls:
        existing = _REGISTRY[name]
        if (existing.__module__, existing.__qualname__) != (cls.__module__, cls.__qualname__):
            raise ValueError(f"two serializable classes are both named {name!r}")
    _REGISTRY[name] = cls
    return cls


def _encode(obj: Any, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(obj, jax.Array | np.ndarray | np.generic):
        key = f"a{len(arrays)}"
        arr = np.asarray(obj)
        if arr.dtype == object:
            raise TypeError("object arrays cannot be saved without pickle")
        arrays[key] = arr
        return {"array": key, "jax": isinstance(obj, jax.Array)}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        name = type(obj).__qualname__
        if _REGISTRY.get(name) is not type(obj):
            raise TypeError(f"{name} is not registered for saving (use @pytree_dataclass)")
        fields = {f.name: _encode(getattr(obj, f.name), arrays) for f in dataclasses.fields(obj)}
        return {"object": name, "module": type(obj).__module__, "fields": fields}
    if isinstance(obj, dict):
        if not all(isinstance(k, str) for k in obj):
            raise TypeError("only dicts with string keys can be saved")
        return {"dict": {k: _encode(v, arrays) for k, v in obj.items()}}
    if isinstance(obj, tuple | list):
        kind = "tuple" if isinstance(obj, tuple) else "list"
        return {kind: [_encode(v, arrays) for v in obj]}
    if obj is None or isinstance(obj, bool | int | float | str):
        if isinstance(obj, float) and not np.isfinite(obj):
            return {"float": repr(obj)}  # JSON has no inf/nan
        return {"value": obj}
    raise TypeError(f"cannot save a value of type {type(obj).__name__}")


def _import_class(node: dict) -> type | None:
    """A class registers itself when its module is imported: import the jaxcal module the
    file names (never anything outside jaxcal; files without a module name predate it and
    make every library module load once)."""
    module = str(node.get("module", ""))
    if module.startswith("jaxcal."):
        try:
            importlib.import_module(module)
        except ImportError:
            pass
    elif "module" not in node:
        import pkgutil

        import jaxcal

        for info in pkgutil.walk_packages(jaxcal.__path__, "jaxcal."):
            if not any(part in info.name for part in (".cli", ".reproduce", ".plot")):
                importlib.import_module(info.name)
    return _REGISTRY.get(node["object"])


def _decode(node: Any, arrays: Any) -> Any:
    if "array" in node:
        arr = arrays[node["array"]]
        return jnp.asarray(arr) if node["jax"] else np.asarray(arr)
    if "object" in node:
        cls = _REGISTRY.get(node["object"]) or _import_class(node)
        if cls is None:
            raise ValueError(
                f"file holds a {node['object']!r}, which this version of jaxcal does not know"
            )
        kwargs = {k: _decode(v, arrays) for k, v in node["fields"].items()}
        return cls(**kwargs)
    if "dict" in node:
        return {k: _decode(v, arrays) for k, v in node["dict"].items()}
    if "tuple" in node:
        return tuple(_decode(v, arrays) for v in node["tuple"])
    if "list" in node:
        return [_decode(v, arrays) for v in node["list"]]
    if "float" in node:
        return float(node["float"])
    return node["value"]


def save(obj: Any, path: str | os.PathLike) -> None:
    """Save a fitted jaxcal object (any registered dataclass tree) to ``path``.

    The file is a NumPy ``.npz`` archive; ``path`` is used as given (NumPy appends
    ``.npz`` if it is missing, and ``jaxcal.load`` accepts either spelling).
    """
    arrays: dict[str, np.ndarray] = {}
    tree = _encode(obj, arrays)
    from jaxcal import __version__

    header = {"format": _FORMAT, "version": _FORMAT_VERSION, "jaxcal": __version__, "tree": tree}
    np.savez(path, **{_HEADER_KEY: np.array(json.dumps(header))}, **arrays)


def load(path: str | os.PathLike) -> Any:
    """Load an object written by ``save`` (no pickle is ever executed)."""
    path = os.fspath(path)
    if not os.path.exists(path) and os.path.exists(path + ".npz"):
        path += ".npz"
    try:
        with np.load(path, allow_pickle=False) as data:
            if _HEADER_KEY not in data.files:
                raise ValueError(f"{path} is not a jaxcal file (no header)")
            header = json.loads(str(data[_HEADER_KEY]))
            if header.get("format") != _FORMAT:
                raise ValueError(f"{path} is not a jaxcal file (format {header.get('format')!r})")
            if header.get("version", 0) > _FORMAT_VERSION:
                raise ValueError(f"{path} was written by a newer jaxcal; please upgrade")
            arrays = {k: data[k] for k in data.files if k != _HEADER_KEY}
    except (OSError, EOFError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from exc
    return _decode(header["tree"], arrays)
