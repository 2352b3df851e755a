/**
 * hivemind's TypeScript client: the calls of the Python SDK over `hivemind serve`
 * (remember, recall, used, forget, revise, erase, reads, and the raw append, query and batch).
 *
 * ```ts
 * import { Memory } from "hivemind-memory";
 *
 * const mem = new Memory("http://localhost:8080", { ns: "team-a", token: "..." });
 * const id = await mem.remember("Deploys happen on Tuesdays after 14:00 UTC.");
 * const got = await mem.recall("when do we deploy?", { budget: 500 });
 * console.log(got.context);       // each note under a [note id | date] header
 * await mem.used(...got.noteIds);
 * ```
 *
 * It fills what an event needs (a time-ordered `event_id`, `at` from the clock; the server
 * takes the agent from the bearer token), so a retried write is applied once, and raises typed
 * errors (`NoteExists`, `UnknownNote`, `NotAllowed`, `AccessDenied`, ...; all `HivemindError`).
 * The request and result types are generated from the server's `/openapi.json`
 * (`src/openapi.ts`). No dependencies: Node's own `fetch`.
 */

import type { components } from "./openapi.js";

type Schemas = components["schemas"];
/** The contract's result object of a query. */
export type QueryResult = Schemas["QueryResult"];
/** A packed note of a result, with every signal that ranked it. */
export type NoteSignals = Schemas["NoteSignals"];
/** A query as `POST .../query` takes it (`ns` and `agent` come from the path and token). */
export type QueryBody = Schemas["QueryBody"];
/** A note as `read` answers it (`hivemind notes --json` fields and its text). */
export type NoteRow = Schemas["NoteRow"];
/** What an append answers. */
export type Appended = Schemas["Appended"];
/** What `rememberDetailed` answers: the note's id (the existing twin's when `duplicate_of` is
 * set: nothing was stored), the near-duplicates found before writing (null: not checked,
 * `duplicates_unchecked` says why unless they were ignored) and what it superseded. */
export type Remembered = Schemas["Remembered"];
/** What an erasure answers once the note's content is gone: its id, the `note.erased` event's
 * id (null when the note was erased before), `redacted`: how many records of each kind this
 * call rewrote (0 for those the worker's redaction job rewrote first), and `redacted_in_all`:
 * the copies of the content now redacted, whoever redacted them. */
export type Erased = Schemas["Erased"];
/** An event as `POST .../events` takes it. */
export type Event = Schemas["NoteCreated"] | Schemas["NoteUsed"] | Schemas["NoteForgotten"];
/** An event to append: `event_id` and `at` may be left out (the client fills them). */
export type EventInput = DistributiveOmit<Event, "event_id" | "at"> &
  Partial<Pick<Event, "event_id" | "at">>;
/** A query's error object (in a batch, in place of its result). */
export interface QueryErrorObject {
  query_id: string;
  error: { code: string; message: string };
}

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

// -- errors -----------------------------------------------------------------------------------
/** Root of every error hivemind's client raises on purpose. */
export class HivemindError extends Error {
  constructor(message: string, readonly code: string = "error", readonly status: number = 0) {
    super(message);
    this.name = new.target.name;
  }
}
/** An event failed validation (422); the message names the index and the field. */
export class EventError extends HivemindError {}
/** A write that would never apply; nothing of it was appended. */
export class WriteRefused extends EventError {}
/** A `note.created` reuses a note id (409 `note_exists`; ids are never reused). */
export class NoteExists extends WriteRefused {}
/** A use or forget of a note this agent cannot see (404 `unknown_note`). */
export class UnknownNote extends WriteRefused {}
/** Forgetting another author's note without `admin` (403 `not_allowed`). */
export class NotAllowed extends WriteRefused {}
/** A create names a note id outside this token's own id space (403 `foreign_note_id`, under
 * `HIVEMIND_NOTE_IDS=owned`): the same answer whether the id is taken or free. */
export class ForeignNoteId extends NotAllowed {}
/** A revision's `expectedVersion` is not the note's version: it moved on (409
 * `version_conflict`); nothing was written. */
