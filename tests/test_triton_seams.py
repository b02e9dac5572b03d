"""Triton's own seams: the policy swap and the per-autotuner lock (the two races of issue 10),
pinning through the kernel's pruning on Triton 3.8+, ``knobs.autotuning.listener``, and config
identity (``ir_override``, the warp-specialisation fields of 3.3).  Real kernels under
TRITON_INTERPRET=1, launched from real threads."""

import threading
import time

import pytest
import torch
import triton

from autotune_guard import _patching
from autotune_guard.adapters import triton as triton_adapter
from kernels import seams

F32 = "torch.float32"


def _pins_through_pruning():
    """Whether this Triton caches a pruning result of one config without timing (3.8+)."""
    return tuple(int(p) for p in triton.__version__.split(".")[:2]) >= (3, 8)


def _tritons_run():
    return _patching.original(triton.runtime.autotuner.Autotuner, "run")


def _x(n):
    return torch.arange(n, dtype=torch.float32)


def _entry(n):
    return f"interpret|kernels.seams.double_body|{n},{F32},{F32}"


@pytest.fixture
def fresh():
    del seams.RAN[:], seams.HOLD[:], seams.TIMER_CALLS[:], seams.LIBRARY_CONFIG[:]
    yield
    for event in seams.HOLD:
        event.set()
    del seams.HOLD[:], seams.LIBRARY_CONFIG[:]


def test_a_launch_after_install_waits_for_a_pinned_launch_in_flight(guard, fresh):
    """Race 1: thread A's pinned launch is in flight (its pre_hook waits); a new policy is
    installed; thread B launches the same autotuner with another key.  B must run its own
    choice (BLOCK=16 for n=100), never A's config (BLOCK=64, what pruning keeps for n=2000)."""
    from autotune_guard import choice_log

    guard({"AUTOTUNE_MODE": "pinned"})
    kernel = seams.make()
    release = threading.Event()
    seams.HOLD.append(release)
    results = {}

    def launch(name, n):
        try:
            results[name] = seams.launch(kernel, _x(n)).equal(_x(n) * 2)
        except Exception as exc:  # reported by the assertion below
            results[name] = repr(exc)

    a = threading.Thread(target=launch, args=("a", 2000))
    a.start()
    deadline = time.monotonic() + 10
    while kernel.__dict__.get("nargs") is None and time.monotonic() < deadline:  # A is inside Triton's run
        time.sleep(0.005)
    guard({"AUTOTUNE_MODE": "pinned"})  # a new policy while A is in flight
    seams.HOLD.clear()  # B's own pre_hook does not wait
    b = threading.Thread(target=launch, args=("b", 100))
    b.start()
    b.join(0.5)  # long enough for B to run, had it not waited for A
    release.set()
    a.join(30)
    b.join(30)
    assert results == {"a": True, "b": True}
    ran = {(block, n) for block, n, _ in seams.RAN}
    assert ran == {(64, 2000), (16, 100)}, ran  # (64, 100) would be A's config run for B's key
    assert choice_log()[_entry(100)].startswith("BLOCK=16,") and choice_log()[_entry(100)].endswith(";fallback (min_cost)")
    assert seams.TIMER_CALLS == []


def test_no_choice_escapes_the_log_while_a_policy_is_installed(guard, fresh, monkeypatch):
    """Race 2: a thread's first launch while install() runs.  Its choice is either made under the
    old policy and not used, or made under the new one and in the new log: never used unlogged."""
    from autotune_guard import choice_log, runtime

    guard({"AUTOTUNE_MODE": "pinned", "AUTOTUNE_ON_MISS": "first"})
    kernel = seams.make()
    launched = {}

    def launch():
        launched["ok"] = seams.launch(kernel, _x(100)).equal(_x(100) * 2)

    def a_launch_while_replacing(epoch):
        # Another thread's first launch while install() is replacing the process state.
        thread = threading.Thread(target=launch)
        thread.start()
        thread.join(0.5)
        launched["thread"] = thread

    undo = runtime.current().on_new_epoch(a_launch_while_replacing)
    try:
        guard({"AUTOTUNE_MODE": "pinned"})  # min_cost
    finally:
        undo()
    launched["thread"].join(30)
    assert launched["ok"] is True
    # The launch ran the new policy's choice (min_cost: 16), and the new log says so.
    assert [(block, n) for block, n, _ in seams.RAN] == [(16, 100)]
    assert set(choice_log()) == {_entry(100)}
    assert choice_log()[_entry(100)].startswith("BLOCK=16,") and choice_log()[_entry(100)].endswith(";fallback (min_cost)")


