"""A cluster of several nodes on one machine: Linux network namespaces that MPI sees as hosts.

Each node is a network namespace with its own interface (``eth0``, an address on a bridge that
lives in a switch namespace of its own) and, for every process started on it, a mount and a
UTS namespace of its own: ``/etc/netns/<ns>/hosts`` bind-mounted over ``/etc/hosts`` and the
node's host name. (Not ``ip netns exec``: it remounts ``/sys``, which hides the cgroup
filesystem slurmd needs.) Open MPI starts its daemons on the other nodes through a launch
agent in place of ssh (``plm_ssh_agent``): a script that enters the node's namespaces. So MPI
sees separate hosts and talks TCP between them, torch.distributed's rendezvous and gloo go over
the bridge, and every rank's ``socket.getfqdn()`` names its node.

Nothing touches the machine's own network: the bridge and every address are inside namespaces
this module creates, and :meth:`VirtualCluster.close` removes them (killing whatever still runs
in them), also after a failed test. Needs root, ``ip`` (iproute2), ``nsenter`` and ``unshare`` (util-linux).

    with VirtualCluster(2) as cluster:
        subprocess.run(cluster.mpirun(["-n", "4", sys.executable, "probe.py"], slots=2), env=...)
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

SUBNET = "10.213.7"  # inside the test's own namespaces only: never routed, never on a real link
PREFIX = "mpirl-vc"  # every namespace this module makes starts with it (stale ones are removed)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def unavailable_reason() -> str | None:
    """Why a virtual cluster cannot be built here, or None when it can."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "needs root (network namespaces)"
    for tool in ("ip", "unshare", "nsenter"):
        if shutil.which(tool) is None:
            return f"needs `{tool}` (iproute2 / util-linux)"
    probe = f"{PREFIX}-probe-{os.getpid()}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    try:
        uts = subprocess.run(
            [
                "nsenter",
                f"--net=/run/netns/{probe}",
                "--",
                "unshare",
                "--mount",
                "--uts",
                "--",
                "hostname",
                "vnode-probe",
            ],
            capture_output=True,
            text=True,
        )
        if uts.returncode != 0:
            return f"cannot enter a network, mount and UTS namespace: {uts.stderr.strip()}"
    finally:
        _ip("netns", "del", probe, check=False)
    return None


def remove_stale() -> None:
    """Remove namespaces of this module left by a process that no longer runs (a killed test)."""
    listed = _ip("netns", "list", check=False).stdout.split()
    for name in listed:
        if not name.startswith(PREFIX + "-"):
            continue
        owner = name.split("-")[2] if len(name.split("-")) > 2 else ""
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            _kill_namespace(name)
            _ip("netns", "del", name, check=False)
            shutil.rmtree(f"/etc/netns/{name}", ignore_errors=True)


def _kill_namespace(ns: str) -> None:
    pids = _ip("netns", "pids", ns, check=False).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


