"""Pinned mode end to end, with real Triton kernels under TRITON_INTERPRET=1.

Cold processes driven by AUTOTUNE_* variables show what a user sees (reproducibility across
processes, tables, scope, evidence).  The mechanics (on_miss, overrides, pruning, hooks, failed
launches, threads) run in this process through ``autotune_guard.install`` (the ``guard``
fixture), on autotuners no other test has launched where it matters.
"""

import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import triton

from support import clean_env, last_json, rank_file, run_python

F32 = "torch.float32"


def add_key(n):
    return f"{n},{F32},{F32},{F32}"


def unary_key(n):
    return f"{n},{F32},{F32}"


def entry(kernel, key):
    return f"interpret|{kernel}|{key}"


# --- the same choice in every cold process; auto's timed choice is not ---------------------------

DEMO_RUN = """
import json, torch
import autotune_guard
from kernels import demo
torch.manual_seed(0)
ok = True
for n in (97, 200, 333, 512, 1000, 1500):
    x, y = torch.randn(n), torch.randn(n)
    ok = ok and torch.equal(demo.add(x, y), x + y)
for n in (100, 300):
    x = torch.randn(n)
    ok = ok and torch.allclose(demo.scale(x, 3.0), x * 3.0)
print(json.dumps({"timer_calls": len(demo.TIMER_CALLS), "log": autotune_guard.choice_log(),
                  "digest": autotune_guard.choice_digest(), "ok": bool(ok)}))
"""


@pytest.mark.slow
def test_pinned_is_identical_across_cold_processes_and_auto_is_not():
    runs = [("pinned", i) for i in range(3)] + [("auto", i) for i in range(3)]
    with ThreadPoolExecutor(max_workers=3) as pool:
        procs = list(pool.map(lambda run: run_python(DEMO_RUN, env=clean_env(AUTOTUNE_MODE=run[0])), runs))
    pinned = [last_json(p.stdout) for p in procs[:3]]
    auto = [last_json(p.stdout) for p in procs[3:]]
    assert all(r["ok"] for r in pinned + auto)
    for r in pinned:
        assert r["timer_calls"] == 0
        assert len(r["log"]) == 8 and all(v.endswith(";fallback (min_cost)") for v in r["log"].values())  # no table
    assert pinned[0]["log"] == pinned[1]["log"] == pinned[2]["log"]
    assert len({r["digest"] for r in pinned}) == 1
    # min_cost: the smallest tile, then fewer warps.
    assert pinned[0]["log"][entry("kernels.demo.add_kernel", add_key(1000))].startswith("BLOCK=32,num_warps=1,")
    for r in auto:
        assert r["timer_calls"] == 6 * 8 + 2 * 3  # every candidate of every key, timed
        assert len(r["log"]) == 8 and all(v.endswith(";timed") for v in r["log"].values())
    # Random timings: with 8 keys of 8 and 3 candidates, two processes agree on every winner
    # with probability 8**-6 * 3**-2 (< 1e-6); the guard's digests tell them apart.
    assert len({r["digest"] for r in auto}) == 3, [r["log"] for r in auto]


# --- tables through AUTOTUNE_TABLE_PATH --------------------------------------------------------

TABLE_RUN = """
import json, torch
import autotune_guard
from kernels import demo, spine
x, y = torch.randn(1000), torch.randn(1000)
assert torch.equal(demo.add(x, y), x + y)
assert torch.equal(demo.add(x[:500], y[:500]), x[:500] + y[:500])
assert torch.allclose(demo.scale(x[:100], 2.0), x[:100] * 2.0)
assert torch.equal(spine.launch(spine.copy_kernel, x[:100]), x[:100])
print(json.dumps({"timer_calls": len(demo.TIMER_CALLS), "log": autotune_guard.choice_log()}))
"""


def interpret_table(kernels, arch="interpret"):
    return {"format": "autotune_guard.table/1", "arch": arch, "source": "test", "kernels": kernels}


TABLE = interpret_table({
    "kernels.demo.add_kernel": {
        add_key(1000): {"kwargs": {"BLOCK": 128}, "num_warps": 2},  # the key's own entry
        "*": {"kwargs": {"BLOCK": 64}, "num_warps": 1},  # every other key
    },
    "scale_kernel": {"*": {"kwargs": {"BLOCK": 32}}},  # bare function name; num_warps omitted: Triton's 4
    "kernels.spine.copy_kernel": {"*": {"kwargs": {"BLOCK": 48}}},  # no such candidate: a miss
})


