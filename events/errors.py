"""One error root for hivemind; each class says in one line what went wrong."""

from __future__ import annotations


class HivemindError(Exception):
    """Root of every error hivemind raises on purpose."""


class EventError(HivemindError):
    """An event failed validation; the message names the line and the field."""


class ConfigError(HivemindError):
    """A ranking config or setting is invalid; the message names the key."""


class QueryError(HivemindError):
    """A query request is invalid; ``code`` is machine-readable, the message is for people."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


WARMING_RETRY_S = 2
"""The retry hint of an ``index_warming`` answer, in seconds (HTTP ``Retry-After``)."""


class IndexWarming(QueryError):
    """The namespace's index is being built; retry after ``retry_after`` seconds."""

    def __init__(self, message: str, retry_after: float = WARMING_RETRY_S) -> None:
        super().__init__("index_warming", message)
        self.retry_after = retry_after


def query_error(code: str, message: str) -> QueryError:
    """The typed error of an answer's error object (``IndexWarming`` for
    ``index_warming``)."""
    return IndexWarming(message) if code == "index_warming" else QueryError(code, message)


class QueryTimeout(HivemindError):
    """No result arrived for a query before the deadline; the message names the query id."""


class CatchUpTimeout(HivemindError):
    """A namespace was not projected up to the wanted stream position before the deadline."""


class StoreError(HivemindError):
    """The store could not be reached or holds something this version cannot read."""


class StoreLocked(StoreError):
    """An embedded ``memory://PATH`` store is open in another process (its lock is held)."""


class LogDamaged(StoreError):
    """An embedded store's log cannot be replayed as it is; the message names the file and
    the ``hivemind fsck`` command that checks and repairs it."""


class JobRefused(HivemindError):
    """A queued job names a function outside the allowlist (or a callback): never run."""


class AppendFailed(StoreError):
    """An append failed part-way; ``appended`` events (``ids``) did reach the log."""

    def __init__(self, message: str, appended: int, ids: list[str]) -> None:
        super().__init__(message)
        self.appended = appended
        self.ids = ids


class AccessDenied(HivemindError):
    """The token is missing or unknown (401), or may not do this here or as this agent (403)."""


class TooLarge(HivemindError):
    """A request body or batch is over the server's documented cap (413)."""


class WriteRefused(EventError):
    """An event would never apply; nothing of its write was appended. ``code`` is the
    machine-readable reason, ``index`` the event's place in the write (from 0)."""

    code = "write_refused"
    status = 422

    def __init__(self, message: str, index: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.index = index


class NoteExists(WriteRefused):
    """A ``note.created`` reuses a note id the namespace already has (even forgotten) (409)."""

    code = "note_exists"
    status = 409


class EventIdConflict(WriteRefused):
    """An ``event_id`` already in the namespace's log is sent again with other content (type,
    note, agent, text or fields differ; ``at`` is not compared). The same content resent is
    an idempotent retry, not this error (409). ``event_id`` names the id."""

    code = "event_id_conflict"
    status = 409

    def __init__(self, message: str, index: int = 0, event_id: str = "") -> None:
        super().__init__(message, index)
        self.event_id = event_id


class UnknownNote(WriteRefused):
    """A use, forget, revision or supersession names a note the namespace does not have, has
    forgotten or erased, or the writer may not see (another agent's private note: not
    found, so ids do not leak) (404)."""

    code = "unknown_note"
    status = 404


class NotAllowed(WriteRefused):
    """The writer sees the note but may not do this to it (forget, revise or supersede
    another author's shared note, or erase any, without the ``admin`` right) (403)."""

    code = "not_allowed"
    status = 403


class ForeignNoteId(NotAllowed):
    """A create names a note id outside the writer's own id space (``events.noteids``):
    refused the same whether the id is taken or free, so it confirms nothing (403)."""

    code = "foreign_note_id"


class VersionConflict(WriteRefused):
    """A revision's ``expected_version`` is not the note's version: it moved on (409)."""

    code = "version_conflict"
    status = 409


class AlreadySuperseded(WriteRefused):
    """A ``note.created`` supersedes a note that another note already superseded (409)."""

    code = "already_superseded"
    status = 409
