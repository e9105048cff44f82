"""Actors under mpirun: handlers, Stop ending every actor, close() returning on every rank,
and a message without a handler being an error."""

from __future__ import annotations

import time

import pytest

from runtime import Actor, RoleTable, Stop, handles
from transports import codec

WAIT_S = 30.0


@codec.message(name="ActorTestWork")
class Work:
    i: int


@codec.message(name="ActorTestDone")
class Done:
    i: int


@codec.message(name="ActorTestUnhandled")
class Unhandled:
    note: str = ""


def roles_of(comm) -> list[str]:
    return ["boss"] + ["worker"] * (comm.Get_size() - 1)


def table_of(comm) -> RoleTable:
    return RoleTable(comm, roles_of(comm))


class Worker(Actor):
    def __init__(self, mailbox):
        super().__init__(mailbox)
        self.handled: list[int] = []

    @handles(Work)
    def on_work(self, env):
        self.handled.append(env.msg.i)
        self.mailbox.send(env.sender, Done(env.msg.i))


class Boss(Actor):
    """Sends ``k`` work items to every worker, waits for all replies, then stops everyone."""

    def __init__(self, mailbox, k: int):
        super().__init__(mailbox)
        self.k = k
        self.sent = False
        self.done: dict = {}
        self.deadline = time.monotonic() + WAIT_S

    def step(self) -> bool:
        if not self.sent:
            for i in range(self.k):
                self.mailbox.send_role("worker", Work(i))
            self.sent = True
            return True
        if time.monotonic() > self.deadline:
            raise TimeoutError(f"replies so far: {self.done}")
        return False

    @handles(Done)
    def on_done(self, env):
        self.done.setdefault(env.sender, []).append(env.msg.i)
        if sum(map(len, self.done.values())) == self.k * self.mailbox.role_table.size("worker"):
            self.mailbox.send_role("worker", Stop("all work done"))
            self.stop("all work done")


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(60)
def test_stop_ends_every_actor_and_close_returns_everywhere(comm, open_mailbox):
    k = 50
    mb = open_mailbox(roles_of(comm))
    actor = Boss(mb, k) if comm.rank == 0 else Worker(mb)
    t0 = time.monotonic()
    actor.run()  # returns only after the actor stopped and its mailbox closed
    assert time.monotonic() - t0 < WAIT_S
    assert not actor.running and mb.closed
    assert actor.stop_reason == "all work done"
    if comm.rank == 0:
        assert sorted(actor.done) == [("worker", i) for i in range(comm.size - 1)]
        assert all(v == list(range(k)) for v in actor.done.values())
    else:
        # Stop came after the work on the same channel, so all of it was handled first.
        assert actor.handled == list(range(k))
    # Every rank got here: run() returned everywhere.
    assert comm.allgather(mb.closed) == [True] * comm.size


class Recorder(Actor):
    def __init__(self, mailbox):
        super().__init__(mailbox)
        self.stopped_with: list[str] = []

    def on_stop(self, reason):
        self.stopped_with.append(reason)


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(60)
def test_stop_to_all_including_self(comm, open_mailbox):
    mb = open_mailbox(roles_of(comm))
    actor = Recorder(mb)
    if comm.rank == 0:
        mb.send_all(Stop("bye"), include_self=True)
    actor.run()
    assert actor.stopped_with == ["bye"]  # on_stop runs exactly once
    assert mb.closed
    assert comm.allgather(actor.stop_reason) == ["bye"] * comm.size


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(60)
def test_message_without_handler_is_an_error(comm, open_mailbox):
    mb = open_mailbox(roles_of(comm))
    if comm.rank == 1:
        actor = Worker(mb)
        with pytest.raises(
            RuntimeError,
            match=r"Worker at worker 0 has no handler for (ActorTest)?Unhandled "
            r"\(from boss 0\)",
        ):
            deadline = time.monotonic() + WAIT_S
            while time.monotonic() < deadline:
                actor.handle_pending()
        assert actor.handled == [0]  # the message before it was handled
        mb.close(timeout_s=WAIT_S)
    else:
        if comm.rank == 0:
            mb.send(("worker", 0), Work(0))
            mb.send(("worker", 0), Unhandled("nobody handles me"))
        mb.close(timeout_s=WAIT_S)


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(60)
def test_handler_exception_escapes_run(comm, open_mailbox):
    class Fragile(Actor):
        @handles(Work)
        def on_work(self, env):
            raise ValueError(f"bad work {env.msg.i}")

    mb = open_mailbox(roles_of(comm))
    if comm.rank == 0:
        mb.send(("worker", 0), Work(7))
    if comm.rank == 1:
        with pytest.raises(ValueError, match="bad work 7"):
            Fragile(mb).run()  # it must reach the caller (abort_on_error), not be swallowed
    mb.close(timeout_s=WAIT_S)


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(60)
def test_role_table_addresses(comm):
    table = table_of(comm)
    assert table.ranks("worker") == list(range(1, comm.size))
    assert table.rank_of("boss") == 0 and table.whois(comm.size - 1) == ("worker", comm.size - 2)
    assert table.role_comm.Get_size() == (1 if comm.rank == 0 else comm.size - 1)
    with pytest.raises(KeyError, match="no rank plays role 'trainer'"):
        table.rank_of("trainer")
    with pytest.raises(IndexError):
        table.rank_of("worker", comm.size)


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(60)
def test_wait_for_all_sleeps_until_the_last_rank_arrives(comm):
    """runtime.backoff.wait_for_all: the early ranks wait for the late one without a core each
    (comm.Barrier() would spin: about 1 s of CPU for a 1 s wait)."""
    from runtime.backoff import wait_for_all

    late_s = 1.0
    if comm.Get_rank() == comm.Get_size() - 1:
        time.sleep(late_s)
    wall, cpu = time.perf_counter(), time.process_time()
    wait_for_all(comm)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    waited = comm.allgather(wall)
    assert min(waited[:-1]) >= late_s * 0.9  # nobody left before the late rank came
    if comm.Get_rank() < comm.Get_size() - 1:
        assert cpu < 0.3 * wall, f"spent {cpu:.2f} s of CPU in a {wall:.2f} s wait"
