"""Cross-rank verification fired from ``torch.distributed.barrier`` (issue 4).

The programs under tests/progs/ know nothing of autotune_guard (except verify_api.py, which is
about the API); they run under real ``torchrun`` gloo ranks with the policy in the environment.
Checks are observed through the ``autotune_guard`` logger: the ERROR record of a report, and at
DEBUG one line per check naming the size of the group it ran in; in one process, through the
adapter's ``last_check`` (what the latest check was and moved, with a count of checks).
"""

import json
import os
import re
import socket
import subprocess
import sys

import pytest

from support import TESTS, clean_env, last_json, run_python, torchrun

from autotune_guard.core.agreement import compare, report
from autotune_guard.core.model import ChoiceKey

PROGS = os.path.join(TESTS, "progs")
REPORT = "autotune choices differ across the ranks of group"
ADD = "kernels.demo.add_kernel"
SCALE = "kernels.demo.scale_kernel"


def prog(name):
    return os.path.join(PROGS, name)


def verify_env(**settings):
    return clean_env(AUTOTUNE_MODE="pinned", **settings)


def reports(stderr: str) -> list[str]:
    """Each report: its ERROR line and the indented lines under it."""
    found = []
    lines = stderr.splitlines()
    for i, line in enumerate(lines):
        if REPORT in line and "ERROR" in line:
            body = [line]
            for following in lines[i + 1:]:
                if not following.startswith("  "):
                    break
                body.append(following)
            found.append("\n".join(body))
    return found


def checks(stderr: str, rank: int) -> list[tuple[int, str]]:
    """(group size, what it said) of each check the rank logged at DEBUG."""
    pattern = re.compile(rf"autotune_guard\[rank {rank}\] DEBUG: verify in group of (\d+) at (.*)")
    return [(int(m.group(1)), m.group(2)) for m in pattern.finditer(stderr)]


def done(stdout: str) -> set[int]:
    return {int(m) for m in re.findall(r"DONE rank (\d+)", stdout)}


# --- comparing and reporting: plain data ---------------------------------------------------------

E1 = ChoiceKey("interpret", "pkg.mod.kernel", "1024,torch.float16")
E2 = ChoiceKey("interpret", "pkg.mod.other", "64,torch.float32")


def test_agreeing_ranks_set_the_reference_and_absent_keys_are_no_conflict():
    reference = {}
    # rank 2 never ran E1, rank 0 never ran E2: absent is not a conflict
    conflicts = compare([[(E1, "B=64")], [(E1, "B=64"), (E2, "B=32")], [(E2, "B=32")]], [0, 1, 2], reference)
    assert conflicts == {}
    assert reference == {E1: ("B=64", 0), E2: ("B=32", 1)}


def test_a_conflict_in_one_check_names_every_rank_value():
    reference = {}
    conflicts = compare([[(E1, "B=64")], [(E1, "B=128")], [(E1, "B=64")], []], [4, 5, 6, 7], reference)
    assert set(conflicts) == {E1}
    assert sorted((sig, rs, earlier) for sig, rs, earlier in conflicts[E1]) == [
        ("B=128", [5], False), ("B=64", [4, 6], False)]
    assert reference[E1] == ("B=64", 4)  # the lowest rank's value is what later arrivals meet


def test_a_rank_reaching_a_key_later_is_compared_with_what_the_group_saw_before():
    reference = {E1: ("B=64", 0)}
    assert compare([[], [(E1, "B=64")]], [0, 1], reference) == {}
    conflicts = compare([[], [], [(E1, "B=16")]], [0, 1, 2], reference)
    assert conflicts[E1][0] == ("B=64", [0], True)
    assert ("B=16", [2], False) in conflicts[E1]
    assert reference[E1] == ("B=64", 0)


def test_report_names_kernel_key_arch_each_rank_and_counts_the_rest():
    conflicts = {ChoiceKey("sm90", f"pkg.mod.k{i}", f"{i},torch.float16"): [("B=64", [0, 1], False), ("B=32", [2], False)]
                 for i in range(7)}
    text = report(conflicts, [0, 1, 2], "barrier 3 of this group", limit=5)
    lines = text.splitlines()
    assert lines[0].startswith(f"{REPORT} 0,1,2 at barrier 3 of this group: 7 kernel/key entries disagree")
    assert lines[1] == "  pkg.mod.k0 key (0,torch.float16) arch sm90: ranks 0,1: B=64; rank 2: B=32"
    assert len(lines) == 1 + 5 + 1 and lines[-1] == "  ... and 2 more"
    earlier = report({E1: [("B=64", [0], True), ("B=16", [2], False)]}, list(range(12)), "verify_choices()")
    assert "ranks of group 0,1,2,3,4,5,6,7,... (12 ranks)" in earlier
    assert "an earlier check, rank 0: B=64; rank 2: B=16" in earlier


