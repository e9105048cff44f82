"""The order in which weight endpoints wait on their point-to-point operations."""

import pytest

from transports.weights.endpoints import wait_for_last_of_each, wait_in_arrival_order


class RecordingChannel:
    """Records waits; a second wait on one handle fails, as it hangs for good under gloo."""

    def __init__(self):
        self.waited: list[int] = []

    def wait(self, handle: int) -> None:
        if handle in self.waited:
            raise AssertionError(f"handle {handle} waited on twice")
        self.waited.append(handle)


def test_each_peers_last_operation_is_waited_on_first():
    ch = RecordingChannel()
    peers = [2, 3, 2, 3, 2, 5]
    waited = wait_for_last_of_each(ch, list(range(len(peers))), peers)
    assert ch.waited == [5, 4, 3]  # last to 5, to 2, to 3: latest first
    assert waited == {3, 4, 5}


@pytest.mark.parametrize("peers", [[0], [1, 1, 1], [2, 3, 2, 3], [4, 4, 5, 5, 6, 4]])
def test_every_operation_is_waited_on_exactly_once(peers):
    ch = RecordingChannel()
    handles = [f"h{i}" for i in range(len(peers))]
    wait_in_arrival_order(ch, handles, peers)
    assert sorted(ch.waited) == sorted(handles)


def test_no_operations_means_no_waits():
    ch = RecordingChannel()
    wait_in_arrival_order(ch, [], [])
    assert ch.waited == []
