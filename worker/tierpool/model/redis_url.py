"""Redis URLs with credentials in them, read safely. Pure.

Passwords are often base64, so they hold ``/``, ``?``, ``+`` or ``=``: ``redis://:ab/c?d@host:6379/0`` is what
users write, not the percent-encoded form. urllib would end the authority at the first ``/`` or ``?`` and read
part of the password as the host or the port (redis-py then raised ``Port could not be cast to integer value as
'<the password>'``). Here the credentials are everything up to the last ``@`` (a host never holds one), and only
the rest goes through ``urllib.parse``. No error message ever contains the URL.
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
    """Split ``url`` into scheme, credentials and address without validating the address."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in SCHEMES:
        raise RedisUrlError("a Redis URL starts with redis://, rediss:// or unix://")
    userinfo, at, address = rest.rpartition("@")
    return RedisUrl(scheme.lower(), userinfo if at else None, address)


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


URL_IN_TEXT = re.compile(r"\b(?:rediss?|unix)://[^\s'\"<>]+")
"""A Redis URL inside free text (a log line, a dumped body): up to a space, a quote or an angle bracket."""


def redact_urls_in(text: str) -> str:
    """``text`` with the password of every Redis URL in it replaced by ``***``."""

    def redacted(found: re.Match[str]) -> str:
        try:
            return split_url(found.group(0)).redacted()
        except RedisUrlError:
            return found.group(0)

    return URL_IN_TEXT.sub(redacted, text)