export class VersionConflict extends WriteRefused {}
/** The token is missing or unknown (401), or lacks a right here (403). */
export class AccessDenied extends HivemindError {}
/** A body or batch over the server's cap (413). */
export class TooLarge extends HivemindError {}
/** A query request is invalid (the code is machine-readable). */
export class QueryError extends HivemindError {}
/** No answer before the deadline (504). */
export class QueryTimeout extends HivemindError {}
/** The server or its store could not be reached. */
export class StoreError extends HivemindError {}

const REFUSED: Record<string, typeof WriteRefused> = {
  note_exists: NoteExists,
  unknown_note: UnknownNote,
  not_allowed: NotAllowed,
  foreign_note_id: ForeignNoteId,
  version_conflict: VersionConflict,
};

/** The typed error of an HTTP error answer (as the Python SDK maps them). */
export function errorOf(status: number, code: string, message: string,
                        kind: "event" | "query"): HivemindError {
  const refused = REFUSED[code];
  if (refused !== undefined && kind === "event") return new refused(message, code, status);
  if (status === 401 || status === 403) {
    return new AccessDenied(`${status} ${code}: ${message}`, code, status);
  }
  if (status === 413) return new TooLarge(message, code, status);
  if (status === 504) return new QueryTimeout(message, code, status);
  if (status === 422 && kind === "event") return new EventError(message, code, status);
  if (status === 400 || status === 404 || status === 422) {
    return new QueryError(message, code, status);
  }
  return new StoreError(`${status} ${code}: ${message}`, code, status);
}

// -- ids and times ----------------------------------------------------------------------------
let lastMicros = 0n;
let seq = 0;

/** A unique id that sorts by creation time: `<prefix>-<µs hex><seq hex><random hex>` (the
 * Python SDK's format). */
export function newId(prefix: string): string {
  let us = BigInt(Date.now()) * 1000n;
  if (us <= lastMicros) {
    us = lastMicros;
    seq = (seq + 1) & 0xffff;
    if (seq === 0) us += 1n;
  } else {
    seq = 0;
  }
  lastMicros = us;
  const rand = Array.from(globalThis.crypto.getRandomValues(new Uint8Array(5)),
                          (b) => b.toString(16).padStart(2, "0")).join("");
  return `${prefix}-${us.toString(16).padStart(14, "0")}${seq.toString(16).padStart(4, "0")}${rand}`;
}

/** The clock, RFC 3339 in UTC. */
export function now(): string {
  return new Date().toISOString();
}

// -- recall -----------------------------------------------------------------------------------
/** `snake_case` as `camelCase` (`created_at` -> `createdAt`). */
type Camel<S extends string> =
  S extends `${infer H}_${infer T}` ? `${H}${Capitalize<Camel<T>>}` : S;

/** `T` with camelCase keys (types and optionality kept). */
type Camelized<T> = { [K in keyof T as K extends string ? Camel<K> : K]: T[K] };

type Signals = Schemas["NoteSignals"];

/** Where a packed passage sits in its note: `index` (from 0) of `count` passages, `start` and
 * `end` the character offsets of its text in the note's text, `rank` its place among the note's
 * passages that match when its score was lowered for it (the generated `Passage`). */
export type Passage = Schemas["Passage"];

/** One note of a recall, in context order: the result's note (`NoteSignals`, generated from
 * the server's OpenAPI document) with camelCase keys, `metadata` (empty: none) always set and
 * `passage` (a passage of a long note: `text` and `tokens` are the passage's) absent for the
 * whole note; `standsFor` (the near-identical notes it stands for, not packed beside it) and
 * `updates` (the older versions of the same fact it won over) always set, empty when none. */
export type RecalledNote = Camelized<
  Pick<Signals, "note_id" | "text" | "score" | "tokens" | "created_at" | "tier" | "uses">
  & { metadata: NonNullable<Signals["metadata"]>; passage?: NonNullable<Signals["passage"]>;
      stands_for: NonNullable<Signals["stands_for"]>; updates: NonNullable<Signals["updates"]> }>;

/** What `recall` found: `context` is ready to paste into a prompt (each note under a
 * `[note id | date]` header the server renders; the headers count in the budget). */
