"""One rank of a pinned job whose table store stalls (issue 44): after every rank has installed
(and pinged the store), rank 0 stops the store's process (SIGSTOP) for STALL_S seconds, then every
rank runs one add key the store holds. The first reader of the node times out (5 s); the others
wait on the node's snapshot lock meanwhile. Writes OUT_DIR/rank<N>.json: the choice log.

usage: store_stall_job.py OUT_DIR   (STALL_PID: the redis-server's pid; STALL_S: how long)
"""

import json
import os
import signal
import sys
import threading

import torch
import torch.distributed as dist

import kernels.demo as demo


def main():
    out_dir = sys.argv[1]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    dist.barrier()
    if rank == 0:
        pid = int(os.environ["STALL_PID"])
        os.kill(pid, signal.SIGSTOP)
        threading.Timer(float(os.environ.get("STALL_S", "7")), os.kill, (pid, signal.SIGCONT)).start()
    dist.barrier()
    x = torch.rand(1000)
    assert torch.allclose(demo.add(x, x), x + x)

    import autotune_guard

    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as out:
        json.dump({"rank": rank, "choices": autotune_guard.choice_log()}, out)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
