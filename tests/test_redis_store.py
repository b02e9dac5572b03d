"""Issue 36, part B: tables on a real Redis server (``AUTOTUNE_TABLE_PATH=redis://...``).

Each test that needs a server starts Debian's ``redis-server`` on a free loopback port with a
temporary directory (``redis_server``), and stops it after. Jobs are real torchrun jobs (gloo, 3
ranks) of real Triton kernels under TRITON_INTERPRET=1 whose timers return random times, so a key
tuned twice would likely get another winner."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

from support import TESTS, clean_env, last_json, run_python
from test_consensus_table import ADD, SCALE, chosen, key_of, ran_as_tuples

from autotune_guard.core.errors import PolicyError
from autotune_guard.core.settings import policy_from_settings
from autotune_guard.core.store_url import hide_password, parse_store_url, split_table_path

PROGS = os.path.join(TESTS, "progs")
WORKER = os.path.join(PROGS, "consensus_table_worker.py")
ENTRIES = "autotune_guard:{interpret}:entries"  # the layout before per-kernel keys
KERNELS = "autotune_guard:{interpret}:kernels"
PROVENANCE = "autotune_guard:{interpret}:provenance"


class RedisServer:
    """One redis-server on 127.0.0.1, in its own temporary directory; ``kill()`` ends it at once."""

    def __init__(self, directory, password=None):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.password = password
        command = [shutil.which("redis-server"), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                   "--appendonly", "no", "--dir", str(directory), "--protected-mode", "yes"]
        command += ["--requirepass", password] if password else []
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.client = self._connect()

    def url(self, db=0, password=None):
        secret = password if password is not None else self.password
        return f"redis://{':' + secret + '@' if secret else ''}127.0.0.1:{self.port}/{db}"

    def _connect(self):
        import redis

        client = redis.Redis(host="127.0.0.1", port=self.port, password=self.password)
        for _ in range(100):
            try:
                client.ping()
                return client
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        raise AssertionError(f"redis-server on port {self.port} did not start")

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)


def _need_server():
    missing = [what for what, ok in (("redis-server (apt-get install redis-server)", shutil.which("redis-server")),
                                     ("the redis client (pip install redis)", _client())) if not ok]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"{' and '.join(missing)} missing: scripts/test.sh finds or unpacks them")
        pytest.skip(f"{' and '.join(missing)} missing: scripts/test.sh finds or unpacks them")


def _client():
    try:
        import redis  # noqa: F401
        return True
    except ImportError:
        return False


@pytest.fixture
def redis_server(tmp_path):
    """``redis_server(password=None)`` starts a server; every one started is stopped after the test."""
    _need_server()
    started = []

    def start(password=None):
        directory = tmp_path / f"redis{len(started)}"
        directory.mkdir()
        started.append(RedisServer(directory, password))
        return started[-1]

    yield start
    for server in started:
        server.kill()


# --- settings: URLs in the table path -------------------------------------------------------------

def test_a_store_setting_without_a_store_is_said_to_do_nothing():
    from autotune_guard.core.settings import StartupSettings, ineffective_settings

    lines = ineffective_settings(policy_from_settings({"AUTOTUNE_TABLE_STORE_DOWN": "local"}), StartupSettings())
    assert any("AUTOTUNE_TABLE_STORE_DOWN=local without a table store URL" in line for line in lines), lines


def test_a_table_path_holds_urls_beside_directories_and_a_password_is_never_said(tmp_path):
    value = f"redis://user:s3cret@127.0.0.1:6380/2?prefix=team:{tmp_path}:rediss://127.0.0.1:6381/0"
    assert split_table_path(value, ":") == ["redis://user:s3cret@127.0.0.1:6380/2?prefix=team", str(tmp_path),
                                            "rediss://127.0.0.1:6381/0"]
    policy = policy_from_settings({"AUTOTUNE_TABLE_PATH": value, "AUTOTUNE_MODE": "consensus"})
    assert len(policy.table_path) == 3
    address = parse_store_url("AUTOTUNE_TABLE_PATH", policy.table_path[0])
    assert (address.host, address.port, address.db, address.username, address.password, address.prefix) == \
        ("127.0.0.1", 6380, 2, "user", "s3cret", "team")
    assert parse_store_url("V", policy.table_path[2]).tls
    assert hide_password(policy.table_path[0]) == "redis://user:***@127.0.0.1:6380/2?prefix=team"
    for bad, said in [("redis://:pw@127.0.0.1:99999/0", "port"), ("redis://127.0.0.1/x", "database 'x'"),
                      ("redis://127.0.0.1/0?db=1", "unknown part 'db'"), ("redis:///0", "no host")]:
        with pytest.raises(PolicyError, match=f"AUTOTUNE_TABLE_PATH=.*{said}.*allowed: redis://") as caught:
            policy_from_settings({"AUTOTUNE_TABLE_PATH": bad})
        assert "pw" not in str(caught.value)
    with pytest.raises(PolicyError, match=r"AUTOTUNE_TABLE_STORE_DOWN='locl'.*did you mean.*local.*allowed: error, local"):
        policy_from_settings({"AUTOTUNE_TABLE_STORE_DOWN": "locl"})


@pytest.mark.slow
def test_without_the_client_a_url_is_a_clear_error_naming_the_extra_and_no_url_never_imports_it():
    code = ("import sys; sys.modules['redis'] = None\n"  # as if the extra were not installed
            "import torch, kernels.demo as demo\n"
            "demo.add(torch.rand(100), torch.rand(100))\n")
    proc = run_python(code, env=clean_env(AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH="redis://127.0.0.1:1/0"),
                      check=False)
    assert proc.returncode != 0 and "pip install redis (from a checkout: pip install '.[redis]')" in proc.stderr, proc.stderr
    plain = run_python("import sys, torch, kernels.demo as demo\ndemo.add(torch.rand(100), torch.rand(100))\n"
                       "print('redis' in sys.modules)", env=clean_env(AUTOTUNE_MODE="pinned"))
    assert plain.stdout.strip().splitlines()[-1] == "False"


# --- jobs sharing one store -----------------------------------------------------------------------

def _job_env(url, **settings):
    env = clean_env(AUTOTUNE_MODE="consensus", AUTOTUNE_TABLE_PATH=url, **settings)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    return env


def _start_job(url, out_dir, adds, scales):
    os.makedirs(out_dir, exist_ok=True)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=3", WORKER,
               str(out_dir), adds, scales]
    return subprocess.Popen(command, env=_job_env(url), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc, out_dir):
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-6000:]
    return [ran_as_tuples(json.load(open(os.path.join(out_dir, f"rank{r}.json")))) for r in range(3)], err


def _store_entries(client):
    """(kernel, key) -> value, over the kernels the arch's set names, each its own hash."""
    found = {}
    for kernel in client.smembers(KERNELS):
        for key, value in client.hgetall(f"autotune_guard:{{interpret}}:kernel:{kernel.decode()}").items():
            found[(kernel.decode(), key.decode())] = json.loads(value)
    return found