def _check_table_choices(log):
    assert log[entry("kernels.demo.add_kernel", add_key(1000))] == "BLOCK=128,num_warps=2,num_stages=3,num_ctas=1;table"
    assert log[entry("kernels.demo.add_kernel", add_key(500))] == "BLOCK=64,num_warps=1,num_stages=3,num_ctas=1;table"
    assert log[entry("kernels.demo.scale_kernel", unary_key(100))] == "BLOCK=32,num_warps=4,num_stages=3,num_ctas=1;table"
    # The entry matches no live candidate: a miss, then on_miss (min_cost).
    assert log[entry("kernels.spine.copy_kernel", unary_key(100))].startswith("BLOCK=16,")


@pytest.mark.slow
def test_table_entries_are_obeyed_from_a_table_directory(tmp_path):
    (tmp_path / "interpret.json").write_text(json.dumps(TABLE))
    # Another arch's table in the same directory is not read.
    (tmp_path / "sm90.json").write_text(json.dumps(interpret_table({"add_kernel": {"*": {"kwargs": {"BLOCK": 256}}}}, "sm90")))
    proc = run_python(TABLE_RUN, env=clean_env(AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=str(tmp_path)))
    result = last_json(proc.stdout)
    assert result["timer_calls"] == 0
    _check_table_choices(result["log"])
    misses = [line for line in proc.stderr.splitlines() if "matches no live candidate" in line]
    assert len(misses) == 1 and "kernels.spine.copy_kernel" in misses[0] and "min_cost" in misses[0]


def test_table_entries_are_obeyed_from_a_table_file(tmp_path, guard, ag_log):
    from autotune_guard import choice_log

    (tmp_path / "pins.json").write_text(json.dumps(TABLE))
    guard({"AUTOTUNE_MODE": "pinned", "AUTOTUNE_TABLE_PATH": str(tmp_path / "pins.json")})
    from kernels import demo, spine

    x, calls = _x(1000), len(demo.TIMER_CALLS)
    assert demo.add(x, x).equal(x + x) and demo.add(x[:500], x[:500]).equal(x[:500] + x[:500])
    assert demo.scale(x[:100], 2.0).equal(x[:100] * 2.0) and spine.launch(spine.copy_kernel, x[:100]).equal(x[:100])
    assert len(demo.TIMER_CALLS) == calls
    _check_table_choices(choice_log())
    assert sum("matches no live candidate" in m for m in ag_log.messages()) == 1


# --- scope, block sizes, evidence: one cold process each -----------------------------------------

SCOPE_RUN = """
import json, torch
import autotune_guard
from kernels import demo, spine
x = torch.randn(2000)
demo.add(x, x); demo.scale(x, 2.0)
spine.launch(spine.copy_kernel, x[:100])
spine.launch(spine.hooked_kernel, x[:100])
print(json.dumps({"demo_timer": len(demo.TIMER_CALLS), "spine_timer": len(spine.TIMER_CALLS),
                  "log": autotune_guard.choice_log()}))
"""


@pytest.mark.slow
def test_scope_modules_and_config_invariant_leave_the_rest_to_timing():
    env = clean_env(AUTOTUNE_MODE="pinned", AUTOTUNE_MODULES="kernels.spine",
                    AUTOTUNE_CONFIG_INVARIANT="kernels.spine.hooked_body", AUTOTUNE_BLOCK_SIZES="BLOCK=32")
    result = last_json(run_python(SCOPE_RUN, env=env).stdout)
    assert result["demo_timer"] == 8 + 3  # kernels.demo is out of scope: Triton timed both kernels
    assert result["spine_timer"] == 4  # hooked_body is config-invariant: timed over its 4 candidates
    # Only the in-scope, not-exempt kernel was pinned, and it obeyed AUTOTUNE_BLOCK_SIZES.
    assert result["log"] == {entry("kernels.spine.copy_kernel", unary_key(100)):
                             "BLOCK=32,num_warps=4,num_stages=3,num_ctas=1;AUTOTUNE_BLOCK_SIZES"}


EVIDENCE_RUN = """
import json, torch
import autotune_guard
from kernels import demo, spine
x = torch.randn(1000)
for n in (100, 200, 300, 100, 200):
    demo.add(x[:n], x[:n])
demo.scale(x[:100], 2.0)
spine.launch(spine.single_kernel, x[:100])
spine.launch(spine.copy_kernel, x[:100])
spine.launch(spine.copy_kernel, x[:100])
print(json.dumps({"log": autotune_guard.choice_log(), "digest": autotune_guard.choice_digest()}))
"""


