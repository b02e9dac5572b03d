"""AUTOTUNE_MODE=consensus: one timing pass per (kernel, key) for the whole job, the same choice on
every rank, by construction.

Real ranks over gloo (torchrun, or ranks started by hand where torchrun would tear the interesting
ranks down), real Triton kernels under TRITON_INTERPRET=1 whose timers return random times, so
that ranks left to themselves disagree (each job carries a control kernel that shows it).  The
naming and payload rules are plain functions, tested as such; the Store helpers run against a real
TCPStore in a cold process.
"""

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time

import pytest

from support import TESTS, clean_env, last_json, rank_file, run_python, torchrun

from autotune_guard.core import consensus, schema as files
from autotune_guard.core.errors import ConsensusError
from autotune_guard.deciding import liveness

PROGS = os.path.join(TESTS, "progs")
F32 = "torch.float32"
ADD = "kernels.demo.add_kernel"
SCALE = "kernels.demo.scale_kernel"
_RANK_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID",
              "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")


def env_for(**settings):
    """A consensus-mode environment with no rank of its own (the launcher, or ``settings``, sets it)."""
    env = clean_env(AUTOTUNE_MODE="consensus")
    for name in _RANK_VARS:
        env.pop(name, None)
    env.update({k: str(v) for k, v in settings.items()})
    return env


def key_of(kernel, n):
    return f"{n},{F32},{F32},{F32}" if kernel == "add" else f"{n},{F32},{F32}"


# --- plain rules: names, payloads, refusals ---------------------------------------------------

WHAT = "kernel pkg.mod.k key (1024,torch.float16) arch sm90"
SIGS = ["BLOCK=32,num_warps=4", "BLOCK=64,num_warps=4", "BLOCK=128,num_warps=8"]


def test_a_decision_is_named_by_arch_kernel_and_key_only():
    name = consensus.decision_name("sm90", "pkg.mod.k", "1024,torch.float16")
    assert name.startswith(consensus.NAMESPACE) and name == consensus.decision_name("sm90", "pkg.mod.k", "1024,torch.float16")
    others = {consensus.decision_name(*parts) for parts in [("sm80", "pkg.mod.k", "1024,torch.float16"),
                                                            ("sm90", "pkg.mod.j", "1024,torch.float16"),
                                                            ("sm90", "pkg.mod.k", "2048,torch.float16")]}
    assert name not in others and len(others) == 3
    # The candidate list is not part of the name (it travels in the value, so differing lists
    # meet and are refused); its hash ignores order and duplicates.
    assert consensus.candidates_hash(SIGS) == consensus.candidates_hash(SIGS[::-1] + SIGS[:1])
    assert consensus.candidates_hash(SIGS) != consensus.candidates_hash(SIGS[1:])


def test_a_published_winner_is_followed_by_signature():
    published = consensus.encode_winner(3, SIGS[2], SIGS)
    payload = consensus.decode(published, WHAT)
    # minimal: the winner and the hash of the candidate list, not the list
    assert set(payload) == {"format", "rank", "winner", "candidates_hash"} and payload["rank"] == 3
    assert consensus.follow(payload, SIGS, WHAT) == 2
    assert consensus.follow(payload, SIGS[::-1], WHAT) == 0  # another order of the same candidates


