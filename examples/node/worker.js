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
//     worker with exit code 1 and says what to do.
//
//     node worker.js --redis redis://localhost:6379/0 --feed orders --group mirror --consumers 3
//
// The mirror, under --mirror (default "mirror:{<feed>:<group>}"; the braces
// keep its keys in one Redis Cluster slot, as a Lua script needs):
//
//     <mirror>:docs:<index_uuid>   hash  "<shard>/<id>" -> document source (JSON)
//     <mirror>:fence:<index_uuid>  hash  "<shard>/<id>" -> "<order> <stream id>[ dropped]"
//     <mirror>:indices             hash  index_uuid -> index name
//     <mirror>:gone                set   uuids of deleted indices (never written again)
//     <mirror>:snapshots           set   stream ids of snapshot_start markers not yet closed
//
// This example reads an unpartitioned feed (es-changefeed run without
// --partitions); for a partitioned one, run a pool per partition stream
// escf:{<feed>:<p>}:events, each with a mirror of its own.
'use strict';

const { fork } = require('node:child_process');
const os = require('node:os');
const { parseArgs } = require('node:util');
const Redis = require('ioredis');

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
class HistoryLost extends Error {}  // entries the group had not handled are gone
class NotYet extends Error {}       // cannot be applied yet: stays pending, retried

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
    for (const uuid of await this.r.hkeys(`${this.prefix}:indices`)) {
      const [docs, fence] = this.keys(uuid);
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
    }
    await this.r.srem(`${this.prefix}:snapshots`, ...starts.filter((s) => cmpID(s, start) <= 0));
    return dropped;
  }
}

// ---------------------------------------------------------------------------
// History lost: see docs/CONSUMING.md "History lost" for the arithmetic.

// missedEntries says how many entries the group never read are gone from
// the stream (0 when none), or null when Redis cannot tell.
async function missedEntries(r, stream, group) {
  // XINFO STREAM and XINFO GROUPS in one MULTI: one consistent view.
  const res = await r.multi().xinfo('STREAM', stream).xinfo('GROUPS', stream).exec();
  if (res[0][0]) return 0; // no stream yet
  const info = toFields(res[0][1]);
  const g = res[1][1].map(toFields).find((x) => x.name === group);
  if (!g) return 0;
  const last = g['last-delivered-id'];
  let read = g['entries-read'];
  if (read === null) {
    // Unknown: XDEL inside the group's range, or a group created at an id
    // without ENTRIESREAD. An entry deleted after last-delivered-id was
    // lost all the same.
    if (last === '0-0') read = 0;
    else if (cmpID(info['max-deleted-entry-id'], last) > 0) return 1;
    else return null;
  }
  const first = info['first-entry'] ? info['first-entry'][0] : null;
  let after = 0;
  if (first === null || cmpID(first, last) > 0) {
    after = info.length; // everything still in the stream is unread
  } else { // count the unread entries still there, up to the view's end
    let start = `(${last}`;
    for (;;) {
      const page = await r.xrange(stream, start, info['last-generated-id'], 'COUNT', 1000);
      after += page.length;
      if (page.length < 1000) break;
      start = `(${page[page.length - 1][0]}`;
    }
  }
  return info['entries-added'] - read - after;
}

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
          `--bootstrap …), or copy the indices yourself and start at the end with --start '$'`);
      }
    }
    try {
      await this.r.xgroup('CREATE', this.stream, this.o.group, pos, 'MKSTREAM', 'ENTRIESREAD', read);
      this.log(`created group ${this.o.group} at ${pos}`);
    } catch (e) {
      if (!String(e.message).startsWith('BUSYGROUP')) throw e; // another consumer was first
    }
  }

  async checkHistory() {
    const n = await missedEntries(this.r, this.stream, this.o.group);
    if (n === null) this.log("cannot tell whether history was lost (the group's entries-read is unknown)");
    else if (n > 0) {
      throw new HistoryLost(historyLostMessage(this.stream, this.o.group,
        `${n} entries it had not read were removed from the stream`));
    }
  }

  async run() {
    process.on('SIGTERM', () => { this.stopping = true; }); // the loop finishes its batch
    process.on('SIGINT', () => { this.stopping = true; });
    try {
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
        const reply = await this.r.xreadgroup('GROUP', this.o.group, this.name, 'COUNT', this.o.count,
          'BLOCK', block, 'STREAMS', this.stream, '>');
        for (const [, entries] of reply || []) await this.handle(entries, {});
      }
      this.log(`stopped: ${Object.entries(this.stats).map(([k, v]) => `${k} ${v}`).join(', ')}`);
    } finally {
      this.r.disconnect();
    }
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
    },
  });
  if (!v.group || !['0', '$'].includes(v.start)) {
    process.stderr.write('usage: node worker.js --group G [--redis URL] [--feed F] [--consumers N] [--start 0|$] …\n');
    process.exit(2);
  }
  const opts = { redis: v.redis, feed: v.feed, group: v.group, start: v.start, mirror: v.mirror,
    count: Number(v.count), blockMs: Number(v['block-ms']), minIdleMs: Number(v['min-idle-ms']),
    maxDeliveries: Number(v['max-deliveries']), checkInterval: Number(v['check-interval']) };
  const consumers = Number(v.consumers);
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
