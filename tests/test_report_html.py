"""`report show --format html` and `report diff --format html` (issue 24).

The browser test records a real 3-rank run (torchrun over gloo, real Triton kernels under
TRITON_INTERPRET=1; each rank's random timer picks its own winners, so the ranks disagree), writes
the page with the CLI as a real process and opens it in headless Chromium, which runs the page's
script and gives back the DOM and a screenshot. The size test is pure logic over plain data.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter

import pytest

from support import TESTS, clean_env, rank_files, torchrun

from autotune_guard import report
from autotune_guard.core import schema
from autotune_guard.core.model import signature
from autotune_guard.report import html, html_model
from autotune_guard.report.html_model import Column, Page, Row

PROGS = os.path.join(TESTS, "progs")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync")


def chromium() -> str:
    """The Chromium binary; missing: skipped on a workstation, a failure under CI (.ci/run
    installs Debian's chromium there)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    why = "no chromium on PATH (Debian: apt-get install chromium, as root; .ci/run installs it)"
    if os.environ.get("CI"):
        pytest.fail(f"CI is set and {why}")
    pytest.skip(why)


def browse(page_path, *args, timeout=60) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="ag-chromium-") as profile:
        cmd = [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args, f"file://{page_path}"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd}\n{proc.stderr[-3000:]}"
    return proc


def cli(*argv, cwd=None):
    return subprocess.run([sys.executable, "-m", "autotune_guard.report", *map(str, argv)], env=clean_env(),
                          capture_output=True, text=True, timeout=120, cwd=cwd)


@pytest.mark.slow
def test_the_page_of_a_real_3_rank_run_in_headless_chromium(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    env = clean_env(AUTOTUNE_RECORD_PATH=str(tmp_path / "rec"))
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(name, None)
    torchrun(os.path.join(PROGS, "record_ranks.py"), 3, env=env, args=[str(results)])
    assert all(len(rank_files(tmp_path / "rec", rank)) == 1 for rank in range(3))
    page = tmp_path / "report.html"
    proc = cli("show", "--format", "html", "-o", page, tmp_path / "rec")
    assert proc.returncode == 0 and proc.stdout == "", proc.stderr
    text = page.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)  # nothing fetched from anywhere
    shown = json.loads(cli("show", "--json", tmp_path / "rec").stdout)
    disagree = shown["disagreements"]
    assert disagree >= 1, "three ranks of random timers chose alike on every key (odds below 1 in 30,000)"

    started = time.monotonic()
    dom = browse(page, "--dump-dom").stdout
    shot = tmp_path / "report.png"
    browse(page, f"--screenshot={shot}", "--window-size=1400,900")
    assert time.monotonic() - started < 60
    # The page's script ran to its end, without an error on the way.
    assert re.search(r'<div id="ag-ready" data-cells="\d+" hidden="(hidden)?"></div>', dom), dom[-2000:]
    assert re.search(r'<div id="ag-errors"></div>', dom), re.search(r'<div id="ag-errors">.*?</div>', dom, re.S)
    assert "3 ranks on 1 node" in dom and f"{disagree} disagreement" in dom and "2 kernels" in dom
    cells = re.findall(r'<td class="(ag-p\d+|ag-mix)( ag-x)?( ag-sel)?" data-c="(\d+)" title="([^"]*)"', dom)
    # One row per rank, but a rank that chose as the rank before it on every key shares its row.
    chose = [tuple(c["config"] for row in shown["keys"] for c in row["choices"] if c["rank"] == rank)
             for rank in range(3)]
    rows = 1 + sum(chose[rank] != chose[rank - 1] for rank in (1, 2))
    assert len(cells) == 3 * rows and f'data-cells="{3 * rows}"' in dom
    assert sum(1 for c in cells if c[2]) == 1  # the script selected a cell and showed its details
    assert re.search(r'<aside id="ag-detail"><b>ranks? \d', dom)
    # A rank that differs from the config most ranks chose is highlighted, and its cell outlined; on a
    # key where the ranks tie (3 configs for 3 ranks) no rank is the one that differs.
    counts = [sorted(Counter(c["config"] for c in row["choices"]).values()) for row in shown["keys"]]
    clear = sum(1 for n in counts if len(n) > 1 and n[-1] > n[-2])
    assert (len(re.findall(r'<tr class="ag-dissent"><th', dom)) >= 1) == (clear >= 1)
    assert (sum(1 for c in cells if c[1]) >= 1) == (clear >= 1)
    assert all("chosen: timed" in c[4] for c in cells)
    assert dom.count('<svg class="ag-plot"') == 3 and "<circle" in dom and "ag-won" in dom
    assert "min-cost" in dom
    assert shot.stat().st_size > 10_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _record(rank, kernels, host="node-a"):
    return {"format": schema.RECORD_FORMAT, "arch": "sm90", "rank": rank, "world_size": 4, "mode": "record",
            "host": host, "versions": {"triton": "3.9.0"}, "complete": True, "kernels": kernels}


