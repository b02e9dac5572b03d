"""One process, a 1-rank gloo world, AUTOTUNE_VERIFY_EVERY=2 in the environment at start-up.
Barriers are counted from the first one, before Triton is imported and before any policy, and
install() neither restarts the count nor changes the cadence.  Observes when checks fire through
the adapter's ``last_check`` (a 1-rank check has nobody to compare with, so what is observed here
is when checks fire, not what they find).  Prints one JSON line."""

import json
import sys
import tempfile

import torch  # noqa: F401
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from torch.distributed import barrier  # an alias taken after the import hook wrapped it

out = {"armed_at_start": hasattr(dist.barrier, "_self_wrapper"), "triton_at_first_barrier": None}

from autotune_guard.adapters.distributed import last_check  # noqa: E402

fired = []


def observed(call):
    """``call()``, noting (in the world group?, where) of the check it ran, if any."""
    before = last_check.get("count", 0)
    call()
    if last_check.get("count", 0) != before:
        fired.append((last_check["group"] == dist.group.WORLD.group_name, last_check["where"]))


dist.init_process_group("gloo", init_method="file://" + tempfile.mktemp(), rank=0, world_size=1)
observed(barrier)                  # world 1: before Triton and before any policy
out["triton_at_first_barrier"] = "triton" in sys.modules

import triton  # noqa: E402,F401

import autotune_guard  # noqa: E402

autotune_guard.install({"AUTOTUNE_MODE": "pinned"})  # keeps the count
autotune_guard.install({"AUTOTUNE_MODE": "pinned", "AUTOTUNE_VERIFY_EVERY": 5})  # not applied: named in the log
out["wrapped"] = {name: getattr(f, "_self_wrapper", None) is not None for name, f in
                  (("dist.barrier", dist.barrier), ("c10d.barrier", c10d.barrier), ("alias", barrier),
                   ("monitored", dist.monitored_barrier))}
out["one_layer"] = not hasattr(c10d.barrier.__wrapped__, "_self_wrapper")
out["same_object"] = dist.barrier is c10d.barrier is barrier

sub = dist.new_group([0])
observed(lambda: c10d.barrier(sub))                      # sub 1
observed(lambda: dist.barrier(group=dist.group.WORLD))   # world 2 -> check
observed(lambda: dist.barrier(async_op=True).wait())     # not counted: the caller asked not to block
observed(dist.monitored_barrier)                         # world 3
observed(lambda: c10d.barrier(group=sub))                # sub 2 -> check
observed(dist.barrier)                                   # world 4 -> check
out["fired"] = fired
out["verify_choices"] = autotune_guard.verify_choices()
out["maybe_due"] = autotune_guard.maybe_verify_choices(4)
out["maybe_not_due"] = autotune_guard.maybe_verify_choices(5)
del sub
dist.destroy_process_group()
print(json.dumps(out))
sys.stdout.flush()
