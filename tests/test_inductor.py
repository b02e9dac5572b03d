"""torch.compile support on the CPU: how a kernel compiled by Inductor is named and keyed (so eager
and compiled calls share one table entry and one choice-log entry), and what the guard does at
Inductor's autotuning step in each mode.

Inductor compiles Triton kernels only for GPUs and Dynamo cannot trace Triton's interpreter, so the
step is driven on Inductor's real ``CachingAutotuner`` and ``AutotuneCache`` (patched as the
post-import hook patches them), with stand-in launchers and a stand-in timer. Inductor compiling
and launching real kernels is in test_gpu_compile.py."""

import json
import pickle
import types

import pytest
import torch
import triton
from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table
from torch._inductor.runtime import triton_heuristics
from torch._inductor.runtime.autotune_cache import AutotuneCache
from torch._inductor.runtime.hints import DeviceProperties, HeuristicType
from triton.runtime.jit import JITFunction

import autotune_guard
from autotune_guard import SelectionError, choice_log
from autotune_guard import _patching
from autotune_guard.adapters import inductor
from autotune_guard.adapters.inductor import names

# --- names and keys -----------------------------------------------------------------------------


def test_source_hash_ignores_layout_decorators_and_the_function_name():
    eager = "def row_sum(x_ptr, n, BLOCK: tl.constexpr):\n    acc = 0\n\n    return acc\n"
    generated = "@triton.jit\ndef row_sum_0(x_ptr, n, BLOCK: tl.constexpr):\n        acc = 0\n        return acc"
    assert names.source_hash(eager, "row_sum") == names.source_hash(generated, "row_sum_0")
    assert names.source_hash(eager, "row_sum") != names.source_hash(eager.replace("acc = 0", "acc = 1"), "row_sum")


def test_generated_kernels_are_named_by_their_source_not_their_number():
    body = "def {}(in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK: tl.constexpr):\n    x0 = xindex\n"
    first = names.generated_name("triton_red_fused_sum_0", body.format("triton_red_fused_sum_0"))
    later = names.generated_name("triton_red_fused_sum_7", body.format("triton_red_fused_sum_7"))
    assert first == later and first.startswith("inductor.") and len(first) == len("inductor.") + 16


def test_size_hints_text():
    assert names.size_hints_text({"x": 64, "r0_": 4096}) == "x=64,r0_=4096"
    assert names.size_hints_text([64, 4096]) == "64,4096"
    assert names.size_hints_text(None) == "*"


# --- Inductor's real classes, patched -----------------------------------------------------------

@pytest.fixture(scope="module")
def patched():
    """The guard's methods on Inductor's classes, as the post-import hook puts them (undone after,
    unless a hook of this process had put them there before)."""
    before = _patching.patched(triton_heuristics.CachingAutotuner, "autotune_to_one_config")
    patches = inductor.patch(triton_heuristics)
    assert inductor.patch(triton_heuristics) == patches  # idempotent
    yield triton_heuristics
    if before is None:
        for found in reversed(patches):
            found.undo()


def _no_timer(kernel_call, quantiles):  # Triton 3.3 resolves a timer when an autotuner is made
    raise AssertionError("nothing is timed here")


class _Launcher:
    """What Inductor's launcher offers the step: its config and argument names; launching it
    returns the config it runs."""

    store_cubin, cache_hash, n_regs, n_spills, shared = False, None, 0, 0, 0

    def __init__(self, config, def_args):
        self.config, self.def_args = config, list(def_args)

    def __call__(self, *args, stream=None, **kwargs):
        return self.config


def _autotuner(fn, configs, *, custom_kernel=False, def_args=("in_ptr0", "out_ptr0", "xnumel"), constants=None,
               inductor_meta=None):
    """A real CachingAutotuner over stand-in launchers, on the launch path of a GPU run (not the
    interpreter's), whose timer finds the last launcher declared the fastest."""
    heuristic = HeuristicType.USER_AUTOTUNE if custom_kernel else HeuristicType.POINTWISE
    meta = {"device": DeviceProperties.create(torch.device("cpu")), "signature": {}, "constants": constants or {}}
    kernel = triton_heuristics.CachingAutotuner(
        fn, meta, configs, None, [], False, heuristic, size_hints={"x": 8192}, custom_kernel=custom_kernel,
        inductor_meta={"kernel_name": fn.__name__ + "_0", **(inductor_meta or {})})
    kernel.launchers = [_Launcher(c, def_args) for c in configs]
    kernel.triton_interpret, kernel._cache_eligible = False, True
    kernel.benchmarked = kernel.descended = 0

    def bench(launcher, *args, **kwargs):
        kernel.benchmarked += 1
        return 1.0 / (kernel.launchers.index(launcher) + 1)

    def descend(launcher, *args, **kwargs):
        kernel.descended += 1
        return launcher

    kernel.bench, kernel._coordinate_descent_tuning, kernel._should_coordesc_tune = bench, descend, True
    return kernel


