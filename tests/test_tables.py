"""Tables: search path, `*` entries, stale-version warnings, and every bad table file skipped with
a warning naming it (core.tables.load_tables over real files), then a pinned cold process using them;
and the atomic write every table, record and choices file goes through."""

import json
import os
import socket

import pytest

from support import clean_env, last_json, run_python

from autotune_guard.core import schema, tables

K = "pkg.ops.kern"
KEY = "1024,torch.float16"
KEY2 = "2048,torch.float16"
VERSIONS = {"triton": "3.9.0", "torch": "2.13.0", "python": "3.11.7"}


def cfg(block, warps=4):
    return {"kwargs": {"BLOCK": block}, "num_warps": warps}


def table(kernels, arch="interpret", **extra):
    return {"format": schema.TABLE_FORMAT, "arch": arch, "triton": "3.9.0", "torch": "2.13.0", **extra,
            "kernels": kernels}


def write(path, document):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return str(path)


@pytest.fixture
def packaged(tmp_path, monkeypatch):
    """A stand-in for the tables packaged in autotune_guard/tables/ (the real folder ships none)."""
    folder = tmp_path / "packaged"
    folder.mkdir()
    monkeypatch.setattr(tables, "PACKAGED_TABLES", str(folder))
    return folder


def test_search_order_entries_and_wildcards(tmp_path, packaged):
    write(packaged / "interpret.json", table({K: {KEY: cfg(16), "4096,torch.float16": cfg(16)},
                                              "pkg.ops.shadowed": {KEY: cfg(16)},
                                              "pkg.ops.other": {"*": cfg(64)}}))
    write(packaged / "sm90.json", table({K: {KEY: cfg(128)}}, arch="sm90"))  # another arch: never read here
    first = tmp_path / "first"
    write(first / "interpret.json", table({K: {KEY: cfg(32)}, "pkg.ops.shadowed": {"*": cfg(32)}}))
    extra = write(tmp_path / "extra.json", table({K: {KEY2: cfg(64)}, "kern2": {"*": cfg(16)}}))
    assert tables.table_candidates((str(first), extra), "interpret") == [
        str(first / "interpret.json"), extra, str(packaged / "interpret.json")]

    loaded, warnings = tables.load_tables((str(first), extra), "interpret", VERSIONS)
    assert tables.table_entry(loaded, K, KEY) == cfg(32)  # AUTOTUNE_TABLE_PATH before packaged tables
    assert tables.table_entry(loaded, K, KEY2) == cfg(64)  # a later file fills in keys the earlier lack
    assert tables.table_entry(loaded, K, "4096,torch.float16") == cfg(16)
    assert tables.table_entry(loaded, K, "8,torch.float16") is None  # no entry and no `*`: a miss
    assert tables.table_entry(loaded, "pkg.ops.other", "anything") == cfg(64)  # `*`
    assert tables.table_entry(loaded, "pkg.mod.kern2", KEY) == cfg(16)  # the bare function name
    # A `*` in an earlier file stands for every key: the packaged entry for KEY is hidden.
    assert tables.table_entry(loaded, "pkg.ops.shadowed", KEY) == cfg(32)
    assert warnings == []


def test_an_entry_that_names_no_field_is_still_an_entry():
    # {} means "Triton's defaults": it must not fall through to `*`.
    loaded = {K: {KEY: {}, "*": cfg(64)}}
    assert tables.table_entry(loaded, K, KEY) == {}
    assert tables.table_entry(loaded, K, KEY2) == cfg(64)


def _socket(path):
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    return sock


