"""Target URLs: one string names a backend, its location and its client options.

``redis://:secret@127.0.0.1:6379/0?client=redis-py`` parses into a :class:`Target`
whose ``params`` hold the query string. Passwords never leave this module in clear:
:func:`redact` (and ``Target.redacted``) is what every printer and results file uses.

Redaction works on text, not on a successful parse: a URL too broken to parse (a
password holding an unencoded ``/`` or ``?``, a NUL, a newline) is still shown with
its secrets hidden and on one line, because the error about it is where it gets
printed. Every secret seen while parsing or redacting is also remembered, so
:func:`redact_text` can hide it in text we did not write (a client library's
exception that echoes a DSN or a password).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, unquote_plus, urlencode, urlsplit

from .errors import SpecError
from .schemes import scheme, sentinel_parts, split_spawn_params, unix_socket
from .textfile import one_line

# Query parameter (and JSON option) names whose values are secrets: password, passwd,
# PASSWORD, sasl_password, secret, client_secret, aws_secret_access_key, token,
# aws_session_token, api_key, access_key, auth, credentials, sas, ... — but not the
# identifiers beside them (aws_access_key_id, key_prefix, KEY_FUNCTION, secret_name).
_SECRET_NAME = re.compile(
    r"""(?ix)
      pass(word|wd|phrase)
    | (^|[_.\-])(pass|pwd)$
    | secret(?!_?(name|id|arn)$)
    | token | credential | signature$ | (^|[_.\-])sig$
    | (^|[_.\-])auth$ | auth_?(key|string)$
    | (api|access|private|secret|account|master|encryption|signing|customer|shared|sas)[_\-]?key$
    | (^|[_.\-])key$ | (^|[_.\-])sas$
    """
)
MASK = "***"
MAX_SHOWN = 240  # characters of a URL inside a message; longer ones are cut with an ellipsis
_MAX_DEPTH = 6  # nested URLs (twolevel inside django inside ...) deeper than this are hidden whole
_MIN_REMEMBERED = 4  # shorter secrets would blank out ordinary words; they are still masked in URLs
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
_URL_LIST = re.compile(r",(?=[A-Za-z][A-Za-z0-9+.\-]{0,30}://)")
_PORT = re.compile(r"[0-9]{1,5}")
# host[:port][,host[:port]...] up to the end of the authority (IPv6 in brackets)
_HOSTS = re.compile(r"(\[[0-9A-Za-z:.%]*\]|[\w.\-~%]*)(:[0-9]+)?(,(\[[0-9A-Za-z:.%]*\]|[\w.\-~%]*)(:[0-9]+)?)*")
_SHOWN_RAW = ":/,@*?=.-_~!$()[]{};\"'"  # left unencoded in a redacted query value (readability)
# Secrets seen, oldest first: a run has a handful; the cap keeps a process that parses
# thousands of URLs (a fuzz, a long sweep) from paying for all of them in every message.
_REMEMBERED: dict[str, None] = {}
_MAX_REMEMBERED = 256
# Words our messages and client errors use: a password spelled like one stays masked in
# URLs, but is not hunted for in free text, where it is far likelier to be the word.
_WORDS = frozenset(("password", "passwd", "secret", "token", "default", "changeme", "admin", "root", "test",
                    "guest", "redis", "memcached", "postgres", "mysql", "cachemark"))


@dataclass(frozen=True)
class Target:
    """A parsed target URL. ``url`` is the user's string, unredacted (keep it private)."""

    url: str = field(repr=False)
    scheme: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    hosts: tuple[tuple[str, int | None], ...] = ()
    path: str = ""
    params: dict[str, str] = field(default_factory=dict, repr=False)  # may hold secrets

    def __repr__(self) -> str:
        return f"Target({self.redacted!r})"

    @property
    def redacted(self) -> str:
        """The URL for a message: secrets hidden, on one line, absurd lengths cut."""
        return shown(self.url)

    @property
    def redacted_whole(self) -> str:
        """The URL for a results file: secrets hidden, on one line, never cut."""
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

    def endpoint(self) -> Endpoint:
        """Where the server is and how to log in to it, with the scheme's defaults filled in.

        The one way a command reaches a server or names one: host and port (the row's default
        port when the URL gives none), the database, TLS and its ``ssl_*`` options, the
        credentials, and ``display`` (no credentials) for messages.
        """
        row = scheme(self.scheme, self.redacted)
        port = row.default_port
        hosts = tuple((host or "127.0.0.1", given if given is not None else port) for host, given in self.hosts)
        socket = unix_socket(self) if row.unix else None
        if row.failover_grace is not None:
            sentinels, _, number = sentinel_parts(self)
            hosts, db = tuple(sentinels), str(number)
        elif row.unix:
            hosts, db = (), self.param("db", "") or ""
        elif row.embedded is not None:
            hosts, db = (), ""
        else:
            hosts, db = hosts or (("127.0.0.1", port),), self.path.strip("/")
        tls = row.tls or ("tls" in row.params and self.bool_param("tls"))
        host, first_port = hosts[0] if hosts else ("", None)
        if socket is not None:
            display = f"unix:{socket}"
        else:
            display = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" if p is not None else h for h, p in hosts)
        return Endpoint(scheme=self.scheme, host=host, port=first_port, hosts=hosts, socket=socket, db=db, tls=tls,
                        tls_options={k: v for k, v in self.params.items() if k.startswith("ssl_")},
                        username=self.username, password=self.password, display=display, redacted=self.redacted)

    def _bad_param(self, name: str, raw: str, expected: str) -> SpecError:
        value = MASK if _SECRET_NAME.search(name) else one_line(repr(raw), 60)
        return SpecError(f"{self.redacted}: parameter {one_line(name, 60)}={value} must be {expected}")

    def int_param(self, name: str, default: int | None = None) -> int | None:
        raw = self.params.get(name)
        if raw is None:
            return default
        try:
            return int(raw)
        except ValueError:
            raise self._bad_param(name, raw, "an integer") from None

    def float_param(self, name: str, default: float | None = None) -> float | None:
        raw = self.params.get(name)
        if raw is None:
            return default
        try:
            return float(raw)
        except ValueError:
            raise self._bad_param(name, raw, "a number") from None

    def bool_param(self, name: str, default: bool = False) -> bool:
        raw = self.params.get(name)
        if raw is None:
            return default
        if raw.lower() in ("1", "true", "yes", "on"):
            return True
        if raw.lower() in ("0", "false", "no", "off"):
            return False
        raise self._bad_param(name, raw, "true or false")


