"""The OpenAPI 3.1 document of ``hivemind serve`` (``GET /openapi.json``) and the plain
``/docs`` page listing it, generated from the structs the handlers validate with
(``schemas.py``, the events, the worker's answers)."""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

import msgspec

from hivemind_memory.api_stub.protocol.answers import Remembered
from hivemind_memory.api_stub.protocol.messages import QueryResult, ReadRequest
from hivemind_memory.api_stub.server import explorer
from hivemind_memory.api_stub.server.schemas import (
    MAX_AUDIT,
    MAX_DEAD,
    MAX_WAIT_S,
    Appended,
    AuditEntry,
    Erased,
    ErrorResponse,
    ForgetBody,
    Forgot,
    Health,
    QueryBody,
    RecallBody,
    Recalled,
    RememberBody,
    ReproduceBody,
    ReviseBody,
    Revised,
    UsedBody,
    Whoami,
)
from hivemind_memory.events.schema import ID_PATTERN, NS_PATTERN, Event
from hivemind_memory.projections.state import NoteRow
from hivemind_memory.worker.service import DeadLetters, NoteShow, ReproduceSummary, Status

_EVENT_DOC = ("An event in the `hivemind ingest` format; `ns` and `agent` may be omitted (the "
              "path and the token supply them) and must match when present.")


