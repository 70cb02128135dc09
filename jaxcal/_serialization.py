"""Lossless save / load without pickle: one ``.npz`` file of arrays plus a JSON header.

The header describes the object tree: registered dataclasses (by class name and module),
dicts with string keys, lists, tuples, JSON scalars and arrays (stored under generated
keys, with their exact dtype, shape and whether every value was finite). Arrays that were
``jax.Array`` come back as ``jax.Array`` (on the default device), NumPy arrays as NumPy.

``load`` checks a file completely before building anything, and turns every kind of
damage into one ``ValueError`` that names the file and what is wrong: it never unpickles,
never imports a module outside jaxcal, and reads an array only after checking that the
size its ``.npy`` header declares is the size stored in the archive (so a damaged header
cannot make it allocate memory the file does not hold).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import pkgutil
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import jaxcal
from jaxcal import __version__
from jaxcal._archive import NUMERIC_KINDS, NpzArchive

__all__ = ["save", "load", "register_serializable"]

_FORMAT = "jaxcal-npz"
_FORMAT_VERSION = 1
_HEADER_KEY = "__jaxcal_header__"
_REGISTRY: dict[str, type] = {}
#: deepest nesting of the object tree that ``load`` accepts (real trees are < 10 deep)
_MAX_DEPTH = 64
_NODE_KINDS = ("array", "object", "dict", "tuple", "list", "float", "value")
#: dtype kinds of arrays that ``load`` accepts: bool, signed / unsigned int, float, complex;
#: NumPy arrays outside the fields a class declares as arrays may also hold text
_TEXT_KINDS = "US"
#: annotations of dataclass fields that hold arrays (checked by ``load``)
_ARRAY_ANNOTATIONS = {"jax.Array", "jnp.ndarray", "np.ndarray", "numpy.ndarray", "Array"}


def register_serializable(cls: type) -> type:
    """Make a dataclass loadable by ``jaxcal.load`` (class names must be unique).

    A registered class may define ``_check_loaded(self)``, raising ``ValueError`` when the
    values of a loaded object do not fit together (e.g. knots of different lengths);
    ``jaxcal.load`` calls it on every object it rebuilds and adds the file name.
    """
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
        node = {"array": key, "jax": isinstance(obj, jax.Array)}
        node.update(dtype=arr.dtype.str, shape=list(arr.shape))
        if arr.dtype.kind in "fc":
            node["finite"] = bool(np.isfinite(arr).all())
        return node
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


def save(obj: Any, path: str | os.PathLike) -> None:
    """Save a fitted jaxcal object (any registered dataclass tree) to ``path``.

    The file is a NumPy ``.npz`` archive; ``path`` is used as given (NumPy appends
    ``.npz`` if it is missing, and ``jaxcal.load`` accepts either spelling).

    Example:
        >>> import jaxcal, numpy as np
        >>> s, y = np.array([0.1, 0.4, 0.6, 0.9]), np.array([0, 1, 0, 1])
        >>> fitted = jaxcal.PlattScaling().fit(s, y)
        >>> jaxcal.save(fitted, "platt.npz")
        >>> loaded = jaxcal.load("platt.npz")
        >>> type(loaded).__name__, bool(np.array_equal(loaded.predict(s), fitted.predict(s)))
        ('FittedPlatt', True)
    """
    arrays: dict[str, np.ndarray] = {}
    tree = _encode(obj, arrays)
    header = {"format": _FORMAT, "version": _FORMAT_VERSION, "jaxcal": __version__, "tree": tree}
    np.savez(path, **{_HEADER_KEY: np.array(json.dumps(header))}, **arrays)


# ---------------------------------------------------------------------------- load
def _jaxcal_source_modules(until: str) -> list[tuple[str, Exception]]:
    """Import the pure-Python modules of jaxcal one by one until the class ``until`` is
    registered (files saved before the header named the module of each class); returns
    the modules whose import failed, with the error."""
    failed = []
    for info in pkgutil.walk_packages(jaxcal.__path__, "jaxcal."):
        if info.ispkg or any(part in info.name for part in (".cli", ".reproduce", ".plot")):
            continue
        spec = info.module_finder.find_spec(info.name, None)
        if spec is None or not str(spec.origin).endswith(".py"):
            continue  # compiled extensions (the FFI kernels) are not Python modules
        try:
            importlib.import_module(info.name)
        except ImportError as exc:  # reported if the class is then missing
            failed.append((info.name, exc))
        if until in _REGISTRY:
            break
    return failed


def _is_jaxcal_module(module: str) -> bool:
    parts = module.split(".")
    return (
        parts[0] == "jaxcal"
        and all(p.isidentifier() for p in parts)
        and not any(p.startswith("__") and p.endswith("__") for p in parts)
    )


class _Loader:
    """Checks a header tree (structure, classes, fields) and rebuilds it from arrays."""

    def __init__(self, path: str, arrays: set[str]):
        self.path = path
        self.available = arrays
        self.refs: dict[str, dict] = {}  # array key -> its node
        self.classes: dict[tuple[str, Any], type] = {}  # (name, module) -> class

    def fail(self, where: str, what: str) -> ValueError:
        return ValueError(f"{self.path}: {what} (at {where} in the header).")

    # ------------------------------------------------------------------ checking
    def check(self, node: Any, where: str, depth: int = 0) -> None:
        if depth > _MAX_DEPTH:
            raise self.fail(where, f"the object tree is nested deeper than {_MAX_DEPTH} levels")
        if not isinstance(node, dict):
            raise self.fail(where, f"a node must be a JSON object; got {type(node).__name__}")
        kinds = [k for k in _NODE_KINDS if k in node]
        if len(kinds) != 1:
            raise self.fail(
                where, f"a node must have exactly one of the keys {_NODE_KINDS}; got {list(node)}"
            )
        kind = kinds[0]
        getattr(self, f"_check_{kind}")(node, where, depth)

    def _check_array(self, node: dict, where: str, depth: int) -> None:
        key = node["array"]
        if not isinstance(key, str) or key == _HEADER_KEY:
            raise self.fail(where, f"an array reference must be a key; got {key!r}")
        if key not in self.available:
            raise self.fail(where, f"the header refers to array {key!r}, which the file lacks")
        if not isinstance(node.get("jax", False), bool):
            raise self.fail(where, f"'jax' must be true or false; got {node['jax']!r}")
        if "shape" in node and not (
            isinstance(node["shape"], list)
            and all(type(d) is int and d >= 0 for d in node["shape"])
        ):
            raise self.fail(where, f"'shape' must be a list of sizes; got {node['shape']!r}")
        if "dtype" in node and not _is_dtype(node["dtype"]):
            raise self.fail(where, f"'dtype' is not a NumPy dtype: {node['dtype']!r}")
        if not isinstance(node.get("finite", True), bool):
            raise self.fail(where, f"'finite' must be true or false; got {node['finite']!r}")
        # JAX arrays are numeric; NumPy arrays may hold text (a class's array fields: below)
        numeric = node.get("jax", False)
        self.refs[key] = dict(node, where=where, numeric=numeric)

    def _check_object(self, node: dict, where: str, depth: int) -> None:
        name = node["object"]
        if not isinstance(name, str):
            raise self.fail(where, f"a class name must be a string; got {name!r}")
        cls = self.resolve(name, node.get("module"), where)
        fields = node.get("fields")
        if not isinstance(fields, dict):
            raise self.fail(where, f"{name} needs a 'fields' object; got {fields!r}")
        declared = {f.name: f for f in dataclasses.fields(cls) if f.init}
        unknown = sorted(set(fields) - set(declared))
        if unknown:
            raise self.fail(where, f"{name} has no fields {unknown}")
        missing = sorted(
            k
            for k, f in declared.items()
            if k not in fields
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        )
        if missing:
            raise self.fail(where, f"{name} lacks the fields {missing}")
        for k, v in fields.items():
            self.check(v, f"{where}.{k}", depth + 1)
            self._check_field_type(cls, declared[k], v, f"{where}.{k}")

    def _check_field_type(self, cls: type, field: dataclasses.Field, node: dict, where) -> None:
        annotation = field.type
        if not isinstance(annotation, str):
            annotation = getattr(annotation, "__name__", "")
        if annotation in _ARRAY_ANNOTATIONS:
            if "value" in node:
                ok = node["value"] is None or isinstance(node["value"], int | float)
            else:
                ok = "array" in node or "float" in node
            if "array" in node:
                self.refs[node["array"]]["numeric"] = True
            if not ok:
                raise self.fail(
                    where,
                    f"{cls.__qualname__}.{field.name} holds an array; the file gives "
                    f"{_describe(node)}",
                )
        elif annotation == "str" and not (
            "value" in node and (node["value"] is None or isinstance(node["value"], str))
        ):
            raise self.fail(
                where,
                f"{cls.__qualname__}.{field.name} is a string; the file gives {_describe(node)}",
            )

    def _check_dict(self, node: dict, where: str, depth: int) -> None:
        items = node["dict"]
        if not isinstance(items, dict):
            raise self.fail(where, f"'dict' must hold a JSON object; got {_describe(node)}")
        for k, v in items.items():
            self.check(v, f"{where}[{k!r}]", depth + 1)

    def _check_tuple(self, node: dict, where: str, depth: int, kind: str = "tuple") -> None:
        items = node[kind]
        if not isinstance(items, list):
            raise self.fail(where, f"'{kind}' must hold a JSON list; got {type(items).__name__}")
        for i, v in enumerate(items):
            self.check(v, f"{where}[{i}]", depth + 1)

    def _check_list(self, node: dict, where: str, depth: int) -> None:
        self._check_tuple(node, where, depth, "list")

    def _check_float(self, node: dict, where: str, depth: int) -> None:
        text = node["float"]
        if not (isinstance(text, str) and _is_float(text)):
            raise self.fail(where, f"'float' must hold a number as text; got {text!r}")

    def _check_value(self, node: dict, where: str, depth: int) -> None:
        value = node["value"]
        if not (value is None or isinstance(value, bool | int | float | str)):
            raise self.fail(where, f"'value' must be a JSON scalar; got {type(value).__name__}")

    def resolve(self, name: str, module: Any, where: str) -> type:
        """The registered class ``name``, which must be defined in ``module``. Only
        jaxcal modules are ever imported; classes defined elsewhere load when their
        module was imported before ``load``."""
        key = (name, module if isinstance(module, str) or module is None else repr(module))
        if key not in self.classes:
            self.classes[key] = self._resolve(name, module, where)
        return self.classes[key]

    def _resolve(self, name: str, module: Any, where: str) -> type:
        cls = _REGISTRY.get(name)
        if module is None:  # files saved before the header named the module
            failed: list[tuple[str, Exception]] = []
            if cls is None:
                failed = _jaxcal_source_modules(until=name)
                cls = _REGISTRY.get(name)
            if cls is None:
                hint = "".join(f"; importing {m} failed: {e}" for m, e in failed)
                raise self.fail(where, f"this version of jaxcal has no class {name!r}{hint}")
            return cls
        if not isinstance(module, str):
            raise self.fail(where, f"a module name must be a string; got {module!r}")
        if cls is not None and cls.__module__ == module:
            return cls
        if not _is_jaxcal_module(module):
            registered = f" (the registered {name} is from {cls.__module__})" if cls else ""
            raise self.fail(
                where,
                f"the file holds a {name} from module {module!r}{registered}; jaxcal.load "
                "imports only jaxcal modules: import the module that defines the class first",
            )
        try:
            imported = importlib.import_module(module)
        except ImportError as exc:
            missing = getattr(exc, "name", None) or ""
            if isinstance(exc, ModuleNotFoundError) and module.startswith(missing):
                raise self.fail(
                    where, f"this version of jaxcal has no module {module!r} (for {name})"
                ) from None
            raise ImportError(
                f"loading {self.path} needs {module} (for {name}), whose import failed: {exc}"
            ) from exc
        cls = _REGISTRY.get(name)
        if cls is None or (
            cls.__module__ != module and getattr(imported, name.split(".")[-1], None) is not cls
        ):
            raise self.fail(where, f"module {module} defines no serializable class {name!r}")
        return cls

    def check_array(self, key: str, arr: np.ndarray) -> None:
        node = self.refs[key]
        where = node["where"]
        if "dtype" in node and np.dtype(node["dtype"]) != arr.dtype:
            raise self.fail(
                where, f"array {key!r} has dtype {arr.dtype}; the header says {node['dtype']}"
            )
        if "shape" in node and list(arr.shape) != node["shape"]:
            raise self.fail(
                where,
                f"array {key!r} has shape {arr.shape}; the header says {tuple(node['shape'])}",
            )
        if node.get("finite", False) and not np.isfinite(arr).all():
            raise self.fail(
                where,
                f"array {key!r} holds {int((~np.isfinite(arr)).sum())} NaN or infinite values; "
                "the file was saved with finite values only",
            )

    # ------------------------------------------------------------------ building
    def build(self, node: dict, arrays: dict[str, np.ndarray], where: str) -> Any:
        if "array" in node:
            arr = arrays[node["array"]]
            return jnp.asarray(arr) if node.get("jax", False) else arr
        if "object" in node:
            cls = self.resolve(node["object"], node.get("module"), where)
            kwargs = {k: self.build(v, arrays, f"{where}.{k}") for k, v in node["fields"].items()}
            try:
                obj = cls(**kwargs)
                check = getattr(obj, "_check_loaded", None)
                if check is not None:
                    check()
            except (TypeError, ValueError) as exc:
                raise self.fail(where, f"cannot rebuild {node['object']}: {exc}") from None
            return obj
        if "dict" in node:
            return {k: self.build(v, arrays, f"{where}[{k!r}]") for k, v in node["dict"].items()}
        if "tuple" in node or "list" in node:
            kind = "tuple" if "tuple" in node else "list"
            items = [self.build(v, arrays, f"{where}[{i}]") for i, v in enumerate(node[kind])]
            return tuple(items) if kind == "tuple" else items
        if "float" in node:
            return float(node["float"])
        return node["value"]


def _is_dtype(text: Any) -> bool:
    if not isinstance(text, str):
        return False
    try:
        np.dtype(text)
    except TypeError:
        return False
    return True


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _describe(node: dict) -> str:
    if "value" in node:
        return f"the value {node['value']!r}"
    return f"a {next(iter(node), 'node')}"


def _read_header(archive: NpzArchive) -> dict:
    path = archive.path
    raw = archive.read(_HEADER_KEY, kinds=NUMERIC_KINDS + _TEXT_KINDS)  # checked below
    if raw.shape != () or raw.dtype.kind != "U":
        raise ValueError(
            f"{path}: the header must be one string; got an array of shape {raw.shape} and "
            f"dtype {raw.dtype}."
        )
    try:
        header = json.loads(str(raw))
    except RecursionError:
        raise ValueError(f"{path}: the header is nested too deeply to be a jaxcal file.") from None
    except ValueError as exc:  # json.JSONDecodeError, or an integer of > 4300 digits
        raise ValueError(f"{path}: the header is not valid JSON: {exc}") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: the header must be a JSON object; got {type(header).__name__}.")
    if header.get("format") != _FORMAT:
        raise ValueError(f"{path} is not a jaxcal file (format {header.get('format')!r})")
    version = header.get("version")
    if type(version) is not int or version < 1:
        raise ValueError(
            f"{path}: the header's version must be a positive integer; got {version!r}."
        )
    if version > _FORMAT_VERSION:
        raise ValueError(f"{path} was written by a newer jaxcal; please upgrade")
    if "tree" not in header:
        raise ValueError(f"{path}: the header has no 'tree' (the saved object).")
    return header


def load(path: str | os.PathLike) -> Any:
    """Load an object written by ``save`` (no pickle is ever executed).

    The whole file is checked before anything is built: the archive, the JSON header
    (format, version, the object tree), every class (registered, and defined in the
    jaxcal module the header names; only jaxcal modules are imported), the fields of each
    object (no unknown ones, none of the required ones missing, arrays where the class
    declares arrays), and every array (never pickled objects; a numeric dtype, except
    for text in NumPy arrays outside the fields a class declares as arrays; the size
    declared by its ``.npy`` header equal to the size stored, before it is read; the
    dtype and shape recorded in the header; finite values where the saved ones were).

    Raises:
        ValueError: naming the file and what is wrong, for a missing file, anything that is
            not a jaxcal file, and every kind of damage above.
        ImportError: when a jaxcal module the file needs exists but cannot be imported
            (e.g. a missing optional dependency).

    Example:
        >>> import jaxcal, numpy as np
        >>> from jaxcal.scoremodels import GaussianScoreModel
        >>> params = GaussianScoreModel().fit(np.array([0.2, 0.6, 1.1, 1.9]), [0, 0, 1, 1])
        >>> jaxcal.save(params, "gaussian_params")  # NumPy appends .npz
        >>> jaxcal.load("gaussian_params") == params  # either spelling of the path
        True
        >>> jaxcal.load("missing.npz")
        Traceback (most recent call last):
        ...
        ValueError: cannot read missing.npz: no such file.
    """
    path = os.fspath(path)
    if not os.path.exists(path) and os.path.exists(path + ".npz"):
        path += ".npz"
    if not os.path.isfile(path):
        raise ValueError(f"cannot read {path}: no such file.")
    with NpzArchive(path) as archive:
        if _HEADER_KEY not in archive.members:
            raise ValueError(f"{path} is not a jaxcal file (no header)")
        header = _read_header(archive)
        loader = _Loader(path, set(archive.members) - {_HEADER_KEY})
        loader.check(header["tree"], "tree")
        unused = sorted(loader.available - set(loader.refs))
        if unused:
            raise ValueError(f"{path}: arrays {unused} are not part of the saved object.")
        arrays = {}
        for key in sorted(loader.refs):
            numeric = loader.refs[key]["numeric"]
            arrays[key] = archive.read(key, kinds=NUMERIC_KINDS + ("" if numeric else _TEXT_KINDS))
            loader.check_array(key, arrays[key])
    return loader.build(header["tree"], arrays, "tree")
