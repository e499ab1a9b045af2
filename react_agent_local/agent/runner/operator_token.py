"""The runner's operator token: the secret that tells the operator's page from every other client.

The browser boundary (``agent/runner/boundary.py``) stops other web pages, not other local processes: any
process on the machine, of any user, can reach 127.0.0.1 without an Origin. So, as Jupyter does, the
runner makes a random token at start (``secrets.token_urlsafe``), prints the lab page's address with
it in the fragment (``#runner-token=...``: a fragment is never sent to the course site) and writes
it to a 0600 file in the user's cache. The page keeps it in ``sessionStorage`` and sends it as
``Authorization: Bearer <token>`` where the operator's authority is needed: reading the pending
approvals (their ids and real paths) and answering them. Tokens are compared in constant time
(``secrets.compare_digest``). The token is registered with the redactor (``agent/util/secrets.py``), so it
cannot reach a trace, a response or a log record even if something echoed it.

Refusals (stable codes): no token -> 401 ``operator_token_required``; a wrong one -> 403
``operator_token_invalid``.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from urllib.parse import quote

from agent.util.paths import user_cache

#: The fragment key the lab page reads the token from.
FRAGMENT_KEY = "runner-token"
SCHEME = "bearer"


def new_token() -> str:
    """A fresh token: 256 random bits, URL-safe (it travels in a fragment and a header)."""
    return secrets.token_urlsafe(32)


def default_token_file(port: int) -> Path:
    """Where the runner on ``port`` writes its token: ``~/.cache/react-agent-local/runner-<port>.token``."""
    return user_cache(f"runner-{port}.token")


def write_token_file(path: Path, token: str) -> None:
    """Write ``token`` readable by this user only (folder 0700, file 0600, no link followed)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # an older file may have been created wider
        os.write(fd, (token + "\n").encode("ascii"))
    finally:
        os.close(fd)


def remove_token_file(path: Path, token: str) -> None:
    """Remove the file if it still holds this runner's token (another runner may have replaced it)."""
    try:
        if path.read_text(encoding="ascii").strip() == token:
            path.unlink()
    except (OSError, UnicodeDecodeError):
        pass


def page_link(page_origin: str, runner_base: str, token: str) -> str:
    """The lab page's address that hands the page this runner and its token (in the fragment)."""
    return f"{page_origin}/react-agent#runner={quote(runner_base, safe='')}&{FRAGMENT_KEY}={token}"


def bearer(headers: list[str], token: str) -> str | None:
    """Why the ``Authorization`` values ``headers`` do not carry ``token``: ``required`` (none sent)
    or ``invalid``; None when they do (exactly one value, ``Bearer <token>``)."""
    if not headers:
        return "required"
    if len(headers) != 1:
        return "invalid"
    scheme, _, value = headers[0].strip().partition(" ")
    if scheme.lower() != SCHEME:
        return "invalid"
    # compare_digest over bytes: a non-ASCII value is refused in constant time, not with an error
    return None if secrets.compare_digest(value.strip().encode("utf-8", "replace"), token.encode("ascii")) else "invalid"
