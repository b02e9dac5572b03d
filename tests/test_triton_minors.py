"""scripts/triton_minors.py: which Triton releases ``scripts/test.sh --all`` tests, from the package
index's list: the newest patch of every minor from 3.3 on, a new minor (3.10) the day it is listed,
pre-releases left out. Pure: pip's output in, versions out."""

import importlib.util
import os

from support import REPO

spec = importlib.util.spec_from_file_location("triton_minors", os.path.join(REPO, "scripts", "triton_minors.py"))
triton_minors = importlib.util.module_from_spec(spec)
spec.loader.exec_module(triton_minors)

TODAY = ("triton (3.9.0)\nAvailable versions: 3.9.0, 3.8.0, 3.7.1, 3.7.0, 3.6.0, 3.5.1, 3.5.0, 3.4.0, 3.3.1, 3.3.0, "
         "3.2.0, 3.1.0, 3.0.0, 2.3.1\n")


def test_the_newest_patch_of_each_minor_from_3_3():
    assert triton_minors.latest_minors(TODAY) == ["3.3.1", "3.4.0", "3.5.1", "3.6.0", "3.7.1", "3.8.0", "3.9.0"]


def test_a_new_minor_is_tested_the_day_the_index_lists_it_and_a_pre_release_is_not():
    day_zero = TODAY.replace("Available versions: ", "Available versions: 3.10.0rc2, ")
    assert triton_minors.latest_minors(day_zero)[-1] == "3.9.0"
    released = TODAY.replace("Available versions: ", "Available versions: 3.10.1, 3.10.0, ")
    assert triton_minors.latest_minors(released)[-2:] == ["3.9.0", "3.10.1"]  # 3.10 after 3.9, not between 3.1 and 3.2


def test_an_unreadable_index_gives_nothing_and_the_script_falls_back():
    assert triton_minors.latest_minors("ERROR: No matching distribution found for triton") == []
