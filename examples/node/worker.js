#!/usr/bin/env node
// A worker pool for an es-changefeed stream, in Node with ioredis.
//
// It keeps a mirror of the feed's documents in Redis and shows everything a
// consumer in any language has to do (docs/CONSUMING.md is the contract):
//
//   * read the stream in a consumer group (XREADGROUP), N consumers at once;
//   * apply each event idempotently: one Lua script compares the event's
//     order (2*seq_no, +1 for a delete) with the one the mirror holds for its
//     document (index_uuid, shard, id) and writes only if it is not older, so
//     a redelivered or reordered event is harmless;
//   * XACK an entry only after it was applied;
//   * reclaim the pending entries of consumers that died (XAUTOCLAIM);
//   * index_deleted drops the index; snapshot_end drops what the snapshot
//     after a resync no longer holds;
//   * a malformed entry, or one that keeps failing, goes to the feed's
//     dead-letter stream (escf:{feed}:dead), acknowledged in the same MULTI;
//   * history lost (entries removed before the group handled them) stops the
//     worker with exit code 1 and says what to do; it is recorded in
//     escf:{feed}:lost (as the Go consumers do), so that every later start
//     refuses the group too, until es-changefeed consume --bootstrap
//     re-initializes it;
//   * --apply-stdin applies the copy of such a bootstrap to the mirror (the
//     JSON lines of es-changefeed consume --bootstrap --bootstrap-only
//     --sink stdout, see examples/README.md).
//
//     node examples/node/worker.js --redis redis://localhost:6379/0 --feed orders --group mirror --consumers 3
//
// It runs from any directory (ioredis comes from examples/node/node_modules,
// which `make examples` installs). At start it prints where the mirror is
// and the redis-cli commands that show it.
//
// The mirror, under --mirror (default "mirror:{<feed>:<group>}"; the braces
// keep its keys in one Redis Cluster slot, as a Lua script needs):
//
//     <mirror>:docs:<index_uuid>   hash  "<shard>/<id>" -> document source (JSON)
//     <mirror>:fence:<index_uuid>  hash  "<shard>/<id>" -> "<order> <stream id>[ dropped]"
//     <mirror>:indices             hash  index_uuid -> index name
//     <mirror>:gone                set   uuids of deleted indices (never written again)
//     <mirror>:snapshots           set   stream ids of snapshot_start markers not yet closed
//     <mirror>:bootstrap           string while set, workers refuse to start: the mirror lost
//                                         history, or a bootstrap of it has not finished
//
// This example reads an unpartitioned feed (es-changefeed run without
// --partitions); for a partitioned one, run a pool per partition stream
// escf:{<feed>:<p>}:events, each with a mirror of its own.
'use strict';

const { fork } = require('node:child_process');
const os = require('node:os');
const { parseArgs } = require('node:util');
let Redis;
try {
  Redis = require('ioredis'); // from examples/node/node_modules, whatever the current directory
} catch (e) {
  if (e.code !== 'MODULE_NOT_FOUND') throw e;
  process.stderr.write(`worker.js needs ioredis (${__dirname}/package.json): run \`make examples\` in the repository, or \`npm ci\` in ${__dirname}\n`);
  process.exit(2);
}

// ---------------------------------------------------------------------------
// The mirror's Lua scripts (the same as examples/python/worker.py's). Orders
// and stream ids are compared as decimal strings: an order can pass 2^53,
// where Lua's numbers stop being exact.

const LUA_COMPARE = `
local function cmp_num(a, b)            -- decimal strings without leading zeros
  if #a ~= #b then return #a < #b and -1 or 1 end
  if a == b then return 0 end
  local n = #a
  if n <= 15 then return tonumber(a) < tonumber(b) and -1 or 1 end
  local ha, hb = tonumber(string.sub(a, 1, n - 15)), tonumber(string.sub(b, 1, n - 15))
  if ha ~= hb then return ha < hb and -1 or 1 end
  return tonumber(string.sub(a, n - 14)) < tonumber(string.sub(b, n - 14)) and -1 or 1
end
local function cmp_id(a, b)             -- stream ids "<ms>-<seq>"
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  local c = cmp_num(am, bm)
  if c ~= 0 then return c end
  return cmp_num(as, bs)
end
local function fence(v)                 -- "<order> <stream id>[ dropped]"
  local o, id, dropped = string.match(v, '^(%d+) (%d+%-%d+)(.*)$')
  return o, id, dropped ~= ''
end
`;

// KEYS: docs, fence, indices, gone. ARGV: uuid, "<shard>/<id>", order,
// stream id, op, source, index name. Returns 1 if written, 0 if refused.
const APPLY = LUA_COMPARE + `
if redis.call('SISMEMBER', KEYS[4], ARGV[1]) == 1 then return 0 end  -- the index was deleted
local cur = redis.call('HGET', KEYS[2], ARGV[2])
if cur then
  local order, stamp, dropped = fence(cur)
  local c = cmp_num(ARGV[3], order)
  if c < 0 then return 0 end                                        -- older than what we hold
  -- The same order again is a redelivery (refused) unless it comes later
  -- in the stream: a resync's snapshot sends unchanged documents again.
  -- A document a snapshot dropped takes only what came after that snapshot.
  if (c == 0 or dropped) and cmp_id(ARGV[4], stamp) <= 0 then return 0 end
end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3] .. ' ' .. ARGV[4])
if ARGV[5] == 'upsert' then
  redis.call('HSET', KEYS[1], ARGV[2], ARGV[6])
else
  redis.call('HDEL', KEYS[1], ARGV[2])
end
redis.call('HSET', KEYS[3], ARGV[1], ARGV[7])
return 1
`;

