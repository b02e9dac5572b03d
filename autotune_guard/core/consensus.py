"""Consensus's rules: one rank tunes a (kernel, key) for the whole job and the others follow,
through the job's c10d Store. Here are the rules alone, as plain functions of their inputs: the
names of decisions and of their Store keys, the published values (encode, decode), how a rank
follows a published winner, a claimer's identity, the announced list's new names. No thread, no
clock, no environment, no Store request: ``deciding.consensus`` is the engine that talks to
Stores with them (claims, heartbeats, waits, batches), and the tests drive the rules directly.

A decision is one (arch, kernel, tuning key).  Its Store name deliberately leaves the candidate
list out: ranks whose candidate lists differ for the same key must meet under the same name, so
that the waiter sees the claimer's list hash in the published value and refuses, instead of both
tuning under different names and silently running different configs.

Over 350 lines: both protocols' values (one claimer, split) with their checks, side by side: ranks decode
what others encode.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Callable, Mapping, Sequence

from .consensus_text import _few, claimer_rank, death_message, describe_claimer, store_lost_message, timeout_message
from .errors import ConsensusError

PAYLOAD_FORMAT = "autotune_guard.consensus/2"
NAMESPACE = "consensus/"
STORE_PREFIX = "autotune_guard/"
ANNOUNCED = "announced"  # under the attempt's prefix: the names of published decisions, one a line
SPREAD_FROM = 32  # waiters of one decision beyond this many wake spread out, not in one instant
SPREAD_S = 25e-6  # the n-th waiter reads the winner within n x this after it was published


def decision_name(arch: str, qualified: str, key_text: str) -> str:
    """The Store name of one decision.  Hashed: tuning keys can be long and contain anything."""
    digest = hashlib.sha256(f"{arch}|{qualified}|{key_text}".encode()).hexdigest()[:32]
    return NAMESPACE + digest


def candidates_hash(signatures: Sequence[str]) -> str:
    """Identity of a candidate list after pruning.  Order-insensitive: which configs are on offer
    is what matters to a waiter that pins the winner by signature; duplicates count once."""
    text = "\n".join(sorted(set(signatures)))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def encode_winner(rank: int, signature: str, signatures: Sequence[str], config: dict | None = None) -> str:
    """What a claimer publishes after tuning: the winner and the hash of its candidate list; the
    list itself goes under a key of its own, read only by a rank whose hash differs. ``config``: the
    winner's descriptor, where an open search found it outside the list (a follower adopts it)."""
    payload = {"format": PAYLOAD_FORMAT, "rank": rank, "winner": signature,
               "candidates_hash": candidates_hash(signatures)}
    if config is not None:
        payload["config"] = config
    return json.dumps(payload, sort_keys=True)


def encode_failure(rank: int, error: str, relayed: bool = False) -> str:
    """What a claimer publishes when its tuning raised: waiters fail now, not at the timeout.
    ``relayed``: the error is the job's decision's, which this rank asked for its node."""
    payload = {"format": PAYLOAD_FORMAT, "rank": rank, "error": error}
    if relayed:
        payload["relayed_by"] = rank
    return json.dumps(payload, sort_keys=True)


def encode_death(claimer: str, silent_s: float, seen: str = "heartbeat") -> str:
    """What a waiter publishes when the claimer died: every waiter fails now.  ``seen``:
    ``process`` (its process is gone, seen on its machine) or ``heartbeat`` (silent ``silent_s``)."""
    return json.dumps({"format": PAYLOAD_FORMAT, "rank": claimer_rank(claimer), "claimer": claimer,
                       "died": round(silent_s, 1), "seen": seen}, sort_keys=True)


# The fields of a published value a reader uses, and the types each may have.
_FIELDS = {"rank": (int, str), "winner": (str,), "candidates_hash": (str,), "error": (str,), "claimer": (str,),
           "died": (int, float), "relayed_by": (int,), "seen": (str,), "config": (dict,)}


