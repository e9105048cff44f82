"""Imported by the reward workers' fork server only, first of its preloads (never by a rank).

The server ignores the stop signals that Open MPI forwards to a rank's descendants and that
Slurm's ``--signal`` sends to every process of a task: they are the rank's to act on (it
finishes the step and checkpoints, with this server still needed to replace a worker).
The server still ends with its rank: it exits when the rank's end of its liveness pipe
closes, and is killed if it does not (``roles.rewards.worker.stop_server``).
"""

import signal

for _stop_signal in (signal.SIGTERM, signal.SIGUSR1):
    signal.signal(_stop_signal, signal.SIG_IGN)
