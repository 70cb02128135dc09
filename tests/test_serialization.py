"""Save / load round-trips exactly and never unpickles."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcal
from jaxcal._pytree import pytree_dataclass, static_field


@pytree_dataclass
class _Toy:
    coef: jax.Array
    extra: dict
    name: str = static_field(default="toy")
    bounds: tuple = static_field(default=(0.0, float("inf")))


def test_round_trip_exact(tmp_path):
    obj = _Toy(
        coef=jnp.array([1.0, -2.5e-300, np.pi]),
        extra={"counts": np.arange(5, dtype=np.int32), "nested": [jnp.ones((2, 3)), None, 3]},
        name="x",
    )
    path = tmp_path / "toy.npz"
    obj.save(path)
    back = jaxcal.load(path)
    assert type(back) is _Toy
    assert back.name == "x" and back.bounds == (0.0, float("inf"))
    np.testing.assert_array_equal(back.coef, obj.coef)
    assert back.coef.dtype == obj.coef.dtype and isinstance(back.coef, jax.Array)
    assert back.extra["counts"].dtype == np.int32
    np.testing.assert_array_equal(back.extra["nested"][0], np.ones((2, 3)))
    assert back.extra["nested"][1:] == [None, 3]
    # still a pytree with the same structure
    assert jax.tree_util.tree_structure(back) == jax.tree_util.tree_structure(obj)


def test_load_rejects_foreign_files(tmp_path):
    path = tmp_path / "plain.npz"
    np.savez(path, x=np.ones(3))
    with pytest.raises(ValueError, match="not a jaxcal file"):
        jaxcal.load(path)
    with pytest.raises(ValueError, match="cannot read"):
        jaxcal.load(tmp_path / "missing.npz")


def test_unregistered_objects_refuse_to_save(tmp_path):
    with pytest.raises(TypeError):
        jaxcal.save({"f": object()}, tmp_path / "bad.npz")


_SAVE_THEN_LOAD_ELSEWHERE = """
import sys, numpy as np, jax
jax.config.update("jax_enable_x64", True)
import jaxcal
if sys.argv[1] == "save":
    s = np.linspace(0.1, 2.0, 40)
    y = (np.arange(40) % 3 == 0).astype(int)
    objs = [jaxcal.GaussianCalibration().fit(s, y), jaxcal.IsotonicCalibration().fit(s, y)]
    from jaxcal.debias import BaseRateCorrected  # a wrapper defined outside calibrators
    objs.append(BaseRateCorrected(base=objs[0], shift=jax.numpy.asarray(0.3)))
    for i, o in enumerate(objs):
        o.save(f"{sys.argv[2]}/o{i}.npz")
        np.save(f"{sys.argv[2]}/p{i}.npy", np.asarray(o.predict(s)))
else:
    s = np.linspace(0.1, 2.0, 40)
    for i in range(3):
        o = jaxcal.load(f"{sys.argv[2]}/o{i}.npz")
        assert np.array_equal(np.asarray(o.predict(s)), np.load(f"{sys.argv[2]}/p{i}.npy")), i
    print("ok")
"""


def test_load_in_a_fresh_process(tmp_path):
    """``jaxcal.load`` in a new interpreter (nothing but ``import jaxcal``) finds the saved
    classes, whose modules it imports by name, and predicts identically."""
    import subprocess
    import sys

    script = tmp_path / "roundtrip.py"
    script.write_text(_SAVE_THEN_LOAD_ELSEWHERE)
    for step in ("save", "load"):
        out = subprocess.run(
            [sys.executable, str(script), step, str(tmp_path)], capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "ok"