def test_differing_candidates_claimer_failure_and_garbage_are_refused_with_names():
    payload = consensus.decode(consensus.encode_winner(1, SIGS[0], SIGS), WHAT)
    with pytest.raises(ConsensusError) as info:  # the claimer's list, read from its own key, names the differences
        consensus.follow(payload, SIGS[1:] + ["BLOCK=256,num_warps=8"], WHAT, theirs=SIGS)
    message = str(info.value)
    assert WHAT in message and "rank 1" in message and "differ" in message
    assert "only here: BLOCK=256,num_warps=8" in message and "only on rank 1: BLOCK=32,num_warps=4" in message
    # A claimer whose tuning raised tells the waiters so, instead of leaving them to time out.
    failed = consensus.decode(consensus.encode_failure(2, "RuntimeError('out of memory')"), WHAT)
    with pytest.raises(ConsensusError, match=r"rank 2, which claimed this tuning, failed while timing \(RuntimeError"):
        consensus.follow(failed, SIGS, WHAT)
    for garbage in ("", "not json", json.dumps({"format": "other/1"}), "[1, 2]"):
        with pytest.raises(ConsensusError, match="cannot read"):
            consensus.decode(garbage, WHAT)
    message = consensus.timeout_message(WHAT, 4, 2.5)
    assert WHAT in message and "rank 4" in message and "2.5 s" in message and "AUTOTUNE_CONSENSUS_TIMEOUT" in message
    assert "died before naming itself" in consensus.timeout_message(WHAT, None, 600)
    identity = liveness.claimer_identity(7)
    assert re.search(r"rank 7 \(pid \d+ on [^)]+\) claimed", consensus.timeout_message(WHAT, identity, 600))
    died = consensus.decode(consensus.encode_death(identity, 5.4), WHAT)
    with pytest.raises(ConsensusError, match=r"rank 7 \(pid \d+ on [^)]+\), which claimed this tuning, stopped "
                                             r"signalling that it is alive \(5.4 s without a heartbeat, "
                                             r"AUTOTUNE_CONSENSUS_DEAD_AFTER\): it died, lost its host or lost the Store"):
        consensus.follow(died, SIGS, WHAT)
    ended = consensus.decode(consensus.encode_death(identity, 0, "process"), WHAT)
    with pytest.raises(ConsensusError, match=r"rank 7 \(pid \d+ on [^)]+\), which claimed this tuning, ended \(its "
                                             r"process is gone, seen on its machine\) before publishing a winner"):
        consensus.follow(ended, SIGS, WHAT)



def test_the_rules_of_names_claims_identities_and_batches_are_plain_functions():
    # attempts: the launcher's variables, given by the caller (the core reads no environment)
    assert consensus.attempt_scope({}) == "none/0"
    assert consensus.attempt_prefix({"TORCHELASTIC_RUN_ID": "j", "TORCHELASTIC_RESTART_COUNT": "2"}) == \
        consensus.STORE_PREFIX + "j/2"
    # a claim carries a table's winner in its one request, or the identity alone
    assert consensus.parse_claim(consensus.claim_value("0|1|h|c|m.5")) == ("0|1|h|c|m.5", "")
    assert consensus.parse_claim(consensus.claim_value("0|1|h|c|m.5", '{"w": 1}')) == ("0|1|h|c|m.5", '{"w": 1}')
    # an identity names its process only on its own machine; elsewhere the heartbeat decides
    me = consensus.identity(3, 42, "host", "abcd", "boot.ns", "777")
    assert consensus.claimer_rank(me) == 3 and consensus.describe_claimer(me) == "rank 3 (pid 42 on host)"
    assert consensus.identity_process(me, "boot.ns") == (42, "777")
    assert consensus.identity_process(me, "other.ns") is None and consensus.identity_process(me, "") is None
    assert consensus.identity_process("3|x|host", "boot.ns") is None
    # waiters spread their reads only beyond SPREAD_FROM; the announced list gives new names in order, once
    assert consensus.spread_bound(consensus.SPREAD_FROM) == 0 and consensus.spread_bound(1000) > 0
    assert consensus.announced_names("a\nb\na\n\nc\nd\n", {"b"}, {"c"}, 5) == ["a", "d"]
    assert consensus.announced_names("a\nb\nc\n", set(), set(), 2) == ["a", "b"]
    assert consensus.is_winner(consensus.encode_winner(0, SIGS[0], SIGS))
    assert not consensus.is_winner(consensus.encode_failure(0, "boom")) and not consensus.is_winner("{bad")
    assert consensus.text(b"\xffok") == "\\xffok" and consensus.text("plain") == "plain"


