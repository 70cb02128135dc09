"""jaxcal's optional compiled CPU kernels: XLA FFI handlers for weighted PAV, ENIR, per-row
ridge solves, Venn-Abers tables and linear-logit fits.

jaxcal's numerical core is pure JAX and runs under ``jit`` and ``vmap`` on every backend.
On XLA's *CPU* backend some of it is faster as a plain sequential loop: XLA's comparator
sort and the many small steps of a merge tree or a data-dependent ``while_loop`` each pay
the runtime's per-op cost. For these, jaxcal builds (at install, by ``setup.py``) XLA FFI
custom calls that XLA calls inside the compiled program. They are not host callbacks: they
work under ``jit`` and ``vmap`` (every leading batch index is one problem; under
``jax.shard_map`` over those rows each device solves its own), and
``jax.lax.platform_dependent`` or a backend check picks them only for CPU programs.

The kernels, each from its own ``<name>_cpu.cc``:

* ``pav``: :func:`pav_fitted_cpu` and :func:`pav_runs_cpu`, weighted PAV with groups and
  bounds (``isotonic_regression``, ``IsotonicCalibration``, ``SmoothedIsotonic``);
* ``enir``: :func:`enir_fit_cpu` and :func:`near_isotonic_cpu`, ENIR's near-isotonic path
  and BIC average (``ENIR``, ``near_isotonic_regression``);
* ``ridge``: :func:`ridge_rows_cpu` and :func:`pair_scores_cpu`, the per-row ridge systems
  and pair scores of ``CMTRF``'s ALS half-steps;
* ``venn_abers``: :func:`va_tables_cpu`, the Venn-Abers tables (``VennAbers``);
* ``linear_logit``: :func:`linear_logit_cpu`, the exact constrained fit of the parametric
  calibrators.

Each kernel is a shared library of its own (``jaxcal._native._<kernel>_cpu``), built
optionally (a C++17 compiler at install time; one kernel that fails to compile leaves the
others), and carries its own self-test: a small problem against a known answer, run when the
kernel is first looked up (``*_cpu_available()``; its program goes through jaxcal's program
cache, so a later process loads it instead of compiling it). A kernel is used only when its
library was built for this interpreter (the file name ends in one of
``importlib.machinery.EXTENSION_SUFFIXES``), loads and passes its self-test; otherwise
jaxcal takes the portable pure-JAX path, with the same results, and the first lookup issues
a :class:`NativeKernelWarning` (once per process and kernel). ``JAXCAL_NATIVE=0`` in the
environment turns every kernel off (the pure-JAX paths are then used on CPU too, without
the warning). ``jaxcal.show_config()`` lists the kernels and their state.

Every handler checks the shapes and dtypes of its operands and results and returns an
``InvalidArgument`` error (a ``RuntimeError`` from JAX: ``jax.errors.JaxRuntimeError``,
``XlaRuntimeError`` in older releases) for a call that does not match what it assumes. The
kernels are built against the XLA FFI headers of the oldest supported jaxlib (0.5.0, pinned
in pyproject.toml's build requirements), whose API version every later runtime accepts.

The loading machinery is in ``_loader.py`` (one :class:`Kernel` record per kernel, one
generic find / register / self-test / warn), the wrappers in one module per kernel
(``_pav.py``, ``_enir.py``, ``_ridge.py``, ``_venn_abers.py``, ``_linear_logit.py``) and
``show_config`` in ``_config.py``.
"""

from __future__ import annotations

from jaxcal._native import _enir, _linear_logit, _pav, _ridge, _venn_abers
from jaxcal._native._config import KERNELS, show_config
from jaxcal._native._enir import enir_fit_cpu, near_isotonic_cpu
from jaxcal._native._linear_logit import linear_logit_cpu
from jaxcal._native._loader import ENV, Kernel, NativeKernelWarning
from jaxcal._native._pav import pav_fitted_cpu, pav_runs_cpu
from jaxcal._native._ridge import pair_scores_cpu, ridge_rows_cpu
from jaxcal._native._venn_abers import va_tables_cpu

# whether each kernel can be used here (:meth:`Kernel.is_available`; warns once if not)
pav_cpu_available = _pav.KERNEL.is_available
enir_cpu_available = _enir.KERNEL.is_available
ridge_cpu_available = _ridge.KERNEL.is_available
venn_abers_cpu_available = _venn_abers.KERNEL.is_available
linear_logit_cpu_available = _linear_logit.KERNEL.is_available

__all__ = [
    "pav_cpu_available",
    "pav_fitted_cpu",
    "pav_runs_cpu",
    "enir_cpu_available",
    "enir_fit_cpu",
    "near_isotonic_cpu",
    "ridge_cpu_available",
    "ridge_rows_cpu",
    "pair_scores_cpu",
    "venn_abers_cpu_available",
    "va_tables_cpu",
    "linear_logit_cpu_available",
    "linear_logit_cpu",
    "ENV",
    "KERNELS",
    "Kernel",
    "NativeKernelWarning",
    "show_config",
]
