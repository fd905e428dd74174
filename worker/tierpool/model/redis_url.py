"""Redis URLs with credentials in them, read safely. Pure.

Passwords are often base64, so they hold ``/``, ``?``, ``+`` or ``=``: ``redis://:ab/c?d@host:6379/0`` is what
users write, not the percent-encoded form. urllib would end the authority at the first ``/`` or ``?`` and read
part of the password as the host or the port (redis-py then raised ``Port could not be cast to integer value as
'<the password>'``). Here the credentials are everything up to the last ``@`` (a host never holds one), and only
the rest goes through ``urllib.parse`` (an ``@`` in a query string is the one exception, see ``split_url``). No
error message ever contains the URL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

SCHEMES = ("redis", "rediss", "unix")
SECRET_QUERY_KEYS = frozenset({"password", "pass", "passwd", "auth"})
"""Query arguments redacted in logs; redis-py itself reads ``password``."""


class RedisUrlError(ValueError):
    """A Redis URL that cannot be read. The message names the part at fault and never repeats the URL."""


@dataclass(frozen=True)
class RedisUrl:
    scheme: str
    userinfo: str | None
    """What stood before the last ``@``, as written (None: no ``@``)."""
    address: str
    """Host, port, database and query: the URL after the credentials."""

    @property
    def username(self) -> str | None:
        if not self.userinfo:
            return None
        user = self.userinfo.partition(":")[0]
        return unquote(user) or None

    @property
    def password(self) -> str | None:
        """The password in the credentials, else a ``password`` query argument (redis-py reads both)."""
        if self.userinfo and ":" in self.userinfo:
            secret = unquote(self.userinfo.partition(":")[2])
            if secret:
                return secret
        query = self.address.partition("?")[2]
        return dict(parse_qsl(query)).get("password") or None

    def without_credentials(self) -> str:
        """The URL with no user, no password and no ``password`` query argument."""
        base, sep, query = self.address.partition("?")
        kept = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k != "password"]
        return f"{self.scheme}://{base}" + (f"?{urlencode(kept)}" if sep and kept else "")

    def without_password(self) -> str:
        """The URL with its password left out; the user name stays."""
        bare = self.without_credentials()
        user = self.userinfo.partition(":")[0] if self.userinfo else ""
        return bare.replace("://", f"://{user}@", 1) if user else bare

    def redacted(self) -> str:
        """The URL for logs: every password replaced by ``***`` (``user:***@``, ``***@`` for a lone secret,
        ``password=***`` and the like in the query)."""
        base, sep, query = self.address.partition("?")
        if self.userinfo is not None:
            user = self.userinfo.partition(":")[0]
            base = f"{user}:***@{base}" if ":" in self.userinfo else f"***@{base}"
        pairs = []
        for pair in query.split("&") if sep else []:
            name, eq, _ = pair.partition("=")
            pairs.append(f"{name}=***" if eq and name.lower() in SECRET_QUERY_KEYS else pair)
        return f"{self.scheme}://{base}{sep}{'&'.join(pairs)}"


def split_url(url: str) -> RedisUrl:
    """Split ``url`` into scheme, credentials and address without validating the address.

    The credentials are everything up to the last ``@``, whatever they hold (raw ``/``, ``?``, ``#``, ``@``,
    quotes, spaces), since a host never holds an ``@``. One exception: when the URL up to its first ``?`` holds
    no ``@`` and reads as a whole address (a host with an optional numeric port and database, or a socket path),
    and what follows the ``?`` is ``name=value`` pairs, an ``@`` after it is part of the query
    (``redis://h:6379/0?client_name=a@b`` has no credentials). A password that reads that way after its user name
    (``redis://app:6379?a=b@host``) is ambiguous and must be percent-encoded.
    """
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in SCHEMES:
        raise RedisUrlError("a Redis URL starts with redis://, rediss:// or unix://")
    if _has_query_holding_at(scheme.lower(), rest):
        return RedisUrl(scheme.lower(), None, rest)
    userinfo, at, address = rest.rpartition("@")
    return RedisUrl(scheme.lower(), userinfo if at else None, address)


_HOST = r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._~-]+)"
_NETWORK_ADDRESS = re.compile(_HOST + r"(?::\d+)?(?:/\d*)?")
_SOCKET_ADDRESS = re.compile(r"/[^?@]*")
_QUERY_PAIRS = re.compile(r"[A-Za-z_]\w*=[^&]*(?:&[A-Za-z_]\w*=[^&]*)*")


def reads_as_address(scheme: str, address: str) -> bool:
    """Whether ``address`` (a URL after its credentials) is a whole address: a host, an optional numeric port and
    database (a socket path for ``unix``), then optionally a query of ``name=value`` pairs."""
    base, sep, query = address.partition("?")
    pattern = _SOCKET_ADDRESS if scheme == "unix" else _NETWORK_ADDRESS
    return pattern.fullmatch(base) is not None and (not sep or _QUERY_PAIRS.fullmatch(query) is not None)


def _has_query_holding_at(scheme: str, rest: str) -> bool:
    base, sep, query = rest.partition("?")
    return bool(sep) and "@" in query and "@" not in base and reads_as_address(scheme, rest)


def parse_redis_url(url: str) -> RedisUrl:
    """``url`` split and checked: a host (or a socket path), and a numeric port and database when given."""
    parsed = split_url(url)
    if parsed.scheme == "unix":
        if not parsed.address.partition("?")[0]:
            raise RedisUrlError("a unix:// Redis URL needs a socket path")
        return parsed
    try:
        address = urlsplit(f"{parsed.scheme}://{parsed.address}")
        port = address.port
    except ValueError:
        raise RedisUrlError("the Redis URL's port is not a number from 0 to 65535") from None
    if not address.hostname:
        raise RedisUrlError("the Redis URL has no host")
    database = address.path.strip("/")
    if database and not database.isdigit():
        raise RedisUrlError("the Redis URL's database (its path) is not a number")
    del port
    return parsed


URL_START = re.compile(r"\b(?:rediss?|unix)://", re.IGNORECASE)
URL_EXTENT = re.compile(r"[^\s'\"<>]*")
"""A URL in free text (a log line, a dumped body) as far as the first space, quote or angle bracket."""
HOST_AFTER_AT = re.compile("@" + _HOST + r"(?::\d+)?(?![\w.~:@\[-])")
"""An ``@`` that stands before a host (and port) which ends there: the end of a URL's credentials."""
SOCKET_AFTER_AT = re.compile(r"@(?=/)")
"""The same for a ``unix://`` URL: an ``@`` before its socket path."""


def redact_urls_in(text: str) -> str:
    """``text`` with the password of every Redis URL in it replaced by ``***``.

    A URL ends at the first space, quote or angle bracket when what stands before reads as a whole URL
    (``reads_as_address``). When it does not (a password holding a space or a quote cut it short), its
    credentials run to the last ``@`` before a host on the same line: more is hidden (an e-mail address further on
    the line takes the text up to it along), never less. A password after a user name that begins with what reads
    as a port (``redis://app:6379 rest@host``), or a lone secret that holds a space (``redis://two words@host``), is
    read as a URL without credentials.
    """
    out: list[str] = []
    done = 0
    for start in URL_START.finditer(text):
        if start.start() < done:
            continue  # inside the credentials of the URL before
        end, redacted = _redact_url_at(text, start.start(), start.end())
        out.append(text[done : start.start()] + redacted)
        done = end
    return "".join(out) + text[done:]


def _redact_url_at(text: str, begin: int, rest: int) -> tuple[int, str]:
    """Where the URL that starts at ``begin`` (its credentials at ``rest``) ends, and its redacted form."""
    scheme = text[begin : rest - 3].lower()
    extent = URL_EXTENT.match(text, rest)
    end = extent.end() if extent else rest
    whole = split_url(text[begin:end])
    if reads_as_address(scheme, whole.address):
        return end, whole.redacted()
    line_end = min((i for i in (text.find("\n", rest), text.find("\r", rest)) if i >= 0), default=len(text))
    ends = SOCKET_AFTER_AT if scheme == "unix" else HOST_AFTER_AT
    found = list(ends.finditer(text, rest, line_end))
    if not found:
        return end, whole.redacted()
    last_at = found[-1]
    tail = URL_EXTENT.match(text, last_at.end())
    end = tail.end() if tail else last_at.end()
    address = text[last_at.start() + 1 : end]
    return end, RedisUrl(scheme, text[rest : last_at.start()], address).redacted()
