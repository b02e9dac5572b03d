"""Winners worth freezing on the training program (issue 43): what cold first runs of the README's
command froze, against plain Triton's picks, judged by a careful re-timing.

Reads the jobs of acceptance.sh's winners phase (and the train phase's ``plain`` and ``readme1``),
each a folder of ``picks.<pid>.json`` (what each process chose), guard jobs also their table
(``sm*.json``: how each entry was chosen), the audit job ``audit.<pid>.json`` (every candidate once,
those within 5 % of the best in 20 interleaved rounds, the median). Jobs may come from several leases
of the same card kind: copy their folders into one, named ``LEASE+JOB`` where names repeat. Per Triton key (a real library's kernels):

* guard: the distinct winners over the guard jobs (each job's table: what later jobs get; the ranks'
  own logs are checked to agree),
  their regret against the careful best, the verdicts the tables give (``tie`` allows two);
* alone: the same for guard jobs of one rank (the GPU its own, as in a job with a GPU per rank);
* onepass: the same for run 1 with one pass (AUTOTUNE_RETIME_ROUNDS=0);
* plain: the distinct picks over every rank of the plain jobs (each rank a cold process), regrets;
* pool: groups of one-rank jobs with AUTOTUNE_POOL_RUNS (``winners-pool1-g<G>r<R>``): each group's
  pooled winner and each run's own, against all the groups' runs pooled and against the audit.

Inductor's generated kernels: as Triton's keys where the audit timed them (picks.py audits them too),
else only whether the guard jobs froze the same entry.

Then, between processes: for each pair of candidates that four or more jobs' tables re-timed in
rounds (3 or more timings each), the pair's ratio in each job, its mean and its spread between jobs,
beside the spread of one timing within a job. Where the spread between jobs exceeds the pair's
difference, which candidate is best depends on the process, and no rule inside one can freeze the
same winner every time and the best each time.

With ``--pooled``, it also shows what pooling cold runs would freeze (AUTOTUNE_POOL_RUNS's rule
replayed on the tables): for every way of picking 1, 2 or 3 jobs of a kind, the pooled winner, and
how often each candidate comes out so.

    python scripts/gpu/acceptance/winners.py FOLDER [--json OUT.json] [--pooled]
"""

import glob
import itertools
import json
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))  # the repo

KINDS = (("guard", ("readme1", "winners-guard-")), ("alone", ("winners-guard1-",)), ("onepass", ("winners-onepass-",)),
         ("plain", ("plain", "winners-plain-")), ("audit", ("winners-audit-",)), ("pool", ("winners-pool1-",)))
WITHIN = 0.005  # the bar: a frozen winner within 0.5 % of the careful best


def kind_of(job: str):
    job = job.rpartition("+")[2]  # LEASE+JOB: the same job name from several leases
    for kind, prefixes in KINDS:
        if any(job == p or (p.endswith("-") and job.startswith(p)) for p in prefixes):
            return kind
    return None


def load_job(folder):
    """(picks of each process that chose anything, the table document or None, audits merged)."""
    picks, audit = [], {}
    for path in sorted(glob.glob(os.path.join(folder, "picks.*.json"))):
        found = json.load(open(path))
        if found.get("triton") or found.get("inductor") or found.get("guard"):  # compile workers choose nothing
            picks.append(found)
    for path in glob.glob(os.path.join(folder, "audit.*.json")):
        for kernel, keys in json.load(open(path)).items():
            audit.setdefault(kernel, {}).update(keys)
    tables = glob.glob(os.path.join(folder, "sm*.json"))
    return picks, (json.load(open(tables[0])) if tables else None), audit


def regret(audit_entry, sig):
    """A pick's regret against the careful best; from the single timing where it was not a contender."""
    if audit_entry is None:
        return None
    careful, first = audit_entry["careful"], audit_entry["first"]
    best = min(careful.values())
    if sig in careful:
        return careful[sig] / best - 1
    return first[sig] / min(first.values()) - 1 if sig in first else None


def frozen(table):
    """kernel -> key -> signature: what a guarded job froze for every later job (its table)."""
    from autotune_guard.core.model import signature

    return {kernel: {key: signature({"kwargs": {}, **entry}) for key, entry in keys.items()}
            for kernel, keys in ((table or {}).get("kernels") or {}).items()}