def test_the_engine_keeps_its_state_per_store_object_on_the_guard_and_renews_it_after_fork():
    from autotune_guard.deciding import consensus as engine, stores
    from autotune_guard.runtime import Guard, current

    class Store:  # a client: compared by identity, never by value
        def __eq__(self, other):
            return True
        __hash__ = None

    class Bare:  # takes no weak reference: its entry keeps it
        __slots__ = ()

    kept = stores.ByStore()
    one, two, bare = Store(), Store(), Bare()
    assert kept.get(one, lambda: "one") == "one" and kept.get(two, lambda: "two") == "two"
    assert kept.get(one) == "one" and kept.get(bare, lambda: "bare") == "bare" and kept.get(bare) == "bare"
    del one  # gone with its Store: the mapping keeps none alive, and an id is never another Store's
    assert len(kept._entries) == 2
    kept.keep_only([two])
    assert kept.get(two) == "two" and kept.get(bare) is None
    assert engine.state() is current().held(engine.HELD_AS, engine.ConsensusState)
    guard = Guard()  # a Guard of its own: the process's is left as it is
    state = guard.held(engine.HELD_AS, engine.ConsensusState)
    lock, local, learned = state.beats._lock, state.clones._local, state.learned
    guard.after_fork()  # what the Guard's one fork hook runs in a child
    assert guard.held(engine.HELD_AS, engine.ConsensusState) is state and state.learned is learned
    assert state.beats._lock is not lock and state.clones._local is not local

# --- consensus.decide against a real TCPStore, threads as ranks ----------------------------------

DECIDE_RUN = """
import collections, json, threading, time
from datetime import timedelta
import torch.distributed as dist
from autotune_guard.deciding import consensus as c
from autotune_guard.adapters import distributed as d
out = {"job_store": repr(d.job_store())}  # not distributed: no Store, and no error
server = dist.TCPStore("127.0.0.1", 0, 1, True, timedelta(seconds=30), wait_for_workers=False)
base = dist.PrefixStore("default_pg", dist.TCPStore("127.0.0.1", server.port, 1, False, timedelta(seconds=30)))
calls = collections.Counter()

class Counting:  # counts the Store requests each thread makes (clone() opens a connection: not counted)
    def __init__(self, store):
        self.store = store
    def __getattr__(self, name):
        method = getattr(self.store, name)
        def call(*args):
            if name == "clone":
                return Counting(method(*args))
            calls[threading.current_thread().name] += 1
            return method(*args)
        return call

store = Counting(base)
SIGS = ["BLOCK=32", "BLOCK=64", "BLOCK=128"]

def run_ranks(name, tune, ranks, timeout, signatures=lambda r: SIGS, during=None):
    results, go = {}, threading.Barrier(ranks)
    def rank(r):
        go.wait()
        start = time.monotonic()
        try:
            results[r] = ["ok", list(c.decide(store, "kernel k key (1) arch a", name, r, signatures(r), tune, timeout))]
        except Exception as exc:
            results[r] = [type(exc).__name__, str(exc)]
        results[r].append(round(time.monotonic() - start, 2))
    threads = [threading.Thread(target=rank, args=(r,), name=f"{name}-{r}") for r in range(ranks)]
    [t.start() for t in threads]
    if during:
        during()
    [t.join() for t in threads]
    return [results[r] for r in range(ranks)]

tuned = []
def tune():
    tuned.append(1)
    time.sleep(1.0)
    return "BLOCK=64", "launch result"
out["agree"] = run_ranks("consensus/a", tune, 8, 30, lambda r: SIGS[::-1] if r % 2 else SIGS)
out["tuned"] = len(tuned)
out["requests"] = sorted(n for t, n in calls.items() if t.startswith("consensus/a-"))
def broken():
    time.sleep(0.5)
    raise RuntimeError("out of memory")
out["failed"] = run_ranks("consensus/b", broken, 3, 30)
def slow():
    time.sleep(3.0)
    return "BLOCK=32"
out["timeout"] = run_ranks("consensus/c", slow, 3, 1.0)
out["differ"] = run_ranks("consensus/d", lambda: "BLOCK=32", 2, 30, lambda r: SIGS if r == 0 else SIGS[1:] + ["BLOCK=256"])
def lose_store():
    time.sleep(0.5)
    global server
    del server
out["dead"] = run_ranks("consensus/e", slow, 3, 30, during=lose_store)
print(json.dumps(out))
"""


