"""jaxcal's cache of compiled programs (``jaxcal._jit``, ``jaxcal._compilation_cache``).

Oracles: the same computation without the cache (a plain ``jax.jit``), bit for bit; JAX's
trace events, counted in a second process (a hit must trace nothing); damaged entries.
"""

from __future__ import annotations

import functools
import os
import pickle
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcal import _compilation_cache, _jit

SCRIPT = r"""
import json, sys
import numpy as np
import jax
traces = []
jax.monitoring.register_event_duration_secs_listener(
    lambda name, *a, **k: traces.append(name) if name.endswith("jaxpr_trace_duration") else None
)
import jaxcal
if "--store-jax-hits" in sys.argv:  # as before jaxcal told JAX's cache hits apart
    import jaxcal._jit
    jaxcal._jit._JAX_CACHE_HIT = "no such event"
rng = np.random.default_rng(0)
s = rng.normal(size=900)
y = (rng.random(900) < 1 / (1 + np.exp(-2 * s))).astype(float)
x = np.linspace(-3, 3, 50)
before = len(traces)
p = jaxcal.GaussianCalibration().fit(s, y).predict(x)
q = jaxcal.PlattScaling().fit(s, y, sample_weight=np.full(900, 0.5)).predict(x)
# a LAPACK call (jnp.linalg): a loaded program must find jaxlib's LAPACK kernels set up
from jaxcal._jit import jit
r = jit(lambda a, b: jax.numpy.linalg.solve(a, b))(np.diag([2.0, 4.0, 8.0]), np.ones(3))
jax.block_until_ready((p, q, r))
print(json.dumps({"traces": len(traces) - before, "p": np.asarray(p).tolist(),
                  "q": np.asarray(q).tolist(), "r": np.asarray(r).tolist()}))
"""


def run_script(cache, jax_cache=None, *flags) -> dict:
    import json

    env = {**os.environ, "JAXCAL_COMPILATION_CACHE": str(cache)}
    if jax_cache is not None:  # JAX's own persistent cache on, for every program
        env |= {
            "JAX_COMPILATION_CACHE_DIR": str(jax_cache),
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        }
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, *flags], env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_second_run_loads_every_program_and_traces_nothing(tmp_path):
    cache = tmp_path / "cache"
    off = run_script("0")  # no cache: plain jax.jit
    first = run_script(cache)
    entries = sorted(p.name for p in cache.glob("*.bin"))
    assert len(entries) >= 4  # two solvers (p = 2, 3), the predict programs, the solve
    second = run_script(cache)
    assert second["traces"] == 0 < first["traces"]
    assert sorted(p.name for p in cache.glob("*.bin")) == entries  # nothing new
    # the same executables: identical results, with or without the cache
    assert first["p"] == second["p"] == off["p"]
    assert first["q"] == second["q"] == off["q"]
    assert first["r"] == second["r"] == off["r"] == [0.5, 0.25, 0.125]
    # damaged entries are compiled anew (and replaced), with the same results
    for path in cache.glob("*.bin"):
        path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    third = run_script(cache)
    assert third["traces"] > 0 and third["p"] == off["p"] and third["q"] == off["q"]
    fourth = run_script(cache)
    assert fourth["traces"] == 0 and fourth["p"] == off["p"]


def test_programs_served_by_jax_cache_are_not_stored(tmp_path):
    """An executable that JAX loaded from its own persistent cache serializes without some
    of its kernels ("Function ... not found" when a fresh process runs the copy), so jaxcal
    does not store it: a later run without JAX's cache compiles and gets the same values."""
    fresh = run_script(tmp_path / "first", jax_cache=tmp_path / "jax")  # compiles, fills both
    served = run_script(tmp_path / "second", jax_cache=tmp_path / "jax")  # JAX's cache hits
    assert served["p"] == fresh["p"] and served["q"] == fresh["q"]
    stored = list((tmp_path / "second").glob("*.bin"))
    assert len(stored) < len(list((tmp_path / "first").glob("*.bin")))
    alone = run_script(tmp_path / "second")  # only jaxcal's cache, from the second run
    assert alone["p"] == fresh["p"] and alone["q"] == fresh["q"]
    # entries copied from JAX's cache (as an older jaxcal stored them) load but cannot run:
    # the first call of a loaded program finds out, and the program is compiled anew
    run_script(tmp_path / "copied", tmp_path / "jax", "--store-jax-hits")
    healed = run_script(tmp_path / "copied")
    assert healed["p"] == fresh["p"] and healed["q"] == fresh["q"] and healed["traces"] > 0
    assert run_script(tmp_path / "copied")["traces"] == 0  # the replaced entries load


