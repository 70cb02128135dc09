"""Posterior plots write valid PNGs; bad inputs raise. Posteriors are built from known draws
(no sampling), so the test is fast."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import jaxcal
from jaxcal.bayes.posterior import Posterior
from jaxcal.families.linear import ScoreRange

pytest.importorskip("matplotlib")
from jaxcal.plot.bayes import posterior_map, posterior_reliability_diagram  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def post():
    rng = np.random.default_rng(0)
    theta = np.stack([rng.normal(1.5, 0.1, (2, 200)), rng.normal(-0.5, 0.1, (2, 200))], -1)
    return Posterior(
        theta=jnp.asarray(theta), context=ScoreRange(jnp.asarray(-3.0), jnp.asarray(3.0)),
        stats={}, family=jaxcal.PlattScaling().family, method="nuts",
    )  # fmt: skip


def test_plots_write_png(post, tmp_path):
    rng = np.random.default_rng(1)
    s = rng.normal(size=500)
    y = (rng.random(500) < 1 / (1 + np.exp(-(1.5 * s - 0.5)))).astype(float)
    p1 = posterior_reliability_diagram(post, s, y, tmp_path / "rel.png", n_bins=8)
    p2 = posterior_map(
        post, tmp_path / "sub" / "map.png", scores=s, labels=y,
        true_map=lambda g: 1 / (1 + np.exp(-(1.5 * g - 0.5))),
    )  # fmt: skip
    for p in (p1, p2):
        assert p.read_bytes()[:8] == PNG


def test_plot_bad_inputs(post, tmp_path):
    with pytest.raises(ValueError, match="level"):
        posterior_map(post, tmp_path / "x.png", level=1.0)
    with pytest.raises(ValueError, match="0/1|labels"):
        posterior_reliability_diagram(post, [0.0, 1.0], [0, 2], tmp_path / "x.png")
    batched = Posterior(
        theta=jnp.stack([post.theta] * 2),
        context=ScoreRange(jnp.zeros(2), jnp.ones(2)),
        stats={}, family=post.family,
    )  # fmt: skip
    with pytest.raises(ValueError, match="batched"):
        posterior_map(batched, tmp_path / "x.png")
