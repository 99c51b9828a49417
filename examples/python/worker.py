#!/usr/bin/env python3
"""A worker pool for an es-changefeed stream, in Python with redis-py.

It keeps a mirror of the feed's documents in Redis and shows everything a
consumer in any language has to do (docs/CONSUMING.md is the contract):

  * read the stream in a consumer group (XREADGROUP), N consumers at once;
  * apply each event idempotently: one Lua script compares the event's
    order (2*seq_no, +1 for a delete) with the one the mirror holds for its
    document (index_uuid, shard, id) and writes only if it is not older, so
    a redelivered or reordered event is harmless;
  * XACK an entry only after it was applied;
  * reclaim the pending entries of consumers that died (XAUTOCLAIM);
  * index_deleted drops the index; snapshot_end drops what the snapshot
    after a resync no longer holds;
  * a malformed entry, or one that keeps failing, goes to the feed's
    dead-letter stream (escf:{feed}:dead), acknowledged in the same MULTI;
  * history lost (entries removed before the group handled them) stops the
    worker with exit code 1 and says what to do; it is recorded in
    escf:{feed}:lost (as the Go consumers do), so that every later start
    refuses the group too, until es-changefeed consume --bootstrap
    re-initializes it;
  * --apply-stdin applies the copy of such a bootstrap to the mirror (the
    JSON lines of es-changefeed consume --bootstrap --bootstrap-only
    --sink stdout, see examples/README.md).

    python3 examples/python/worker.py --redis redis://localhost:6379/0 --feed orders --group mirror --consumers 3

It runs from any directory. Without redis-py it runs itself again with the
python of the venv `make examples` installs (ESCF_EXAMPLES_VENV, default
~/.cache/escf-examples/venv). At start it prints where the mirror is and
the redis-cli commands that show it.

The mirror, under --mirror (default "mirror:{<feed>:<group>}"; the braces
keep its keys in one Redis Cluster slot, as a Lua script needs):

    <mirror>:docs:<index_uuid>   hash  "<shard>/<id>" -> document source (JSON)
    <mirror>:fence:<index_uuid>  hash  "<shard>/<id>" -> "<order> <stream id>[ dropped]"
    <mirror>:indices             hash  index_uuid -> index name
    <mirror>:gone                set   uuids of deleted indices (never written again)
    <mirror>:snapshots           set   stream ids of snapshot_start markers not yet closed
    <mirror>:bootstrap           string while set, workers refuse to start: the mirror lost
                                        history, or a bootstrap of it has not finished

This example reads an unpartitioned feed (es-changefeed run without
--partitions); for a partitioned one, run a pool per partition stream
escf:{<feed>:<p>}:events, each with a mirror of its own stamps.
"""

import argparse
import json
import multiprocessing
import multiprocessing.connection
import os
import re
import signal
import socket
import sys
import time
from datetime import datetime, timezone

try:
    import redis
except ImportError:
    # Run by a python without redis-py: run again with the venv of `make
    # examples`, whatever the current directory.
    _venv = os.environ.get("ESCF_EXAMPLES_VENV") or os.path.expanduser("~/.cache/escf-examples/venv")
    _py = os.path.join(_venv, "bin", "python")
    if os.access(_py, os.X_OK) and os.path.realpath(sys.prefix) != os.path.realpath(_venv):
        os.execv(_py, [_py] + sys.argv)
    sys.exit("worker.py needs redis-py (%s): run `make examples` in the repository (it installs it in the venv %s, "
             "which this script then uses by itself), or pip install -r that file" % (
                 os.path.join(os.path.dirname(os.path.abspath(__file__)), "requirements.txt"), _venv))

# ---------------------------------------------------------------------------
# The mirror's Lua scripts. Orders and stream ids are compared as decimal
# strings: an order can pass 2^53, where Lua's numbers stop being exact.

LUA_COMPARE = """
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
"""

# KEYS: docs, fence, indices, gone. ARGV: uuid, "<shard>/<id>", order,
# stream id, op, source, index name. Returns 1 if written, 0 if refused.
APPLY = LUA_COMPARE + """
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
"""

# KEYS: docs, fence. ARGV: "<shard>/<id>", the snapshot_start's stream id.
# Drops the document if nothing at or after that snapshot wrote it, and
# marks it, so that no event from before the snapshot brings it back.
DROP_STALE = LUA_COMPARE + """
local cur = redis.call('HGET', KEYS[2], ARGV[1])
if not cur then return 0 end
local order, stamp, dropped = fence(cur)
if dropped or cmp_id(stamp, ARGV[2]) >= 0 then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], order .. ' ' .. ARGV[2] .. ' dropped')
return redis.call('HDEL', KEYS[1], ARGV[1])  -- 0 for a document deleted already
"""

