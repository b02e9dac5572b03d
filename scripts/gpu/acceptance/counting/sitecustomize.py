"""Counts benchmark calls in every process of an acceptance run (on PYTHONPATH only there): Triton's
``triton.testing.do_bench`` and Inductor's ``benchmark_gpu``. At exit each process that counted any
writes ``$ACCEPT_CALLS/calls.<pid>.json`` with its rank. Measurement only: the programs are unchanged."""

import atexit
import json
import os
import sys
import threading

COUNTS = {"do_bench": 0, "inductor": 0}
_depth = threading.local()


def _counted(name, fn):
    def counting(*args, **kwargs):
        depth = getattr(_depth, name, 0)
        if depth == 0:  # a benchmarker that calls another counts once
            COUNTS[name] += 1
        setattr(_depth, name, depth + 1)
        try:
            return fn(*args, **kwargs)
        finally:
            setattr(_depth, name, depth)
    counting.__wrapped__ = fn
    return counting


def _triton_testing(module):
    module.do_bench = _counted("do_bench", module.do_bench)


def _inductor_benchmarking(module):
    for cls in vars(module).values():
        if isinstance(cls, type) and "benchmark_gpu" in vars(cls):
            setattr(cls, "benchmark_gpu", _counted("inductor", vars(cls)["benchmark_gpu"]))


def _compiled():
    """Dynamo's graphs and graph breaks in this process: a guard that broke graphs would show here."""
    dynamo = sys.modules.get("torch._dynamo.utils")
    if dynamo is None:
        return {}
    counters = dynamo.counters
    return {"graphs": counters["stats"].get("unique_graphs", 0), "graph_breaks": sum(counters["graph_break"].values())}


def _write():
    compiled = _compiled()
    if os.environ.get("ACCEPT_CALLS") and (any(COUNTS.values()) or compiled):
        path = os.path.join(os.environ["ACCEPT_CALLS"], f"calls.{os.getpid()}.json")
        with open(path, "w") as out:
            json.dump({"rank": os.environ.get("RANK", "0"), **COUNTS, **compiled}, out)


if os.environ.get("ACCEPT_CALLS"):
    import wrapt

    wrapt.register_post_import_hook(_triton_testing, "triton.testing")
    wrapt.register_post_import_hook(_inductor_benchmarking, "torch._inductor.runtime.benchmarking")
    atexit.register(_write)
    if os.environ.get("ACCEPT_PICKS") == "1":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import picks

        picks.install()
