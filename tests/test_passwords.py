"""Passwords never said (issue 59, defect 3): a library switch whose value is a URL with a password
(FlagGems' ``FLAGGEMS_DB_URL``) is said with the password hidden at start-up, in the evidence files and
by ``report show``; a Redis URL whose password holds ``:/`` stays one entry of AUTOTUNE_TABLE_PATH and
its refusal names no part of the password. Cold processes of the installed package."""

import glob
import json

import pytest

from support import clean_env, run_python

SECRET = "S3CRETDB"


@pytest.mark.slow
def test_a_library_switchs_password_is_hidden_in_the_log_the_evidence_and_the_report(tmp_path, capsys):
    from autotune_guard.report import cli

    env = clean_env(AUTOTUNE_MODE="pinned", AUTOTUNE_DIGEST_PATH=tmp_path / "choices",
                    FLAGGEMS_DB_URL=f"postgresql://gems:{SECRET}@db/tune")
    proc = run_python("import torch\nfrom kernels import demo\ndemo.add(torch.ones(100), torch.ones(100))", env=env)
    assert "library switches in force: FLAGGEMS_DB_URL=postgresql://gems:***@db/tune" in proc.stderr, proc.stderr
    assert SECRET not in proc.stderr + proc.stdout
    (evidence,) = glob.glob(str(tmp_path / "choices.rank*.json"))
    text = open(evidence).read()
    assert SECRET not in text and json.loads(text)["switches"]["FLAGGEMS_DB_URL"] == "postgresql://gems:***@db/tune"
    # an evidence file an older version wrote, password and all: the report hides it too
    old = json.loads(text)
    old["switches"]["FLAGGEMS_DB_URL"] = f"postgresql://gems:{SECRET}@db/tune"
    (tmp_path / "old.json").write_text(json.dumps(old))
    capsys.readouterr()
    assert cli.main(["show", str(tmp_path / "old.json")]) == 0
    out = capsys.readouterr().out
    assert SECRET not in out and "postgresql://gems:***@db/tune" in out


@pytest.mark.parametrize("url", ["redis://u:pa:/SECRET8@127.0.0.1:1/0", "redis://u:pa:/x:/SECRET8@127.0.0.1:1/0",
                                 "rediss://u::/SECRET8@127.0.0.1:1/0"])
def test_a_password_holding_colon_slash_stays_in_its_url_and_is_never_said(tmp_path, url):
    from autotune_guard.core.settings import policy_from_environment
    from autotune_guard.core.store_url import hide_password, split_table_path

    (entry, path) = split_table_path(f"{url}:{tmp_path}")
    assert entry == url and path == str(tmp_path)
    assert "SECRET8" not in hide_password(url) and "pa:" not in hide_password(url)
    try:
        policy_from_environment({"AUTOTUNE_MODE": "consensus", "AUTOTUNE_TABLE_PATH": f"{url}:{tmp_path}"})
    except Exception as exc:  # a refusal, if any, says the URL without the password
        assert "SECRET8" not in str(exc) and "pa:" not in str(exc), str(exc)