# KEYS: docs, fence, indices, gone. ARGV: uuid. An index_deleted event.
DROP_INDEX = """
redis.call('SADD', KEYS[4], ARGV[1])
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('HDEL', KEYS[3], ARGV[1])
return 1
"""


class BadEntry(Exception):
    """A stream entry that does not follow the contract."""


class HistoryLost(Exception):
    """Entries the group had not handled are gone from the stream. record:
    write it to escf:{feed}:lost and the mirror's bootstrap marker (found
    now; once the group has read past the gap, its ids no longer show it)."""

    def __init__(self, msg, record=True):
        super().__init__(msg)
        self.record = record


class NotYet(Exception):
    """An event that cannot be applied yet (it stays pending; retried)."""


def parse_event(fields):
    """Checks an entry's fields (all strings) as README "Event fields" says."""
    op = fields.get("op")
    if op not in ("upsert", "delete", "index_deleted", "snapshot_start", "snapshot_end"):
        raise BadEntry("unknown op %r" % op)
    ev = dict(fields)
    if op in ("upsert", "delete"):
        for name in ("index", "index_uuid", "shard", "id", "seq_no"):
            if name not in fields:
                raise BadEntry("field %r missing" % name)
        for name in ("shard", "seq_no", "primary_term", "version"):
            if name in fields:
                try:
                    ev[name] = int(fields[name])
                except ValueError:
                    raise BadEntry("field %r = %r is not an integer" % (name, fields[name])) from None
        if ev["seq_no"] < 0:
            raise BadEntry("seq_no %d is negative" % ev["seq_no"])
    if op == "upsert":
        try:
            json.loads(fields["source"])
        except (KeyError, ValueError):
            raise BadEntry('field "source" missing or not JSON') from None
    if op == "index_deleted" and not fields.get("index_uuid"):
        raise BadEntry('field "index_uuid" missing')
    if op == "snapshot_end":
        try:
            json.loads(fields["counts"])
        except (KeyError, ValueError):
            raise BadEntry('field "counts" missing or not JSON') from None
    return ev


def order(ev):
    """The event's place in its document's history: deletes after upserts."""
    return 2 * ev["seq_no"] + (1 if ev["op"] == "delete" else 0)


def id_key(stream_id):
    """A stream id as a tuple that sorts like the id."""
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


class Mirror:
    """The documents of the feed, kept in Redis by the scripts above."""

    def __init__(self, r, prefix):
        self.r, self.prefix = r, prefix
        self.apply_script = r.register_script(APPLY)
        self.drop_stale = r.register_script(DROP_STALE)
        self.drop_index = r.register_script(DROP_INDEX)

    def keys(self, uuid):
        p = self.prefix
        return [p + ":docs:" + uuid, p + ":fence:" + uuid, p + ":indices", p + ":gone"]

    @property
    def bootstrap_key(self):
        return self.prefix + ":bootstrap"

    def apply(self, pipe, stream_id, ev):
        """Queues one upsert or delete on a pipeline."""
        field = "%d/%s" % (ev["shard"], ev["id"])
        self.apply_script(keys=self.keys(ev["index_uuid"]), client=pipe,
                          args=[ev["index_uuid"], field, str(order(ev)), stream_id, ev["op"],
                                ev.get("source", ""), ev["index"]])

    def index_deleted(self, ev):
        self.drop_index(keys=self.keys(ev["index_uuid"]), args=[ev["index_uuid"]])

    def snapshot_start(self, stream_id):
        self.r.sadd(self.prefix + ":snapshots", stream_id)

    def snapshot_end(self, stream_id):
        """Drops every document no event since the snapshot's start wrote:
        it was deleted while the feed's state was lost. Call it only once
        every entry before stream_id is acknowledged (Consumer.barrier)."""
        starts = [s for s in self.r.smembers(self.prefix + ":snapshots") if id_key(s) < id_key(stream_id)]
        if not starts:
            raise NotYet("snapshot_end %s: its snapshot_start is not applied yet" % stream_id)
        start = max(starts, key=id_key)
        dropped = sum(self.drop_stale_index(uuid, start) for uuid in self.r.hkeys(self.prefix + ":indices"))
        self.r.srem(self.prefix + ":snapshots", *[s for s in starts if id_key(s) <= id_key(start)])
        return dropped

    def drop_stale_index(self, uuid, start):
        """Drops the documents of one index that nothing at or after the
        stream id start wrote; returns how many."""
        keys, dropped = self.keys(uuid)[:2], 0
        for field, value in self.r.hscan_iter(keys[1], count=500):
            if id_key(value.split(" ")[1]) < id_key(start) and not value.endswith(" dropped"):
                dropped += self.drop_stale(keys=keys, args=[field, start])
        return dropped