@dataclass(frozen=True)
class Endpoint:
    """A server as a client needs it: address, database, TLS and credentials (from :meth:`Target.endpoint`).

    Clients are built from these fields, never from a URL re-assembled by hand, so a default
    port, a Unix socket or a TLS option means the same to every command.
    """

    scheme: str
    host: str  # the first server's host ("" for a Unix socket or an embedded store)
    port: int | None  # the first server's port, the row's default when the URL gives none
    hosts: tuple[tuple[str, int | None], ...]  # every server (a pool, a cluster's seeds, the Sentinels)
    socket: str | None  # a Unix socket's path (``redis+unix:///run/redis.sock``)
    db: str  # Redis: the database number ("" for the default); SQL: the database name
    tls: bool
    tls_options: dict[str, str] = field(repr=False)  # the URL's ssl_* parameters (CA, client cert, verification)
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    display: str = ""  # "host:port" or "unix:/path": where, without credentials
    redacted: str = ""  # the target's URL as messages show it

    def __repr__(self) -> str:
        return f"Endpoint({self.redacted!r})"

    @property
    def address(self) -> tuple[str, int] | str:
        """What ``socket.create_connection`` (a tuple) or an ``AF_UNIX`` socket (a path) connects to."""
        return self.socket if self.socket is not None else (self.host, self.port or 0)

    def db_number(self) -> int:
        """A Redis database number: 0 when none is given; one line when it is no number."""
        if not self.db:
            return 0
        if not self.db.isdigit():
            raise SpecError(f"{self.redacted}: database {self.db!r} must be a number")
        return int(self.db)


def split_query(text: str) -> tuple[str, dict[str, str]]:
    """``head?a=1&b=`` → (``head``, {a: 1, b: ""}): a query string read as target URLs' are.

    For strings that are no target but take parameters the same way (``--cluster local:4?agents=2``,
    an origin's ``fixed:10ms?pool=4``), so every ``?…`` in cachemark decodes alike.
    """
    head, _, query = text.partition("?")
    pairs = parse_qsl(query, keep_blank_values=True)
    names = [name for name, _ in pairs]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:  # last-wins would silently drop one of the two values the user gave
        raise SpecError(f"{shown(redact(text))!r}: parameter {twice[0]!r} is given twice; give it once")
    return head, dict(pairs)


