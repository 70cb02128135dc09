"""Parametric calibration on chunks (``fit_chunks``) against the in-memory ``fit``: time,
passes over the data and peak memory, in one process and in N local processes.

    python benchmarks/bench_parametric_chunks.py                    # n = 1e6 in chunks of 1e5
    python benchmarks/bench_parametric_chunks.py --rows 4000000 --chunk-rows 250000
    python benchmarks/bench_parametric_chunks.py --processes 1,2,4

Data as in ``bench_calibrators.py`` (labels ~ Bernoulli(0.3), scores N(1, 0.8^2) for positives
and N(0, 1.2^2) for negatives, so the Gaussian map's monotonicity constraint binds), with
sample weights ~ U(0.5, 2). Chunk ``k`` is drawn from the seed ``k`` when the source asks for
it, so a streamed fit never holds more than a chunk; the in-memory fit concatenates them all.
Every variant runs in a fresh process (float64, jaxcal's compilation cache off): the table
gives the first fit (compilation included), the median of three more, the passes over the
source, the time the source itself takes per pass (drawing the chunks, included in the fit
times), the peak resident memory of the (largest) process, and the largest relative
difference of the coefficients from the in-memory fit.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

_CHILD = r"""
import json, resource, statistics, sys, time
import jax
jax.config.update("jax_enable_x64", True)
import numpy as np
import jaxcal
mode, rows, chunk_rows, n_proc, pid, port = sys.argv[1:7]
rows, chunk_rows, n_proc, pid = int(rows), int(chunk_rows), int(n_proc), int(pid)
if n_proc > 1:
    jaxcal.distributed.initialize(f"localhost:{port}", n_proc, pid)
n_chunks = -(-rows // chunk_rows)
mine = [k for k in range(n_chunks) if k % n_proc == pid]
passes = [0]

def chunk(k):
    rng = np.random.default_rng(k)
    m = min(chunk_rows, rows - k * chunk_rows)
    y = (rng.uniform(size=m) < 0.3).astype(np.int8)
    s = np.where(y == 1, rng.normal(1.0, 0.8, m), rng.normal(0.0, 1.2, m))
    return s, y, rng.uniform(0.5, 2.0, m)

def source():
    passes[0] += 1
    return (chunk(k) for k in mine)

cal = jaxcal.GaussianCalibration()
if mode == "memory":
    s, y, w = (np.concatenate(c) for c in zip(*source()))
    fit = lambda: cal.fit(s, y, sample_weight=w)
else:
    fit = lambda: cal.fit_chunks(source)
times = []
for _ in range(4):
    passes[0] = 0
    t = time.perf_counter()
    theta = np.asarray(fit().theta)
    times.append(time.perf_counter() - t)
n_passes = passes[0]
t = time.perf_counter()
for _ in source():
    pass
read = time.perf_counter() - t
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"first": times[0], "median": statistics.median(times[1:]), "read": read,
                  "passes": n_passes, "rss": rss, "theta": theta.tolist()}))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return int(s.getsockname()[1])


def run(mode: str, rows: int, chunk_rows: int, n_proc: int) -> list[dict]:
    """One variant in ``n_proc`` fresh processes: each process's JSON result."""
    env = {**os.environ, "JAXCAL_COMPILATION_CACHE": "0"}
    port = str(_free_port())
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                _CHILD,
                mode,
                str(rows),
                str(chunk_rows),
                str(n_proc),
                str(i),
                port,
            ],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )  # fmt: skip
        for i in range(n_proc)
    ]
    outs = [p.communicate()[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"{mode} with {n_proc} process(es) failed")
    return [json.loads(o.strip().splitlines()[-1]) for o in outs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--chunk-rows", type=int, default=100_000)
    parser.add_argument("--processes", default="1,2", help="comma-separated process counts")
    args = parser.parse_args()
    start = time.time()
    ref = run("memory", args.rows, args.chunk_rows, 1)[0]
    theta = ref["theta"]
    print(f"n = {args.rows:,} rows in chunks of {args.chunk_rows:,}; GaussianCalibration")
    print("| fit | processes | first call | median | passes | source per pass | peak RSS | "
          "max rel. diff |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| `fit` (in memory) | 1 | {ref['first']:.2f} s | {ref['median']:.2f} s | - | "
          f"{ref['read']:.2f} s | {ref['rss']:.0f} MB | - |")  # fmt: skip
    for n in (int(x) for x in args.processes.split(",")):
        outs = run("chunks", args.rows, args.chunk_rows, n)
        diff = max(
            abs(a - b) / abs(b) for out in outs for a, b in zip(out["theta"], theta, strict=True)
        )
        first = max(o["first"] for o in outs)
        median = max(o["median"] for o in outs)
        read = statistics.median(o["read"] for o in outs)
        rss = max(o["rss"] for o in outs)
        print(f"| `fit_chunks` | {n} | {first:.2f} s | {median:.2f} s | {outs[0]['passes']} | "
              f"{read:.2f} s | {rss:.0f} MB | {diff:.1e} |")  # fmt: skip
    print(f"({time.time() - start:.0f} s in all)", file=sys.stderr)


if __name__ == "__main__":
    main()