@pytest.mark.slow
def test_enumerate_exit_line_and_digest_file(tmp_path):
    prefix = tmp_path / "runs" / "choices"
    env = clean_env(AUTOTUNE_MODE="pinned", AUTOTUNE_ENUMERATE="1", AUTOTUNE_DIGEST_PATH=str(prefix),
                    AUTOTUNE_CONFIG_INVARIANT="scale_kernel", RANK="3", WORLD_SIZE="4")
    proc = run_python(EVIDENCE_RUN, env=env)
    result = last_json(proc.stdout)
    lines = proc.stderr.splitlines()
    enumerated = [line for line in lines if "candidates," in line]
    assert sorted(line.split("autotuner ", 1)[1] for line in enumerated) == [
        "kernels.demo.add_kernel: 8 candidates, pinned",
        "kernels.demo.scale_kernel: 3 candidates, left to Triton (out of scope)",
        "kernels.spine.copy_kernel: 3 candidates, pinned",
    ]  # each multi-config autotuner once, however often it runs; single_kernel never
    assert len(result["log"]) == 4  # add: 3 keys, copy: 1 key
    exit_lines = [line for line in lines if "autotune choices" in line]
    assert len(exit_lines) == 1
    assert "rank 3" in exit_lines[0] and "made 4 autotune choices" in exit_lines[0] and result["digest"] in exit_lines[0]
    written = json.loads(open(rank_file(tmp_path / "runs" / "choices", 3)).read())
    assert written["format"] == "autotune_guard.choices/1" and written["rank"] == 3
    assert written["digest"] == result["digest"] and written["log"] == result["log"]


# --- in this process: the mechanics ----------------------------------------------------------------

def _x(n):
    import torch

    return torch.arange(n, dtype=torch.float32)


def _choice(kernel):
    best = kernel.best_config
    return best.kwargs["BLOCK"], best.num_warps


def test_on_miss_first_min_cost_and_error(guard):
    from autotune_guard import SelectionError, choice_log
    from kernels import spine

    x = _x(100)
    guard({"AUTOTUNE_MODE": "pinned", "AUTOTUNE_ON_MISS": "first"})
    assert spine.launch(spine.copy_kernel, x).equal(x) and _choice(spine.copy_kernel) == (64, 4)  # declared first
    guard({"AUTOTUNE_MODE": "pinned", "AUTOTUNE_ON_MISS": "min_cost"})
    assert spine.launch(spine.copy_kernel, x).equal(x) and _choice(spine.copy_kernel) == (16, 4)  # smallest tile
    guard({"AUTOTUNE_MODE": "pinned", "AUTOTUNE_ON_MISS": "error"})
    configs, content = spine.copy_kernel.configs, list(spine.copy_kernel.configs)
    with pytest.raises(SelectionError) as info:
        spine.launch(spine.copy_kernel, x)
    message = str(info.value)
    assert "kernels.spine.copy_kernel" in message and unary_key(100) in message and "interpret" in message
    assert spine.copy_kernel.configs is configs and spine.copy_kernel.configs == content
    assert choice_log() == {}


def test_a_kernel_without_a_timer_runs_pinned_under_the_interpreter(guard):
    from kernels import spine

    x = _x(300)
    guard({"AUTOTUNE_MODE": "auto"})
    assert spine.launch(spine.copy_kernel, x).equal(x)  # timed with the wall clock (issue 58)
    guard({"AUTOTUNE_MODE": "pinned"})
    assert spine.launch(spine.copy_kernel, x).equal(x)