def names_a_target(text: str) -> bool:
    """Whether ``text`` is a target (``spawn:…`` or a URL), not a label, path or module name: the
    one test every command uses to tell them apart (a nested ``?session=`` value, a CLI source).

    >>> names_a_target("redis://127.0.0.1:6379"), names_a_target("spawn:memcached"), names_a_target("redis")
    (True, True, False)
    """
    return text.startswith("spawn:") or "://" in text


def parse_target(url: str) -> Target:
    """Parse a target URL; ``spawn:redis`` style URLs keep their name in ``path``. A password is
    kept for connecting and masked wherever the target is shown:

    >>> target = parse_target("redis://:s3cret@127.0.0.1:6379/0?client=engine")
    >>> target.scheme, target.hosts, target.params["client"]
    ('redis', (('127.0.0.1', 6379),), 'engine')
    >>> target
    Target('redis://:***@127.0.0.1:6379/0?client=engine')"""
    url = url.strip()
    if not url:
        raise SpecError("empty target URL")
    _redact(url, 0)  # remember its secrets before anything can echo them
    if url.startswith("spawn:"):
        name, params = split_query(url[len("spawn:"):])
        return Target(url=url, scheme="spawn", path=name, params=params)
    if "://" not in url:
        raise SpecError(f"target {shown(url)!r} is not a URL (expected e.g. redis://127.0.0.1:6379 or spawn:redis)")
    try:  # backends hand the URL to urllib's urlsplit, which refuses unbalanced or non-IPv6 brackets
        urlsplit(url)
    except ValueError:
        raise SpecError(f"target {shown(url)!r}: '[' and ']' may only enclose an IPv6 host, e.g. "
                        "redis://[::1]:6379 (%-encode them elsewhere: %5B, %5D)") from None
    scheme, rest = url.split("://", 1)
    scheme = scheme.lower()
    userinfo, rest, in_authority = _split_userinfo(rest)
    if userinfo is not None and not in_authority:
        raise SpecError(
            f"target {shown(url)!r}: the password holds an unencoded '/', '?' or '#'; "
            "%-encode it (/ as %2F, ? as %3F, # as %23, @ as %40)"
        )
    rest, params = split_query(rest)  # first: query values may hold URLs themselves
    netloc, slash, tail = rest.partition("/")
    path = slash + tail
    username = password = None
    if userinfo is not None:
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
        params=params,
    )


def with_params(target: Target, params: dict[str, object]) -> Target:
    """``target`` with its query parameters replaced by ``params`` (values may be URLs)."""
    query = urlencode({k: str(v) for k, v in params.items()}, safe=":/,")
    return parse_target(target.url.split("?", 1)[0] + (f"?{query}" if query else ""))


def rebuilt(target: Target, *, scheme: str | None = None, hosts: Sequence[tuple[str, int | None]] | None = None,
            path: str | None = None) -> Target:
    """``target`` with its scheme, hosts or path replaced; its user, password and query kept as given:
    the one place a target URL is put back together (a network proxy in front of each host, the
    primary a Sentinel names).

    >>> rebuilt(parse_target("redis://:pw@10.0.0.5:6379/0?client=engine"), hosts=[("::1", 7001)]).url
    'redis://:pw@[::1]:7001/0?client=engine'"""
    userinfo = ""
    if target.username is not None or target.password is not None:
        userinfo = quote(target.username or "", safe="")
        if target.password is not None:
            userinfo += ":" + quote(target.password, safe="")
        userinfo += "@"
    netloc = ",".join((f"[{h}]" if ":" in h else h) + (f":{p}" if p is not None else "")
                      for h, p in (target.hosts if hosts is None else hosts))
    query = target.url.partition("?")[2]  # as given: its values may be URLs, encoded as the user wrote them
    url = f"{scheme or target.scheme}://{userinfo}{netloc}{quote(target.path if path is None else path, safe='/')}"
    return parse_target(url + (f"?{query}" if query else ""))


