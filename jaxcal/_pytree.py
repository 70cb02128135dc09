"""Frozen dataclasses registered as pytrees, with lossless save / load.

``@pytree_dataclass`` turns a class into a frozen dataclass whose array fields are pytree
leaves (so a fitted calibrator passes through ``jit``, ``vmap`` and ``scan``) and whose
fields declared with ``static_field()`` are static metadata (hashable: ints, floats,
strings, tuples). The class is also registered for ``jaxcal.load``, and gains ``save``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

import jax

from jaxcal._serialization import register_serializable, save

__all__ = ["pytree_dataclass", "static_field"]

T = TypeVar("T")


def static_field(**kwargs: Any) -> Any:
    """A dataclass field that is static pytree metadata (not traced, part of the treedef)."""
    metadata = dict(kwargs.pop("metadata", {}) or {})
    metadata["static"] = True
    return dataclasses.field(metadata=metadata, **kwargs)


def pytree_dataclass(cls: type[T]) -> type[T]:
    """Frozen dataclass + pytree registration + ``save`` / ``jaxcal.load`` support."""
    cls = dataclasses.dataclass(frozen=True)(cls)
    fields = dataclasses.fields(cls)
    meta = [f.name for f in fields if f.metadata.get("static", False)]
    data = [f.name for f in fields if not f.metadata.get("static", False)]
    jax.tree_util.register_dataclass(cls, data_fields=data, meta_fields=meta)
    register_serializable(cls)
    if "save" not in cls.__dict__:

        def _save(self, path) -> None:
            """Write this object to ``path`` (.npz arrays + JSON header; no pickle)."""
            save(self, path)

        cls.save = _save
    return cls


def split_hyperparameters(model: Any) -> tuple[Any, dict[str, float]]:
    """``(static, values)`` of a frozen dataclass of hyperparameters (a score model, a
    family): the model with its real-valued (``float``-annotated) fields
    blanked, a hashable static ``jit`` argument that does not change with their values, and
    those values, to pass as traced arguments (:func:`join_hyperparameters` rebuilds the
    model inside the program). Integer fields (counts, which may fix shapes) stay static."""
    values = {
        f.name: getattr(model, f.name)
        for f in dataclasses.fields(model)
        if f.type in ("float", float) and getattr(model, f.name) is not None
    }
    return dataclasses.replace(model, **dict.fromkeys(values)), values


def join_hyperparameters(static: Any, values: dict) -> Any:
    """The model of :func:`split_hyperparameters` (inside ``jit``: traced field values)."""
    return dataclasses.replace(static, **values)
