"""The process's state: one object, replaced in one assignment when a policy is installed.

``now`` is what this process carries out: the policy, its generation, the tables read for it, the
warnings given under it, and its choice log.  Nothing in it is changed across policies:
``replace`` builds the next one, under ``swap_lock``, so a launch sees one policy or the other,
and a choice noted under ``swap_lock`` after checking its generation lands in the log of the
policy that made it.  ``now.lasting`` is the part that outlives policies (the rank evidence is
filed under, the kernels the guard did not govern, what the adapters read once from Triton).

Plain data: imports neither Triton nor torch.  The adapters read it; ``replace`` is called by the
Triton adapter, which also drops what it hung on autotuners for the old policy.
"""

from __future__ import annotations

import threading

from .choices import ChoiceLog, Ungoverned, digest_of


class Lasting:
    """What a new policy does not reset."""

    __slots__ = ("rank_world", "ungoverned", "arch", "config_defaults")

    def __init__(self):
        # (rank, world size), fixed at this process's first choice (a fork child keeps its parent's).
        self.rank_world: tuple[int, int] | None = None
        # kernel -> why the guard did not govern a choice made for it (a library's own autotuner
        # class, Inductor's coordinate descent, ...): named when met, counted at exit.
        self.ungoverned = Ungoverned()
        # ``sm90``, ``gfx942`` or ``interpret``, and Triton's defaults of the options a table entry
        # may omit: read by the Triton adapter (the only module that may) before the first pinned
        # decision, so that the decision itself needs no Triton.
        self.arch: str | None = None
        self.config_defaults: dict | None = None


class Process:
    """What this process carries out under one policy.  Never changed across policies."""

    __slots__ = ("policy", "generation", "tables", "warned", "log", "lasting")

    def __init__(self, policy, generation: int, lasting: Lasting):
        self.policy = policy  # an AutotunePolicy, or None: every autotuner runs as Triton's own
        self.generation = generation  # per-autotuner state built under an older one is rebuilt
        self.tables: dict[str, dict] = {}  # arch -> {kernel: {key: entry}}
        self.warned: set[str] = set()  # warnings given once under this policy
        self.log = ChoiceLog()  # what was chosen under this policy
        self.lasting = lasting


now = Process(None, 0, Lasting())
# Held while ``now`` is replaced and while a first choice is noted, so a choice is noted in the log
# of the policy that made it, or not made at all.  Re-entrant: a replacement may be asked for
# from inside a first launch (the determinism request found there).
swap_lock = threading.RLock()


def replace(policy) -> Process:
    """Make ``policy`` the one carried out, with a new log and tables, in one assignment."""
    global now
    with swap_lock:
        now = Process(policy, now.generation + 1, now.lasting)
        return now


# --- notes into the current state (the adapters' one way in) ------------------------------------

def note_choice(arch: str, qualified: str, key: str, signature: str, how: str) -> None:
    now.log.note_choice(arch, qualified, key, signature, how)


def note_record(arch, qualified, key, config, signature, how, timings, candidates) -> None:
    now.log.note_record(arch, qualified, key, config, signature, how, timings, candidates)


def note_ungoverned(qualified: str, why: str) -> bool:
    """Note a kernel whose config choice the guard did not govern; False when already noted."""
    return now.lasting.ungoverned.note(qualified, why)


def choice_log() -> dict[str, str]:
    """The per-(kernel, key) choices this process has made so far under the installed policy."""
    return now.log.copy()


def choice_digest() -> str:
    """A hash of every choice this process has made so far (equal logs, equal digests)."""
    return digest_of(choice_log())


def ungoverned() -> dict[str, str]:
    """The kernels whose choices this process made without the guard governing them, and why."""
    return now.lasting.ungoverned.copy()


def take_unverified() -> dict[str, str]:
    """The entries made since the previous cross-rank check (verification consumes them)."""
    return now.log.take_unverified()