@pytest.fixture
def cache_on(monkeypatch, tmp_path):
    monkeypatch.setenv("JAXCAL_COMPILATION_CACHE", str(tmp_path / "programs"))
    return tmp_path / "programs"


def test_one_program_per_shape_dtype_and_static_argument(cache_on):
    def scale(x, y, *, k):
        return x * k + y

    f = _jit.jit(scale, static_argnames=("k",))
    plain = jax.jit(scale, static_argnames=("k",))
    x3, x4 = np.arange(3.0), np.arange(4.0)
    np.testing.assert_array_equal(f(x3, 1.0, k=2), plain(x3, 1.0, k=2))
    np.testing.assert_array_equal(f(x3 + 1, 5.0, k=2), plain(x3 + 1, 5.0, k=2))  # same program
    f(x4, 1.0, k=2)  # new shape
    f(x3, 1.0, k=3)  # new static value
    f(x3.astype(np.float32), 1.0, k=2)  # new dtype
    f(jnp.asarray(x3), 1.0, k=2)  # a jax.Array of the same aval: its own (device) program
    assert f._cache_size() == 5
    assert len(list(cache_on.glob("*.bin"))) == 5


def test_nested_calls_trace_into_the_outer_program(cache_on):
    f = _jit.jit(lambda x: jnp.sin(x) * 2)
    out = jax.jit(lambda x: f(x) + 1)(np.arange(3.0))
    np.testing.assert_allclose(out, np.sin(np.arange(3.0)) * 2 + 1, rtol=1e-15)
    grad = jax.grad(lambda x: f(x).sum())(np.arange(3.0))
    np.testing.assert_allclose(grad, 2 * np.cos(np.arange(3.0)), rtol=1e-15)
    assert not list(cache_on.glob("*.bin"))  # nothing compiled on its own


def test_typed_prng_keys_take_jax_jit_path(cache_on):
    f = _jit.jit(lambda k, x: jax.random.uniform(k, x.shape) + x)
    key = jax.random.key(3)
    out = f(key, np.zeros(4))
    np.testing.assert_array_equal(out, jax.random.uniform(key, (4,)))
    assert not list(cache_on.glob("*.bin"))  # not stored (a typed key has no stable spec)


def test_cache_off_is_a_plain_jit(monkeypatch, tmp_path):
    monkeypatch.setenv("JAXCAL_COMPILATION_CACHE", "0")
    assert _compilation_cache.cache_dir() is None
    f = _jit.jit(lambda x: x + 1)
    assert float(f(1.0)) == 2.0
    assert f._cache_size() == 1  # in jax.jit's own cache