def _split_host_port(part: str, url: str) -> tuple[str, int | None]:
    if part.startswith("["):  # [::1]:6379
        host, _, port = part[1:].partition("]")
        port = port.lstrip(":")
    else:
        host, _, port = part.partition(":")
        _check_host_name(host, url)
    if not port:
        return host, None
    # The text after ':' is not echoed: in "redis://:pa/ss@h" it is a piece of a password.
    if not _PORT.fullmatch(port) or int(port) > 65535:
        raise SpecError(f"target {shown(url)!r}: the port must be a number from 0 to 65535 "
                        "(a password goes before an '@', %-encoded: redis://:PASSWORD@host:port)")
    return host, int(port)


def _check_host_name(host: str, url: str) -> None:
    """One line for a host no resolver takes (over 253 characters, a label empty or over 63), here
    rather than as a crash in the client library that encodes it (Python's idna codec)."""
    if not host:
        return
    try:
        host.encode("idna")
    except UnicodeError:
        raise SpecError(f"target {shown(url)!r}: host {one_line(repr(host), 40)} is not a host name "
                        "(at most 253 characters, in dot-separated labels of 1 to 63)") from None


def _authority_end(rest: str) -> int:
    ends = [i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i != -1]
    return min(ends) if ends else len(rest)


def _split_userinfo(rest: str, cautious: bool = False) -> tuple[str | None, str, bool]:
    """``rest`` (what follows ``://``) as (userinfo or None, the rest, read the standard way).

    The userinfo normally ends at the last '@' before the first '/', '?' or '#'. A password
    with an unencoded '/', '?' or '#' breaks that reading, and leaves a trace: a host list
    that is not one ("user:pa", a port that is no number), or an '@' in the path or in a
    query parameter's name. Then the userinfo really ends at the last '@' that is followed
    by a host list and the end of the authority (and holds a ':' and no nested URL). An
    empty host or a nameless query parameter is such a trace too. ``cautious`` (for
    redaction) also takes an '@' in a query value for one: ``redis://h:1/0?to=a@b`` is
    then shown as ``redis://h:***@b``, which hides too much, but ``mysql://u:83?x@db/x``
    (a password "83?x") shows nothing.
    """
    end = _authority_end(rest)
    authority = rest[:end]
    standard: tuple[str | None, str, bool] = (None, rest, True)
    hosts = authority
    if "@" in authority:
        at = authority.rindex("@")
        standard = (rest[:at], rest[at + 1:], True)
        hosts = authority[at + 1:]
    if not authority or "@" not in rest[end:]:
        return standard
    path, _, query = rest[end:].partition("?")
    keys = [piece.partition("=")[0] for piece in query.split("&")]
    odd = (not hosts or not _HOSTS.fullmatch(hosts) or "@" in path or any("@" in key or not key for key in keys)
           or (cautious and "@" in query))
    if not odd:
        return standard
    for match in reversed(list(re.finditer("@", rest))):
        at = match.start()
        if at < end:
            break
        after = _HOSTS.match(rest, at + 1)
        stop = after.end() if after else at + 1
        userinfo = rest[:at]
        if (stop == len(rest) or rest[stop] in "/?#") and ":" in userinfo and "://" not in userinfo:
            return userinfo, rest[at + 1:], False
    return standard


def redact(url: str) -> str:
    """The whole URL with every secret hidden, on one line (for results files)."""
    return one_line(_redact(str(url), 0), limit=None)


def shown(url: str, limit: int = MAX_SHOWN) -> str:
    """:func:`redact`, and cut to ``limit`` characters with an ellipsis (for messages)."""
    return one_line(_redact(str(url), 0), limit=limit)


def _remember(secret: str) -> None:
    if unquote(secret) == MASK:
        return
    for form in (secret, unquote(secret), unquote_plus(secret), quote(secret, safe="")):
        if len(form) >= _MIN_REMEMBERED and form.lower() not in _WORDS:
            _REMEMBERED.pop(form, None)
            _REMEMBERED[form] = None
    while len(_REMEMBERED) > _MAX_REMEMBERED:
        del _REMEMBERED[next(iter(_REMEMBERED))]


