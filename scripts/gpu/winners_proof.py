"""Winners worth freezing, on a GPU (issue 43): what cold first runs freeze, and how good it is.

For the matmul (4096^3 fp16, 10 tilings) and the row sum (8192 x 16384 fp32, 10 configs) of
``gpu_kernels.py``, RUNS cold processes each (one Triton cache: the first compiles, the others
find the kernels compiled, where re-timing weighs most against a single pass) of three kinds:

* ``guard``: the README's command's first run, alone: AUTOTUNE_MODE=consensus with an empty table
  directory (a process alone times each key for its table; the finalists again in rounds);
* ``one-pass``: the same with AUTOTUNE_RETIME_ROUNDS=0 (every candidate timed once, as before);
* ``plain``: no guard (AUTOTUNE_DISABLE=1): Triton's own pick.

Each child reports its pick and its first call's seconds (compile and tuning). Then this process,
unguarded, times every candidate carefully (ROUNDS interleaved rounds of Triton's do_bench, the
median) and says each pick's regret against the best.

    python scripts/gpu/winners_proof.py OUT_DIR [RUNS] [ROUNDS]      # writes OUT_DIR/winners.json
    WINNERS_KERNELS=rowsum python scripts/gpu/winners_proof.py ...   # one kernel (default: both)
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
KINDS = {"guard": {"AUTOTUNE_MODE": "consensus"},
         "one-pass": {"AUTOTUNE_MODE": "consensus", "AUTOTUNE_RETIME_ROUNDS": "0"},
         "plain": {"AUTOTUNE_DISABLE": "1"}}


def inputs(kernel_name):
    import torch

    torch.manual_seed(0)
    if kernel_name == "matmul":
        a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
        b = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
        return a, b, torch.empty(4096, 4096, device="cuda", dtype=torch.float16)
    return (torch.randn(8192, 16384, device="cuda", dtype=torch.float32),)


def call(kernel_name, kernel, args):
    import gpu_kernels

    return gpu_kernels.matmul(kernel, *args) if kernel_name == "matmul" else gpu_kernels.rowsum(kernel, *args)


def make(kernel_name, configs=None):
    import gpu_kernels

    kernel = gpu_kernels.make_matmul() if kernel_name == "matmul" else gpu_kernels.make_rowsum()
    if configs is not None:
        kernel.configs = configs
    return kernel


def signature_of(config):
    from autotune_guard.core.model import descriptor, signature

    return signature(descriptor(config))


def child(kernel_name):
    """One cold process: the first call, timed; prints its pick."""
    import torch

    kernel = make(kernel_name)
    args = inputs(kernel_name)
    torch.cuda.synchronize()
    start = time.perf_counter()
    call(kernel_name, kernel, args)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    if os.environ.get("AUTOTUNE_DISABLE") == "1":
        pick = signature_of(kernel.best_config)
    else:
        import autotune_guard

        (text,) = [v for k, v in autotune_guard.choice_log().items()]
        pick = text.rpartition(";")[0]
    print(json.dumps({"pick": pick, "seconds": seconds}))


def careful(kernel_name, rounds):
    """Every candidate, ROUNDS interleaved rounds of do_bench (alternating order): the medians."""
    import triton

    args = inputs(kernel_name)
    singles = [(signature_of(c), make(kernel_name, [c])) for c in make(kernel_name).configs]
    for _, kernel in singles:
        call(kernel_name, kernel, args)  # compile
    times = {sig: [] for sig, _ in singles}
    for r in range(rounds):
        for sig, kernel in (singles if r % 2 == 0 else singles[::-1]):
            times[sig].append(triton.testing.do_bench(lambda: call(kernel_name, kernel, args)))
    return {sig: statistics.median(ts) for sig, ts in times.items()}


def main():
    out, runs, rounds = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 6, int(sys.argv[3]) if len(sys.argv) > 3 else 20
    os.makedirs(out, exist_ok=True)
    cache = tempfile.mkdtemp(prefix="winners-triton-cache-")  # not under OUT: it need not come back
    result = {}
    for kernel_name in os.environ.get("WINNERS_KERNELS", "matmul rowsum").split():
        picks = {kind: [] for kind in KINDS}
        for run in range(runs):
            for kind, settings in KINDS.items():  # the kinds alternate, so the machine's drift hits all
                with tempfile.TemporaryDirectory() as tmp:
                    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
                    # One Triton cache for every run: run 0 compiles (a job's cold run 1), the rest time
                    # over compiled kernels, where re-timing weighs most against a single pass.
                    env.update(settings, TRITON_CACHE_DIR=cache, PYTHONPATH=HERE)
                    if kind != "plain":
                        os.makedirs(os.path.join(tmp, "tables"))
                        env["AUTOTUNE_TABLE_PATH"] = os.path.join(tmp, "tables")
                    proc = subprocess.run([sys.executable, __file__, "--child", kernel_name], env=env,
                                          capture_output=True, text=True, timeout=600)
                    if proc.returncode != 0:
                        raise SystemExit(f"{kind} {kernel_name} run {run} failed:\n{proc.stderr[-3000:]}")
                    found = json.loads(proc.stdout.strip().splitlines()[-1])
                    if kind == "guard":
                        table = json.load(open(os.path.join(tmp, "tables", "sm%s.json" % _arch())))
                        found["measured"] = next(iter(next(iter(table["measured"].values())).values()))
                    picks[kind].append(found)
                    print(kernel_name, kind, run, found["pick"], round(found["seconds"], 2), flush=True)
        medians = careful(kernel_name, rounds)
        best = min(medians.values())
        summary = {}
        for kind, found in picks.items():
            chosen = [f["pick"] for f in found]
            summary[kind] = {"distinct": len(set(chosen)), "picks": chosen,
                             "regret": [round(medians[p] / best - 1, 5) for p in chosen],
                             "first_call_s": [round(f["seconds"], 3) for f in found],
                             "verdicts": [f.get("measured", {}).get("how") for f in found]}
        result[kernel_name] = {"careful_ms": medians, "best": min(medians, key=medians.get), "kinds": summary}
        print(json.dumps({kernel_name: summary}, indent=1), flush=True)
        with open(os.path.join(out, "winners.json"), "w") as f:  # after each kernel: a lease may end
            json.dump(result, f, indent=1)


def _arch():
    import torch

    major, minor = torch.cuda.get_device_capability()
    return f"{major}{minor}"


if __name__ == "__main__":
    if sys.argv[1] == "--child":
        child(sys.argv[2])
    else:
        main()