# ---------------------------------------------------------------------------
# History lost: see docs/CONSUMING.md "History lost" for the arithmetic.

def history_snapshot(r, stream, group):
    """XINFO STREAM and XINFO GROUPS in one MULTI: one consistent view."""
    with r.pipeline(transaction=True) as p:
        p.xinfo_stream(stream)
        p.xinfo_groups(stream)
        info, groups = p.execute()
    return info, next((g for g in groups if g["name"] == group), None)


def unread_gone(info, g):
    """The entries after the group's last-delivered-id that were removed
    before it read them, from one XINFO STREAM and XINFO GROUPS alone (no
    XRANGE, so that it fits in the MULTI of a read): 0 when none, -1 when
    some were and Redis cannot tell how many. The rule of the Go code
    (redisx.GroupState): ids decide when they can, since counters can be
    stale (a promoted Redis 7.0 replica's entries-added and entries-read
    may disagree although nothing was lost)."""
    last = g["last-delivered-id"]
    first = info["first-entry"][0] if info["first-entry"] else None
    if first is not None and id_key(first) <= id_key(last):
        # Trimming removes a prefix, which then ends before anything
        # unread; an XDEL after last-delivered-id removed an unread entry.
        return -1 if id_key(last) < id_key(info["max-deleted-entry-id"]) else 0
    read = g["entries-read"]  # everything still in the stream is unread
    if read is None:
        return info["entries-added"] - info["length"] if last == "0-0" else -1
    return max(info["entries-added"] - read - info["length"], 0)


def missed_entries(r, stream, group):
    """How many entries the group never read are gone from the stream: 0
    when none, -1 when some are and Redis cannot tell how many. The rule
    of unread_gone; when an XDEL removed an unread entry, the entries
    still after last-delivered-id tell how many (XRANGE)."""
    try:
        info, g = history_snapshot(r, stream, group)
    except redis.ResponseError:
        return 0  # no stream yet
    if g is None:
        return 0
    n, first = unread_gone(info, g), info["first-entry"]
    if n != -1 or g["entries-read"] is None or first is None or id_key(first[0]) > id_key(g["last-delivered-id"]):
        return n
    after, start = 0, "(" + g["last-delivered-id"]
    while True:  # up to the end of the view of history_snapshot
        page = r.xrange(stream, start, info["last-generated-id"], count=1000)
        after += len(page)
        if len(page) < 1000:
            break
        start = "(" + page[-1][0]
    return max(info["entries-added"] - g["entries-read"] - after, 1)


def gone_what(n):
    if n < 0:
        return "entries it had not read were removed from the stream (how many, Redis cannot tell)"
    return "%d entries it had not read were removed from the stream" % n


def history_lost_message(stream, group, what):
    return ("history lost: group %s of %s: %s. The mirror can no longer be trusted: "
            "re-initialize it (es-changefeed consume --group %s --bootstrap …, "
            "docs/CONSUMING.md \"History lost\")" % (group, stream, what, group))


# ---------------------------------------------------------------------------


