// The TypeScript client against a real `hivemind serve` (started here): the agent's calls,
// ids and times filled, typed errors, reads, the raw query and batch.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import {
  AccessDenied, EventError, HivemindError, isError, Memory, newId, NoteExists, NotAllowed,
  QueryError, UnknownNote, VersionConflict, type QueryResult, type RecalledNote,
} from "../src/index.js";
import { ALICE, BOB, OPS, serve, type Served } from "./serve.js";

// `RecalledNote` is derived from the generated result note (`NoteSignals`): its public face,
// checked by `tsc` (a renamed or retyped field of the server's answer fails the build).
type Same<A, B> = (<T>() => T extends A ? 1 : 2) extends (<T>() => T extends B ? 1 : 2)
  ? true : false;
const recalledNoteFace: Same<RecalledNote, {
  noteId: string; text: string; score: number; tokens: number; createdAt: string;
  tier: "longterm" | "scratch" | "short"; uses: number;
  metadata: Record<string, string | number | boolean>;
  passage?: { index: number; count: number; start: number; end: number; rank?: number };
  standsFor: string[]; updates: string[];
}> = true;
void recalledNoteFace;

let srv: Served;
let alice: Memory;
let bob: Memory;

before(async () => {
  srv = await serve();
  alice = new Memory(srv.base, { ns: "team-a", token: ALICE });
  bob = new Memory(srv.base, { ns: "team-a", token: BOB });
});

after(async () => {
  await srv.stop();
});

describe("ids and times", () => {
  it("makes unique, valid, time-ordered ids", () => {
    const ids = Array.from({ length: 5000 }, () => newId("ev"));
    assert.equal(new Set(ids).size, ids.length);
    assert.deepEqual([...ids].sort(), ids);
    for (const id of ids) assert.match(id, /^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$/);
  });
});

describe("metadata, filters, expiry and conditional revision", () => {
  it("filters on metadata before packing, drops expired notes, refuses a stale revision",
     async () => {
    const a = await alice.remember("the ts rover lands on mars", {
      metadata: { mission: "ares", crew: 4 } });
    await alice.remember("the ts rover lands on the moon", {
      metadata: { mission: "luna", crew: 2 } });
    await alice.remember("the ts rover lands nowhere", { expiresAt: "2001-01-01T00:00:00Z" });
    const got = await alice.recall("ts rover lands", { budget: 500,
                                                      filter: { crew: { $gte: 3 } } });
    assert.deepEqual(got.noteIds, [a]);
    assert.deepEqual(got.notes[0]?.metadata, { mission: "ares", crew: 4 });
    const every = await alice.recall("ts rover lands", { budget: 500 });
    assert.equal(every.notes.length, 2);  // the expired note is in no answer
    const none = await alice.query("ts rover", 500, { filter: { mission: { $in: ["x"] } } });
    assert.deepEqual(none.notes, []);
    await assert.rejects(alice.query("ts rover", 50, { filter: { mission: { $like: "a" } } }),
                         (e: unknown) => e instanceof QueryError && e.code === "invalid_request");
    await alice.revise(a, "the ts rover lands on mars at dawn", { expectedVersion: 1,
                                                                 metadata: { mission: "ares2" } });
    await assert.rejects(alice.revise(a, "a lost update", { expectedVersion: 1 }),
                         (e: unknown) => e instanceof VersionConflict && e.status === 409);
    const row = await alice.get(a);
    assert.ok(row && row.version === 2 && row.text.endsWith("at dawn"));
    assert.deepEqual(row.metadata, { mission: "ares2" });
  });
});

describe("what a packed note stands for", () => {
  it("packs near-identical notes once and names the others in standsFor", async () => {
    const text = "The ts billing cron runs at 02:00 UTC on the primary";
    const a = await alice.remember(text, { duplicates: "ignore" });
    const b = await bob.remember(text, { duplicates: "ignore" });
    const got = await bob.recall("ts billing cron primary", { budget: 500 });
    const twins = got.notes.filter((n) => n.noteId === a || n.noteId === b);
    assert.equal(twins.length, 1);
    assert.deepEqual([twins[0]!.noteId, ...twins[0]!.standsFor].sort(), [a, b].sort());
    assert.ok(got.notes.every((n) => Array.isArray(n.updates) && Array.isArray(n.standsFor)));
    assert.ok(got.notes.filter((n) => !twins.includes(n)).every((n) => n.standsFor.length === 0));
  });
});

