"""torch.compile support, the pure logic (runs on the CPU): how a kernel compiled by Inductor is
named and keyed, so that eager and compiled calls share one table entry and one choice log entry.
The real thing (Inductor compiling and launching Triton kernels) is in test_gpu_compile.py."""

import torch

from autotune_guard import inductor, interception


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
    assert interception.key_text(key) == "4096,torch.float16,torch.float32"
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


def _body(x_ptr, n, BLOCK):  # the Python function of a kernel; Triton only reads its source here
    pass


def test_unwrap_finds_the_jit_function_under_autotune_and_heuristics():
    import triton
    from triton.runtime.jit import JITFunction

    # Compiled kernels are JITFunctions (the interpreter's stand-in has no source to match).
    jit = JITFunction(_body)
    autotuner = triton.autotune(configs=[triton.Config({"BLOCK": 8})], key=["n"])(jit)
    assert inductor._unwrap(autotuner) == (jit, autotuner)
    wrapped = triton.heuristics({"EVEN": lambda args: True})(autotuner)
    assert inductor._unwrap(wrapped) == (jit, autotuner)
    assert inductor._unwrap(jit) == (jit, None)
    assert jit.__name__ == "_body" and "def _body" in jit.src