def test_pinned_on_triton_3_8_is_the_only_survivor_of_pruning_and_then_triton_cached(guard, fresh):
    """On 3.8+ the chosen config is what the kernel's pruning returns: Triton caches it without
    timing and every later launch is Triton's own cached path (``configs`` never swapped)."""
    guard({"AUTOTUNE_MODE": "pinned"})
    kernel = seams.make()
    configs = kernel.configs
    swaps = []
    for n in (100, 2000, 100, 2000):
        assert seams.launch(kernel, _x(n)).equal(_x(n) * 2)
        if kernel.configs is not configs:
            swaps.append(n)
    assert seams.TIMER_CALLS == [] and not swaps
    ran = [(block, n) for block, n, _ in seams.RAN]
    assert ran == [(16, 100), (64, 2000), (16, 100), (64, 2000)]
    if triton_adapter.strategy_of(kernel).startswith("pin-through-pruning"):
        assert {key[0]: c.kwargs["BLOCK"] for key, c in kernel.cache.items()} == {100: 16, 2000: 64}
        # Later launches never prune again: Triton finds the key in its cache.
        calls = []
        kernel.early_config_prune = lambda cs, nargs, **kw: calls.append(1) or cs
        seams.launch(kernel, _x(100))
        assert calls == []
    else:
        assert kernel.cache == {}


def test_a_listener_hears_timed_and_pinned_choices_and_the_guard_labels_from_it(guard, fresh, monkeypatch):
    """Triton 3.8+: the guard observes through ``knobs.autotuning.listener``, chains the listener
    the user set, and tells it about pinned choices too.  Triton calls a listener only for a
    kernel that is a JITFunction (under the interpreter it fails looking for one), so the kernel
    here is a real JITFunction whose launches go to the interpreter."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    from autotune_guard import choice_log

    guard({"AUTOTUNE_MODE": "pinned"})
    if not hasattr(triton, "knobs") or not _pins_through_pruning():
        pytest.skip("knobs.autotuning.listener is called from Triton 3.8 on")  # (the patch may not be in yet)
    knobs = triton.knobs.autotuning
    heard = []
    saved = knobs.listener
    knobs.listener = lambda **kw: heard.append(kw)  # the user's own listener, set first
    try:
        monkeypatch.setenv("TRITON_INTERPRET", "0")  # where Triton can call listeners
        guard({"AUTOTUNE_MODE": "auto"})
        monkeypatch.undo()
        assert knobs.listener is not saved  # the guard's, which passes on to the user's

        jit = JITFunction(seams.double_body.fn)
        jit.run = InterpretedFunction(seams.double_body.fn).run  # the launch itself, interpreted
        kernel = seams.make(fn=jit)
        assert seams.launch(kernel, _x(300)).equal(_x(300) * 2)
        (told,) = heard
        assert told["fn"] is jit and told["key"] == (300, F32, F32) and told["cache_hit"] is False
        winner = told["best_config"]
        entry = "interpret|kernels.seams.double_body|300,torch.float32,torch.float32"
        assert choice_log()[entry] == f"BLOCK={winner.kwargs['BLOCK']},num_warps=4,num_stages=3,num_ctas=1;timed"

        guard({"AUTOTUNE_MODE": "pinned"})
        pinned = seams.make(fn=jit)
        seams.launch(pinned, _x(100))
        told = heard[-1]
        assert len(heard) == 2 and told["key"] == (100, F32, F32) and told["best_config"].kwargs == {"BLOCK": 16}
        assert told["cache_hit"] is True and told["configs_timings"] == {} and told["fn"] is jit
    finally:
        knobs.listener = saved


def test_labels_say_how_triton_chose(guard, fresh):
    """auto: timed; a key the kernel's pruning left one candidate for: pruned to one on 3.8+
    (timed before); Triton's disk cache (configs rebuilt from JSON): cache hit."""
    from autotune_guard import choice_log

    guard({"AUTOTUNE_MODE": "pinned"})
    pruning_pins = _pins_through_pruning()
    guard({"AUTOTUNE_MODE": "auto"})
    kernel = seams.make(blocks=(128, 16, 32))  # n >= 1000 keeps BLOCK=128 only
    seams.launch(kernel, _x(100))
    seams.launch(kernel, _x(2000))
    log = choice_log()
    assert log[_entry(100)].endswith(";timed")
    assert log[_entry(2000)] == "BLOCK=128,num_warps=4,num_stages=3,num_ctas=1;" + (
        "pruned to one" if pruning_pins else "timed")

    def disk_hit(tuning_key, configs, bench_fn):  # what check_disk_cache does on a hit (3.4+)
        timings = {triton.Config(**{k: v for k, v in c.__dict__.items() if k != "pre_hook"}): [float(i + 1)] * 3
                   for i, c in enumerate(configs)}
        kernel.cache[tuning_key] = min(timings, key=timings.get)
        kernel.configs_timings = timings
        return True

    if not hasattr(kernel, "check_disk_cache"):
        return
    kernel.cache_results = True
    kernel.check_disk_cache = disk_hit
    kernel.configs = [triton.Config({"BLOCK": b}) for b in (128, 16, 32)]  # no pre_hooks, as the disk cache needs
    seams.launch(kernel, _x(500))
    assert choice_log()[_entry(500)] == "BLOCK=128,num_warps=4,num_stages=3,num_ctas=1;cache hit"