@pytest.mark.slow
def test_decide_one_tunes_the_others_follow_with_4_requests_and_every_failure_is_named():
    out = last_json(run_python(DECIDE_RUN, env=env_for()).stdout)
    assert out["job_store"] == "None"
    # 8 threads as ranks, candidate lists in two orders: exactly one tuned; all follow its winner
    assert out["tuned"] == 1
    tuned = [r for r in out["agree"] if r[1][1] is True]
    assert len(tuned) == 1 and tuned[0][1][2] == ["BLOCK=64", "launch result"]
    for status, (index, tuned_here, result), _ in out["agree"]:
        assert status == "ok" and tuned_here == (result is not None)
    assert [r[1][0] for r in out["agree"]] == [1, 1] * 4  # BLOCK=64 in either order
    # event-driven: every waiter made 4 requests (its watch thread none: the claimer is on this
    # machine), the claimer 5 (claim, first beat, candidates, result, announce), however long it tuned
    assert out["requests"] == [4] * 7 + [5], out["requests"]
    # the claimer's tuning raised: it sees its own error, the waiters its name and reason at once
    assert sum(r[0] == "RuntimeError" and "out of memory" in r[1] for r in out["failed"]) == 1
    for status, message, seconds in out["failed"]:
        if status == "ConsensusError":
            assert "kernel k key (1) arch a" in message and "failed while timing (RuntimeError('out of memory')" in message
            assert seconds < 3
    assert sum(r[0] == "ConsensusError" for r in out["failed"]) == 2
    # a live claimer slower than the timeout: both kinds of waiter (watching, blocked) time out, naming it
    waiters = [r for r in out["timeout"] if r[0] == "ConsensusError"]
    assert len(waiters) == 2 and sum(r[0] == "ok" for r in out["timeout"]) == 1
    for _, message, seconds in waiters:
        assert re.search(r"rank \d \(pid \d+ on [^)]+\) claimed this tuning but published no winner within 1 s", message)
        assert 1 <= seconds < 3
    # differing candidate lists: refused, the differences named from the claimer's published list
    refused = [r for r in out["differ"] if r[0] == "ConsensusError"]
    assert len(refused) == 1 and all("differ" in m and "BLOCK=256" in m for _, m, _ in refused)
    # the Store's host goes away while they wait: every waiter says so within seconds
    lost = [r for r in out["dead"] if r[0] == "ConsensusError" and "the job's Store failed" in r[1]]
    assert len(lost) >= 2 and all(seconds < 5 for _, _, seconds in lost), out["dead"]


