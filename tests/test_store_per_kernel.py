"""Issue 44's last risk: a big table store costs a job only the kernels it meets. A real
``redis-server`` (``test_redis_store``'s fixture), cold processes pinning a real Triton kernel under
TRITON_INTERPRET=1, the report run as its command. The server's own counters (bytes it sent, the
commands it ran) say what a job read.

Before: a job read its arch's whole table (140,000 entries: +6.3 s and +216 MB for the first
launch); after, one kernel's hash. A store written in the layout before (one hash per arch) is still
read, said once with the command that moves it, and ``report store-upgrade`` moves it losing nothing."""

import json
import subprocess
import sys

import pytest

from support import TESTS, clean_env, last_json, run_python
from test_consensus_table import ADD, key_of
from test_redis_store import PINNED_RUN, redis_server  # noqa: F401 (the fixture)

pytestmark = pytest.mark.slow  # every test here starts processes

KERNELS, PER_KERNEL = 40, 500
BLOCK64 = {"kwargs": {"BLOCK": 64}, "num_warps": 2}
WHO = {"run_id": "r1", "rank": 0}
OLDER = "autotune_guard:{interpret}:entries"


def _other(n):
    return f"{n},torch.bfloat16", {"kwargs": {"BLOCK": 16 << (n % 5)}, "num_warps": 1 + n % 2}


def _pinned(server):
    proc = run_python(PINNED_RUN, env=clean_env(AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=server.url()))
    assert proc.returncode == 0, proc.stderr
    assert last_json(proc.stdout)["log"][f"interpret|{ADD}|{key_of('add', 1000)}"].startswith("BLOCK=64"), proc.stdout
    return proc


def _sent(server):
    return server.client.info("stats")["total_net_output_bytes"]


def test_a_job_reads_only_the_kernels_it_meets_from_a_big_store(redis_server):  # noqa: F811
    from autotune_guard.adapters.redis_tables import Store

    server = redis_server()
    store = Store(server.url())
    for k in range(KERNELS):
        store.add("interpret", f"pkg.layer{k}.kernel", {"source": f"s{k}"},
                  {key: (entry, WHO) for key, entry in map(_other, range(k * PER_KERNEL, (k + 1) * PER_KERNEL))})
    store.add("interpret", ADD, None, {key_of("add", 1000): (BLOCK64, WHO)})
    whole = _sent(server)
    document, notes = store.read("interpret")  # the report's whole read: every kernel
    whole = _sent(server) - whole
    assert notes == [] and sum(len(e) for e in document["kernels"].values()) == KERNELS * PER_KERNEL + 1

    server.client.config_resetstat()
    _pinned(server)
    sent, stats = _sent(server), server.client.info("commandstats")
    # The job read its one kernel (a few hundred bytes, and its names under the other lookups it makes):
    # before, it read all 20,001 entries (the bytes of the whole read, about 1.5 MB).
    assert sent < whole / 100, (sent, whole)
    assert stats["cmdstat_eval"]["calls"] <= 4 and "cmdstat_hscan" in stats, stats


def test_a_store_written_before_per_kernel_keys_is_read_said_once_and_upgraded_losing_nothing(
        redis_server, tmp_path):  # noqa: F811
    from autotune_guard.adapters.redis_tables import Store

    server = redis_server()
    fields = {json.dumps([f"pkg.layer{n % 7}.kernel", _other(n)[0]]): json.dumps({"entry": _other(n)[1], "added": WHO})
              for n in range(3000)}
    fields[json.dumps([ADD, key_of("add", 1000)])] = json.dumps({"entry": BLOCK64, "added": WHO})
    server.client.hset(OLDER, mapping=fields)  # as the version before wrote it
    server.client.hset("autotune_guard:{interpret}:provenance", mapping={f"pkg.layer{n}.kernel": "{}" for n in range(7)})
    store = Store(server.url())
    before, notes = store.read("interpret")
    assert notes == [] and sum(len(e) for e in before["kernels"].values()) == 3001

    said = [line for line in _pinned(server).stderr.splitlines() if "store-upgrade" in line]
    assert len(said) == 1 and "read all 3001 of them" in said[0] and OLDER in said[0], said

    # First writer wins across the layouts: an entry the older hash holds is kept, not overwritten.
    status, kept = store.add("interpret", ADD, None, {key_of("add", 1000): ({"kwargs": {"BLOCK": 16}}, WHO)})
    assert status == "ok" and kept == [(key_of("add", 1000), BLOCK64)]

    upgrade = subprocess.run([sys.executable, "-m", "autotune_guard.report", "store-upgrade", server.url()],
                             capture_output=True, text=True, timeout=120, cwd=TESTS, env=clean_env())
    assert upgrade.returncode == 0 and ("the older hash held 3001 entries: 3001 copied to per-kernel keys, 0 there "
                                        "already alike, 0 there as another config") in upgrade.stdout, upgrade
    kept_as = [k.decode() for k in server.client.keys("autotune_guard:{interpret}:entries-before-upgrade-*")]
    assert not server.client.exists(OLDER) and len(kept_as) == 1 and server.client.hlen(kept_as[0]) == 3001
    after, notes = store.read("interpret")
    assert notes == [] and after["kernels"] == before["kernels"] and after["provenance"] == before["provenance"]
    assert after["added"] == before["added"]

    assert not [line for line in _pinned(server).stderr.splitlines() if "store-upgrade" in line]
    again = subprocess.run([sys.executable, "-m", "autotune_guard.report", "store-upgrade", server.url()],
                           capture_output=True, text=True, timeout=120, cwd=TESTS, env=clean_env())
    assert again.returncode == 0 and "nothing to do" in again.stdout, again


def test_hostile_values_in_a_kernels_hash_are_named_with_the_url_key_and_field_and_left_out(redis_server):  # noqa: F811
    server = redis_server()
    hash_key = f"autotune_guard:{{interpret}}:kernel:{ADD}"
    good = {"entry": {"kwargs": {"BLOCK": 128}, "num_warps": 2}, "added": WHO}
    server.client.hset(hash_key, mapping={
        key_of("add", 1000): json.dumps(good),
        "not-json": b"\x80pickle\x94 not JSON",
        "wrong-types": json.dumps({"entry": {"kwargs": [1, 2], "num_warps": "four"}}),
        "huge": b"{" + b" " * (100 * 2**20) + b"}",  # 100 MB: its length is sent, never the value
        b"\xff\xfe not text": json.dumps(good),
    })
    server.client.hset("autotune_guard:{interpret}:provenance", ADD, b"\x00\x01 not json")
    sent = _sent(server)
    proc = run_python(PINNED_RUN, env=clean_env(AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=server.url()))
    assert _sent(server) - sent < 2**20  # the 100 MB value stayed on the server
    result = last_json(proc.stdout)
    assert result["log"][f"interpret|{ADD}|{key_of('add', 1000)}"].startswith("BLOCK=128,num_warps=2")
    skipped = [line for line in proc.stderr.splitlines() if "skipping" in line]
    where = f"table store {server.url()} key {hash_key} field"
    for field, said in [("not-json", "not UTF-8"), ("wrong-types", "must be"), ("huge", "more than any table entry"),
                        ("not text", "non-empty UTF-8 text")]:
        assert sum(where in line and field in line and said in line for line in skipped) == 1, (field, skipped)
    assert any("key autotune_guard:{interpret}:provenance field" in line for line in skipped), skipped