export interface Recall {
  context: string;
  notes: RecalledNote[];
  noteIds: string[];
  usedTokens: number;
  budget: number;
  queryId: string;
  /** No note was likely enough to be needed: the empty context is the answer. */
  nothingRelevant: boolean;
  /** The query's words that no note this agent may see holds (listed when the worker's
   * `unknown_word_factor` is under 1). */
  unknownWords: string[];
  /** The full result object. */
  result: QueryResult;
}

/** A `Recall` from a result object. */
export function recallOf(res: QueryResult): Recall {
  const notes = res.notes.map((n): RecalledNote => ({
    noteId: n.note_id, text: n.text, score: n.score, tokens: n.tokens, createdAt: n.created_at,
    tier: n.tier, uses: n.uses, metadata: n.metadata ?? {},
    ...(n.passage ? { passage: n.passage } : {}),
    standsFor: n.stands_for ?? [], updates: n.updates ?? [],
  }));
  return {
    context: res.context ?? notes.map((n) => n.text).join("\n\n"), notes,
    noteIds: [...new Set(notes.map((n) => n.noteId))],
    usedTokens: res.used, budget: res.budget, queryId: res.query_id,
    nothingRelevant: res.nothing_relevant ?? false, unknownWords: res.unknown_words ?? [],
    result: res,
  };
}

// -- the client -------------------------------------------------------------------------------
export interface MemoryOptions {
  /** The namespace (`^[a-z0-9][a-z0-9_-]{0,63}$`). */
  ns: string;
  /** The bearer token (it names the agent). */
  token?: string;
  /** Only for a server without tokens (loopback, one trusted user): who is writing. */
  agent?: string;
  /** How long one call may take, in milliseconds (default 35,000). */
  timeoutMs?: number;
  /** Another `fetch` (tests, proxies). */
  fetch?: typeof fetch;
}

export interface RememberOptions {
  kind?: "note" | "scratch";
  scope?: "shared" | "private";
  /** Default: a new time-ordered id. Ids are never reused, even after forgetting. */
  noteId?: string;
  tokens?: number;
  embedding?: number[];
  /** Notes this agent wrote that the new note replaces: they leave every future answer and
   * their uses carry over to it. */
  supersedes?: string[];
  /** String keys to strings, numbers or booleans (at most 32 keys); filters match on them. */
  metadata?: Record<string, string | number | boolean>;
  /** RFC 3339: from this time on the note is in no answer. */
  expiresAt?: string;
  /** Near-duplicates: `report` (default), `supersede` those this agent wrote, `keep` (report,
   * and store even the very text this agent already wrote), `ignore` (do not look). Except
   * with `keep` and `ignore`, a text this agent already wrote is not stored again. */
  duplicates?: "report" | "supersede" | "ignore" | "keep";
}

/** A metadata filter in LangGraph's form: `{k: v}`, or operators `$eq $ne $in $gt $gte $lt
 * $lte`; every condition must hold. */
export type Filter = Record<string, string | number | boolean | Record<string, unknown>>;

export interface QueryOptions {
  /** The state as of this time (RFC 3339); same log + same query -> same answer. */
  asOf?: string;
  explain?: boolean;
  embedding?: number[];
  config?: Record<string, unknown>;
  /** Only notes whose id starts with this are candidates. */
  idPrefix?: string;
  /** Only notes whose metadata matches are candidates (before ranking and packing). */
  filter?: Filter;
  /** Answer `context` too: the packed notes rendered, headers counted in the budget. */
  context?: boolean;
}

export interface RecallOptions extends QueryOptions {
  /** Tokens the notes may take together (default 1000). */
  budget?: number;
}

/** remember / recall / used / forget, reads, and the raw append / query / batch. */
export class Memory {
  readonly ns: string;
  private readonly base: string;
  private readonly token: string | undefined;
  private readonly agent: string | undefined;
  private readonly timeoutMs: number;
  private readonly fetchFn: typeof fetch;

