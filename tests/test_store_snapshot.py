"""Issue 36: a table store is read once per job, node and arch (``core.store_snapshot``), not once
per process: the first process of a torchrun job on a node to need an arch reads the store and
writes a node-local snapshot; the others read it.

The fast tier drives ``store_snapshot.read`` in this process, with threads as the node's processes
(``flock`` excludes separate opens of a file, so threads wait on each other as processes do) and a
counting reader in place of the server. The slow tier runs real torchrun jobs of 3 ranks against
a real ``redis-server`` (``test_redis_store``'s) and counts the server's reads (``INFO commandstats``:
one read of a small table is one script of two ``HSCAN``)."""

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from autotune_guard.core import store_snapshot
from autotune_guard.core.store_snapshot import Node

URL = "redis://user:s3cret-pw@127.0.0.1:6390/2?prefix=team:"
TABLE = {"format": "autotune_guard.table/1", "arch": "sm90", "source": {"store": "redis://user:***@127.0.0.1:6390/2"},
         "kernels": {"pkg.mod.kernel": {"1024": {"kwargs": {"BLOCK": 128}, "num_warps": 4}}},
         "provenance": {"pkg.mod.kernel": {"source": "abc", "count": 8}},
         "added": {"pkg.mod.kernel": {"1024": {"run_id": "r1", "rank": 0}}}}


class Server:
    """A stand-in for the store's read: counts its calls, gives ``TABLE`` (or nothing) after ``delay``."""

    def __init__(self, table=TABLE, notes=(), delay=0.05):
        self.table, self.notes, self.delay = table, list(notes), delay
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self):
        with self.lock:
            self.calls += 1
        time.sleep(self.delay)
        return (json.loads(json.dumps(self.table)) if self.table is not None else None), list(self.notes)


def node_in(tmp_path, job="run-1/0|host|agent 1 started 1"):
    base = tmp_path / "base"
    return Node(job, str(base / store_snapshot.SUBDIRECTORY))


def processes(count, node, server, url=URL, arch="sm90", wait_s=5.0):
    """``count`` readers at once, as the processes of a node; their (document, notes)."""
    results = [None] * count

    def one(i):
        results[i] = store_snapshot.read(url, arch, server, wait_s, node)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


# --- naming -------------------------------------------------------------------------------------

def test_a_snapshot_is_named_by_store_arch_and_job_and_never_by_the_password(tmp_path):
    node = node_in(tmp_path)
    name = store_snapshot.snapshot_path(node, URL, "sm90")
    assert "s3cret" not in name and os.path.dirname(name) == node.directory
    assert store_snapshot.store_identity(URL) == "redis://user@127.0.0.1:6390/2?prefix=team:"
    others = [store_snapshot.snapshot_path(node, url, "sm90") for url in (
        "redis://user:s3cret-pw@127.0.0.2:6390/2?prefix=team:", "redis://user:s3cret-pw@127.0.0.1:6391/2?prefix=team:",
        "redis://user:s3cret-pw@127.0.0.1:6390/3?prefix=team:", "redis://user:s3cret-pw@127.0.0.1:6390/2?prefix=other:",
        "redis://other:s3cret-pw@127.0.0.1:6390/2?prefix=team:",
        "rediss://user:s3cret-pw@127.0.0.1:6390/2?prefix=team:",
        "redis://127.0.0.1:6390/2")]
    others += [store_snapshot.snapshot_path(node, URL, "sm80"),
               store_snapshot.snapshot_path(node_in(tmp_path, "run-2/0|host|agent 1 started 1"), URL, "sm90"),
               store_snapshot.snapshot_path(node_in(tmp_path, "run-1/1|host|agent 1 started 1"), URL, "sm90")]
    assert len({name, *others}) == len(others) + 1
    # The password is no part of the store's identity: another password, the same store, one snapshot.
    assert store_snapshot.snapshot_path(node, URL.replace("s3cret-pw", "other-pw"), "sm90") == name