def _signature(entry):
    from autotune_guard.core.model import signature

    return signature({"kwargs": {}, **entry})


@pytest.mark.slow
def test_two_jobs_of_three_ranks_share_one_store_lose_nothing_agree_and_the_next_times_nothing(redis_server, tmp_path):
    server = redis_server()
    url = server.url()
    # Two jobs at once, keys overlapping (add 3000; each job's rank-own keys add 7000..7002).
    jobs = {"a": ("1000,3000", "500"), "b": ("3000,4000", "")}
    procs = {name: _start_job(url, tmp_path / name, *sizes) for name, sizes in jobs.items()}
    ranks = {name: _finish(proc, tmp_path / name)[0] for name, proc in procs.items()}
    held = _store_entries(server.client)
    keys = {(kernel, n) for job in ranks.values() for r in job for kernel, n in r["ran"]}
    assert len(keys) == 7  # add 1000, 3000, 4000, 7000..7002 (both jobs), scale 500
    assert set(held) == {(ADD if kernel == "add" else SCALE, key_of(kernel, n)) for kernel, n in keys}
    run_of = {job[0]["run_id"]: name for name, job in ranks.items()}
    for kernel, n in keys:
        value = held[(ADD if kernel == "add" else SCALE, key_of(kernel, n))]
        writer = ranks[run_of[value["added"]["run_id"]]]  # each entry names the job that added it
        assert (kernel, n) in writer[value["added"]["rank"]]["ran"]
        # The store holds what that job chose, on every rank that ran it.
        assert {chosen(r, kernel, n) for r in writer if (kernel, n) in r["ran"]} == {_signature(value["entry"])}
    for job in ranks.values():  # within each job every rank agrees
        for kernel, n in keys:
            assert len({chosen(r, kernel, n) for r in job if (kernel, n) in r["ran"]}) <= 1
    provenance = {k.decode(): json.loads(v) for k, v in server.client.hgetall(PROVENANCE).items()}
    assert sorted(provenance) == [ADD, SCALE] and provenance[ADD]["count"] == 8
    # A third job over the union of those keys times nothing, and pins what the store holds,
    # reading the store once for the node's 3 ranks (one script per kernel, each one HSCAN; the others read the
    # node's snapshot, core.store_snapshot), never on the launch path.
    server.client.config_resetstat()
    third, err = _finish(_start_job(url, tmp_path / "c", "1000,3000,4000", "500"), tmp_path / "c")
    stats = server.client.info("commandstats")
    assert stats["cmdstat_hscan"]["calls"] == 2 and "cmdstat_hsetnx" not in stats and "cmdstat_exec" not in stats, stats
    assert [r["timer_calls"] for r in third] == [0, 0, 0], err[-3000:]
    for r in third:
        for kernel, n in r["ran"]:
            assert chosen(r, kernel, n) == _signature(held[(ADD if kernel == "add" else SCALE, key_of(kernel, n))]["entry"])
        assert {v.rpartition(";")[2] for v in r["choices"].values()} == {"table"}
    assert _store_entries(server.client) == held  # nothing rewritten