describe("an agent's calls", () => {
  it("remembers, recalls with headers, uses and forgets", async () => {
    const id = await alice.remember("Deploys happen on Tuesdays after 14:00 UTC.");
    assert.match(id, /^n-/);
    const secret = await alice.remember("alice's deploy key hint: tuesdays", { scope: "private" });
    await bob.remember("scratch: maybe deploy on wednesdays", { kind: "scratch",
                                                                noteId: "scratch@@bob" });

    const got = await bob.recall("when do deploys happen on tuesdays", { budget: 500 });
    assert.ok(got.noteIds.includes(id) && !got.noteIds.includes(secret));
    const mine = got.notes.find((n) => n.noteId === id);
    assert.ok(mine && mine.tier === "short" && mine.createdAt.endsWith("Z"));
    assert.ok(got.context.includes(`[${id} | ${mine.createdAt.slice(0, 10)}]\nDeploys happen`));
    assert.ok(got.usedTokens <= got.budget && got.budget === 500);
    const tight = await bob.recall("deploys tuesdays wednesdays", { budget: 30 });
    assert.ok(tight.notes.length >= 1 && Math.ceil(Buffer.byteLength(tight.context) / 4) <= 30);
    // her private note first; in a namespace this small the nearest notes by meaning follow
    assert.equal((await alice.recall("key hint", { budget: 500 })).noteIds[0], secret);

    assert.equal(await bob.used(id), 1);
    await bob.forget("scratch@@bob");
    assert.ok(!(await bob.recall("deploy wednesdays")).noteIds.includes("scratch@@bob"));

    // reads: what the agent may see, its own writes included
    const note = await bob.get(id);
    assert.ok(note && note.agent === "alice" && note.uses === 1 && note.text.startsWith("Deploys"));
    assert.equal(await bob.get(secret), null);
    assert.equal((await alice.get(secret))?.scope, "private");
    assert.equal(await bob.get("scratch@@bob"), null);
  });

  it("reads by id prefix, paged, and recalls within one prefix", async () => {
    for (const [nid, text] of [["grp.a:1@@bob", "grouped one"], ["grp.a:2@@bob", "grouped two"],
                               ["grp.ab:1@@bob", "grouped other"]] as const) {
      await bob.remember(text, { noteId: nid });
    }
    assert.deepEqual((await bob.notes("grp.a:")).map((n) => n.note_id), ["grp.a:1@@bob", "grp.a:2@@bob"]);
    assert.deepEqual((await bob.notes("grp.", { limit: 2 })).map((n) => n.note_id),
                     ["grp.a:1@@bob", "grp.a:2@@bob"]);
    assert.deepEqual((await bob.notes("grp.", { after: "grp.a:2@@bob" })).map((n) => n.note_id),
                     ["grp.ab:1@@bob"]);
    const got = await bob.recall("grouped", { idPrefix: "grp.a:" });
    assert.deepEqual([...got.noteIds].sort(), ["grp.a:1@@bob", "grp.a:2@@bob"]);
  });

  it("fills event ids, so a retried append applies once", async () => {
    const ev = { type: "note.created" as const, note_id: "retried@@alice", text: "retried once",
                 event_id: newId("ev") };
    const first = await alice.append([ev]);
    assert.deepEqual([first.appended, first.already], [1, 0]);
    const again = await alice.append([ev]);
    assert.deepEqual([again.appended, again.already, again.event_ids], [1, 1, [ev.event_id]]);
    const filled = await alice.append([{ type: "note.used", note_id: "retried@@alice" }]);
    assert.match(filled.event_ids[0] ?? "", /^ev-/);
  });
});

describe("typed errors", () => {
  it("refuses writes that would never apply", async () => {
    const id = await alice.remember("only alice may forget this");
    await assert.rejects(alice.remember("again", { noteId: id }), (e: unknown) =>
      e instanceof NoteExists && e.status === 409 && e.code === "note_exists"
      && e.message.includes("already exists"));
    await assert.rejects(bob.used("no-such-note"), (e: unknown) =>
      e instanceof UnknownNote && e.status === 404 && e.message.includes("no-such-note"));
    await assert.rejects(bob.forget(id), (e: unknown) =>
      e instanceof NotAllowed && e.status === 403);
    await assert.rejects(bob.remember(""), (e: unknown) =>
      e instanceof EventError && !(e instanceof NoteExists) && e.message.includes("$.text"));
    assert.ok(new NoteExists("x") instanceof HivemindError);
  });

  it("names access and query errors", async () => {
    await assert.rejects(new Memory(srv.base, { ns: "team-b", token: ALICE }).recall("x"),
                         (e: unknown) => e instanceof AccessDenied && e.status === 403);
    await assert.rejects(new Memory(srv.base, { ns: "team-a", token: "wrong-wrong-wrong" })
      .recall("x"), (e: unknown) => e instanceof AccessDenied && e.status === 401);
    await assert.rejects(alice.recall("x", { budget: 0 }), (e: unknown) =>
      e instanceof QueryError && e.message.includes("budget"));
  });
});