// KEYS: docs, fence. ARGV: "<shard>/<id>", the snapshot_start's stream id.
// Drops the document if nothing at or after that snapshot wrote it, and
// marks it, so that no event from before the snapshot brings it back.
const DROP_STALE = LUA_COMPARE + `
local cur = redis.call('HGET', KEYS[2], ARGV[1])
if not cur then return 0 end
local order, stamp, dropped = fence(cur)
if dropped or cmp_id(stamp, ARGV[2]) >= 0 then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], order .. ' ' .. ARGV[2] .. ' dropped')
return redis.call('HDEL', KEYS[1], ARGV[1])  -- 0 for a document deleted already
`;

// KEYS: docs, fence, indices, gone. ARGV: uuid. An index_deleted event.
const DROP_INDEX = `
redis.call('SADD', KEYS[4], ARGV[1])
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('HDEL', KEYS[3], ARGV[1])
return 1
`;

class BadEntry extends Error {}     // an entry that does not follow the contract
class NotYet extends Error {}       // cannot be applied yet: stays pending, retried

// HistoryLost: entries the group had not handled are gone. record: write it
// to escf:{feed}:lost and the mirror's bootstrap marker (found now; once the
// group has read past the gap, its ids no longer show it).
class HistoryLost extends Error {
  constructor(msg, record = true) {
    super(msg);
    this.record = record;
  }
}
const OPS = ['upsert', 'delete', 'index_deleted', 'snapshot_start', 'snapshot_end'];
const INT = /^-?\d+$/;

// parseEvent checks an entry's fields (all strings) as README "Event fields" says.
function parseEvent(fields) {
  const ev = { ...fields };
  if (!OPS.includes(fields.op)) throw new BadEntry(`unknown op ${JSON.stringify(fields.op)}`);
  if (fields.op === 'upsert' || fields.op === 'delete') {
    for (const name of ['index', 'index_uuid', 'shard', 'id', 'seq_no']) {
      if (!(name in fields)) throw new BadEntry(`field "${name}" missing`);
    }
    for (const name of ['shard', 'seq_no', 'primary_term', 'version']) {
      if (name in fields && !INT.test(fields[name])) throw new BadEntry(`field "${name}" = "${fields[name]}" is not an integer`);
    }
    ev.seq_no = BigInt(fields.seq_no); // may pass 2^53
    if (ev.seq_no < 0n) throw new BadEntry(`seq_no ${fields.seq_no} is negative`);
  }
  if (fields.op === 'upsert') isJSON(fields.source, 'source');
  if (fields.op === 'index_deleted' && !fields.index_uuid) throw new BadEntry('field "index_uuid" missing');
  if (fields.op === 'snapshot_end') isJSON(fields.counts, 'counts');
  return ev;
}

function isJSON(s, name) {
  try {
    if (s !== undefined) return JSON.parse(s);
  } catch { /* below */ }
  throw new BadEntry(`field "${name}" missing or not JSON`);
}

// order is the event's place in its document's history: deletes after upserts.
const order = (ev) => 2n * ev.seq_no + (ev.op === 'delete' ? 1n : 0n);

// cmpID compares stream ids "<ms>-<seq>".
function cmpID(a, b) {
  const [am, as] = a.split('-').map(BigInt);
  const [bm, bs] = b.split('-').map(BigInt);
  if (am !== bm) return am < bm ? -1 : 1;
  return as === bs ? 0 : as < bs ? -1 : 1;
}

// toFields turns Redis's flat [field, value, …] into an object.
function toFields(flat) {
  const o = {};
  for (let i = 0; flat && i < flat.length; i += 2) o[flat[i]] = flat[i + 1];
  return o;
}

// Mirror is the feed's documents, kept in Redis by the scripts above.
class Mirror {
  constructor(r, prefix) {
    this.r = r;
    this.prefix = prefix;
    r.defineCommand('escfApply', { numberOfKeys: 4, lua: APPLY });
    r.defineCommand('escfDropStale', { numberOfKeys: 2, lua: DROP_STALE });
    r.defineCommand('escfDropIndex', { numberOfKeys: 4, lua: DROP_INDEX });
  }

  keys(uuid) {
    const p = this.prefix;
    return [`${p}:docs:${uuid}`, `${p}:fence:${uuid}`, `${p}:indices`, `${p}:gone`];
  }

  get bootstrapKey() {
    return `${this.prefix}:bootstrap`;
  }

  // apply queues one upsert or delete on a pipeline.
  apply(pipe, streamID, ev) {
    pipe.escfApply(...this.keys(ev.index_uuid), ev.index_uuid, `${ev.shard}/${ev.id}`, order(ev).toString(),
      streamID, ev.op, ev.source ?? '', ev.index);
  }

  async indexDeleted(ev) {
    await this.r.escfDropIndex(...this.keys(ev.index_uuid), ev.index_uuid);
  }

  async snapshotStart(streamID) {
    await this.r.sadd(`${this.prefix}:snapshots`, streamID);
  }