class VirtualCluster:
    """``nodes`` hosts ``vnode0``.. on one machine (see the module docstring)."""

    def __init__(self, nodes: int = 2):
        if not 2 <= nodes <= 16:
            raise ValueError(f"a virtual cluster has 2 to 16 nodes, not {nodes}")
        remove_stale()
        self.tag = f"{PREFIX}-{os.getpid()}-{id(self) % 10000}"
        self.hosts = [f"vnode{i}" for i in range(nodes)]
        self.addresses = {h: f"{SUBNET}.{10 + i}" for i, h in enumerate(self.hosts)}
        self.namespaces = {h: f"{self.tag}-n{i}" for i, h in enumerate(self.hosts)}
        self.switch = f"{self.tag}-sw"
        self.dir = Path(tempfile.mkdtemp(prefix="mpirl-vcluster-"))
        self.agent = self.dir / "agent"
        self._made: list[str] = []
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ building

    def _build(self) -> None:
        _ip("netns", "add", self.switch)
        self._made.append(self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        hosts_file = "127.0.0.1 localhost\n" + "".join(f"{a} {h}\n" for h, a in self.addresses.items())
        for i, host in enumerate(self.hosts):
            ns = self.namespaces[host]
            _ip("netns", "add", ns)
            self._made.append(ns)
            _ip("link", "add", f"mpirlvc{i}", "netns", self.switch, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("-n", self.switch, "link", "set", f"mpirlvc{i}", "master", "br0", "up")
            _ip("-n", ns, "addr", "add", f"{self.addresses[host]}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            etc = Path("/etc/netns") / ns
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text(hosts_file)
        cases = "".join(f"  {h}) ns={shlex.quote(ns)} ;;\n" for h, ns in self.namespaces.items())
        # ssh's contract: `agent HOST COMMAND...`, the command's words joined and run by a shell.
        self.agent.write_text(
            "#!/bin/sh\n"
            "# Open MPI's launch agent for the virtual cluster: ssh HOST CMD, as namespaces.\n"
            'host=$1; shift\ncase "$host" in\n'
            + cases
            + '  *) echo "virtual cluster: no host $host" >&2; exit 255 ;;\n'
            "esac\n"
            "exec nsenter --net=/run/netns/$ns -- unshare --mount --uts -- "
            '/bin/sh -c "mount --bind /etc/netns/$ns/hosts /etc/hosts && hostname $host && $*"\n'
        )
        self.agent.chmod(0o755)

    # ------------------------------------------------------------------ using

    def hostfile(self, slots: int | list[int]) -> Path:
        """A hostfile giving each node ``slots`` ranks (or a list, node by node)."""
        per_node = slots if isinstance(slots, list) else [slots] * len(self.hosts)
        path = self.dir / f"hosts-{'-'.join(map(str, per_node))}"
        path.write_text("".join(f"{h} slots={s}\n" for h, s in zip(self.hosts, per_node) if s > 0))
        return path

    def on_node(self, host: str, argv: list[str]) -> list[str]:
        """``argv`` run on ``host``: in its network namespace, with its hosts file and host name."""
        ns = self.namespaces[host]
        enter = f'mount --bind /etc/netns/{ns}/hosts /etc/hosts && hostname {host} && exec "$@"'
        return [
            "nsenter",
            f"--net=/run/netns/{ns}",
            "--",
            "unshare",
            "--mount",
            "--uts",
            "--",
            "/bin/sh",
            "-c",
            enter,
            "sh",
            *argv,
        ]

    def mpirun(self, mpirun: str, args: list[str], slots: int | list[int]) -> list[str]:
        """``mpirun`` started on the first node, its daemons on the others through the agent.

        Only TCP between ranks (were shared memory used across nodes, nothing would test a
        network), and no binding: the virtual nodes share this machine's cores, and binding
        put two nodes' ranks on the same core and starved one (a real node has its own)."""
        agent = ["--hostfile", str(self.hostfile(slots)), "--mca", "plm_ssh_agent", str(self.agent)]
        return self.on_node(self.hosts[0], [mpirun, *agent, "--bind-to", "none", "--mca", "btl", "self,tcp", *args])

    def running(self) -> dict[str, list[int]]:
        """The processes still running on each node."""
        out = {}
        for host, ns in self.namespaces.items():
            out[host] = [int(p) for p in _ip("netns", "pids", ns, check=False).stdout.split()]
        return out

    # ------------------------------------------------------------------ removing

    def close(self) -> None:
        """Kill what still runs on the nodes and remove every namespace and file made."""
        for ns in self._made:
            _kill_namespace(ns)
        deadline = time.monotonic() + 5
        while any(_ip("netns", "pids", ns, check=False).stdout.split() for ns in self._made):
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        for ns in reversed(self._made):
            _ip("netns", "del", ns, check=False)
            shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)
        self._made.clear()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> VirtualCluster:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
