"""What a table store's requests meet, as exceptions (``client.Store`` raises them), the ACL grants
a user needs, and what the client's words mean when TLS is the cause. No ``redis`` here."""


class StoreDown(Exception):
    """The store did not answer (refused, timed out, wrong password): the words say which."""


class StoreRefused(StoreDown):
    """The store answered with an error (a key of another type, a script refused): it is up."""


class StoreNoPermission(StoreRefused):
    """The server's ACL refused this URL's user a command (NOPERM): up, and the user can be granted it."""


class StoreTooBig(StoreRefused):
    """A key holds more fields than its bound: the store is up, that key is not read (the words name it)."""


class StoreBusy(Exception):
    """A kernel's write met another writer's ``TRIES`` times: the store is up, the write not made."""


# What a user needs (Redis 7 checks the commands a script runs against the caller's ACL too).
READ_GRANTS = "+eval +hscan +hget +exists"
WRITE_GRANTS = "+eval +hscan +hget +hset +hsetnx +hdel +sadd +exists +watch +unwatch +multi +exec +discard"
LIST_GRANTS = "+scan +sscan"  # the report's, to find the archs and kernels a store holds


def tls_hint(exc, tls: bool) -> str:
    """What the client's words mean when TLS is the cause: an untrusted certificate, or a URL
    whose scheme does not match what the port speaks."""
    text = str(exc)
    if "certificate verify failed" in text.lower():
        return ("; the server's TLS certificate failed verification: it must be signed by a CA this machine "
                "trusts and name the URL's host (a private CA: SSL_CERT_FILE=<its certificate, PEM>)")
    if tls and "Timeout connecting" in text:
        return "; with rediss:// the server must speak TLS on that port (redis:// for a plain one)"
    if not tls and ("reset by peer" in text or "closed by server" in text):
        return "; a server that speaks only TLS on that port ends plain connections: rediss:// for TLS"
    return ""
