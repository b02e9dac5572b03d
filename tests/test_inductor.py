"""torch.compile support, the pure logic (runs on the CPU): how a kernel compiled by Inductor is
named and keyed, so that eager and compiled calls share one table entry and one choice log entry.
The real thing (Inductor compiling and launching Triton kernels) is in test_gpu_compile.py."""

import torch

from autotune_guard import inductor, selection


def test_source_hash_ignores_layout_decorators_and_the_function_name():
    eager = "def row_sum(x_ptr, n, BLOCK: tl.constexpr):\n    acc = 0\n\n    return acc\n"
    generated = "@triton.jit\ndef row_sum_0(x_ptr, n, BLOCK: tl.constexpr):\n        acc = 0\n        return acc"
    assert inductor.source_hash(eager, "row_sum") == inductor.source_hash(generated, "row_sum_0")
    assert inductor.source_hash(eager, "row_sum") != inductor.source_hash(eager.replace("acc = 0", "acc = 1"), "row_sum")


def test_generated_kernels_are_named_by_their_source_not_their_number():
    body = "def {}(in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK: tl.constexpr):\n    x0 = xindex\n"
    first = inductor.generated_name("triton_red_fused_sum_0", body.format("triton_red_fused_sum_0"))
    later = inductor.generated_name("triton_red_fused_sum_7", body.format("triton_red_fused_sum_7"))
    assert first == later and first.startswith("inductor.") and len(first) == len("inductor.") + 16


def test_key_is_rebuilt_with_tritons_formula():
    x, out = torch.zeros(2, dtype=torch.float16), torch.zeros(2)
    # Runtime arguments arrive by launcher order; the key follows the kernel's declaration order.
    values = {"n": 4096, "out_ptr": out, "x_ptr": x}
    key = inductor.rebuild_key(["x_ptr", "out_ptr", "n", "BLOCK"], ["n"], values)
    assert selection.key_text(key) == "4096,torch.float16,torch.float32"
    # A key argument Inductor turned into a constant (passed 1) still counts.
    assert inductor.rebuild_key(["x_ptr", "n"], ["n"], {"x_ptr": x, "n": 1}) == (1, "torch.float16")


def test_size_hints_text():
    assert inductor.size_hints_text({"x": 64, "r0_": 4096}) == "x=64,r0_=4096"
    assert inductor.size_hints_text([64, 4096]) == "64,4096"
    assert inductor.size_hints_text(None) == "*"


def test_heuristic_values_folded_in_by_dynamo_are_projected_away():
    import triton

    config = triton.Config({"BLOCK": 64, "EVEN": True}, num_warps=2)
    desc = inductor._project(config, frozenset({"BLOCK"}))
    assert desc["kwargs"] == {"BLOCK": 64} and desc["num_warps"] == 2
    assert inductor._project(config, None)["kwargs"] == {"BLOCK": 64, "EVEN": True}


def _no_timer(kernel_call, quantiles):  # Triton 3.3 resolves a timer when an autotuner is made
    raise AssertionError("nothing is timed here")


def _body(x_ptr, n, BLOCK):  # the Python function of a kernel; Triton only reads its source here
    pass


def test_unwrap_finds_the_jit_function_under_autotune_and_heuristics():
    import triton
    from triton.runtime.jit import JITFunction

    # Compiled kernels are JITFunctions (the interpreter's stand-in has no source to match).
    jit = JITFunction(_body)
    autotuner = triton.autotune(configs=[triton.Config({"BLOCK": 8})], key=["n"], do_bench=_no_timer)(jit)
    assert inductor._unwrap(autotuner) == (jit, autotuner)
    wrapped = triton.heuristics({"EVEN": lambda args: True})(autotuner)
    assert inductor._unwrap(wrapped) == (jit, autotuner)
    assert inductor._unwrap(jit) == (jit, None)
    assert jit.__name__ == "_body" and "def _body" in jit.src


# --- the adapter's decisions, on a stand-in for Inductor's classes --------------------------------
# Inductor compiles Triton kernels only for GPUs, so on the CPU the adapter is driven through a
# stand-in with the attributes and methods of CachingAutotuner/AutotuneCache that it uses.  The real
# classes are driven by test_gpu_compile.py.

import json
import types

import pytest
import triton

from autotune_guard import choice_log
from autotune_guard.selection import SelectionError

GENERATED_SRC = "def triton_poi_fused_0(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):\n    pass\n"
CONFIGS = [triton.Config({"XBLOCK": 1024}, num_warps=4), triton.Config({"XBLOCK": 128}, num_warps=4),
           triton.Config({"XBLOCK": 512}, num_warps=8)]


class _Launcher:
    def __init__(self, config, def_args):
        self.config, self.def_args = config, def_args