def test_configs_differing_only_in_ir_override_are_told_apart(guard, fresh, tmp_path):
    """Config identity covers every field Triton's Config compares: ``ir_override`` (3.4+) and the
    warp-specialisation fields (3.2/3.3).  A config leaving them at default keeps its old text."""
    import json

    from autotune_guard.core import model as selection, pinned, schema as files
    from autotune_guard.runtime import current

    guard({"AUTOTUNE_MODE": "pinned"})
    plain = triton.Config({"BLOCK": 16})
    assert selection.signature(selection.descriptor(plain)) == "BLOCK=16,num_warps=4,num_stages=3,num_ctas=1"
    if "ir_override" in triton.Config.__init__.__code__.co_varnames:
        other = triton.Config({"BLOCK": 16}, ir_override="/kernels/double.ttgir")
        a, b = selection.descriptor(plain), selection.descriptor(other)
        assert selection.signature(b) == "BLOCK=16,num_warps=4,num_stages=3,num_ctas=1,ir_override=/kernels/double.ttgir"
        assert selection.compact(b)["ir_override"] == "/kernels/double.ttgir"
        defaults = current().facts.get("config_defaults")
        entry = selection.compact(b)
        assert [pinned.entry_matches(entry, d, defaults) for d in (a, b)] == [False, True]
        assert [pinned.entry_matches({"kwargs": {"BLOCK": 16}}, d, defaults) for d in (a, b)] == [True, False]
        # A table naming the ir_override config is valid, and min_cost breaks the tie by the text.
        path = tmp_path / "interpret.json"
        path.write_text(json.dumps({"format": files.TABLE_FORMAT, "arch": "interpret",
                                    "kernels": {"k": {"*": entry}}}))
        assert files.read_document(str(path))["kernels"]["k"]["*"] == entry
        index, why, _ = pinned.select([a, b], table_entry=None, block_sizes=(), on_miss="min_cost",
                                      defaults=defaults, what="k")
        assert index == 0 and pinned.select([b, a], table_entry=None, block_sizes=(), on_miss="min_cost",
                                                defaults=defaults, what="k")[0] == 1
    # Triton 3.2/3.3's warp-specialisation fields (absent on later releases: a stand-in object).
    class WarpSpecConfig:
        kwargs, num_warps, num_stages, num_ctas, maxnreg = {"BLOCK": 16}, 4, 3, 1, None
        num_buffers_warp_spec, num_consumer_groups, reg_dec_producer, reg_inc_consumer = 2, 2, 40, 232

    desc = selection.descriptor(WarpSpecConfig())
    assert selection.signature(desc) == ("BLOCK=16,num_warps=4,num_stages=3,num_ctas=1,num_buffers_warp_spec=2,"
                                         "num_consumer_groups=2,reg_dec_producer=40,reg_inc_consumer=232")
    assert not pinned.entry_matches({"kwargs": {"BLOCK": 16}}, desc, current().facts.get("config_defaults"))