def test_block_sizes_override_and_its_misses(guard, ag_log):
    from autotune_guard import SelectionError, choice_log
    from kernels import demo, spine

    x = _x(700)
    guard({"AUTOTUNE_MODE": "pinned", "AUTOTUNE_BLOCK_SIZES": "BLOCK=64"})
    calls = len(demo.TIMER_CALLS)
    assert demo.add(x, x).equal(x + x) and _choice(demo.add_kernel) == (64, 1)  # min_cost among BLOCK=64
    assert spine.launch(spine.copy_kernel, x).equal(x) and _choice(spine.copy_kernel) == (64, 4)
    guard({"AUTOTUNE_MODE": "pinned", "AUTOTUNE_BLOCK_SIZES": "BLOCK=64", "AUTOTUNE_ON_MISS": "first"})
    demo.add(x, x)
    assert _choice(demo.add_kernel) == (64, 1)  # declaration order among BLOCK=64: (64, 1) before (64, 2)
    # Matches nothing: a warning naming the kernel, then on_miss.
    guard({"AUTOTUNE_MODE": "pinned", "AUTOTUNE_BLOCK_SIZES": "BLOCK=48"})
    demo.add(x, x)
    assert _choice(demo.add_kernel) == (32, 1)
    warnings = [m for m in ag_log.messages() if "AUTOTUNE_BLOCK_SIZES matches no candidate" in m]
    assert len(warnings) == 1 and "kernels.demo.add_kernel" in warnings[0]
    # ... and with on_miss=error, a refusal naming kernel, key and arch.
    guard({"AUTOTUNE_MODE": "pinned", "AUTOTUNE_BLOCK_SIZES": "BLOCK=48", "AUTOTUNE_ON_MISS": "error"})
    with pytest.raises(SelectionError) as info:
        demo.add(x, x)
    message = str(info.value)
    assert "AUTOTUNE_BLOCK_SIZES" in message and "kernels.demo.add_kernel" in message
    assert add_key(700) in message and "interpret" in message
    assert choice_log() == {} and len(demo.TIMER_CALLS) == calls


def test_the_kernels_own_pruning_runs_first_and_hooks_are_kept(guard, tmp_path):
    from autotune_guard import choice_log
    from kernels import spine

    guard({"AUTOTUNE_MODE": "pinned"})
    kernel = spine.make_hooked()
    del spine.HOOK_CALLS[:], spine.PRUNE_CALLS[:]
    for _ in range(3):
        assert spine.launch(kernel, _x(2000)).equal(_x(2000) + 1)
    # Pruning kept BLOCK >= 64 for n >= 1000: min_cost picks 64, not the 16 it pruned away;
    # pruning ran for the first launch only; the chosen Config's own pre_hook ran every time.
    assert spine.PRUNE_CALLS == [2000]
    assert [call[:2] for call in spine.HOOK_CALLS] == [(64, 2000)] * 3
    assert spine.launch(kernel, _x(100)).equal(_x(100) + 1)
    assert spine.HOOK_CALLS[-1][:2] == (16, 100)
    assert spine.TIMER_CALLS == []
    # A table entry naming a candidate that pruning removed is a miss; one naming a live one is obeyed.
    (tmp_path / "interpret.json").write_text(json.dumps(interpret_table(
        {"hooked_body": {unary_key(3000): {"kwargs": {"BLOCK": 16}}, "*": {"kwargs": {"BLOCK": 32}}}})))
    guard({"AUTOTUNE_MODE": "pinned", "AUTOTUNE_TABLE_PATH": str(tmp_path)})
    spine.launch(kernel, _x(3000))
    spine.launch(kernel, _x(200))
    assert [call[:2] for call in spine.HOOK_CALLS[-2:]] == [(64, 3000), (32, 200)]
    assert choice_log()[entry("kernels.spine.hooked_body", unary_key(200))].startswith("BLOCK=32,")


def test_a_failed_launch_leaves_the_autotuner_intact(guard):
    from kernels import spine

    guard({"AUTOTUNE_MODE": "pinned"})
    kernel = spine.make_hooked()
    configs, content = kernel.configs, list(kernel.configs)
    KEY_2000 = (2000, F32, F32)

    def intact(*succeeded):
        assert kernel.configs is configs and kernel.configs == content
        # Triton 3.8+ holds a pinned choice in its own cache once a launch of it succeeded (the
        # steady state is Triton's cached path); with the swap (3.3-3.7) the cache stays empty.
        assert set(kernel.cache) == (set(succeeded) if tuple(int(p) for p in triton.__version__.split('.')[:2]) >= (3, 8) else set())
        assert kernel.__dict__.get("nargs") is None

    spine.FAIL.append(1)
    try:
        with pytest.raises(RuntimeError, match="pre_hook refused"):  # the very first launch fails
            spine.launch(kernel, _x(2000))
        intact()
        assert "best_config" not in kernel.__dict__
        spine.FAIL.clear()
        assert spine.launch(kernel, _x(2000)).equal(_x(2000) + 1)
        best = kernel.best_config
        assert best.kwargs["BLOCK"] == 64
        spine.FAIL.append(1)
        with pytest.raises(RuntimeError, match="pre_hook refused"):  # n=100 would run BLOCK=16
            spine.launch(kernel, _x(100))
        intact(KEY_2000)
        assert kernel.best_config is best
        spine.FAIL.clear()
        with pytest.raises(Exception):  # a bad argument: not a tensor
            kernel[(1,)]([1.0, 2.0], _x(2000), 2000)
        intact(KEY_2000)
        assert kernel.best_config is best
    finally:
        spine.FAIL.clear()
    assert spine.launch(kernel, _x(100)).equal(_x(100) + 1)
    assert kernel.best_config.kwargs["BLOCK"] == 16 and kernel.configs is configs
    assert spine.TIMER_CALLS == []


