"""A URL that may hold a secret, as logs and errors show it: a database's (`STORAGE=`), a tracking
server's (`MLFLOW_TRACKING_URI`). The password in its user part and every query value whose key names
a secret are masked; the URL itself is used as given."""

from __future__ import annotations

import re

# Query parameters whose value is masked wherever a URL is shown (libpq's and the drivers' names)
_SECRET_KEYS = re.compile(r"pass|pwd|secret|token|key|cred|auth", re.IGNORECASE)


def _password(head: str) -> str | None:
    """The password in `scheme://user:password@host/db` (the part of a URL before its query), None
    where there is none. Everything between the user's colon and the last `@` counts, so a password
    holding an unescaped `@` or `/` is hidden whole, never in part."""
    _, sep, rest = head.partition("://")
    userinfo = rest.rpartition("@")[0] if sep else ""
    return userinfo.partition(":")[2] if ":" in userinfo else None


def _query(url: str) -> list[tuple[str, str, str]]:
    query = url.partition("?")[2]
    return [pair.partition("=") for pair in query.split("&")] if query else []


def shown_url(url: str) -> str:
    """The URL as logs and errors show it: the password in its user part and every query value
    whose key names a secret (`?password=`, `sslkey=`) replaced by `***`. By hand rather than by
    SQLAlchemy's `hide_password`, which leaves the query string as it is and refuses a bad URL."""
    head, sep, _ = url.partition("?")
    password = _password(head)
    if password is not None:
        user_end = head.index("://") + 3 + head.partition("://")[2].index(":")
        head = head[: user_end + 1] + "***" + head[user_end + 1 + len(password) :]
    pairs = [f"{k}={'***' if _SECRET_KEYS.search(k) else v}" if eq else k for k, eq, v in _query(url)]
    return head + sep + "&".join(pairs)


def hidden(text: str, url: str) -> str:
    """`text` (a database's error, which may quote its connection string) with the URL's secrets
    masked wherever they appear in it."""
    secrets = [v for k, _, v in _query(url) if v and _SECRET_KEYS.search(k)]
    secrets += [p for p in [_password(url.partition("?")[0])] if p]
    for secret in sorted(set(secrets), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text
