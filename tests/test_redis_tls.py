"""Tables on a Redis server over TLS (``AUTOTUNE_TABLE_PATH=rediss://...``).

Each test starts Debian's ``redis-server`` with a TLS-only port (``--port 0 --tls-port P``) whose
certificate a throwaway CA signed (made here with ``openssl``, subjectAltName IP:127.0.0.1). The
client is told of that CA the way a user with a private CA would: ``SSL_CERT_FILE`` (which
redis-py's default SSL context, ``ssl.create_default_context()``, honours); without it the
certificate is not trusted. Jobs are one process of real Triton kernels under TRITON_INTERPRET=1
whose timers return random times, as in test_redis_store.py."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

from support import clean_env, last_json, run_python
from test_consensus_table import ADD, SCALE, key_of
from test_redis_store import ENTRIES, PINNED_RUN, PROVENANCE, RedisServer, _job_env, _need_server, _signature, \
    _store_entries

from autotune_guard.adapters.redis_tables import TIMEOUT_S
from autotune_guard.core.store_url import hide_password

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not shutil.which("openssl"), reason="openssl is missing: the tests make their "
                                 "certificates with it (apt-get install openssl)")]

TWO_KERNELS = PINNED_RUN.replace("x = torch.rand(1000)", "x = torch.rand(1000); demo.scale(x, 2.0)")
START = "import torch, kernels.demo as demo\ndemo.add(torch.rand(100), torch.rand(100))\nprint('ran')"

_OPENSSL_CONFIG = """
[req]
distinguished_name = dn
prompt = no
[dn]
CN = autotune_guard throwaway test CA
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
"""


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """{"ca", "cert", "key"}: a throwaway CA and a server certificate it signed for 127.0.0.1."""
    where = tmp_path_factory.mktemp("tls")
    (where / "openssl.cnf").write_text(_OPENSSL_CONFIG)
    made = {"ca": where / "ca.crt", "cert": where / "server.crt", "key": where / "server.key"}
    ca, ca_key, csr, cnf = made["ca"], where / "ca.key", where / "server.csr", where / "openssl.cnf"
    steps = [
        ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", ca, "-days", "2",
         "-config", cnf, "-extensions", "ca"],
        ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", made["key"], "-out", csr, "-config", cnf,
         "-subj", "/CN=127.0.0.1"],
        ["x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-out", made["cert"],
         "-days", "2", "-extfile", cnf, "-extensions", "server"],
    ]
    for step in steps:
        proc = subprocess.run(["openssl", *map(str, step)], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"openssl {step[0]}: {proc.stderr}"
    return {name: str(path) for name, path in made.items()}


class TlsRedisServer(RedisServer):
    """One redis-server on 127.0.0.1 that speaks TLS only (no plain port)."""

    def __init__(self, directory, certs, password=None):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.password, self.certs = password, certs
        command = [shutil.which("redis-server"), "--port", "0", "--tls-port", str(self.port), "--bind", "127.0.0.1",
                   "--tls-cert-file", certs["cert"], "--tls-key-file", certs["key"], "--tls-ca-cert-file", certs["ca"],
                   "--tls-auth-clients", "no", "--save", "", "--appendonly", "no", "--dir", str(directory)]
        command += ["--requirepass", password] if password else []
        self.log = directory / "redis.log"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        self.client = self._connect()

    def url(self, db=0, password=None):
        return "rediss" + super().url(db, password)[len("redis"):]

    def _connect(self):
        import redis

        client = redis.Redis(host="127.0.0.1", port=self.port, password=self.password, ssl=True,
                             ssl_ca_certs=self.certs["ca"])
        for _ in range(100):
            if self.proc.poll() is not None:
                said = self.log.read_text()
                if "tls" in said.lower():  # "Bad directive", or TLS "not supported by this build"
                    pytest.skip(f"this redis-server was built without TLS: {said.strip()[-300:]}")
                raise AssertionError(f"redis-server (TLS) exited at start: {said}")
            try:
                client.ping()
                return client
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        raise AssertionError(f"redis-server (TLS) on port {self.port} did not start: {self.log.read_text()}")


@pytest.fixture
def servers(tmp_path, certs):
    """``servers(tls=True, password=None)`` starts a server; every one started is stopped after the test."""
    _need_server()
    started = []

    def start(tls=True, password=None):
        directory = tmp_path / f"redis{len(started)}"
        directory.mkdir()
        started.append(TlsRedisServer(directory, certs, password) if tls else RedisServer(directory, password))
        return started[-1]

    yield start
    for server in started:
        server.kill()


def _env(ca, base=None, **settings):
    """``base`` (``clean_env()``) and ``settings`` with the CA's certificate in SSL_CERT_FILE, or (ca None)
    no private CA at all."""
    env = {**(clean_env() if base is None else base), **settings}
    for name in ("SSL_CERT_FILE", "SSL_CERT_DIR"):
        env.pop(name, None)
    if ca:
        env["SSL_CERT_FILE"] = ca
    return env


def _timed(code, env):
    began = time.monotonic()
    proc = run_python(code, env=env, check=False, timeout=240)
    return proc, time.monotonic() - began


def test_a_job_over_tls_adds_its_winners_and_the_next_runs_time_nothing(servers, certs):
    server = servers()
    url = server.url()
    first = run_python(TWO_KERNELS, env=_env(certs["ca"], _job_env(url)))
    tuned = last_json(first.stdout)
    assert tuned["timer_calls"] > 0, first.stderr
    held = _store_entries(server.client)  # read over TLS too: the server has no plain port
    assert set(held) == {(ADD, key_of("add", 1000)), (SCALE, key_of("scale", 1000))}, first.stderr
    assert all(v["added"]["run_id"] and v["added"]["rank"] == 0 for v in held.values()), held
    assert sorted(k.decode() for k in server.client.hkeys(PROVENANCE)) == [ADD, SCALE]
    for (kernel, key), value in held.items():  # the store holds what the first run chose
        assert tuned["log"][f"interpret|{kernel}|{key}"].rpartition(";")[0] == _signature(value["entry"])
    # The same command again, then a pinned one: the store's entries, 0 timer calls, nothing added.
    for mode in ("consensus", "pinned"):
        again = run_python(TWO_KERNELS, env=_env(certs["ca"], _job_env(url), AUTOTUNE_MODE=mode))
        result = last_json(again.stdout)
        assert result["timer_calls"] == 0, (mode, again.stderr)
        assert {k: v.rpartition(";")[0] for k, v in result["log"].items()} == \
            {k: v.rpartition(";")[0] for k, v in tuned["log"].items()}, (mode, result["log"])
        # Pinned from the store (a job of one process pins a table's entry under consensus too), no fallbacks.
        assert {v.rpartition(";")[2] for v in result["log"].values()} == {"table"}, (mode, result["log"])
        assert "made 2 autotune choices" in again.stderr and "fallbacks" not in again.stderr, again.stderr
    assert _store_entries(server.client) == held


def test_an_untrusted_certificate_fails_the_start_naming_the_url_and_why_unless_a_local_fallback(servers):
    server = servers(password="tls-secret")
    url = server.url()
    proc = run_python(START, env=_env(None, AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=url), check=False)
    assert proc.returncode != 0 and "ran" not in proc.stdout
    said = [line for line in proc.stderr.splitlines() if "autotune_guard: error:" in line]
    assert len(said) == 1 and f"the table store {hide_password(url)} does not answer" in said[0], proc.stderr
    assert "certificate verify failed" in said[0]  # the client's words, then what they mean
    assert "TLS certificate failed verification" in said[0] and "SSL_CERT_FILE=" in said[0], said[0]
    assert "tls-secret" not in proc.stderr + proc.stdout and "Traceback" not in proc.stderr
    # The CA trusted, but the certificate names 127.0.0.1 only: the host is checked too.
    by_name = f"rediss://localhost:{server.port}/0"
    proc = run_python(START, env=_env(server.certs["ca"], AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=by_name),
                      check=False)
    assert proc.returncode != 0 and f"the table store {by_name} does not answer" in proc.stderr, proc.stderr
    assert "mismatch" in proc.stderr and "TLS certificate failed verification" in proc.stderr, proc.stderr
    # AUTOTUNE_TABLE_STORE_DOWN=local: the job runs by the local rules, said once.
    proc = run_python(START, env=_env(None, AUTOTUNE_MODE="pinned", AUTOTUNE_TABLE_PATH=url,
                                      AUTOTUNE_TABLE_STORE_DOWN="local"))
    assert proc.stdout.strip().endswith("ran")
    said = [line for line in proc.stderr.splitlines() if f"table store {hide_password(url)} does not answer" in line]
    assert len(said) == 1 and "certificate failed verification" in said[0] and "local rules" in said[0], proc.stderr
    assert "tls-secret" not in proc.stderr


def test_a_scheme_that_does_not_match_the_port_is_a_clear_error_within_the_timeout(servers, certs):
    tls, plain = servers(), servers(tls=False)
    closed = servers(tls=False)
    closed.kill()
    env = dict(AUTOTUNE_MODE="pinned")
    # The same start failing at once (a closed port): what the process costs without any wait.
    refused, baseline = _timed(START, _env(certs["ca"], AUTOTUNE_TABLE_PATH=closed.url(), **env))
    assert refused.returncode != 0 and "Connection refused" in refused.stderr, refused.stderr
    cases = [(f"redis://127.0.0.1:{tls.port}/0", "rediss:// for TLS"),  # plain words to a TLS-only port
             (f"rediss://127.0.0.1:{plain.port}/0", "the server must speak TLS on that port")]  # TLS to a plain one
    for url, hint in cases:
        proc, took = _timed(START, _env(certs["ca"], AUTOTUNE_TABLE_PATH=url, **env))
        assert proc.returncode != 0 and "ran" not in proc.stdout
        said = [line for line in proc.stderr.splitlines() if "autotune_guard: error:" in line]
        assert len(said) == 1 and f"the table store {url} does not answer" in said[0] and hint in said[0], \
            proc.stderr
        # Bounded by one TIMEOUT_S (the client's own retries would make it 10 or more).
        assert took < baseline + TIMEOUT_S + 15, (url, took, baseline)


def test_report_show_reads_a_tls_store_with_the_ca_in_ssl_cert_file(servers, certs):
    server = servers()
    url = server.url()
    good = {"entry": {"kwargs": {"BLOCK": 128}, "num_warps": 2}, "added": {"run_id": "r1", "rank": 0}}
    server.client.hset(ENTRIES, json.dumps([ADD, key_of("add", 1000)]), json.dumps(good))

    def report(*args, ca):
        return subprocess.run([sys.executable, "-m", "autotune_guard.report", *args], capture_output=True,
                              text=True, env=_env(ca), timeout=120)

    shown = report("show", url, ca=certs["ca"])
    assert shown.returncode == 0, shown.stderr
    assert ADD in shown.stdout and f"{url} interpret.json" in shown.stdout and "r1" in shown.stdout, shown.stdout
    untrusted = report("show", url, ca=None)
    assert untrusted.returncode == 2 and len(untrusted.stderr.strip().splitlines()) == 1, untrusted.stderr
    assert f"{url}: the table store does not answer" in untrusted.stderr and "SSL_CERT_FILE" in untrusted.stderr
