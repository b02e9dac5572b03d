"""Jobs with a real job's timing (tests/progs/realistic_job.py), started side by side: the helpers
of the realistic tier (test_realistic.py, and the 10-minute claimer that conftest.py starts).

"Another machine" is a torchrun agent, or a rank, in a pid namespace of its own (``unshare``, as
root): there a claimer's liveness is known from its heartbeat alone, as across hosts.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import time

from support import TESTS, clean_env

PROG = os.path.join(TESTS, "progs", "realistic_job.py")
KERNEL = "__main__.row_sum_kernel"
OWN_NAMESPACE = ["unshare", "--pid", "--fork", "--mount-proc"]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def can_unshare() -> bool:
    return bool(shutil.which("unshare")) and subprocess.run(OWN_NAMESPACE + ["true"], capture_output=True).returncode == 0


class Job:
    """One job started now (torchrun agents, or ranks by hand), finished by ``wait()``."""

    def __init__(self, out, commands, env, log):
        self.out, self.log, self.started = out, log, time.monotonic()
        out.mkdir(parents=True, exist_ok=True)
        self.procs = [subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                      for cmd, e in zip(commands, env)]

    def wait(self, timeout=900):
        texts = []
        try:
            for p in self.procs:
                texts.append(p.communicate(timeout=max(1, timeout - (time.monotonic() - self.started)))[0])
        finally:
            for p in self.procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        self.seconds = time.monotonic() - self.started
        self.codes = [p.returncode for p in self.procs]
        self.text = "\n".join(texts)
        (self.out / "log.txt").write_text(self.text)
        return self

    def ranks(self, n):
        return [json.loads((self.out / f"rank{r}.json").read_text()) for r in range(n)]

    def passed(self, n):
        assert self.codes == [0] * len(self.procs), f"{self.log}: exit {self.codes}\n{self.text[-5000:]}"
        ranks = self.ranks(n)
        assert all(r["error"] is None for r in ranks), ranks
        return ranks


def torchrun_job(out, nproc=3, nodes=1, own_namespace=(), prog=PROG, **settings):
    """A torchrun job of ``nodes`` agents on this machine; the agents listed in ``own_namespace``
    run in a pid namespace of their own."""
    env = clean_env(**settings)
    port = _free_port()
    commands = []
    for node in range(nodes):
        agent = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", "--monitor-interval=1"]
        agent += (["--standalone"] if nodes == 1 else
                  ["--nnodes=2", f"--node-rank={node}", "--master-addr=127.0.0.1", f"--master-port={port}"])
        commands.append((OWN_NAMESPACE if node in own_namespace else []) + agent + [prog, str(out)])
    return Job(out, commands, [env] * nodes, f"{out.name} ({settings})")


def hand_job(out, world, own_namespace=(), prog=PROG, **settings):
    """``world`` ranks started by hand (env://), the Store hosted here as torchrun's agent hosts it:
    unlike torchrun, nothing stops the others when one dies, so what each waiter concludes is seen."""
    from datetime import timedelta

    import torch.distributed as dist

    server = dist.TCPStore("127.0.0.1", 0, world, True, timedelta(seconds=120), wait_for_workers=False)
    commands, envs = [], []
    for rank in range(world):
        envs.append(clean_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=server.port, RANK=rank, WORLD_SIZE=world,
                              LOCAL_RANK=rank, TORCHELASTIC_USE_AGENT_STORE="True", **settings))
        commands.append((OWN_NAMESPACE if rank in own_namespace else []) + [sys.executable, prog, str(out)])
    job = Job(out, commands, envs, f"{out.name} ({settings})")
    job.server = server  # kept while the job runs
    return job


