"""Target URLs: one string names a backend, its location and its client options.

``redis://:secret@127.0.0.1:6379/0?client=redis-py`` parses into a :class:`Target`
whose ``params`` hold the query string. Passwords never leave this module in clear:
:func:`redact` (and ``Target.redacted``) is what every printer and results file uses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, quote, unquote, urlencode

from .errors import SpecError

_SECRET_PARAMS = re.compile(r"(password|passwd|secret|token|key_secret|aws_secret_access_key|credentials)", re.I)


@dataclass(frozen=True)
class Target:
    """A parsed target URL. ``url`` is the user's string, unredacted (keep it private)."""

    url: str = field(repr=False)
    scheme: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    hosts: tuple[tuple[str, int | None], ...] = ()
    path: str = ""
    params: dict[str, str] = field(default_factory=dict)

    @property
    def redacted(self) -> str:
        return redact(self.url)

    @property
    def host(self) -> str:
        return self.hosts[0][0] if self.hosts else "127.0.0.1"

    def port(self, default: int) -> int:
        if self.hosts and self.hosts[0][1] is not None:
            return self.hosts[0][1]  # type: ignore[return-value]
        return default

    def param(self, name: str, default: str | None = None) -> str | None:
        return self.params.get(name, default)

    def int_param(self, name: str, default: int | None = None) -> int | None:
        raw = self.params.get(name)
        if raw is None:
            return default
        try:
            return int(raw)
        except ValueError:
            raise SpecError(f"{self.redacted}: parameter {name}={raw!r} must be an integer") from None

    def float_param(self, name: str, default: float | None = None) -> float | None:
        raw = self.params.get(name)
        if raw is None:
            return default
        try:
            return float(raw)
        except ValueError:
            raise SpecError(f"{self.redacted}: parameter {name}={raw!r} must be a number") from None

    def bool_param(self, name: str, default: bool = False) -> bool:
        raw = self.params.get(name)
        if raw is None:
            return default
        if raw.lower() in ("1", "true", "yes", "on"):
            return True
        if raw.lower() in ("0", "false", "no", "off"):
            return False
        raise SpecError(f"{self.redacted}: parameter {name}={raw!r} must be true or false")


def parse_target(url: str) -> Target:
    """Parse a target URL; ``spawn:redis`` style URLs keep their name in ``path``."""
    url = url.strip()
    if not url:
        raise SpecError("empty target URL")
    if url.startswith("spawn:"):
        name, _, query = url[len("spawn:"):].partition("?")
        return Target(url=url, scheme="spawn", path=name, params=dict(parse_qsl(query, keep_blank_values=True)))
    if "://" not in url:
        raise SpecError(f"target {redact(url)!r} is not a URL (expected e.g. redis://127.0.0.1:6379 or spawn:redis)")
    scheme, rest = url.split("://", 1)
    scheme = scheme.lower()
    rest, _, query = rest.partition("?")  # first: query values may hold URLs themselves
    netloc, slash, tail = rest.partition("/")
    path = slash + tail
    username = password = None
    if "@" in netloc:
        userinfo, netloc = netloc.rsplit("@", 1)
        user, sep, pw = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(pw) if sep else None
    hosts = []
    for part in filter(None, netloc.split(",")):
        host, port = _split_host_port(part, url)
        hosts.append((host, port))
    return Target(
        url=url,
        scheme=scheme,
        username=username,
        password=password,
        hosts=tuple(hosts),
        path=unquote(path),
        params=dict(parse_qsl(query, keep_blank_values=True)),
    )


def with_params(target: Target, params: dict[str, object]) -> Target:
    """``target`` with its query parameters replaced by ``params`` (values may be URLs)."""
    query = urlencode({k: str(v) for k, v in params.items()}, safe=":/,")
    return parse_target(target.url.split("?", 1)[0] + (f"?{query}" if query else ""))


def _split_host_port(part: str, url: str) -> tuple[str, int | None]:
    if part.startswith("["):  # [::1]:6379
        host, _, port = part[1:].partition("]")
        port = port.lstrip(":")
    else:
        host, _, port = part.partition(":")
    if not port:
        return host, None
    try:
        return host, int(port)
    except ValueError:
        raise SpecError(f"target {redact(url)!r}: port {port!r} is not a number") from None


def redact(url: str) -> str:
    """Hide passwords in a URL's userinfo and in secret-looking query parameters (nested URLs too)."""
    if "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    rest, sep, query = rest.partition("?")
    netloc, slash, path = rest.partition("/")
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        user, colon, _ = userinfo.partition(":")
        netloc = f"{user}:***@{host}" if colon else f"{user}@{host}"
    parts = []
    for key, value in parse_qsl(query, keep_blank_values=True):
        if _SECRET_PARAMS.search(key):
            value = "***"
        elif "://" in value:
            value = redact(value)
        parts.append(f"{key}={quote(value, safe='/:,.-_*@')}")
    return f"{scheme}://{netloc}{slash}{path}" + (f"?{'&'.join(parts)}" if sep else "")
