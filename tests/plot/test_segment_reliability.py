"""segment_reliability: the panels are the worst segments of the first probabilities, each
curve is the segment's equal-mass binned reliability (against a NumPy reference), the PNG
opens, and bad arguments raise ValueError."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from matplotlib.image import imread  # noqa: E402

from jaxcal.metrics import segment_masks, segment_report  # noqa: E402
from jaxcal.plot import segment_reliability  # noqa: E402
from jaxcal.plot import segments as seg_mod  # noqa: E402


def _data(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    group = rng.integers(0, 3, n)
    p = rng.uniform(0.05, 0.95, n)
    truth = np.clip(p + np.where(group == 1, 0.2, 0.0), 0, 1)  # group 1 is under-predicted
    y = (rng.uniform(size=n) < truth).astype(float)
    return p, y, {"group": group}, truth


def test_panels_are_the_worst_segments_and_curves_match_a_reference(tmp_path, monkeypatch):
    p, y, table, truth = _data()
    drawn = []
    monkeypatch.setattr(seg_mod, "save_figure", lambda fig, path, dpi: drawn.append(fig))
    segment_reliability(
        {"before": p, "truth": truth}, y, table, tmp_path / "s.png", k=2, n_bins=5, min_samples=10
    )
    (fig,) = drawn
    axes = [ax for ax in fig.axes if ax.get_visible()]
    seg = segment_masks(table, probs=p, min_samples=10)
    report = segment_report(p, y, segments=seg.masks, descriptions=seg.descriptions, k=2)
    assert [ax.get_title().split("\n")[0] for ax in axes] == list(report.segment)
    assert report.segment[0] == "group=1"  # the planted error is the worst segment
    for ax, index in zip(axes, report.index, strict=True):
        rows = seg.masks[index]
        before = ax.get_lines()[1]  # [0] is the diagonal
        order = np.argsort(p[rows], kind="stable")
        chunks = np.array_split(order, 5)
        ref_x = [p[rows][c].mean() for c in chunks]
        ref_y = [y[rows][c].mean() for c in chunks]
        np.testing.assert_allclose(before.get_xdata(), ref_x, atol=1e-12)
        np.testing.assert_allclose(before.get_ydata(), ref_y, atol=1e-12)


def test_png_opens(tmp_path):
    p, y, table, truth = _data(seed=1)
    out = segment_reliability(
        {"before": p, "after": truth},
        y,
        table,
        tmp_path / "s.png",
        k=3,
        min_samples=10,
        title="segments",
    )
    image = imread(out)
    assert image.ndim == 3 and image.shape[0] > 100 and len(np.unique(image)) > 10


@pytest.mark.parametrize("bad", [{"k": 0}, {"k": 1.5}, {"n_bins": 1}])
def test_bad_arguments_raise(tmp_path, bad):
    p, y, table, _ = _data(n=200)
    with pytest.raises(ValueError, match=next(iter(bad))):
        segment_reliability(p, y, table, tmp_path / "s.png", **bad)
