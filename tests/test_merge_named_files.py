"""``report merge prefix.rank*.json``, the files the shell's glob names one by one, treats a record
another user put in a shared prefix as the prefix form does: named and left out, unless ``--others``.
A second real user (nobody) writes the planted record; a real Triton kernel writes the user's own."""

import glob
import json

from test_hostile_inputs import NOBODY, root_only, shared_results  # noqa: F401 (the fixture)

import pytest

pytestmark = pytest.mark.slow


@root_only
def test_a_record_of_another_user_named_by_the_shells_glob_is_left_out_and_named_unless_asked_for(
        tmp_path, shared_results):  # noqa: F811
    from test_evidence import report
    from test_hostile_risks import plant_a_later_run_of_nobody

    rec, kernel, key, entry, other, planted = plant_a_later_run_of_nobody(shared_results)
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