def _entry(block, medians):
    candidates = [{"kwargs": {"BLOCK": b}, "num_warps": 4} for b in (16, 32, 64)]
    return {"config": {"kwargs": {"BLOCK": block}, "num_warps": 4}, "how": "timed", "candidates": candidates,
            "timings": {signature({**c, "kwargs": dict(c["kwargs"])}): [m, m, m] for c, m in zip(candidates, medians)}}


def test_file_text_is_escaped_and_diff_pages_show_both_runs(tmp_path):
    evil = '<img src=x onerror="alert(1)">'
    for rank, block in enumerate((16, 32)):
        doc = _record(rank, {f"pkg.{evil}": {f"8,{evil}": _entry(block, [1.0, 2.0, float("inf")])}},
                      host=f"host-{evil}")
        (tmp_path / f"a.rank{rank}.json").write_text(json.dumps(doc))
        (tmp_path / f"b.rank{rank}.json").write_text(json.dumps(_record(rank, {f"pkg.{evil}": {
            f"8,{evil}": _entry(16, [1.0, 2.0, 3.0])}})))
    for argv in (("show", tmp_path / "a"), ("diff", tmp_path / "a", tmp_path / "b")):
        out = tmp_path / f"{argv[0]}.html"
        code = report.main([argv[0], "--format", "html", "-o", str(out), "--check", *map(str, argv[1:])])
        assert code == 1  # --check: the ranks of A disagree, with the page written all the same
        text = out.read_text()
        assert "<img" not in text and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in text
        assert "\u00d72 failed" in text  # BLOCK=64 failed to run on both ranks (Triton's inf)
    diff_text = (tmp_path / "diff.html").read_text()
    assert "A: 2 ranks \u00b7 B: 2 ranks" in diff_text and "0 same, 1 changed</b>" in diff_text
    assert "A: node" in diff_text and "B: node" in diff_text
    assert report.main(["show", "--format", "html", "-o", str(tmp_path), str(tmp_path / "a")]) == 2


