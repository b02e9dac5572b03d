"""The latest release of every Triton minor from 3.3 on that the package index holds, oldest first,
one line: what ``bash scripts/test.sh --all`` tests, so that a new minor (3.10 on its day) is
tested the day the index has it. Pre-releases are left out. Exit 1 when the index cannot be read.

    python scripts/triton_minors.py            # asks pip (its configured index)
"""

import re
import subprocess
import sys

OLDEST = (3, 3)


def latest_minors(pip_output: str) -> list[str]:
    """From ``pip index versions triton``'s output: the newest patch of each minor from OLDEST on."""
    found = re.search(r"Available versions: (.*)", pip_output)
    if not found:
        return []
    latest = {}
    for version in found.group(1).split(","):
        parts = version.strip().split(".")
        if len(parts) != 3 or not all(part.isdigit() for part in parts):
            continue  # 3.10.0rc1 and the like
        numbers = tuple(int(part) for part in parts)
        if numbers[:2] >= OLDEST:
            latest[numbers[:2]] = max(latest.get(numbers[:2], numbers), numbers)
    return [".".join(map(str, latest[minor])) for minor in sorted(latest)]


def main() -> int:
    try:
        proc = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "triton"],
                              capture_output=True, text=True, timeout=180)
    except (OSError, subprocess.TimeoutExpired):
        return 1
    minors = latest_minors(proc.stdout)
    if not minors:
        return 1
    print(" ".join(minors))
    return 0


if __name__ == "__main__":
    sys.exit(main())