def test_pinned_governs_keys_triton_tuned_before_and_leaves_nothing_behind(guard, fresh):
    """A pinned policy installed after Triton tuned a key pins that key too (on 3.8+ it takes the
    timed winner out of Triton's cache); an auto policy after it times again rather than take a
    pinned config for Triton's winner."""
    from autotune_guard import choice_log

    guard({"AUTOTUNE_MODE": "auto"})
    kernel = seams.make()
    seams.launch(kernel, _x(100))
    assert len(seams.TIMER_CALLS) == 4
    guard({"AUTOTUNE_MODE": "pinned"})
    seams.launch(kernel, _x(100))
    pruning_pins = triton_adapter.strategy_of(kernel).startswith("pin-through-pruning")
    assert choice_log() == {_entry(100): "BLOCK=16,num_warps=4,num_stages=3,num_ctas=1;fallback (min_cost)"}
    assert seams.RAN[-1][:2] == (16, 100) and len(seams.TIMER_CALLS) == 4
    guard({"AUTOTUNE_MODE": "auto"})
    seams.launch(kernel, _x(100))
    # 3.8+: the pinned entry is gone and Triton times again; with the swap (3.3-3.7) the cache
    # never held it, and Triton's first winner is still there.
    assert len(seams.TIMER_CALLS) == (8 if pruning_pins else 4)
    assert choice_log()[_entry(100)].endswith(";timed")


def test_on_triton_3_8_pinned_launches_go_straight_to_tritons_run(guard, fresh):
    """Without Config pre_hooks (nothing on a decided key's launch reads Triton's ``nargs``), a
    pinned autotuner's launches call Triton's own run: the steady state is Triton's cached path and
    nothing else.  A new key still meets the guard (in pruning); a new policy takes it back."""
    from autotune_guard import choice_log

    guard({"AUTOTUNE_MODE": "pinned"})  # patches Triton, whose release says whether it pins by pruning
    if not _pins_through_pruning():
        pytest.skip("pruning to one is timed before Triton 3.8")
    kernel = triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (64, 16, 32)], key=["n"],
                             do_bench=seams.random_timer)(seams.double_body)
    for n in (100, 100, 300, 300):
        assert seams.launch(kernel, _x(n)).equal(_x(n) * 2)
        assert kernel.__dict__["run"].__func__ is _tritons_run()  # Triton's run, nothing between
        assert triton_adapter.strategy_of(kernel) == "pin-through-pruning:direct"
    assert choice_log() == {_entry(n): "BLOCK=16,num_warps=4,num_stages=3,num_ctas=1;fallback (min_cost)" for n in (100, 300)}
    assert {key[0]: c.kwargs["BLOCK"] for key, c in kernel.cache.items()} == {100: 16, 300: 16}
    assert seams.TIMER_CALLS == []
    guard({"AUTOTUNE_MODE": "auto"})
    assert "run" not in kernel.__dict__
    seams.launch(kernel, _x(100))
    assert len(seams.TIMER_CALLS) == 3 and choice_log()[_entry(100)].endswith(";timed")