CONFIGS = [triton.Config({"XBLOCK": 1024}, num_warps=4), triton.Config({"XBLOCK": 128}, num_warps=4),
           triton.Config({"XBLOCK": 512}, num_warps=8)]


def _generated(tag="0", **kw):
    """An Inductor-generated pointwise kernel; ``tag`` changes its source, so its name."""
    name = f"triton_poi_fused_{tag}"
    src = f"def {name}(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):\n    x0 = {tag!r}\n"
    configs = [triton.Config(dict(c.kwargs), num_warps=c.num_warps) for c in CONFIGS]
    return _autotuner(types.SimpleNamespace(__name__=name, src=src), configs, **kw)


def _entry(kernel):
    return choice_log().get(f"interpret|{names.generated_name(kernel.fn.__name__, kernel.fn.src)}|x=8192")


def _cache(tmp_path):
    return AutotuneCache.create({}, str(tmp_path / "c0ffee.py"), "configs-hash")


X = torch.zeros(4)


def test_pinned_never_benchmarks_and_picks_the_eager_rule(patched, guard, tmp_path):
    _cache(tmp_path).save(CONFIGS[0], 0)  # a winner some earlier process timed
    guard({"AUTOTUNE_MODE": "pinned"})
    kernel = _generated(inductor_meta={"coordinate_descent_tuning": True})
    assert kernel.run(X, X, 8192, stream=0).kwargs == {"XBLOCK": 128}  # min_cost: the smallest tile
    assert kernel.benchmarked == 0 and len(kernel.launchers) == 1
    assert _entry(kernel) == "XBLOCK=128,num_warps=4,num_stages=3,num_ctas=1;fallback (min_cost)"
    # Re-tuning after the choice is skipped, and marked so that Inductor does not ask again.
    assert kernel.descended == 0 and kernel.launchers[0].config.found_by_coordesc is True
    assert kernel.run(X, X, 8192, stream=0).kwargs == {"XBLOCK": 128} and kernel.descended == 0
    # Inductor's cache is neither read nor written.
    assert _cache(tmp_path).read_best({}, CONFIGS) is None
    _cache(tmp_path).save(CONFIGS[2], 0)
    autotune_guard.uninstall()
    assert _cache(tmp_path).read_best({}, CONFIGS).kwargs == {"XBLOCK": 1024}


def test_patched_methods_still_pickle_as_bound_methods(patched, tmp_path):
    # Inductor's compile workers pickle kernels that hold bound methods (the cache's save hook);
    # a bound method pickles by its function's name, so the guard's must answer to Inductor's.
    inductor.patch(triton_heuristics)  # a test before may have uninstalled, which undoes every patch
    kernel = triton_heuristics.CachingAutotuner(
        types.SimpleNamespace(__name__="k", src="def k(): pass"),
        {"device": DeviceProperties.create(torch.device("cpu")), "signature": {}}, CONFIGS, None, [], False,
        HeuristicType.POINTWISE)
    cache = _cache(tmp_path)
    for bound in (cache.save, cache.read_best, kernel.autotune_to_one_config, kernel.benchmark_all_configs,
                  kernel.coordinate_descent_tuning):
        again = pickle.loads(pickle.dumps(bound))
        assert again.__func__ is bound.__func__ and _patching.is_replacement(again.__func__)


def test_pinned_with_block_sizes_uses_the_same_rule(patched, guard):
    guard({"AUTOTUNE_MODE": "pinned", "AUTOTUNE_BLOCK_SIZES": "XBLOCK=512"})
    assert _generated().run(X, X, 8192, stream=0).kwargs == {"XBLOCK": 512}


