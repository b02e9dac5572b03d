"""Issue 57, the report's side: tables people can keep (docs/report.md, "Tables").

`report show` of a table shows what it knows of each entry (who added it, the verdict and its
margin, the pooled verdict, the history) in every format; a malformed `measured` part is named in
one line, never a traceback; `report diff TABLE RUN` names what the run met that the table lacks,
holds stale or holds differently; `show --format python` prints configs to pin in source; `report
prune` drops entries (`--dry-run` changes nothing); `report audit` names entries one draw froze
that other draws contradict.

The tables are grown by the real code in this process (consensus runs of a real Triton kernel
under TRITON_INTERPRET=1, ``kernels/winners.py``, whose timer has known costs): three cold runs
pooled (AUTOTUNE_POOL_RUNS=3), a fourth pinned from the table; a record run of the kernel with a
candidate more (its provenance differs: the table's entries are stale for it) that prefers
BLOCK=16; and a table whose entry `report retune` had the next run replace."""

import copy
import json
import shutil

import pytest

from kernels import winners

from autotune_guard.core import schema
from autotune_guard.core.model import signature
from autotune_guard.report import audit, cli, python_out, table_facts
from autotune_guard.report.configs import full_descriptor

ORDER = list(winners.COSTS)  # BLOCK=16 (2 % behind) declared first; 32 the best, 64 0.3 % behind it
KERNEL = "kernels.winners.tagged_kernel"
SLOW_BEST = {32: 1.03, 64: 1.03}  # a cold process that times 32 and 64 3 % slow: alone, it freezes 16


def _run(settings: dict, seed: int, bias: dict, blocks=ORDER, sizes=(1000,)) -> None:
    """One cold run of the kernel in this process (its table grown, its evidence written)."""
    import autotune_guard
    from autotune_guard import evidence
    from autotune_guard.evidence import table_growth

    winners.RANDOM.seed(seed)
    winners.BIAS.clear()
    winners.BIAS.update(bias)
    try:
        autotune_guard.install({"AUTOTUNE_RETIME_ROUNDS": "3", **settings})  # (10 by default: 3 keep the tests fast)
        kernel = winners.make(blocks)
        for n in sizes:
            winners.launch(kernel, n)
        table_growth.flush()
        evidence.write_files()
    finally:
        winners.BIAS.clear()


@pytest.fixture(scope="module")
def grown(tmp_path_factory):
    """The folders: ``tables`` (pooled over 3 cold runs), ``runs/run<N>/ch`` (each run's choices),
    ``rec/rec`` (the record run), ``retuned`` (an entry retune had the next run replace)."""
    import triton  # noqa: F401  (installs in place on Triton's Autotuner)

    import autotune_guard

    root = tmp_path_factory.mktemp("table57")
    (root / "tables").mkdir()
    saved = autotune_guard.active_policy()
    try:
        for n, bias in enumerate((SLOW_BEST, {}, {}, {})):
            _run({"AUTOTUNE_MODE": "consensus", "AUTOTUNE_TABLE_PATH": str(root / "tables"), "AUTOTUNE_POOL_RUNS": "3",
                  "AUTOTUNE_DIGEST_PATH": str(root / "runs" / f"run{n}" / "ch")}, n, bias)
        _run({"AUTOTUNE_MODE": "record", "AUTOTUNE_RECORD_PATH": str(root / "rec" / "rec")}, 7, SLOW_BEST,
             [*ORDER, *winners.NEW_COST], (1000, 2000))
        (root / "retuned").mkdir()
        retuned = {"AUTOTUNE_MODE": "consensus", "AUTOTUNE_TABLE_PATH": str(root / "retuned")}
        _run(retuned, 1, {})
        assert cli.main(["retune", str(root / "retuned" / "interpret.json"), "--kernel", KERNEL]) == 0
        _run(retuned, 2, SLOW_BEST)
    finally:
        if saved is not None:
            autotune_guard.install(saved)
        else:
            autotune_guard.uninstall()
    return root


def table_of(path) -> dict:
    return json.loads(open(path).read())