def test_the_job_is_torchruns_run_and_restart_on_this_host_under_its_agent():
    assert store_snapshot.this_node({}) is None  # not under torchrun: the store is read directly
    first = store_snapshot.this_node({"TORCHELASTIC_RUN_ID": "none", "TORCHELASTIC_RESTART_COUNT": "0"})
    restart = store_snapshot.this_node({"TORCHELASTIC_RUN_ID": "none", "TORCHELASTIC_RESTART_COUNT": "1"})
    assert first.job.startswith("none/0|") and restart.job.startswith("none/1|") and first.job != restart.job
    assert f"agent {os.getppid()} started " in first.job and "?" not in first.job.rpartition(" ")[2]
    assert first.directory.endswith(os.path.join(f"autotune_guard-{os.geteuid()}", "store-snapshots")) or \
        first.directory.endswith(os.path.join("autotune_guard", "store-snapshots"))


# --- one read per node --------------------------------------------------------------------------

def test_eight_processes_of_a_node_read_the_store_once_and_get_the_same_table(tmp_path):
    node = node_in(tmp_path)
    server = Server(notes=["skipping table store ... field 'x': is not valid JSON"])
    results = processes(8, node, server)
    assert server.calls == 1
    assert all(document == TABLE and notes == server.notes for document, notes in results), results
    written = json.load(open(store_snapshot.snapshot_path(node, URL, "sm90")))
    assert written["store"] == "redis://user@127.0.0.1:6390/2?prefix=team:" and written["job"] == node.job
    assert stat_mode(node.directory) == 0o700 and stat_mode(os.path.dirname(node.directory)) == 0o700
    for name in os.listdir(node.directory):  # the password is nowhere: names or contents
        assert "s3cret" not in name and "s3cret" not in open(os.path.join(node.directory, name)).read()
    # A later process of the job reads the file, never the store; another arch is read anew.
    assert store_snapshot.read(URL, "sm90", server, 5.0, node) == (TABLE, server.notes) and server.calls == 1
    store_snapshot.read(URL, "sm80", Server(table=dict(TABLE, arch="sm80")), 5.0, node)
    assert len([n for n in os.listdir(node.directory) if n.endswith(".json")]) == 2


def stat_mode(path):
    return os.stat(path).st_mode & 0o777


def test_a_store_that_gave_no_table_gives_none_to_every_process_of_the_node_with_why(tmp_path):
    # issue 44: the node's others used to read the store themselves (and, when it had come back
    # meanwhile, ran other configs than the first): one node, one view
    node = node_in(tmp_path)
    server = Server(table=None, delay=0.01)  # down or refused: Stores.read_server said so, returned None
    results = [store_snapshot.read(URL, "sm90", server, 5.0, node, lambda: "it stopped answering: Timeout")]
    server.table = TABLE  # the store came back
    results += processes(3, node, server)
    assert server.calls == 1 and all(r[0] is None for r in results), results
    assert results[0] == (None, [])
    for _, notes in results[1:]:
        assert len(notes) == 1 and "no table for arch sm90 (it stopped answering: Timeout)" in notes[0], notes
        assert "s3cret" not in notes[0]


def test_a_holder_that_does_not_let_go_costs_a_bounded_wait_then_the_process_reads_itself(tmp_path):
    node = node_in(tmp_path)
    store_snapshot.read(URL, "sm80", Server(table=dict(TABLE, arch="sm80")), 5.0, node)  # makes the directories
    lock = store_snapshot.snapshot_path(node, URL, "sm90")[:-len(".json")] + ".lock"
    import fcntl

    holder = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        server = Server()
        start = time.monotonic()
        document, notes = store_snapshot.read(URL, "sm90", server, 0.3, node)
        assert 0.3 <= time.monotonic() - start < 3 and document == TABLE and server.calls == 1
        assert "held its lock for over 0.3 s; this process read the table store itself" in notes[0], notes
    finally:
        os.close(holder)  # as a process that dies lets go
    server = Server()
    assert store_snapshot.read(URL, "sm90", server, 5.0, node)[0] == TABLE and server.calls == 1