# --- real ranks ----------------------------------------------------------------------------------

@pytest.mark.slow
def test_chaos_strict_stops_every_rank():
    # Both ranks raise at the same moment; a 1 s monitor interval keeps torchrun from stopping
    # the second one (SIGTERM) before its own error is out, when this machine is busy.
    proc = torchrun(prog("verify_train.py"), 2, check=False, extra=("--monitor-interval=1",), env=verify_env(
        AUTOTUNE_CHAOS=1, AUTOTUNE_VERIFY_EVERY=1, AUTOTUNE_VERIFY_STRICT=1))
    assert proc.returncode != 0
    assert done(proc.stdout) == set()
    for rank in (0, 1):  # raised on every rank, each one's own traceback...
        assert f"[rank{rank}]: autotune_guard.core.errors.ChoiceMismatchError: {REPORT} 0,1" in proc.stderr
    # ...and torchrun saw each rank exit non-zero
    exits = {int(r): int(code) for r, code in re.findall(
        r"rank\s*:\s*(\d+) \(local_rank: \d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)", proc.stderr)}
    assert set(exits) == {0, 1} and all(code != 0 for code in exits.values()), proc.stderr[-3000:]
    assert len(reports(proc.stderr)) == 1  # the log record, on the group's first rank only
    assert "autotune_guard[rank 0] ERROR" in proc.stderr and "autotune_guard[rank 1] ERROR" not in proc.stderr


@pytest.mark.slow
def test_pinned_without_chaos_uneven_coverage_and_subgroups_agree():
    # Strict, so any false alarm fails the job.  Per group counting, every 2nd barrier: the pair
    # groups check at their 2nd barrier, the world at its 2nd and 4th (the 3rd is monitored).
    proc = torchrun(prog("verify_groups.py"), 4, env=verify_env(
        AUTOTUNE_VERIFY_EVERY=2, AUTOTUNE_VERIFY_STRICT=1, AUTOTUNE_LOG_LEVEL="debug"))
    assert done(proc.stdout) == {0, 1, 2, 3}, proc.stdout
    assert reports(proc.stderr) == [] and "ChoiceMismatchError" not in proc.stderr
    for rank in range(4):
        seen = checks(proc.stderr, rank)
        assert [size for size, _ in seen].count(2) == 1, seen
        assert [size for size, _ in seen].count(4) == 2, seen
        assert all(where.startswith("barrier 2 ") or where.startswith("barrier 4 ") for _, where in seen), seen
    # The world check carries again what the pair checks already compared (per-group cursors):
    # ranks 0, 1, 2 bring one entry each (two of them the same pair), rank 3 (no choices at all)
    # none; the group's first rank compares and every rank receives the 2 distinct pairs.
    world_first = [where for size, where in checks(proc.stderr, 3) if size == 4][0]
    assert "sent 0, received 2, 0 conflicts" in world_first
    # The success line: on the group's first rank, for checks that compared new entries.
    agreed = re.findall(r"autotune_guard\[rank (\d+)\] INFO: autotune choices agree across the ranks of group "
                        r"([\d,]+) at barrier \d+ of this group: (\d+) kernel/key entries checked, all agree", proc.stderr)
    assert ("0", "0,1,2,3", "1") in agreed and all(rank in ("0", "2") for rank, _, _ in agreed), agreed
    # of the world's 3 entries, only add(256) is met by two ranks (0 and 2): rank 1's scale and its
    # late key are its own, said apart, not counted as compared
    assert "at barrier 4 of this group: 1 kernel/key entries checked, all agree (2 more met by one rank alone" \
        in proc.stderr, proc.stderr[-3000:]


@pytest.mark.slow
def test_chaos_is_caught_in_the_world_check_between_ranks_of_different_subgroups():
    # Ranks 0 and 2 run the same kernel and key but are never in one pair group: only the world
    # check can see them disagree, and it must, although both entries travelled in pair checks.
    proc = torchrun(prog("verify_groups.py"), 4, env=verify_env(AUTOTUNE_CHAOS=1, AUTOTUNE_VERIFY_EVERY=2))
    assert done(proc.stdout) == {0, 1, 2, 3}, proc.stdout
    found = reports(proc.stderr)
    assert len(found) == 1, proc.stderr[-4000:]
    text = found[0]
    assert text.startswith(f"autotune_guard[rank 0] ERROR: {REPORT} 0,1,2,3 at barrier 2 of this group: 1 kernel/key entry")
    assert f"{ADD} key (256," in text and "arch interpret" in text
    assert re.search(r"rank 0: BLOCK=\d+[^;]*; rank 2: BLOCK=", text), text


