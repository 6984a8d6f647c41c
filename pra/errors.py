"""The one exception type for bad input. Library code raises ``UserError`` (or a subclass) when the user
can fix the problem (a flag, a field, a file, a server); the command line prints its message and exits 2.
Anything else that escapes is a bug and is shown with its traceback."""
from __future__ import annotations


class UserError(ValueError):
    """Bad input, a missing file or a refused server, with a message naming the flag, field or file:line.
    A message may hold several lines, one per problem. A ValueError, so callers that catch those still do."""


class MissingFile(UserError, FileNotFoundError):
    """A file or folder named by the input does not exist (still a FileNotFoundError for callers)."""