class _CachingAutotuner:
    """What Inductor's CachingAutotuner does at its autotuning step: time every launcher (here the
    last one declared is the fastest), keep the fastest; coordinate descent may re-time it."""

    def __init__(self, fn, configs, custom_kernel=False, def_args=("in_ptr0", "out_ptr0", "xnumel")):
        self.fn, self.custom_kernel = fn, custom_kernel
        self.launchers = [_Launcher(c, list(def_args)) for c in configs]
        self.inductor_meta, self.triton_meta = {"kernel_name": fn.__name__ + "_0"}, {"constants": {}}
        self.size_hints = {"x": 8192}
        self.benchmarked = self.descended = 0

    def benchmark_all_configs(self, *args, **kwargs):
        self.benchmarked += 1
        return {launcher: 1.0 / (i + 1) for i, launcher in enumerate(self.launchers)}

    def autotune_to_one_config(self, *args, **kwargs):
        timings = self.benchmark_all_configs(*args, **kwargs)
        self.launchers = [min(timings, key=timings.get)]

    def coordinate_descent_tuning(self, launcher, *args, **kwargs):
        self.descended += 1
        return launcher

    def run(self, *args, **kwargs):
        if len(self.launchers) > 1:
            self.autotune_to_one_config(*args, **kwargs)
        return self.launchers[0].config


class _AutotuneCache:
    saved = []

    def read_best(self, inductor_meta, configs):
        return configs[0]

    def save(self, config, *args, **kwargs):
        self.saved.append(config)


@pytest.fixture(scope="module")
def stand_in():
    module = types.SimpleNamespace(CachingAutotuner=_CachingAutotuner, AutotuneCache=_AutotuneCache)
    inductor.patch(module)
    inductor.patch(module)  # idempotent
    return module


def _generated():
    return _CachingAutotuner(types.SimpleNamespace(__name__="triton_poi_fused_0", src=GENERATED_SRC), CONFIGS)


def _entry(kernel):
    name = inductor.generated_name("triton_poi_fused_0", GENERATED_SRC)
    return choice_log().get(f"interpret|{name}|x=8192")


def test_pinned_never_benchmarks_and_picks_the_eager_rule(stand_in, guard):
    guard({"AUTOTUNE_MODE": "pinned"})
    kernel = _generated()
    x = torch.zeros(4)
    assert kernel.run(x, x, 8192).kwargs == {"XBLOCK": 128}  # min_cost: the smallest tile
    assert kernel.benchmarked == 0 and len(kernel.launchers) == 1
    assert _entry(kernel) == "XBLOCK=128,num_warps=4,num_stages=3,num_ctas=1;pinned"
    # Re-tuning after the choice is skipped, and marked so that Inductor does not ask again.
    launcher = kernel.launchers[0]
    assert kernel.coordinate_descent_tuning(launcher, x, x, 8192) is launcher
    assert kernel.descended == 0 and launcher.config.found_by_coordesc is True
    # Inductor's cache is neither read nor written.
    assert _AutotuneCache().read_best({}, CONFIGS) is None
    _AutotuneCache().save(CONFIGS[0])
    assert _AutotuneCache.saved == []


def test_patched_methods_still_pickle_as_bound_methods(stand_in):
    # Inductor's compile workers pickle kernels that hold bound methods (the cache's save hook);
    # a bound method pickles by its function's name, so the guard's must answer to Inductor's.
    import pickle

    cache, kernel = pickle.loads(pickle.dumps((_AutotuneCache(), _generated())))
    for bound in (cache.save, cache.read_best, kernel.autotune_to_one_config, kernel.benchmark_all_configs,
                  kernel.coordinate_descent_tuning):
        again = pickle.loads(pickle.dumps(bound))
        assert again.__func__ is bound.__func__ and getattr(again.__func__, "_autotune_guard", False)


def test_pinned_with_block_sizes_and_chaos_use_the_same_rule(stand_in, guard):
    guard({"AUTOTUNE_MODE": "pinned", "AUTOTUNE_BLOCK_SIZES": "XBLOCK=512"})
    kernel = _generated()
    assert kernel.run(torch.zeros(1), torch.zeros(1), 8192).kwargs == {"XBLOCK": 512}


def test_auto_lets_inductor_time_and_logs_the_winner(stand_in, guard, ag_log):
    guard({"AUTOTUNE_MODE": "auto"})
    kernel = _generated()
    assert kernel.run(torch.zeros(1), torch.zeros(1), 8192).kwargs == {"XBLOCK": 512}  # the fastest
    assert kernel.benchmarked == 1
    assert _entry(kernel) == "XBLOCK=512,num_warps=8,num_stages=3,num_ctas=1;timed"
    # Inductor's cache and coordinate descent still work in auto mode, and are named.
    assert _AutotuneCache().read_best({"kernel_name": "triton_poi_fused_0"}, CONFIGS) is CONFIGS[0]
    kernel.coordinate_descent_tuning(kernel.launchers[0])
    assert kernel.descended == 1
    said = "\n".join(ag_log.messages())
    assert "best_config cache chose" in said and "coordinate descent" in said and "did not govern" in said