def decode(text: str, what: str, key: str = "") -> dict:
    """A published value (``key``: its Store key, for errors); ConsensusError when it is not one
    this version understands, naming the key and what was found."""
    where = f"the job's Store holds at {key or 'its key'}"
    try:
        payload = json.loads(text)
    except ValueError:
        payload = None
    if not isinstance(payload, dict) or payload.get("format") != PAYLOAD_FORMAT:
        raise ConsensusError(f"autotune_guard consensus: {what}: {where} a value this version cannot read "
                             f"({text[:120]!r}); are all ranks running the same autotune_guard?")
    for field, types in _FIELDS.items():
        value = payload.get(field)
        if field in payload and (not isinstance(value, types) or isinstance(value, bool) or
                                 (isinstance(value, float) and not math.isfinite(value))):
            raise ConsensusError(f"autotune_guard consensus: {what}: {where} a value whose {field!r} is "
                                 f"{_found(value)}, not {' or '.join(t.__name__ for t in types)}; are all ranks "
                                 "running the same autotune_guard, and is anything else writing to the Store?")
    if not any(field in payload for field in ("winner", "error", "died")):
        raise ConsensusError(f"autotune_guard consensus: {what}: {where} a value with no winner, error or death "
                             f"notice ({text[:120]!r}); are all ranks running the same autotune_guard?")
    return payload


def decode_candidates(text: str, what: str, key: str) -> list[str]:
    """The claimer's published candidate list; ConsensusError naming the key when it is not one."""
    try:
        found = json.loads(text)
    except ValueError:
        found = text[:120]
    if not isinstance(found, list) or not all(isinstance(item, str) for item in found):
        raise ConsensusError(f"autotune_guard consensus: {what}: the job's Store holds at {key} {_found(found)}, not "
                             "a list of config signatures; are all ranks running the same autotune_guard?")
    return found


def _found(value) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:80]}{'...' if len(text) > 80 else ''}"


def follow(payload: dict, signatures: Sequence[str], what: str, theirs: Sequence[str] | None = None,
           adopt: Callable[[dict], int] | None = None) -> int:
    """Index (into ``signatures``, this rank's live candidates after pruning) of the published
    winner; raises ConsensusError when the claimer failed or died, or the candidate lists differ
    (``theirs``: the claimer's list, when it could be read, to name the differences). ``adopt(config,
    signature)``: an open search's (a family whose search finds configs outside any list, Helion's):
    a published winner outside the list, with its config, becomes a candidate, whose index it returns."""
    claimer = payload.get("rank", "?")
    if "died" in payload:
        raise ConsensusError(death_message(what, payload))
    if "error" in payload and "relayed_by" in payload:
        raise ConsensusError(f"{payload['error']} (as rank {claimer} learned it from the job for this node)")
    if "error" in payload:
        raise ConsensusError(f"autotune_guard consensus: {what}: rank {claimer}, which claimed this tuning, failed "
                             f"while timing ({payload['error']}); this rank will not pick a config of its own")
    mine = candidates_hash(signatures)
    if payload.get("candidates_hash") != mine:
        theirs = set(theirs or ())
        ours = set(signatures)
        raise ConsensusError(
            f"autotune_guard consensus: {what}: this rank's candidates after pruning differ from those rank "
            f"{claimer} tuned (hash {mine} vs {payload.get('candidates_hash')}); only here: "
            f"{_few(ours - theirs)}; only on rank {claimer}: {_few(theirs - ours)}. The kernel's pruning "
            "(early_config_prune, perf_model/top_k) or its configs must not depend on the rank")
    winner = payload.get("winner")
    if winner not in signatures and adopt is not None and isinstance(payload.get("config"), dict):
        return adopt(payload["config"], winner)
    if winner not in signatures:  # equal hashes make this unreachable short of a hash collision
        raise ConsensusError(f"autotune_guard consensus: {what}: rank {claimer}'s winner {winner} is not a "
                             "candidate on this rank")
    return list(signatures).index(winner)



