"""Megatron Core's table files pin unchanged, and ``report merge --rule worst-case`` derives its
``*`` entries: real Triton kernels under TRITON_INTERPRET=1, real files, in this process.

``rows_kernel`` is keyed as Megatron's swept kernels are (two key arguments, then every tensor's
dtype); its timer answers a known cost per (BLOCK, N) with a little noise, so that one config is
never far from the best at every N and one N's own best beats it by more than 5 %. BLOCK=128 is
pruned away at the smallest N: it is then not timed there, and not eligible for ``*``.
"""

import json
import math
import random
import statistics

import pytest
import torch
import triton
import triton.language as tl

from autotune_guard.core import megatron, schema
from autotune_guard.core.errors import FileFormatError

BLOCKS = (16, 32, 64, 128)
HEADDIM = 64
COSTS = {  # N -> BLOCK -> ms: 64 is never more than 1.10x the best; at 64 rows, 16 beats it by about 10 %
    64: {16: 1.00, 32: 1.02, 64: 1.10},  # 128 is pruned here
    256: {16: 1.30, 32: 1.00, 64: 1.03, 128: 1.10},
    1024: {16: 2.00, 32: 1.20, 64: 1.00, 128: 1.04},
}
NOISE = 0.005
RANDOM = random.Random(0)
TAG = None  # the tag tensor of the launch being timed
N_NOW = None  # the N of the launch being timed


def timer(kernel_call, quantiles):
    kernel_call()
    t = COSTS[N_NOW][int(TAG[0])] * math.exp(RANDOM.gauss(0, NOISE))
    return [t, t * 0.99, t * 1.01]


def prune(configs, nargs, **kwargs):
    return [c for c in configs if not (nargs["N"] <= 64 and c.kwargs["BLOCK"] == 128)]


@triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=1) for b in BLOCKS], key=["N", "HEADDIM"],
                 prune_configs_by={"early_config_prune": prune}, do_bench=timer)
@triton.jit
def rows_kernel(x_ptr, out_ptr, tag_ptr, N, HEADDIM, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * HEADDIM, mask=mask)
    tl.store(tag_ptr, BLOCK)


ROWS = f"{__name__}.rows_kernel"  # the name the guard gives it (module.function)
F32, I32 = "torch.float32", "torch.int32"


def launch_rows(n):
    """One launch at N rows; returns the BLOCK that ran (the kernel writes it into its tag)."""
    global TAG, N_NOW
    x = torch.arange(n, dtype=torch.float32)
    out = torch.empty_like(x)
    TAG, N_NOW = torch.zeros(1, dtype=torch.int32), n
    rows_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, TAG, n, HEADDIM)
    assert torch.equal(out, x * HEADDIM)
    return int(TAG[0])


def megatron_key(n):
    return f"N={n}|HEADDIM={HEADDIM}|{F32}|{F32}|{I32}"


def our_key(n):
    return f"{n},{HEADDIM},{F32},{F32},{I32}"


def megatron_config(block, warps):
    """An entry as Megatron's ``table.write`` writes it: every launch option, unset ones null."""
    return {"kwargs": {"BLOCK": block}, "num_warps": warps, "num_stages": 3, "num_ctas": 1, "maxnreg": None,
            "ir_override": None}


def megatron_table():
    """A Megatron-shaped ``interpret.json``: a qualified name with a ``*`` and one per-key entry,
    a bare name (demo's ``scale_kernel``) with one key, empty versions, no ``format``."""
    return {
        "arch": "interpret", "triton": "", "packages": {},
        "source": "rows_kernel: a sweep timing every candidate at 64, 256 and 1024 rows, smallest worst-case slowdown",
        "kernels": {
            ROWS: {"*": megatron_config(64, 1), megatron_key(64): megatron_config(16, 1)},
            "scale_kernel": {f"n=100|{F32}|{F32}": {"kwargs": {"BLOCK": 32}, "num_stages": 3, "num_warps": 4}},
        },
    }


def write(path, document):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1))
    return str(path)


def logged(n):
    return f"interpret|{ROWS}|{our_key(n)}"


# --- reading Megatron's files ---------------------------------------------------------------------