def test_on_triton_3_8_a_hooked_kernels_decided_launches_take_no_lock(guard, fresh):
    """With Config pre_hooks, a decided key's launch is Triton's cached path written out (the
    pre_hook gets this call's own arguments, not the autotuner's shared ``nargs``): it runs while
    another thread holds the autotuner's lock; a new key's first launch, which goes through
    Triton's run and its ``nargs``, waits for that lock."""
    from autotune_guard import choice_log

    guard({"AUTOTUNE_MODE": "pinned"})
    if not _pins_through_pruning():
        pytest.skip("pruning to one is timed before Triton 3.8")
    kernel = seams.make()
    for n in (100, 100, 2000):
        assert seams.launch(kernel, _x(n)).equal(_x(n) * 2)
    assert triton_adapter.strategy_of(kernel) == "pin-through-pruning:decided"
    assert kernel.best_config.kwargs["BLOCK"] == 64
    held, release = threading.Event(), threading.Event()
    block_64 = next(c for c in kernel.configs if c.kwargs["BLOCK"] == 64)
    noted = block_64.pre_hook

    def waiting_hook(nargs):
        if nargs["n"] == 5000:  # a new key's first launch, held in flight: it holds the autotuner's lock
            held.set()
            release.wait(30)
        noted(nargs)

    block_64.pre_hook = waiting_hook
    holder = threading.Thread(target=lambda: seams.launch(kernel, _x(5000)))
    holder.start()
    assert held.wait(10)
    done = {}
    new_key = threading.Thread(target=lambda: done.setdefault(300, seams.launch(kernel, _x(300)).equal(_x(300) * 2)))
    try:
        assert seams.launch(kernel, _x(100)).equal(_x(100) * 2)  # decided: does not wait
        assert kernel.best_config.kwargs["BLOCK"] == 16
        new_key.start()
        new_key.join(0.5)
        assert done == {}  # a new key waits for the lock
    finally:
        release.set()
        holder.join(30)
        new_key.join(30)
    assert done == {300: True}
    assert [(block, n) for block, n, _ in seams.RAN] == [(16, 100), (16, 100), (64, 2000), (16, 100), (64, 5000),
                                                         (16, 300)]
    assert choice_log()[_entry(300)] == "BLOCK=16,num_warps=4,num_stages=3,num_ctas=1;fallback (min_cost)"
    assert seams.TIMER_CALLS == []


def test_on_a_triton_newer_than_tested_a_hooked_kernel_runs_tritons_run_under_the_lock(guard, fresh, monkeypatch):
    """Past the newest tested release Triton's cached path may have changed: a hooked kernel's
    launches are Triton's own run, under the autotuner's lock, instead of the written-out path."""
    from autotune_guard import choice_log

    guard({"AUTOTUNE_MODE": "pinned"})
    if not _pins_through_pruning():
        pytest.skip("pruning to one is timed before Triton 3.8")
    module = triton.runtime.autotuner
    triton_adapter.unpatch(module)
    monkeypatch.setattr(triton_adapter, "NEWEST_TESTED_TRITON", (3, 2))  # this Triton is then "newer"
    triton_adapter.patch(module)
    try:
        guard({"AUTOTUNE_MODE": "pinned"})
        kernel = seams.make()
        for n in (100, 100, 2000, 2000):
            assert seams.launch(kernel, _x(n)).equal(_x(n) * 2)
            assert triton_adapter.strategy_of(kernel) == "pin-through-pruning:held"
    finally:
        triton_adapter.unpatch(module)
        monkeypatch.undo()
        triton_adapter.patch(module)
    assert [(block, n) for block, n, _ in seams.RAN] == [(16, 100), (16, 100), (64, 2000), (64, 2000)]
    assert choice_log()[_entry(2000)].startswith("BLOCK=64,") and seams.TIMER_CALLS == []


