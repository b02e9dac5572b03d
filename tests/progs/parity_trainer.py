"""A "trainer" for the parity tests (docs/parity.md): steps over the demo kernels at its own
sizes, some of which the inference program (parity_server.py) meets too. Knows nothing of
autotune_guard. Usage: parity_trainer.py [STEPS]."""

import sys

import torch

from kernels import demo


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    for _ in range(steps):
        for n in (100, 300):  # 100 the server meets too; 300 the trainer alone
            x = torch.arange(n, dtype=torch.float32)
            loss = demo.scale(demo.add(x, x), 0.5).sum()
    print(f"DONE loss {float(loss)}", flush=True)


if __name__ == "__main__":
    main()