@pytest.mark.slow
def test_api_semantics_on_two_ranks():
    proc = torchrun(prog("verify_api.py"), 2, env=verify_env(AUTOTUNE_CHAOS=1, AUTOTUNE_VERIFY_EVERY=3))
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT "):])
            results[result.pop("rank")] = result
    expected = {
        "no_group_verify": True, "no_group_maybe": None,
        "only_rank0_ran_it": True,  # a key the other rank never ran is not a conflict
        "rank1_later": False,  # rank 1's later choice meets rank 0's earlier one, on both ranks
        "nothing_new": True,  # a conflict is reported once, not at every later check
        "maybe_not_due": None, "maybe_due": True,
        "wrapped": [True, True, True, True],
    }
    assert results == {0: expected, 1: expected}
    found = reports(proc.stderr)
    assert len(found) == 1 and "at verify_choices(): 1 kernel/key entry" in found[0]
    assert re.search(rf"{ADD} key \(64,[^)]*\) arch interpret: an earlier check, rank 0: (\S+); rank 1: (\S+)", found[0])


@pytest.mark.slow
def test_two_nodes_on_localhost_are_one_job():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = verify_env(AUTOTUNE_CHAOS=1, AUTOTUNE_VERIFY_EVERY=1, AUTOTUNE_LOG_LEVEL="debug")
    launchers = [
        subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1",
                          f"--node-rank={node}", "--master-addr=127.0.0.1", f"--master-port={port}",
                          prog("verify_train.py"), "2"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
        for node in (0, 1)
    ]
    outputs = [p.communicate(timeout=300) for p in launchers]
    assert [p.returncode for p in launchers] == [0, 0], outputs[1][1][-3000:] + outputs[0][1][-3000:]
    assert done(outputs[0][0]) == {0} and done(outputs[1][0]) == {1}
    found = reports(outputs[0][1])
    assert len(found) == 1 and reports(outputs[1][1]) == []
    assert found[0].startswith(f"autotune_guard[rank 0] ERROR: {REPORT} 0,1 at barrier 1 of this group: 2 kernel/key")
    assert f"{ADD} key (300," in found[0] and f"{SCALE} key (300," in found[0]
    # the second barrier's check moves an empty payload on both nodes
    for node in (0, 1):
        assert checks(outputs[node][1], node) == [
            (2, "barrier 1 of this group: sent 2, received 4, 2 conflicts"),
            (2, "barrier 2 of this group: nothing new"),
        ]


# --- one process: wrapping, cadence, no process group --------------------------------------------

@pytest.mark.slow
def test_cadence_counts_from_the_first_barrier_and_install_neither_resets_nor_changes_it():
    proc = run_python(open(prog("verify_inprocess.py")).read(), env=clean_env(AUTOTUNE_VERIFY_EVERY=2))
    out = last_json(proc.stdout)
    assert out["armed_at_start"] is True and out["triton_at_first_barrier"] is False
    assert out["wrapped"] == {"dist.barrier": True, "c10d.barrier": True, "alias": True, "monitored": True}
    assert out["one_layer"] and out["same_object"]
    # every 2nd barrier of each group, the first world barrier (before Triton) counted; the async
    # barrier is not counted, monitored_barrier is; install() restarted nothing
    assert out["fired"] == [[True, "barrier 2 of this group"], [False, "barrier 2 of this group"],
                            [True, "barrier 4 of this group"]]
    assert out["verify_choices"] is True and out["maybe_due"] is True and out["maybe_not_due"] is None
    assert "AUTOTUNE_VERIFY_EVERY=5 given to install() is not applied" in proc.stderr
    assert "start-up (2)" in proc.stderr