def the_entry(table: dict) -> tuple[str, str, dict]:
    """(key, the config's signature, the measured part) of the table's one entry."""
    ((key, desc),) = table["kernels"][KERNEL].items()
    return key, signature(full_descriptor(desc)), table["measured"][KERNEL][key]


def run(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# --- show: what a table knows ---------------------------------------------------------------------

@pytest.mark.slow  # seconds of CPU: out of the fast tier (issue 60)
def test_the_text_report_shows_who_added_each_entry_its_verdict_margin_pooled_verdict_and_history(grown, capsys):
    table = table_of(grown / "tables" / "interpret.json")
    key, config, measured = the_entry(table)
    earlier = measured["earlier"]
    same = sum(m["winner"] == config for m in earlier)
    assert measured["pooled"]["runs"] == 3 and len(earlier) == 2  # the grown table is what this test is about
    code, out, err = run(capsys, "show", grown / "tables")
    assert code == 0 and err == "", err
    (line,) = [line for line in out.splitlines() if "[table]" in line]
    who = table["added"][KERNEL][key]
    assert f"added by run {who['run_id']} (rank {who['rank']} on {who['host']}" in line
    assert "POOLED over 3 cold runs" in line and "the last run's own" in line
    margin = measured["pooled"]["margin"]
    assert f"the next by {margin * 100:+.2f} %" in line or f"clear by {margin * 100:+.2f} %" in line
    assert f"{len(measured['candidates'])} candidates timed" in line
    assert f"history: 2 earlier measurements (2 on these versions): {same} chose this config" in out
    if same < 2:
        assert "others chose BLOCK=" in out


@pytest.mark.slow  # seconds of CPU: out of the fast tier (issue 60)
def test_an_entry_marked_for_retune_says_so(grown, capsys, tmp_path):
    path = tmp_path / "interpret.json"
    shutil.copy(grown / "retuned" / "interpret.json", path)
    assert "retune asked" not in run(capsys, "show", path)[1]
    assert run(capsys, "retune", path, "--kernel", KERNEL)[0] == 0
    code, out, _ = run(capsys, "show", path)
    assert code == 0 and "      retune asked: the next consensus run times this key again" in out
    assert json.loads(run(capsys, "show", "--json", path)[1])["tables"][0]["entries"][0]["retune"] is True


@pytest.mark.slow  # seconds of CPU: out of the fast tier (issue 60)
def test_the_json_markdown_and_html_reports_of_a_table_show_the_same_knowledge(grown, capsys):
    table = table_of(grown / "tables" / "interpret.json")
    key, config, measured = the_entry(table)
    code, out, _ = run(capsys, "show", "--json", grown / "tables")
    (shown,) = json.loads(out)["tables"]
    (entry,) = shown["entries"]
    assert entry["config"] == config and entry["added"] == table["added"][KERNEL][key]
    assert entry["pooled"]["runs"] == 3 and entry["pooled"]["winner"] == measured["pooled"]["winner"]
    assert entry["margin"] == measured["margin"] and entry["how"] == measured["how"]
    assert entry["history"]["earlier"] == 2 and entry["problems"] == [] and shown["notes"] == []
    assert entry["history"]["same_winner"] == sum(m["winner"] == config for m in measured["earlier"])

    code, out, _ = run(capsys, "show", "--format", "markdown", grown / "tables")
    assert "#### What the tables know of each entry" in out
    (row,) = [line for line in out.splitlines() if line.startswith("| `interpret.json` |")]
    assert "`added by run " in row and "POOLED over 3 cold runs" in row and "2 earlier measurements" in row

    code, out, _ = run(capsys, "show", "--format", "html", grown / "tables")
    assert code == 0 and "Tables: what each entry knows" in out
    assert "tables hold none" not in out and "No timings in these files" not in out  # the table holds timings
    assert out.count('<svg class="ag-plot"') == 1  # its last measurement's medians, plotted
    assert f"added by run {table['added'][KERNEL][key]['run_id']}" in out and "POOLED over 3 cold runs" in out


BAD_MEASURED = {  # a measured entry as a hand edit or a broken writer leaves it -> what the note names
    "an int": (7, "is an int, not an object"),
    "a list": ([1, 2], "is a list, not an object"),
    "candidates an int": ({"how": "clear", "candidates": 3}, "'candidates' is an int, not an object"),
    "earlier a dict": ({"how": "clear", "earlier": {"a": 1}}, "'earlier' is an object, not a list"),
    "margin a string": ({"how": "clear", "margin": "big"}, "'margin' is a string, not a number"),
    "pooled a list": ({"how": "tie", "pooled": [1]}, "'pooled' is a list, not an object"),
    "pooled runs a string": ({"how": "tie", "pooled": {"runs": "3", "margin": 0.1}},
                             "'pooled.runs' is a string, not a whole number"),
    "tied an int": ({"how": "tie", "tied": 2}, "'tied' is an int, not a list"),
    "a median a string": ({"how": "clear", "candidates": {"BLOCK=16": {"median": "fast"}}},
                          "1 candidate timing without a usable median"),
    "earlier items": ({"how": "clear", "earlier": [3, {"winner": 5}]}, "'earlier' item 1 is an int, not an object"),
}


@pytest.mark.slow  # seconds of CPU: out of the fast tier (issue 60)
@pytest.mark.parametrize("shape", list(BAD_MEASURED))
def test_a_malformed_measured_part_is_named_in_one_line_and_the_entry_still_shown(grown, capsys, tmp_path, shape):
    table = table_of(grown / "tables" / "interpret.json")
    key, config, _ = the_entry(table)
    bad, said = BAD_MEASURED[shape]
    table["measured"][KERNEL][key] = bad
    path = tmp_path / "interpret.json"
    path.write_text(json.dumps(table))
    where = f"{path}: kernel {KERNEL} key ({key}): its 'measured' part"
    for argv in (["show"], ["show", "--format", "json"], ["show", "--format", "markdown"],
                 ["show", "--format", "html"], ["show", "--format", "python"], ["audit"]):
        code, out, err = run(capsys, *argv, path)
        assert code == 0 and "Traceback" not in err, (argv, err)
        (note,) = [line for line in err.splitlines() if where in line]
        assert said in note, (argv, note)
        shown = python_out.config_line(full_descriptor(table["kernels"][KERNEL][key])) if "python" in argv else config
        assert shown in out or argv == ["audit"], argv
    code, out, err = run(capsys, "diff", path, grown / "runs" / "run3" / "ch")
    assert code == 0 and f"same     {KERNEL} key ({key})" in out and where in err
    code, out, err = run(capsys, "prune", "--dry-run", "--kernel", KERNEL, path)
    assert code == 0 and f"would drop {KERNEL} key ({key})" in out and where in err


@pytest.mark.parametrize("part, value, said", [
    ("measured", [1], "its 'measured' part is a list, not an object of kernel -> ...: left out"),
    ("measured", {KERNEL: 5}, f"kernel {KERNEL}: its 'measured' part is an int, not an object: left out"),
    ("added", "me", "its 'added' part is a string, not an object of kernel -> ...: left out"),
    ("superseded", {"a": 1}, "its 'superseded' part is an object, not a list: left out"),
])
@pytest.mark.slow  # seconds of CPU: out of the fast tier (issue 60)
def test_a_malformed_part_of_the_whole_table_is_named_too(grown, capsys, tmp_path, part, value, said):
    table = table_of(grown / "tables" / "interpret.json")
    table[part] = value
    path = tmp_path / "interpret.json"
    path.write_text(json.dumps(table))
    for argv in (["show"], ["show", "--json"], ["show", "--format", "html"], ["audit"]):
        code, out, err = run(capsys, *argv, path)
        assert code == 0 and f"{path}: {said}" in err, (argv, err)
    assert run(capsys, "diff", "--check", path, grown / "runs" / "run3" / "ch")[0] == 0


# --- diff TABLE RUN -------------------------------------------------------------------------------

@pytest.mark.slow  # seconds of CPU: out of the fast tier (issue 60)
def test_diff_of_a_table_and_a_run_names_what_it_lacks_holds_stale_and_holds_differently(grown, capsys, tmp_path):
    key, config, _ = the_entry(table_of(grown / "tables" / "interpret.json"))
    (path,) = (grown / "rec").glob("rec.rank0.*.json")
    recorded = schema.read_document(str(path))["kernels"][KERNEL]
    chosen = {k: signature(full_descriptor(e["config"])) for k, e in recorded.items()}
    other = next(k for k in recorded if k != key)
    assert chosen[key] != config  # the record run froze another config than the pooled table (its bias)

    code, out, err = run(capsys, "diff", "--check", grown / "tables" / "interpret.json", grown / "rec" / "rec")
    assert code == 1, err
    assert f"  STALE    {KERNEL} [arch interpret]: the table's 1 entry of {KERNEL} were recorded against another " \
           "version of it: its candidate list changed (6 candidates then, 7 now)" in out
    assert f"  LACKS    {KERNEL} key ({other}) [arch interpret]: the run chose {chosen[other]}" in out
    assert f"  DIFFERS  {KERNEL} key ({key}) [arch interpret]:\n      table: {config}\n      run:   {chosen[key]}" in out
    assert out.splitlines()[-1].startswith("0 same, 1 differ, 1 the table lacks, 1 stale kernel;")

    code, out, _ = run(capsys, "diff", "--json", grown / "tables", grown / "rec" / "rec")
    result = json.loads(out)
    assert code == 0 and result["counts"] == {"same": 0, "differs": 1, "lacks": 1} and result["differences"] == 3
    assert [s["kernel"] for s in result["stale"]] == [KERNEL] and result["only_in_table"] == []
    code, out, _ = run(capsys, "diff", "--format", "markdown", grown / "tables", grown / "rec" / "rec")
    assert "### autotune_guard diff TABLE RUN: 3 differences" in out and "| stale: `its candidate list" in out
    code, _, err = run(capsys, "diff", f"{grown}/*/interpret.json", grown / "rec" / "rec")  # two tables: both read
    assert code == 0, err
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    shutil.copy(grown / "tables" / "interpret.json", mixed)
    shutil.copy(path, mixed)
    code, _, err = run(capsys, "diff", mixed, grown / "rec" / "rec")
    assert code == 2 and "names tables and run files together" in err and len(err.splitlines()) == 1


@pytest.mark.slow  # seconds of CPU: out of the fast tier (issue 60)
def test_diff_of_a_table_and_the_run_pinned_from_it_is_all_same(grown, capsys):
    key, config, _ = the_entry(table_of(grown / "tables" / "interpret.json"))
    code, out, _ = run(capsys, "diff", "--check", grown / "tables", grown / "runs" / "run3" / "ch")
    assert code == 0 and f"  same     {KERNEL} key ({key}) [arch interpret]: {config}" in out
    code, out, err = run(capsys, "diff", "--format", "html", grown / "tables", grown / "runs" / "run3" / "ch")
    assert code == 2 and "writes text, json or markdown" in err and "Traceback" not in err


@pytest.mark.slow  # seconds of CPU: out of the fast tier (issue 60)
def test_diff_looks_entries_up_as_pinned_mode_does_a_star_entry_and_a_bare_name(grown, capsys, tmp_path):
    bare = {"format": schema.TABLE_FORMAT, "arch": "interpret",
            "kernels": {"tagged_kernel": {"*": {"kwargs": {"BLOCK": 64}, "num_warps": 1, "num_stages": 3}}}}
    path = tmp_path / "interpret.json"
    path.write_text(json.dumps(bare))
    code, out, _ = run(capsys, "diff", "--json", "--check", path, grown / "runs" / "run3" / "ch")
    (row,) = json.loads(out)["keys"]
    assert code == 1 and row["status"] == "differs" and row["table_key"] == "tagged_kernel *"
    assert row["table"] == "BLOCK=64,num_warps=1,num_stages=3"


# --- show --format python ---------------------------------------------------------------------------

def _configs(text: str) -> list:
    import triton

    code = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    return eval(f"[{code}]", {"triton": triton})  # the lines as a user pastes them into configs=[...]


@pytest.mark.slow  # seconds of CPU: out of the fast tier (issue 60)
def test_python_format_prints_configs_to_paste_into_source(grown, capsys):
    table = table_of(grown / "tables" / "interpret.json")
    key, config, _ = the_entry(table)
    desc = table["kernels"][KERNEL][key]
    for source in (grown / "tables", grown / "runs" / "run3" / "ch"):  # a table; a choices file (signatures only)
        code, out, _ = run(capsys, "show", "--format", "python", source)
        (made,) = _configs(out)
        assert code == 0 and f"# kernel {KERNEL}  [arch interpret]" in out and f"#   key ({key}): " in out
        assert made.kwargs == desc["kwargs"] and (made.num_warps, made.num_stages) == (desc["num_warps"],
                                                                                      desc["num_stages"])


def test_python_format_keeps_what_a_file_names_in_comments(capsys, tmp_path):
    log = {"interpret|pkg.k\nimport os|1024\rx": "BLOCK=16,MODE=a b,num_warps=4;timed",
           "interpret|pkg.k|2048": "BLOCK=32,num_warps=8;timed"}
    (tmp_path / "ch.rank0.json").write_text(json.dumps(
        {"format": schema.CHOICES_FORMAT, "rank": 0, "world_size": 1, "digest": "0" * 16, "log": log}))
    code, out, _ = run(capsys, "show", "--format", "python", tmp_path / "ch")
    made = _configs(out)  # nothing a file holds reaches a line of code
    assert code == 0 and sorted(c.kwargs["BLOCK"] for c in made) == [16, 32]
    assert {c.kwargs.get("MODE") for c in made} == {"a b", None}
    assert python_out.from_signature("BLOCK=16,S=x,y") is None  # a value holding a comma: not rebuilt


# --- prune ---------------------------------------------------------------------------------------------

@pytest.mark.slow  # seconds of CPU: out of the fast tier (issue 60)
def test_prune_dry_run_changes_nothing_and_prune_drops_stale_entries_with_what_they_knew(grown, capsys, tmp_path):
    path = tmp_path / "interpret.json"
    shutil.copy(grown / "tables" / "interpret.json", path)
    before = path.read_bytes()
    key, config, _ = the_entry(table_of(path))
    code, out, _ = run(capsys, "prune", path, "--dry-run", "--stale", grown / "rec" / "rec")
    assert code == 0 and path.read_bytes() == before
    assert f"  would drop {KERNEL} key ({key}): {config} [stale: its candidate list changed" in out
    assert f"--dry-run: 1 entry would be dropped from {path}; it is unchanged" in out
    code, out, _ = run(capsys, "prune", path, "--stale", grown / "runs" / "run3" / "ch")  # choices: no provenance
    assert code == 0 and path.read_bytes() == before and "nothing to drop" in out

    code, out, _ = run(capsys, "prune", "--json", path, "--stale", grown / "rec" / "rec")
    said = json.loads(out)
    assert code == 0 and said["written"] and [(d["kernel"], d["key"]) for d in said["dropped"]] == [(KERNEL, key)]
    pruned = schema.read_document(str(path))  # still a table the guard reads
    assert pruned["kernels"] == {} and not any(part in pruned for part in ("added", "measured", "provenance"))
    assert run(capsys, "show", path)[0] == 0


@pytest.mark.slow  # seconds of CPU: out of the fast tier (issue 60)
def test_prune_drops_named_keys_and_superseded_versions_and_refuses_what_the_table_lacks(grown, capsys, tmp_path):
    table = table_of(grown / "tables" / "interpret.json")
    key, config, _ = the_entry(table)
    other = "2048,torch.float32,torch.float32,torch.int32"
    table["kernels"][KERNEL][other] = table["kernels"][KERNEL][key]
    table["added"][KERNEL][other] = table["added"][KERNEL][key]
    table["superseded"] = [{"kernel": KERNEL, "provenance": {"source": "0ld"}, "entries": {key: {"kwargs": {}}},
                            "added": {}, "measured": {}, "why": ["its source changed"], "replaced_at": "2026-12-01"}]
    path = tmp_path / "interpret.json"
    path.write_text(json.dumps(table))
    assert "1 superseded kernel version kept (report prune --superseded drops them)" in run(capsys, "show", path)[1]
    for argv, said in ((["--kernel", "nope"], "holds no kernel nope (it holds: kernels.winners.tagged_kernel)"),
                       (["--key", "9,x"], "holds no key (9,x)"), ([], "name what to drop")):
        code, _, err = run(capsys, "prune", path, *argv)
        assert code == 2 and said in err and len(err.splitlines()) == 1
    code, out, _ = run(capsys, "prune", path, "--kernel", "tagged_kernel", "--key", key, "--superseded")
    assert code == 0 and f"  dropped {KERNEL} key ({key}): {config} [named]" in out
    assert "dropped the superseded version of kernels.winners.tagged_kernel (1 entries, replaced at 2026-12-01: " \
           "its source changed)" in out
    pruned = table_of(path)
    assert list(pruned["kernels"][KERNEL]) == list(pruned["added"][KERNEL]) == [other]
    assert "superseded" not in pruned and "measured" not in pruned  # the one measured entry went with its key
    assert KERNEL in pruned["provenance"]  # the kernel keeps an entry: its provenance stays


# --- audit -------------------------------------------------------------------------------------------

@pytest.mark.slow  # seconds of CPU: out of the fast tier (issue 60)
def test_audit_names_the_entry_a_retune_froze_on_one_draw_that_the_earlier_draw_contradicts(grown, capsys):
    path = grown / "retuned" / "interpret.json"
    key, config, measured = the_entry(table_of(path))
    assert "pooled" not in measured and len(measured["earlier"]) == 1  # the retuned entry, the draw it replaced
    (earlier,) = measured["earlier"]
    assert earlier["winner"] != config
    code, out, _ = run(capsys, "audit", "--check", path)
    assert code == 1
    assert f"  CONTRADICTED {KERNEL} key ({key}): {config} [" in out
    assert f"      draw 1: chose {earlier['winner']}" in out and "1 entry rests on one draw" in out
    code, out, _ = run(capsys, "audit", "--check", "--json", grown / "tables")  # pooled: rests on 3 draws
    result = json.loads(out)
    assert code == 0 and result["contradicted"] == 0 and result["tables"][0]["entries"][0]["pooled"]


@pytest.mark.slow  # seconds of CPU: out of the fast tier (issue 60)
def test_audit_counts_only_draws_of_the_same_versions_and_differences_past_the_tie_floor(grown, capsys, tmp_path):
    table = table_of(grown / "retuned" / "interpret.json")
    key, config, measured = the_entry(table)
    other_triton = copy.deepcopy(table)
    the_entry(other_triton)[2]["earlier"][0]["triton"] = "0.0.1"
    path = tmp_path / "interpret.json"
    path.write_text(json.dumps(other_triton))
    code, out, _ = run(capsys, "audit", "--check", path)
    assert code == 0 and "0 entries rest on one draw" in out and "1 with no other draw on the same versions" in out

    draw = table_facts.clean(measured["earlier"][0], nested=True)[0]
    own = draw["candidates"][config]
    near = {**draw, "winner": config, "candidates": {config: own, "BLOCK=64": own / 1.004}}
    assert audit.contradiction(near, config) is None  # 0.4 % faster: within the tie floor
    past = {**near, "candidates": {config: own, "BLOCK=64": own / 1.006}}
    assert "timed BLOCK=64 0.60 % faster" in audit.contradiction(past, config)
    tied = {**draw, "tied": [draw["winner"], config], "candidates": {config: own, draw["winner"]: own}}
    assert audit.contradiction(tied, config) is None  # it tied this config with its winner
    untimed = {**draw, "candidates": {draw["winner"]: own}}
    assert audit.contradiction(untimed, config) is None  # it never timed this config (a candidate added since)