def _redact(url: str, depth: int) -> str:
    if depth > _MAX_DEPTH:
        _remember(url)
        return MASK
    if url[:6].lower() == "spawn:":
        name, sep, query = url[6:].partition("?")
        return url[:6] + name + sep + _redact_query(query, depth)
    scheme = _SCHEME.match(url)
    head, rest = (url[:scheme.end()], url[scheme.end():]) if scheme else ("", url)
    userinfo, rest, _ = _split_userinfo(rest, cautious=True)
    if userinfo is None and not scheme:
        return _redact_query_of(rest, depth)  # not a URL: still hide its ?password=…
    if userinfo is not None:
        user, colon, password = userinfo.partition(":")
        if colon:
            _remember(password)
        head += f"{user}:{MASK}@" if colon else f"{user}@"
    end = _authority_end(rest)
    authority = rest[:end]
    if not _HOSTS.fullmatch(authority) and ":" in authority:
        # Something after ':' that is no port: it may be a password missing its '@', and
        # what follows may be more of it. (Not remembered: as likely a typo as a password.)
        return head + authority.partition(":")[0] + ":" + MASK
    return head + authority + _redact_query_of(rest[end:], depth)


def _redact_query_of(rest: str, depth: int) -> str:
    path, sep, query = rest.partition("?")
    return path + sep + _redact_query(query, depth) if sep else path


def _redact_query(query: str, depth: int) -> str:
    """Mask secret-named parameters; redact URLs and JSON inside the others. Unchanged
    pieces keep their original spelling."""
    pieces = []
    after_secret = False
    for piece in query.split("&"):
        key, eq, value = piece.partition("=")
        name = unquote_plus(key)
        if eq and value and _SECRET_NAME.search(name):
            _remember(value)
            pieces.append(f"{key}={MASK}")
            after_secret = True
            continue
        if after_secret and not eq and piece:  # "password=ab&cd": a raw '&' inside the password
            pieces.append(MASK)
            continue
        after_secret = False
        decoded = unquote_plus(value)
        hidden = _redact_value(decoded, depth + 1)
        pieces.append(piece if hidden == decoded else f"{key}={quote(hidden, safe=_SHOWN_RAW)}")
    return "&".join(pieces)


def _redact_value(value: str, depth: int) -> str:
    """A query value (or JSON string) that may itself hold a URL, JSON, or a %-encoded URL."""
    stripped = value.lstrip()
    if stripped[:1] in ("{", "["):
        return _redact_json(value, depth)
    if "://" in value or value[:6].lower() == "spawn:" or ("@" in value and ":" in value):
        # a list of URLs (a Django LOCATION for several servers): each one on its own
        return ",".join(_redact(part, depth) for part in _URL_LIST.split(value))
    if "%" in value and unquote(value) != value:  # a nested URL %-encoded once more
        inner = unquote(value)
        hidden = _redact_value(inner, depth + 1)
        if hidden != inner:
            return hidden
    return value


def _redact_json(text: str, depth: int) -> str:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        # Not JSON after all (or absurdly deep): mask "secret-name": value pairs by pattern.
        return re.sub(r'("(?:[^"\\]|\\.)*"\s*:\s*)("(?:[^"\\]|\\.)*"|[^,}\]\s]+)',
                      lambda m: m.group(1) + (_masked(m.group(2)) if _SECRET_NAME.search(m.group(1)) else m.group(2)),
                      text)
    hidden = _redact_data(data, depth)
    return text if hidden == data else json.dumps(hidden, separators=(",", ":"), sort_keys=False)


def _masked(value: str) -> str:
    _remember(value.strip('"'))
    return f'"{MASK}"'


def _redact_data(data: Any, depth: int) -> Any:
    if depth > _MAX_DEPTH:
        return MASK
    if isinstance(data, dict):
        out = {}
        for key, value in data.items():
            if _SECRET_NAME.search(str(key)) and value not in (None, "", {}, []):
                _remember_data(value)
                out[key] = MASK
            else:
                out[key] = _redact_data(value, depth + 1)
        return out
    if isinstance(data, list):
        return [_redact_data(item, depth + 1) for item in data]
    if isinstance(data, str):
        return _redact_value(data, depth + 1)
    return data


def _remember_data(value: Any) -> None:
    if isinstance(value, dict):
        for item in value.values():
            _remember_data(item)
    elif isinstance(value, list):
        for item in value:
            _remember_data(item)
    elif value is not None:
        _remember(str(value))


# --- free text: messages and what client libraries put in their exceptions ---------