  // snapshotEnd drops every document no event since the snapshot's start
  // wrote: it was deleted while the feed's state was lost. Call it only once
  // every entry before streamID is acknowledged (Consumer.barrier).
  async snapshotEnd(streamID) {
    const starts = (await this.r.smembers(`${this.prefix}:snapshots`)).filter((s) => cmpID(s, streamID) < 0);
    if (starts.length === 0) throw new NotYet(`snapshot_end ${streamID}: its snapshot_start is not applied yet`);
    const start = starts.reduce((a, b) => (cmpID(a, b) < 0 ? b : a));
    let dropped = 0;
    for (const uuid of await this.r.hkeys(`${this.prefix}:indices`)) dropped += await this.dropStaleIndex(uuid, start);
    await this.r.srem(`${this.prefix}:snapshots`, ...starts.filter((s) => cmpID(s, start) <= 0));
    return dropped;
  }

  // dropStaleIndex drops the documents of one index that nothing at or
  // after the stream id start wrote; it returns how many.
  async dropStaleIndex(uuid, start) {
    const [docs, fence] = this.keys(uuid);
    let dropped = 0;
    let cursor = '0';
    do {
      const [next, flat] = await this.r.hscan(fence, cursor, 'COUNT', 500);
      cursor = next;
      for (let i = 0; i < flat.length; i += 2) {
        const value = flat[i + 1];
        if (cmpID(value.split(' ')[1], start) < 0 && !value.endsWith(' dropped')) {
          dropped += await this.r.escfDropStale(docs, fence, flat[i], start);
        }
      }
    } while (cursor !== '0');
    return dropped;
  }
}

// ---------------------------------------------------------------------------
// History lost: see docs/CONSUMING.md "History lost" for the arithmetic.

// unreadGone: the entries after the group's last-delivered-id that were
// removed before it read them, from one XINFO STREAM and XINFO GROUPS alone
// (no XRANGE, so that it fits in the MULTI of a read): 0 when none, -1 when
// some were and Redis cannot tell how many. The rule of the Go code
// (redisx.GroupState): ids decide when they can, since counters can be stale
// (a promoted Redis 7.0 replica's entries-added and entries-read may
// disagree although nothing was lost).
function unreadGone(info, g) {
  const last = g['last-delivered-id'];
  const first = info['first-entry'] ? info['first-entry'][0] : null;
  if (first !== null && cmpID(first, last) <= 0) {
    // Trimming removes a prefix, which then ends before anything unread;
    // an XDEL after last-delivered-id removed an unread entry.
    return cmpID(last, info['max-deleted-entry-id']) < 0 ? -1 : 0;
  }
  const read = g['entries-read']; // everything still in the stream is unread
  if (read === null) return last === '0-0' ? info['entries-added'] - info.length : -1;
  return Math.max(info['entries-added'] - read - info.length, 0);
}

// missedEntries says how many entries the group never read are gone from
// the stream: 0 when none, -1 when some are and Redis cannot tell how many.
// The rule of unreadGone; when an XDEL removed an unread entry, the entries
// still after last-delivered-id tell how many (XRANGE).
async function missedEntries(r, stream, group) {
  // XINFO STREAM and XINFO GROUPS in one MULTI: one consistent view.
  const res = await r.multi().xinfo('STREAM', stream).xinfo('GROUPS', stream).exec();
  if (res[0][0]) return 0; // no stream yet
  const info = toFields(res[0][1]);
  const g = res[1][1].map(toFields).find((x) => x.name === group);
  if (!g) return 0;
  const n = unreadGone(info, g);
  const first = info['first-entry'] ? info['first-entry'][0] : null;
  if (n !== -1 || g['entries-read'] === null || first === null || cmpID(first, g['last-delivered-id']) > 0) return n;
  let after = 0;
  for (let start = `(${g['last-delivered-id']}`; ;) { // up to the end of the view above
    const page = await r.xrange(stream, start, info['last-generated-id'], 'COUNT', 1000);
    after += page.length;
    if (page.length < 1000) break;
    start = `(${page[page.length - 1][0]}`;
  }
  return Math.max(info['entries-added'] - g['entries-read'] - after, 1);
}

const goneWhat = (n) => (n < 0
  ? 'entries it had not read were removed from the stream (how many, Redis cannot tell)'
  : `${n} entries it had not read were removed from the stream`);

function historyLostMessage(stream, group, what) {
  return `history lost: group ${group} of ${stream}: ${what}. The mirror can no longer be trusted: ` +
    `re-initialize it (es-changefeed consume --group ${group} --bootstrap …, docs/CONSUMING.md "History lost")`;
}

// ---------------------------------------------------------------------------

// Consumer is one consumer of the group: a loop of read, apply, XACK, reclaim.
class Consumer {
  constructor(opts, name) {
    this.o = opts;
    this.name = name;
    this.r = new Redis(opts.redis, { maxRetriesPerRequest: null }); // commands wait through an outage
    this.stream = `escf:{${opts.feed}}:events`;
    this.dead = `escf:{${opts.feed}}:dead`;
    this.lost = `escf:{${opts.feed}}:lost`;
    this.mirror = new Mirror(this.r, opts.mirror || `mirror:{${opts.feed}:${opts.group}}`);
    this.stopping = false;
    this.stats = { applied: 0, refused: 0, acked: 0, reclaimed: 0, dead: 0, failed: 0 };
  }

  log(msg) {
    process.stderr.write(`${this.name}: ${msg}\n`);
  }