def _synthetic(ranks=1024, keys=2000, per_node=8) -> Page:
    """1,024 ranks on 128 nodes, 2,000 keys of 40 kernels, every key timed: every odd rank of node
    3 chose otherwise on 30 keys, rank 700 on 5. Entries are shared between rows, as plain data."""
    sigs = [f"BLOCK_M={b},BLOCK_N=64,num_warps=4,num_stages=3,num_ctas=1" for b in (16, 32, 64, 128)]
    medians = {s: 0.1 * (i + 1) for i, s in enumerate(sigs)}

    def entry(sig):
        return ({"config": sig, "how": "timed", "winner_ms": medians[sig], "fastest_ms": 0.1, "slowest_ms": 0.4,
                 "timed": 4, "min_cost": sigs[0], "min_cost_ms": 0.1, "min_cost_slowdown": 0.1 / medians[sig],
                 "min_cost_failed": False, "medians": medians},)

    usual, other = entry(sigs[1]), entry(sigs[2])
    rows = [Row(f"rank {r}", f"node{r // per_node:03d}", r) for r in range(ranks)]
    columns = []
    for k in range(keys):
        cells = [usual] * ranks
        if k < 30:
            cells = [other if r // per_node == 3 and r % 2 else usual for r in range(ranks)]
        elif k < 35:
            cells[700] = other
        columns.append(Column("sm90", f"pkg.ops.kernel_{k % 40}", f"{k * 64},torch.bfloat16", cells))
    return Page(rows, columns)


@pytest.mark.slow  # seconds of CPU: out of the fast tier (issue 60)
def test_a_page_of_1024_ranks_by_2000_keys_stays_small():
    page = _synthetic()
    started = time.monotonic()
    text = html.render(page, "autotune_guard report", [f"runs/rec.rank{r}.json" for r in range(1024)])
    took = time.monotonic() - started
    assert len(text.encode()) < 5_000_000 and took < 60, (len(text), took)
    assert "1,024 ranks on 128 nodes \u00b7 40 kernels \u00b7 2,000 keys \u00b7" in text
    assert "35 disagreements" in text
    cells = text.count("<td ")
    assert cells <= html_model.MAX_ROW_GROUPS * html_model.MAX_COLUMNS and cells >= 10 * html_model.MAX_COLUMNS
    assert "and 1,952 more keys not shown (0 of them disagree)" in text
    # Nodes 0-2 alike: one block; node 3 split rank by rank; rank 700 on its own.
    assert "nodes <code>node000</code> \u2026 <code>node002</code> (3 nodes, every rank alike)" in text
    assert ">ranks 0\u201323<span class=\"ag-n\">(24 alike)</span>" in text
    assert re.search(r'<tr class="ag-dissent"><th title="rank 25; differs from the reference config on 30 keys"', text)
    assert '<th title="rank 700; differs from the reference config on 5 keys">' in text
    assert text.count('<svg class="ag-plot"') == html.MAX_PLOTS
    assert text.count("<circle") <= html.MAX_PLOTS * 10 * 120


LONG_KEY = "4096,4096,4096,torch.float16,torch.float16,torch.float32,True,False,row_major,split_k=1,stages=auto"


@pytest.mark.slow
def test_the_pages_letters_ties_headers_axis_and_legend_in_headless_chromium(tmp_path):
    # 4 ranks: key A (a long key) 3 for BLOCK 32 and rank 3 for 64; key B a 2-2 tie (16 / 64); key C
    # all 64. Per key, the letters are the text report's (64 is b on A and a on C); on the tie nobody
    # differs; only rank 3 differs (on A); times 5.0-5.5 ms: the axis starts near 5 ms, not 0.
    chosen = {"pkg.ops.mm": {LONG_KEY: (32, 32, 32, 64)}, "pkg.ops.sum": {"8": (16, 16, 64, 64), "9": (64,) * 4}}
    for rank in range(4):
        kernels = {k: {key: _entry(blocks[rank], [5.0, 5.2, 5.5]) for key, blocks in keys.items()}
                   for k, keys in chosen.items()}
        (tmp_path / f"rec.rank{rank}.json").write_text(json.dumps(_record(rank, kernels)))
    page = tmp_path / "report.html"
    assert report.main(["show", "--format", "html", "-o", str(page), str(tmp_path / "rec")]) == 0
    dom = browse(page, "--dump-dom").stdout
    shot = tmp_path / "letters.png"
    browse(page, f"--screenshot={shot}", "--window-size=1200,1100")
    assert re.search(r'<div id="ag-errors"></div>', dom) and f"<b>mm</b> {LONG_KEY}</div>" in dom  # whole
    heads = re.findall(r'<th id="ag-k(\d+)"[^>]*title="pkg\.ops\.(\w+) \[([^\]]*)\]', dom)
    column = {(kernel, key): index for index, kernel, key in heads}
    rows = re.findall(r'<tr( class="ag-dissent")?><th title="([^"]*)">(.*?)</tr>', dom, re.S)
    assert [r[1].split(" (")[0].split(";")[0] for r in rows] == ["ranks 0\u20131", "rank 2", "rank 3"], rows
    assert [bool(r[0]) for r in rows] == [False, False, True]  # the tie on B marks nobody; rank 3 differs on A
    letters = {(label.split(" (")[0].split(";")[0], c): code for _, label, body in rows
               for c, code in re.findall(r'data-c="(\d+)"[^>]*>([a-z*])</td>', body, re.S)}
    a, b, c = column[("mm", LONG_KEY)], column[("sum", "8")], column[("sum", "9")]
    assert letters[("rank 3", a)] == "b" and letters[("rank 3", c)] == "a" and letters[("ranks 0\u20131", a)] == "a"
    assert letters[("ranks 0\u20131", b)] == "a" and letters[("rank 2", b)] == "b"  # BLOCK=16 sorts first on the tie
    text = subprocess.run([sys.executable, "-m", "autotune_guard.report", "show", str(tmp_path / "rec")],
                                        capture_output=True, text=True, env=clean_env()).stdout
    assert re.search(r"^   b rank 3 .*BLOCK=64", text.split(LONG_KEY)[1], re.M), text
    assert "ag-x" not in "".join(body for _, label, body in rows if not label.startswith("rank 3"))
    ticks = re.findall(r'class="ag-tick">([\d.]+) ms</text>', dom)
    assert ticks and all(4.9 < float(t) < 5.6 for t in ticks), ticks  # the measured range, not from 0
    assert "chose differently" not in dom  # no rank of several processes here: no legend entry for it
    assert shot.stat().st_size > 10_000


def test_a_diff_page_compares_each_run_within_itself_and_b_against_a(tmp_path):
    # Run A: 2 ranks chose BLOCK=16; run B: 3 ranks chose BLOCK=32. Pooled over both runs, 32 would be
    # the reference and A's ranks "wrong"; as in the text diff, A is compared with B, never with a pool.
    for side, block, ranks in (("a", 16, 2), ("b", 32, 3)):
        for rank in range(ranks):
            doc = _record(rank, {"pkg.ops.mm": {"8": _entry(block, [1.0, 2.0, 3.0])}})
            (tmp_path / f"{side}.rank{rank}.json").write_text(json.dumps(doc))
    out = tmp_path / "diff.html"
    assert report.main(["diff", "--format", "html", "-o", str(out), str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    text = out.read_text()
    cells = re.findall(r'<td class="(ag-p\d+)([^"]*)" data-c="\d+" title="([^"]*)"', text)
    assert len(cells) == 2, cells  # A's ranks alike: one row; B's: one row
    (a_class, a_title), (b_class, b_title) = [(extra, title) for _, extra, title in cells]
    assert "ag-x" not in a_class and "not the reference" not in a_title  # A is not wrong against a pool
    assert "ag-chg" in b_class and "changed: run A chose BLOCK=16,num_warps=4" in b_title.replace("&#x27;", "'")
    assert '<tr class="ag-dissent"' not in text and "0 same, 1 changed</b>" in text


def _many_keys_page(tmp_path, keys=40):
    """2 ranks, ``keys`` keys of long key texts; rank 1 differs on the first 3; the last key is a fallback."""
    for rank in range(2):
        log = {}
        for k in range(keys):
            block = 32 if rank == 1 and k < 3 else 16
            how = "fallback (min_cost)" if k == keys - 1 else "table"
            log[f"sm90|pkg.ops.kernel_{k % 5}|{k * 64},torch.bfloat16,torch.bfloat16,row_major"] = \
                f"BLOCK={block},num_warps=4,num_stages=3,num_ctas=1;{how}"
        doc = {"format": schema.CHOICES_FORMAT, "rank": rank, "world_size": 2, "run_id": "r", "host": "node-a",
               "digest": "d", "count": keys, "log": log, "complete": True}
        (tmp_path / f"ch.rank{rank}.json").write_text(json.dumps(doc))
    page = tmp_path / "many.html"
    assert report.main(["show", "--format", "html", "-o", str(page), str(tmp_path / "ch")]) == 0
    return page


@pytest.mark.slow
def test_forty_keys_get_numbered_headers_and_a_key_list_in_headless_chromium(tmp_path):
    page = _many_keys_page(tmp_path)
    dom = browse(page, "--dump-dom").stdout
    assert re.search(r'<div id="ag-errors"></div>', dom)
    assert '<tr class="ag-keys ag-numbered">' in dom
    heads = re.findall(r'<th id="ag-k\d+"[^>]*><span>(\d+)</span></th>', dom)
    assert heads == [str(n) for n in range(1, 41)], heads  # horizontal numbers, no vertical key text
    items = re.findall(r'<li value="(\d+)"( class="ag-dis")?><b>(kernel_\d)</b> <code>([^<]*)</code>', dom)
    assert [int(n) for n, *_ in items] == list(range(1, 41)) and sum(1 for _, dis, *_ in items if dis) == 3
    assert items[0][2:] == ("kernel_0", "0,torch.bfloat16,torch.bfloat16,row_major")  # disagreements first
    shot = tmp_path / "many.png"
    browse(page, f"--screenshot={shot}", "--window-size=1400,900")
    assert shot.stat().st_size > 10_000
    # a fallback is marked as one: hatched, said on hover and in the summary
    assert "2 fallbacks (keys the tables lacked)</b>" in dom  # one a rank
    fell = re.findall(r'<td class="ag-p\d+ ag-fb" data-c="\d+" title="([^"]*)"', dom)
    assert fell and all("a fallback: the tables lacked this key" in t for t in fell)


def test_a_few_keys_keep_their_labels_on_the_headers(tmp_path):
    text = _many_keys_page(tmp_path, keys=html.KEYS_LABELLED).read_text()
    assert 'class="ag-keys ag-numbered"' not in text and '<ol class="ag-keylist"' not in text
    assert "<b>kernel_0</b> 0,torch.bfloat16" in text