# --- what is not used ---------------------------------------------------------------------------

@pytest.mark.parametrize("content, said", [
    (b"{\"format\": \"autotune_guard.store_snapshot/1\", \"tab", "is not valid JSON"),
    (b"[" * 5000 + b"]" * 5000, "nests deeper"),
    (None, "is not the snapshot of this store, arch, kernel and job"),
    ("kwargs", "'kwargs' must be an object"),
    ("provenance", "each provenance must be an object"),
])
def test_a_corrupt_or_hostile_snapshot_is_named_and_the_process_reads_the_store_itself(tmp_path, content, said):
    node = node_in(tmp_path)
    path = store_snapshot.snapshot_path(node, URL, "sm90")
    store_snapshot.read(URL, "sm90", Server(), 5.0, node)
    snapshot = json.load(open(path))
    if content is None:
        snapshot["job"] = "another job"
    elif content == "kwargs":
        snapshot["table"]["kernels"]["pkg.mod.kernel"]["1024"]["kwargs"] = [1, 2]
    elif content == "provenance":
        snapshot["table"]["provenance"]["pkg.mod.kernel"] = "forged"
    with open(path, "wb") as out:
        out.write(content if isinstance(content, bytes) else json.dumps(snapshot).encode())
    server = Server()
    document, notes = store_snapshot.read(URL, "sm90", server, 5.0, node)
    assert document == TABLE and server.calls == 1
    assert notes[0].startswith(f"skipping table store snapshot {path}: ") and said in notes[0], notes
    assert notes[0].endswith("this process reads the table store redis://user:***@127.0.0.1:6390/2?prefix=team: itself")


def test_a_snapshot_that_is_a_symlink_is_not_followed(tmp_path):
    node = node_in(tmp_path)
    store_snapshot.read(URL, "sm80", Server(table=dict(TABLE, arch="sm80")), 5.0, node)
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text("{}")
    os.symlink(elsewhere, store_snapshot.snapshot_path(node, URL, "sm90"))
    server = Server()
    document, notes = store_snapshot.read(URL, "sm90", server, 5.0, node)
    assert document == TABLE and server.calls == 1 and "is a symlink" in notes[0], notes


def test_a_snapshot_directory_that_is_a_symlink_or_another_users_is_not_used(tmp_path):
    node = node_in(tmp_path)
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    os.symlink(real, os.path.dirname(node.directory))
    server = Server()
    results = processes(3, node, server)
    assert server.calls == 3 and not os.listdir(real)
    assert all(d == TABLE and "is a symlink, not a directory of this user" in n[0] and "not used" in n[0]
               for d, n in results), results
    if os.geteuid() != 0:
        return  # a directory of another user can only be made by root
    other = node_in(tmp_path / "b")
    os.makedirs(other.directory, mode=0o700)
    os.chmod(os.path.dirname(other.directory), 0o700)
    os.chown(other.directory, 65534, 65534)  # nobody's
    server = Server()
    document, notes = store_snapshot.read(URL, "sm90", server, 5.0, other)
    assert document == TABLE and server.calls == 1 and "is a directory of" in notes[0] and "65534" in notes[0], notes
    assert os.listdir(other.directory) == []
    os.chmod(os.path.dirname(other.directory), 0o755)  # a mode others can reach: not used either
    document, notes = store_snapshot.read(URL, "sm90", Server(), 5.0, other)
    assert "has mode drwxr-xr-x" in notes[0], notes