describe("revise", () => {
  it("revises a note (same id, new text, version 2); only its author may", async () => {
    const id = await alice.remember("Deploys go through ArgoCD.");
    await alice.revise(id, "Deploys go through Flux.");
    const got = await alice.get(id);
    assert.equal(got?.text, "Deploys go through Flux.");
    await assert.rejects(bob.revise(id, "bob's version"), (e: unknown) =>
      e instanceof NotAllowed);
    await assert.rejects(alice.revise("no-such-note", "x"), (e: unknown) =>
      e instanceof UnknownNote);
  });

  it("supersedes a note: it leaves the answers, its uses carry over", async () => {
    const old = await alice.remember("The staging cluster is kube-staging-1.");
    await alice.used(old);
    const neu = await alice.remember("The staging cluster is kube-staging-2.",
                                     { supersedes: [old] });
    assert.equal(await alice.get(old), null);
    const got = await alice.get(neu);
    assert.equal(got?.uses, 1);
  });
});

describe("twins", () => {
  it("stores the same sentence once: the second and third remember name the first", async () => {
    const text = "The canary stage of a deploy runs for thirty minutes.";
    const first = await alice.rememberDetailed(text);
    assert.equal(first.duplicate_of ?? null, null);
    const second = await alice.rememberDetailed("the CANARY stage of a deploy  runs for thirty minutes.");
    assert.equal(second.duplicate_of, first.note_id);
    assert.equal(second.note_id, first.note_id);
    assert.equal(await alice.remember(text), first.note_id);
    const kept = await alice.rememberDetailed(text, { duplicates: "keep" });
    assert.notEqual(kept.note_id, first.note_id);
    assert.ok(kept.duplicates?.some((d) => d.note_id === first.note_id && d.overlap === 1));
    // another agent's same words are its own note, reported as a near-duplicate
    const bobs = await bob.rememberDetailed(text);
    assert.equal(bobs.duplicate_of ?? null, null);
    assert.notEqual(bobs.note_id, first.note_id);
  });
});

describe("raw query and batch", () => {
  it("answers the contract's result object; as-of answers are reproducible", async () => {
    await alice.append([{ type: "note.created", note_id: "old-fact@@alice", at: "2026-05-01T09:00:00Z",
                          text: "The old fact about releases." }]);
    const q = { asOf: "2026-06-01T00:00:00Z", explain: true };
    const res: QueryResult = await alice.query("releases", 200, q);
    assert.equal(res.as_of, "2026-06-01T00:00:00Z");
    assert.deepEqual(res.notes.map((n) => n.note_id), ["old-fact@@alice"]);
    assert.ok(Array.isArray(res.candidates));
    assert.deepEqual(await alice.query("releases", 200, q), res);
  });

  it("keeps the order and puts error objects in place", async () => {
    const out = await bob.batch([{ text: "grouped", budget: 100 }, { text: "x", budget: 0 },
                                 { text: "releases", budget: 100 }]);
    assert.equal(out.length, 3);
    const [a, b, c] = out;
    assert.ok(a && !isError(a) && a.notes.length > 0);
    assert.ok(b && isError(b) && b.error.code === "invalid_request");
    assert.ok(c && !isError(c) && c.agent === "bob");
  });

  it("lets an admin token forget another author's note", async () => {
    const id = await alice.remember("an operator may forget this");
    await new Memory(srv.base, { ns: "team-a", token: OPS }).forget(id);
    assert.equal(await alice.get(id), null);
  });

  it("erases a note for an admin token only, once its content is gone", async () => {
    const ops = new Memory(srv.base, { ns: "team-a", token: OPS });
    const id = await alice.remember("the vault passphrase is orange-kettle-42");
    assert.ok((await bob.recall("vault passphrase", { budget: 200 })).noteIds.includes(id));
    await assert.rejects(alice.erase(id), AccessDenied);  // its author is no admin
    await assert.rejects(ops.erase("never-was"), UnknownNote);
    const got = await ops.erase(id);
    assert.equal(got.note_id, id);
    assert.match(got.event_id ?? "", /^erase-/);
    assert.ok(Object.values(got.redacted).every((n) => Number.isInteger(n) && n >= 0));
    // the one log entry with the content is redacted, by this call or by the worker's
    // redaction job first: redacted_in_all says so either way
    assert.equal(got.redacted_in_all.log_entries, 1);
    assert.equal(await alice.get(id), null);
    const after = await bob.recall("vault passphrase orange kettle", { budget: 200 });
    assert.ok(!after.noteIds.includes(id) && !after.context.includes("orange-kettle"));
    const again = await ops.erase(id);  // erased before: what is left is redacted, no event
    assert.equal(again.note_id, id);
    assert.equal(again.event_id, null);
    assert.equal(again.redacted.log_entries, 0);  // nothing left for this call
    assert.equal(again.redacted_in_all.log_entries, 1);
  });
});
