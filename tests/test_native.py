"""The loading of the compiled CPU kernels (``jaxcal._native``), ``jaxcal.show_config``, the
handlers' checks of their operands and results, and the PAV kernel on scores closer than
any float64 bucket width.

Oracles: ``importlib.machinery.EXTENSION_SUFFIXES`` (which library file the interpreter
would take), the handlers' documented shapes, and a plain-NumPy stack PAV.
"""

from __future__ import annotations

import dataclasses
import importlib.machinery
import os
import shutil
import warnings

import jax
import numpy as np
import pytest

import jaxcal
from jaxcal import _native
from jaxcal._native import _loader

KERNELS = {kernel.name: kernel for kernel in _native.KERNELS}
EXACT = 1e-12  # float64 block means of the same points


def _never_called() -> bool:
    raise AssertionError("a kernel without a library has no self-test to run")


def _fake(tmp_path, name="fake", self_test=_never_called, targets=()):
    return _loader.Kernel(
        name=name, targets=targets, self_test=self_test, fallback="the test's path", folder=tmp_path
    )


def _require_kernel(name: str):
    kernel = KERNELS[name]
    if not _loader.available(kernel, warn=False):
        if os.environ.get("JAXCAL_REQUIRE_NATIVE") == "1":  # set by .ci/run
            raise RuntimeError(f"the compiled {name} kernel was not built (see setup.py)")
        pytest.skip(f"the compiled {name} kernel is not built here")
    return kernel


# finding the library ----------------------------------------------------------------------


def test_library_is_the_one_with_this_interpreters_suffix(tmp_path):
    """Of several builds, the one whose suffix comes first in EXTENSION_SUFFIXES; a build
    for another Python (another ABI tag) is never taken."""
    suffixes = importlib.machinery.EXTENSION_SUFFIXES
    kernel = _fake(tmp_path)
    (tmp_path / "_fake_cpu.cpython-27-other-platform.so").write_bytes(b"stale")
    (tmp_path / "_fake_cpu.pyd.bak").write_bytes(b"stale")
    assert _loader.library_path(kernel) is None
    for suffix in reversed(suffixes):  # add them from the least preferred on
        (tmp_path / f"_fake_cpu{suffix}").write_bytes(b"x")
        assert _loader.library_path(kernel) == tmp_path / f"_fake_cpu{suffix}"


def test_built_kernels_are_found_by_this_interpreters_suffix():
    for kernel in _native.KERNELS:
        path = _loader.library_path(kernel)
        if path is not None:
            assert path.name.startswith(f"_{kernel.name}_cpu")
            assert any(path.name.endswith(s) for s in importlib.machinery.EXTENSION_SUFFIXES)
            assert kernel.module == f"jaxcal._native._{kernel.name}_cpu"


# the one-time warning -----------------------------------------------------------------------


def test_missing_kernel_warns_once(tmp_path):
    kernel = _fake(tmp_path)
    with pytest.warns(_native.NativeKernelWarning, match="fake kernel .* not built"):
        assert not _loader.available(kernel)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not _loader.available(kernel)  # once per process and kernel
    with pytest.raises(RuntimeError, match="fake kernel is not available"):
        _loader.require(kernel)


