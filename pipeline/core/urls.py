"""A URL that may hold a secret, as logs and errors show it: a database's (`STORAGE=`), a tracking
server's (`MLFLOW_TRACKING_URI`). The password in its user part (or the whole user part where it
has no password: `https://TOKEN@host` carries a token there, as pip's `redact_auth_from_url`
assumes), and every query value whose key names a secret or a signature, are masked; the URL
itself is used as given."""

from __future__ import annotations

import re
from urllib.parse import unquote

# Query parameters whose value is masked wherever a URL is shown (libpq's and the drivers' names;
# a signed URL's `X-Amz-Signature`, `sig`, `Signature`)
_SECRET_KEYS = re.compile(r"pass|pwd|secret|token|key|cred|auth|sig", re.IGNORECASE)
TOKEN_LENGTH = 8


def _userinfo(head: str) -> str | None:
    """The user part of `scheme://user:password@host/db` (the part of a URL before its query), None
    where there is none. Everything before the last `@` counts, so a password holding an unescaped
    `@` or `/` is hidden whole, never in part."""
    _, sep, rest = head.partition("://")
    return rest.rpartition("@")[0] if sep and "@" in rest else None


def _secret_of(userinfo: str | None) -> str | None:
    """What of a user part is secret: the password after the user's colon, or all of it (a token)."""
    if not userinfo:
        return None
    return userinfo.partition(":")[2] if ":" in userinfo else userinfo


def _query(url: str) -> list[tuple[str, str, str]]:
    query = url.partition("?")[2]
    return [pair.partition("=") for pair in query.split("&")] if query else []


def shown_url(url: str) -> str:
    """The URL as logs and errors show it: the password in its user part (the user part whole where
    it has none) and every query value whose key names a secret (`?password=`, `sslkey=`,
    `X-Amz-Signature=`) replaced by `***`. By hand rather than by SQLAlchemy's `hide_password`,
    which leaves the query string as it is and refuses a bad URL."""
    head, sep, _ = url.partition("?")
    userinfo = _userinfo(head)
    if userinfo:
        scheme, _, rest = head.partition("://")
        user, colon, _ = userinfo.partition(":")
        head = f"{scheme}://{user + ':***' if colon else '***'}@{rest[len(userinfo) + 1 :]}"
    pairs = [f"{k}={'***' if _SECRET_KEYS.search(k) else v}" if eq else k for k, eq, v in _query(url)]
    return head + sep + "&".join(pairs)


def hidden(text: str, url: str) -> str:
    """`text` (a database's error, which may quote its connection string, or its decoded password)
    with the URL's secrets masked wherever they appear in it, as written and percent-decoded."""
    secrets = [v for k, _, v in _query(url) if v and _SECRET_KEYS.search(k)]
    userinfo = _userinfo(url.partition("?")[0])
    # A user part without a password is masked in the URL; in the text only where it could be a
    # token (8 characters or more): a user `me` replaced in every word would garble the line.
    secret = _secret_of(userinfo)
    secrets += [secret] if secret and (":" in (userinfo or "") or len(secret) >= TOKEN_LENGTH) else []
    secrets += [unquote(secret) for secret in secrets]
    text = text.replace(url, shown_url(url))  # the URL quoted whole: as shown, its user part included
    for secret in sorted(set(secrets), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text