class Consumer:
    """One consumer of the group: a loop of read, apply, XACK, reclaim."""

    def __init__(self, args, name):
        self.args, self.name = args, name
        self.r = redis.Redis.from_url(args.redis, decode_responses=True)
        self.stream = "escf:{%s}:events" % args.feed
        self.dead = "escf:{%s}:dead" % args.feed
        self.lost = "escf:{%s}:lost" % args.feed
        self.mirror = Mirror(self.r, args.mirror or "mirror:{%s:%s}" % (args.feed, args.group))
        self.stopping = False
        self.stats = dict(applied=0, refused=0, acked=0, reclaimed=0, dead=0, failed=0)

    def log(self, msg):
        print("%s: %s" % (self.name, msg), file=sys.stderr, flush=True)

    def ensure_group(self):
        """Creates the group if missing. A new group at "0" would read the
        feed from its start: refused if the stream no longer holds it."""
        try:
            info = self.r.xinfo_stream(self.stream)
            if any(g["name"] == self.args.group for g in self.r.xinfo_groups(self.stream)):
                return
        except redis.ResponseError:
            info = None  # no stream yet: MKSTREAM below
        if self.args.start == "$":
            # The stream's end and its entry count from one XINFO, so that
            # the group's entries-read is known (the history check needs it).
            pos, read = (info["last-generated-id"], info["entries-added"]) if info else ("0", 0)
        else:
            removed = info["entries-added"] - info["length"] if info else 0
            if removed > 0:
                raise HistoryLost(
                    "new group %s: %s no longer holds the feed from its start (%d entries were removed): "
                    "bootstrap the mirror (es-changefeed consume --group %s --bootstrap …, examples/README.md), "
                    "or copy the indices yourself and start at the end with --start '$'" % (
                        self.args.group, self.stream, removed, self.args.group), record=False)
            pos, read = "0", 0
        try:
            self.r.xgroup_create(self.stream, self.args.group, pos, mkstream=True, entries_read=read)
            self.log("created group %s at %s" % (self.args.group, pos))
        except redis.ResponseError as e:
            if not str(e).startswith("BUSYGROUP"):  # another consumer was first
                raise

    def check_recorded(self):
        """Refuses the group while a loss is recorded for it (by this
        example or a Go consumer), or while the mirror awaits a bootstrap."""
        rec = self.r.hget(self.lost, self.args.group)
        if rec:
            raise HistoryLost("history lost: group %s of %s, recorded in %s when it was found; the group stays "
                              "refused until es-changefeed consume --group %s --bootstrap re-initializes it: %s" % (
                                  self.args.group, self.stream, self.lost, self.args.group, rec), record=False)
        marker = self.r.get(self.mirror.bootstrap_key)
        if marker:
            raise HistoryLost("group %s: the mirror %s awaits a bootstrap (%s: %s): pipe es-changefeed consume "
                              "--group %s --bootstrap --bootstrap-only --sink stdout … into worker.py --apply-stdin "
                              "(examples/README.md)" % (self.args.group, self.mirror.prefix, self.mirror.bootstrap_key,
                                                        marker, self.args.group), record=False)

    def record_loss(self, err):
        """Writes the loss where every later start finds it: escf:{feed}:lost
        (field = group, the first one stays; status reports it and
        es-changefeed consume --bootstrap clears it) and the mirror's
        bootstrap marker (cleared by --apply-stdin once the copy is in)."""
        for what, write in ((self.lost, lambda: self.r.hsetnx(self.lost, self.args.group, str(err))),
                            (self.mirror.bootstrap_key, lambda: self.r.set(self.mirror.bootstrap_key, "needed: " + str(err), nx=True))):
            try:
                write()
            except redis.RedisError as e:
                self.log("cannot record the history loss in %s: %s" % (what, e))

    def check_history(self):
        self.check_recorded()
        n = missed_entries(self.r, self.stream, self.args.group)
        if n:
            raise HistoryLost(history_lost_message(self.stream, self.args.group, gone_what(n)))

    def run(self):
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        self.check_recorded()
        self.ensure_group()
        self.check_history()
        min_idle = self.args.min_idle_ms
        block = max(1, min(self.args.block_ms, min_idle // 2))  # reclaim on time
        self.read_own_pending()
        next_reclaim, next_check = 0.0, time.monotonic() + self.args.check_interval
        while not self.stopping:
            try:
                now = time.monotonic()
                if now >= next_reclaim:
                    self.reclaim()
                    next_reclaim = now + min_idle / 2000
                if now >= next_check:
                    self.check_history()
                    next_check = now + self.args.check_interval
                reply = self.read_new(block)
                for _, entries in reply or []:
                    self.handle(entries, {})
            except (redis.ConnectionError, redis.TimeoutError) as e:
                # What was read and not acknowledged stays pending: it is
                # read again (or reclaimed), and the fence makes that harmless.
                self.log("Redis failed (%s); retrying in 1s" % e)
                time.sleep(1)
        self.log("stopped: " + ", ".join("%s %d" % kv for kv in self.stats.items()))

    def read_new(self, block):
        """New entries, read only in one MULTI with XINFO STREAM and XINFO
        GROUPS, so that a gap before them is seen before reading past it
        hides it (they then stay pending, unapplied). When there are none,
        it waits for the next entry with XREAD, which delivers nothing to
        the group, and returns none: the caller's next read is checked too."""
        with self.r.pipeline(transaction=True) as p:
            p.xinfo_stream(self.stream)
            p.xinfo_groups(self.stream)
            p.xreadgroup(self.args.group, self.name, {self.stream: ">"}, count=self.args.count)
            info, groups, reply = p.execute()
        g = next((g for g in groups if g["name"] == self.args.group), None)
        n = unread_gone(info, g) if g else 0
        if n:
            raise HistoryLost(history_lost_message(self.stream, self.args.group, gone_what(n)))
        if not reply:
            self.r.xread({self.stream: info["last-generated-id"]}, count=1, block=block)
        return reply

    def stop(self, *_):
        self.stopping = True  # the loop finishes its batch, then returns

    def read_own_pending(self):
        """After a restart under the same name: our own pending entries first."""
        start = "0"
        while True:
            reply = self.r.xreadgroup(self.args.group, self.name, {self.stream: start}, count=self.args.count)
            entries = reply[0][1] if reply else []
            if not entries:
                return
            gone = [i for i, fields in entries if not fields]
            if gone:
                raise HistoryLost(history_lost_message(self.stream, self.args.group,
                                                       "%d of this consumer's pending entries are gone (%s …)" % (len(gone), gone[0])))
            self.handle(entries, self.delivery_counts(entries))
            start = entries[-1][0]

    def reclaim(self):
        """XAUTOCLAIM: take over entries pending longer than --min-idle-ms
        (their consumer died, or failed them), walking the whole PEL."""
        cursor = "0-0"
        while True:
            cursor, entries, deleted = self.r.xautoclaim(self.stream, self.args.group, self.name,
                                                         self.args.min_idle_ms, cursor, count=self.args.count)
            if deleted:
                # Delivered, never acknowledged, and now gone: their events
                # were never applied. (Redis removed them from the PEL.)
                raise HistoryLost(history_lost_message(self.stream, self.args.group,
                                                       "%d pending entries are gone from the stream (%s …)" % (len(deleted), deleted[0])))
            if entries:
                self.stats["reclaimed"] += len(entries)
                self.handle(entries, self.delivery_counts(entries))
            if cursor == "0-0":
                return

    def delivery_counts(self, entries):
        pend = self.r.xpending_range(self.stream, self.args.group, entries[0][0], entries[-1][0], len(entries))
        return {p["message_id"]: p["times_delivered"] for p in pend}

    def handle(self, entries, deliveries):
        """Applies a batch in stream order: runs of document events in one
        pipeline, the other events alone; acknowledges what was applied."""
        run = []
        for stream_id, fields in entries:
            n = deliveries.get(stream_id, 1)
            try:
                ev = parse_event(fields)
            except BadEntry as e:
                self.flush(run)
                run = []
                self.dead_letter(stream_id, fields, e, n)
                continue
            if ev["op"] in ("upsert", "delete"):
                run.append((stream_id, ev, fields, n))
                continue
            self.flush(run)
            run = []
            try:
                self.marker(stream_id, ev)
                self.r.xack(self.stream, self.args.group, stream_id)
                self.stats["acked"] += 1
            except (NotYet, redis.RedisError) as e:
                self.failed(stream_id, fields, e, n)
        self.flush(run)

    def flush(self, run):
        if not run:
            return
        pipe = self.r.pipeline(transaction=False)
        for stream_id, ev, _, _ in run:
            self.mirror.apply(pipe, stream_id, ev)
        results = pipe.execute(raise_on_error=False)
        done = []
        for (stream_id, _, fields, n), res in zip(run, results):
            if isinstance(res, Exception):
                self.failed(stream_id, fields, res, n)  # stays pending
                continue
            self.stats["applied" if res == 1 else "refused"] += 1
            done.append(stream_id)
        if done:
            self.r.xack(self.stream, self.args.group, *done)
            self.stats["acked"] += len(done)

    def marker(self, stream_id, ev):
        if ev["op"] == "index_deleted":
            self.mirror.index_deleted(ev)
            self.log("index %s (%s) deleted: dropped its documents" % (ev.get("index"), ev["index_uuid"]))
        elif ev["op"] == "snapshot_start":
            self.mirror.snapshot_start(stream_id)
        elif ev["op"] == "snapshot_end":
            self.barrier(stream_id)
            n = self.mirror.snapshot_end(stream_id)
            self.log("snapshot ended at %s: dropped %d documents it no longer holds" % (stream_id, n))

    def barrier(self, stream_id):
        """Waits until every entry before stream_id is acknowledged by the
        group (other consumers may still hold some), at most min-idle/2."""
        deadline = time.monotonic() + self.args.min_idle_ms / 2000
        while self.r.xpending_range(self.stream, self.args.group, "-", "(" + stream_id, 1):
            if time.monotonic() > deadline:
                raise NotYet("entries before %s are still pending" % stream_id)
            time.sleep(0.05)

    def failed(self, stream_id, fields, err, deliveries):
        """A failed entry stays pending and is reclaimed after --min-idle-ms;
        after --max-deliveries it goes to the dead letters."""
        self.stats["failed"] += 1
        if deliveries >= self.args.max_deliveries:
            self.dead_letter(stream_id, fields, err, deliveries)
        else:
            self.log("entry %s failed (delivery %d): %s" % (stream_id, deliveries, err))

    def dead_letter(self, stream_id, fields, err, deliveries):
        """Like the Go pool: the entry's fields plus why, in one MULTI with its XACK."""
        entry = dict(fields)
        entry.update({"error": str(err), "deliveries": str(deliveries), "group": self.args.group,
                      "consumer": self.name, "stream_id": stream_id,
                      "failed_at": datetime.now(timezone.utc).isoformat()})
        with self.r.pipeline(transaction=True) as p:
            p.xadd(self.dead, entry)
            p.xack(self.stream, self.args.group, stream_id)
            p.execute()
        self.stats["dead"] += 1
        self.log("entry %s dead-lettered to %s: %s" % (stream_id, self.dead, err))


# ---------------------------------------------------------------------------
# --apply-stdin: a bootstrap of the mirror (examples/README.md, "Bootstrap").

_WS = re.compile(r"[ \t\n\r]*")


def _no_constant(name):
    raise ValueError("%s is not JSON" % name)


def json_members(line):
    """The members of a line holding one JSON object: name -> (value, the
    value's text as it is in the line), so that a document's source is
    stored byte for byte and integers stay exact."""
    dec = json.JSONDecoder(parse_constant=_no_constant)
    try:
        obj = dec.decode(line)  # the whole line, nothing after the object
    except ValueError as e:
        raise BadEntry("not JSON: %s" % e) from None
    if not isinstance(obj, dict):
        raise BadEntry("not a JSON object")
    out, i = {}, _WS.match(line).end() + 1  # after "{"
    while True:
        i = _WS.match(line, i).end()
        if line[i] == "}":
            return out
        if line[i] == ",":
            i = _WS.match(line, i + 1).end()
        name, i = json.decoder.scanstring(line, i + 1)
        i = _WS.match(line, _WS.match(line, i).end() + 1).end()  # past ":"
        value, end = dec.raw_decode(line, i)
        out[name], i = (value, line[i:end]), end


# The JSON type of each field of the stdout sink's lines (the stream's
# fields, typed: redisx.Event.MarshalJSON); any other field is a string.
JSON_INTS = ("shard", "seq_no", "primary_term", "version")
JSON_OBJECTS = ("source", "counts")


def parse_line(line):
    """One line of es-changefeed's stdout sink as the event parse_event
    makes of a stream entry: the same checks, plus the JSON types."""
    fields = {}
    for name, (value, raw) in json_members(line).items():
        if name in JSON_INTS:
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif name in JSON_OBJECTS:
            ok = isinstance(value, dict)
        else:
            ok = isinstance(value, str)
        if not ok:
            raise BadEntry("field %r = %s: want %s" % (name, raw[:80], "an integer" if name in JSON_INTS else
                                                          "an object" if name in JSON_OBJECTS else "a string"))
        fields[name] = value if isinstance(value, str) else raw
    ev = parse_event(fields)
    if ev["op"] in ("snapshot_start", "snapshot_end") and not (fields.get("index") and fields.get("index_uuid")):
        raise BadEntry("%s without index and index_uuid: not a line of a bootstrap copy" % ev["op"])
    return ev


class Applier:
    """--apply-stdin: applies the copy of es-changefeed consume --group G
    --bootstrap --bootstrap-only --sink stdout to the mirror, with the
    workers' fence, stamped with the stream position the bootstrap
    recorded (P): the copy's documents then order after every event the
    mirror applied (all at or before P) and before every event the workers
    read next (all after P). At each index's snapshot_end it drops what the
    copy did not write (documents deleted while history was lost); once
    es-changefeed has moved the group to P, those of indices the feed no
    longer follows. The mirror's bootstrap marker keeps the workers off
    until all of it is done."""

    BATCH = 200

    def __init__(self, args):
        self.args = args
        self.r = redis.Redis.from_url(args.redis, decode_responses=True)
        self.stream = "escf:{%s}:events" % args.feed
        self.hold = "escf-bootstrap:" + args.group  # es-changefeed's holding group
        self.mirror = Mirror(self.r, args.mirror or "mirror:{%s:%s}" % (args.feed, args.group))
        self.position = None
        self.batch, self.copied, self.dropped = [], {}, 0
        self.ended = set()

    def log(self, msg):
        print("apply-stdin: %s" % msg, file=sys.stderr, flush=True)

    def run(self, lines):
        """0 once every line is applied and es-changefeed positioned the
        group; 1, loudly, on a bad line, a short copy or a failed
        bootstrap (the marker stays: run the pipeline again)."""
        self.r.set(self.mirror.bootstrap_key, "bootstrap of group %s running since %s (pid %d)" % (
            self.args.group, datetime.now(timezone.utc).isoformat(), os.getpid()))
        n = 0
        for n, raw in enumerate(lines, 1):
            if self.position is None:
                self.position = self.recorded_position()
                self.log("applying the copy of group %s's bootstrap to %s, stamped %s (the recorded position)" % (
                    self.args.group, self.mirror.prefix, self.position))
            try:
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise BadEntry("not UTF-8 (%s)" % e) from None
                self.apply(parse_line(line))
            except BadEntry as e:
                self.log("line %d: %s: %s" % (n, e, raw.strip()[:200].decode("utf-8", "replace")))
                self.log("stopped: the mirror stays refused to the workers (%s); run the bootstrap again" % self.mirror.bootstrap_key)
                return 1
        self.flush()
        if n == 0:
            self.log("no line on stdin: es-changefeed consume --bootstrap failed before its copy (see its error); run it again")
            return 1
        problem = self.unfinished()
        if problem:
            self.log("%s after %d lines; run the bootstrap again (the mirror stays refused to the workers)" % (problem, n))
            return 1
        self.sweep()
        self.r.delete(self.mirror.bootstrap_key)
        self.log("done: %d documents copied in %d indices, %d dropped; group %s reads on after %s: start the workers" % (
            sum(self.copied.values()), len(self.ended), self.dropped, self.args.group, self.position))
        return 0

    def recorded_position(self):
        """P: where es-changefeed holds the stream with its holding group
        during the copy, or, once it moved the group there (a short copy
        can be all written before this reads it), the group's position."""
        groups = {g["name"]: g for g in self.r.xinfo_groups(self.stream)}
        g = groups.get(self.hold) or groups.get(self.args.group)
        if g is None:
            raise SystemExit("apply-stdin: no bootstrap of group %s is running (%s has no group %s): pipe "
                             "es-changefeed consume --group %s --bootstrap --bootstrap-only --sink stdout into this; "
                             "the mirror stays refused to the workers until one is applied" % (
                                 self.args.group, self.stream, self.hold, self.args.group))
        return g["last-delivered-id"]

    def apply(self, ev):
        op = ev["op"]
        if op in ("upsert", "delete"):
            self.batch.append(ev)
            if len(self.batch) >= self.BATCH:
                self.flush()
            return
        self.flush()
        uuid = ev["index_uuid"]
        if op == "snapshot_start":
            self.copied[uuid] = 0
        elif op == "snapshot_end":
            want = json.loads(ev["counts"]).get(ev["index"], 0)
            if uuid not in self.copied or self.copied[uuid] < want:
                raise BadEntry("snapshot_end of %s (%s) counts %d documents, %d came since its snapshot_start" % (
                    ev["index"], uuid, want, self.copied.get(uuid, 0)))
            dropped = self.mirror.drop_stale_index(uuid, self.position)
            self.dropped += dropped
            self.ended.add(uuid)
            self.log("index %s (%s): %d documents copied, %d the source no longer has dropped" % (
                ev["index"], uuid, self.copied[uuid], dropped))
        elif op == "index_deleted":
            self.mirror.index_deleted(ev)

    def flush(self):
        if not self.batch:
            return
        pipe = self.r.pipeline(transaction=False)
        for ev in self.batch:
            self.mirror.apply(pipe, self.position, ev)
        pipe.execute()  # an error is raised: loud, and the marker stays
        for ev in self.batch:
            if ev["op"] == "upsert":
                self.copied[ev["index_uuid"]] = self.copied.get(ev["index_uuid"], 0) + 1
        self.batch = []

    def unfinished(self):
        """Why the bootstrap did not finish ("" if it did): es-changefeed
        drops its holding group in the MULTI that moves the group to P,
        after the last line; a copy cut short leaves it."""
        groups = {g["name"]: g for g in self.r.xinfo_groups(self.stream)}
        if self.hold in groups:
            return "es-changefeed did not finish the bootstrap (its holding group %s is still there: see its error)" % self.hold
        if self.args.group not in groups:
            return "group %s does not exist" % self.args.group
        if self.r.hexists("escf:{%s}:lost" % self.args.feed, self.args.group):
            return "a history loss is still recorded for group %s" % self.args.group
        return ""

    def sweep(self):
        """The documents of indices the copy did not cover and the feed no
        longer follows (deleted while history was lost): dropped."""
        followed = set(self.r.hkeys("escf:{%s}:indices" % self.args.feed))
        for uuid in self.r.hkeys(self.mirror.prefix + ":indices"):
            if uuid in self.ended:
                continue
            if uuid in followed:
                self.log("index %s is followed by the feed but was not copied (closed, or not in --index): its documents stay as they were" % uuid)
                continue
            dropped = self.mirror.drop_stale_index(uuid, self.position)
            self.dropped += dropped
            if self.r.hlen(self.mirror.keys(uuid)[0]) == 0:
                self.r.hdel(self.mirror.prefix + ":indices", uuid)
            self.log("index %s is no longer in the feed: dropped its %d documents" % (uuid, dropped))


def run_consumer(args, name):
    """A process's life: 0 after SIGTERM, 1 when history was lost."""
    c = Consumer(args, name)
    try:
        c.run()
        return 0
    except HistoryLost as e:
        if e.record:
            c.record_loss(e)
        print("%s: %s" % (name, e), file=sys.stderr, flush=True)
        return 1


def shown_url(url):
    """The Redis URL without its password, for what the worker prints."""
    return re.sub(r"^(\w+://[^:@/]*):[^@/]*@", r"\1:<password>@", url)


def where_message(args):
    """Where the mirror is, and the redis-cli commands that show it."""
    prefix = args.mirror or "mirror:{%s:%s}" % (args.feed, args.group)
    cli = "redis-cli -u %s" % shown_url(args.redis)
    return ("worker: mirroring feed %s (group %s) into %s under %s; look at it with:\n"
            "  %s HGETALL '%s:indices'    # index uuid -> index name\n"
            "  %s HGETALL '%s:docs:<index uuid>'    # \"<shard>/<id>\" -> document source\n"
            % (args.feed, args.group, shown_url(args.redis), prefix, cli, prefix, cli, prefix))


def child(args, name):
    sys.exit(run_consumer(args, name))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--redis", default="redis://localhost:6379/0")
    ap.add_argument("--feed", default="default")
    ap.add_argument("--group", required=True)
    ap.add_argument("--consumer", default="%s-%d" % (socket.gethostname(), os.getpid()),
                    help="this consumer's name; with --consumers N, <name>-1 … <name>-N")
    ap.add_argument("--consumers", type=int, default=1, help="consumer processes to run")
    ap.add_argument("--start", choices=["0", "$"], default="0", help="where a new group starts")
    ap.add_argument("--mirror", help='key prefix of the mirror (default "mirror:{<feed>:<group>}")')
    ap.add_argument("--count", type=int, default=100, help="entries per read")
    ap.add_argument("--block-ms", type=int, default=2000)
    ap.add_argument("--min-idle-ms", type=int, default=60000,
                    help="reclaim entries pending this long (their consumer died)")
    ap.add_argument("--max-deliveries", type=int, default=10)
    ap.add_argument("--check-interval", type=float, default=30, help="seconds between history checks")
    ap.add_argument("--apply-stdin", action="store_true",
                    help="apply a bootstrap's copy (the JSON lines of es-changefeed consume --group G --bootstrap "
                         "--bootstrap-only --sink stdout) to the mirror, then exit; see examples/README.md")
    args = ap.parse_args()
    if args.apply_stdin:
        try:
            sys.exit(Applier(args).run(sys.stdin.buffer))
        except redis.RedisError as e:
            sys.exit("apply-stdin: Redis failed (%s); the mirror stays refused to the workers: run the bootstrap again" % e)
    sys.stderr.write(where_message(args))
    sys.stderr.flush()
    if args.consumers <= 1:
        sys.exit(run_consumer(args, args.consumer))
    # A pool of processes; SIGTERM is passed on, each drains its batch.
    procs = [multiprocessing.Process(target=child, args=(args, "%s-%d" % (args.consumer, i + 1)))
             for i in range(args.consumers)]
    for p in procs:
        p.start()
    signal.signal(signal.SIGTERM, lambda *_: [p.terminate() for p in procs])
    signal.signal(signal.SIGINT, lambda *_: [p.terminate() for p in procs])
    status, alive = 0, list(procs)
    while alive:
        ready = multiprocessing.connection.wait([p.sentinel for p in alive])
        for p in [p for p in alive if p.sentinel in ready]:
            alive.remove(p)
            p.join()
            if p.exitcode not in (0, -signal.SIGTERM):
                status = 1
                for q in alive:  # one stopped (history lost): stop the others
                    q.terminate()
    sys.exit(status)


if __name__ == "__main__":
    main()
