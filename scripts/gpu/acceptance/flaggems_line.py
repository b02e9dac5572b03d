"""One line for one FlagGems process of the acceptance run: each op's timer calls and output hash,
and what the guard did not govern.   usage: flaggems_line.py OUT.json"""

import json
import sys

run = json.load(open(sys.argv[1]))
ops = "; ".join(f"{op} calls {v['bench_calls']} hash {v['hash']}" for op, v in run["ops"].items())
print(f"{ops} | choices {len(run['choices'])} | ungoverned {run['ungoverned']}")
