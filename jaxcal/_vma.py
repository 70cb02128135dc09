"""Varying-manual-axes bookkeeping for code that may run inside ``jax.shard_map``.

Inside ``shard_map`` every value carries the set of mesh axes it varies over (its *vma*).
Loop carries and ``cond`` / ``platform_dependent`` branches must agree on it, but values
built from constants (``jnp.arange``, ``jnp.zeros``) or returned by an XLA FFI call vary
over no axis. ``varying_like`` marks them as varying over the axes of the data they are
combined with. Outside ``shard_map`` (or on JAX versions without vma types) it is the
identity.
"""

from __future__ import annotations

import jax


def _vma(a) -> frozenset:
    typeof = getattr(jax, "typeof", None)  # JAX >= 0.6
    if typeof is None:
        return frozenset()
    aval = typeof(a)
    mat = getattr(aval, "manual_axis_type", None)  # JAX >= 0.9
    if mat is not None:
        return frozenset(mat.varying)
    return frozenset(getattr(aval, "vma", ()))  # JAX 0.6 - 0.8


def varying_like(tree, *refs):
    """``tree`` with every leaf marked as varying over the mesh axes that any of ``refs``
    (arrays or pytrees of arrays) varies over."""
    want = frozenset().union(*(_vma(r) for r in jax.tree.leaves(refs)))
    if not want or not hasattr(jax.lax, "pcast"):
        return tree

    def cast(a):
        missing = want - _vma(a)
        return jax.lax.pcast(a, tuple(sorted(missing)), to="varying") if missing else a

    return jax.tree.map(cast, tree)
