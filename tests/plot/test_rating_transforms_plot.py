"""``jaxcal.plot.rating_transforms``: a valid PNG whose drawn curves are the transforms
normalised by their end levels (numpy reference), and clear errors."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from matplotlib.image import imread  # noqa: E402

from jaxcal.plot import rating_transforms  # noqa: E402
from jaxcal.plot import ratings as ratings_mod  # noqa: E402

Z = np.array([[1.0, 1.5, 2.0, 3.5, 5.0], [-2.0, 0.0, 1.0, 1.5, 2.0]])
TRUTH = np.array([[0.0, 0.1, 0.3, 0.6, 1.0], [3.0, 4.0, 4.5, 4.8, 5.0]])


def _normalised(z):
    return np.array([(row - row[0]) / (row[-1] - row[0]) for row in z])


def test_writes_a_png(tmp_path):
    path = rating_transforms(Z, tmp_path / "t.png", truth=TRUTH, title="t")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert imread(path).ndim == 3


def test_drawn_curves_are_the_normalised_transforms(tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setattr(ratings_mod, "save_figure", lambda fig, path, dpi: drawn.append(fig))
    rating_transforms(Z, tmp_path / "t.png", truth=TRUTH, labels=["a", "b"])
    lines = drawn[0].axes[0].get_lines()[1:]  # after the linear reference
    want = np.concatenate([_normalised(Z), _normalised(TRUTH)])
    assert len(lines) == len(want)
    for line, row in zip(lines, want, strict=True):
        np.testing.assert_allclose(line.get_xdata(), np.arange(1, 6))
        np.testing.assert_allclose(line.get_ydata(), row, rtol=0, atol=1e-12)


def test_flat_rows_normalise_to_nan_and_bad_input_is_refused(tmp_path):
    out = ratings_mod.normalised_transforms([[2.0, 2.0, 2.0]])
    assert np.isnan(out).all()
    with pytest.raises(ValueError, match="levels >= 2"):
        rating_transforms([1.0, 2.0], tmp_path / "x.png")
    with pytest.raises(ValueError, match="non-finite"):
        rating_transforms([[1.0, np.nan]], tmp_path / "x.png")
    with pytest.raises(ValueError, match="truth has 3 levels"):
        rating_transforms(Z, tmp_path / "x.png", truth=np.ones((1, 3)))
    with pytest.raises(ValueError, match="1 labels for 2 transforms"):
        rating_transforms(Z, tmp_path / "x.png", labels=["a"])
