"""PNG plots: valid images, drawn values equal a numpy reference, lazy matplotlib, clear errors."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from matplotlib.image import imread  # noqa: E402

import jaxcal  # noqa: E402
from jaxcal.clicks import reliability_by_rank  # noqa: E402
from jaxcal.clicks.metrics import ReliabilityByRank  # noqa: E402
from jaxcal.metrics import reliability  # noqa: E402
from jaxcal.plot import (  # noqa: E402
    calibration_map,
    reliability_by_rank_diagram,
    reliability_diagram,
    score_histograms,
)
from jaxcal.plot import clicks as clicks_mod  # noqa: E402
from jaxcal.plot import maps as maps_mod  # noqa: E402
from jaxcal.plot import reliability as rel_mod  # noqa: E402

TOL = 1e-12
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _sample(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    p = rng.uniform(size=n) ** 2
    y = (rng.uniform(size=n) < np.clip(1.3 * p, 0, 1)).astype(float)
    return p, y


def _check_png(path, *, min_size=100):
    assert path.read_bytes()[:8] == PNG_MAGIC
    img = imread(path)
    assert img.ndim == 3 and min(img.shape[:2]) >= min_size
    assert img.std() > 0.01  # something was drawn
    return img


def _numpy_bins(p, y, n_bins):
    """Per-bin (count, mean p, mean y) with bins [k/B, (k+1)/B), the last closed."""
    ids = np.minimum((p * n_bins).astype(int), n_bins - 1)
    out = []
    for b in range(n_bins):
        m = ids == b
        out.append(
            (m.sum(), p[m].mean() if m.any() else np.nan, y[m].mean() if m.any() else np.nan)
        )
    return np.array(out)


def test_reliability_diagram_writes_png_with_one_panel_per_calibrator(tmp_path):
    p, y = _sample()
    one = _check_png(reliability_diagram(p, y, tmp_path / "one.png"))
    many = _check_png(
        reliability_diagram(
            {"a": p, "b": np.sqrt(p), "c": p**2, "d": 0.5 * p}, y, tmp_path / "sub" / "many.png",
            ncols=2, symmetric=True, title="four",
        )
    )  # fmt: skip
    # 2 x 2 panels of ~3.6 x 4.1 inches vs one panel: twice the width and height
    assert many.shape[0] > 1.8 * one.shape[0] and many.shape[1] > 1.8 * one.shape[1]


@pytest.mark.parametrize("symmetric", [False, True])
def test_drawn_bars_equal_numpy_bins(symmetric):
    p, y = _sample(seed=1)
    ref = _numpy_bins(p, y, 10)
    fig = rel_mod.new_figure((4, 4))
    ax, ax_count = fig.add_subplot(211), fig.add_subplot(212)
    rel_mod._draw_panel(ax, ax_count, reliability(p, y, n_bins=10, symmetric=symmetric),
                        symmetric=symmetric)  # fmt: skip
    # each set of bars is one collection of rectangles (left, bottom, right, top per bar)
    acc_bars, gap_bars = _rectangles(ax.collections[0]), _rectangles(ax.collections[1])
    count_bars = _rectangles(ax_count.collections[0])
    full = ref[:, 0] > 0
    conf, acc = ref[full, 1], ref[full, 2]
    if symmetric:  # bins with midpoint below 0.5 are drawn for the negative class
        neg = (np.arange(10)[full] + 0.5) / 10 < 0.5
        conf, acc = np.where(neg, 1 - conf, conf), np.where(neg, 1 - acc, acc)
    np.testing.assert_allclose(acc_bars[:, 1], 0.0, atol=TOL)
    np.testing.assert_allclose(acc_bars[:, 3], acc, atol=TOL)
    np.testing.assert_allclose(gap_bars[:, 1], acc, atol=TOL)  # from the accuracy...
    np.testing.assert_allclose(gap_bars[:, 3], conf, atol=TOL)  # ...to the confidence
    np.testing.assert_allclose(acc_bars[:, 0], np.arange(10)[full] / 10, atol=TOL)
    np.testing.assert_allclose(acc_bars[:, 2], (np.arange(10)[full] + 1) / 10, atol=TOL)
    np.testing.assert_allclose(count_bars[:, 3], ref[full, 0] / p.size, atol=TOL)


def _rectangles(collection) -> np.ndarray:
    """``[bars, 4]``: left, bottom, right, top of each rectangle of a collection."""
    corners = np.array([path.vertices[:4] for path in collection.get_paths()])
    return np.stack([corners[:, 0, 0], corners[:, 0, 1], corners[:, 2, 0], corners[:, 2, 1]], 1)


def test_calibration_map_draws_predict_and_binned_reference(tmp_path):
    rng = np.random.default_rng(2)
    s = rng.normal(size=4000)
    y = (rng.uniform(size=4000) < 1 / (1 + np.exp(-(2 * s - 1)))).astype(float)
    fitted = {"Platt": jaxcal.PlattScaling().fit(s, y)}
    path = calibration_map(fitted, (-3, 3), tmp_path / "map.png", scores=s, labels=y,
                           reference=(s, y), title="map")  # fmt: skip
    _check_png(path)
    _check_png(calibration_map(fitted, (-3, 3), tmp_path / "plain.png", scores=s))
    # reference dots: per-bin means of the targets, against a numpy loop
    centers, means, counts = maps_mod._binned_means(s, y, -3.0, 3.0, 12)
    edges = np.linspace(-3, 3, 13)
    ref = []
    for k in range(12):
        m = (s >= edges[k]) & ((s < edges[k + 1]) if k < 11 else (s <= 3))
        if m.any():
            ref.append((0.5 * (edges[k] + edges[k + 1]), y[m].mean(), m.sum()))
    np.testing.assert_allclose(np.c_[centers, means, counts], np.array(ref), atol=TOL)


def test_score_histograms(tmp_path):
    p, y = _sample(seed=3)
    s = np.log(p + 1e-3)
    _check_png(score_histograms(s, y, tmp_path / "h.png", log=True, title="h"))
    w = np.random.default_rng(0).uniform(0.5, 2.0, s.size)
    _check_png(score_histograms(s, y, tmp_path / "hw.png", sample_weight=w, density=False))
    _check_png(score_histograms(np.ones(50), np.r_[np.zeros(25), np.ones(25)], tmp_path / "c.png"))


def test_reliability_by_rank_diagram_draws_every_nonempty_bucket(tmp_path, monkeypatch):
    rng = np.random.default_rng(4)
    probs = rng.uniform(size=(800, 5))
    clicks = (rng.uniform(size=(800, 5)) < probs**2).astype(int)
    diagrams = {"raw": reliability_by_rank(probs, clicks, n_bins=20),
                "squared": reliability_by_rank(probs**2, clicks, n_bins=20)}  # fmt: skip
    _check_png(reliability_by_rank_diagram(diagrams, tmp_path / "sub" / "rel.png", title="t"))
    _check_png(reliability_by_rank_diagram(diagrams["raw"], tmp_path / "one.png", ranks=(2,)))
    drawn = []
    monkeypatch.setattr(clicks_mod, "save_figure", lambda fig, path, dpi: drawn.append(fig))
    reliability_by_rank_diagram(diagrams, tmp_path / "x.png", ranks=(1, 4))
    axes = drawn[0].axes
    assert [ax.get_title() for ax in axes] == ["rank 1", "rank 4"]
    for ax, r in zip(axes, (1, 4), strict=True):
        lines = ax.get_lines()[1:]  # after the diagonal
        assert [ln.get_label() for ln in lines] == list(diagrams)
        for ln, d in zip(lines, diagrams.values(), strict=True):
            ok = d.count[r - 1] > 0
            want = np.c_[d.mean_pred[r - 1][ok], d.ctr[r - 1][ok]]
            np.testing.assert_allclose(ln.get_xydata(), want, atol=TOL)


_RANK_DIAGRAM = ReliabilityByRank(np.full((2, 3), 0.5), np.full((2, 3), 0.5), np.ones((2, 3)))


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda d: reliability_diagram([0.1, 1.2], [0, 1], d / "x.png"), r"\[0, 1\]"),
        (lambda d: reliability_diagram({}, [0, 1], d / "x.png"), "empty mapping"),
        (lambda d: reliability_diagram([0.1, 0.2], [0, 2], d / "x.png"), "0/1"),
        (lambda d: calibration_map({}, (0, 1), d / "x.png"), "empty"),
        (lambda d: calibration_map({"f": object()}, (0, 1), d / "x.png"), "predict"),
        (lambda d: calibration_map({"f": _Identity()}, (1, 0), d / "x.png"), "lo < hi"),
        (lambda d: calibration_map({"f": _Identity()}, (0,), d / "x.png"), "pair"),
        (
            lambda d: calibration_map(
                {"f": _Identity()}, (0, 1), d / "x.png", reference=([0.1, 0.2], [1.0])
            ),
            "length mismatch",
        ),
        (lambda d: score_histograms([0.1, np.nan], [0, 1], d / "x.png"), "NaN"),
        (lambda d: score_histograms([0.1, 0.2], [0, 1], d / "x.png", sample_weight=[1, -1]),
         "non-negative"),
        (lambda d: reliability_by_rank_diagram(_RANK_DIAGRAM, d / "x.png"), r"1\.\.2"),
        (lambda d: reliability_by_rank_diagram({}, d / "x.png"), "empty mapping"),
    ],
)  # fmt: skip
def test_bad_inputs_raise_before_drawing(tmp_path, call, match):
    with pytest.raises(ValueError, match=match):
        call(tmp_path)
    assert not (tmp_path / "x.png").exists()


class _Identity:
    def predict(self, scores):
        return np.clip(np.asarray(scores), 0, 1)


def test_missing_matplotlib_gives_an_install_hint(tmp_path, monkeypatch):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r"pip install 'jaxcal\[plot\]'"):
        reliability_diagram([0.1, 0.9], [0, 1], tmp_path / "x.png")
    with pytest.raises(ImportError, match="matplotlib"):
        score_histograms([0.1, 0.9], [0, 1], tmp_path / "x.png")


def test_matplotlib_is_imported_lazily_and_pyplot_never():
    code = (
        "import sys, numpy as np\n"
        "import jaxcal.plot.reliability, jaxcal.plot.maps, jaxcal.plot.clicks\n"
        "assert 'matplotlib' not in sys.modules, 'imported at module load'\n"
        "from jaxcal.plot import reliability_diagram\n"
        "import tempfile, os\n"
        "d = tempfile.mkdtemp()\n"
        "reliability_diagram([0.1, 0.9, 0.4], [0, 1, 1], os.path.join(d, 'x.png'))\n"
        "assert 'matplotlib' in sys.modules\n"
        "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot changes global state'\n"
        "print('OK')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "OK"