# --- the protocol's Store layout ------------------------------------------------------------------
# Per decision, under STORE_PREFIX + the attempt + the decision name (``decision_key``):
#   claim       compare_set from "" to the claimer's identity: claiming and naming are one request
#   beat        the claimer's heartbeat counter, bumped every BEAT_S while it tunes
#   waiters     add(1) by each waiter, which then blocks in wait() while a thread of its process
#               looks at the claimer every BEAT_S (``deciding.liveness.Watch``)
#   candidates  the claimer's candidate list (read only on a hash mismatch)
#   result      the winner (or the claimer's error, or a waiter's death notice), set once
# and, per attempt, ``announced``: the names of decided keys, appended by claimers (``deciding.batch``).
# A waiter makes 4 requests per decision whatever the tuning time (claim, waiters, wait, get), its
# watch thread one beat read per BEAT_S where the claimer is on another machine (none on this one),
# none for a key it learned in a batch, and now and then 3 for reading ``announced``.
# Where the job's Store comes with a node's (``store.node_store``: torchrun's local ranks,
# ``adapters.distributed.node``), the same protocol runs twice: on the node's Store among its
# ranks, and on the job's by the node's first rank only.


def attempt_scope(environ: Mapping[str, str]) -> str:
    """This run and restart in Store names, from the launcher's variables in ``environ`` (the
    caller's ``os.environ``): torchrun's agent keeps its Store across restarts, so the names of
    one attempt must never meet those of the next (a dead claimer's claim included)."""
    return f"{environ.get('TORCHELASTIC_RUN_ID', 'none')}/{environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"


SETTINGS = "settings"  # under the attempt's prefix: the protocol's settings, set by the first rank to decide


def encode_settings(rank: int, split: bool) -> str:
    """The settings that change where ranks meet (split decisions lie under keys of their own):
    the first rank of the attempt to decide a key sets them, every other rank compares."""
    return json.dumps({"format": PAYLOAD_FORMAT, "rank": rank, "AUTOTUNE_CONSENSUS_SPLIT": "1" if split else "0"},
                      sort_keys=True)


def settings_mismatch(mine: str, theirs: str, key: str) -> str | None:
    """What differs between this rank's settings and those the attempt agreed (None: nothing),
    naming the Store key; a value no rank wrote is named as such."""
    try:
        found = json.loads(theirs)
    except ValueError:
        found = None
    ours = json.loads(mine)
    if not isinstance(found, dict) or found.get("format") != PAYLOAD_FORMAT:
        return (f"autotune_guard consensus: the job's Store holds at {key} a value this version cannot read "
                f"({theirs[:120]!r}); are all ranks running the same autotune_guard?")
    differ = [name for name in ours if name.startswith("AUTOTUNE_") and found.get(name) != ours[name]]
    if not differ:
        return None
    said = ", ".join(f"{name}={ours[name]} on this rank (rank {ours['rank']}) but {found.get(name)!r} on rank "
                     f"{found.get('rank', '?')}" for name in differ)
    return (f"autotune_guard consensus: {said}, the first rank of the job to decide a key (the job's Store, {key}): "
            "every rank of a job must have the same setting, or consensus ranks meet under different Store keys "
            "and each decides alone; set it the same on every rank")


def attempt_prefix(environ: Mapping[str, str]) -> str:
    """Where one attempt's decisions lie in the job's Store."""
    return f"{STORE_PREFIX}{attempt_scope(environ)}"


def decision_key(prefix: str, name: str) -> str:
    """The Store key under which one decision's parts lie (``/claim``, ``/result``, ...)."""
    return f"{prefix}/{name}"


def claim_value(identity: str, carried: str | None = None) -> str:
    """What a claimer sets at ``/claim``: its identity, and a table's winner ``carried`` with it (one
    request decides for the job untimed)."""
    return identity if carried is None else f"{identity}\n{carried}"


def parse_claim(holder: str) -> tuple[str, str]:
    """(the claimer's identity, the winner its claim carried or "")."""
    identity, _, carried = holder.partition("\n")
    return identity, carried


def identity(rank: int, pid: int, host: str, claim: str, machine: str, started: str) -> str:
    """A claimer's identity: unique per claim (two threads of one rank are two claimers), readable
    in errors: ``rank|pid|host|claim|machine.start``. ``machine``: this boot and pid namespace ("" where
    the OS does not say); ``started``: the process's start time, which with the pid names one process."""
    return f"{rank}|{pid}|{host}|{claim}|{machine}.{started}"