def test_auto_lets_inductor_time_and_logs_the_winner(patched, guard, ag_log, tmp_path):
    guard({"AUTOTUNE_MODE": "auto"})
    kernel = _generated("auto", inductor_meta={"coordinate_descent_tuning": True})
    assert kernel.run(X, X, 8192, stream=0).kwargs == {"XBLOCK": 512}  # the fastest
    assert kernel.benchmarked == 3
    assert _entry(kernel) == "XBLOCK=512,num_warps=8,num_stages=3,num_ctas=1;timed"
    # Inductor's cache and coordinate descent still work in auto mode, and are named.
    assert kernel.descended == 1
    _cache(tmp_path).save(CONFIGS[1], 0)
    assert _cache(tmp_path).read_best({"kernel_name": "triton_poi_fused_auto_0"}, CONFIGS).kwargs == {"XBLOCK": 128}
    said = "\n".join(ag_log.messages())
    assert "best_config cache chose" in said and "coordinate descent" in said and "did not govern" in said
    assert "inductor cache:triton_poi_fused_auto_0" in autotune_guard.ungoverned()


def test_on_miss_error_refuses_what_the_guard_cannot_govern(patched, guard):
    guard({"AUTOTUNE_MODE": "auto", "AUTOTUNE_ON_MISS": "error"})
    kernel = _generated("refused", inductor_meta={"coordinate_descent_tuning": True})
    with pytest.raises(SelectionError, match="coordinate descent"):
        kernel.run(X, X, 8192, stream=0)


def test_consensus_without_a_process_group_times_alone(patched, guard):
    guard({"AUTOTUNE_MODE": "consensus"})
    kernel = _generated("alone")
    # 3 launchers, then the lone finalist and its runner-up once more (a spiked first pass is caught)
    assert kernel.run(X, X, 8192, stream=0).kwargs == {"XBLOCK": 512} and kernel.benchmarked == 5
    assert _entry(kernel) == "XBLOCK=512,num_warps=8,num_stages=3,num_ctas=1;timed"


def test_consensus_times_inductors_finalists_again_and_freezes_the_declared_first_of_a_tie(patched, guard, tmp_path):
    # Inductor's own step times each launcher once and keeps the fastest: with two launchers 0.1 %
    # apart and 1 % noise a call, cold runs froze either. Timed for the table, the engine times
    # each launcher with Inductor's bench, the finalists again in rounds: the same one, measured.
    import random

    from autotune_guard.evidence import table_growth

    costs, frozen = [1.001, 1.0, 1.03], []  # the declared-first of the tie is XBLOCK=1024
    for seed in range(6):
        rng = random.Random(seed)
        tables = tmp_path / str(seed)
        tables.mkdir()
        guard({"AUTOTUNE_MODE": "consensus", "AUTOTUNE_TABLE_PATH": str(tables)})
        kernel = _generated("retimed")
        launchers = list(kernel.launchers)

        def bench(launcher, *args, **kwargs):
            kernel.benchmarked += 1
            return costs[launchers.index(launcher)] * (1 + rng.gauss(0, 0.01))

        kernel.bench = bench
        launched = kernel.run(X, X, 8192, stream=0).kwargs
        table_growth.flush()
        assert len(kernel.launchers) == 1 and kernel.launchers[0].config.kwargs == launched
        assert kernel.benchmarked > 3  # the finalists timed again
        (measured,) = json.loads((tables / "interpret.json").read_text())["measured"][
            names.generated_name(kernel.fn.__name__, kernel.fn.src)].values()
        assert measured["how"] in ("tie", "clear") and measured["rounds"] >= 3 and len(measured["candidates"]) == 3
        assert measured["winner"].startswith(f"XBLOCK={launched['XBLOCK']},")
        frozen.append(launched["XBLOCK"])
    assert frozen.count(1024) >= 5, frozen


def test_a_missing_seam_is_named_or_refused(patched, guard):
    guard({"AUTOTUNE_MODE": "pinned", "AUTOTUNE_ON_MISS": "error"})
    with pytest.raises(SelectionError, match="NOT governed"):
        inductor.patch(types.SimpleNamespace())
    guard({"AUTOTUNE_MODE": "pinned"})
    assert inductor.patch(types.SimpleNamespace()) == []
    assert "torch.compile" in autotune_guard.ungoverned()


# --- user kernels -------------------------------------------------------------------------------

def _user_body(x_ptr, out_ptr, n, BLOCK):  # a user's kernel function; only its source is read here
    pass