def choices_of(process, kind):
    """kernel -> key -> signature of one process: the guard's log in guarded jobs (a pinned choice
    is not in Triton's cache), Triton's caches in plain ones."""
    if kind in ("plain", "audit"):  # Inductor's kernels by the guard's names (older picks files: by function)
        inductor = {k: v for k, v in (process.get("inductor") or {}).items() if isinstance(v, dict)}
        return {**(process.get("triton") or {}), **inductor}
    found = {}
    for name, text in (process.get("guard") or {}).items():
        if name != "error":
            _, kernel, key = name.split("|", 2)
            found.setdefault(kernel, {})[key] = text.rpartition(";")[0]
    return found


def per_key(jobs):
    """kernel -> key -> kind -> [(job, rank, sig)], and the guard tables' verdicts by kernel and key."""
    picks, verdicts = {}, {}
    for job, kind, (processes, table, _) in jobs:
        if kind == "pool":  # print_pooling's
            continue
        chosen = [("table", frozen(table))] if kind in ("guard", "alone", "onepass") else \
            [(process["rank"], choices_of(process, kind)) for process in processes]
        for rank, choices in chosen:
            for kernel, keys in choices.items():
                for key, sig in keys.items():
                    picks.setdefault(kernel, {}).setdefault(key, {}).setdefault(kind, []).append((job, rank, sig))
        for kernel, keys in ((table or {}).get("measured") or {}).items() if kind in ("guard", "alone") else ():
            for key, found in keys.items():
                if isinstance(found, dict):
                    verdicts.setdefault(kernel, {}).setdefault(key, []).append(found.get("how"))
    return picks, verdicts


def disagreeing_ranks(jobs):
    """Guarded jobs whose ranks froze different configs for a key (consensus would be broken)."""
    found = []
    for job, kind, (processes, _, _) in jobs:
        if kind not in ("guard", "alone", "onepass"):
            continue
        seen = {}
        for process in processes:
            for kernel, keys in choices_of(process, kind).items():
                for key, sig in keys.items():
                    seen.setdefault((kernel, key), set()).add(sig)
        found += [f"{job}: {kernel} {key}" for (kernel, key), sigs in seen.items() if len(sigs) > 1]
    return found


def describe(kind_picks, audit_entry):
    sigs = [sig for _, _, sig in kind_picks]
    regrets = [regret(audit_entry, sig) for sig in sigs]
    known = [r for r in regrets if r is not None]
    return {"draws": len(sigs), "distinct": len(set(sigs)), "picks": sigs,
            "regrets": [None if r is None else round(r, 5) for r in regrets],
            "single": [audit_entry is not None and sig not in audit_entry["careful"] for sig in sigs],
            "within": sum(r <= WITHIN for r in known) if known else None}


def key_candidates(jobs, kind):
    """(kernel, key, each job's ``candidates``) for every key that the tables of ``kind``'s jobs measured."""
    measured = [table.get("measured", {}) for _, k, (_, table, _) in jobs if k == kind and table]
    for kernel in sorted(set().union(*measured)):
        for key in sorted(set().union(*[m.get(kernel, {}) for m in measured])):
            yield kernel, key, [m[kernel][key]["candidates"] for m in measured if key in m.get(kernel, {})]


def between_jobs(jobs, kind, least=4):
    """Rows (kernel, key, pair, each job's log ratio, within-job spread) for pairs of candidates that
    ``least`` or more of ``kind``'s jobs' tables timed in rounds (n >= 3 each)."""
    rows = []
    for kernel, key, entries in key_candidates(jobs, kind):
        for a, b in itertools.combinations(sorted(set().union(*entries)), 2):
            both = [e for e in entries if all(e.get(c, {}).get("n", 0) >= 3 and e[c].get("median") for c in (a, b))]
            if len(both) >= least:
                ratios = [math.log(e[a]["median"] / e[b]["median"]) for e in both]
                within = statistics.median(e[c].get("spread") or 0.0 for e in both for c in (a, b))
                rows.append((kernel, key, f"{a} / {b}", ratios, within))
    return rows