def test_cache_location(monkeypatch, tmp_path):
    monkeypatch.setenv("JAXCAL_COMPILATION_CACHE", str(tmp_path / "c"))
    assert _compilation_cache.cache_dir() == tmp_path / "c"
    monkeypatch.delenv("JAXCAL_COMPILATION_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert _compilation_cache.cache_dir() == tmp_path / "xdg" / "jaxcal" / "xla"


def test_entries_unpickle_only_tree_definitions(cache_on):
    _compilation_cache.store("good", b"exe", jax.tree.structure((1, {"a": 2})))
    assert _compilation_cache.load("good") == (b"exe", jax.tree.structure((1, {"a": 2})))
    cache_on.joinpath("evil.bin").write_bytes(pickle.dumps((b"exe", os.system)))
    assert _compilation_cache.load("evil") is None
    assert _compilation_cache.load("missing") is None


def test_fingerprint_follows_jax_configuration():
    before = _compilation_cache.fingerprint("cpu")
    assert _compilation_cache.fingerprint("cpu") == before
    with jax.numpy_rank_promotion("raise"):
        assert _compilation_cache.fingerprint("cpu") != before


def test_cpu_compiler_options(monkeypatch):
    _jit.cpu_compiler_options.cache_clear()
    try:
        assert _jit.cpu_compiler_options() == {"xla_cpu_use_fusion_emitters": False}
        assert _jit.cpu_compiler_options(True) == {
            "xla_cpu_use_fusion_emitters": False,
            "xla_backend_optimization_level": 0,
        }
        _jit.cpu_compiler_options.cache_clear()
        monkeypatch.setenv("JAXCAL_XLA_DEFAULTS", "1")
        assert _jit.cpu_compiler_options() is None
        assert _jit.cpu_compiler_options(True) is None
    finally:
        _jit.cpu_compiler_options.cache_clear()


def test_optimize_keeps_llvm_optimisation_at_every_size(monkeypatch):
    """``jit(..., optimize=True)`` (BBQ's model scores) compiles small inputs with the
    first tier of large ones (LLVM's passes on); the result is the same."""
    monkeypatch.setenv("JAXCAL_COMPILATION_CACHE", "0")
    x = np.linspace(0.0, 3.0, 16)
    f = _jit.jit(lambda x: jnp.sum(jnp.sin(x)), optimize=True)
    plain = _jit.jit(lambda x: jnp.sum(jnp.sin(x)))
    np.testing.assert_allclose(float(f(x)), float(plain(x)), rtol=1e-15)
    assert set(f._jitted) == {(True, "classic")}  # (cpu, tier): LLVM's passes on
    assert set(plain._jitted) == {(True, "classic-o0")}


def test_small_programs_skip_llvm_optimisation_and_give_the_same_bits(monkeypatch):
    """Inputs up to SMALL_PROGRAM_ELEMENTS compile without LLVM's optimisations; the
    linear-logit solver (reductions and a Newton loop, no interpolation that an optimised
    program would fuse into multiply-adds) then returns the same bits."""
    from jaxcal.calibrators.gaussian import GaussianFamily
    from jaxcal.fitting import linear

    monkeypatch.setenv("JAXCAL_COMPILATION_CACHE", "0")
    f = _jit.jit(lambda x: jnp.sum(jnp.sin(x)))
    f(np.zeros(_jit.SMALL_PROGRAM_ELEMENTS))
    f(np.zeros(_jit.SMALL_PROGRAM_ELEMENTS + 1))
    assert set(f._jitted) == {(True, "classic-o0"), (True, "classic")}  # (cpu, tier)

    rng = np.random.default_rng(1)
    n = 5000
    y = (rng.random(n) < 0.3).astype(float)
    s = np.where(y > 0, rng.normal(1, 0.8, n), rng.normal(0, 1.2, n))
    args = (GaussianFamily(), s, y, np.ones(n), 0.0, 100, 1e-10)
    thetas = []
    for small in (True, False):
        solve = jax.jit(
            linear._solve_jit._fun,
            static_argnames=("family", "stride"),
            compiler_options=_jit.cpu_compiler_options(small),
        )
        thetas.append(np.asarray(solve(*args, stride=1)[0]))
    np.testing.assert_array_equal(thetas[0], thetas[1])


EM_SCRIPT = r"""
import json
import numpy as np
import jax
traces = []
jax.monitoring.register_event_duration_secs_listener(
    lambda name, *a, **k: traces.append(name) if name.endswith("jaxpr_trace_duration") else None
)
from jaxcal import clicks
out = {}
for name in ("PBM", "DBN"):
    log = clicks.simulate(
        name, clicks.example_params(name, key=jax.random.key(0)), 300, key=jax.random.key(0)
    )
    before = len(traces)
    fitted = getattr(clicks, name)().fit(log, max_iter=3)
    marginal = np.asarray(fitted.predict_marginal(log))
    out[name] = {"traces": len(traces) - before, "marginal": marginal.tolist()}
print(json.dumps(out))
"""


def test_em_programs_with_step_functions_as_static_arguments_are_stored(tmp_path):
    """The click models' EM programs take their E- and M-step functions as static
    arguments; those are named by module and qualified name, so the programs reach the disk
    and a second process traces nothing, with the same numbers."""
    import json

    env = {**os.environ, "JAXCAL_COMPILATION_CACHE": str(tmp_path)}
    runs = []
    for _ in range(2):
        out = subprocess.run(
            [sys.executable, "-c", EM_SCRIPT], env=env, capture_output=True, text=True,
            timeout=600,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr[-3000:]
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    for name in ("PBM", "DBN"):
        assert runs[0][name]["traces"] > 0 and runs[1][name]["traces"] == 0
        assert runs[0][name]["marginal"] == runs[1][name]["marginal"]


def _local_step(x):
    return x


def test_static_functions_outside_jaxcal_are_not_named():
    """Only functions whose code the cache's fingerprint covers (jaxcal's source digest,
    JAX's and NumPy's versions) are keyed by name; a user's function keeps its address, so
    its programs stay in memory (it could change under the same name)."""
    from jaxcal.clicks import _em

    named = _jit._static_text((("f", _em.ratio),))
    assert "0x" not in named and "jaxcal.clicks._em.ratio" in named
    assert "0x" not in _jit._static_text(functools.partial(jnp.add, 1))
    assert " at 0x" in _jit._static_text(_local_step)  # a test module, not jaxcal
    assert " at 0x" in _jit._static_text(lambda x: x)