def _user_kernel(wrap=None, constants=None, def_args=("x_ptr", "out_ptr", "n")):
    """A user's autotuned kernel as Dynamo saw it, and a CachingAutotuner over Inductor's copy of it
    (the same source; Dynamo's heuristics folded into each config)."""
    user = triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (64, 32, 128)], key=["n"],
                           do_bench=_no_timer)(JITFunction(_user_body))
    kernel_side_table.add_kernel(wrap(user) if wrap else user)  # what Dynamo does when it traces kernel[grid](...)
    copy = types.SimpleNamespace(__name__="_user_body", src="@triton.jit\n" + user.fn.src)
    configs = [triton.Config({"BLOCK": b, "EVEN": True}) for b in (64, 32, 128)]
    return _autotuner(copy, configs, custom_kernel=True, def_args=def_args, constants=constants)


USER = f"interpret|{__name__}._user_body"
F16 = torch.zeros(8, dtype=torch.float16)
F32 = torch.zeros(8)


def test_a_user_kernel_keeps_its_eager_name_and_tritons_key(patched, guard):
    guard({"AUTOTUNE_MODE": "pinned"})
    # Runtime arguments arrive in launcher order; the key is Triton's: key values, then dtypes.
    # Heuristic values Dynamo folded into the compiled configs (EVEN) are not in the signature.
    assert _user_kernel().run(F16, F32, 4096, stream=0).kwargs == {"BLOCK": 32, "EVEN": True}
    assert choice_log()[f"{USER}|4096,torch.float16,torch.float32"] == \
        "BLOCK=32,num_warps=4,num_stages=3,num_ctas=1;fallback (min_cost)"


def test_a_key_argument_inductor_made_a_constant_still_counts(patched, guard):
    guard({"AUTOTUNE_MODE": "pinned"})
    kernel = _user_kernel(constants={"n": 1}, def_args=("x_ptr", "out_ptr"))
    kernel.run(F16, F32, stream=0)
    assert f"{USER}|1,torch.float16,torch.float32" in choice_log()
    assert "run" not in kernel.__dict__  # one key per compiled kernel: nothing to follow


def test_a_user_kernel_under_heuristics_is_matched(patched, guard):
    guard({"AUTOTUNE_MODE": "pinned"})
    _user_kernel(wrap=triton.heuristics({"EVEN": lambda args: True})).run(F16, F32, 1024, stream=0)
    assert f"{USER}|1024,torch.float16,torch.float32" in choice_log()


def test_an_unmatched_user_kernel_is_named_by_inductor_and_said_once(patched, guard, ag_log):
    guard({"AUTOTUNE_MODE": "pinned"})
    copy = types.SimpleNamespace(__name__="nowhere", src="def nowhere(x_ptr, BLOCK):\n    return 7\n")
    for _ in range(2):
        _autotuner(copy, list(CONFIGS), custom_kernel=True).run(F32, F32, 8, stream=0)
    assert choice_log()["interpret|torch_compile.nowhere_0|*"].endswith(";fallback (min_cost)")
    assert sum("nowhere" in m and "not found" in m for m in ag_log.messages()) == 1


def _program(tmp_path, name, kernel, lines):
    """A module shaped like Inductor's generated wrapper: the kernel is one of its globals, and
    ``call`` launches it with the arguments as written in ``lines`` (literals, or ``n``)."""
    import importlib.util

    path = tmp_path / f"{name}.py"
    path.write_text("def call(x, out, n):\n" + "".join(f"    {line}\n" for line in lines))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.row_sum_0 = kernel
    return module


def _pin_by_key(tmp_path):
    table = {"format": "autotune_guard.table/1", "arch": "interpret", "kernels": {f"{__name__}._user_body": {
        "4096,torch.float16,torch.float32": {"kwargs": {"BLOCK": 128}},
        "2048,torch.float16,torch.float32": {"kwargs": {"BLOCK": 64}}}}}
    (tmp_path / "interpret.json").write_text(json.dumps(table))
    return {"AUTOTUNE_MODE": "pinned", "AUTOTUNE_TABLE_PATH": str(tmp_path), "AUTOTUNE_ON_MISS": "error"}