  // ensureGroup creates the group if missing. A new group at "0" would read
  // the feed from its start: refused if the stream no longer holds it.
  async ensureGroup() {
    let info = null;
    try {
      info = toFields(await this.r.xinfo('STREAM', this.stream));
      const groups = (await this.r.xinfo('GROUPS', this.stream)).map(toFields);
      if (groups.some((g) => g.name === this.o.group)) return;
    } catch (e) {
      if (!(e instanceof Redis.ReplyError)) throw e; // no stream yet: MKSTREAM below
    }
    let pos = '0';
    let read = 0;
    if (this.o.start === '$') {
      // The stream's end and its entry count from one XINFO, so that the
      // group's entries-read is known (the history check needs it).
      if (info) [pos, read] = [info['last-generated-id'], info['entries-added']];
    } else {
      const removed = info ? info['entries-added'] - info.length : 0;
      if (removed > 0) {
        throw new HistoryLost(`new group ${this.o.group}: ${this.stream} no longer holds the feed from its start ` +
          `(${removed} entries were removed): bootstrap the mirror (es-changefeed consume --group ${this.o.group} ` +
          `--bootstrap …, examples/README.md), or copy the indices yourself and start at the end with --start '$'`, false);
      }
    }
    try {
      await this.r.xgroup('CREATE', this.stream, this.o.group, pos, 'MKSTREAM', 'ENTRIESREAD', read);
      this.log(`created group ${this.o.group} at ${pos}`);
    } catch (e) {
      if (!String(e.message).startsWith('BUSYGROUP')) throw e; // another consumer was first
    }
  }

  // checkRecorded refuses the group while a loss is recorded for it (by this
  // example or a Go consumer), or while the mirror awaits a bootstrap.
  async checkRecorded() {
    const rec = await this.r.hget(this.lost, this.o.group);
    if (rec) {
      throw new HistoryLost(`history lost: group ${this.o.group} of ${this.stream}, recorded in ${this.lost} when it was ` +
        `found; the group stays refused until es-changefeed consume --group ${this.o.group} --bootstrap re-initializes it: ${rec}`, false);
    }
    const marker = await this.r.get(this.mirror.bootstrapKey);
    if (marker) {
      throw new HistoryLost(`group ${this.o.group}: the mirror ${this.mirror.prefix} awaits a bootstrap ` +
        `(${this.mirror.bootstrapKey}: ${marker}): pipe es-changefeed consume --group ${this.o.group} --bootstrap ` +
        '--bootstrap-only --sink stdout … into worker.js --apply-stdin (examples/README.md)', false);
    }
  }

  // recordLoss writes the loss where every later start finds it:
  // escf:{feed}:lost (field = group, the first one stays; status reports it
  // and es-changefeed consume --bootstrap clears it) and the mirror's
  // bootstrap marker (cleared by --apply-stdin once the copy is in).
  async recordLoss(err) {
    const writes = [[this.lost, () => this.r.hsetnx(this.lost, this.o.group, err.message)],
      [this.mirror.bootstrapKey, () => this.r.set(this.mirror.bootstrapKey, `needed: ${err.message}`, 'NX')]];
    for (const [what, write] of writes) {
      try {
        await write();
      } catch (e) {
        this.log(`cannot record the history loss in ${what}: ${e.message}`);
      }
    }
  }

  async checkHistory() {
    await this.checkRecorded();
    const n = await missedEntries(this.r, this.stream, this.o.group);
    if (n !== 0) throw new HistoryLost(historyLostMessage(this.stream, this.o.group, goneWhat(n)));
  }

  async run() {
    process.on('SIGTERM', () => { this.stopping = true; }); // the loop finishes its batch
    process.on('SIGINT', () => { this.stopping = true; });
    try {
      await this.checkRecorded();
      await this.ensureGroup();
      await this.checkHistory();
      const block = Math.max(1, Math.min(this.o.blockMs, Math.floor(this.o.minIdleMs / 2))); // reclaim on time
      await this.readOwnPending();
      let nextReclaim = 0;
      let nextCheck = Date.now() + this.o.checkInterval * 1000;
      while (!this.stopping) {
        if (Date.now() >= nextReclaim) {
          await this.reclaim();
          nextReclaim = Date.now() + this.o.minIdleMs / 2;
        }
        if (Date.now() >= nextCheck) {
          await this.checkHistory();
          nextCheck = Date.now() + this.o.checkInterval * 1000;
        }
        const reply = await this.readNew(block);
        for (const [, entries] of reply || []) await this.handle(entries, {});
      }
      this.log(`stopped: ${Object.entries(this.stats).map(([k, v]) => `${k} ${v}`).join(', ')}`);
    } catch (e) {
      if (e instanceof HistoryLost && e.record) await this.recordLoss(e);
      throw e;
    } finally {
      this.r.disconnect();
    }
  }

