"""What the adapter keeps for the process's life, on one object the ``Guard`` holds
(``adapter_state()``); a forked child renews its lock (``after_fork``)."""

from __future__ import annotations

import threading
import weakref

from ... import runtime
from ...core.agreement import GroupState
from ...core.model import ChoiceKey


class AdapterState:
    """The choices taken from the logs for checks, each group's ``GroupState``, the wrappers put
    on the barriers, the start-up error, and what the latest check moved."""

    def __init__(self):
        self.lock = threading.Lock()
        self.taken: list[tuple[ChoiceKey, str]] = []  # (key, signature) in the order chosen
        self.groups = weakref.WeakKeyDictionary()  # ProcessGroup -> GroupState: a destroyed group takes it along
        self.groups_by_id: dict[int, GroupState] = {}  # groups that cannot be weakly referenced
        self.wrappers: dict[str, object] = {}  # barrier name -> the FunctionWrapper put in its place
        self.startup_error: list[Exception] = []  # a bad start-up value, raised at each use
        self.last_check: dict = {}  # what the latest check moved: read by the benchmarks and tests
        self.barriers_counted = 0  # in every group, destroyed ones included: named at exit if no check ran

    def after_fork(self) -> None:
        """In a forked child (``Guard.held``): another thread may have held the lock at fork."""
        self.lock = threading.Lock()

    def group_state(self, group) -> GroupState:
        with self.lock:
            try:
                state = self.groups.get(group)
                if state is None:
                    state = self.groups[group] = GroupState()
            except TypeError:  # not weakly referenceable
                state = self.groups_by_id.setdefault(id(group), GroupState())
            return state


def adapter_state() -> AdapterState:
    """The adapter's state, made at the first need."""
    return runtime.current().held("adapters.distributed", AdapterState)
