"""``mpirun -n N python -m launch CONFIG``: the canonical entry point (also under srun)."""

import os

from launch import fast_exit

fast_exit.install()  # first, so that it runs after every other atexit handler

# Next, before the seconds of MPI_Init, imports and preflight: a SIGTERM (a Slurm preemption)
# then is kept and ends the job resumable (75), instead of killing the rank (143).
from runtime.preemption import PREEMPTION  # noqa: E402

PREEMPTION.install()

# Before MPI starts (Open MPI reads its settings at MPI_Init). Across nodes, a rank whose TCP
# peer died aborts at once ("Socket closed", MPI_ERRORS_ARE_FATAL), and its abort reached
# mpirun before the dead rank's own node reported the death: the job's last words named the
# wrong rank. Two seconds of delay on an abort let the report that names the dead rank win
# (tests/hpc/test_cross_node.py). Other MPIs ignore it; a value the user set wins.
os.environ.setdefault("OMPI_MCA_opal_abort_delay", "2")
# No libfabric BTL on a node without a fabric device: it cannot run there and costs every rank
# 1 s in MPI_Init (launch/mpi_settings.py). The launchers set it too; this covers srun and a
# user's own mpirun. A choice of BTLs the user made wins.
from launch.mpi_settings import idle_btl_setting  # noqa: E402

os.environ.update(idle_btl_setting(os.environ))

from launch.main import main  # noqa: E402

if __name__ == "__main__":
    main()
