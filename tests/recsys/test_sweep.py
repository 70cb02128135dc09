"""``sweep`` (one vmapped program over replicates / hyperparameters / padded ranks) equals the
K models trained one by one with ``fit``; sharded over 4 host devices it equals one device."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from jaxcal.recsys import BPRMF, CML, NCF, UBPR, WRMF, LightGCN, sweep

SWEEP_TOL = 1e-10  # float64: same arithmetic, vmapped vs not (summation order may differ)


def _train():
    rng = np.random.default_rng(0)
    train = rng.uniform(size=(15, 20)) < 0.25
    train[:, 0] = True
    return train


def _assert_sweep_equals_loop(model, grid, fit_kwargs=None):
    fit_kwargs = fit_kwargs or {}
    train, key = _train(), jax.random.key(42)
    result = sweep(model, train, key=key, grid=grid, **fit_kwargs)
    assert len(result) == int(np.prod([len(v) for v in grid.values()]))
    for k, config in enumerate(result.configs):
        replicate = config.pop("replicate", None)
        if "rank" in config:
            config["rank"] = int(config["rank"])
        key_k = key if replicate is None else jax.random.fold_in(key, replicate)
        single = dataclasses.replace(model, **config).fit(train, key=key_k, **fit_kwargs)
        swept = result.select(k)
        for a, b in zip(jax.tree.leaves(swept), jax.tree.leaves(single), strict=True):
            if a.shape != b.shape:  # rank-padded factors: extra columns exactly zero
                d = b.shape[-1]
                assert np.all(np.asarray(a)[..., d:] == 0.0)
                a = np.asarray(a)[..., :d]
            np.testing.assert_allclose(a, b, rtol=SWEEP_TOL, atol=SWEEP_TOL)
        users, items = np.arange(15), np.arange(15) % 20
        np.testing.assert_allclose(
            result.predict(users, items)[k], single.predict(users, items), rtol=0, atol=SWEEP_TOL
        )
    return result


def test_bprmf_sweep_over_replicate_learning_rate_l2_and_padded_rank_equals_loop():
    model = BPRMF(rank=4, n_steps=25, batch_size=16, learning_rate=0.05)
    grid = {"replicate": [0, 1], "learning_rate": [0.02, 0.1], "l2": [0.0, 0.05], "rank": [2, 4]}
    result = _assert_sweep_equals_loop(model, grid)
    assert result.names == ("replicate", "learning_rate", "l2", "rank")
    # different configurations really differ
    scores = np.asarray(result.predict(np.arange(5), np.arange(5)))
    assert np.unique(scores.round(8), axis=0).shape[0] == len(result)


def test_wrmf_sweep_over_l2_alpha_and_padded_rank_equals_loop():
    result = _assert_sweep_equals_loop(
        WRMF(rank=3, n_steps=4), {"l2": [0.1, 1.0], "alpha": [0.0, 5.0], "rank": [2, 3]}
    )
    # each ALS half-step is an exact minimisation: the objective never increases
    losses = np.asarray(result.models.train_loss)
    assert np.all(np.diff(losses, axis=1) <= 1e-9 * np.abs(losses[:, 1:]))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("model", "grid", "fit_kwargs"),
    [
        (CML(rank=3, n_steps=20, batch_size=16), {"margin": [0.2, 1.0], "rank": [2, 3]}, {}),
        (
            UBPR(rank=3, n_steps=20, batch_size=16),
            {"replicate": [0, 3], "l2": [0.0, 0.1]},
            {"propensity": np.linspace(0.2, 1.0, 20)},
        ),
        (
            LightGCN(rank=3, n_steps=15, batch_size=16, n_layers=2),
            {"learning_rate": [0.01, 0.1]},
            {},
        ),
        (
            NCF(rank=3, hidden=(4,), n_steps=15, batch_size=8, n_negatives=2),
            {"replicate": [0, 1], "learning_rate": [0.01, 0.05]},
            {},
        ),
    ],
    ids=["CML", "UBPR", "LightGCN", "NCF"],
)
def test_other_models_sweep_equals_loop(model, grid, fit_kwargs):
    _assert_sweep_equals_loop(model, grid, fit_kwargs)


_SHARDED = textwrap.dedent(
    """
    import jax, numpy as np
    jax.config.update("jax_enable_x64", True)
    from jaxcal.recsys import BPRMF, sweep
    from jaxcal.metrics.ranking import auc, ndcg_at_k
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    assert len(jax.devices()) == 4, jax.devices()
    rng = np.random.default_rng(0)
    train = rng.uniform(size=(16, 20)) < 0.25
    train[:, 0] = True
    model = BPRMF(rank=3, n_steps=20, batch_size=16)
    grid = {"replicate": [0, 1, 2], "learning_rate": [0.02, 0.1]}  # K = 6: 8 on 4 devices
    one = sweep(model, train, key=jax.random.key(0), grid=grid)
    many = sweep(model, train, key=jax.random.key(0), grid=grid, devices=jax.devices())
    assert len(many) == 6
    assert len(many.models.user_factors.sharding.device_set) == 4
    for a, b in zip(jax.tree.leaves(one.models), jax.tree.leaves(many.models), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-12)
    # ranking metrics on a score matrix sharded over the user axis equal the host result
    scores = np.asarray(one.select(0).predict_all())
    labels = (rng.uniform(size=scores.shape) < 0.3).astype(float)
    mesh = Mesh(np.asarray(jax.devices()), ("users",))
    sharded = jax.device_put(scores, NamedSharding(mesh, PartitionSpec("users")))
    for metric in (lambda s: auc(s, labels), lambda s: ndcg_at_k(s, labels, k=5)):
        assert abs(float(metric(sharded)) - float(metric(scores))) < 1e-12
    print("OK")
    """
)


def test_sharded_sweep_equals_single_device():
    env = dict(os.environ)
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    env["JAX_PLATFORMS"] = "cpu"
    out = subprocess.run(
        [sys.executable, "-c", _SHARDED], env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("OK")


def test_bad_grids_raise():
    train = _train()
    key = jax.random.key(0)
    model = BPRMF(rank=2, n_steps=2, batch_size=4)
    with pytest.raises(ValueError, match="cannot sweep 'margin'"):
        sweep(model, train, key=key, grid={"margin": [0.1]})
    with pytest.raises(ValueError, match="cannot sweep 'rank'"):
        sweep(NCF(rank=2), train, key=key, grid={"rank": [2, 4]})
    with pytest.raises(ValueError, match="cannot sweep 'seed'"):  # the index is "replicate"
        sweep(model, train, key=key, grid={"seed": [0, 1]})
    with pytest.raises(ValueError, match="empty"):
        sweep(model, train, key=key, grid={"learning_rate": []})
    with pytest.raises(ValueError, match="non-empty dict"):
        sweep(model, train, key=key, grid={})
    with pytest.raises(ValueError, match="integers"):
        sweep(model, train, key=key, grid={"replicate": [0.5]})
    with pytest.raises(ValueError, match="integers >= 1"):
        sweep(model, train, key=key, grid={"rank": [0, 2]})
    with pytest.raises(ValueError, match="finite numbers"):
        sweep(model, train, key=key, grid={"learning_rate": [float("nan")]})
    with pytest.raises(ValueError, match="learning_rate must be"):
        sweep(model, train, key=key, grid={"learning_rate": [0.1, -1.0]})
    with pytest.raises(ValueError, match="trainable ranking model"):
        from jaxcal.recsys import Popularity

        sweep(Popularity(), train, key=key, grid={"replicate": [0]})
    with pytest.raises(ValueError, match="key is required"):
        sweep(model, train, key=None, grid={"replicate": [0]})
