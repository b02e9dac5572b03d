"""Verification and consensus at scale (issue 22): the check's tree and consensus's node fan-in,
with real torchrun agents as nodes on this machine (static rendezvous, gloo) and real processes.
"""

import json
import os
import re
import socket
import subprocess
import sys
import threading

import pytest

from support import TESTS, clean_env

from autotune_guard.adapters.distributed.tree import children_of, depth, parent_of

PROGS = os.path.join(TESTS, "progs")
REPORT = "autotune choices differ across the ranks of group"
ADD = "kernels.demo.add_kernel"


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def two_nodes(script, args, envs, nproc=2, timeout=300):
    """Two torchrun agents, one per node, of ``nproc`` workers each; ``envs[node]`` their environment."""
    port = _free_port()
    agents = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--nproc-per-node={nproc}",
                                f"--node-rank={node}", "--master-addr=127.0.0.1", f"--master-port={port}",
                                "--monitor-interval=1", script, *args], env=envs[node], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True) for node in (0, 1)]
    try:
        outputs = [a.communicate(timeout=timeout) for a in agents]
        return [(a.returncode, *out) for a, out in zip(agents, outputs)]
    finally:
        for a in agents:
            if a.poll() is None:
                a.kill()
                a.wait()


def test_the_tree_spans_the_group_with_log_depth_and_degree():
    for size in (1, 2, 3, 7, 8, 9, 64, 1000, 16384):
        edges = [(parent_of(r), r) for r in range(1, size)]
        assert all(p is not None and 0 <= p < r for p, r in edges)
        for rank in range(size):  # children and parents agree
            assert all(parent_of(c) == rank for c in children_of(rank, size))
        assert sorted(c for r in range(size) for c in children_of(r, size)) == list(range(1, size))
        degree = max(len(children_of(r, size)) + (r > 0) for r in range(size))
        assert degree <= depth(size) + 1 and depth(size) == (size - 1).bit_length()


@pytest.mark.slow
def test_verification_across_two_nodes_names_the_ranks_of_each_value():
    # Node 1 runs chaos (each rank a different config), node 0 the pinned one: the check, over
    # the guard's tree across both torchrun agents, names ranks 0,1 and each rank of node 1.
    base = dict(AUTOTUNE_MODE="pinned", AUTOTUNE_VERIFY_EVERY="1", AUTOTUNE_LOG_LEVEL="debug")
    runs = two_nodes(os.path.join(PROGS, "verify_train.py"), ["2"],
                     [clean_env(**base), clean_env(AUTOTUNE_CHAOS="1", **base)])
    assert [r[0] for r in runs] == [0, 0], runs[0][2][-3000:] + runs[1][2][-3000:]
    text = runs[0][2]
    found = [line for line in text.splitlines() if REPORT in line and "ERROR" in line]
    assert len(found) == 1 and REPORT not in runs[1][2], text[-3000:]
    assert found[0].startswith(f"autotune_guard[rank 0] ERROR: {REPORT} 0,1,2,3 at barrier 1 of this group")
    lines = text[text.index(found[0]):].splitlines()
    add = [line for line in lines if f"{ADD} key (300," in line][0]
    assert re.search(r"ranks 0,1: BLOCK=\d+[^;]*; rank 2: BLOCK=[^;]*; rank 3: BLOCK=", add), add
    # the second barrier's check is the one int, on every rank
    for node in (0, 1):
        assert "barrier 2 of this group: nothing new" in runs[node][2]


@pytest.mark.slow
def test_consensus_on_two_nodes_decides_once_with_one_rank_per_node_on_the_job_store(tmp_path):
    env = clean_env(AUTOTUNE_MODE="consensus")
    runs = two_nodes(os.path.join(PROGS, "consensus_nodes.py"), [str(tmp_path)], [env, env])
    assert [r[0] for r in runs] == [0, 0], runs[0][2][-3000:] + runs[1][2][-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(4)]
    assert all(r["fanned"] for r in ranks)
    assert len({json.dumps(r["choices"], sort_keys=True) for r in ranks}) == 1 and len(ranks[0]["choices"]) == 3
    timed = sum(r["timer_calls"] for r in ranks)
    assert timed == 3 * 8, timed  # each key timed once in the job: 8 candidates
    for decision in ranks[0]["decisions"]:
        # the job's Store saw at most one waiter, the other node's first rank: it may also have
        # learned a winner the claimer announced ahead of it in a batch, without waiting
        assert all(r["decisions"][decision]["job_waiters"] <= 1 for r in ranks), ranks
        # on each node, one rank follows the node's first through the node's Store
        assert all(r["decisions"][decision]["node_waiters"] == 1 for r in ranks), ranks
    # the followers of each node never asked the job's Store (the first rank of a node at most 6
    # requests per key: claim, waiters, wait, get; or claim, beat, candidates, result)
    requests = [r["job_requests"] for r in ranks]
    assert sum(requests) <= 3 * 2 * 6 + 2, requests
    # Per key, whichever rank of a node comes first asks the job's Store for the node; the node's
    # settings are agreed with the job once (deciding.consensus.agree_settings): a node's ranks
    # together ask no more than one rank alone would.
    for node in (0, 1):
        assert sum(r["job_requests"] for r in ranks if r["node"] == str(node)) <= 3 * 6 + 1, requests