def print_between(jobs):
    for kind in ("guard", "alone"):
        rows = between_jobs(jobs, kind)
        if not rows:
            continue
        print(f"between processes ({kind} jobs): one pair's ratio in each job's rounds")
        print("| kernel | key | pair | mean % | spread between jobs % | each job % | one timing's spread in a job % |")
        print("|---|---|---|---|---|---|---|")
        for kernel, key, pair, ratios, within in rows:
            print(f"| {kernel.rpartition('.')[2]} | {key[:40]} | {pair} | {statistics.mean(ratios) * 100:+.2f} "
                  f"| {statistics.stdev(ratios) * 100:.2f} | {' '.join(f'{r * 100:+.1f}' for r in ratios)} | {within * 100:.2f} |")


def pooled_picks(tables, size):
    """Each candidate's share of the picks over every ``size`` of the ``tables`` (one key's
    ``candidates`` per job), by the guard's pooling rule (``core.pooling.pool``: the lowest mean, over
    the jobs pooled, of its log ratio to the job's best, a spiked job left out; 0.5 % ties to the first
    declared)."""
    from autotune_guard.core import pooling

    counts = {}
    for combo in itertools.combinations(tables, size):
        found = pooling.pool([{"candidates": t} for t in combo], list(combo[0]))
        if found is not None:
            counts[found.winner] = counts.get(found.winner, 0) + 1
    total = sum(counts.values())
    return {c: n / total for c, n in sorted(counts.items(), key=lambda item: -item[1])}


def print_pooled(jobs, least=4):
    for kind in ("guard", "alone"):
        for kernel, key, tables in key_candidates(jobs, kind):
            if len(tables) < least:
                continue
            shares = [pooled_picks(tables, size) for size in (1, 2, 3)]
            print(f"pooled ({kind}) {kernel.rpartition('.')[2]} {key[:30]}: " + "; ".join(
                f"{size} job{'s' * (size > 1)}: " + ", ".join(f"{c} {share:.0%}" for c, share in found.items())
                for size, found in zip((1, 2, 3), shares)))


def pool_groups(jobs):
    """group -> the measured entries (kernel -> key -> entry) of its last run's table (pool1 jobs)."""
    last = {}
    for job, kind, (_, table, _) in jobs:
        if kind == "pool" and table:
            group, _, nth = job.rpartition("-g")[2].partition("r")
            if int(nth) >= last.get(group, (0, None))[0]:
                last[group] = (int(nth), table.get("measured") or {})
    return {group: measured for group, (_, measured) in sorted(last.items())}


def runs_of(entry):
    """Each pooled run's own measurement of one key, oldest first."""
    return [*(entry.get("earlier") or []), {k: v for k, v in entry.items() if k != "earlier"}]


def pooled_scores(runs):
    """Each candidate timed by every run: the median over the runs of its log ratio to the run's best
    (the reference: the median, not the guard's trimmed mean, so that it is not the rule judging itself)."""
    from autotune_guard.core import pooling

    ratios = pooling.log_ratios(runs, sorted(set().union(*[r["candidates"] for r in runs])))
    return {c: statistics.median(values) for c, values in ratios.items()}


def print_pooling(jobs, audit):
    """AUTOTUNE_POOL_RUNS groups: each group's pooled winner against each run's own, judged by all the
    groups' runs pooled (the best estimate across processes) and by the audit (one process)."""
    groups = pool_groups(jobs)
    if not groups:
        return
    print(f"pooled winners: {len(groups)} groups; regret % against all {sum(1 for _, k, _ in jobs if k == 'pool')} "
          "pool jobs' runs pooled (and against the one-process audit)")
    print("| kernel | key | pooled: distinct / groups, within 0.5 % | each run's own: distinct / runs, within 0.5 % "
          "| pooled regrets % | own regrets % | pooled verdicts |")
    print("|---|---|---|---|---|---|---|")
    keys = sorted({(kernel, key) for measured in groups.values() for kernel, ks in measured.items() for key in ks})
    for kernel, key in keys:
        entries = [m[kernel][key] for m in groups.values() if key in m.get(kernel, {})]
        runs = [run for entry in entries for run in runs_of(entry)]
        score = pooled_scores(runs)
        picks = [(entry.get("pooled") or {}).get("winner", entry["winner"]) for entry in entries]
        own = [run["winner"] for run in runs]
        against = lambda sigs: [score[s] - min(score.values()) if s in score else None for s in sigs]
        audited = audit.get(kernel, {}).get(key)
        cell = lambda sigs, r: f"{len(set(sigs))} / {len(sigs)}, {sum(x is not None and x <= WITHIN for x in r)}"
        text = lambda r: " ".join("?" if x is None else f"{x * 100:.2f}" for x in r)
        audit_text = "" if audited is None else f" (audit: {text([regret(audited, s) for s in picks])})"
        hows = sorted({(entry.get("pooled") or {}).get("how", "?") for entry in entries})
        print(f"| {kernel.rpartition('.')[2]} | {key[:40]} | {cell(picks, against(picks))} | {cell(own, against(own))} "
              f"| {text(against(picks))}{audit_text} | {text(against(own))} | {','.join(hows)} |")