  constructor(url: string, opts: MemoryOptions) {
    this.ns = opts.ns;
    this.base = `${url.replace(/\/+$/, "")}/v1/ns/${encodeURIComponent(opts.ns)}`;
    this.token = opts.token;
    this.agent = opts.agent;
    this.timeoutMs = opts.timeoutMs ?? 35_000;
    this.fetchFn = opts.fetch ?? globalThis.fetch;
  }

  private async call<T>(path: string, body: unknown, kind: "event" | "query",
                        method: "POST" | "DELETE" = "POST"): Promise<T> {
    const headers: Record<string, string> = {};
    if (method === "POST") headers["Content-Type"] = "application/json";
    if (this.token) headers.Authorization = `Bearer ${this.token}`;
    let resp: Response;
    try {
      resp = await this.fetchFn(this.base + path, {
        method, headers, body: method === "POST" ? JSON.stringify(body) : undefined,
        signal: AbortSignal.timeout(this.timeoutMs),
      });
    } catch (exc) {
      if (exc instanceof Error && exc.name === "TimeoutError") {
        throw new QueryTimeout(`no answer from ${this.base}${path} within ${this.timeoutMs} ms`,
                               "timeout", 0);
      }
      throw new StoreError(`cannot reach ${this.base}: ${String(exc)}`, "unreachable", 0);
    }
    const raw = await resp.text();
    if (resp.ok) return JSON.parse(raw) as T;
    let code = "http_error";
    let message = raw.slice(0, 500);
    try {
      const err = (JSON.parse(raw) as { error: { code: string; message: string } }).error;
      code = String(err.code);
      message = String(err.message);
    } catch {
      // not the contract's error object: keep the raw text
    }
    throw errorOf(resp.status, code, message, kind);
  }

  private fill(e: EventInput): Event {
    const ev = { event_id: newId("ev"), at: now(), ...e } as Event;
    if (this.agent && ev.agent === undefined) ev.agent = this.agent;
    return ev;
  }

  /** Append raw events (all or nothing); `event_id` and `at` are filled when absent. A retry
   * with the same `event_id` is applied once (`already` counts it). */
  async append(events: EventInput[]): Promise<Appended> {
    return this.call<Appended>("/events", events.map((e) => this.fill(e)), "event");
  }

  /** Store a note; returns its id (the existing note's when this agent already wrote the very
   * same text: nothing is stored again, see `rememberDetailed`). */
  async remember(text: string, opts: RememberOptions = {}): Promise<string> {
    return (await this.rememberDetailed(text, opts)).note_id;
  }

  /** `remember`, answering everything the server says: the near-duplicates it found,
   * `duplicate_of` (the twin the note was merged into), what the note superseded. */
  async rememberDetailed(text: string, opts: RememberOptions = {}): Promise<Remembered> {
    const body: Schemas["RememberBody"] = {
      text, note_id: opts.noteId ?? newId("n"), kind: opts.kind ?? "note",
      scope: opts.scope ?? "shared", event_id: newId("ev"), at: now(),
      duplicates: opts.duplicates ?? "report",
    };
    if (this.agent) body.agent = this.agent;
    if (opts.tokens !== undefined) body.tokens = opts.tokens;
    if (opts.embedding !== undefined) body.embedding = opts.embedding;
    if (opts.supersedes !== undefined && opts.supersedes.length) body.supersedes = opts.supersedes;
    if (opts.metadata !== undefined) body.metadata = opts.metadata;
    if (opts.expiresAt !== undefined) body.expires_at = opts.expiresAt;
    return this.call<Remembered>("/remember", body, "event");
  }

  /** The best notes for `query` that fit the budget, packed and ordered. */
  async recall(query: string, opts: RecallOptions = {}): Promise<Recall> {
    const { budget = 1000, ...rest } = opts;
    return recallOf(await this.query(query, budget, { ...rest, context: true }));
  }

  /** Say which notes the agent used (5 uses make a note permanent); returns how many uses
   * were recorded. `UnknownNote` (nothing recorded) if one is not a note this agent sees. */
  async used(...noteIds: string[]): Promise<number> {
    const got = await this.append(noteIds.map((n) => ({ type: "note.used", note_id: n })));
    return got.appended;
  }