def test_writing_a_snapshot_removes_this_users_files_older_than_a_day(tmp_path):
    node = node_in(tmp_path)
    store_snapshot.read(URL, "sm80", Server(table=dict(TABLE, arch="sm80")), 5.0, node)
    old, fresh = os.path.join(node.directory, "old.json"), os.path.join(node.directory, "fresh.lock")
    for path in (old, fresh):
        open(path, "w").close()
    os.utime(old, (time.time() - 2 * 86400,) * 2)
    store_snapshot.read(URL, "sm70", Server(table=dict(TABLE, arch="sm70")), 5.0, node)
    assert "old.json" in os.listdir(node.directory)  # looked for at most once an hour
    os.utime(os.path.join(node.directory, ".removed"), (time.time() - 2 * 3600,) * 2)
    store_snapshot.read(URL, "sm90", Server(), 5.0, node)
    left = os.listdir(node.directory)
    assert "old.json" not in left and "fresh.lock" in left and len([n for n in left if n.endswith(".json")]) == 3


# --- real jobs: torchrun, a redis-server ------------------------------------------------------

from test_redis_store import _job_env, redis_server  # noqa: E402,F401  (the fixture)
from test_consensus_table import ADD, SCALE, WORKER, chosen, key_of, ran_as_tuples  # noqa: E402

ADD_SIZES, SCALE_SIZES = "1000,3000", "500"


def _snapshot_env(url, tmp_path, mode="consensus"):
    """A job's environment whose node-local files go to a directory of the test's."""
    env = _job_env(url)
    env["AUTOTUNE_MODE"] = mode
    env.pop("XDG_RUNTIME_DIR", None)
    env["TMPDIR"] = str(tmp_path / "tmp")
    os.makedirs(env["TMPDIR"], exist_ok=True)
    return env


def _snapshots(tmp_path):
    directory = tmp_path / "tmp" / f"autotune_guard-{os.geteuid()}" / "store-snapshots"
    return sorted(p for p in directory.iterdir() if p.suffix == ".json") if directory.exists() else []


def _job(url, env, out_dir, worker=WORKER):
    os.makedirs(out_dir, exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=3", worker,
                           str(out_dir), ADD_SIZES, SCALE_SIZES], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-6000:]
    return [ran_as_tuples(json.load(open(os.path.join(out_dir, f"rank{r}.json")))) for r in range(3)], proc.stderr


def _reads(client, before):
    """The kernel reads the server ran since ``before`` (its commandstats): one HSCAN each, for a
    kernel of under redis_tables.PIECE entries."""
    stats = client.info("commandstats")
    return stats.get("cmdstat_hscan", {}).get("calls", 0) - before


def _hscans(client):
    return client.info("commandstats").get("cmdstat_hscan", {}).get("calls", 0)


def _fill(server, url):
    """The store holds every key the job runs (rank-own add keys 7000..7002 too)."""
    from autotune_guard.adapters.redis_tables import Store

    kernels = {ADD: {key_of("add", n): {"kwargs": {"BLOCK": 64}, "num_warps": 2}
                     for n in (1000, 3000, 7000, 7001, 7002)},
               SCALE: {key_of("scale", 500): {"kwargs": {"BLOCK": 32}, "num_warps": 4}}}
    store = Store(url)
    store.put_table({"format": "autotune_guard.table/1", "arch": "interpret", "kernels": kernels}, {"run_id": "fill"})
    store.client.close()
    return kernels


def _pins_the_store(ranks, kernels, how="table"):
    for r in ranks:
        for kernel, n in r["ran"]:
            name = ADD if kernel == "add" else SCALE
            assert chosen(r, kernel, n).startswith(_signature(kernels[name][key_of(kernel, n)])), (r, kernel, n)
        assert {v.rpartition(";")[2] for v in r["choices"].values()} == {how}, r["choices"]  # the table's entry
    assert [r["timer_calls"] for r in ranks] == [0, 0, 0]


def _signature(entry):
    from autotune_guard.core.model import signature

    return signature({"kwargs": {}, **entry})


