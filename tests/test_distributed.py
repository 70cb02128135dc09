"""Sums, maxima and unions across real local processes (``jaxcal.distributed``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from jaxcal import distributed
from tests._multiprocess import run_processes


def test_single_process_is_identity():
    x = {"a": np.arange(3.0), "b": (np.int64(4),)}
    assert distributed.process_sum(x) is x
    assert distributed.process_max(2.5) == 2.5
    np.testing.assert_array_equal(distributed.process_union(np.array([3, 1, 3])), [1, 3])


@pytest.mark.parametrize("n", [2, 3])
def test_across_processes_equals_the_direct_computation(n):
    code = """
    import json
    import numpy as np
    from jaxcal import distributed as d
    rng = np.random.default_rng(PID)
    x = rng.normal(size=5) * 1e10 + rng.normal(size=5)  # float64 beyond float32's reach
    keys = rng.integers(0, 2**62, size=3 + PID)  # int64 beyond int32, lengths differ
    total = d.process_sum({"x": x, "k": np.int64(PID + 2**40)})
    print(json.dumps({
        "x": total["x"].tolist(), "k": int(total["k"]),
        "max": d.process_max(float(PID) * 1.5),
        "union": d.process_union(keys).tolist(),
        "count": d.process_count(), "index": d.process_index(),
    }))
    """
    outs = [json.loads(o) for o in run_processes(code, n)]
    xs, keys = [], []
    for pid in range(n):
        rng = np.random.default_rng(pid)
        xs.append(rng.normal(size=5) * 1e10 + rng.normal(size=5))
        keys.append(rng.integers(0, 2**62, size=3 + pid))
    expected = xs[0]
    for x in xs[1:]:
        expected = expected + x  # process order, as documented
    for pid, out in enumerate(outs):
        assert out["count"] == n and out["index"] == pid
        assert out["x"] == expected.tolist()  # bit for bit, on every process
        assert out["k"] == sum(p + 2**40 for p in range(n))
        assert out["max"] == (n - 1) * 1.5
        assert out["union"] == np.unique(np.concatenate(keys)).tolist()


def test_initialize_rejects_bad_arguments():
    with pytest.raises(ValueError, match="host:port"):
        distributed.initialize("localhost", 2, 0)
    with pytest.raises(ValueError, match="process_id"):
        distributed.initialize("localhost:1234", 2, 2)
    with pytest.raises(ValueError, match="n_processes"):
        distributed.initialize("localhost:1234", 0, 0)
    with pytest.raises(ValueError, match="n_processes"):
        distributed.initialize("localhost:1234", 2.0, 0)
    with pytest.raises(ValueError, match="process_id"):
        distributed.initialize("localhost:1234", 2, True)