def test_a_program_compiled_for_static_shapes_keeps_inductors_own_launch_path(patched, guard, tmp_path):
    guard(_pin_by_key(tmp_path))
    kernel = _user_kernel()
    # Every launch passes the key argument as the same literal: the key cannot change, so the guard
    # leaves no wrapper on the kernel (its launches are Inductor's own run).
    program = _program(tmp_path, "static_prog", kernel, ["row_sum_0.run(x, out, 4096, stream=0)",
                                                         "return row_sum_0.run(x, out, 4096, stream=0)"])
    assert program.call(F16, F32, 4096).kwargs == {"BLOCK": 128, "EVEN": True}
    assert "run" not in kernel.__dict__
    assert [k for k in choice_log() if k.startswith(USER)] == [f"{USER}|4096,torch.float16,torch.float32"]


@pytest.mark.parametrize("lines", [
    ["return row_sum_0.run(x, out, n, stream=0)"],  # dynamic shapes: a symbolic size
    ["row_sum_0.run(x, out, 4096, stream=0)", "return row_sum_0.run(x, out, n, stream=0)"],
    ["if n == 4096: return row_sum_0.run(x, out, 4096, stream=0)",  # one kernel, two static shapes
     "return row_sum_0.run(x, out, 2048, stream=0)"],
], ids=["symbolic", "literal-and-symbolic", "two-literals"])
def test_a_program_whose_key_can_change_is_followed_launch_by_launch(patched, guard, tmp_path, lines):
    guard(_pin_by_key(tmp_path))
    kernel = _user_kernel()
    program = _program(tmp_path, "prog_" + str(abs(hash(tuple(lines)))), kernel, lines)
    assert program.call(F16, F32, 4096).kwargs == {"BLOCK": 128, "EVEN": True}
    assert "run" in kernel.__dict__
    # The same kernel object, launched with the other key: pinned follows it (past Inductor's
    # cached launcher of its fast path).
    assert program.call(F16, F32, 2048).kwargs == {"BLOCK": 64, "EVEN": True}
    assert program.call(F16, F32, 4096).kwargs == {"BLOCK": 128, "EVEN": True}
    assert {k: v for k, v in choice_log().items() if k.startswith(USER)} == {
        f"{USER}|4096,torch.float16,torch.float32": "BLOCK=128,num_warps=4,num_stages=3,num_ctas=1;table",
        f"{USER}|2048,torch.float16,torch.float32": "BLOCK=64,num_warps=4,num_stages=3,num_ctas=1;table"}


def test_auto_notes_each_new_key_with_the_launcher_inductor_kept(patched, guard, tmp_path):
    guard({"AUTOTUNE_MODE": "auto"})
    kernel = _user_kernel()
    program = _program(tmp_path, "auto_prog", kernel, ["return row_sum_0.run(x, out, n, stream=0)"])
    assert program.call(F16, F32, 4096).kwargs == {"BLOCK": 128, "EVEN": True}  # the fastest
    assert program.call(F16, F32, 2048).kwargs == {"BLOCK": 128, "EVEN": True}
    assert {k: v for k, v in choice_log().items() if k.startswith(USER)} == {
        f"{USER}|4096,torch.float16,torch.float32": "BLOCK=128,num_warps=4,num_stages=3,num_ctas=1;timed",
        f"{USER}|2048,torch.float16,torch.float32": "BLOCK=128,num_warps=4,num_stages=3,num_ctas=1;reused"}


def test_a_kernel_tuned_under_one_policy_notes_nothing_under_the_next(patched, guard, tmp_path):
    guard(_pin_by_key(tmp_path))
    kernel = _user_kernel()
    program = _program(tmp_path, "epoch_prog", kernel, ["return row_sum_0.run(x, out, n, stream=0)"])
    program.call(F16, F32, 4096)
    guard({"AUTOTUNE_MODE": "auto"})
    # Inductor tunes a kernel once: it keeps the rule it was tuned under; the new policy's log only
    # holds choices made under it.
    assert program.call(F16, F32, 2048).kwargs == {"BLOCK": 64, "EVEN": True}
    assert not [k for k in choice_log() if k.startswith(USER)]


@pytest.mark.slow
def test_the_compiled_launch_benchmark_runs():
    # scripts/bench_compiled_launch.py drives this adapter from generated-wrapper-shaped modules; it
    # asserts the pinned config, no wrapper for a literal key and the wrapper for a symbolic one.
    import os
    import subprocess
    import sys

    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts",
                          "bench_compiled_launch.py")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
    proc = subprocess.run([sys.executable, script, "--reps", "2", "--launches", "50"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "dynamic shapes (the guard's per-key wrapper)" in proc.stdout and "not governed" not in proc.stderr