def test_a_megatron_table_reads_as_ours(tmp_path):
    path = write(tmp_path / "interpret.json", megatron_table())
    table = schema.read_document(path, formats=(schema.TABLE_FORMAT,))
    assert table["format"] == schema.TABLE_FORMAT and table[megatron.READ_AS] == megatron.SHAPE
    assert table["source"] == {"by": megatron.SHAPE, "text": megatron_table()["source"]}
    assert "triton" not in table and table["packages"] == {} and megatron.READ_NOTES not in table
    assert table["kernels"][ROWS] == {"*": megatron_config(64, 1), our_key(64): megatron_config(16, 1)}
    assert list(table["kernels"]["scale_kernel"]) == [f"100,{F32},{F32}"]
    assert schema.check_table("store", megatron_table()) == table  # a store's document: the same reading
    assert schema.read_document(path) == table  # the report reads every format: a table among them


@pytest.mark.parametrize("key, ours", [
    ("N=4096|HEADDIM=128|torch.bfloat16", "4096,128,torch.bfloat16"),
    ("chunk_size=128|IS_CAUSAL=False|torch.bfloat16|torch.float32", "128,False,torch.bfloat16,torch.float32"),
    ("dim=8192", "8192"), ("torch.float32", "torch.float32"), ("*", "*"), ("", ""),
    ("torch.float32|N=4", None), ("N=a,b|torch.float32", None), ("N=1||torch.float32", None),
    ("1N=4|torch.float32", None), ('N="x"|torch.float32', None), ("4096,torch.float32", None),
])
def test_megatron_keys_translate_or_are_named(key, ours):
    assert megatron.our_key(key) == ours


def test_untranslatable_keys_are_left_out_and_named_in_one_line(tmp_path):
    document = megatron_table()
    entries = document["kernels"][ROWS]
    entries[f"{F32}|N=1"] = megatron_config(32, 1)  # a name=value after a dtype
    path = write(tmp_path / "interpret.json", document)
    table = schema.read_document(path, formats=(schema.TABLE_FORMAT,))
    (note,) = table[megatron.READ_NOTES]
    assert "\n" not in note and note.startswith(f"{path}: ") and f"key '{F32}|N=1'" in note
    assert set(table["kernels"][ROWS]) == {"*", our_key(64)}  # the rest read as they were
    collide = megatron_table()
    collide["kernels"][ROWS][f"N=64|HEADDIM={HEADDIM}|{F32}|{F32}|{I32}|"] = megatron_config(32, 1)  # an empty part
    collide["kernels"]["scale_kernel"][f"k=100|{F32}|{F32}"] = megatron_config(16, 4)  # reads as n=100's
    table = schema.read_document(write(tmp_path / "b.json", collide), formats=(schema.TABLE_FORMAT,))
    (note,) = table[megatron.READ_NOTES]
    assert "2 entries left out" in note and f"reads as (100,{F32},{F32})" in note
    assert table["kernels"]["scale_kernel"][f"100,{F32},{F32}"]["kwargs"] == {"BLOCK": 32}  # the first kept


