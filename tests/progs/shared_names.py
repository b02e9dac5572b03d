"""Two different autotuned kernels of one name (a kernel factory), launched in this order:
``narrow`` (candidates BLOCK 16, 32), then ``wide`` (BLOCK 64, 128, 256), then ``narrow_again``
(a second kernel equal to ``narrow``: same source, same candidates).  Prints the choice log as JSON.
Run directly or under torchrun."""

import json
import os

import autotune_guard
import kernels.factory as factory

if os.environ.get("WORLD_SIZE"):
    import torch.distributed as dist

    dist.init_process_group("gloo")

narrow = factory.make_scaled((16, 32))
wide = factory.make_scaled((64, 128, 256))
narrow_again = factory.make_scaled((16, 32))
for kernel in (narrow, wide, narrow_again):
    factory.launch(kernel)
print(json.dumps({"choices": autotune_guard.choice_log()}))