def test_on_miss_error_refuses_what_the_guard_cannot_govern(stand_in, guard):
    guard({"AUTOTUNE_MODE": "auto", "AUTOTUNE_ON_MISS": "error"})
    kernel = _generated()
    kernel.run(torch.zeros(1), torch.zeros(1), 8192)
    from autotune_guard import state

    state.now.lasting.ungoverned.kernels.clear()  # named once per process: the auto test above named this kernel
    with pytest.raises(SelectionError, match="coordinate descent"):
        kernel.coordinate_descent_tuning(kernel.launchers[0])


def _user_body(x_ptr, out_ptr, n, BLOCK):  # a user's kernel function; only its source is read here
    pass


def _user_kernel():
    """A user's autotuned kernel as Dynamo saw it, and a CachingAutotuner over Inductor's copy of it
    (the same source; Dynamo's heuristics folded into each config)."""
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table
    from triton.runtime.jit import JITFunction

    user = triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (64, 32, 128)], key=["n"],
                           do_bench=_no_timer)(JITFunction(_user_body))
    kernel_side_table.add_kernel(user)  # what Dynamo does when it traces kernel[grid](...)
    copy = types.SimpleNamespace(__name__="_user_body", src="@triton.jit\n" + user.fn.src)
    configs = [triton.Config({"BLOCK": b, "EVEN": True}) for b in (64, 32, 128)]
    return _CachingAutotuner(copy, configs, custom_kernel=True, def_args=("x_ptr", "out_ptr", "n"))


USER = f"interpret|{__name__}._user_body"


def test_a_user_kernel_keeps_its_eager_name_and_key(stand_in, guard):
    guard({"AUTOTUNE_MODE": "pinned"})
    kernel = _user_kernel()
    x, out = torch.zeros(8, dtype=torch.float16), torch.zeros(8)
    assert kernel.run(x, out, 4096).kwargs == {"BLOCK": 32, "EVEN": True}
    assert choice_log()[f"{USER}|4096,torch.float16,torch.float32"] == \
        "BLOCK=32,num_warps=4,num_stages=3,num_ctas=1;pinned"


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


def test_a_program_compiled_for_static_shapes_keeps_inductors_own_launch_path(stand_in, guard, tmp_path):
    guard(_pin_by_key(tmp_path))
    kernel = _user_kernel()
    x, out = torch.zeros(8, dtype=torch.float16), torch.zeros(8)
    # Every launch passes the key argument as the same literal: the key cannot change, so the guard
    # leaves no wrapper on the kernel (its launches are Inductor's own run).
    program = _program(tmp_path, "static_prog", kernel, ["row_sum_0.run(x, out, 4096, stream=0)",
                                                         "return row_sum_0.run(x, out, 4096, stream=0)"])
    assert program.call(x, out, 4096).kwargs == {"BLOCK": 128, "EVEN": True}
    assert "run" not in kernel.__dict__
    assert [k for k in choice_log() if k.startswith(USER)] == [f"{USER}|4096,torch.float16,torch.float32"]


@pytest.mark.parametrize("lines", [
    ["return row_sum_0.run(x, out, n, stream=0)"],  # dynamic shapes: a symbolic size
    ["row_sum_0.run(x, out, 4096, stream=0)", "return row_sum_0.run(x, out, n, stream=0)"],
    ["if n == 4096: return row_sum_0.run(x, out, 4096, stream=0)",  # one kernel, two static shapes
     "return row_sum_0.run(x, out, 2048, stream=0)"],
], ids=["symbolic", "literal-and-symbolic", "two-literals"])
def test_a_program_whose_key_can_change_is_followed_launch_by_launch(stand_in, guard, tmp_path, lines):
    guard(_pin_by_key(tmp_path))
    kernel = _user_kernel()
    x, out = torch.zeros(8, dtype=torch.float16), torch.zeros(8)
    program = _program(tmp_path, "prog_" + str(abs(hash(tuple(lines)))), kernel, lines)
    assert program.call(x, out, 4096).kwargs == {"BLOCK": 128, "EVEN": True}
    assert "run" in kernel.__dict__
    # The same kernel object, launched with the other key: pinned follows it.
    assert program.call(x, out, 2048).kwargs == {"BLOCK": 64, "EVEN": True}
    assert program.call(x, out, 4096).kwargs == {"BLOCK": 128, "EVEN": True}
    assert {k: v for k, v in choice_log().items() if k.startswith(USER)} == {
        f"{USER}|4096,torch.float16,torch.float32": "BLOCK=128,num_warps=4,num_stages=3,num_ctas=1;pinned",
        f"{USER}|2048,torch.float16,torch.float32": "BLOCK=64,num_warps=4,num_stages=3,num_ctas=1;pinned"}


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