@pytest.mark.parametrize("case", ["a config", "a field", "the source", "a key's entry", "an arch"])
def test_a_malformed_megatron_table_is_refused_in_one_line_naming_the_file(tmp_path, case):
    document = megatron_table()
    if case == "a config":
        document["kernels"][ROWS]["*"]["num_warps"] = "4"
    elif case == "a field":
        document["recorded_on"] = "b200"
    elif case == "the source":
        document["source"] = {"text": 1}
    elif case == "a key's entry":  # not a mapping of entries: not Megatron's shape, not ours
        document["kernels"][ROWS][megatron_key(64)] = [16, 1]
    else:
        document["arch"] = 90
    path = write(tmp_path / "interpret.json", document)
    with pytest.raises(FileFormatError) as info:
        schema.read_document(path, formats=(schema.TABLE_FORMAT,))
    message = str(info.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    if case == "a config":
        assert "key '*'" in message and "'num_warps' must be an integer" in message
    with pytest.raises(FileFormatError):  # a record reader never takes it for a table
        schema.read_document(write(tmp_path / "ok.json", megatron_table()), formats=(schema.RECORD_FORMAT,))


# --- pinned from Megatron's file, unchanged --------------------------------------------------------

def test_pinned_runs_megatron_entries_per_key_star_and_bare_name(guard, tmp_path, capsys):
    from autotune_guard import choice_log
    from autotune_guard.report import cli
    from kernels import demo

    write(tmp_path / "interpret.json", megatron_table())
    guard({"AUTOTUNE_MODE": "pinned", "AUTOTUNE_ON_MISS": "error", "AUTOTUNE_TABLE_PATH": str(tmp_path)})
    calls = len(demo.TIMER_CALLS)
    assert launch_rows(64) == 16 and launch_rows(1024) == 64 and launch_rows(512) == 64
    x = torch.arange(100, dtype=torch.float32)
    assert demo.scale(x, 2.0).equal(x * 2.0) and len(demo.TIMER_CALLS) == calls
    log = choice_log()
    assert log[logged(64)] == "BLOCK=16,num_warps=1,num_stages=3,num_ctas=1;table"  # its own entry
    assert log[logged(1024)] == log[logged(512)] == "BLOCK=64,num_warps=1,num_stages=3,num_ctas=1;table"  # '*'
    scaled = log[f"interpret|kernels.demo.scale_kernel|100,{F32},{F32}"]  # by its bare name
    assert scaled == "BLOCK=32,num_warps=4,num_stages=3,num_ctas=1;table"
    capsys.readouterr()
    assert cli.main(["show", str(tmp_path / "interpret.json")]) == 0  # the report reads it as a table too
    assert ROWS in capsys.readouterr().out


def test_pinned_skips_a_malformed_megatron_table_naming_it_in_one_line(guard, tmp_path, ag_log):
    from autotune_guard import choice_log

    document = megatron_table()
    document["kernels"][ROWS]["*"]["num_stages"] = 3.5
    path = write(tmp_path / "interpret.json", document)
    guard({"AUTOTUNE_MODE": "pinned", "AUTOTUNE_TABLE_PATH": str(tmp_path)})
    assert launch_rows(1024) == 16  # no table: min_cost
    assert choice_log()[logged(1024)].startswith("BLOCK=16,")
    said = [m for m in ag_log.messages() if path in m]
    assert said and all("\n" not in m for m in said) and "'num_stages' must be an integer" in said[0], said


# --- report merge --rule worst-case over real records ----------------------------------------------

def expected_worst_case(record: dict, kernel: str) -> tuple[str, dict[str, str], dict[str, list[str]]]:
    """From a record file: the ``*`` signature (smallest worst-case slowdown over the timed keys,
    among candidates timed at every one; ties to the first declared), the keys whose own best beats
    it by more than 5 % (key -> best), and the candidates not eligible (sig -> keys not timed)."""
    entries = record["kernels"][kernel]
    timed = {key: {sig: t[0] for sig, t in (e.get("timings") or {}).items() if t and t[0] and math.isfinite(t[0])}
             for key, e in entries.items()}
    timed = {key: found for key, found in timed.items() if found}
    declared = [schema_signature(c) for c in next(iter(entries.values()))["candidates"]]
    best = {key: min(found.values()) for key, found in timed.items()}
    missing = {sig: [key for key in timed if sig not in timed[key]] for sig in declared}
    eligible = [sig for sig in declared if not missing[sig]]
    worst = {sig: max(timed[key][sig] / best[key] for key in timed) for sig in eligible}
    star = min(eligible, key=lambda sig: worst[sig])
    own = {key: min((s for s in declared if s in found), key=found.get) for key, found in timed.items()}
    exceptions = {key: own[key] for key in timed if timed[key][star] / best[key] > 1.05}
    return star, exceptions, {sig: keys for sig, keys in missing.items() if keys}


def schema_signature(desc):
    from autotune_guard.core.model import signature

    return signature({"kwargs": {}, **desc})


def test_merge_worst_case_takes_the_smallest_worst_slowdown_and_the_keys_that_beat_it(guard, tmp_path, capsys):
    from autotune_guard import choice_log, evidence
    from autotune_guard.report import cli
    from kernels import demo

    RANDOM.seed(1)
    guard({"AUTOTUNE_MODE": "record", "AUTOTUNE_RECORD_PATH": str(tmp_path / "rec" / "run"),
           "AUTOTUNE_RETIME_ROUNDS": "0"})  # Triton's one pass: its timings are what the merge reads
    try:
        for n in COSTS:
            launch_rows(n)
            demo.add(*[torch.randn(n)] * 2)  # a second kernel: random timings, its own '*'
        evidence.write_files()
    finally:
        demo.add_kernel.cache.clear()  # demo's autotuner is shared: Triton's cache of these keys goes with the test
    (path,) = (tmp_path / "rec").glob("run*.json")
    record = json.loads(path.read_text())
    capsys.readouterr()
    out = tmp_path / "tables" / "interpret.json"
    assert cli.main(["merge", "--allow-partial", "--rule", "worst-case", str(tmp_path / "rec" / "run"),
                     "-o", str(out)]) == 0
    said = capsys.readouterr().out
    table = json.loads(out.read_text())
    assert table["source"]["rule"] == "worst-case"
    for kernel in (ROWS, "kernels.demo.add_kernel"):
        star, exceptions, not_eligible = expected_worst_case(record, kernel)
        entries = table["kernels"][kernel]
        assert schema_signature(entries["*"]) == star
        assert {key: schema_signature(e) for key, e in entries.items() if key != "*"} == exceptions
        how = table["source"]["worst_case"][kernel]
        assert how["chosen"] == star and set(how["keys"]) == set(record["kernels"][kernel])
        assert how["not_eligible"] == not_eligible and sorted(how["exceptions"]) == sorted(exceptions)
        assert how["worst_slowdown"] == pytest.approx(max(how["keys"].values()))
    # The designed costs: 64 is never more than about 1.10x the best; at 64 rows 16 beats it by about 10 %;
    # 128 was pruned at 64 rows, so it is not eligible, and the merge says so.
    star, exceptions, not_eligible = expected_worst_case(record, ROWS)
    assert star.startswith("BLOCK=64,") and list(exceptions) == [our_key(64)] and list(not_eligible) == [
        "BLOCK=128,num_warps=1,num_stages=3,num_ctas=1"]
    assert f"{ROWS} key (*): BLOCK=64," in said and "smallest worst-case slowdown" in said, said
    assert f"BLOCK=128,num_warps=1,num_stages=3,num_ctas=1 not timed (or failed) at ({our_key(64)})" in said, said

    # The table pins: a recorded key its own entry or '*', a key no record met '*'.
    guard({"AUTOTUNE_MODE": "pinned", "AUTOTUNE_ON_MISS": "error", "AUTOTUNE_TABLE_PATH": str(out.parent)})
    assert [launch_rows(n) for n in (64, 256, 512)] == [16, 64, 64]
    assert choice_log()[logged(512)] == f"{star};table"


def test_worst_case_ties_go_to_the_first_declared_and_no_star_without_a_candidate_timed_everywhere(tmp_path, capsys):
    """Written records: a tie of worst slowdowns goes to the candidate declared first (BLOCK=32,
    declared before 16); a kernel no candidate of which was timed at every key gets no '*', each
    key its fastest, said."""
    from autotune_guard.report import cli
    from autotune_guard.core.model import signature

    cfg = lambda b: {"kwargs": {"BLOCK": b}, "num_warps": 1, "num_stages": 3, "num_ctas": 1}  # noqa: E731
    candidates = [cfg(32), cfg(16)]

    def entry(times):
        timings = {signature(c): [t, t, t] for c, t in zip(candidates, times) if t is not None}
        winner = min(timings, key=lambda s: timings[s][0])
        return {"config": next(c for c in candidates if signature(c) == winner), "signature": winner,
                "how": "timed", "timings": timings, "candidates": candidates}

    record = {"format": schema.RECORD_FORMAT, "arch": "interpret", "rank": 0, "complete": True, "kernels": {
        "pkg.tied": {"1,torch.float32": entry([1.0, 1.0]), "2,torch.float32": entry([3.0, 3.0])},
        "pkg.apart": {"1,torch.float32": entry([None, 1.0]), "2,torch.float32": entry([2.0, None])}}}
    write(tmp_path / "rec.rank0.json", record)
    assert cli.main(["merge", "--rule", "worst-case", str(tmp_path / "rec.rank0.json"),
                     "-o", str(tmp_path / "t.json")]) == 0
    said = capsys.readouterr().out
    table = json.loads((tmp_path / "t.json").read_text())
    assert table["kernels"]["pkg.tied"] == {"*": cfg(32)}
    assert table["source"]["worst_case"]["pkg.tied"]["worst_slowdown"] == 1.0
    assert table["kernels"]["pkg.apart"] == {"1,torch.float32": cfg(16), "2,torch.float32": cfg(32)}
    assert set(table["source"]["worst_case"]) == {"pkg.tied"} and "no '*' entry" in said, said
