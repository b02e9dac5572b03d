"""The keep phase's check (issue 57): which entries a job wrote into its table, against the ones it was
meant to write, and that nothing the table knew was lost.

    python keep_check.py BEFORE.json AFTER.json --expect KERNEL[|KEY]... [--superseded KERNEL]

An entry counts as written when who added it changed. Passes (exit 0) when exactly the expected
entries were written (a KERNEL alone: each of its keys), every other entry is byte-for-byte the same
with who added it, each written entry's old one is kept (its history, or ``superseded`` for a
changed kernel), and the table holds every key it held before. Prints one line per written entry.
"""

import argparse
import json
import sys


def entries(table):
    return {(kernel, key): entry for kernel, keys in table["kernels"].items() for key, entry in keys.items()}


def added(table, kernel, key):
    return (table.get("added") or {}).get(kernel, {}).get(key)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--expect", nargs="+", required=True, metavar="KERNEL[|KEY]")
    parser.add_argument("--superseded", metavar="KERNEL", help="this kernel's older version must be kept apart")
    args = parser.parse_args()
    before, after = (json.load(open(path)) for path in (args.before, args.after))
    old, new = entries(before), entries(after)
    wanted = {tuple(item.split("|", 1)) if "|" in item else (item,) for item in args.expect}
    expected = {pair for pair in old if pair in wanted or (pair[0],) in wanted}
    written = {pair for pair in new if added(after, *pair) != added(before, *pair)}
    ok = True
    for kernel, key in sorted(written):
        history = ((after.get("measured") or {}).get(kernel, {}).get(key) or {}).get("earlier") or []
        replaced = [item["replaced"] for item in history if isinstance(item, dict) and "replaced" in item]
        print(f"written: {kernel} ({key}): {json.dumps(old.get((kernel, key)), sort_keys=True)} -> "
              f"{json.dumps(new[(kernel, key)], sort_keys=True)}; replaced kept in history: {len(replaced)}")
        if kernel != args.superseded and (kernel, key) in old and not replaced:
            print(f"FAIL: {kernel} ({key}) was replaced without its old entry kept beside it")
            ok = False
    if written != expected:
        print(f"FAIL: written {sorted(written)}, expected {sorted(expected)}")
        ok = False
    for pair in set(old) - expected:
        if new.get(pair) != old[pair] or added(after, *pair) != added(before, *pair):
            print(f"FAIL: {pair} changed although not asked for")
            ok = False
    lost = set(old) - set(new)
    if args.superseded:
        kept = [item for item in after.get("superseded") or [] if item.get("kernel") == args.superseded]
        kept_keys = {(args.superseded, key) for item in kept for key in item.get("entries", {})}
        print(f"superseded {args.superseded}: {len(kept)} older version(s), {len(kept_keys)} entries kept apart")
        lost -= kept_keys
        ok &= bool(kept)
    if lost:
        print(f"FAIL: the table lost {sorted(lost)}")
        ok = False
    print("keep check:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
