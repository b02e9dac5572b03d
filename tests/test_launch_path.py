"""The steady launch path of every mode (issue 23): once a key is decided, auto and record launch
through Triton's own run with nothing of the guard around it, and consensus (and pinned on Triton
3.3-3.7) through Triton's cached path written out over the guard's choices; a new key still meets
the guard, with the right label, and a new policy takes the launches back. Real kernels under
TRITON_INTERPRET=1, from real threads."""

import threading

import torch
import triton

from autotune_guard.adapters import triton as triton_adapter
from kernels import seams

F32 = "torch.float32"


def _x(n):
    return torch.arange(n, dtype=torch.float32)


def _entry(n):
    return f"interpret|kernels.seams.double_body|{n},{F32},{F32}"


def _pins_through_pruning():
    return tuple(int(p) for p in triton.__version__.split(".")[:2]) >= (3, 8)


def test_auto_launches_by_tritons_run_and_notes_each_new_key_from_any_thread(guard):
    from autotune_guard import choice_log

    guard({"AUTOTUNE_MODE": "auto"})
    kernel = seams.make(prune_configs_by={})
    assert seams.launch(kernel, _x(100)).equal(_x(100) * 2)
    assert triton_adapter.strategy_of(kernel) == "observe:direct"
    assert "run" in kernel.__dict__  # Triton's own run on the instance: the guard's run is not called
    calls_before = len(seams.TIMER_CALLS)
    outs = {}

    def launch(n):
        outs[n] = seams.launch(kernel, _x(n)).equal(_x(n) * 2)

    for n in (200, 300, 400):  # one at a time: Triton's interpreter is not thread-safe
        thread = threading.Thread(target=launch, args=(n,))
        thread.start()
        thread.join()
    assert all(outs.values()) and len(outs) == 3
    log = choice_log()
    for n in (100, 200, 300, 400):  # each key noted once, as Triton stored its winner, labelled timed
        signature, how = log[_entry(n)].split(";")
        assert how == "timed" and signature == str(_signature(kernel.cache[(n, F32, F32)])), log
    assert len(seams.TIMER_CALLS) > calls_before  # Triton itself timed the new keys
    for _ in range(5):  # decided keys: Triton's cache hits, no timing, nothing new in the log
        seams.launch(kernel, _x(200))
    assert len(choice_log()) == len(log)


def _signature(config):
    from autotune_guard.core.model import descriptor, signature

    return signature(descriptor(config))


def test_a_winner_pruning_leaves_alone_is_labelled_pruned_to_one_on_3_8(guard):
    from autotune_guard import choice_log

    guard({"AUTOTUNE_MODE": "record", "AUTOTUNE_RECORD_PATH": "/tmp/ag-test-launch-path/rec"})
    kernel = seams.make(prune_configs_by={"early_config_prune": lambda configs, nargs, **kw: configs[:1]})
    seams.launch(kernel, _x(100))
    assert triton_adapter.strategy_of(kernel) == "observe:direct"
    how = choice_log()[_entry(100)].split(";")[1]
    assert how == ("pruned to one" if _pins_through_pruning() else "timed"), choice_log()


def test_consensus_alone_launches_decided_keys_through_the_written_out_path(guard):
    from autotune_guard import choice_log

    guard({"AUTOTUNE_MODE": "consensus"})
    kernel = seams.make(prune_configs_by={})
    del seams.RAN[:]
    assert seams.launch(kernel, _x(100)).equal(_x(100) * 2)
    assert triton_adapter.strategy_of(kernel) == "consensus:selected"
    assert seams.launch(kernel, _x(500)).equal(_x(500) * 2)  # a new key: decided, then launched
    chosen = {n: choice_log()[_entry(n)].split(";")[0] for n in (100, 500)}
    del seams.RAN[:]
    for n in (100, 500, 100):
        assert seams.launch(kernel, _x(n)).equal(_x(n) * 2)
    # each decided key ran its own config, the pre_hook given that call's own n
    assert [(f"BLOCK={b}", n) for b, n, _ in seams.RAN] == [(c.split(",")[0], n) for n, c in
                                                            ((100, chosen[100]), (500, chosen[500]), (100, chosen[100]))]


def test_pinned_then_a_new_policy_takes_the_launches_back(guard):
    from autotune_guard import choice_log

    guard({"AUTOTUNE_MODE": "pinned"})
    kernel = seams.make(prune_configs_by={})
    seams.launch(kernel, _x(100))
    expected = "pin-through-pruning:decided" if _pins_through_pruning() else "pin-by-swap:selected"
    assert triton_adapter.strategy_of(kernel) == expected
    assert choice_log()[_entry(100)].endswith(";fallback (min_cost)")  # no table
    guard({"AUTOTUNE_MODE": "auto"})
    assert "run" not in kernel.__dict__ and triton_adapter.strategy_of(kernel) is None
    seams.launch(kernel, _x(100))
    assert triton_adapter.strategy_of(kernel) == "observe:direct"
    assert choice_log()[_entry(100)].endswith(";timed")  # timed again under auto, not the pin