def identity_process(identity_text: str, machine: str) -> tuple[int, str] | None:
    """(pid, start time) of the claimer ``identity_text`` names when it ran on ``machine`` (this
    one); None when it ran elsewhere, or where the OS does not name machines: its heartbeat decides."""
    parts = identity_text.split("|")
    if len(parts) < 5 or not machine or not parts[4].startswith(machine + ".") or not parts[1].isdigit():
        return None
    return int(parts[1]), parts[4][len(machine) + 1:]


def spread_bound(arrived: int) -> float:
    """Seconds within which the ``arrived``-th waiter reads a published winner: 0 for the first
    SPREAD_FROM, so that thousands of waiters do not read it in one instant."""
    return arrived * SPREAD_S if arrived > SPREAD_FROM else 0.0


def text(value) -> str:
    """A Store value as text. Undecodable bytes are shown, not raised: the reader names the value
    as one it cannot read."""
    return value.decode(errors="backslashreplace") if isinstance(value, (bytes, bytearray)) else str(value)


def announced_names(listed: str, known, skipped, most: int) -> list[str]:
    """The names in the announced list ``listed`` not in ``known`` (learned) or ``skipped`` (found
    without a result before), in the order announced, at most ``most``."""
    return [n for n in dict.fromkeys(listed.split("\n")) if n and n not in known and n not in skipped][:most]


def is_winner(value: str) -> bool:
    """Whether a published value is a winner a batch may learn. Checked in full by the reader
    that uses it; a failure or a death notice is read where it is published, and named there."""
    try:
        payload = json.loads(value)
    except ValueError:
        return False
    return isinstance(payload, dict) and "winner" in payload


# --- split tuning (AUTOTUNE_CONSENSUS_SPLIT=1): the candidates divided among the ranks that arrived ----
# Per decision, under ``decision_key(...) + SPLIT``:
#   arrivals        add(1) by each rank that reaches the decision: its slot (1, 2, ...), in arrival order
#   member/<slot>   the identity of the slot's rank (``identity``), for its liveness
#   roster          set once (compare_set) when the join window closes: the slots that take shares and
#                   the candidate list they divide (``encode_roster``); a slot after them only reads
#   holder/<slot>/<n>  the n-th rank that took over a dead holder's share (compare_set)
#   beat/<slot>     the heartbeat of whoever times the slot's share
#   share/<slot>    the share's timings, or the error that ended its timing (``encode_share``)
SPLIT = "/split"
SPLIT_FORMAT = "autotune_guard.split/1"
MAX_MEMBERS = 1 << 20  # slots of one roster: far above any job's ranks


def split_shares(name: str, signatures: Sequence[str], members: int) -> dict[int, list[str]]:
    """Which candidates each of ``members`` slots (1..members) times: the candidates in signature
    order dealt round the slots, starting at a slot the decision's name picks (so that slot 1, the
    first to arrive, is not always the one with the extra candidate). The same on every rank."""
    ordered = sorted(set(signatures))
    members = max(1, members)
    start = int(hashlib.sha256(name.encode()).hexdigest()[:8], 16) % members
    shares: dict[int, list[str]] = {slot: [] for slot in range(1, members + 1)}
    for position, sig in enumerate(ordered):
        shares[(start + position) % members + 1].append(sig)
    return shares


def encode_roster(members: int, signatures: Sequence[str]) -> str:
    """What closes the join window: how many slots take shares, and the list they divide."""
    return json.dumps({"format": SPLIT_FORMAT, "members": members, "candidates": sorted(set(signatures)),
                       "candidates_hash": candidates_hash(signatures)}, sort_keys=True)


def encode_share(slot: int, rank: int, timings: Mapping[str, float] | None, error: str | None = None,
                 timer: str | None = None) -> str:
    """One share's published timings (milliseconds, the median of each candidate), or its error;
    ``timer``: the timer that took them where it named itself (``wall-clock``: not GPU timings)."""
    payload = {"format": SPLIT_FORMAT, "slot": slot, "rank": rank}
    if error is not None:
        payload["error"] = error
    else:
        payload["timings"] = {sig: (t if math.isfinite(t) else None) for sig, t in timings.items()}
    if timer is not None:
        payload["timer"] = timer
    return json.dumps(payload, sort_keys=True)


