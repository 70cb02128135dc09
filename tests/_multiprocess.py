"""Run a Python snippet in N real local processes joined by ``jax.distributed``.

Each process runs ``PRELUDE`` (x64 on, ``jaxcal.distributed.initialize`` with a fresh
localhost port, ``PID`` and ``N`` defined) and then the snippet; :func:`run_processes`
returns what each process printed to stdout (the Gloo connection lines removed), and fails
the test with every process's stderr when one exits non-zero or the group times out.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import pytest

PRELUDE = """
import sys
import jax
jax.config.update("jax_enable_x64", True)
import jaxcal.distributed
PID, N, PORT = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
jaxcal.distributed.initialize(f"localhost:{PORT}", N, PID)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return int(s.getsockname()[1])


def run_processes(code: str, n: int, *, timeout: float = 180.0, cwd=None) -> list[str]:
    """Run ``code`` in ``n`` processes (see the module docstring); their stdouts."""
    program = PRELUDE + textwrap.dedent(code)
    port = str(free_port())
    env = {**os.environ, "JAXCAL_COMPILATION_CACHE": "0"}
    env.pop("XLA_FLAGS", None)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", program, str(i), str(n), port],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=cwd,
        )
        for i in range(n)
    ]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=timeout))
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        pytest.fail(f"{n} processes did not finish in {timeout} s")
    failed = [i for i, p in enumerate(procs) if p.returncode != 0]
    if failed:
        detail = "\n".join(f"--- process {i} ---\n{outs[i][1][-3000:]}" for i in failed)
        pytest.fail(f"processes {failed} failed:\n{detail}")
    return [
        "\n".join(line for line in out.splitlines() if not line.startswith("[Gloo]"))
        for out, _ in outs
    ]