def test_turned_off_kernels_do_not_warn(tmp_path, monkeypatch):
    monkeypatch.setenv(_native.ENV, "0")
    kernel = _fake(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not _loader.available(kernel)
        for name in KERNELS:
            assert not getattr(_native, f"{name}_cpu_available")()
    monkeypatch.setenv(_native.ENV, "1")  # turned on again: now it warns
    with pytest.warns(_native.NativeKernelWarning):
        assert not _loader.available(kernel)


def test_unloadable_library_warns(tmp_path):
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    (tmp_path / f"_broken_cpu{suffix}").write_bytes(b"not a shared library")
    kernel = _fake(tmp_path, "broken", targets=(("jaxcal_test_broken", "Nothing"),))
    with pytest.warns(_native.NativeKernelWarning, match="not loadable"):
        assert not _loader.available(kernel)
    assert _loader.status(kernel).registered is False


@pytest.mark.parametrize("result", ["false", "raises"])
def test_kernel_failing_its_self_test_warns_and_is_not_used(tmp_path, result):
    """A real library (the PAV kernel's) under a test name, with a self-test that fails."""
    real = _loader.library_path(_require_kernel("pav"))
    name = f"selftest_{result}"
    shutil.copy(real, tmp_path / f"_{name}_cpu{importlib.machinery.EXTENSION_SUFFIXES[0]}")

    def self_test() -> bool:
        if result == "raises":
            raise ValueError("a wrong answer")
        return False

    kernel = _fake(tmp_path, name, self_test, ((f"jaxcal_test_{name}", "JaxcalPavCpu"),))
    with pytest.warns(_native.NativeKernelWarning, match="fails its self-test"):
        assert not _loader.available(kernel)
    record = _loader.status(kernel)
    assert record.registered and record.self_test is False


def test_kernels_are_loaded_once(tmp_path):
    calls = []

    def self_test() -> bool:
        calls.append(1)
        return True

    real = _loader.library_path(_require_kernel("pav"))
    shutil.copy(real, tmp_path / f"_once_cpu{importlib.machinery.EXTENSION_SUFFIXES[0]}")
    kernel = _fake(tmp_path, "once", self_test, (("jaxcal_test_once", "JaxcalPavCpu"),))
    assert all(_loader.available(kernel) for _ in range(3))
    assert len(calls) == 1


# show_config ----------------------------------------------------------------------------------


def test_show_config_reports_every_kernel():
    import jaxlib

    config = jaxcal.show_config(mode="dicts")
    assert config["jax"]["version"] == jax.__version__
    assert config["jax"]["jaxlib_version"] == jaxlib.__version__
    assert config["jax"]["x64"] == jax.config.jax_enable_x64
    assert config["jax"]["backend"] == jax.default_backend()
    assert config["jaxcal"]["version"] == jaxcal.__version__
    kernels = config["native"]["kernels"]
    assert list(kernels) == ["pav", "enir", "ridge", "venn_abers", "linear_logit"]
    for name, info in kernels.items():
        path = _loader.library_path(KERNELS[name])
        assert info["built"] == (path is not None)
        assert info["path"] == (None if path is None else str(path))
        assert info["turned_off"] is _loader.turned_off()
        if not info["turned_off"]:
            assert info["available"] == _loader.available(KERNELS[name], warn=False)
            assert info["self_test"] == ("passed" if info["available"] else info["self_test"])


def test_show_config_when_turned_off(monkeypatch, capsys):
    monkeypatch.setenv(_native.ENV, "0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config = jaxcal.show_config(mode="dicts")
        assert jaxcal.show_config() is None
    assert config["native"]["turned_off"]
    assert not any(k["available"] for k in config["native"]["kernels"].values())
    assert all(k["turned_off"] for k in config["native"]["kernels"].values())
    out = capsys.readouterr().out
    assert "turned off by JAXCAL_NATIVE=0" in out
    assert all(name in out for name in KERNELS)


def test_show_config_prints(capsys):
    jaxcal.show_config()
    out = capsys.readouterr().out
    assert f"jax {jax.__version__}" in out and "compiled CPU kernels" in out
    for name, kernel in KERNELS.items():
        assert name in out
        path = _loader.library_path(kernel)
        assert str(path) in out if path is not None else kernel.module in out


def test_show_config_rejects_an_unknown_mode():
    with pytest.raises(ValueError, match="mode must be"):
        jaxcal.show_config(mode="json")


# the handlers check their operands and results ---------------------------------------------

_F32 = np.float32
_ROW = np.arange(6, dtype=_F32)
_BOUNDS = (np.full(1, -np.inf, _F32), np.full(1, np.inf, _F32))


def _pav_fitted(out):
    call = jax.ffi.ffi_call("jaxcal_pav_cpu", out)
    return call(_ROW, _ROW, np.ones(6, _F32), np.zeros(1, np.int32), *_BOUNDS, has_group=False)


def _pav_runs(outs):
    return jax.ffi.ffi_call("jaxcal_pav_runs_cpu", outs)(_ROW, _ROW, np.ones(6, _F32))


def _runs_outs(**change):
    row, flags = jax.ShapeDtypeStruct((6,), _F32), jax.ShapeDtypeStruct((6,), np.int32)
    outs = {"run_x": row, "run_w": row, "run_v": row, "start": flags}
    outs["n_runs"] = jax.ShapeDtypeStruct((), np.int32)
    outs.update(change)
    return tuple(outs.values())


def _enir(**change):
    row, count = jax.ShapeDtypeStruct((6,), _F32), jax.ShapeDtypeStruct((), np.int32)
    outs = {"acc": row, "n_models": count, "n_scored": count}
    outs["lam"] = jax.ShapeDtypeStruct((), _F32)
    outs.update(change)
    w = np.ones(6, _F32)
    real = np.ones(6, bool)
    return jax.ffi.ffi_call("jaxcal_enir_cpu", tuple(outs.values()))(
        w, _ROW / 6, w, w, real, _F32(6), _F32(1e-3)
    )


def _near_isotonic(out, n_real=6):
    call = jax.ffi.ffi_call("jaxcal_near_isotonic_cpu", out)
    return call(np.ones(6, _F32), _ROW, np.ones(n_real, bool), _F32(1.0))


def _venn_abers(p1):
    first = np.array([1, 0, 0, 0, 0, 0], bool)
    last = np.array([0, 0, 0, 0, 0, 1], bool)
    p0 = jax.ShapeDtypeStruct((6,), _F32)
    call = jax.ffi.ffi_call("jaxcal_venn_abers_cpu", (p0, p1))
    return call(np.ones(6, _F32), _ROW / 6, np.ones(6, _F32), first, last)


def _linear_logit(theta, info):
    X = np.stack([_ROW, np.ones(6, _F32)], axis=1)
    t = np.array([0, 1, 0, 1, 0, 1], _F32)
    C = np.array([[1.0, 0.0]], _F32)
    call = jax.ffi.ffi_call("jaxcal_linear_logit_cpu", (theta, info))
    return call(X, t, np.ones(6, _F32), C, _F32(0), _F32(1e-9), np.int32(50), intercept=np.int64(1))


def _ridge(out):
    other = np.eye(2, dtype=_F32)
    col, row_start = np.array([0, 1], np.int32), np.array([0, 1, 2], np.int32)
    ones = np.ones(2, _F32)
    call = jax.ffi.ffi_call("jaxcal_ridge_cpu", out)
    return call(other, col, row_start, ones, ones, np.zeros((2, 2), _F32), np.ones(1, _F32))


def _pair_scores(out):
    a = np.eye(3, dtype=_F32)
    ids = np.array([0, 1, 2], np.int32)
    return jax.ffi.ffi_call("jaxcal_pair_scores_cpu", out)(a, a, ids, ids)


def _sds(shape, dtype=_F32):
    return jax.ShapeDtypeStruct(shape, dtype)


# (kernel, call with a wrong result or operand, the error's message)
WRONG = {
    "pav fitted dtype": ("pav", lambda: _pav_fitted(_sds((6,), np.float64)), "fitted values"),
    "pav fitted shape": ("pav", lambda: _pav_fitted(_sds((2, 3))), "fitted values"),
    "pav runs count": ("pav", lambda: _pav_runs(_runs_outs(n_runs=_sds((6,), np.int32))), "n_runs"),
    "pav runs value": ("pav", lambda: _pav_runs(_runs_outs(run_v=_sds((5,)))), "run_value"),
    "pav runs start": (
        "pav",
        lambda: _pav_runs(_runs_outs(start=_sds((6,), np.float32))),
        "block_start|dtype",
    ),
    "enir count": ("enir", lambda: _enir(n_models=_sds((6,), np.int32)), "n_models"),
    "enir lambda": ("enir", lambda: _enir(lam=_sds((6,))), "last lambda"),
    "enir values": ("enir", lambda: _enir(acc=_sds((6,), np.float64)), "averaged values"),
    "near-isotonic": ("enir", lambda: _near_isotonic(_sds((7,))), "fitted values"),
    "near-isotonic real": (
        "enir",
        lambda: _near_isotonic(_sds((6,)), n_real=5),
        "real must be bool",
    ),
    "venn-abers": ("venn_abers", lambda: _venn_abers(_sds((6,), np.float64)), "p1"),
    "linear-logit info": (
        "linear_logit",
        lambda: _linear_logit(_sds((2,)), _sds((6,), np.float64)),
        "info",
    ),
    "linear-logit theta": ("linear_logit", lambda: _linear_logit(_sds((3,)), _sds((6,))), "theta"),
    "ridge": ("ridge", lambda: _ridge(_sds((2, 2), np.int32)), "float32 or float64"),
    "ridge shape": ("ridge", lambda: _ridge(_sds((2, 3))), "other must be"),
    "pair scores": ("pair_scores", lambda: _pair_scores(_sds((4,))), "row and col"),
}


@pytest.mark.parametrize("case", sorted(WRONG))
def test_handlers_reject_results_of_the_wrong_shape_or_dtype(case):
    """An FFI call that declares a result (or passes an operand) the handler does not
    produce gets an InvalidArgument error naming it, not a write past a buffer."""
    name, call, message = WRONG[case]
    _require_kernel("ridge" if name == "pair_scores" else name)
    with pytest.raises(RuntimeError, match=f"(?s)INVALID_ARGUMENT.*({message})"):
        jax.block_until_ready(call())
    with pytest.raises(RuntimeError, match=f"(?s)INVALID_ARGUMENT.*({message})"):
        jax.block_until_ready(jax.jit(call)())


def test_handlers_accept_the_documented_results():
    """The same calls with the documented results run (the checks are not too strict)."""
    for name in ("pav", "enir", "venn_abers", "linear_logit", "ridge"):
        _require_kernel(name)
    jax.block_until_ready(_pav_fitted(_sds((6,))))
    jax.block_until_ready(_pav_runs(_runs_outs()))
    jax.block_until_ready(_enir())
    jax.block_until_ready(_near_isotonic(_sds((6,))))
    jax.block_until_ready(_venn_abers(_sds((6,))))
    jax.block_until_ready(_linear_logit(_sds((2,)), _sds((6,))))
    jax.block_until_ready(_ridge(_sds((2, 2))))
    jax.block_until_ready(_pair_scores(_sds((3,))))


# PAV on scores closer than any bucket width -------------------------------------------------


def _numpy_pav(x, y, w):
    """Stack PAV over the stable score order, tied scores pooled first."""
    order = np.argsort(x, kind="stable")
    xs, ys, ws = x[order], y[order], w[order]
    blocks = []  # [sum w y, sum w, points]
    i = 0
    while i < x.size:
        j = i
        while j < x.size and xs[j] == xs[i]:
            j += 1
        blocks.append([float(ws[i:j] @ ys[i:j]), float(ws[i:j].sum()), j - i])
        while len(blocks) > 1 and blocks[-2][0] * blocks[-1][1] >= blocks[-1][0] * blocks[-2][1]:
            last = blocks.pop()
            blocks[-1] = [a + b for a, b in zip(blocks[-1], last, strict=True)]
        i = j
    fitted = np.concatenate([np.full(c, s / v) for s, v, c in blocks])
    out = np.empty_like(fitted)
    out[order] = fitted
    return out


TINY_SCORES = {
    # subnormal scores, one ulp (5e-324) apart
    "subnormal": np.arange(60) * 5e-324,
    # a range above the smallest normal number whose bucket scale n / range overflows
    "tiny range": np.arange(60) * 5e-309,
    # normal scores whose differences are subnormal
    "offset": 1e-300 + np.arange(60) * 4e-309,
    # both signs around zero, with ties
    "signed": np.repeat(np.arange(-15, 15) * 7e-310, 2),
}


@pytest.mark.parametrize("case", sorted(TINY_SCORES))
def test_pav_kernel_sorts_scores_closer_than_a_bucket_width(case):
    """Float64 scores whose range makes the value-bucket scale infinite (or is subnormal)
    are sorted exactly: the fitted values equal a NumPy PAV's, and the runs are the
    distinct scores in increasing order."""
    _require_kernel("pav")
    rng = np.random.default_rng(len(case))
    x = rng.permutation(TINY_SCORES[case]).astype(np.float64)
    y = rng.uniform(size=x.size)
    w = rng.uniform(0.5, 2.0, size=x.size)
    fitted = jax.jit(_native.pav_fitted_cpu)(x, y, w)
    np.testing.assert_allclose(np.asarray(fitted), _numpy_pav(x, y, w), rtol=0, atol=EXACT)
    run_x, _, run_v, _, n_runs = jax.jit(_native.pav_runs_cpu)(x, y, w)
    distinct = np.unique(x)
    assert int(n_runs) == distinct.size
    np.testing.assert_array_equal(np.asarray(run_x)[: distinct.size], distinct)
    first = np.searchsorted(np.sort(x), distinct)
    expected = np.sort(_numpy_pav(x, y, w))[first]  # fitted values are non-decreasing
    np.testing.assert_allclose(np.asarray(run_v)[: distinct.size], expected, atol=EXACT)


def test_kernel_record_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        KERNELS["pav"].name = "other"
