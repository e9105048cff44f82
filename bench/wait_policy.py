"""How a benchmark's Python wait loop treats the core: as Open MPI's own ``Wait`` does."""

from __future__ import annotations

import os

from mpi4py import MPI


def yield_when_idle(comm: MPI.Comm) -> bool:
    """Whether a waiting rank gives its core away between polls: the raw contender's ``Wait``
    follows Open MPI's ``mpi_yield_when_idle``, which is on where the node's ranks outnumber
    its cores (and otherwise spins), so the mailbox's wait loop follows the same rule.

    A spinning rank on an oversubscribed node starves the peer it waits for; where each rank
    has a core, a ``sched_yield`` per poll only adds a system call to every wait (about 1 us
    of a 15 us round trip here), a cost of the benchmark's loop, not of the mailbox.
    """
    setting = os.environ.get("OMPI_MCA_mpi_yield_when_idle")
    if setting is not None:
        return setting.strip().lower() in ("1", "true", "yes", "on")
    # The cores the node's ranks may run on, together: under mpirun's binding each rank's
    # own affinity is a single core, and under a batch system the node may hold more.
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    cores = set().union(*node.allgather(os.sched_getaffinity(0)))
    ranks_here = node.Get_size()
    node.Free()
    return ranks_here > len(cores)
