"""``report merge prefix.rank*.json``, the files the shell's glob names one by one, treats a record
another user put in a shared prefix as the prefix form does: named and left out, unless ``--others``.
A second real user (nobody) writes the planted record; a real Triton kernel writes the user's own."""

import glob
import json
import subprocess
import sys

from test_hostile_inputs import NOBODY, _plant_as_nobody, root_only, shared_results  # noqa: F401 (the fixture)

import pytest

pytestmark = pytest.mark.slow


@root_only
def test_a_record_of_another_user_named_by_the_shells_glob_is_left_out_and_named_unless_asked_for(
        tmp_path, shared_results):  # noqa: F811
    from support import rank_file
    from test_evidence import env_for, read, report

    rec = shared_results / "rec"
    code = "import torch\nfrom kernels import demo\ndemo.add(torch.arange(100.), torch.arange(100.))"
    subprocess.run([sys.executable, "-c", code], env=env_for(AUTOTUNE_RECORD_PATH=rec), check=True,
                   capture_output=True, timeout=120)
    mine = read(rank_file(rec, 0))
    (kernel, keys), = mine["kernels"].items()
    (key, entry), = keys.items()
    other = next(c for c in entry["candidates"] if c != entry["config"])
    theirs = json.loads(json.dumps(mine))  # a later run of another user, naming a winner of its own
    sig = f"BLOCK={other['kwargs']['BLOCK']},num_warps={other['num_warps']},num_stages=3,num_ctas=1"
    theirs["kernels"][kernel][key].update(config=other, signature=sig, timings={sig: [0.001, 0.001, 0.001]})
    theirs.update(run_id="intruder-run", pid=1)
    planted = shared_results / "rec.rank0.intruder-1.json"
    _plant_as_nobody(planted, json.dumps(theirs).encode())
    globbed = sorted(glob.glob(f"{rec}.rank*.json"))
    assert str(planted) in globbed and len(globbed) == 2, globbed
    merged = report("merge", *globbed, "-o", tmp_path / "t.json")
    assert merged.returncode == 0, merged.stderr
    table = json.loads((tmp_path / "t.json").read_text())
    assert table["kernels"][kernel][key]["kwargs"] == entry["config"]["kwargs"], table  # before: the intruder's
    said = [line for line in merged.stderr.splitlines() if str(planted) in line]
    assert len(said) == 1 and f"left out {planted}: a file of nobody (uid {NOBODY}), not of this user" in said[0], \
        merged.stderr
    assert "merge --others reads it" in said[0]
    # Asked for, it is read (the latest run: the intruder's winner); named alone, it is read too.
    asked = report("merge", *globbed, "-o", tmp_path / "t2.json", "--others")
    assert asked.returncode == 0 and "is of nobody" in asked.stderr, asked.stderr
    assert json.loads((tmp_path / "t2.json").read_text())["kernels"][kernel][key]["kwargs"] == other["kwargs"]
    alone = report("merge", planted, "-o", tmp_path / "t3.json")
    assert alone.returncode == 0 and "is of nobody" in alone.stderr, alone.stderr
    assert json.loads((tmp_path / "t3.json").read_text())["kernels"][kernel][key]["kwargs"] == other["kwargs"]