def share_timer(payload: dict) -> str | None:
    """The timer a decoded share names, where it names one as text."""
    timer = payload.get("timer")
    return timer if isinstance(timer, str) else None


def encode_final(rank: int, winner: str, measured: Mapping | None) -> str:
    """The split decision's winner, chosen by the one rank that timed the finalists again."""
    return json.dumps({"format": SPLIT_FORMAT, "rank": rank, "winner": winner, "measured": measured}, sort_keys=True)


def final_winner(payload: dict, signatures: Sequence[str], what: str, key: str) -> str:
    """The winner a decoded final names; ConsensusError when it is none of the candidates."""
    if "error" in payload:
        raise ConsensusError(f"autotune_guard consensus: {what}: rank {payload.get('rank', '?')} failed while timing "
                             f"the finalists again ({payload['error']}); this rank will not pick a config of its own")
    winner = payload.get("winner")
    if winner not in signatures:
        raise ConsensusError(f"autotune_guard consensus: {what}: the job's Store holds at {key} a winner that is none "
                             f"of this rank's candidates ({str(winner)[:120]!r})")
    return winner


def decode_split(text_value: str, what: str, key: str, field: str) -> dict:
    """A roster or a share read from the Store; ConsensusError naming the key when it is not one.
    Values come from other processes: a roster must be self-consistent (members a positive count,
    its candidates the list its hash names), or a rank would time a share it does not hold."""
    try:
        payload = json.loads(text_value)
    except ValueError:
        payload = None
    if not isinstance(payload, dict) or payload.get("format") != SPLIT_FORMAT or not (
            field in payload or "error" in payload):
        raise ConsensusError(f"autotune_guard consensus: {what}: the job's Store holds at {key} a value this version "
                             f"cannot read ({str(text_value)[:120]!r}); are all ranks running the same autotune_guard "
                             "with the same AUTOTUNE_CONSENSUS_SPLIT?")
    if field == "members":
        members, candidates = payload.get("members"), payload.get("candidates")
        if not (isinstance(members, int) and not isinstance(members, bool) and 0 < members <= MAX_MEMBERS
                and isinstance(candidates, list) and all(isinstance(c, str) for c in candidates)
                and payload.get("candidates_hash") == candidates_hash(candidates)):
            raise ConsensusError(f"autotune_guard consensus: {what}: the job's Store holds at {key} a roster that is not "
                                 f"one a rank wrote ({str(text_value)[:120]!r}: members must be 1 to {MAX_MEMBERS}, "
                                 "candidates the list its candidates_hash names); is anything else writing to the Store?")
    return payload


def share_timings(payload: dict, what: str, key: str, share: Sequence[str] | None = None) -> dict[str, float]:
    """The timings a decoded share holds (an unmeasurable candidate: infinity); ConsensusError when
    its rank failed while timing, or the value is malformed: a timing not a number of milliseconds
    (negative, boolean), or a candidate outside ``share`` (the slot's share of the roster)."""
    if "error" in payload:
        raise ConsensusError(f"autotune_guard consensus: {what}: rank {payload.get('rank', '?')} failed while timing "
                             f"its share of the candidates ({payload['error']}); this rank will not pick a config of "
                             "its own")
    found = payload.get("timings")
    if not isinstance(found, dict) or not all(
            t is None or isinstance(t, (int, float)) and not isinstance(t, bool) and t >= 0 for t in found.values()):
        raise ConsensusError(f"autotune_guard consensus: {what}: the job's Store holds at {key} timings that are not "
                             "numbers of milliseconds (0 or more) by signature; is anything else writing to the Store?")
    outside = sorted(set(found) - set(share)) if share is not None else []
    if outside:
        raise ConsensusError(f"autotune_guard consensus: {what}: the job's Store holds at {key} timings of "
                             f"{_few([repr(sig)[:80] for sig in outside])}, which are not in that slot's share of the candidates; is anything "
                             "else writing to the Store?")
    return {sig: math.inf if t is None else float(t) for sig, t in found.items()}
