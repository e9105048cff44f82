"""Which rank plays which role, as printed for people: the table of ``mpirl check`` and the lines
a launch prints (ranks per role, and per node when the job spans several).

Reads only the role map's ``world`` section; knows nothing of MPI: the hosts are handed in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launch.config import RoleMap


def rank_ranges(cfg: RoleMap) -> str:
    """Which ranks play which role, in one line however many ranks (``0 controller, 1-8
    generator, ...``): printed at launch, so a rank that Open MPI reports killed is named."""
    parts, start = [], 0
    for role, n in cfg.world.counts().items():
        if n:
            parts.append(f"{start}{f'-{start + n - 1}' if n > 1 else ''} {role}")
            start += n
    return ", ".join(parts)


def placement(cfg: RoleMap, hosts: list[str]) -> str:
    """Which node runs which ranks, in one line (``node-a: 0-1 controller, generator; node-b:
    2-3 reward, trainer``): printed at launch when the job spans nodes, so a user sees where
    the hostfile and ``--map-by`` put each role."""
    roles = cfg.world.roles_by_rank()
    by_host: dict[str, list[int]] = {}
    for rank, host in enumerate(hosts):
        by_host.setdefault(host, []).append(rank)
    parts = []
    for host, ranks in by_host.items():
        runs, start = [], ranks[0]
        for prev, cur in zip(ranks, ranks[1:] + [None]):
            if cur != prev + 1:
                runs.append(f"{start}-{prev}" if prev > start else f"{start}")
                start = cur
        names = list(dict.fromkeys(roles[r] for r in ranks))
        parts.append(f"{host}: {','.join(runs)} {', '.join(names)}")
    return "; ".join(parts)


def rank_table(cfg: RoleMap) -> str:
    rows = ["rank  role        index"]
    counters: dict[str, int] = {}
    for rank, role in enumerate(cfg.world.roles_by_rank()):
        i = counters.get(role, 0)
        counters[role] = i + 1
        rows.append(f"{rank:>4}  {role:<10}  {i:>5}")
    return "\n".join(rows)