  // readNew reads new entries, only in one MULTI with XINFO STREAM and XINFO
  // GROUPS, so that a gap before them is seen before reading past it hides
  // it (they then stay pending, unapplied). When there are none, it waits for
  // the next entry with XREAD, which delivers nothing to the group, and
  // returns none: the caller's next read is checked too.
  async readNew(block) {
    const res = await this.r.multi().xinfo('STREAM', this.stream).xinfo('GROUPS', this.stream)
      .xreadgroup('GROUP', this.o.group, this.name, 'COUNT', this.o.count, 'STREAMS', this.stream, '>').exec();
    for (const [e] of res) if (e) throw e;
    const info = toFields(res[0][1]);
    const g = res[1][1].map(toFields).find((x) => x.name === this.o.group);
    const n = g ? unreadGone(info, g) : 0;
    if (n !== 0) throw new HistoryLost(historyLostMessage(this.stream, this.o.group, goneWhat(n)));
    if (!res[2][1]) await this.r.xread('COUNT', 1, 'BLOCK', block, 'STREAMS', this.stream, info['last-generated-id']);
    return res[2][1];
  }

  // readOwnPending: after a restart under the same name, our own pending entries first.
  async readOwnPending() {
    let start = '0';
    for (;;) {
      const reply = await this.r.xreadgroup('GROUP', this.o.group, this.name, 'COUNT', this.o.count,
        'STREAMS', this.stream, start);
      const entries = reply ? reply[0][1] : [];
      if (entries.length === 0) return;
      const gone = entries.filter(([, flat]) => flat === null).map(([id]) => id);
      if (gone.length > 0) {
        throw new HistoryLost(historyLostMessage(this.stream, this.o.group,
          `${gone.length} of this consumer's pending entries are gone (${gone[0]} …)`));
      }
      await this.handle(entries, await this.deliveryCounts(entries));
      start = entries[entries.length - 1][0];
    }
  }

  // reclaim: XAUTOCLAIM takes over entries pending longer than --min-idle-ms
  // (their consumer died, or failed them), walking the whole PEL.
  async reclaim() {
    let cursor = '0-0';
    do {
      const [next, entries, deleted] = await this.r.xautoclaim(this.stream, this.o.group, this.name,
        this.o.minIdleMs, cursor, 'COUNT', this.o.count);
      cursor = next;
      if (deleted && deleted.length > 0) {
        // Delivered, never acknowledged, and now gone: their events were
        // never applied. (Redis removed them from the PEL.)
        throw new HistoryLost(historyLostMessage(this.stream, this.o.group,
          `${deleted.length} pending entries are gone from the stream (${deleted[0]} …)`));
      }
      if (entries.length > 0) {
        this.stats.reclaimed += entries.length;
        await this.handle(entries, await this.deliveryCounts(entries));
      }
    } while (cursor !== '0-0');
  }

  async deliveryCounts(entries) {
    const pend = await this.r.xpending(this.stream, this.o.group, entries[0][0], entries[entries.length - 1][0], entries.length);
    return Object.fromEntries(pend.map(([id, , , n]) => [id, n]));
  }

  // handle applies a batch in stream order: runs of document events in one
  // pipeline, the other events alone; it acknowledges what was applied.
  async handle(entries, deliveries) {
    let run = [];
    for (const [id, flat] of entries) {
      const fields = toFields(flat);
      const n = deliveries[id] ?? 1;
      let ev;
      try {
        ev = parseEvent(fields);
      } catch (e) {
        if (!(e instanceof BadEntry)) throw e;
        await this.flush(run);
        run = [];
        await this.deadLetter(id, fields, e, n);
        continue;
      }
      if (ev.op === 'upsert' || ev.op === 'delete') {
        run.push({ id, ev, fields, n });
        continue;
      }
      await this.flush(run);
      run = [];
      try {
        await this.marker(id, ev);
        await this.r.xack(this.stream, this.o.group, id);
        this.stats.acked++;
      } catch (e) {
        if (!(e instanceof NotYet || e instanceof Redis.ReplyError)) throw e;
        await this.failed(id, fields, e, n);
      }
    }
    await this.flush(run);
  }

  async flush(run) {
    if (run.length === 0) return;
    const pipe = this.r.pipeline();
    for (const { id, ev } of run) this.mirror.apply(pipe, id, ev);
    const results = await pipe.exec();
    const done = [];
    for (let i = 0; i < run.length; i++) {
      const [err, res] = results[i];
      if (err) {
        await this.failed(run[i].id, run[i].fields, err, run[i].n); // stays pending
        continue;
      }
      this.stats[res === 1 ? 'applied' : 'refused']++;
      done.push(run[i].id);
    }
    if (done.length > 0) {
      await this.r.xack(this.stream, this.o.group, ...done);
      this.stats.acked += done.length;
    }
  }

  async marker(id, ev) {
    if (ev.op === 'index_deleted') {
      await this.mirror.indexDeleted(ev);
      this.log(`index ${ev.index} (${ev.index_uuid}) deleted: dropped its documents`);
    } else if (ev.op === 'snapshot_start') {
      await this.mirror.snapshotStart(id);
    } else if (ev.op === 'snapshot_end') {
      await this.barrier(id);
      const n = await this.mirror.snapshotEnd(id);
      this.log(`snapshot ended at ${id}: dropped ${n} documents it no longer holds`);
    }
  }

