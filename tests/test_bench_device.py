"""The device suite (``benchmarks/bench_device.py``): a ``--quick`` run on the CPU gives a
table with every workload and finite, positive numbers; the peak-bandwidth table picks the
right row for the device names JAX reports."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_device.py"


def _module():
    if "bench_device" not in sys.modules:  # dataclasses look their module up while loading
        spec = importlib.util.spec_from_file_location("bench_device", SCRIPT)
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_device"] = module
        spec.loader.exec_module(module)
    return sys.modules["bench_device"]


@pytest.mark.parametrize(
    ("kind", "peak"),
    [
        ("NVIDIA H100 80GB HBM3", 3.35e12),
        ("NVIDIA H100 PCIe", 2.0e12),
        ("NVIDIA H100 NVL", 3.9e12),
        ("NVIDIA H200", 4.8e12),
        ("NVIDIA GH200 480GB", None),  # 96 or 144 GB of HBM: not told apart by the name
        ("NVIDIA A100-SXM4-80GB", 2.039e12),
        ("NVIDIA A100-PCIE-40GB", 1.555e12),
        ("TPU v5 lite", 0.819e12),
        ("cpu", None),
    ],
)
def test_peak_bandwidth_table(kind, peak):
    assert _module().peak_from_table(kind)[0] == peak


def test_sizes_scale_counts_not_iterations():
    bench = _module()
    full, tenth = bench.Sizes(), bench.Sizes().scaled(0.1)
    assert (tenth.problems, tenth.sessions) == (410, 1_000_000)
    assert tenth.em_iter == full.em_iter and tenth.bpr_steps == full.bpr_steps


@pytest.mark.slow
def test_quick_run_reports_every_workload(tmp_path):
    """The CPU smoke run (about 20 s of CPU time, mostly compilation)."""
    bench = _module()
    report_path = tmp_path / "device.json"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--repeats", "1", "--json", str(report_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    for name in bench.WORKLOADS:
        assert f"[bench_device] {name}: first" in out.stderr  # progress per workload

    header = "| device | workload | size | first call s | warm s | GB moved | GB/s | % of peak |"
    lines = out.stdout.splitlines()
    start = lines.index(header)
    rows = [line.split("|")[1:-1] for line in lines[start + 2 : start + 2 + len(bench.WORKLOADS)]]
    assert [cells[1].strip() for cells in rows] == list(bench.WORKLOADS)
    for cells in rows:
        assert cells[0].strip() == "cpu"
        for cell in cells[3:]:
            value = float(cell)
            assert math.isfinite(value) and value > 0, cells

    report = json.loads(report_path.read_text())
    assert report["platform"] == "cpu" and report["peak_source"].startswith("measured copy")
    assert report["peak_bytes_per_s"] == report["measured_copy_bytes_per_s"] > 0
    assert [row["workload"] for row in report["rows"]] == list(bench.WORKLOADS)
    for row in report["rows"]:
        for key in ("first_s", "warm_s", "bytes", "gb_per_s", "percent_of_peak"):
            assert math.isfinite(row[key]) and row[key] > 0, (row["workload"], key)
        assert row["warm_calls"] == 1 and row["bytes_counted"]