  /** The note is gone from every future answer. `UnknownNote` if this agent cannot see it,
   * `NotAllowed` for another author's note (an admin's token may forget any). */
  async forget(noteId: string): Promise<void> {
    await this.append([{ type: "note.forgotten", note_id: noteId }]);
  }

  /** A new version of a note this agent wrote (or any, with an admin token): `text` replaces
   * its content; its id, uses and tier stay, and an answer as of before it shows the old
   * text. `UnknownNote` if this agent cannot see it, `NotAllowed` for another author's note.
   * `metadata` absent keeps the note's (`{}` clears it); `expectedVersion`: revise only if
   * the note is still at that version, else `VersionConflict` and nothing is written. */
  async revise(noteId: string, text: string, opts: {
    tokens?: number; kind?: "note" | "scratch"; embedding?: number[];
    metadata?: Record<string, string | number | boolean>; expectedVersion?: number;
  } = {}): Promise<void> {
    const { expectedVersion, ...rest } = opts;
    const ev: Record<string, unknown> = { type: "note.revised", note_id: noteId, text, ...rest };
    if (expectedVersion !== undefined) ev.expected_version = expectedVersion;
    await this.append([ev as unknown as EventInput]);
  }

  /** Erase a note: its text and embedding are removed from everything hivemind wrote (the
   * log is rewritten; replay gives the same state without the content), answered once that is
   * done. The token needs the namespace's `admin` right (else `AccessDenied`); `UnknownNote`
   * if the namespace has no such note. Erasing an erased note again redacts what is left and
   * answers `event_id` null. */
  async erase(noteId: string): Promise<Erased> {
    return this.call<Erased>(`/notes/${encodeURIComponent(noteId)}`, undefined, "event",
                             "DELETE");
  }

  private who(): { agent?: string } {
    return this.agent ? { agent: this.agent } : {};
  }

  private body(text: string, budget: number, opts: QueryOptions): QueryBody {
    const q: QueryBody = { text, budget };
    if (this.agent) q.agent = this.agent;
    if (opts.asOf !== undefined) q.as_of = opts.asOf;
    if (opts.explain) q.explain = true;
    if (opts.embedding !== undefined) q.embedding = opts.embedding;
    if (opts.config !== undefined) q.config = opts.config;
    if (opts.idPrefix) q.id_prefix = opts.idPrefix;
    if (opts.filter !== undefined) q.filter = opts.filter;
    if (opts.context) q.context = true;
    return q;
  }

  /** The contract's result object (an invalid query raises `QueryError`). */
  async query(text: string, budget: number, opts: QueryOptions = {}): Promise<QueryResult> {
    return this.call<QueryResult>("/query", this.body(text, budget, opts), "query");
  }

  /** Many queries at once (at most 1000); results, or error objects in place, in order. */
  async batch(requests: QueryBody[]): Promise<(QueryResult | QueryErrorObject)[]> {
    const reqs = requests.map((r) => (this.agent && r.agent === undefined
      ? { ...r, agent: this.agent } : r));
    return this.call<(QueryResult | QueryErrorObject)[]>("/queries", reqs, "query");
  }

  /** The note, if this agent may see it (its own writes included), else null. */
  async get(noteId: string): Promise<NoteRow | null> {
    const [row] = await this.readNotes([noteId]);
    return row ?? null;
  }

  /** The notes of `noteIds` this agent may see, in the order asked (at most 1000). */
  async readNotes(noteIds: string[]): Promise<NoteRow[]> {
    if (noteIds.length === 0) return [];
    return this.call<NoteRow[]>("/read", { note_ids: noteIds, ...this.who() }, "query");
  }

  /** The notes this agent may see whose id starts with `prefix`, in id order, after `after`,
   * at most `limit` (1..1000, default 100). */
  async notes(prefix = "", opts: { after?: string; limit?: number } = {}): Promise<NoteRow[]> {
    return this.call<NoteRow[]>("/read", {
      prefix, after: opts.after ?? "", limit: opts.limit ?? 100, ...this.who(),
    }, "query");
  }
}

/** Is this batch item an error object? */
export function isError(r: QueryResult | QueryErrorObject): r is QueryErrorObject {
  return "error" in r;
}