def main():
    folder = sys.argv[1]
    jobs = [(job, kind_of(job), load_job(os.path.join(folder, job))) for job in sorted(os.listdir(folder))
            if kind_of(job) and os.path.isdir(os.path.join(folder, job))]
    audit = {}
    for _, kind, (_, _, found) in jobs:
        for kernel, keys in found.items():
            audit.setdefault(kernel, {}).update(keys)
    picks, verdicts = per_key(jobs)
    counts = {kind: sum(1 for _, k, _ in jobs if k == kind) for kind, _ in KINDS}
    print(f"winners: {counts['guard']} guard jobs, {counts['alone']} of one rank, {counts['onepass']} one-pass, "
          f"{counts['plain']} plain (each rank a process), {counts['audit']} audit")
    print("| kernel | key | guard: distinct / jobs, within 0.5 % | verdicts | one rank alone | one-pass | plain: distinct / "
          "processes, within 0.5 % | regrets % (guard; alone; plain) |")
    print("|---|---|---|---|---|---|---|---|")
    result, inductor, elsewhere = {}, {}, []
    for kernel, keys in sorted(picks.items()):
        for key, kinds in sorted(keys.items()):
            if kernel.startswith("inductor.") and kernel not in audit:  # not audited: agreement only
                if kinds.get("guard"):
                    inductor[f"{kernel}|{key}"] = [sig for _, _, sig in kinds["guard"]]
                else:
                    elsewhere.append(f"{kernel} {key}")
                continue
            entry = audit.get(kernel, {}).get(key)
            row = {kind: describe(found, entry) for kind, found in kinds.items()}
            row["verdicts"] = verdicts.get(kernel, {}).get(key, [])
            row["careful_ms"] = entry and entry["careful"]
            result[f"{kernel}|{key}"] = row
            cell = lambda k: (f"{row[k]['distinct']} / {row[k]['draws']}, {row[k]['within']}" if k in row else "-")
            spread = lambda k: ("-" if k not in row else " ".join(
                "?" if r is None else f"{r * 100:.2f}{'*' if one else ''}" for r, one in zip(row[k]["regrets"], row[k]["single"])))
            print(f"| {kernel.rpartition('.')[2]} | {key} | {cell('guard')} | {','.join(sorted(set(map(str, row['verdicts']))))} "
                  f"| {cell('alone')} | {cell('onepass')} | {cell('plain')} | {spread('guard')}; {spread('alone')}; {spread('plain')} |")
    print("(* a regret from the audit's single timing: the pick was outside its rounds)")
    same = sum(len(set(v)) == 1 for v in inductor.values())
    print(f"Inductor's kernels not audited: {same} of {len(inductor)} keys frozen the same in every guard job")
    if elsewhere:
        print(f"Inductor keys in no guard job's table (no choice there to freeze) and not audited: {', '.join(elsewhere)}")
    broken = disagreeing_ranks(jobs)
    print("ranks of a guarded job that froze different configs:", broken or "none")
    print_between(jobs)
    print_pooling(jobs, audit)
    if "--pooled" in sys.argv:
        print_pooled(jobs)
    if "--json" in sys.argv:
        with open(sys.argv[sys.argv.index("--json") + 1], "w") as out:
            json.dump({"keys": result, "inductor": inductor, "rank_disagreements": broken, "jobs": counts}, out, indent=1)


if __name__ == "__main__":
    main()