@pytest.mark.slow
def test_a_killed_node_leader_is_named_on_both_nodes_within_seconds(tmp_path):
    """Rank 2, the first rank of node 1, claims the job's tuning and is SIGKILLed in its timer:
    its node's follower (through the node's Store) and both ranks of node 0 (through the job's
    heartbeat) fail naming it, in seconds, not at the 60 s timeout; none runs a config of its own."""
    port, procs = _free_port(), []
    for rank in range(4):
        env = clean_env(AUTOTUNE_MODE="consensus", AUTOTUNE_CONSENSUS_TIMEOUT="60", MASTER_ADDR="127.0.0.1",
                        MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="4", LOCAL_RANK=str(rank % 2),
                        LOCAL_WORLD_SIZE="2", GROUP_RANK=str(rank // 2), TORCHELASTIC_RUN_ID=f"nodes-{port}")
        procs.append(subprocess.Popen([sys.executable, os.path.join(PROGS, "consensus_claimer_lost.py"),
                                       str(tmp_path), "kill", "2"], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    try:
        outputs = [p.communicate(timeout=240) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert procs[2].returncode == -9, outputs[2][1][-3000:]
    for rank in (0, 1, 3):
        result = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert result["type"] == "ConsensusError" and not result["ran"], outputs[rank][1][-3000:]
        assert "__main__.victim_kernel key (1000" in result["error"]
        assert re.search(r"rank 2 \(pid \d+ on [^)]+\), which claimed this tuning, ended \(its process is gone",
                         result["error"]), result["error"]
        assert result["seconds"] < 20, result


def test_the_tree_over_real_gloo_reduces_merges_and_broadcasts_at_odd_sizes():
    """Five and seven gloo ranks (threads over one TCPStore): the MAX reaches every rank, what each
    brought is merged up with its ranks as ranges, the root's value comes back down to all."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from autotune_guard.adapters.distributed import exchange
    from autotune_guard.adapters.distributed.tree import Tree
    from autotune_guard.core.agreement import merge_arrived
    from autotune_guard.core.model import ChoiceKey

    server = dist.TCPStore("127.0.0.1", 0, 1, True, timedelta(seconds=30), wait_for_workers=False)
    key = ChoiceKey("interpret", "k", "1")
    for size in (5, 7):
        results, errors = {}, []

        def rank_main(rank):
            try:
                client = dist.TCPStore("127.0.0.1", server.port, 1, False, timedelta(seconds=30), wait_for_workers=False)
                tree = Tree(dist, dist.PrefixStore(f"tree-{size}/", client), rank, size, 30)
                moved = [0, 0]
                most = tree.all_reduce_max(torch.tensor([rank * 10, -rank], dtype=torch.int64), moved).tolist()
                arrived = tree.merge_up({key: {"odd" if rank % 2 else "even": {rank}}}, merge_arrived,
                                        exchange.encode_arrived, exchange.decode_arrived, moved)
                down = tree.broadcast_down(exchange.encode_arrived(arrived) if rank == 0 else None, moved)
                results[rank] = (most, arrived, down, len(tree.edges))
            except Exception as exc:
                errors.append(repr(exc))

        threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors and len(results) == size, errors
        evens, odds = set(range(0, size, 2)), set(range(1, size, 2))
        assert results[0][1] == {key: {"even": evens, "odd": odds}}
        for rank, (most, arrived, down, edges) in results.items():
            assert most == [10 * (size - 1), 0]
            assert exchange.decode_arrived(down) == {key: {"even": evens, "odd": odds}}
            assert rank == 0 or arrived is None
            assert edges <= 3
    # ranges on the wire: a block of ranks is two numbers
    assert exchange.encode_arrived({key: {"s": set(range(100)) | {200}}}) == [[list(key), "s", [[0, 99], [200, 200]]]]
