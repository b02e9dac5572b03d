"""An "inference engine" for the parity tests (docs/parity.md): serves requests through the demo
kernel the trainer (parity_trainer.py) runs too, at the request sizes it is given. Knows nothing
of autotune_guard. Usage: parity_server.py SIZE...  (e.g. 100 500)."""

import sys

import torch

from kernels import demo


def main():
    for size in [int(s) for s in sys.argv[1:]] or [100]:
        request = torch.ones(size)
        reply = demo.add(request, request)
        print(f"served {size}: {float(reply.sum())}", flush=True)


if __name__ == "__main__":
    main()