def openapi_document() -> dict[str, Any]:
    """OpenAPI 3.1 for the API, its schemas generated from the msgspec structs."""
    (refs, comps) = msgspec.json.schema_components(
        [list[Event], QueryBody, list[QueryBody], QueryResult, Appended, ErrorResponse, Health,
         list[NoteRow], list[AuditEntry], RememberBody, Remembered, UsedBody, ForgetBody, Forgot,
         RecallBody, Recalled, ReadRequest, ReviseBody, Revised, Whoami],
        ref_template="#/components/schemas/{name}")
    whoami_ref, refs = refs[-1], refs[:-1]
    for struct in (Appended, NoteRow, Health):  # answers that always carry every field
        c = comps[struct.__name__]
        c["required"] = list(c["properties"])
    for name in ("NoteCreated", "NoteUsed", "NoteForgotten", "NoteRevised", "NoteErased"):
        c = comps[name]
        c["required"] = [f for f in c.get("required", []) if f not in ("ns", "agent")]
        c["description"] = _EVENT_DOC
    events_ref, query_ref, queries_ref, result_ref, appended_ref, error_ref, health_ref, \
        notes_ref, audit_ref, remember_ref, remembered_ref, used_ref, forget_ref, forgot_ref, \
        recall_ref, recalled_ref, read_ref, revise_ref, revised_ref = refs
    err = {"description": "error", "content": {"application/json": {"schema": error_ref}}}

    def ok(schema: dict[str, Any], desc: str = "OK") -> dict[str, Any]:
        return {"description": desc, "content": {"application/json": {"schema": schema}}}

    ns_param = {"name": "ns", "in": "path", "required": True,
                "schema": {"type": "string", "pattern": NS_PATTERN}}
    secured: list[dict[str, list[str]]] = [{"bearer": []}]
    errs = {str(s): err for s in (400, 401, 403, 404, 409, 413, 422, 503, 504)}

    def op(summary: str, responses: dict[str, Any], body: dict[str, Any] | None = None,
           params: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        o: dict[str, Any] = {"summary": summary, "parameters": [ns_param, *(params or [])],
                             "responses": {**responses, **errs}, "security": secured}
        if body is not None:
            o["requestBody"] = {"required": True,
                                "content": {"application/json": {"schema": body}}}
        return o

    p = "/v1/ns/{ns}"
    admin_paths, admin_comps = _admin_openapi(p, op, ok, err)
    comps.update(admin_comps)
    ui_paths, ui_comps = explorer.openapi_paths(op, ok, err, msgspec.json.schema_components)
    comps.update(ui_comps)
    return {
        "openapi": "3.1.0",
        "info": {"title": "hivemind", "version": "1",
                 "description": "Event-sourced shared memory for AI agents."},
        "paths": {
            f"{p}/whoami": {"get": op(
                "The token's agent, and what a note id it chooses must end with (403 "
                "foreign_note_id otherwise; \"\": any id)", {"200": ok(whoami_ref)})},
            f"{p}/events": {"post": op(
                "Append events (all or nothing; 422 names the index and field)",
                {"200": ok(appended_ref)}, body=events_ref)},
            f"{p}/remember": {"post": op(
                "Store a note, reporting its near-duplicates; a text its author already "
                "wrote is not stored again, duplicate_of names that note (409 note_exists for "
                "a reused id; 403 foreign_note_id for an id outside the token's own (see "
                "whoami), taken or not; 404 unknown_note, 403 not_allowed, 409 "
                "already_superseded for what it supersedes)", {"200": ok(remembered_ref)},
                body=remember_ref)},
            f"{p}/revise": {"post": op(
                "A new text for a note: it keeps its id, uses and tier (404 unknown_note; "
                "403 not_allowed: not its author)", {"200": ok(revised_ref)}, body=revise_ref)},
            f"{p}/used": {"post": op(
                "Report the notes the agent used (404 unknown_note: nothing recorded)",
                {"200": ok(appended_ref)}, body=used_ref)},
            f"{p}/forget": {"post": op(
                "Forget a note (404 unknown_note; 403 not_allowed: not its author)",
                {"200": ok(forgot_ref)}, body=forget_ref)},
            f"{p}/recall": {"post": op(
                "The best notes for a question, rendered as one context within the budget",
                {"200": ok(recalled_ref)}, body=recall_ref)},
            f"{p}/read": {"post": op(
                "Notes the agent may see, by id or by id prefix, including writes not yet "
                "projected", {"200": ok(notes_ref)}, body=read_ref)},
            f"{p}/query": {"post": op(
                "Ask for the best notes that fit a token budget", {"200": ok(result_ref)},
                body=query_ref)},
            f"{p}/queries": {"post": op(
                "Many queries; results (or error objects) in order",
                {"200": ok({"type": "array", "items": {}})}, body=queries_ref)},
            f"{p}/results/{{query_id}}": {"get": op(
                "A result by id (404 until it exists)", {"200": ok(result_ref)},
                params=[{"name": "query_id", "in": "path", "required": True,
                         "schema": {"type": "string"}},
                        {"name": "wait", "in": "query", "required": False,
                         "schema": {"type": "number", "minimum": 0, "maximum": MAX_WAIT_S}}])},
            f"{p}/notes": {"get": op(
                "The projected notes, once every event appended before the request is "
                "projected (admin)", {"200": ok(notes_ref)})},
            f"{p}/audit": {"get": op(
                "The newest audit entries, oldest first (admin)", {"200": ok(audit_ref)},
                params=[{"name": "limit", "in": "query", "required": False,
                         "schema": {"type": "integer", "minimum": 1, "maximum": MAX_AUDIT}}])},
            **admin_paths,
            **ui_paths,
            "/healthz": {"get": {"summary": "The process is up",
                                 "responses": {"200": ok(health_ref)}}},
            "/readyz": {"get": {"summary": "The store answers and a worker runs",
                                "responses": {"200": ok(health_ref), "503": ok(health_ref)}}},
        },
        "components": {"schemas": comps,
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }


def _admin_openapi(p: str, op: Callable[..., dict[str, Any]], ok: Callable[..., dict[str, Any]],
                   err: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The admin endpoints' paths and schemas (``Api.dead``, ``status``, ``note``,
    ``reproduce``)."""
    (refs, comps) = msgspec.json.schema_components(
        [DeadLetters, Status, NoteShow, ReproduceBody, ReproduceSummary, Erased],
        ref_template="#/components/schemas/{name}")
    dead_ref, status_ref, show_ref, body_ref, summary_ref, erased_ref = refs
    bad_audit = {"500": err}  # an unreadable audit entry in the store (code bad_audit)
    note_param = {"name": "note_id", "in": "path", "required": True,
                  "schema": {"type": "string", "pattern": ID_PATTERN}}
    paths = {
        f"{p}/dead": {"get": op(
            "The dead letters, oldest first, and their total (admin; `hivemind dead`)",
            {"200": ok(dead_ref)},
            params=[{"name": "limit", "in": "query", "required": False,
                     "schema": {"type": "integer", "minimum": 1, "maximum": MAX_DEAD}}])},
        f"{p}/status": {"get": op(
            "Log length, checkpoint, lag, dead letters, queries served; live workers "
            "(admin; `hivemind status`)", {"200": ok(status_ref)})},
        f"{p}/notes/{{note_id}}": {"get": op(
            "A note, its events in log order, the served queries that returned it (admin; "
            "`hivemind show`)", {"200": ok(show_ref), **bad_audit},
            params=[note_param]), "delete": op(
            "Erase a note: its text and embedding are removed from everything hivemind wrote; "
            "answered once that is done (admin; `hivemind erase`; 404 unknown_note)",
            {"200": ok(erased_ref)}, params=[note_param])},
        f"{p}/audit/reproduce": {"post": op(
            "Re-run served queries exactly as they ran; `ok` false lists each difference "
            "(admin; `hivemind audit reproduce`)", {"200": ok(summary_ref), **bad_audit},
            body=body_ref)},
    }
    return paths, comps


def docs_page() -> str:
    """A plain page listing the endpoints (no external assets)."""
    doc = openapi_document()
    rows = "".join(
        f"<tr><td><code>{m.upper()}</code></td><td><code>{html.escape(path)}</code></td>"
        f"<td>{html.escape(o.get('summary', ''))}</td></tr>"
        for path, ops in doc["paths"].items() for m, o in ops.items())
    return ("<!doctype html><title>hivemind API</title><h1>hivemind API</h1>"
            "<p>Machine-readable: <a href='/openapi.json'>/openapi.json</a>. "
            "Send <code>Authorization: Bearer TOKEN</code>.</p>"
            f"<table>{rows}</table>")