class _SlowToRead(list):
    def __iter__(self):
        time.sleep(0.02)
        return super().__iter__()


def test_two_threads_launching_one_pinned_autotuner_never_time_and_agree(guard, monkeypatch):
    from autotune_guard import choice_log
    from kernels import spine

    guard({"AUTOTUNE_MODE": "pinned"})
    kernel = spine.make_hooked()
    # The first launch builds the guard's per-autotuner state, reading ``keys``: reading it
    # yields the GIL for a moment here, so both threads surely meet that first launch together.
    kernel.keys = _SlowToRead(kernel.keys)
    # Triton's interpreter, unlike a GPU launch, cannot run two kernels at once (its builder is
    # global): the launch itself is serialized here, everything before it (the key, the cache,
    # the pre_hook and its arguments) still interleaves.
    interpreted, interpreter_lock = kernel.fn.run, threading.Lock()

    def run_one_at_a_time(*args, **kwargs):
        with interpreter_lock:
            return interpreted(*args, **kwargs)

    monkeypatch.setattr(kernel.fn, "run", run_one_at_a_time)  # (the kernel function is shared with other tests)
    del spine.HOOK_CALLS[:], spine.PRUNE_CALLS[:]
    sizes = [100, 2000, 300, 4000, 500, 6000]
    expected = {n: 64 if n >= 1000 else 16 for n in sizes}  # what one thread alone would choose
    inputs = {n: _x(n) for n in sizes}
    # Switch threads as often as possible and make each first choice slow, so any unguarded
    # shared state (configs swapped for a launch, nargs during pruning) would be seen.
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    spine.PRUNE_SLEEP_S[0] = 0.005
    barrier = threading.Barrier(2)
    errors = []

    def work(order):
        try:
            barrier.wait()
            for _ in range(3):
                for n in order:
                    if not spine.launch(kernel, inputs[n]).equal(inputs[n] + 1):
                        errors.append(f"wrong output for n={n}")
        except Exception as exc:  # reported below
            errors.append(repr(exc))

    threads = [threading.Thread(target=work, args=(order,)) for order in (sizes, sizes[::-1])]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        sys.setswitchinterval(old_interval)
        spine.PRUNE_SLEEP_S[0] = 0.0
    assert not errors, errors
    assert spine.TIMER_CALLS == []
    ran = {}
    for block, n, thread in spine.HOOK_CALLS:
        ran.setdefault(n, set()).add(block)
    assert ran == {n: {block} for n, block in expected.items()}
    assert len({thread for _, _, thread in spine.HOOK_CALLS}) == 2 and len(spine.HOOK_CALLS) == 2 * 3 * len(sizes)
    assert sorted(spine.PRUNE_CALLS) == sorted(sizes)  # one selection per key
    log = choice_log()
    assert all(log[entry("kernels.spine.hooked_body", unary_key(n))].startswith(f"BLOCK={b},") for n, b in expected.items())


def test_auto_installed_late_logs_the_winners_triton_chose_before(guard):
    """A policy installed after Triton tuned a key still has that key in its choice log (as
    timed, without timings): the log describes every choice in force."""
    import torch

    import autotune_guard
    from kernels import demo

    guard({"AUTOTUNE_MODE": "auto"})
    x = torch.rand(123)
    demo.add(x, x)  # tuned under the first policy
    guard({"AUTOTUNE_MODE": "auto"})  # a new policy starts a new log
    assert autotune_guard.choice_log() == {}
    calls = len(demo.TIMER_CALLS)
    demo.add(x, x)  # the cached key: no timing, but now in the new log
    assert len(demo.TIMER_CALLS) == calls
    (entry,) = autotune_guard.choice_log()
    assert entry.startswith("interpret|kernels.demo.add_kernel|123,") and autotune_guard.choice_log()[entry].endswith(";timed")