def test_on_triton_3_8_the_written_out_cached_path_does_what_tritons_run_does(guard, fresh, monkeypatch):
    """The guard's launch of a decided key of a hooked kernel against Triton's own run on the same
    key, both launches stubbed: the same pre_hook arguments (in the same order), the same call of
    the kernel's ``run``, the same ``best_config``, the same cache.  A Triton release that changes
    its cached path fails here."""
    guard({"AUTOTUNE_MODE": "pinned"})
    if not _pins_through_pruning():
        pytest.skip("pruning to one is timed before Triton 3.8")
    kernel = seams.make()
    x, out = _x(100), torch.empty(100)
    assert seams.launch(kernel, x).equal(x * 2)
    assert seams.launch(kernel, _x(2000)).equal(_x(2000) * 2)
    assert triton_adapter.strategy_of(kernel) == "pin-through-pruning:decided"
    hooked, launched = [], []
    for config in kernel.configs:
        config.pre_hook = lambda nargs: hooked.append(nargs)
    # (the kernel function is shared with other tests: monkeypatch puts its run back)
    monkeypatch.setattr(kernel.fn, "run", lambda *args, **kwargs: launched.append((args, kwargs)) or "launched")

    def grid(meta):
        return (triton.cdiv(100, meta["BLOCK"]),)

    cache = dict(kernel.cache)
    for args, kwargs in (((x, out, 100), {}), ((x, out), {"n": 100}), ((x,), {"n": 100, "out_ptr": out})):
        del hooked[:], launched[:]
        kernel.best_config = None
        assert kernel[grid](*args, **kwargs) == "launched"  # the guard's path
        guards = kernel.best_config
        kernel.best_config = None
        assert _tritons_run()(kernel, *args, grid=grid, warmup=False, **kwargs) == "launched"
        assert kernel.best_config is guards and guards.kwargs["BLOCK"] == 16
        assert len(hooked) == 2 and hooked[0] == hooked[1] and list(hooked[0]) == list(hooked[1])
        assert hooked[0]["n"] == 100 and hooked[0]["BLOCK"] == 16
        assert len(launched) == 2 and launched[0] == launched[1]
        assert list(launched[0][1]) == list(launched[1][1])
        assert kernel.cache == cache and kernel.__dict__.get("nargs") is None
    assert seams.TIMER_CALLS == []


def test_on_triton_3_8_a_pruned_kernel_goes_straight_to_tritons_run_and_prunes_its_own_arguments(guard, fresh):
    """A kernel with its own pruning is launched by Triton's run directly too: the pruning runs
    at a new key's first launch, and reads that launch's arguments even when another thread's
    launch rewrote (and cleared) the autotuner's shared ``nargs`` after Triton's run set them."""
    from autotune_guard import choice_log

    guard({"AUTOTUNE_MODE": "pinned"})  # patches Triton, whose release says whether it pins by pruning
    if not _pins_through_pruning():
        pytest.skip("pruning to one is timed before Triton 3.8")
    pruned_for = []

    def prune(configs, nargs, **kwargs):
        pruned_for.append(nargs["n"])
        return seams.prune_small_blocks_for_large_n(configs, nargs)

    kernel = triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (128, 16, 64, 32)], key=["n"],
                             do_bench=seams.random_timer, prune_configs_by={"early_config_prune": prune})(seams.double_body)
    assert seams.launch(kernel, _x(100)).equal(_x(100) * 2)
    assert triton_adapter.strategy_of(kernel) == "pin-through-pruning:direct"
    other = []

    class Interleaved(list):
        """Triton's run reads ``keys`` between setting ``nargs`` and pruning: another thread's
        launch of the decided key runs right there, to its end (which sets ``nargs`` to None)."""

        def __iter__(self):
            if threading.current_thread() is threading.main_thread() and not other:
                thread = threading.Thread(target=lambda: other.append(seams.launch(kernel, _x(100)).equal(_x(100) * 2)))
                thread.start()
                thread.join(30)
            return super().__iter__()

    kernel.keys = Interleaved(kernel.keys)
    assert seams.launch(kernel, _x(2000)).equal(_x(2000) * 2)
    assert other == [True] and pruned_for == [100, 2000]
    assert choice_log()[_entry(2000)].startswith("BLOCK=64,") and choice_log()[_entry(2000)].endswith(";fallback (min_cost)")
    assert seams.TIMER_CALLS == []