# (the look-behinds and bounds keep a 100,000-character word from costing quadratic time)
# Quotes do not end a URL here (a password may hold one); what follows it stays, unredacted or not.
_URL_IN_TEXT = re.compile(r"(?i)(?<![a-z0-9+.\-])(?:[a-z][a-z0-9+.\-]{0,30}://|spawn:)[^\s<>`]+")
# name=value or name: value, the name possibly quoted (conninfo strings, JSON, repr of a dict)
_PAIR_IN_TEXT = re.compile(
    r"""(?<![\w.\-])([\w.\-]{1,64})(["']?\s*[=:]\s*)('(?:[^'\\]|\\.){0,200}'|"(?:[^"\\]|\\.){0,200}"|[^\s,;&)'"}\]]+)"""
)


def _pair(match: re.Match[str]) -> str:
    name, sep, value = match.groups()
    if not _SECRET_NAME.search(name) or value.strip("'\"") in ("", MASK) or "://" in value:
        return match.group(0)
    _remember(value.strip("'\""))
    quote_char = value[0] if value[0] in "'\"" else ""
    return f"{name}{sep}{quote_char}{MASK}{quote_char}"


def redact_text(text: str, limit: int | None = 2000, lines: bool = False) -> str:
    """Any text with URLs, ``password=…`` pairs and every remembered secret hidden, on one line.

    For messages built from exceptions we did not write: redis-py, psycopg, pymysql and
    boto3 errors may echo a DSN, an endpoint with credentials, or a password. ``lines``
    keeps the line breaks (a saved traceback), each line redacted and escaped on its own.
    """
    if lines:
        return "\n".join(redact_text(line, limit) for line in str(text).splitlines())
    text = str(text)
    for secret in sorted(_REMEMBERED, key=len, reverse=True):  # first: a URL cut at a space hides less
        if secret in text:
            text = _replace_secret(text, secret)
    text = _URL_IN_TEXT.sub(_url_in_text, text)
    text = _PAIR_IN_TEXT.sub(_pair, text)
    return one_line(text, limit=limit)


def _url_in_text(match: re.Match[str]) -> str:
    # "target 'redis://h:1/0': …": the quote and colon after a URL belong to the sentence
    url = match.group(0).rstrip("'\".,;:)]}")
    return _redact(url, 0) + match.group(0)[len(url):]


def _replace_secret(text: str, secret: str) -> str:
    if len(secret) >= 8:
        return text.replace(secret, MASK)
    # A short secret replaces only whole words, so "pass" leaves "passed" alone.
    return re.sub(rf"(?<![A-Za-z0-9]){re.escape(secret)}(?![A-Za-z0-9])", MASK, text)


def scrub(data: Any) -> Any:
    """A results structure with :func:`redact_text` applied to every string in it.

    Histograms (base64 under a ``histogram``/``histograms`` key) are left alone: they
    hold no text, and a remembered secret could match inside their encoding by chance.
    A container in which nothing changed is returned itself, not copied: a large results file
    read by ``show`` or ``report`` is then held once, not twice.
    """
    if isinstance(data, dict):
        scrubbed = {key: value if str(key).startswith("histogram") else scrub(value) for key, value in data.items()}
        return data if all(scrubbed[key] is value for key, value in data.items()) else scrubbed
    if isinstance(data, list):
        items = [scrub(item) for item in data]
        return data if all(new is old for new, old in zip(items, data)) else items
    if isinstance(data, str):
        if not data or data.startswith("HISTF"):
            return data
        redacted = redact_text(data, limit=None)
        return data if redacted == data else redacted  # an equal copy would count as a change
    return data


def check_params(target: Target) -> None:
    """Refuse a parameter the target's scheme does not take (nested targets too), naming the allowed ones."""
    row = scheme(target.scheme, target.redacted)
    if row.spawner:
        split_spawn_params(target)
        return
    if row.unix:
        unix_socket(target)
    if row.failover_grace is not None:
        sentinel_parts(target)
    for name, value in target.params.items():
        if name == "client" and row.engine is None and row.drivers and value not in row.drivers:
            raise SpecError(f"{target.redacted}: client={value!r}; {row.name}:// takes client= only to name a "
                            f"driver: {', '.join(sorted(row.drivers))}")
        if not row.takes(name):
            raise SpecError(f"{target.redacted}: unknown parameter {name!r} for {row.name}://; "
                            f"it takes {', '.join(row.allowed())}")
        if name in row.nested and names_a_target(value):
            check_params(parse_target(value))
