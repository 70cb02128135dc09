"""Build step for jaxcal's optional compiled CPU kernel (metadata is in pyproject.toml).

``jaxcal/_native/pav_cpu.cc`` is an XLA FFI handler: a sequential weighted PAV that XLA's
CPU backend calls from jitted code (``jax.ffi``). It needs a C++17 compiler and the XLA
FFI headers that ship inside jaxlib (``jaxlib/include``; jaxlib is a build requirement).
The extension is optional: without a compiler the install still succeeds and jaxcal uses
its portable pure-JAX PAV everywhere (see ``jaxcal/_native/__init__.py``).
"""

import importlib.util
import os

from setuptools import Extension, setup


def _xla_ffi_include() -> str:
    spec = importlib.util.find_spec("jaxlib")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("jaxlib (a build requirement) is needed for the XLA FFI headers")
    return os.path.join(list(spec.submodule_search_locations)[0], "include")


setup(
    ext_modules=[
        Extension(
            "jaxcal._native._pav_cpu",
            sources=[
                "jaxcal/_native/pav_cpu.cc",
                "jaxcal/_native/enir_cpu.cc",
                "jaxcal/_native/ridge_cpu.cc",
                "jaxcal/_native/venn_abers_cpu.cc",
                "jaxcal/_native/linear_logit_cpu.cc",
            ],
            depends=["jaxcal/_native/workspace_lease.h"],
            include_dirs=[_xla_ffi_include()],
            language="c++",
            # the warnings silenced come from the XLA FFI headers
            extra_compile_args=["-std=c++17", "-O3", "-Wno-return-type", "-Wno-attributes"],
            optional=True,
        )
    ]
)