@pytest.mark.slow
def test_a_store_killed_mid_job_loses_nothing_chosen_and_is_named_once(redis_server):
    server = redis_server()
    proc = subprocess.Popen([sys.executable, os.path.join(PROGS, "store_killed_job.py")],
                            env=_job_env(server.url(), AUTOTUNE_LOG_LEVEL="info"), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    assert len(_store_entries(server.client)) == 1  # add 1000, added while the store lived
    server.kill()
    out, err = proc.communicate("go\n", timeout=240)
    assert proc.returncode == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    first_key = f"interpret|{ADD}|{key_of('add', 1000)}"
    assert result["log"][first_key] == result["first"][first_key]  # the choice made stands
    assert len(result["log"]) == 3  # and the job went on choosing
    named = [line for line in err.splitlines() if "stopped answering" in line]
    assert len(named) == 1 and f"127.0.0.1:{server.port}" in named[0] and "choices made so far stand" in named[0], err


@pytest.mark.slow
def test_a_store_down_at_start_is_an_error_naming_the_url_unless_a_local_fallback_is_asked_for(redis_server):
    server = redis_server()
    url = server.url()
    server.kill()
    code = "import torch, kernels.demo as demo\ndemo.add(torch.rand(100), torch.rand(100))\nprint('ran')"
    proc = run_python(code, env=clean_env(AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=url), check=False)
    assert proc.returncode != 0 and f"the table store {url} does not answer" in proc.stderr, proc.stderr
    assert "AUTOTUNE_TABLE_STORE_DOWN=local" in proc.stderr
    proc = run_python(code, env=clean_env(AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=url,
                                          AUTOTUNE_TABLE_STORE_DOWN="local"))
    assert proc.stdout.strip().endswith("ran")
    assert f"table store {url} does not answer" in proc.stderr and "local rules" in proc.stderr


@pytest.mark.slow
def test_a_wrong_password_is_named_with_the_url_and_never_said(redis_server):
    server = redis_server(password="right-one")
    code = "import torch, kernels.demo as demo\ndemo.add(torch.rand(100), torch.rand(100))\nprint('ran')"
    for url in (server.url(password="wrong-one"), server.url(password="")):
        proc = run_python(code, env=clean_env(AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=url), check=False)
        assert proc.returncode != 0 and "does not answer" in proc.stderr, proc.stderr
        assert hide_password(url) in proc.stderr and "wrong-one" not in proc.stderr
        assert "Authentication" in proc.stderr or "NOAUTH" in proc.stderr or "WRONGPASS" in proc.stderr
    proc = run_python(code, env=clean_env(AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=server.url()))
    assert proc.stdout.strip().endswith("ran") and "right-one" not in proc.stderr


PINNED_RUN = """
import json, torch, kernels.demo as demo, autotune_guard
x = torch.rand(1000)
assert torch.allclose(demo.add(x, x), x + x)
print(json.dumps({"log": autotune_guard.choice_log(), "timer_calls": len(demo.TIMER_CALLS)}))
"""


@pytest.mark.slow
def test_hostile_values_are_named_with_the_url_and_key_and_left_out(redis_server):
    server = redis_server()
    good = {"entry": {"kwargs": {"BLOCK": 128}, "num_warps": 2}, "added": {"run_id": "r1", "rank": 0}}
    hostile = {
        json.dumps([ADD, key_of("add", 1000)]): json.dumps(good),
        json.dumps([ADD, "not-json"]): b"\x80pickle\x94 not JSON",
        json.dumps([ADD, "wrong-types"]): json.dumps({"entry": {"kwargs": [1, 2], "num_warps": "four"}}),
        json.dumps([ADD, "deep"]): "[" * 5000 + "]" * 5000,
        json.dumps([ADD, "huge"]): b"{" + b" " * (100 * 2**20) + b"}",  # 100 MB
        "not a field of ours": json.dumps(good),
    }
    server.client.hset(ENTRIES, mapping=hostile)
    server.client.hset(PROVENANCE, mapping={ADD: b"\x00\x01 not json"})
    proc = run_python(PINNED_RUN, env=clean_env(AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=server.url()))
    result = last_json(proc.stdout)
    assert result["log"][f"interpret|{ADD}|{key_of('add', 1000)}"].startswith("BLOCK=128,num_warps=2")
    assert result["timer_calls"] == 0
    skipped = [line for line in proc.stderr.splitlines() if "skipping" in line]
    where = f"table store {server.url()} key {ENTRIES} field"
    for field, said in [("not-json", "not UTF-8"), ("wrong-types", "must be"), ("deep", "nests deeper"),
                        ("huge", "more than any table entry"), ("not a field of ours", "is not [")]:
        assert any(where in line and field in line and said in line for line in skipped), (field, skipped)
    assert any(f"key {PROVENANCE} field" in line for line in skipped), skipped
    # A key of another type (a string where a hash belongs): the store is up, that arch's table is
    # named and left out, and pinned goes on by its rules.
    server.client.delete(PROVENANCE)
    server.client.set(PROVENANCE, "a string")
    proc = run_python(PINNED_RUN, env=clean_env(AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=server.url()))
    assert last_json(proc.stdout)["log"]
    assert f"skipping table store {server.url()} for arch interpret: the server refused to read" in proc.stderr
    assert "WRONGTYPE" in proc.stderr and "stopped answering" not in proc.stderr


@pytest.mark.slow
def test_a_forged_entry_for_another_kernel_version_is_named_and_refused_under_on_miss_error(redis_server):
    server = redis_server()
    server.client.hset(ENTRIES, json.dumps([ADD, key_of("add", 1000)]),
                       json.dumps({"entry": {"kwargs": {"BLOCK": 128}, "num_warps": 2}, "added": {"run_id": "forger"}}))
    server.client.hset(PROVENANCE, ADD, json.dumps({"source": "f0f0f0f0f0f0", "candidates": "0badc0ffee00", "count": 8}))
    env = clean_env(AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=server.url(), AUTOTUNE_ON_MISS="error")
    proc = run_python(PINNED_RUN, env=env, check=False)
    assert proc.returncode != 0
    assert f"kernel {ADD}: its table entries were recorded against another version of it (its source changed, " \
           "its candidate list changed)" in proc.stderr and "refused with AUTOTUNE_ON_MISS=error" in proc.stderr, \
        proc.stderr
    # Under consensus a key the store lacks is tuned, and nothing of this version of the kernel is
    # added beside the forged one's entries (one version per kernel), said once.
    proc = run_python(PINNED_RUN.replace("torch.rand(1000)", "torch.rand(2000)"), env=_job_env(server.url()))
    assert last_json(proc.stdout)["timer_calls"] > 0
    assert len(server.client.hgetall(ENTRIES)) == 1
    assert f"table store {server.url()} holds entries for kernel {ADD} recorded against another version of it " \
           "(its source changed, its candidate list changed): this job's 1 new winner for it is not added" \
        in proc.stderr, proc.stderr


# --- the report --------------------------------------------------------------------------------

def _report(*args, check=True):
    proc = subprocess.run([sys.executable, "-m", "autotune_guard.report", *args], capture_output=True, text=True,
                          env=clean_env(), timeout=120)
    assert not check or proc.returncode == 0, proc.stderr
    return proc


@pytest.mark.slow
def test_report_round_trips_tables_between_files_and_the_store(redis_server, tmp_path):
    server = redis_server()
    records = tmp_path / "rec"
    run_python(PINNED_RUN.replace("x = torch.rand(1000)", "x = torch.rand(1000); demo.scale(x, 2.0)"),
               env=clean_env(AUTOTUNE_MODE="record", AUTOTUNE_RECORD_PATH=str(records)))
    merged = _report("merge", str(records), "-o", server.url(1))
    assert f"{server.url(1)}: added 2 entries of the merged table" in merged.stdout
    assert "note: pinned runs find it by" not in merged.stdout, merged.stdout  # a folder's note (issue 45)
    shown = _report("show", server.url(1)).stdout
    assert ADD in shown and SCALE in shown and "provenance:" in shown
    assert f"{server.url(1)} interpret.json" in shown and "autotune-guard-report-" not in shown + merged.stdout
    html = _report("show", server.url(1), "--format", "html", "-o", str(tmp_path / "store.html"))
    assert html.returncode == 0 and ADD in (tmp_path / "store.html").read_text()
    _report("store-export", server.url(1), "-o", str(tmp_path / "out"))
    exported = json.load(open(tmp_path / "out" / "interpret.json"))
    credited = json.dumps(exported["added"])
    assert "report merge (" in credited and "store-import" not in credited, credited  # merge added them
    # file -> another store -> file: the same entries, provenance and who added each
    imported = _report("store-import", str(tmp_path / "out" / "interpret.json"), "-o", server.url(2)).stdout
    assert "added 2 entries; 0 were there already" in imported
    again = _report("store-import", str(tmp_path / "out" / "interpret.json"), "-o", server.url(2)).stdout
    assert "added 0 entries; 2 were there already" in again
    _report("store-export", server.url(2), "-o", str(tmp_path / "back"))
    back = json.load(open(tmp_path / "back" / "interpret.json"))
    for name in ("kernels", "provenance", "added", "arch", "format"):
        assert back[name] == exported[name], name
    missing = _report("show", f"redis://127.0.0.1:{server.port}/9", check=False)
    assert missing.returncode == 2 and "holds no table" in missing.stderr


@pytest.mark.slow
def test_bench_scale_counts_store_requests_per_node_and_key_against_a_directory(tmp_path):
    # scripts/bench_scale.py's store part at a tiny size: its own redis-server, one read per rank and
    # kernel name, the same reads per node and key as a table directory, and a first launch read once.
    _need_server()
    out = tmp_path / "store.json"
    proc = subprocess.run([sys.executable, os.path.join(os.path.dirname(TESTS), "scripts", "bench_scale.py"),
                           "--waiters", "", "--verify-ranks", "", "--schemes-ranks", "", "--fanin-waiters", "",
                           "--procs", "1", "--store-ranks", "16", "--store-keys", "4", "--store-filler", "20",
                           "--first-launch-reps", "1", "--json", str(out)],
                          env=clean_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {(r["job"], r["where"]): r for r in json.loads(out.read_text())["store"]["requests"]}
    # A store is read per kernel name looked up: pinned, one read per rank (the kernel's), as a
    # directory; consensus on an empty store, at most two (its name, then its bare name, both missing).
    pinned, consensus = rows["pinned", "store"], rows["consensus", "store"]
    assert pinned["reads_per_rank_max"] == rows["pinned", "directory"]["reads_per_rank_max"] == 1
    assert pinned["reads_per_node_key_p50"] == rows["pinned", "directory"]["reads_per_node_key_p50"] == 8 / 4
    # The claimer re-reads the kernel's part before each of its 4 adds (issue 57: a write is a read and
    # one transaction, as a directory's growth re-reads its file under the lock).
    assert pinned["server_commands"]["eval"] == 16 and consensus["reads_per_rank_max"] == 2 + 4
    assert 16 + 4 < consensus["server_commands"]["eval"] <= 2 * 16 + 2 * 4  # the reads, the claimer's 4 re-reads and adds
    assert rows["pinned", "snapshot"]["server_commands"]["eval"] == 2  # once per node of 8
    first = {r["table"]: r for r in json.loads(out.read_text())["store"]["first_launch"]}
    # The first launch's kernel is held under its bare name: its qualified name is read first.
    assert first["store E=20"]["store_reads_first"] == 2 and first["store E=20"]["store_reads_second"] == 0