BATCH_RUN = """
import collections, json, os, threading
from datetime import timedelta
import torch.distributed as dist
from autotune_guard.core import consensus as rules
from autotune_guard.deciding import consensus as c
server = dist.TCPStore("127.0.0.1", 0, 1, True, timedelta(seconds=30), wait_for_workers=False)
calls = collections.Counter()

class Counting:  # one client of the job's Store, counting its requests under the current label
    label = ""
    def __init__(self):
        self.store = dist.TCPStore("127.0.0.1", server.port, 1, False, timedelta(seconds=30))
    def __getattr__(self, name):
        method = getattr(self.store, name)
        def call(*args):
            calls[Counting.label] += 1
            return method(*args)
        return call

SIGS = ["BLOCK=32", "BLOCK=64", "BLOCK=128"]
names = [rules.decision_name("a", "k", str(n)) for n in range(10)]
claimer, follower = Counting(), Counting()
for name in names[:8]:  # rank 0 is ahead: it tunes 8 keys before rank 1 reaches the first
    c.decide(claimer, "k", name, 0, SIGS, lambda: "BLOCK=64", 30)
def broken():
    raise RuntimeError("out of memory")
try:
    c.decide(claimer, "k", names[8], 0, SIGS, broken, 30)
except RuntimeError:
    pass
out = {"follow": [], "requests": []}
for n, name in enumerate(names[:8]):
    Counting.label = f"follow-{n}"
    out["follow"].append(list(c.decide(follower, "k", name, 1, SIGS, lambda: "BLOCK=32", 30)))
    out["requests"].append(calls[Counting.label])
Counting.label = "failed"
try:
    c.decide(follower, "k", names[8], 1, SIGS, lambda: "BLOCK=32", 30)
except Exception as exc:
    out["failed"] = [type(exc).__name__, str(exc), calls["failed"]]
Counting.label = "differ"
try:
    c.decide(follower, "k", names[5], 1, SIGS[:2] + ["BLOCK=256"], lambda: "BLOCK=32", 30)
except Exception as exc:
    out["differ"] = [type(exc).__name__, str(exc), calls["differ"]]
os.environ["TORCHELASTIC_RESTART_COUNT"] = "1"  # the next attempt learns nothing of this one's
out["restart"] = list(c.decide(follower, "k", names[0], 1, SIGS, lambda: "BLOCK=32", 30))
print(json.dumps(out))
"""


@pytest.mark.slow
def test_a_rank_behind_the_claimer_learns_its_winners_in_one_batch():
    out = last_json(run_python(BATCH_RUN, env=env_for()).stdout)
    assert [f[:2] for f in out["follow"]] == [[1, False]] * 8  # BLOCK=64 everywhere, tuned nowhere
    # the first key: its 4 requests, then one read of the announced list (4: check, get, check, multi_get) brings the other 7,
    # which then cost no request (without batches: 4 each, 32 in all)
    assert out["requests"][0] == 8 and sum(out["requests"]) <= 16, out["requests"]
    assert sum(n == 0 for n in out["requests"]) >= 5, out["requests"]
    # a failure is never learned: it is read where it was published, and named
    status, message, requests = out["failed"]
    assert status == "ConsensusError" and "failed while timing" in message and "out of memory" in message and requests >= 3
    # a learned winner whose candidate list differs from this rank's asks the Store, to name the difference
    status, message, requests = out["differ"]
    assert status == "ConsensusError" and "BLOCK=256" in message and requests >= 4
    # a restart attempt has its own names: rank 1 claims and tunes there itself
    assert out["restart"] == [0, True, "BLOCK=32"]


# --- a real job: agreement, one timing pass per key, uneven coverage, records ------------------