CONSENSUS_LISTENED = """
import json, os, sys, torch, triton
import torch.distributed as dist
heard = []
triton.knobs.autotuning.listener = lambda **kw: heard.append(kw)  # the user's, set before Triton is used
import autotune_guard
from autotune_guard.core import consensus, model as selection
from autotune_guard.deciding import consensus as engine
from autotune_guard.runtime import current
from kernels import demo
dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
store = current().facts.ask("job_store")
# Another rank claimed key 200 and published its winner, as _consensus_tune does.
signatures = [selection.signature(selection.descriptor(c)) for c in demo.add_kernel.configs]
winner = demo.add_kernel.configs[5]
name = consensus.decision_name("interpret", "kernels.demo.add_kernel", "200,torch.float32,torch.float32,torch.float32")
# Rank 1's side of the protocol, run here first: it claims, "tunes" (its winner: candidate 5), publishes.
assert engine.decide(store, "test", name, 1, signatures, lambda: signatures[5], 60)[:2] == (5, True)
x = torch.rand(200)
assert torch.equal(demo.add(x, x), x + x)
assert torch.equal(demo.add(x, x), x + x)
dist.destroy_process_group()
print(json.dumps({"heard": [{"key": list(h["key"]), "block": h["best_config"].kwargs["BLOCK"],
                             "warps": h["best_config"].num_warps, "cache_hit": h["cache_hit"],
                             "timings": h["configs_timings"], "same": h["best_config"] is winner} for h in heard],
                  "log": autotune_guard.choice_log(), "timer_calls": len(demo.TIMER_CALLS)}))
"""


@pytest.mark.slow
def test_a_listener_hears_the_jobs_consensus_choice(tmp_path):
    """Triton 3.8+: a rank that pins the job's consensus winner tells the user's listener, once."""
    if not hasattr(triton, "knobs") or triton.__version__ < "3.8":
        pytest.skip("knobs.autotuning.listener is called from Triton 3.8 on")
    from support import clean_env, last_json, run_python

    store_file = tmp_path / "store"
    proc = run_python(CONSENSUS_LISTENED.replace("sys.argv[1]", repr(str(store_file))),
                      env=clean_env(AUTOTUNE_MODE="consensus"))
    result = last_json(proc.stdout)
    assert result["timer_calls"] == 0
    assert result["heard"] == [{"key": [200, F32, F32, F32], "block": 128, "warps": 2, "cache_hit": True,
                                "timings": {}, "same": True}]
    assert list(result["log"].values()) == ["BLOCK=128,num_warps=2,num_stages=3,num_ctas=1;consensus"]


@pytest.mark.slow
def test_a_child_forked_during_a_pinned_first_launch_launches_without_hanging(guard, fresh):
    """Another thread is inside a hooked kernel's first pinned launch (it holds the autotuner's
    lock) when the process forks: the child gets fresh locks and launches the kernel itself."""
    import os

    guard({"AUTOTUNE_MODE": "pinned"})
    kernel = seams.make()
    release = threading.Event()
    seams.HOLD.append(release)
    inside = threading.Thread(target=lambda: seams.launch(kernel, _x(2000)))
    inside.start()
    deadline = time.monotonic() + 10
    while kernel.__dict__.get("nargs") is None and time.monotonic() < deadline:  # inside Triton's run
        time.sleep(0.005)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one launch of another key, then report
        try:
            del seams.HOLD[:]
            ok = seams.launch(kernel, _x(100)).equal(_x(100) * 2)
            os.write(write, b"ok" if ok else b"wrong")
        finally:
            os._exit(0)
    os.close(write)
    try:
        done = threading.Event()
        answer = []
        reader = threading.Thread(target=lambda: (answer.append(os.read(read, 16)), done.set()))
        reader.start()
        finished = done.wait(60)
        if not finished:
            os.kill(pid, 9)
        assert finished and answer == [b"ok"], "the forked child hung on a lock its parent's thread held"
    finally:
        release.set()
        inside.join(30)
        os.waitpid(pid, 0)
        os.close(read)
