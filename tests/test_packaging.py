"""What a company adopting the package reads (issue 24): the licence, the metadata, ``py.typed``, and
the ``autotune-guard-report`` console script, from a wheel built of a copy of the checkout and
installed into a fresh virtual environment (the helpers of test_activation.py)."""

import email.parser
import json
import re
import subprocess
import sys
import zipfile

import pytest

from support import REPO, clean_env
from test_activation import _copy_repo, _fresh_venv, _pip

from autotune_guard.core import schema

pytestmark = pytest.mark.slow  # every test here starts a process (conftest.py: the slow tier)


def _wheel(tmp_path):
    source = _copy_repo(tmp_path / "src")
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels),
                    str(source)], check=True, capture_output=True, timeout=300)
    (wheel,) = wheels.glob("autotune_guard-*.whl")
    return wheel


def test_the_wheel_carries_licence_metadata_types_and_the_console_script(tmp_path):
    wheel = _wheel(tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        metadata = email.parser.Parser().parsestr(archive.read(f"{info}/METADATA").decode())
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
        licence = archive.read(f"{info}/licenses/LICENSE").decode()
    assert "autotune_guard/py.typed" in names
    assert licence == open(f"{REPO}/LICENSE").read()
    assert "Apache License\n                           Version 2.0, January 2004" in licence
    assert "Copyright 2026 The autotune_guard authors" in licence
    assert metadata["License-Expression"] == "Apache-2.0" and metadata["License-File"] == "LICENSE"
    urls = dict(u.split(", ", 1) for u in metadata.get_all("Project-URL"))
    assert set(urls) >= {"Homepage", "Documentation", "Issues"} and all(u.startswith("https://") for u in urls.values())
    assert metadata["Author"] and metadata["Keywords"] and "triton" in metadata["Keywords"].split(",")
    classifiers = metadata.get_all("Classifier")
    supported = [f"Programming Language :: Python :: 3.{minor}" for minor in range(10, 14)]
    assert set(supported) <= set(classifiers) and metadata["Requires-Python"] == ">=3.10"
    assert not [c for c in classifiers if re.match(r"Programming Language :: Python :: 3\.(\d+)$", c)
                and c not in supported]
    assert any(c.startswith("Operating System ::") for c in classifiers)
    assert any(c.startswith("Topic ::") for c in classifiers) and "Typing :: Typed" in classifiers
    # A License classifier beside License-Expression is refused by newer build tools (PEP 639).
    assert not any(c.startswith("License ::") for c in classifiers)
    assert "[console_scripts]\nautotune-guard-report = autotune_guard.report.cli:main" in entry_points

    python, _ = _fresh_venv(tmp_path / "venv")
    _pip(python, "install", "--no-deps", "--no-index", str(wheel))
    script = python.parent / "autotune-guard-report"
    runs = tmp_path / "runs"
    runs.mkdir()
    for rank, block in enumerate((32, 64)):
        (runs / f"rec.rank{rank}.json").write_text(json.dumps({
            "format": schema.RECORD_FORMAT, "arch": "sm90", "rank": rank, "world_size": 2, "complete": True,
            "kernels": {"pkg.kern": {"8": {"config": {"kwargs": {"BLOCK": block}}}}}}))

    def report(*argv):
        return subprocess.run([str(script), *map(str, argv)], env=clean_env(), capture_output=True, text=True,
                              timeout=120, cwd=tmp_path)

    assert report("--help").returncode == 0 and "show" in report("--help").stdout
    # The script's exit status is main()'s: 1 for ranks that disagree under --check, 2 for bad input.
    shown = report("show", "--check", runs / "rec")
    assert shown.returncode == 1 and "DISAGREE" in shown.stdout, shown.stderr
    assert report("show", runs / "rec").returncode == 0
    missing = report("show", runs / "nothing")
    assert missing.returncode == 2 and "no such file" in missing.stderr
