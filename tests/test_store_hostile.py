"""Issue 59: a table store on hostile ground (defect 5 and the store's risks). A real ``redis-server``
on loopback (``test_redis_store``'s fixture), real cold processes pinning real Triton kernels under
TRITON_INTERPRET=1, the report run as its command; each test failed before its change:

- a key held two ways (this version's kernel hash says BLOCK 32, an earlier version's one-hash
  layout BLOCK 64): pinned ran 64 before ``store-upgrade`` and 32 after, the upgrade saying "0
  entries" and nothing of the conflict;
- a kernel's hash stuffed with junk fields cost every job meeting it seconds and MB, without a word
  (past 200,000 fields the whole store was called down, "stopped answering");
- two ``store-upgrade`` at once: the second exited 2 saying the store "stopped answering", and two
  in one second named their backups alike, the second replacing the first;
- ``report show`` of a kernel set of 100,000 names without entries asked the server once per name
  (two scripts each), saying nothing."""

import json
import subprocess
import sys
import time

import pytest

from support import TESTS, clean_env, last_json, run_python
from test_consensus_table import ADD, SCALE, key_of
from test_redis_store import PINNED_RUN, redis_server  # noqa: F401 (the fixture)

pytestmark = pytest.mark.slow  # every test here starts processes

WHO = {"run_id": "r-this-version", "rank": 0}
EARLIER = {"run_id": "r-earlier-version", "rank": 0}
PREFIX = "autotune_guard:{interpret}:"
OLDER = PREFIX + "entries"
KEY = key_of("add", 1000)
BOTH_RUN = """
import json, torch, kernels.demo as demo, autotune_guard
x = torch.rand(1000)
assert torch.allclose(demo.add(x, x), x + x)
assert torch.allclose(demo.scale(x, 2.0), x * 2.0)
print(json.dumps({"log": autotune_guard.choice_log(), "timer_calls": len(demo.TIMER_CALLS)}))
"""


def _value(block, who, warps=1):
    return json.dumps({"entry": {"kwargs": {"BLOCK": block}, "num_warps": warps}, "added": who})


def _report(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "autotune_guard.report", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, cwd=TESTS, env=clean_env())


def _pinned(server, program=PINNED_RUN, **settings):
    env = clean_env(AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=server.url(), **settings)
    proc = run_python(program, env=env)
    return last_json(proc.stdout)["log"], proc.stderr


def test_a_key_held_two_ways_is_said_and_the_upgrade_keeps_what_pinned_jobs_ran_naming_it(redis_server):  # noqa: F811
    from autotune_guard.adapters.redis_tables import Store

    server = redis_server()
    server.client.hset(PREFIX + f"kernel:{ADD}", KEY, _value(32, WHO))  # this version's job
    server.client.sadd(PREFIX + "kernels", ADD)
    server.client.hset(OLDER, json.dumps([ADD, KEY]), _value(64, EARLIER))  # then an earlier version's job
    log, stderr = _pinned(server)
    assert log[f"interpret|{ADD}|{KEY}"].startswith("BLOCK=64"), log
    said = [line for line in stderr.splitlines() if "held two ways" in line]
    assert len(said) == 1 and "BLOCK=64,num_warps=1 in the older hash" in said[0] and "BLOCK=32" in said[0], stderr
    assert "uses the older hash's" in said[0]

    upgrade = _report("store-upgrade", server.url())
    assert upgrade.returncode == 0, upgrade
    named = [line for line in upgrade.stdout.splitlines() if f"key {KEY!r}: held two ways" in line]
    assert len(named) == 1 and f"kernel {ADD}" in named[0] and "kept BLOCK=64,num_warps=1" in named[0], upgrade.stdout
    assert "BLOCK=32,num_warps=1 is kept beside it" in named[0]
    # Before: "0 entries now under per-kernel keys", and nothing of the conflict.
    assert ("the older hash held 1 entries: 0 copied to per-kernel keys, 0 there already alike, 1 there as "
            "another config") in upgrade.stdout, upgrade.stdout

    log, stderr = _pinned(server)
    assert log[f"interpret|{ADD}|{KEY}"].startswith("BLOCK=64"), log  # before: BLOCK=32 after the upgrade
    assert "held two ways" not in stderr and "store-upgrade" not in stderr, stderr
    document, notes = Store(server.url()).read("interpret")
    assert notes == [] and document["kernels"][ADD][KEY]["kwargs"] == {"BLOCK": 64}
    assert document["added"][ADD][KEY] == EARLIER
    replaced = document["measured"][ADD][KEY]["earlier"][-1]["replaced"]  # the loser, kept with who added it
    assert replaced["entry"]["kwargs"] == {"BLOCK": 32} and replaced["added"] == WHO, replaced


def _stuff(server, kernel, fields):
    pipe = server.client.pipeline(transaction=False)
    for start in range(0, fields, 10_000):
        pipe.hset(PREFIX + f"kernel:{kernel}",
                  mapping={f"junk-{n}": _value(16, WHO) for n in range(start, min(fields, start + 10_000))})
    pipe.execute()


