"""Kernels that share ``module.function`` (a kernel factory) are told apart, and key texts never
collide.  Real kernels under TRITON_INTERPRET=1 in cold processes and under torchrun."""

import json
import os
import re

import pytest

from support import TESTS, clean_env, last_json, rank_file, run_python, torchrun

from autotune_guard.core.model import base_name, kernel_identity, key_text, shared_name

PROG = os.path.join(TESTS, "progs", "shared_names.py")
BASE = "kernels.factory.scaled"


def run_prog(**settings):
    return run_python(open(PROG).read(), env=clean_env(**settings))


def kernels_of(choices):
    return sorted({entry.split("|")[1] for entry in choices})


@pytest.mark.slow
def test_two_kernels_of_one_name_are_logged_recorded_and_warned_apart(tmp_path):
    rec = tmp_path / "rec"
    proc = run_prog(AUTOTUNE_MODE="record", AUTOTUNE_RECORD_PATH=rec)
    names = kernels_of(last_json(proc.stdout)["choices"])
    assert len(names) == 2 and names[0] == BASE and re.fullmatch(re.escape(BASE) + r"@[0-9a-f]{8}", names[1]), names
    assert proc.stderr.count("another autotuned kernel of this name") == 1, proc.stderr
    assert names[1] in proc.stderr
    with open(rank_file(rec, 0)) as f:
        recorded = json.load(f)["kernels"]
    assert sorted(recorded) == names
    # Each name keeps its own kernel's candidates: the wide one's BLOCK 64/128/256 only.
    wide = recorded[names[1]]
    for entry in wide.values():
        assert all("BLOCK=16" not in sig and "BLOCK=32" not in sig for sig in entry.get("timings", {})), entry
    # The same program in another cold process gives the same names: the hash is of source and candidates.
    again = kernels_of(last_json(run_prog(AUTOTUNE_MODE="pinned").stdout)["choices"])
    assert again == names


@pytest.mark.slow
def test_consensus_on_one_rank_decides_each_kernel_of_a_shared_name(tmp_path):
    env = clean_env(AUTOTUNE_MODE="consensus")
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    proc = torchrun(PROG, 1, env=env)
    names = kernels_of(last_json(proc.stdout)["choices"])
    assert len(names) == 2 and "candidates differ" not in proc.stderr, proc.stderr


@pytest.mark.slow
def test_a_table_entry_for_the_plain_name_applies_to_a_shared_name_without_its_own(tmp_path):
    table = tmp_path / "interpret.json"
    table.write_text(json.dumps({"format": "autotune_guard.table/1", "arch": "interpret", "kernels": {
        BASE: {"*": {"kwargs": {"BLOCK": 128}, "num_warps": 4, "num_stages": 3}}}}))
    proc = run_prog(AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=tmp_path)
    choices = last_json(proc.stdout)["choices"]
    wide = [chosen for entry, chosen in choices.items() if "@" in entry.split("|")[1]]
    assert len(wide) == 1 and wide[0].startswith("BLOCK=128,"), choices
    # The narrow kernel has no BLOCK=128 candidate: the entry is a miss there, pinned by min_cost.
    narrow = [chosen for entry, chosen in choices.items() if entry.split("|")[1] == BASE]
    assert narrow and narrow[0].startswith("BLOCK=16,"), choices


def test_shared_names_and_key_texts_are_plain_rules():
    first, other = kernel_identity("src", ["BLOCK: 16"]), kernel_identity("src", ["BLOCK: 64"])
    assert first != other and first == kernel_identity("src", ["BLOCK: 16"])
    assert base_name(shared_name(BASE, other)) == BASE and base_name(BASE) == BASE
    # A string that spells like a number, a bool or None no longer shares its text with that value.
    texts = [key_text(key) for key in [(1,), ("1",), (None,), ("None",), (True,), ("True",), ("a,b",), ("a", "b"),
                                       (1.5,), ("1.5",)]]
    assert len(set(texts)) == len(texts), texts
    assert key_text((1024, "torch.float16")) == "1024,torch.float16"