@pytest.mark.slow
def test_ranks_agree_and_the_job_times_each_key_once(tmp_path):
    """3 gloo ranks; random timers; keys met in rotated orders by two threads per rank, a key per
    rank alone, a key on even ranks only; a control kernel left to Triton shows the ranks would
    otherwise disagree.  Also: differing candidate lists are refused, a claimer whose tuning fails
    fails its waiters at once, and the record files merge into a table for later pinned runs."""
    out = tmp_path / "out"
    out.mkdir()
    rec, digest = tmp_path / "rec", tmp_path / "choices"
    torchrun(os.path.join(PROGS, "consensus_worker.py"), 3, args=[str(out)],
             env=env_for(AUTOTUNE_CONFIG_INVARIANT="control_body", AUTOTUNE_RECORD_PATH=rec,
                         AUTOTUNE_DIGEST_PATH=digest, AUTOTUNE_CONSENSUS_TIMEOUT=120))
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(3)]
    candidates = ranks[0]["candidates"]

    # Every rank that ran a (kernel, key) chose the same config; a key a rank never ran is no conflict.
    chosen = {}
    for r in ranks:
        ran = {(ADD if k == "add" else SCALE, key_of(k, n)) for k, n in r["ran"]}
        logged = {tuple(entry.split("|")[1:]): value for entry, value in r["choices"].items()
                  if entry.split("|")[1] in (ADD, SCALE)}
        assert set(logged) == ran
        for where, value in logged.items():
            signature, _, how = value.rpartition(";")
            assert how == "consensus"
            assert chosen.setdefault(where, signature) == signature, (where, [x["choices"] for x in ranks])
    assert len(chosen) == 3 + 1 + 3 + 1  # 3 common add keys, scale 1000, one add key per rank, scale 500
    assert sum(1 for r in ranks if (SCALE, key_of("scale", 500)) in
               {tuple(e.split("|")[1:]) for e in r["choices"]}) == 2  # even ranks only

    # One timing pass per (kernel, key), counted across the whole job.
    expected = sum(candidates["add" if kernel == ADD else "scale"] for kernel, _ in chosen)
    assert sum(r["timer_calls"] for r in ranks) == expected, [r["timer_calls"] for r in ranks]

    # The control: left to Triton, each rank timed every candidate itself and the ranks disagree.
    assert all(r["control_calls"] == 2 * 8 for r in ranks)
    controls = [r["control"] for r in ranks]
    assert len({json.dumps(c, sort_keys=True) for c in controls}) > 1, controls

    # rank 1 prunes a candidate the others keep: it refuses, naming it; rank 2 follows rank 0.
    assert ranks[1]["mismatch"].startswith("ConsensusError")
    assert "__main__.pruned_body key (512" in ranks[1]["mismatch"] and "rank 0" in ranks[1]["mismatch"]
    assert "differ" in ranks[1]["mismatch"] and "only on rank 0: BLOCK=32,num_warps=1" in ranks[1]["mismatch"]
    assert ranks[2]["mismatch"] == "ok" and ranks[0]["other_calls"] == 4 and ranks[2]["other_calls"] == 0
    # rank 0's timer raised while it tuned failing_body: it saw its own error, the others at once.
    assert ranks[0]["failed"]["error"] == "timer broke on purpose"
    for r in ranks[1:]:
        assert r["failed"]["error"].startswith("ConsensusError") and "__main__.failing_body key (512" in r["failed"]["error"]
        assert "rank 0, which claimed this tuning, failed" in r["failed"]["error"] and "timer broke" in r["failed"]["error"]
        assert r["failed"]["seconds"] < 5  # not the 120 s timeout

    # Choices files: the digest covers consensus choices; records carry timings on the claimer only.
    for r in ranks:
        doc = files.read_document(rank_file(digest, r["rank"]))
        assert doc["log"] == r["choices"] and doc["complete"] is True
    timed_on = {}
    for r in range(3):
        doc = files.read_document(rank_file(rec, r))
        for kernel in (ADD, SCALE):
            for key, entry in doc["kernels"].get(kernel, {}).items():
                assert entry["how"] == "consensus" and entry["signature"] == chosen[(kernel, key)]
                if entry["timings"]:
                    assert set(entry["timings"]) >= {entry["signature"]}
                    timed_on.setdefault((kernel, key), []).append(r)
    assert set(timed_on) == set(chosen) and all(len(v) == 1 for v in timed_on.values()), timed_on
    # The job's tuning is a table for later pinned runs.
    table = tmp_path / "interpret.json"
    merged = subprocess.run([sys.executable, "-m", "autotune_guard.report", "merge",
                             *[rank_file(rec, r) for r in range(3)], "-o", str(table)],
                            env=env_for(), capture_output=True, text=True, timeout=120)
    assert merged.returncode == 0, merged.stderr
    kernels = files.read_document(str(table))["kernels"]
    assert {(k, key) for k in (ADD, SCALE) for key in kernels.get(k, {})} == set(chosen)


# --- a claimer that never publishes --------------------------------------------------------------

