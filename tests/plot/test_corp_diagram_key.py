"""The CORP diagram's band is optional randomness (docs/api.md, "Randomness"): drawn with a
key, refused without one (a ``ValueError`` naming ``key``, before anything is written), and
not needed for the curve alone (``n_resamples=0``)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

pytest.importorskip("matplotlib")

from jaxcal.plot import corp_reliability_diagram  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _data(n=200, seed=0):
    rng = np.random.default_rng(seed)
    p = rng.uniform(size=n)
    return p, (rng.uniform(size=n) < p**1.5).astype(float)


def test_corp_diagram_band_needs_a_key(tmp_path):
    p, y = _data()
    path = tmp_path / "corp.png"
    with pytest.raises(ValueError, match=r"pass key=jax\.random\.key"):
        corp_reliability_diagram(p, y, path, n_resamples=20)
    for bad in (0, "abc", jax.random.split(jax.random.key(0), 2)):
        with pytest.raises(ValueError, match="key must be a"):
            corp_reliability_diagram(p, y, path, key=bad, n_resamples=20)
    assert not path.exists()  # refused before drawing
    # the curve alone needs no key; with a key, the band is drawn
    assert corp_reliability_diagram(p, y, path, n_resamples=0).read_bytes()[:8] == PNG_MAGIC
    banded = corp_reliability_diagram(
        p, y, tmp_path / "band.png", key=jax.random.key(0), n_resamples=20
    )
    assert banded.read_bytes()[:8] == PNG_MAGIC