def test_a_stuffed_kernel_hash_is_named_costs_one_request_and_the_rest_of_the_store_is_used(redis_server):  # noqa: F811
    from autotune_guard.adapters import redis_tables

    bound = getattr(redis_tables, "MAX_KERNEL_FIELDS", 20_000)  # the code before had none
    server = redis_server()
    _stuff(server, ADD, 210_000)  # past 200,000: before, the whole store was called down
    server.client.hset(PREFIX + f"kernel:{ADD}", KEY, _value(64, WHO))
    server.client.hset(PREFIX + f"kernel:{SCALE}", key_of("scale", 1000), _value(32, WHO, warps=4))
    server.client.sadd(PREFIX + "kernels", ADD, SCALE)
    sent = server.client.info("stats")["total_net_output_bytes"]
    started = time.monotonic()
    log, stderr = _pinned(server, BOTH_RUN)
    took = time.monotonic() - started
    assert server.client.info("stats")["total_net_output_bytes"] - sent < 2**20  # before: every junk field, ~30 MB
    assert log[f"interpret|{SCALE}|{key_of('scale', 1000)}"].startswith("BLOCK=32"), log  # the rest of the store
    assert log[f"interpret|{SCALE}|{key_of('scale', 1000)}"].endswith(";table"), log
    named = [line for line in stderr.splitlines() if PREFIX + f"kernel:{ADD}" in line]
    assert len(named) == 1 and f"it holds 210001 fields, more than any kernel's table ({bound}" in \
        named[0] and server.url() in named[0], stderr
    assert "stopped answering" not in stderr, stderr
    assert took < 120, took

    # A consensus job tunes the stuffed kernel's key, says its winner is not added there, and adds
    # the rest; the store is not called down.
    env = clean_env(AUTOTUNE_MODE="consensus", AUTOTUNE_TABLE_PATH=server.url())
    proc = run_python(BOTH_RUN.replace("1000)", "2000)"), env=env)
    assert "stopped answering" not in proc.stderr, proc.stderr
    assert any("not added to it" in line and ADD in line and "210001 fields" in line
               for line in proc.stderr.splitlines()), proc.stderr
    assert server.client.hget(PREFIX + f"kernel:{SCALE}", key_of("scale", 2000)) is not None
    assert server.client.hget(PREFIX + f"kernel:{ADD}", key_of("add", 2000)) is None


def test_two_upgrades_at_once_both_say_what_happened_and_no_backup_is_replaced(redis_server):  # noqa: F811
    server = redis_server()
    fields = {json.dumps([f"pkg.layer{n % 50}.kernel", f"{n},torch.bfloat16"]): _value(16, EARLIER)
              for n in range(20_000)}
    server.client.hset(OLDER, mapping=fields)
    procs = [subprocess.Popen([sys.executable, "-m", "autotune_guard.report", "store-upgrade", server.url()],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=TESTS, env=clean_env())
             for _ in range(2)]
    said = [(proc.wait(timeout=300), *proc.communicate()) for proc in procs]
    for status, out, err in said:  # before: the second exited 2, "the table store stopped answering"
        assert status == 0 and "stopped answering" not in out + err, said
        assert ("the older hash is kept as" in out or "another store-upgrade moved it at the same time" in out
                or "nothing to do" in out), said
    backups = server.client.keys(PREFIX + "entries-before-upgrade-*")
    assert len(backups) == 1 and server.client.hlen(backups[0]) == 20_000, backups
    assert sum(server.client.hlen(PREFIX + f"kernel:pkg.layer{k}.kernel") for k in range(50)) == 20_000

    # An upgrade in the second of an earlier backup's name keeps both: each planted name stays as it was.
    server.client.hset(OLDER, json.dumps([ADD, KEY]), _value(64, EARLIER))
    now = int(time.time())
    planted = {PREFIX + f"entries-before-upgrade-{now + s}": f"planted {s}" for s in range(60)}
    for name, value in planted.items():
        server.client.hset(name, "mark", value)
    upgrade = _report("store-upgrade", server.url())
    assert upgrade.returncode == 0, upgrade
    for name, value in planted.items():
        assert server.client.hgetall(name) == {b"mark": value.encode()}, name  # before: one was replaced
    kept_as = upgrade.stdout.split("the older hash is kept as ")[1].split(" ")[0]
    assert kept_as.endswith("-2") and server.client.hlen(kept_as) == 1, (kept_as, upgrade.stdout)


def test_show_of_a_kernel_set_of_names_without_entries_asks_in_pipelines_and_counts_them(redis_server):  # noqa: F811
    server = redis_server()
    server.client.hset(PREFIX + f"kernel:{ADD}", KEY, _value(64, WHO))
    server.client.sadd(PREFIX + "kernels", ADD)
    for start in range(0, 100_000, 10_000):
        server.client.sadd(PREFIX + "kernels", *(f"pkg.junk{n}.kernel" for n in range(start, start + 10_000)))
    server.client.config_resetstat()
    shown = _report("show", server.url())
    assert shown.returncode == 0 and "BLOCK=64,num_warps=1" in shown.stdout, shown
    stats = server.client.info("commandstats")
    assert stats["cmdstat_eval"]["calls"] <= 10, stats  # before: 200,000 scripts, one request each
    said = [line for line in shown.stderr.splitlines() if "have no entries" in line]
    assert len(said) == 1 and "100000 of its 100001 kernel names" in said[0] and PREFIX + "kernels" in said[0], \
        shown.stderr