def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ranks_by_hand(tmp_path, world, args, timeout_s):
    """Start ``world`` ranks of consensus_claimer_lost.py with env:// (rank 0 hosts the Store), as
    torchrun would minus its habit of killing every rank when one dies."""
    port = _free_port()
    procs = []
    for rank in range(world):
        env = env_for(AUTOTUNE_CONSENSUS_TIMEOUT=timeout_s, MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=rank,
                      WORLD_SIZE=world, LOCAL_RANK=rank)
        procs.append(subprocess.Popen([sys.executable, os.path.join(PROGS, "consensus_claimer_lost.py"),
                                       str(tmp_path), *args], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    ended = {}

    def watch(rank):  # when each process ended (the waiters' detections are on the same clock)
        procs[rank].wait()
        ended[rank] = time.time()

    watchers = [threading.Thread(target=watch, args=(rank,), daemon=True) for rank in range(world)]
    [w.start() for w in watchers]
    try:
        outputs = [p.communicate(timeout=240) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    [w.join(5) for w in watchers]
    _ranks_by_hand.ended = ended
    return [p.returncode for p in procs], outputs


def _waiter(tmp_path, rank):
    return json.loads((tmp_path / f"rank{rank}.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("point", ["kill_after_claim", "kill", "kill_before_publish", "publish_fails"])
def test_a_claimer_that_dies_or_fails_at_any_point_is_named_within_seconds(tmp_path, point):
    """The timeout is 60 s: the waiters learn from the claimer's stopped heartbeat, not from it."""
    codes, outputs = _ranks_by_hand(tmp_path, 3, [point], 60)
    if point.startswith("kill"):
        assert codes[1] == -9, outputs[1][1][-3000:]
    else:  # alive, and its own launch says why it could not publish
        assert "tuned here but could not publish the winner" in outputs[1][1], outputs[1][1][-3000:]
    for rank in (0, 2):
        assert codes[rank] == 0, outputs[rank][1][-3000:]
        result = _waiter(tmp_path, rank)
        assert result["type"] == "ConsensusError" and not result["ran"]
        message = result["error"]
        assert "kernel __main__.victim_kernel key (1000,torch.float32,torch.float32) arch interpret" in message
        assert re.search(r"rank 1 \(pid \d+ on [^)]+\), which claimed this tuning, ended \(its process is gone, "
                         r"seen on its machine\)", message), message
        # Named within the stated bound of the claimer's end (1 s on its machine, and some slack for
        # a loaded machine), not from the claim: a claimer that fails still takes its interpreter's
        # teardown to end, seconds on a busy machine.
        assert result["detected_at"] - _ranks_by_hand.ended[1] < 3, (result, _ranks_by_hand.ended)
        assert result["seconds"] < 30, result  # not the 60 s timeout


@pytest.mark.slow
def test_a_dead_store_host_fails_the_waiters_at_once(tmp_path):
    """The claimer is rank 0, which hosts the Store: the waiters lose the Store itself and say so
    immediately rather than polling a dead Store until the timeout."""
    codes, outputs = _ranks_by_hand(tmp_path, 3, ["kill", "0"], 60)
    assert codes[0] == -9
    for rank in (1, 2):
        result = _waiter(tmp_path, rank)
        assert result["type"] == "ConsensusError" and not result["ran"], outputs[rank][1][-3000:]
        assert "__main__.victim_kernel key (1000" in result["error"] and "the job's Store failed" in result["error"]
        assert result["seconds"] < 10


@pytest.mark.slow
def test_a_hung_claimer_under_torchrun_fails_the_waiters_within_the_timeout(tmp_path):
    """torchrun's agent hosts the Store here, as in production; rank 1 hangs in its timer."""
    proc = torchrun(os.path.join(PROGS, "consensus_claimer_lost.py"), 3, args=[str(tmp_path), "hang"],
                    env=env_for(AUTOTUNE_CONSENSUS_TIMEOUT=3), check=False)
    assert proc.returncode != 0  # the waiters exit 3, and torchrun then stops the hung rank
    for rank in (0, 2):
        result = _waiter(tmp_path, rank)
        assert result["type"] == "ConsensusError" and not result["ran"], proc.stderr[-3000:]
        assert re.search(r"rank 1 \(pid \d+ on [^)]+\) claimed this tuning but published no winner within 3 s",
                         result["error"]), result["error"]
        assert "__main__.victim_kernel key (1000,torch.float32,torch.float32)" in result["error"]
        assert 3 <= result["seconds"] < 3 + 3


# --- no process group: auto for that choice, said once -------------------------------------------

ALONE_RUN = """
import json, threading, torch
import torch.distributed  # imported, never initialized
import autotune_guard
from kernels import demo
x, y = torch.rand(1000), torch.rand(1000)
ok = [bool(torch.equal(demo.add(torch.ones(64), torch.ones(64)), torch.full((64,), 2.0)))]
go = threading.Barrier(2)
def worker():
    go.wait()
    ok.append(bool(torch.allclose(demo.add(x, y), x + y)))
threads = [threading.Thread(target=worker) for _ in range(2)]
[t.start() for t in threads]; [t.join() for t in threads]
ok.append(bool(torch.allclose(demo.scale(x, 2.0), x * 2.0)))
print(json.dumps({"ok": ok, "timer_calls": len(demo.TIMER_CALLS), "log": autotune_guard.choice_log()}))
"""


@pytest.mark.slow
def test_without_a_process_group_consensus_times_like_auto_and_says_so_once(tmp_path):
    proc = run_python(ALONE_RUN, env=env_for(AUTOTUNE_RECORD_PATH=tmp_path / "rec"))
    out = last_json(proc.stdout)
    assert all(out["ok"])
    assert out["timer_calls"] == 8 + 8 + 3  # add 64, add 1000 (two threads, once), scale 1000
    assert len(out["log"]) == 3 and all(v.endswith(";timed") for v in out["log"].values())
    said = [line for line in proc.stderr.splitlines() if "without a torch.distributed process group" in line]
    assert len(said) == 1 and "INFO" in said[0], proc.stderr
    doc = files.read_document(rank_file(tmp_path / "rec", 0))
    entries = [e for es in doc["kernels"].values() for e in es.values()]
    assert len(entries) == 3 and all(e["how"] == "timed" and e["timings"] for e in entries)


@pytest.mark.slow
def test_a_distributed_job_before_init_process_group_is_warned_about(tmp_path):
    code = "import torch\nfrom kernels import demo\ndemo.add(torch.ones(64), torch.ones(64))\n"
    proc = run_python(code, env=env_for(RANK=1, WORLD_SIZE=4))
    said = [line for line in proc.stderr.splitlines() if "not initialized yet" in line]
    assert len(said) == 1 and "WARNING" in said[0] and "world size 4" in said[0], proc.stderr


# --- a restarted job starts clean ------------------------------------------------------------------

@pytest.mark.slow
def test_after_the_claimer_is_sigkilled_a_max_restarts_restart_tunes_agrees_and_finishes(tmp_path):
    start = time.monotonic()
    proc = torchrun(os.path.join(PROGS, "consensus_restart.py"), 2, args=[str(tmp_path)], timeout=240,
                    extra=("--max-restarts=1", "--monitor-interval=1"), env=env_for(AUTOTUNE_CONSENSUS_TIMEOUT=120))
    elapsed = time.monotonic() - start
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["attempt"] for r in results] == [1, 1]  # attempt 0 died; attempt 1 finished
    assert results[0]["choices"] == results[1]["choices"] and len(results[0]["choices"]) == 1
    assert list(results[0]["choices"].values())[0].endswith(";consensus")
    assert [r["timer_calls"] for r in results] == [0, 3]  # rank 1 tuned again, in attempt 1, once
    assert results[0]["seconds"] < 30 and elapsed < 120, (elapsed, proc.stderr[-3000:])
