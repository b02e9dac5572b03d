"""A consensus job of two torchrun nodes on this machine (gloo, TRITON_INTERPRET=1).

usage: consensus_nodes.py OUT_DIR

Every rank launches kernels.demo.add for three keys; each rank writes OUT_DIR/rank<N>.json with
its choices, how often its timers ran, and, after a barrier (every decision made), for each
decision what the job's Store and its node's Store counted: the waiters of each, and the
requests the node's Store and the job's Store served for it on this rank.
"""

import json
import os
import sys

import torch
import torch.distributed as dist

import kernels.demo as demo

REQUESTS = {"job": 0}


def counting(store):
    """The job's Store, counting this rank's requests on it (clone: a connection, not a request)."""
    class Counting:
        def __getattr__(self, name):
            method = getattr(store, name)

            def call(*args):
                if name != "clone":
                    REQUESTS["job"] += 1
                return method(*args)
            return call
    return Counting()


def main():
    out_dir = sys.argv[1]
    dist.init_process_group("gloo")
    from autotune_guard.adapters.distributed import node, store as store_module
    from autotune_guard.core import consensus
    from autotune_guard.core.model import ChoiceKey
    from autotune_guard.runtime import current

    fanned = store_module.job_store()
    real_job = fanned.job
    fanned.job = counting(real_job)  # this rank's requests on the job's Store, counted
    for n in (1000, 2000, 4000):
        x = torch.rand(n)
        assert torch.equal(demo.add(x, x), x + x)
    dist.barrier()
    scope = f"{consensus.STORE_PREFIX}{consensus.attempt_scope(os.environ)}/"
    decisions = {}
    log = current().epoch.log.snapshot()[0]
    for text in log:
        key = ChoiceKey.parse(text)
        name = consensus.decision_name(key.arch, key.kernel, key.key)
        decisions[text] = {"job_waiters": int(real_job.add(scope + name + "/waiters", 0)),
                           "node_waiters": int(fanned.node_store.add(scope + name + "/waiters", 0))}
    result = {"rank": dist.get_rank(), "node": os.environ["GROUP_RANK"], "choices": log,
              "timer_calls": len(demo.TIMER_CALLS),
              "job_requests": REQUESTS["job"], "decisions": decisions, "fanned": isinstance(fanned, node.FannedStore)}
    with open(os.path.join(out_dir, f"rank{dist.get_rank()}.json"), "w") as out:
        json.dump(result, out)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
