"""``--cross-node`` for the transport benchmarks: the same benchmark with its ranks on two nodes.

The nodes are network namespaces on this machine (``tests/support/cluster.py``), joined by a veth
bridge; Open MPI talks TCP between them (``btl self,tcp``) and gloo goes over the same link.
So the figures are those of the software over a TCP network with no wire in it: a real
cluster's link (25-400 Gb/s, RDMA) changes the raw figures, and the ratios are what carry
over. Needs root; without it the benchmark says why and exits 2.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
for p in (REPO / "tests",):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

LINK_ENV = "MPIRL_BENCH_LINK"


def link() -> str:
    """What the ranks of this run talk over, for the JSON line."""
    return os.environ.get(LINK_ENV, "one host (shared memory)")


def run_across_nodes(script: str | Path, ranks: int, slots: list[int], argv: list[str]) -> int:
    """Run ``script argv`` on ``ranks`` ranks over ``len(slots)`` virtual nodes; its exit code."""
    from support.cluster import VirtualCluster, unavailable_reason
    from support.mpi_helpers import find_mpirun, mpi_env

    reason = unavailable_reason()
    if reason is not None:
        print(f"--cross-node: no virtual cluster here: {reason}", file=sys.stderr)
        return 2
    with VirtualCluster(len(slots)) as cluster:
        args = ["-n", str(ranks), sys.executable, str(script), *argv]  # TCP only, unbound (cluster.py)
        env = mpi_env({LINK_ENV: f"TCP between {len(slots)} virtual nodes (veth bridge)"})
        return subprocess.run(cluster.mpirun(find_mpirun(), args, slots), env=env, cwd=str(REPO)).returncode
