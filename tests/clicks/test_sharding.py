"""Sharded sufficient statistics (4 CPU devices, ``psum``) equal one device."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

_SCRIPT = textwrap.dedent(
    """
    import jax
    jax.config.update("jax_enable_x64", True)
    import numpy as np
    from jaxcal.clicks import MODELS, RunOptions, example_params, simulate, perplexity

    assert jax.device_count() == 4, jax.devices()
    mesh = jax.make_mesh((4,), ("sessions",))
    for name in ("DCM", "UBM", "CCM"):  # closed form, rank-pair EM, chain EM
        truth = example_params(name, n_queries=3, key=jax.random.key(0))
        log = simulate(name, truth, 1001, key=jax.random.key(0))
        # 1001 rows (not a multiple of 4: exercises the zero-weight padding rows)
        one = MODELS[name]().fit(log, max_iter=10, run=RunOptions(dedup=False))
        four = MODELS[name]().fit(log, max_iter=10, run=RunOptions(dedup=False, mesh=mesh))
        assert int(one.n_iter) == int(four.n_iter), name
        for k in one.params:
            np.testing.assert_allclose(four.params[k], one.params[k], rtol=1e-10, atol=1e-13)
        np.testing.assert_allclose(
            four.predict_marginal(log), one.predict_marginal(log), rtol=1e-10, atol=1e-13
        )
    print("SHARDED-OK")
    """
)


def test_sharded_fit_equals_single_device():
    env = dict(os.environ)
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    env["JAX_PLATFORMS"] = "cpu"
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "SHARDED-OK" in out.stdout