BAD_TABLES = {
    "garbage": ("this is not JSON", "is not valid JSON"),
    "truncated": (json.dumps(table({K: {KEY: cfg(16)}}))[:60], "truncated or corrupt"),
    "empty": ("", "is empty"),
    "wrong format version": (json.dumps({**table({}), "format": "autotune_guard.table/2"}), "is not supported"),
    "a record, not a table": (json.dumps({"format": schema.RECORD_FORMAT, "arch": "interpret", "rank": 0,
                                          "kernels": {}}), "is a autotune_guard.record/1 file; expected autotune_guard.table/1"),
    "no format": ('{"arch": "interpret", "kernels": {}}', "has no 'format' field"),
    "no arch": (json.dumps({"format": schema.TABLE_FORMAT, "kernels": {}}), "needs an 'arch'"),
    "wrong arch": (json.dumps(table({K: {KEY: cfg(256)}}, arch="sm90")), "it is for arch sm90, this process runs interpret"),
    "bad option type": (json.dumps(table({K: {KEY: {"kwargs": {"BLOCK": 16}, "num_warps": "4"}}})), "must be an integer"),
    "unknown config field": (json.dumps(table({K: {KEY: {"kwargs": {}, "warps": 4}}})), "unknown config fields"),
    "entries not an object": (json.dumps(table({K: [cfg(16)]})), "entries must be an object"),
    "bad packages": (json.dumps(table({}, packages=["pkg"])), "'packages' must be an object"),
    "not utf-8": (b"\xff\xfe\x00", "is not UTF-8"),
}


@pytest.mark.parametrize("case", sorted(BAD_TABLES) + ["a directory", "a directory named interpret.json", "missing",
                                                        "a path through a file", "unreadable (a socket)"])
def test_bad_table_is_skipped_with_a_warning_naming_it(tmp_path, packaged, case):
    good = tmp_path / "good"
    write(good / "interpret.json", table({K: {KEY: cfg(32)}}))
    bad = tmp_path / "bad.json"
    entry = str(bad)
    keep = None
    if case in BAD_TABLES:
        text, message = BAD_TABLES[case]
        bad.write_bytes(text) if isinstance(text, bytes) else bad.write_text(text)
    elif case == "a directory":
        bad.mkdir()
        message = "is a directory"
        entry = str(bad)  # a directory on the path: looked into for interpret.json, none there, silently
    elif case == "a directory named interpret.json":
        (tmp_path / "dir" / "interpret.json").mkdir(parents=True)
        entry, bad, message = str(tmp_path / "dir"), tmp_path / "dir" / "interpret.json", "is a directory"
    elif case == "missing":
        message = "cannot be read (No such file or directory)"
    elif case == "a path through a file":
        (tmp_path / "afile").write_text("x")
        entry = str(bad := tmp_path / "afile" / "interpret.json")
        message = "cannot be read (Not a directory)"
    else:
        keep = _socket(bad)  # open() refuses it, root or not
        message = "cannot be read"
    try:
        loaded, warnings = tables.load_tables((entry, str(good)), "interpret", VERSIONS)
    finally:
        if keep:
            keep.close()
    assert tables.table_entry(loaded, K, KEY) == cfg(32)  # the next file on the path still counts
    if case == "a directory":
        assert warnings == []  # a folder without this arch's table is not an error
        return
    assert len(warnings) == 1, warnings
    assert str(bad) in warnings[0] and message in warnings[0], warnings[0]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a chmod 000 file; the socket case covers unreadable files")
def test_unreadable_permissions_skipped(tmp_path, packaged):
    bad = write(tmp_path / "t.json", table({K: {KEY: cfg(16)}}))
    os.chmod(bad, 0)
    loaded, warnings = tables.load_tables((bad,), "interpret", VERSIONS)
    assert loaded == {} and "Permission denied" in warnings[0] and bad in warnings[0]


