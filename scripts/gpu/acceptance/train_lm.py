"""An ordinary training program on a real kernel library: it knows nothing of autotune_guard.

A 4-layer decoder LM on fla-core's RMSNorm and fused SwiGLU MLP (autotuned Triton kernels), each
block under ``torch.compile``, AdamW, run under torchrun; every rank trains the same replica on
the same data (gloo for the barrier after each step: several ranks share one GPU here, which NCCL
refuses). Each rank prints one JSON line: time to first step, per-step times, and the hash of its
parameters after the last step.

usage: torchrun --nproc-per-node 4 train_lm.py [STEPS]
"""

import time

STARTED = time.perf_counter()  # before the heavy imports: time to first step counts them, as a user's does

import hashlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from fla.modules import GatedMLP, RMSNorm  # noqa: E402

VOCAB, DIM, HEADS, LAYERS, SEQ, BATCH = 8192, 1024, 8, 4, 512, 8


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_norm, self.mlp_norm = RMSNorm(DIM), RMSNorm(DIM)
        self.qkv, self.out = nn.Linear(DIM, 3 * DIM, bias=False), nn.Linear(DIM, DIM, bias=False)
        self.mlp = GatedMLP(DIM, hidden_ratio=4, fuse_swiglu=True)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).view(b, t, 3, HEADS, DIM // HEADS).unbind(2)
        attn = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.out(attn.transpose(1, 2).reshape(b, t, DIM))
        return x + self.mlp(self.mlp_norm(x))


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        for i, block in enumerate(self.blocks):
            self.blocks[i] = torch.compile(block)
        self.norm, self.head = RMSNorm(DIM), nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    model = LM().cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    data = torch.Generator(device="cuda").manual_seed(1)
    times, first = [], None
    for step in range(steps):
        tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), device="cuda", generator=data)
        begin = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.float().view(-1, VOCAB), tokens[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - begin)
        first = first if first is not None else time.perf_counter() - STARTED
        dist.barrier()
    digest = hashlib.sha256()
    for name, param in sorted(model.state_dict().items()):
        digest.update(name.encode() + param.detach().float().cpu().numpy().tobytes())
    print("RESULT " + json.dumps({"rank": rank, "first_step_s": round(first, 2), "step_s": times,
                                  "loss": round(loss.item(), 5), "params": digest.hexdigest()[:16]}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
