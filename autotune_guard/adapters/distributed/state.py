"""What the adapter keeps for the process's life, on one object it owns (``STATE``); a forked
child renews its lock (``runtime.current().on_fork``)."""

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
        self.hook_registered = False
        self.last_check: dict = {}  # what the latest check moved: read by the benchmarks and tests
        self.barriers_counted = 0  # in every group, destroyed ones included: named at exit if no check ran

    def renew(self) -> None:
        """In a forked child: another thread may have held the lock at fork."""
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


STATE = AdapterState()
runtime.current().on_fork(STATE.renew)