@pytest.mark.slow
def test_a_pinned_job_of_three_ranks_reads_the_store_once_and_every_rank_pins_it(redis_server, tmp_path):
    server = redis_server(password="pw-not-in-files")
    url = server.url()
    kernels = _fill(server, url)
    before = _hscans(server.client)
    ranks, err = _job(url, _snapshot_env(url, tmp_path, "pinned"), tmp_path / "out")
    assert _reads(server.client, before) == 2, err[-3000:]  # each kernel once for the node's 3 ranks
    _pins_the_store(ranks, kernels)
    snapshots = _snapshots(tmp_path)
    assert sorted(json.loads(s.read_text())["kernel"] for s in snapshots) == [ADD, SCALE]
    for snapshot in snapshots:
        assert "pw-not-in-files" not in snapshot.read_text() + str(snapshot)
        assert json.loads(snapshot.read_text())["job"].startswith(ranks[0]["run_id"].split(":", 1)[1] + "/0|")


@pytest.mark.slow
def test_the_readmes_consensus_command_run_twice_reads_once_per_node_and_times_nothing_the_second_time(
        redis_server, tmp_path):
    server = redis_server()
    url = server.url()
    env = _snapshot_env(url, tmp_path)
    first, _ = _job(url, env, tmp_path / "one")
    assert sum(r["timer_calls"] for r in first) > 0
    before = _hscans(server.client)
    second, err = _job(url, env, tmp_path / "two")
    assert _reads(server.client, before) == 2, err[-3000:]  # each kernel once for the node
    assert [r["timer_calls"] for r in second] == [0, 0, 0], err[-3000:]
    for r in second:
        assert {v.rpartition(";")[2] for v in r["choices"].values()} == {"table"}
    jobs = {}  # a job never reads another's: one snapshot per job and kernel name it looked up
    for snapshot in _snapshots(tmp_path):
        written = json.loads(snapshot.read_text())
        jobs.setdefault(written["job"], []).append(written["kernel"])
    second_job = [job for job in jobs if job.startswith(second[0]["run_id"].split(":", 1)[1] + "/0|")]
    assert len(jobs) == 2 and len(second_job) == 1 and sorted(jobs[second_job[0]]) == [ADD, SCALE], jobs


PLANTING_WORKER = """
import os, runpy, sys, time
from autotune_guard.core import store_snapshot

path = store_snapshot.snapshot_path(store_snapshot.this_node(), os.environ["AUTOTUNE_TABLE_PATH"], "interpret",
                                    "kernels.demo.add_kernel")
if os.environ["RANK"] == "0":  # planted before any rank needs the table
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    os.chmod(os.path.dirname(os.path.dirname(path)), 0o700)
    with open(path + ".tmp", "w") as out:
        out.write('{"format": "autotune_guard.store_snapshot/1", "table": {"kernels": [')
    os.replace(path + ".tmp", path)
deadline = time.monotonic() + 120
while not os.path.exists(path) and time.monotonic() < deadline:
    time.sleep(0.05)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.slow
def test_a_corrupt_snapshot_planted_for_the_job_is_named_and_every_rank_pins_from_the_store(redis_server, tmp_path):
    server = redis_server()
    url = server.url()
    kernels = _fill(server, url)
    worker = tmp_path / "planting_worker.py"
    worker.write_text(PLANTING_WORKER)
    env = _snapshot_env(url, tmp_path, "pinned")
    os.makedirs(tmp_path / "out")
    before = _hscans(server.client)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=3",
                           str(worker), WORKER, str(tmp_path / "out"), ADD_SIZES, SCALE_SIZES],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-6000:]
    ranks = [ran_as_tuples(json.load(open(tmp_path / "out" / f"rank{r}.json"))) for r in range(3)]
    assert _reads(server.client, before) == 3 + 1  # each rank read the add kernel itself; the scale kernel once
    _pins_the_store(ranks, kernels)
    named = [line for line in proc.stderr.splitlines() if "skipping table store snapshot" in line]
    planted = [p for p in _snapshots(tmp_path) if '"kernel"' not in p.read_text()]  # the scale kernel's is written
    assert len(planted) == 1 and len(named) == 3, proc.stderr[-3000:]
    assert all(str(planted[0]) in line and "is not valid JSON" in line and "reads the table store" in line
               for line in named), named