@pytest.mark.slow
def test_a_cadence_given_only_to_install_is_named_and_fires_nothing():
    # No AUTOTUNE_* at start-up: install() wraps the barriers (an alias taken before is rebound),
    # but a cadence that some ranks might not share is not applied.
    proc = run_python(
        "import json, sys, tempfile, torch.distributed as dist\n"
        "from torch.distributed import barrier\n"
        "import triton, autotune_guard\n"
        "from autotune_guard.adapters.distributed import last_check\n"
        "dist.init_process_group('gloo', init_method='file://' + tempfile.mktemp(), rank=0, world_size=1)\n"
        "autotune_guard.install({'AUTOTUNE_MODE': 'pinned', 'AUTOTUNE_VERIFY_EVERY': 1})\n"
        "import torch.distributed.distributed_c10d as c10d\n"
        "wrapped = sys.modules['__main__'].barrier is c10d.barrier and hasattr(c10d.barrier, '_self_wrapper')\n"
        "for _ in range(3): barrier()\n"
        "print(json.dumps([wrapped, last_check.get('count', 0), autotune_guard.maybe_verify_choices(3)]))\n")
    assert last_json(proc.stdout) == [True, 0, None]
    assert "AUTOTUNE_VERIFY_EVERY=1 given to install() is not applied" in proc.stderr, proc.stderr


@pytest.mark.slow
def test_triton_imported_first_and_no_process_group():
    env = verify_env(AUTOTUNE_VERIFY_EVERY=1)
    proc = run_python(
        "import json, sys, triton\n"
        "before = 'torch.distributed' in sys.modules\n"
        "import torch.distributed as dist\n"
        "import autotune_guard\n"
        "print(json.dumps([before, hasattr(dist.barrier, '_self_wrapper'), autotune_guard.verify_choices(),\n"
        "                  autotune_guard.maybe_verify_choices(0)]))\n", env=env)
    assert last_json(proc.stdout) == [False, True, True, None]


# --- ranks that differ in what they imported and when: no hang, the program's values intact -------

def mixed(scenario, every, steps=6, **settings):
    """verify_mixed.py on 2 ranks; a hang fails within the timeout (gloo's own is 30 min)."""
    return torchrun(prog("verify_mixed.py"), 2, args=[scenario, str(steps)], timeout=150, check=False,
                    env=verify_env(AUTOTUNE_VERIFY_EVERY=every, AUTOTUNE_LOG_LEVEL="debug", **settings))


@pytest.mark.slow
@pytest.mark.parametrize("scenario,every", [("no_triton", 1), ("no_triton", 3), ("late", 1), ("late", 3),
                                            ("install_one", 1), ("install_one", 3)])
def test_ranks_importing_triton_late_or_never_or_installing_alone_check_at_the_same_barriers(scenario, every):
    proc = mixed(scenario, every)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    assert "WRONG" not in proc.stdout  # the program's own all_reduce / all_gather were never paired with a check
    assert done(proc.stdout) == {0, 1}, proc.stdout
    assert f"DONE rank 1 triton {scenario != 'no_triton'}" in proc.stdout
    # checked at every `every`-th barrier, counted from the first, in every scenario (rank 1 never
    # logs without Triton; rank 0's install() sets the log level back to info)
    who = 1 if scenario == "install_one" else 0
    assert [where.split(":")[0] for _, where in checks(proc.stderr, who)] == [
        f"barrier {n} of this group" for n in range(every, 7, every)], proc.stderr[-3000:]
    assert reports(proc.stderr) == []
    first = checks(proc.stderr, who)[0][1]
    if scenario == "no_triton":  # rank 0's 2 entries meet rank 1's empty set: those buckets are gathered
        assert first.endswith("sent 2, received 2, 0 conflicts"), first
    if scenario == "install_one":  # the same 2 entries on both ranks: the fixed-size hashes suffice
        assert first.endswith("2 new entries agreed by their bucket hashes, nothing gathered"), first
    if scenario == "install_one":  # a cadence of 1 differs from the start-up one only when every is 3
        assert ("AUTOTUNE_VERIFY_EVERY=1 given to install() is not applied" in proc.stderr) == (every != 1)


@pytest.mark.slow
def test_chaos_on_a_rank_that_imports_triton_late_is_still_caught():
    proc = mixed("late", 1, AUTOTUNE_CHAOS=1, AUTOTUNE_VERIFY_STRICT=1)
    assert proc.returncode != 0 and "WRONG" not in proc.stdout
    for rank in (0, 1):
        assert f"[rank{rank}]: autotune_guard.core.errors.ChoiceMismatchError: {REPORT} 0,1 at barrier 3 of" in proc.stderr, \
            proc.stderr[-4000:]
    found = reports(proc.stderr)
    assert len(found) == 1 and "an earlier check, rank 0:" in found[0] and f"{ADD} key (300," in found[0]