def test_version_mismatch_is_one_warning_per_file(tmp_path, packaged):
    """Each load names a stale table once; saying it once per process is the caller's (the pinned
    process below says it once however many kernels load tables)."""
    stale = write(tmp_path / "stale.json", table({K: {KEY: cfg(16)}}, triton="3.6.0", packages={"pytest": "0.0.1"}))
    fresh = write(tmp_path / "fresh.json", table({"kern2": {KEY: cfg(16)}}, packages={"pytest": tables.installed_version("pytest")}))
    for _ in range(2):
        loaded, warnings = tables.load_tables((stale, fresh), "interpret", VERSIONS)
        assert tables.table_entry(loaded, K, KEY) == cfg(16)  # stale, but still used
        assert len(warnings) == 1, warnings
        assert stale in warnings[0] and "triton 3.6.0 (running 3.9.0)" in warnings[0]
        assert f"pytest 0.0.1 (running {tables.installed_version('pytest')})" in warnings[0]


@pytest.mark.slow
def test_pinned_process_uses_tables_from_the_path(tmp_path):
    """A cold pinned process with AUTOTUNE_ON_MISS=error: a garbage file on the path is skipped
    with one warning, a stale table warns once, `*` and bare-name entries and omitted fields work."""
    folder = tmp_path / "tables"
    write(folder / "interpret.json", table({
        "kernels.demo.add_kernel": {"*": {"kwargs": {"BLOCK": 64}, "num_warps": 2}},
        "scale_kernel": {"100,torch.float32,torch.float32": {"kwargs": {"BLOCK": 32}}},  # num_warps: Triton's 4
    }, triton="0.0.1"))
    write(folder / "sm90.json", table({"kernels.demo.add_kernel": {"*": cfg(256)}}, arch="sm90"))
    garbage = write(tmp_path / "garbage.json", "{not json")
    code = (
        "import json, torch\n"
        "from kernels import demo\n"
        "import autotune_guard\n"
        "for n in (100, 300, 100):\n"
        "    x = torch.arange(n, dtype=torch.float32)\n"
        "    assert torch.equal(demo.add(x, x), x + x)\n"
        "    assert n != 100 or torch.equal(demo.scale(x, 2.0), x * 2)\n"
        "print(json.dumps({'timer_calls': len(demo.TIMER_CALLS), 'log': autotune_guard.choice_log()}))\n"
    )
    env = clean_env(AUTOTUNE_MODE="pinned", AUTOTUNE_ON_MISS="error",
                    AUTOTUNE_TABLE_PATH=os.pathsep.join([garbage, str(folder)]))
    proc = run_python(code, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    result = last_json(proc.stdout)
    assert result["timer_calls"] == 0
    add = "BLOCK=64,num_warps=2,num_stages=3,num_ctas=1;table"
    assert result["log"] == {
        "interpret|kernels.demo.add_kernel|100,torch.float32,torch.float32,torch.float32": add,
        "interpret|kernels.demo.add_kernel|300,torch.float32,torch.float32,torch.float32": add,
        "interpret|kernels.demo.scale_kernel|100,torch.float32,torch.float32": "BLOCK=32,num_warps=4,num_stages=3,num_ctas=1;table",
    }
    warnings = [line for line in proc.stderr.splitlines() if "WARNING" in line]
    assert len([w for w in warnings if garbage in w and "is not valid JSON" in w]) == 1, proc.stderr
    assert len([w for w in warnings if "may be stale" in w and "triton 0.0.1" in w]) == 1, proc.stderr
    # A key the table lacks, with AUTOTUNE_ON_MISS=error: refused, naming kernel, key and arch.
    missing = code.replace("(100, 300, 100)", "(200,)").replace("n != 100", "n != 200")
    proc = run_python(missing, env=env, check=False)
    assert proc.returncode != 0
    assert "kernels.demo.scale_kernel key (200,torch.float32,torch.float32) arch interpret" in proc.stderr


ATOMIC_WRITE = """
import json, os
os.umask(0o027)
from autotune_guard.core.jsonfile import atomic_write_json
modes, real_fchmod = [], os.fchmod

def by_path(*args, **kwargs):
    raise AssertionError("a mode set by path: the path could have been swapped for a symlink")

def by_descriptor(fd, mode):
    modes.append(mode)
    real_fchmod(fd, mode)

os.chmod, os.fchmod = by_path, by_descriptor
target = {target!r}
atomic_write_json(target, {{"b": 1, "a": [1, 2]}})
atomic_write_json(target, {{"b": 2}})
print(json.dumps({{"mode": os.stat(target).st_mode & 0o777, "modes": modes, "text": open(target).read(),
                  "files": sorted(os.listdir(os.path.dirname(target))), "link": os.path.islink(target),
                  "other": open({other!r}).read()}}))
"""


@pytest.mark.slow
def test_atomic_write_sets_the_mode_through_the_descriptor(tmp_path):
    """The file gets what ``open()`` would give under the umask (mkstemp's 0o600 would hide a table
    from a colleague), set on the open descriptor, never by path; a symlink at the target is
    replaced, not followed, and no temporary file is left."""
    other = tmp_path / "elsewhere.json"
    other.write_text("untouched")
    target = tmp_path / "out" / "t.json"
    target.parent.mkdir()
    target.symlink_to(other)
    result = last_json(run_python(ATOMIC_WRITE.format(target=str(target), other=str(other))).stdout)
    assert result["mode"] == 0o640 and result["modes"] == [0o640, 0o640]
    assert json.loads(result["text"]) == {"b": 2} and result["files"] == ["t.json"]
    assert result["link"] is False and result["other"] == "untouched"


# --- a table store among the files: read per kernel, at its first lookup ---------------------------

class StoreReader:
    """Pure logic: a table store's reader (as adapters.redis_tables.Stores reads one) that takes
    ``pause`` seconds and counts what it was asked."""

    def __init__(self, kernels, pause=0.0):
        self.kernels, self.pause, self.asked = kernels, pause, []

    def read(self, url, arch, kernel):
        import time

        self.asked.append(kernel)
        time.sleep(self.pause)
        found = {kernel: self.kernels[kernel]} if kernel in self.kernels else {}
        return {"format": schema.TABLE_FORMAT, "arch": arch, "kernels": found}, []


def test_a_store_is_read_per_kernel_in_path_order_beside_files(tmp_path, packaged):
    before = write(tmp_path / "before" / "interpret.json", table({K: {KEY: cfg(16)}, "pkg.ops.all": {"*": cfg(8)}}))
    after = write(tmp_path / "after" / "interpret.json", table({K: {KEY2: cfg(512)}, "pkg.ops.late": {KEY: cfg(32)}}))
    store = StoreReader({K: {KEY: cfg(128), KEY2: cfg(256)}, "pkg.ops.all": {KEY: cfg(64)}, "pkg.ops.late": {KEY: cfg(4)}})
    loaded, warnings = tables.load_tables((os.path.dirname(before), "redis://127.0.0.1:1/0", os.path.dirname(after)),
                                          "interpret", VERSIONS, store)
    assert warnings == [] and store.asked == []  # nothing read before a kernel is looked up
    assert tables.table_entry(loaded, K, KEY) == cfg(16)  # the earlier file wins, entry by entry
    assert tables.table_entry(loaded, K, KEY2) == cfg(256)  # the store, before the later file
    assert tables.table_entry(loaded, "pkg.ops.all", KEY) == cfg(8)  # a `*` of an earlier file hides the store's
    assert tables.table_entry(loaded, "pkg.ops.late", KEY) == cfg(4)
    assert store.asked == [K, "pkg.ops.all", "pkg.ops.late"]  # each kernel once, however often it is looked up


def test_a_kernel_another_thread_is_reading_from_a_store_is_waited_for_never_a_miss(packaged):
    import threading

    store = StoreReader({K: {KEY: cfg(128)}}, pause=0.3)
    loaded, _ = tables.load_tables(("redis://127.0.0.1:1/0",), "interpret", VERSIONS, store)
    found = []
    threads = [threading.Thread(target=lambda: found.append(tables.table_entry(loaded, K, KEY))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert found == [cfg(128)] * 4 and store.asked == [K]
