"""max-autotune's template selection under the guard, on a GPU: a 1024x1024 fp16 ``mm`` compiled with
``torch.compile(mode="max-autotune")`` in cold processes (each with its own empty Inductor cache).

    python scripts/gpu/templates_proof.py --out DIR [--processes 4]

Runs, side by side in one go: plain max-autotune (no AUTOTUNE_* setting) in N processes; record in
one process, ``report merge`` into a table; pinned from that table with AUTOTUNE_ON_MISS=error in N
processes; and one pinned process given the Inductor cache directory a plain process filled (its
FX graph cache must not serve the plain graph). For each process: Inductor's count of template
benchmark passes (``select_algorithm_autotune``), the GPU timings its benchmarker made, a hash of
the output, the template choice in the guard's choice log, and the guard's exit line (which counts
what it did not govern). ``worker OUT.json`` is one such process.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time


def worker(out_path: str) -> None:
    import torch
    from torch._dynamo.utils import counters
    from torch._inductor.runtime.benchmarking import benchmarker

    timed = {"n": 0}
    own = benchmarker.benchmark_gpu

    def counted(*args, **kwargs):
        timed["n"] += 1
        return own(*args, **kwargs)

    benchmarker.benchmark_gpu = counted
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(1024, 1024, device="cuda", dtype=torch.float16, generator=gen)
    b = torch.randn(1024, 1024, device="cuda", dtype=torch.float16, generator=gen)
    f = torch.compile(lambda x, y: x @ y, mode="max-autotune")
    start = time.perf_counter()
    y = f(a, b)
    torch.cuda.synchronize()
    result = {"compile_s": round(time.perf_counter() - start, 2),
              "template_benchmarks": int(counters["inductor"]["select_algorithm_autotune"]),
              "gpu_timings": timed["n"], "fx_hits": int(counters["inductor"]["fxgraph_cache_hit"]),
              "hash": hashlib.sha256(y.float().cpu().numpy().tobytes()).hexdigest()[:16], "torch": torch.__version__}
    if "autotune_guard._boot" in sys.modules:
        import autotune_guard

        result["choices"] = {k: v for k, v in autotune_guard.choice_log().items() if "template selection" in k}
        result["ungoverned"] = autotune_guard.ungoverned()
    with open(out_path, "w") as handle:
        json.dump(result, handle, indent=1)


def _run(work: str, name: str, cache: str, **settings) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
    env.update(settings, TORCHINDUCTOR_CACHE_DIR=cache, TRITON_CACHE_DIR=os.path.join(work, "triton-cache"))
    out = os.path.join(work, f"{name}.json")
    started = time.perf_counter()
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "worker", out], env=env, capture_output=True,
                          text=True, timeout=400)
    with open(os.path.join(work, f"{name}.log"), "w") as handle:
        handle.write(done.stdout + done.stderr)
    result = json.load(open(out)) if done.returncode == 0 and os.path.exists(out) else {"error": done.stderr[-2000:]}
    result["rc"], result["wall_s"] = done.returncode, round(time.perf_counter() - started, 1)
    result["exit_line"] = next((line for line in reversed(done.stderr.splitlines()) if "autotune choices" in line), None)
    return result


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--work", default="/tmp/templates-proof", help="caches, records, logs (emptied first)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    work = args.work
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    runs = {}
    for i in range(1, args.processes + 1):
        runs[f"plain{i}"] = _run(work, f"plain{i}", os.path.join(work, f"ic-plain{i}"))
    runs["record"] = _run(work, "record", os.path.join(work, "ic-record"), AUTOTUNE_MODE="record",
                          AUTOTUNE_RECORD_PATH=os.path.join(work, "rec"), AUTOTUNE_LOG_LEVEL="INFO")
    table = os.path.join(work, "table")
    os.makedirs(table, exist_ok=True)
    merged = subprocess.run([sys.executable, "-m", "autotune_guard.report", "merge", os.path.join(work, "rec"), "-o",
                             os.path.join(table, "sm90.json")], capture_output=True, text=True)
    print(f"merge rc={merged.returncode}: {merged.stdout.strip()} {merged.stderr.strip()}")
    pinned = dict(AUTOTUNE_MODE="pinned", AUTOTUNE_ON_MISS="error", AUTOTUNE_TABLE_PATH=table, AUTOTUNE_LOG_LEVEL="INFO")
    for i in range(1, args.processes + 1):
        runs[f"pinned{i}"] = _run(work, f"pinned{i}", os.path.join(work, f"ic-pinned{i}"), **pinned)
    runs["pinned-after-plain"] = _run(work, "pinned-after-plain", os.path.join(work, "ic-plain1"), **pinned)
    with open(os.path.join(args.out, "runs.json"), "w") as handle:
        json.dump(runs, handle, indent=1)
    if os.path.exists(os.path.join(table, "sm90.json")):
        with open(os.path.join(table, "sm90.json")) as src, open(os.path.join(args.out, "table-sm90.json"), "w") as dst:
            dst.write(src.read())
    with tarfile.open(os.path.join(args.out, "logs.tgz"), "w:gz") as tar:
        for name in sorted(os.listdir(work)):
            if name.endswith((".log", ".json")) or name.startswith("rec"):
                tar.add(os.path.join(work, name), arcname=name)
    return _summary(runs, args.processes)


def _summary(runs: dict, n: int) -> int:
    ok = True
    for group in ("plain", "record", "pinned", "pinned-after-plain"):
        found = [r for name, r in runs.items() if (name.rstrip("0123456789") == group)]
        hashes = sorted({r.get("hash") for r in found})
        print(f"{group:19} processes={len(found)} rc={[r['rc'] for r in found]} "
              f"template_benchmarks={[r.get('template_benchmarks') for r in found]} "
              f"gpu_timings={[r.get('gpu_timings') for r in found]} fx_hits={[r.get('fx_hits') for r in found]} "
              f"hashes={len(hashes)} {hashes} wall_s={[r['wall_s'] for r in found]}")
        for r in found:
            for key, choice in (r.get("choices") or {}).items():
                print(f"    {choice}  <- {key}")
            if r.get("exit_line"):
                print(f"    exit: {r['exit_line']}")
            if "error" in r:
                print(f"    error: {r['error'][-600:]}")
    pinned = [runs[f"pinned{i}"] for i in range(1, n + 1)] + [runs["pinned-after-plain"]]
    ok = all(r["rc"] == 0 and r.get("template_benchmarks") == 0 and not r.get("ungoverned") for r in pinned)
    ok = ok and len({r.get("hash") for r in pinned} | {runs["record"].get("hash")}) == 1
    print("PROOF", "holds" if ok else "FAILS")
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "worker":
        worker(sys.argv[2])
        sys.exit(0)
    sys.exit(main())
