"""Connection URLs in messages: shown as typed, every secret in them hidden."""

from __future__ import annotations

import dataclasses
import re
import urllib.parse

__all__ = ("redact", "scrub")

#: What a hidden secret reads as.
HIDDEN = "***"

# Query keys whose value is a secret, compared lowercased: libpq's ``password``,
# ``sslpassword`` and ``passfile`` (where the secret is kept need not be told either), and the
# usual names of keys and tokens; any key holding one of _SECRET_WORDS is one too.
_SECRET_KEYS = frozenset({"pass", "passwd", "pwd", "passfile", "sslkey", "apikey", "api_key",
                          "authmechanismproperties"})
_SECRET_WORDS = ("password", "secret", "token")

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
# A host list as libpq and pymongo take it: names, IPv4, [IPv6], percent-encoded socket
# paths, each with an optional numeric port, separated by commas.
_HOSTS = re.compile(r"(?:(?:\[[0-9A-Za-z:.%]*\]|[A-Za-z0-9._~%-]*)(?::\d*)?)"
                    r"(?:,(?:\[[0-9A-Za-z:.%]*\]|[A-Za-z0-9._~%-]*)(?::\d*)?)*")
# What a password cut into pieces by a driver's parser may be echoed as.
_CUTS = re.compile(r"[/?#@:&=,]")


@dataclasses.dataclass(frozen=True)
class _Parts:
    scheme: str
    user: str | None
    password: str | None
    hosts: str
    path: str
    query: str | None
    fragment: str | None


def _parse(url: str) -> _Parts:
    """The parts of a ``scheme://[user[:password]@]hosts[/path][?query][#fragment]`` URL.

    The user information ends at the last ``@`` before the query, so an unescaped ``@``, ``/``
    or ``:`` in a password (``user:a@b@host``, ``user:s3c/ret@host``) stays in the password,
    never in the hosts or the path shown. (Drivers read such a URL otherwise, or refuse it:
    the message must still not show it.)

    Raises:
        ValueError: *url* does not read as such a URL (the hosts are not a host list).
    """
    match = _SCHEME.match(url)
    if match is None or not url.startswith("//", match.end()):
        raise ValueError("not a scheme://... URL")
    rest = url[match.end() + 2:]
    cut = min((i for i in (rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    head, tail = rest[:cut], rest[cut:]
    userinfo, at, after = head.rpartition("@")
    hosts, slash, path = after.partition("/")
    if not _HOSTS.fullmatch(hosts):
        raise ValueError(f"not a host list: {hosts!r}")
    if not at and ":" in hosts and "@" in tail and tail.find("@") < (tail + "=").find("="):
        # ``user:1234?x@host``: a password holding "?" or "#" (an "@" before any "=" of the
        # query), not a host with its port.
        raise ValueError("an '@' after the hosts")
    query = fragment = None
    if tail.startswith("?"):
        query, hashed, frag = tail[1:].partition("#")
        fragment = frag if hashed else None
    elif tail.startswith("#"):
        fragment = tail[1:]
    user, colon, password = userinfo.partition(":")
    return _Parts(match.group()[:-1], user if at else None, password if colon else None,
                  hosts, slash + path, query, fragment)


def _is_secret(key: str) -> bool:
    key = urllib.parse.unquote_plus(key).lower()
    return key in _SECRET_KEYS or any(word in key for word in _SECRET_WORDS)


def redact(url: str) -> str:
    """*url* with its secrets replaced by ``***``: the password of its ``user:password@``
    part, the value of each query key that names a secret (``password``, ``sslpassword``,
    ``passfile``, ``token``, ``secret``, any key holding the word password, secret or token;
    in any case), and a fragment. A URL that cannot be parsed is shown as its scheme and
    host only, or its scheme alone, never as typed.

    Example:
        >>> redact("mongodb://alice:s3cret@db.example:27017/?tls=true")
        'mongodb://alice:***@db.example:27017/?tls=true'
        >>> redact("postgresql://bob@db/app?sslmode=require&Password=s3cret")
        'postgresql://bob@db/app?sslmode=require&Password=***'
        >>> redact("postgresql://bob:s3c ret?@db/app")
        'postgresql://db/...'
    """
    if _SCHEME.match(url) and "//" not in url and not set("@?#") & set(url):
        return url  # ``memory:``, ``sqlite:jobs.db``: no place for a secret
    try:
        parts = _parse(url)
    except ValueError:
        return _fallback(url)
    shown = f"{parts.scheme}://"
    if parts.user is not None:
        shown += parts.user + ("" if parts.password is None else f":{HIDDEN}") + "@"
    shown += parts.hosts + parts.path
    if parts.query is not None:
        shown += "?" + "&".join(_redact_pair(pair) for pair in parts.query.split("&"))
    if parts.fragment is not None:
        shown += f"#{HIDDEN}"  # no driver reads a fragment: nothing worth showing
    return shown


def _redact_pair(pair: str) -> str:
    key, eq, _value = pair.partition("=")
    return f"{key}={HIDDEN}" if eq and _is_secret(key) else pair


def _fallback(url: str) -> str:
    """The scheme and host of a URL that could not be parsed, or its scheme alone."""
    match = _SCHEME.match(url)
    if match is None:
        return "<a URL that could not be read>"
    scheme = match.group()[:-1]
    rest = url[match.end():].removeprefix("//")
    # The host: after the last "@", up to the path; shown only if it reads as one.
    host = rest.rpartition("@")[2].partition("/")[0]
    if host and "?" not in host and "#" not in host and _HOSTS.fullmatch(host):
        return f"{scheme}://{host}/..."
    return f"{scheme}:..."


def _secrets(url: str) -> list[str]:
    """The secrets of *url*, as typed and decoded, and the pieces a driver's parser may cut
    a password into (three characters and longer), longest first."""
    try:
        parts = _parse(url)
    except ValueError:
        # Nothing is known of it: every piece after the scheme may be a secret.
        match = _SCHEME.match(url)
        return _with_pieces([url[match.end():] if match else url])
    found = [parts.password] if parts.password else []
    for pair in (parts.query or "").split("&"):
        key, eq, value = pair.partition("=")
        if eq and value and _is_secret(key):
            found.append(value)
    if parts.fragment:
        found.append(parts.fragment)
    return _with_pieces(found)


def _with_pieces(found: list[str]) -> list[str]:
    more = list(found)
    for secret in found:
        more += (piece for piece in _CUTS.split(secret.removeprefix("//")) if len(piece) >= 3)
    more += [urllib.parse.unquote_plus(s) for s in more]
    # The longest first: a secret that holds another is hidden whole.
    return sorted({s for s in more if s}, key=len, reverse=True)


def scrub(message: str, url: str) -> str:
    """*message* (a driver's, about *url*) with every secret of *url* hidden: the URL as
    typed becomes `redact`'s form, then each secret still there (a driver that quotes a part
    of the URL, raw, decoded or cut into pieces) becomes ``***``.

    Example:
        >>> scrub('invalid port "s3c" in "u:s3c/ret@h"', "postgresql://u:s3c/ret@h/db")
        'invalid port "***" in "u:***@h"'
    """
    message = message.replace(url, redact(url))
    for secret in _secrets(url):
        message = message.replace(secret, HIDDEN)
    return message
