"""Build step for jaxcal's optional compiled CPU kernels (metadata is in pyproject.toml).

Each ``jaxcal/_native/<kernel>_cpu.cc`` is an XLA FFI handler that XLA's CPU backend calls
from jitted code (``jax.ffi``). They need a C++17 compiler and the XLA FFI headers that ship
inside jaxlib (``jaxlib/include``; jaxlib is a build requirement, pinned in pyproject.toml to
the oldest supported release so that every newer runtime accepts the handlers).

Every kernel is a shared library of its own and every one is optional: without a compiler
the install still succeeds, and a kernel that fails to compile leaves the others in place;
jaxcal then uses its portable pure-JAX path for what is missing (``jaxcal.show_config()``
says which kernels were built; ``jaxcal/_native/_loader.py`` loads them).
"""

import importlib.util
import os

from setuptools import Extension, setup

# kernel -> its C++ sources (module jaxcal._native._<kernel>_cpu, loaded by ctypes)
KERNELS = {
    "pav": ["pav_cpu.cc"],
    "enir": ["enir_cpu.cc"],
    "ridge": ["ridge_cpu.cc"],
    "venn_abers": ["venn_abers_cpu.cc"],
    "linear_logit": ["linear_logit_cpu.cc"],
}
HEADERS = ["ffi_checks.h", "pav_sort.h", "workspace_lease.h"]


def _xla_ffi_include() -> str:
    spec = importlib.util.find_spec("jaxlib")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("jaxlib (a build requirement) is needed for the XLA FFI headers")
    return os.path.join(list(spec.submodule_search_locations)[0], "include")


def _extension(kernel: str, sources: list[str]) -> Extension:
    return Extension(
        f"jaxcal._native._{kernel}_cpu",
        sources=[f"jaxcal/_native/{name}" for name in sources],
        depends=[f"jaxcal/_native/{name}" for name in HEADERS],
        include_dirs=[_xla_ffi_include()],
        language="c++",
        # the warnings silenced come from the XLA FFI headers
        extra_compile_args=["-std=c++17", "-O3", "-Wno-return-type", "-Wno-attributes"],
        optional=True,
    )


setup(ext_modules=[_extension(kernel, sources) for kernel, sources in KERNELS.items()])
