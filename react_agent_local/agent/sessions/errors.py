"""The session store's errors: each has a public ``message`` (no path) and a stable ``code``.

::

    SessionError        base of the store's errors (a public message, a stable ``code``)
     +-- SessionNotFound  no session with that id (or a malformed id)         code session_not_found
     +-- SessionBusy      another process holds the session open              code session_busy
     +-- SessionCorrupt   the file is not a session (no readable session_meta) code session_corrupt
     +-- SessionFull      the session is at its size cap                      code session_full
"""

from __future__ import annotations


class SessionError(Exception):
    """A session cannot be used as asked; ``message`` is public, ``code`` stable."""

    code = "session_error"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class SessionNotFound(SessionError, LookupError):
    code = "session_not_found"


class SessionBusy(SessionError):
    code = "session_busy"


class SessionCorrupt(SessionError):
    code = "session_corrupt"


class SessionFull(SessionError):
    code = "session_full"
