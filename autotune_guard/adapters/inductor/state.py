"""What the Inductor adapter keeps for the process, on the Guard (``current().held``) rather than in
module globals, so that a forked child renews it in the Guard's one fork hook.

The template selection seam (``templates``), the post-import hooks of the template modules
(``install``), the user-kernel matches and parsed generated programs (``names``) and the tables'
content hashes (``template_choices``).
"""

from __future__ import annotations

import threading

from ...runtime import current

HELD = "inductor"


class InductorState:
    """The adapter's one state object; see the module docstring."""

    def __init__(self):
        self.call_signature = None  # of Inductor's own AlgorithmSelectorCache.__call__, once patched
        self.tuning_signature = None  # of its do_autotuning
        self.governed = False  # the selection seam is in force in this process
        self.tried = False  # the seam was looked for, in the whole module
        self.watched = False  # the template modules' post-import hooks are registered
        self.hashed: dict = {}  # (path, size, mtime_ns) -> a table's content hash: true in a child too
        # A thread's selection in progress: .active (its key while Inductor times its choices), .timings
        # (what Inductor measured). Per thread, so the forking thread's values go with it into the child.
        self.local = threading.local()
        self.after_fork()

    def after_fork(self) -> None:
        """A fresh lock (another thread may have held it at the fork) and no per-process data: a
        selection deferred to the parent's scheduler is not the child's to note."""
        self.lock = threading.Lock()
        self.pending: dict = {}  # (op, inputs key) -> Template: a choice Inductor deferred to its scheduler (auto)
        self.user_kernels: dict = {}  # (function name, source hash) -> (qualified, autotuner or None)
        self.programs: dict = {}  # file name -> parsed tree or None; a few at most


def state() -> InductorState:
    """The process's Inductor adapter state (made at first need)."""
    return current().held(HELD, InductorState)