  // barrier waits until every entry before id is acknowledged by the group
  // (other consumers may still hold some), at most min-idle/2.
  async barrier(id) {
    const deadline = Date.now() + this.o.minIdleMs / 2;
    while ((await this.r.xpending(this.stream, this.o.group, '-', `(${id}`, 1)).length > 0) {
      if (Date.now() > deadline) throw new NotYet(`entries before ${id} are still pending`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }

  // failed: a failed entry stays pending and is reclaimed after
  // --min-idle-ms; after --max-deliveries it goes to the dead letters.
  async failed(id, fields, err, deliveries) {
    this.stats.failed++;
    if (deliveries >= this.o.maxDeliveries) await this.deadLetter(id, fields, err, deliveries);
    else this.log(`entry ${id} failed (delivery ${deliveries}): ${err.message}`);
  }

  // deadLetter, like the Go pool: the entry's fields plus why, in one MULTI with its XACK.
  async deadLetter(id, fields, err, deliveries) {
    const entry = { ...fields, error: err.message, deliveries: String(deliveries), group: this.o.group,
      consumer: this.name, stream_id: id, failed_at: new Date().toISOString() };
    const res = await this.r.multi().xadd(this.dead, '*', ...Object.entries(entry).flat())
      .xack(this.stream, this.o.group, id).exec();
    for (const [e] of res) if (e) throw e;
    this.stats.dead++;
    this.log(`entry ${id} dead-lettered to ${this.dead}: ${err.message}`);
  }
}

// ---------------------------------------------------------------------------
// --apply-stdin: a bootstrap of the mirror (examples/README.md, "Bootstrap").

// jsonMembers returns the members of a line holding one JSON object: name ->
// [value, the value's text as it is in the line], so that a document's
// source is stored byte for byte and integers stay exact (JSON.parse rounds
// those past 2^53).
function jsonMembers(line) {
  let obj;
  try {
    obj = JSON.parse(line);
  } catch (e) {
    throw new BadEntry(`not JSON: ${e.message}`);
  }
  if (obj === null || typeof obj !== 'object' || Array.isArray(obj)) throw new BadEntry('not a JSON object');
  // JSON.parse checked the line: the scan below only finds where values end.
  const ws = (i) => {
    while (i < line.length && ' \t\n\r'.includes(line[i])) i++;
    return i;
  };
  const stringEnd = (i) => { // i at the opening quote
    for (i++; line[i] !== '"'; i++) if (line[i] === '\\') i++;
    return i + 1;
  };
  const valueEnd = (i) => {
    if (line[i] === '"') return stringEnd(i);
    if (line[i] !== '{' && line[i] !== '[') {
      while (i < line.length && !',}] \t\n\r'.includes(line[i])) i++;
      return i;
    }
    for (let depth = 0; ;) {
      const c = line[i];
      if (c === '"') {
        i = stringEnd(i);
        continue;
      }
      if (c === '{' || c === '[') depth++;
      else if ((c === '}' || c === ']') && --depth === 0) return i + 1;
      i++;
    }
  };
  const out = new Map();
  for (let i = ws(0) + 1; ;) { // after "{"
    i = ws(i);
    if (line[i] === '}') return out;
    if (line[i] === ',') i = ws(i + 1);
    const nameEnd = stringEnd(i);
    const name = JSON.parse(line.slice(i, nameEnd));
    i = ws(ws(nameEnd) + 1); // past ":"
    const end = valueEnd(i);
    out.set(name, [obj[name], line.slice(i, end)]);
    i = end;
  }
}

// The JSON type of each field of the stdout sink's lines (the stream's
// fields, typed: redisx.Event.MarshalJSON); any other field is a string.
const JSON_INTS = ['shard', 'seq_no', 'primary_term', 'version'];
const JSON_OBJECTS = ['source', 'counts'];

// parseLine makes of one line of es-changefeed's stdout sink the event
// parseEvent makes of a stream entry: the same checks, plus the JSON types.
function parseLine(line) {
  const fields = {};
  for (const [name, [value, raw]] of jsonMembers(line)) {
    let want = null;
    if (JSON_INTS.includes(name)) {
      if (!INT.test(raw)) want = 'an integer';
    } else if (JSON_OBJECTS.includes(name)) {
      if (value === null || typeof value !== 'object' || Array.isArray(value)) want = 'an object';
    } else if (typeof value !== 'string') {
      want = 'a string';
    }
    if (want) throw new BadEntry(`field "${name}" = ${raw.slice(0, 80)}: want ${want}`);
    fields[name] = typeof value === 'string' ? value : raw;
  }
  const ev = parseEvent(fields);
  if ((ev.op === 'snapshot_start' || ev.op === 'snapshot_end') && !(fields.index && fields.index_uuid)) {
    throw new BadEntry(`${ev.op} without index and index_uuid: not a line of a bootstrap copy`);
  }
  return ev;
}

// stdinLines yields the lines of stdin as bytes (decoded by the caller, so
// that a line that is not UTF-8 is an error, not replaced characters).
async function* stdinLines() {
  let buf = Buffer.alloc(0);
  for await (const chunk of process.stdin) {
    buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
    for (let i; (i = buf.indexOf(10)) >= 0; buf = buf.subarray(i + 1)) yield buf.subarray(0, i);
  }
  if (buf.length > 0) yield buf;
}

// Applier (--apply-stdin) applies the copy of es-changefeed consume --group G
// --bootstrap --bootstrap-only --sink stdout to the mirror, with the
// workers' fence, stamped with the stream position the bootstrap recorded
// (P): the copy's documents then order after every event the mirror applied
// (all at or before P) and before every event the workers read next (all
// after P). At each index's snapshot_end it drops what the copy did not
// write (documents deleted while history was lost); once es-changefeed has
// moved the group to P, those of indices the feed no longer follows. The
// mirror's bootstrap marker keeps the workers off until all of it is done.
class Applier {
  constructor(opts) {
    this.o = opts;
    this.r = new Redis(opts.redis);
    this.stream = `escf:{${opts.feed}}:events`;
    this.hold = `escf-bootstrap:${opts.group}`; // es-changefeed's holding group
    this.mirror = new Mirror(this.r, opts.mirror || `mirror:{${opts.feed}:${opts.group}}`);
    this.position = null;
    this.batch = [];
    this.copied = new Map();
    this.ended = new Set();
    this.dropped = 0;
  }

  log(msg) {
    process.stderr.write(`apply-stdin: ${msg}\n`);
  }

  // run returns 0 once every line is applied and es-changefeed positioned
  // the group; 1, loudly, on a bad line, a short copy or a failed bootstrap
  // (the marker stays: run the pipeline again).
  async run(lines) {
    try {
      return await this.apply(lines);
    } finally {
      this.r.disconnect();
    }
  }

  async apply(lines) {
    await this.r.set(this.mirror.bootstrapKey,
      `bootstrap of group ${this.o.group} running since ${new Date().toISOString()} (pid ${process.pid})`);
    const utf8 = new TextDecoder('utf-8', { fatal: true });
    let n = 0;
    for await (const raw of lines) {
      n++;
      if (this.position === null) {
        this.position = await this.recordedPosition();
        if (this.position === null) return 1;
        this.log(`applying the copy of group ${this.o.group}'s bootstrap to ${this.mirror.prefix}, stamped ${this.position} (the recorded position)`);
      }
      let line = '';
      try {
        try {
          line = utf8.decode(raw);
        } catch (e) {
          throw new BadEntry(`not UTF-8 (${e.message})`);
        }
        await this.event(parseLine(line));
      } catch (e) {
        if (!(e instanceof BadEntry)) throw e;
        this.log(`line ${n}: ${e.message}: ${raw.toString('utf8').trim().slice(0, 200)}`);
        this.log(`stopped: the mirror stays refused to the workers (${this.mirror.bootstrapKey}); run the bootstrap again`);
        return 1;
      }
    }
    await this.flush();
    if (n === 0) {
      this.log('no line on stdin: es-changefeed consume --bootstrap failed before its copy (see its error); run it again');
      return 1;
    }
    const problem = await this.unfinished();
    if (problem) {
      this.log(`${problem} after ${n} lines; run the bootstrap again (the mirror stays refused to the workers)`);
      return 1;
    }
    await this.sweep();
    await this.r.del(this.mirror.bootstrapKey);
    const copied = [...this.copied.values()].reduce((a, b) => a + b, 0);
    this.log(`done: ${copied} documents copied in ${this.ended.size} indices, ${this.dropped} dropped; group ${this.o.group} reads on after ${this.position}: start the workers`);
    return 0;
  }

  async groups() {
    return new Map((await this.r.xinfo('GROUPS', this.stream)).map(toFields).map((g) => [g.name, g]));
  }

  // recordedPosition is P: where es-changefeed holds the stream with its
  // holding group during the copy, or, once it moved the group there (a
  // short copy can be all written before this reads it), the group's.
  async recordedPosition() {
    const groups = await this.groups();
    const g = groups.get(this.hold) || groups.get(this.o.group);
    if (g) return g['last-delivered-id'];
    this.log(`no bootstrap of group ${this.o.group} is running (${this.stream} has no group ${this.hold}): pipe ` +
      `es-changefeed consume --group ${this.o.group} --bootstrap --bootstrap-only --sink stdout into this; ` +
      'the mirror stays refused to the workers until one is applied');
    return null;
  }

  async event(ev) {
    if (ev.op === 'upsert' || ev.op === 'delete') {
      this.batch.push(ev);
      if (this.batch.length >= 200) await this.flush();
      return;
    }
    await this.flush();
    const uuid = ev.index_uuid;
    if (ev.op === 'snapshot_start') {
      this.copied.set(uuid, 0);
    } else if (ev.op === 'snapshot_end') {
      const want = JSON.parse(ev.counts)[ev.index] ?? 0;
      if (!this.copied.has(uuid) || this.copied.get(uuid) < want) {
        throw new BadEntry(`snapshot_end of ${ev.index} (${uuid}) counts ${want} documents, ${this.copied.get(uuid) ?? 0} came since its snapshot_start`);
      }
      const dropped = await this.mirror.dropStaleIndex(uuid, this.position);
      this.dropped += dropped;
      this.ended.add(uuid);
      this.log(`index ${ev.index} (${uuid}): ${this.copied.get(uuid)} documents copied, ${dropped} the source no longer has dropped`);
    } else if (ev.op === 'index_deleted') {
      await this.mirror.indexDeleted(ev);
    }
  }

  async flush() {
    if (this.batch.length === 0) return;
    const pipe = this.r.pipeline();
    for (const ev of this.batch) this.mirror.apply(pipe, this.position, ev);
    for (const [err] of await pipe.exec()) if (err) throw err; // loud, and the marker stays
    for (const ev of this.batch) {
      if (ev.op === 'upsert') this.copied.set(ev.index_uuid, (this.copied.get(ev.index_uuid) ?? 0) + 1);
    }
    this.batch = [];
  }

  // unfinished says why the bootstrap did not finish ('' if it did):
  // es-changefeed drops its holding group in the MULTI that moves the group
  // to P, after the last line; a copy cut short leaves it.
  async unfinished() {
    const groups = await this.groups();
    if (groups.has(this.hold)) return `es-changefeed did not finish the bootstrap (its holding group ${this.hold} is still there: see its error)`;
    if (!groups.has(this.o.group)) return `group ${this.o.group} does not exist`;
    if (await this.r.hexists(`escf:{${this.o.feed}}:lost`, this.o.group)) return `a history loss is still recorded for group ${this.o.group}`;
    return '';
  }

  // sweep drops the documents of indices the copy did not cover and the
  // feed no longer follows (deleted while history was lost).
  async sweep() {
    const followed = new Set(await this.r.hkeys(`escf:{${this.o.feed}}:indices`));
    for (const uuid of await this.r.hkeys(`${this.mirror.prefix}:indices`)) {
      if (this.ended.has(uuid)) continue;
      if (followed.has(uuid)) {
        this.log(`index ${uuid} is followed by the feed but was not copied (closed, or not in --index): its documents stay as they were`);
        continue;
      }
      const dropped = await this.mirror.dropStaleIndex(uuid, this.position);
      this.dropped += dropped;
      if ((await this.r.hlen(this.mirror.keys(uuid)[0])) === 0) await this.r.hdel(`${this.mirror.prefix}:indices`, uuid);
      this.log(`index ${uuid} is no longer in the feed: dropped its ${dropped} documents`);
    }
  }
}

// runConsumer is a process's life: 0 after SIGTERM, 1 when history was lost.
async function runConsumer(opts, name) {
  try {
    await new Consumer(opts, name).run();
    return 0;
  } catch (e) {
    if (!(e instanceof HistoryLost)) throw e;
    process.stderr.write(`${name}: ${e.message}\n`);
    return 1;
  }
}

// shownURL is the Redis URL without its password, for what the worker prints.
function shownURL(url) {
  return url.replace(/^(\w+:\/\/[^:@/]*):[^@/]*@/, '$1:<password>@');
}

// whereMessage says where the mirror is, and the redis-cli commands that show it.
function whereMessage(o) {
  const prefix = o.mirror || `mirror:{${o.feed}:${o.group}}`;
  const cli = `redis-cli -u ${shownURL(o.redis)}`;
  return `worker: mirroring feed ${o.feed} (group ${o.group}) into ${shownURL(o.redis)} under ${prefix}; look at it with:\n` +
    `  ${cli} HGETALL '${prefix}:indices'    # index uuid -> index name\n` +
    `  ${cli} HGETALL '${prefix}:docs:<index uuid>'    # "<shard>/<id>" -> document source\n`;
}

async function main() {
  const { values: v } = parseArgs({
    options: {
      redis: { type: 'string', default: 'redis://localhost:6379/0' },
      feed: { type: 'string', default: 'default' },
      group: { type: 'string' },
      consumer: { type: 'string', default: `${os.hostname()}-${process.pid}` }, // with --consumers N: <name>-1 … <name>-N
      consumers: { type: 'string', default: '1' }, // consumer processes to run
      start: { type: 'string', default: '0' }, // where a new group starts: 0 or $
      mirror: { type: 'string' }, // key prefix of the mirror (default "mirror:{<feed>:<group>}")
      count: { type: 'string', default: '100' }, // entries per read
      'block-ms': { type: 'string', default: '2000' },
      'min-idle-ms': { type: 'string', default: '60000' }, // reclaim entries pending this long
      'max-deliveries': { type: 'string', default: '10' },
      'check-interval': { type: 'string', default: '30' }, // seconds between history checks
      'apply-stdin': { type: 'boolean', default: false }, // apply a bootstrap's copy from stdin, then exit (examples/README.md)
    },
  });
  if (!v.group || !['0', '$'].includes(v.start)) {
    process.stderr.write('usage: node examples/node/worker.js --group G [--redis URL] [--feed F] [--consumers N] [--start 0|$] …\n');
    process.exit(2);
  }
  const opts = { redis: v.redis, feed: v.feed, group: v.group, start: v.start, mirror: v.mirror,
    count: Number(v.count), blockMs: Number(v['block-ms']), minIdleMs: Number(v['min-idle-ms']),
    maxDeliveries: Number(v['max-deliveries']), checkInterval: Number(v['check-interval']) };
  if (v['apply-stdin']) process.exit(await new Applier(opts).run(stdinLines()));
  const consumers = Number(v.consumers);
  if (!process.send) process.stderr.write(whereMessage(opts)); // once: not again in the pool's forks
  if (consumers <= 1) process.exit(await runConsumer(opts, v.consumer));

  // A pool of processes; SIGTERM is passed on, each drains its batch.
  const args = process.argv.slice(2);
  const children = [];
  for (let i = 1; i <= consumers; i++) {
    children.push(fork(__filename, [...args, '--consumers', '1', '--consumer', `${v.consumer}-${i}`]));
  }
  for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => children.forEach((c) => c.kill('SIGTERM')));
  let status = 0;
  await Promise.all(children.map((c) => new Promise((resolve) => c.on('exit', (code, signal) => {
    if (code !== 0 && signal !== 'SIGTERM') {
      status = 1; // one stopped (history lost): stop the others
      children.forEach((o) => o.exitCode === null && o.kill('SIGTERM'));
    }
    resolve();
  }))));
  process.exit(status);
}

main().catch((e) => {
  process.stderr.write(`worker: ${e.stack || e}\n`);
  process.exit(1);
});
