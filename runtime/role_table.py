"""Which rank plays which role, and a communicator per role.

Code addresses peers by role ("all generators", "trainer 0"), never by raw rank numbers:
the role table turns ``(role, index)`` into a world rank in one place.
"""

from __future__ import annotations

from mpi4py import MPI


class RoleTable:
    def __init__(self, comm: MPI.Comm, roles_by_rank: list[str]):
        """``roles_by_rank[r]`` is the role of rank ``r`` of ``comm``; every rank passes the same list.

        Collective: every rank of ``comm`` must construct the table (it splits ``comm``).
        """
        if len(roles_by_rank) != comm.Get_size():
            raise ValueError(
                f"the role list names {len(roles_by_rank)} ranks but the communicator has {comm.Get_size()}"
            )
        self.comm = comm
        self.rank = comm.Get_rank()
        self.roles_by_rank = list(roles_by_rank)
        self.role_names = list(dict.fromkeys(roles_by_rank))  # first-appearance order
        self._ranks = {r: [i for i, x in enumerate(roles_by_rank) if x == r] for r in self.role_names}
        self.role = roles_by_rank[self.rank]
        self.index = self._ranks[self.role].index(self.rank)  # my position among my role's ranks
        # One communicator per role (e.g. the trainers' data-parallel group); Split is collective.
        self.role_comm = comm.Split(color=self.role_names.index(self.role), key=self.rank)

    def ranks(self, role: str) -> list[int]:
        """World ranks of ``role`` in index order (empty if the role has no ranks)."""
        return list(self._ranks.get(role, []))

    def size(self, role: str) -> int:
        return len(self._ranks.get(role, []))

    def rank_of(self, role: str, index: int = 0) -> int:
        ranks = self._ranks.get(role)
        if not ranks:
            raise KeyError(f"no rank plays role {role!r} (roles: {', '.join(self.role_names)})")
        if not 0 <= index < len(ranks):
            raise IndexError(f"{role} {index} does not exist: the role table has {len(ranks)} {role} rank(s)")
        return ranks[index]

    def whois(self, rank: int) -> tuple[str, int]:
        """(role, index) of a world rank."""
        role = self.roles_by_rank[rank]
        return role, self._ranks[role].index(rank)

    def describe(self) -> str:
        return f"rank {self.rank} ({self.role} {self.index})"
