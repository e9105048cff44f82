"""``mpirun -n N python -m launch CONFIG``: the canonical entry point (also under srun)."""

import os

from launch import fast_exit

fast_exit.install()  # first, so that it runs after every other atexit handler

# Next, before MPI_Init and the imports: a SIGTERM during start-up then ends the job resumable.
from runtime.preemption import PREEMPTION  # noqa: E402

PREEMPTION.install()

# Before MPI_Init, which reads it. Across nodes a delayed abort lets the report naming the dead
# rank reach mpirun before its TCP peers' "Socket closed" aborts. A value the user set wins.
os.environ.setdefault("OMPI_MCA_opal_abort_delay", "2")
# No libfabric BTL on a node without a fabric device (launch/mpi_settings.py): this covers srun
# and a user's own mpirun. A choice of BTLs the user made wins.
from launch.mpi_settings import idle_btl_setting  # noqa: E402

os.environ.update(idle_btl_setting(os.environ))

from launch.main import main  # noqa: E402

if __name__ == "__main__":
    main()
