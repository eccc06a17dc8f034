#!/usr/bin/env node
// cachemark's Node.js driver: ioredis, node-redis or memjs, each built as an application
// builds it, running cachemark's op stream on one connection, one op in flight at a time.
// It speaks the driver protocol of docs/drivers.md on stdin/stdout: one JSON line per
// message, and when a message has "blob": N, exactly N raw bytes after its newline
// (little-endian integer arrays). cachemark pre-generates the ops; this program only runs
// the timed loop and hands back per-op outcomes and latencies in bulk. A phase comes in
// segments (x-segments): the first `ops` before `go`; when it says "more", the
// next is already waiting in stdin when a segment ends, and the segment's results go back
// as a `part` before it runs, so only one segment and its results are ever held here.
//
//   node cachemark_driver.js <ioredis|redis|memjs>
'use strict';

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const zlib = require('node:zlib');

const PROTOCOL = 3;
const OK = 0, HIT = 1, MISS = 2, ERR = 3;
const LIBS = { ioredis: 'node-ioredis', redis: 'node-redis', memjs: 'node-memjs' };
const lib = process.argv[2];
const NAME = LIBS[lib] || `node-${lib}`;

// Protocol bytes go to fd 1 only; whatever a library prints (memjs logs through console.log)
// goes to stderr, which cachemark keeps for its error messages.
console.log = console.info = console.debug = console.error;

let stopping = false;
process.on('SIGINT', () => { stopping = true; }); // Ctrl-C: the loop stops and reports what it ran

// -- framing ------------------------------------------------------------------------

function writeAll(buf) {
  let off = 0;
  while (off < buf.length) {
    try {
      off += fs.writeSync(1, buf, off);
    } catch (err) {
      if (err.code !== 'EAGAIN') throw err;
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1); // a full pipe: wait 1 ms
    }
  }
}

// The blob, when there is one: its arrays, written back to back (no copy joins them).
function send(msg, ...blob) {
  if (blob.length) msg.blob = blob.reduce((sum, array) => sum + array.length, 0);
  writeAll(Buffer.from(JSON.stringify(msg) + '\n'));
  for (const array of blob) writeAll(array);
}

// stdin is a stream: its bytes are copied into one buffer, kept from message to message (moved
// to its front, or grown, when full), until a whole line and its whole blob are in. A blob is a
// view of that buffer, good until its reader awaits: every reader copies what it keeps at once.
// During `go` the segment cachemark sends ahead piles up here, untouched until the running
// segment ends and takes it (Batch.turn). Nothing per segment is left for the GC.
class Input {
  constructor(stream) {
    this.buf = Buffer.allocUnsafe(1 << 16);
    this.begin = 0; // the first byte not taken yet
    this.end = 0; // past the last byte read
    this.ended = false;
    this.wake = null;
    this.header = null; // the line of a message whose blob is still arriving (offsets from begin)
    stream.on('data', (chunk) => { this.append(chunk); this.notify(); });
    stream.on('end', () => { this.ended = true; this.notify(); });
    stream.on('error', () => { this.ended = true; this.notify(); });
  }

  notify() {
    if (this.wake) { const wake = this.wake; this.wake = null; wake(); }
  }

  append(chunk) {
    if (this.end + chunk.length > this.buf.length) { // no room after the bytes held
      const held = this.end - this.begin;
      const into = held + chunk.length <= this.buf.length ? this.buf
        : Buffer.allocUnsafe(Math.max(2 * this.buf.length, held + chunk.length));
      this.buf.copy(into, 0, this.begin, this.end);
      this.buf = into;
      this.begin = 0;
      this.end = held;
    }
    chunk.copy(this.buf, this.end);
    this.end += chunk.length;
  }

  async next() { // {msg, blob}, or null at EOF
    for (;;) {
      if (this.header === null) {
        const nl = this.buf.subarray(this.begin, this.end).indexOf(10);
        if (nl >= 0) {
          const msg = JSON.parse(this.buf.toString('utf8', this.begin, this.begin + nl));
          this.header = { msg, start: nl + 1, end: nl + 1 + (msg.blob > 0 ? msg.blob : 0) };
        }
      }
      if (this.header !== null && this.end - this.begin >= this.header.end) {
        const { msg, start, end } = this.header;
        const blob = this.buf.subarray(this.begin + start, this.begin + end);
        this.header = null;
        this.begin += end;
        return { msg, blob };
      }
      if (this.ended) return null;
      await new Promise((resolve) => { this.wake = resolve; });
    }
  }
}

// Little-endian arrays out of a blob, copied byte for byte (a subarray's offset may not be aligned).
if (os.endianness() !== 'LE') throw new Error('cachemark driver: a little-endian machine is assumed');
function copyInto(array, blob, off, n) {
  const bytes = n * array.BYTES_PER_ELEMENT;
  new Uint8Array(array.buffer, array.byteOffset, bytes).set(blob.subarray(off, off + bytes));
  return array;
}
function u32(blob, off, n) { return copyInto(new Uint32Array(n), blob, off, n); }

// -- versions -----------------------------------------------------------------------

function packageVersion(name) {
  try {
    const file = path.join(__dirname, 'node_modules', name, 'package.json');
    return JSON.parse(fs.readFileSync(file, 'utf8')).version;
  } catch {
    return null;
  }
}

function libraryVersions() { // the packages this driver's client loads
  const versions = {};
  for (const name of lib === 'redis' ? ['redis', '@redis/client'] : [lib]) {
    const version = packageVersion(name);
    if (version) versions[name] = version;
  }
  return versions;
}

// -- keys, values and checks (docs/contracts.md: the self-verifying value format) -----

const crc32 = zlib.crc32 || (() => { // zlib.crc32 arrived in Node 20.15
  const table = new Int32Array(256).map((_, n) => {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    return c;
  });
  return (text) => {
    let c = -1;
    for (const byte of Buffer.from(text)) c = table[(c ^ byte) & 0xff] ^ (c >>> 8);
    return (c ^ -1) >>> 0;
  };
})();

function header(key) {
  return Buffer.from(`cm:${crc32(key).toString(16).padStart(8, '0')}:`, 'latin1');
}

class Workload {
  constructor(setup) {
    this.ns = setup.namespace;
    this.keys = Array.from({ length: setup.keys }, (_, i) => `${this.ns}${i}`);
    this.headers = new Array(setup.keys);
    const { kind, sizes } = setup.sizes;
    this.range = kind === 'range' ? [sizes[0], sizes[1]] : null;
    this.sizes = new Set(sizes);
    const max = Math.max(12, ...sizes);
    // the value format's filler (x-value-format): setup's period, repeated to the largest value
    const period = Buffer.from(setup.filler, 'latin1');
    this.filler = Buffer.alloc(max);
    for (let at = 0; at < max; at += period.length) period.copy(this.filler, at, 0, Math.min(period.length, max - at));
  }

  header(k) {
    return this.headers[k] || (this.headers[k] = header(this.keys[k]));
  }

  static build(head, filler, size) {
    const value = Buffer.allocUnsafe(size);
    head.copy(value, 0, 0, Math.min(12, size));
    if (size > 12) filler.copy(value, 12, 12, size);
    return value;
  }

  value(k, size) { return Workload.build(this.header(k), this.filler, size); }

  valueForKey(key, size) { return Workload.build(header(key), this.filler, size); }

  valid(k, value) {
    if (!Buffer.isBuffer(value)) return false;
    const n = value.length;
    const allowed = this.range ? n >= this.range[0] && n <= this.range[1] : this.sizes.has(n);
    if (!allowed || n > this.filler.length) return false;
    const head = this.header(k);
    const cut = Math.min(12, n);
    return head.compare(value, 0, cut, 0, cut) === 0 && this.filler.compare(value, 12, n, 12, n) === 0;
  }
}

// -- the clients ----------------------------------------------------------------------
// Each is built with its library's defaults, as an application builds it, plus only what
// keeps a dead server from hanging the loop (README.md says which and why). Every method
// returns the library's own promise, so the timed call is the bare client call.

function ttlMs(setup) {
  const ttl = Number(setup.ttl_s) || 0;
  return ttl > 0 ? Math.max(1, Math.round(ttl * 1000)) : 0;
}

// Setup only: a client that never connects is an error, saying the last reason it gave.
async function connected(client, promise, seconds, what) {
  let timer, last = null;
  const remember = (err) => { last = err; };
  client.on('error', remember);
  const limit = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} within ${seconds} s${last ? `: ${describe(last)}` : ''}`)),
      seconds * 1000);
  });
  try {
    await Promise.race([promise, limit]);
  } finally {
    clearTimeout(timer);
    client.off('error', remember);
  }
}

// TLS for rediss/valkeys: Node's trusted CAs (NODE_EXTRA_CA_CERTS adds one), or the URL's
// ssl_ca_certs / ssl_certfile / ssl_keyfile / ssl_cert_reqs when cachemark passes them in setup.
function tlsOptions(setup) {
  if (!setup.tls) return undefined;
  const read = (file) => (file ? fs.readFileSync(file) : undefined);
  return {
    ca: read(setup.ssl_ca_certs), cert: read(setup.ssl_certfile), key: read(setup.ssl_keyfile),
    rejectUnauthorized: String(setup.ssl_cert_reqs || 'required').toLowerCase() !== 'none',
  };
}

async function ioredisClient(setup) {
  const Redis = require('ioredis');
  const [host, port] = setup.servers[0];
  const redis = new Redis({
    host, port, db: setup.db || 0, username: setup.username || undefined,
    password: setup.password || undefined, tls: tlsOptions(setup),
    connectTimeout: setup.connect_timeout_s * 1000,
    commandTimeout: setup.timeout_s * 1000, // the URL's socket_timeout, as the Ruby driver's read_timeout
    // A command sent while the connection is down fails at once instead of waiting in the
    // offline queue (by default up to 20 reconnects, over a minute); reconnecting itself
    // keeps ioredis' default retryStrategy.
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
  });
  redis.on('error', () => {}); // reconnect errors: the ops that fail say it
  try {
    await connected(redis, new Promise((resolve, reject) => {
      redis.once('ready', resolve);
      redis.once('end', () => reject(new Error('connection closed')));
    }), setup.connect_timeout_s + setup.timeout_s, 'ioredis did not connect');
  } catch (err) {
    redis.disconnect();
    throw err;
  }
  const ms = ttlMs(setup);
  const set = !ms ? (key, value) => redis.set(key, value)
    : ms % 1000 === 0 ? (key, value) => redis.set(key, value, 'EX', ms / 1000)
      : (key, value) => redis.set(key, value, 'PX', ms);
  return {
    info: { client: 'ioredis.Redis', client_library: 'ioredis', client_version: packageVersion('ioredis') },
    get: (key) => redis.getBuffer(key),
    set,
    del: (key) => redis.del(key),
    exists: (key) => redis.exists(key),
    getMany: (keys) => redis.mgetBuffer(keys),
    close: () => redis.disconnect(),
  };
}

async function nodeRedisClient(setup) {
  const { createClient, RESP_TYPES } = require('redis');
  const [host, port] = setup.servers[0];
  const client = createClient({
    socket: { host, port, connectTimeout: setup.connect_timeout_s * 1000, ...(setup.tls ? { tls: true, ...tlsOptions(setup) } : {}) },
    username: setup.username || undefined, password: setup.password || undefined, database: setup.db || 0,
    // Values come back as Buffers (no string decoding). No command timeout, node-redis' default:
    // its timeout is an AbortSignal.timeout per command, which costs more than a loopback GET.
    commandOptions: { typeMapping: { [RESP_TYPES.BLOB_STRING]: Buffer } },
    // While reconnecting (default strategy), commands fail at once instead of queueing until the
    // server is back: a dead server must not hang the loop.
    disableOfflineQueue: true,
  });
  client.on('error', () => {}); // as every app must: without a listener, a socket error kills the process
  try {
    await connected(client, client.connect(), setup.connect_timeout_s + setup.timeout_s, 'node-redis did not connect');
  } catch (err) {
    client.destroy();
    throw err;
  }
  const ms = ttlMs(setup);
  const options = !ms ? undefined
    : { expiration: ms % 1000 === 0 ? { type: 'EX', value: ms / 1000 } : { type: 'PX', value: ms } };
  return {
    info: { client: 'redis.RedisClient', client_library: 'redis', client_version: packageVersion('redis') },
    get: (key) => client.get(key),
    set: (key, value) => client.set(key, value, options),
    del: (key) => client.del(key),
    exists: (key) => client.exists(key),
    getMany: (keys) => client.mGet(keys),
    close: () => client.destroy(),
  };
}

// memjs drops a request whose connection the server closed after reading it (a killed or
// restarted memcached): no error, no timeout, its promise never settles, and an app awaiting
// it hangs. The driver fails such a call as a timeout once memjs' own retries could not still
// be running (the watchdog is one coarse interval timer: nothing per call but a promise).
class MemjsTimeoutError extends Error {}

function watchdog(limitS) {
  const tickMs = 100;
  let tick = 0, pending = null, since = 0;
  setInterval(() => {
    tick++;
    if (pending && (tick - since) * tickMs > limitS * 1000) {
      const reject = pending;
      pending = null;
      reject(new MemjsTimeoutError(`no answer within ${limitS} s (memjs lost the request: its connection closed)`));
    }
  }, tickMs).unref();
  return (promise) => new Promise((resolve, reject) => {
    pending = reject;
    since = tick;
    const done = () => { if (pending === reject) pending = null; };
    promise.then((value) => { done(); resolve(value); }, (err) => { done(); reject(err); });
  });
}

async function memjsClient(setup) {
  const memjs = require('memjs');
  const auth = setup.username || setup.password ? { username: setup.username, password: setup.password } : {};
  const servers = setup.servers.map(([host, port]) => `${host}:${port}`).join(',');
  const mc = memjs.Client.create(servers, {
    ...auth, timeout: setup.timeout_s, conntimeout: setup.connect_timeout_s,
  });
  // memjs tries a call `retries` (2) times, each bounded by its timeout, 0.2 s apart, after a connect
  const guard = watchdog(2 * (setup.timeout_s + 0.2) + setup.connect_timeout_s);
  const expires = Math.ceil(ttlMs(setup) / 1000);
  const options = expires ? { expires } : {};
  // memjs has no multi-get and no exists: get_many is sequential gets, exists is a get.
  const get = (key) => guard(mc.get(key)).then((reply) => reply.value);
  return {
    info: { client: 'memjs.Client', client_library: 'memjs', client_version: packageVersion('memjs') },
    get,
    set: (key, value) => guard(mc.set(key, value, options)),
    del: (key) => guard(mc.delete(key)),
    exists: (key) => get(key).then((value) => value !== null),
    getMany: async (keys) => {
      const values = new Array(keys.length);
      for (let i = 0; i < keys.length; i++) values[i] = await get(keys[i]);
      return values;
    },
    close: () => mc.close(),
  };
}

function nullClient() { // no server: what this loop and the protocol cost (benchmarks/clients.py)
  return {
    info: { client: 'null', client_library: 'node', client_version: process.versions.node },
    get: async () => null,
    set: async () => true,
    del: async () => false,
    exists: async () => false,
    getMany: async (keys) => new Array(keys.length).fill(null),
    close: () => {},
  };
}

async function buildClient(setup) {
  const scheme = setup.scheme;
  if (scheme === null || scheme === 'null') return nullClient();
  const redisLike = /^(redis|valkey)s?$/.test(scheme);
  if (lib === 'memjs' && scheme === 'memcached') return memjsClient(setup);
  if (lib === 'ioredis' && redisLike) return ioredisClient(setup);
  if (lib === 'redis' && redisLike) return nodeRedisClient(setup);
  throw new Error(`${NAME} has no client for ${scheme}://`);
}

// -- errors -----------------------------------------------------------------------------

const CONNECTION_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ENOTCONN', 'ECONNABORTED',
  'EHOSTUNREACH', 'ENETUNREACH', 'EHOSTDOWN', 'ENETDOWN', 'ENOTFOUND', 'EAI_AGAIN', 'ERR_STREAM_DESTROYED']);
const CONNECTION_ERRORS = new Set(['ClientClosedError', 'ClientOfflineError', 'SocketClosedUnexpectedlyError',
  'DisconnectsClientError', 'ReconnectStrategyError', 'MaxRetriesPerRequestError']);
const SERVER_ERRORS = new Set(['ReplyError', 'ErrorReply', 'SimpleError', 'BlobError']);

function errorKind(err) {
  const name = (err && err.constructor && err.constructor.name) || 'Error';
  const text = `${name} ${err && err.message}`.toLowerCase();
  if (name.includes('Timeout') || err.code === 'ETIMEDOUT' || text.includes('timed out')
      || text.includes('timeout')) return 'timeout';
  if (CONNECTION_CODES.has(err.code) || CONNECTION_ERRORS.has(name) || text.includes('connection')
      || text.includes("isn't writeable") || text.includes('no servers available')
      || text.includes('socket closed')) return 'connection';
  if (SERVER_ERRORS.has(name) || text.startsWith('error memjs ')) return 'server'; // a server's error reply
  return name;
}

function describe(err) {
  return `${(err && err.constructor && err.constructor.name) || 'Error'}: ${err && err.message}`;
}

// -- the driver: one process = one cachemark worker, one client, one connection ---------

class Driver {
  constructor(input) {
    this.input = input;
    this.client = null;
    this.kinds = ['verify', 'dropped_write'];
  }

  kindCode(kind) {
    let index = this.kinds.indexOf(kind);
    if (index < 0) index = this.kinds.push(kind) - 1;
    return ERR + index;
  }

  async serve() {
    const versions = libraryVersions();
    if (!LIBS[lib]) {
      return send({ type: 'error', kind: 'usage', message: `usage: cachemark_driver.js <${Object.keys(LIBS).join('|')}>` });
    }
    if (!versions[lib]) {
      return send({ type: 'error', kind: 'missing',
        message: `${NAME}: ${lib} is not installed in ${__dirname}/node_modules; run \`make drivers\` (npm ci in drivers/node)` });
    }
    send({ type: 'hello', protocol: PROTOCOL, driver: NAME, runtime: `node ${process.versions.node}`,
      runtime_detail: `node ${process.version} (v8 ${process.versions.v8}, ${process.platform} ${process.arch})`,
      libraries: versions });
    for (;;) {
      const next = await this.input.next();
      if (next === null) return; // EOF: cachemark went away
      const { msg, blob } = next;
      switch (msg.type) {
        case 'setup': await this.setup(msg); break;
        case 'prefill': await this.prefill(msg, blob); break;
        case 'ops': this.loadOps(msg, blob); break;
        case 'go': await this.go(msg); break;
        case 'bye': send({ type: 'bye' }); return;
        default: send({ type: 'error', kind: 'protocol', message: `unknown message ${JSON.stringify(msg.type)}` });
      }
    }
  }

  close() {
    if (this.client) this.client.close();
  }

  async setup(msg) {
    this.work = new Workload(msg);
    this.worker = msg.worker || 0;
    this.manyCount = msg.get_many_count || 10;
    this.canaries = 0;
    msg.timeout_s = Number(msg.timeout_s) || 5.0;
    msg.connect_timeout_s = Number(msg.connect_timeout_s) || 2.0;
    try {
      if (msg.scheme && /^(redis|valkey)/.test(msg.scheme) && msg.servers.length > 1) {
        throw new Error(`${NAME} talks to one redis server, not ${msg.servers.length}`);
      }
      this.client = await buildClient(msg);
    } catch (err) {
      return send({ type: 'error', kind: 'setup', message: describe(err).replace(/\s+/g, ' ') });
    }
    send({ type: 'ready', ...this.client.info });
  }

  async prefill(msg, blob) {
    const n = msg.count;
    const ids = u32(blob, 0, n);
    const sizes = u32(blob, 4 * n, n);
    const { client, work } = this;
    let written = 0, refused = 0, sample = null;
    for (let i = 0; i < n && !stopping; i++) {
      const k = ids[i];
      try {
        if (await client.set(work.keys[k], work.value(k, sizes[i]))) written++;
        else { refused++; sample = sample || 'write returned false (not stored)'; }
      } catch (err) {
        refused++;
        sample = sample || describe(err);
      }
    }
    send({ type: 'prefilled', written, refused, error_sample: sample, interrupted: stopping });
  }

  loadOps(msg, blob) {
    const refusal = this.segment(msg, blob);
    if (refusal) return send({ type: 'error', kind: 'unsupported', message: refusal });
    send({ type: 'loaded', count: msg.count });
  }

  // One `ops` message: a whole batch, or one segment of a phase ("more": another follows
  // during go). It is copied over the last one, into the same arrays (grown for a longer one):
  // one segment is held, and nothing per segment is left for the GC. A refusal's text, or null.
  segment(msg, blob) {
    const n = msg.count;
    const known = new Set(['get', 'set', 'delete', 'exists', 'get_many']);
    const unknown = [...new Set(msg.entries.flat().filter((op) => !known.has(op)))];
    if (unknown.length) return `${NAME} does not run ${unknown.join(', ')}`;
    if (!this.opEntry || this.opEntry.length < n) {
      this.opEntry = new Uint8Array(n);
      this.opKey = new Uint32Array(n);
      this.opSize = new Uint32Array(n);
      this.atNs = null;
    }
    if (msg.schedule && !this.atNs) this.atNs = new BigUint64Array(this.opEntry.length);
    this.entries = msg.entries;
    this.count = n;
    copyInto(this.opEntry, blob, 0, n);
    copyInto(this.opKey, blob, n, n);
    copyInto(this.opSize, blob, 5 * n, n);
    this.opAt = msg.schedule ? copyInto(this.atNs, blob, 9 * n, n) : null;
    this.more = Boolean(msg.more);
    return null;
  }

  // -- the ops: each takes the op's context and answers an outcome code; what it read is
  // left in the context, for the checks made after the clock stopped.
  step(op) {
    const client = this.client;
    switch (op) {
      case 'get': return async (c) => ((c.got = await client.get(c.key)) === null ? MISS : HIT);
      case 'set': return async (c) => ((await client.set(c.key, c.value)) ? OK : c.refused());
      case 'delete': return async (c) => ((await client.del(c.key)) ? HIT : MISS);
      case 'exists': return async (c) => ((await client.exists(c.key)) ? HIT : MISS);
      case 'get_many': return async (c) => {
        const values = (c.gotMany = await client.getMany(c.names));
        return values.every((v) => v !== null) ? HIT : MISS;
      };
      default: throw new Error(`unknown op ${op}`);
    }
  }

  handler(steps) {
    if (steps.length === 1) return this.step(steps[0]);
    const parts = steps.map((s) => this.step(s));
    // exists+get as an app writes it: exists, then get; a "no" ends it as a miss
    return async (c) => {
      let code = MISS;
      for (let i = 0; i < parts.length; i++) {
        c.steps = i + 1; // the steps sent (bytes_out): a "no" from exists leaves the get unsent
        code = await parts[i](c);
        if (steps[i] === 'exists' && code !== HIT) return code;
      }
      return code;
    };
  }

  // The timed loop, one segment (or one pass through a cycling batch) at a time; between them,
  // outside the clock, turn() sends the part and takes the next segment. Its bookkeeping lives
  // in Batch's plain methods: V8 optimizes a long-running async function only from its next
  // call on, a hot plain function at once.
  async go(msg) {
    const batch = new Batch(this, msg);
    const c = batch.c;
    do {
      while (batch.next()) {
        if (batch.due !== null) await sleepUntil(batch.due);
        else if ((batch.i & 1023) === 1023) await new Promise(setImmediate); // a SIGINT gets in even with no I/O
        const fn = batch.fns[batch.e];
        let code = OK, error = null;
        const t0 = process.hrtime.bigint();
        try {
          code = await fn(c);
        } catch (err) {
          error = err;
        }
        const t1 = process.hrtime.bigint();
        if (batch.record(code, error, t0, t1)) {
          batch.over = true;
          break;
        }
        if (batch.canaryDue) await batch.canary();
      }
    } while (!batch.over && await batch.turn());
    // Stopped inside a segment with more: the one cachemark sent ahead is read and dropped first.
    if (batch.more && !batch.gone) await batch.discard();
    if (batch.gone) return; // EOF mid-go: cachemark went away, serve() leaves
    const [done, blob] = batch.results();
    send(done, ...blob);
  }
}

// One `go`: the current segment's ops and its cursor, each op's context, the segment's results
// so far, and the whole go's counts.
class Batch {
  constructor(driver, msg) {
    Object.assign(this, { driver, work: driver.work, client: driver.client });
    this.entries = null;
    this.bytesIn = [];
    this.bytesOut = [];
    this.capacity = 0;
    this.outcomes = this.starts = this.ends = null;
    this.load();
    this.readEvery = msg.verify_reads > 0 ? Math.floor(1 / msg.verify_reads) : 0;
    this.writeEvery = msg.verify_writes > 0 ? Math.floor(1 / msg.verify_writes) : 0;
    // a batch repeated, a part at the end of every pass; it is whole: nothing is sent ahead
    this.cycle = Boolean(msg.cycle) && !this.opAt && this.n > 0;
    if (this.cycle) this.more = false;
    this.grace = msg.stop_after_failing_s != null ? BigInt(Math.round(msg.stop_after_failing_s * 1e9)) : null;
    this.samples = [];
    this.extra = new Map(); // "entry\0kind" -> count: errors that are no op's outcome (canaries)
    this.e = 0; // the current op's entry, key id and value size
    this.k = 0;
    this.size = 0;
    this.due = null;
    this.verify = false;
    this.reads = 0;
    this.writesDone = 0;
    this.canaryDue = false;
    this.stopped = false;
    this.over = false; // stopped: the deadline, SIGINT or the error policy
    this.gone = false; // EOF on stdin mid-go
    this.failingSince = null;
    this.c = { key: '', value: null, names: null, got: null, gotMany: null, refused: null, refusal: null, steps: 1 };
    this.c.refused = () => { this.c.refusal = 'write returned false (not stored)'; return ERR; };
    this.cpu0 = process.cpuUsage();
    this.start = process.hrtime.bigint();
    this.deadline = msg.duration_s != null ? this.start + BigInt(Math.round(msg.duration_s * 1e9)) : null;
  }

  // Takes the driver's segment (the one loaded before go, then each next one): its ops, and
  // results arrays for them (kept while big enough: a part has gone back before they are reused).
  load() {
    const driver = this.driver;
    Object.assign(this, { opEntry: driver.opEntry, opKey: driver.opKey, opSize: driver.opSize, opAt: driver.opAt,
      more: driver.more });
    this.n = driver.count;
    this.i = 0; // ops run in this segment (this pass)
    if (this.outcomes === null || this.n > this.capacity) {
      this.capacity = Math.max(this.n, 1);
      this.outcomes = new Uint8Array(this.capacity);
      this.starts = new BigUint64Array(this.capacity); // raw clock readings until results(): a
      this.ends = new BigUint64Array(this.capacity); // BigInt subtraction allocates
    }
    if (this.entries !== null && JSON.stringify(driver.entries) === JSON.stringify(this.entries)) return;
    const entries = this.entries = driver.entries; // a phase's segments share them: built once
    this.fns = entries.map((steps) => driver.handler(steps));
    this.names = entries.map((steps) => steps.join('+'));
    this.writes = entries.map((steps) => steps.includes('set'));
    this.many = entries.map((steps) => steps.includes('get_many')); // its keys are listed before the clock
    this.lastMany = entries.map((steps) => steps[steps.length - 1] === 'get_many');
    this.verifiable = entries.map((steps) => ['get', 'get_many'].includes(steps[steps.length - 1]));
    while (this.bytesIn.length < entries.length) { // the whole go's, per entry
      this.bytesIn.push(0);
      this.bytesOut.push(0);
    }
  }

  // Sets up the next op (outside the clock); false at the segment's (or the pass's) end, where
  // turn() says what follows, or when the next op is due past the deadline (over).
  next() {
    const { i, c } = this;
    if (i >= this.n) return false;
    const e = this.opEntry[i];
    const k = this.opKey[i];
    const keys = this.work.keys;
    if (this.opAt) {
      this.due = this.start + this.opAt[i];
      if (this.deadline !== null && this.due >= this.deadline) {
        this.over = true;
        return false;
      }
    }
    this.e = e;
    this.k = k;
    this.size = this.opSize[i];
    c.key = keys[k];
    c.value = this.writes[e] ? this.work.value(k, this.size) : null;
    if (this.many[e]) {
      const count = this.driver.manyCount;
      c.names = new Array(count);
      for (let m = 0; m < count; m++) c.names[m] = keys[(k + m) % keys.length];
    }
    c.got = c.gotMany = c.refusal = null;
    c.steps = 1;
    this.verify = false;
    if (this.readEvery > 0 && this.verifiable[e] && ++this.reads >= this.readEvery) {
      this.reads = 0;
      this.verify = true;
    }
    return true;
  }

  // Records the op just timed; true when the loop must stop.
  record(code, error, t0, t1) {
    const { e, c } = this;
    if (error !== null) {
      const kind = errorKind(error);
      this.sample(kind, describe(error));
      code = this.driver.kindCode(kind);
    } else if (c.refusal !== null) {
      this.sample('server', `${c.key}: ${c.refusal}`);
      code = this.driver.kindCode('server');
    } else if (code === HIT) {
      code = this.check();
    }
    if (error === null && c.gotMany !== null) { // every value that came back, a miss's and a bad one's too
      for (const v of c.gotMany) if (v !== null) this.bytesIn[e] += v.length;
    }
    this.bytesOut[e] += this.many[e] ? c.names.reduce((sum, name) => sum + name.length, 0) : c.key.length * c.steps;
    if (c.value !== null) this.bytesOut[e] += c.value.length;
    const i = this.i++;
    this.outcomes[i] = code;
    this.starts[i] = t0;
    this.ends[i] = t1;
    if (code < ERR) {
      this.failingSince = null;
      if (this.writeEvery > 0 && this.writes[e] && code === OK && ++this.writesDone >= this.writeEvery) {
        this.writesDone = 0;
        this.canaryDue = true;
      }
    } else {
      if (this.failingSince === null) this.failingSince = t1;
      if (this.grace !== null && t1 - this.failingSince >= this.grace) {
        this.stopped = true;
        return true;
      }
    }
    return stopping || (this.deadline !== null && t1 >= this.deadline);
  }

  // After the clock: count what came back and, every so often, check it is the value written.
  check() {
    const { e, k, c, work } = this;
    if (this.lastMany[e]) {
      const count = work.keys.length;
      for (let m = 0; m < c.gotMany.length; m++) {
        const v = c.gotMany[m];
        if (this.verify && !work.valid((k + m) % count, v)) return this.verifyFailed(c.names[m], v);
      }
    } else if (c.got !== null) {
      this.bytesIn[e] += c.got.length;
      if (this.verify && !work.valid(k, c.got)) return this.verifyFailed(c.key, c.got);
    }
    return HIT;
  }

  verifyFailed(key, value) {
    const size = value && value.length !== undefined ? `${value.length} B` : typeof value;
    this.sample('verify', `${key}: unexpected value of ${size}`);
    return this.driver.kindCode('verify');
  }

  sample(kind, text) {
    if (this.samples.length < 5) this.samples.push(`${this.names[this.e]}: ${kind}: ${text}`.slice(0, 300));
  }

  // A write read back at once (untimed, with its own key): a silently dropped write is an error.
  async canary() {
    this.canaryDue = false;
    const key = `${this.work.ns}verify:${this.driver.worker}:${++this.driver.canaries}`;
    const value = this.work.valueForKey(key, this.size);
    const client = this.client;
    let kind = null, text = '';
    try {
      await client.set(key, value);
      const back = await client.get(key);
      await client.del(key);
      if (back === null || !value.equals(back)) {
        kind = 'dropped_write';
        text = `${key}: a value just written read back ${back === null ? 'as a miss' : 'different'}`;
      }
    } catch (err) {
      kind = errorKind(err);
      text = describe(err);
    }
    if (kind === null) return;
    const id = `${this.e}\u0000${kind}`;
    this.extra.set(id, (this.extra.get(id) || 0) + 1);
    this.sample(kind, text);
  }

  // The end of a segment or of a pass, not stopped (outside the clock): its results go back as
  // a part, then the next pass runs, or the next segment, read from stdin only now (cachemark
  // sent it ahead: it is waiting there). False when the go is over: its last segment has run,
  // or it stops at the boundary.
  async turn() {
    if (!this.more && !this.cycle) return false;
    if (stopping || (this.deadline !== null && process.hrtime.bigint() >= this.deadline)) return false;
    const [part, blob] = this.results('part');
    send(part, ...blob);
    if (!this.more) {
      this.i = 0;
      return true;
    }
    const next = await this.driver.input.next();
    if (next === null) {
      this.gone = true;
      return false;
    }
    if (next.msg.type !== 'ops') throw new Error(`the next segment (ops) was expected during go, not ${JSON.stringify(next.msg.type)}`);
    const refusal = this.driver.segment(next.msg, next.blob);
    if (refusal) throw new Error(refusal);
    this.load();
    return !stopping;
  }

  // Stopped inside a segment with more: the segment sent ahead is read and dropped, so the
  // next message read is cachemark's next one.
  async discard() {
    const next = await this.driver.input.next();
    if (next === null) this.gone = true;
    else if (next.msg.type !== 'ops') throw new Error(`the segment sent ahead (ops) was expected, not ${JSON.stringify(next.msg.type)}`);
  }

  // The ops run since the last part, 17 bytes each: outcomes, starts (ns after go) and
  // latencies (views of the arrays, written out as they are); a part says only how many, done
  // adds the whole go's counts.
  results(type = 'done') {
    const finish = process.hrtime.bigint();
    const { i, n, opAt, start, deadline, starts, ends } = this;
    for (let m = 0; m < i; m++) { // clock readings -> ns after go, and latencies
      ends[m] -= starts[m];
      starts[m] -= start;
    }
    const blob = [
      Buffer.from(this.outcomes.buffer, 0, i),
      Buffer.from(starts.buffer, 0, 8 * i),
      Buffer.from(ends.buffer, 0, 8 * i),
    ];
    if (type === 'part') return [{ type, count: i, error_kinds: this.driver.kinds }, blob];
    const cpu = process.cpuUsage(this.cpu0);
    let missed = 0; // this segment's: cachemark adds those of the segments never run
    if (opAt && deadline !== null) {
      for (let m = i; m < n; m++) if (start + opAt[m] < deadline) missed++;
    }
    const done = {
      type, count: i, wall_ns: Number(finish - start), cpu_s: (cpu.user + cpu.system) / 1e6,
      error_kinds: this.driver.kinds,
      extra_errors: [...this.extra].map(([id, count]) => {
        const [entry, kind] = id.split('\u0000');
        return [Number(entry), kind, count];
      }),
      error_samples: this.samples, bytes_in: this.bytesIn, bytes_out: this.bytesOut, missed,
      stopped_on_errors: this.stopped, interrupted: stopping,
    };
    return [done, blob];
  }
}

// Open loop: a timer for the bulk of the wait, then short turns of the event loop to be on time.
async function sleepUntil(due) {
  let now = process.hrtime.bigint();
  if (due - now > 2_000_000n) {
    await new Promise((resolve) => setTimeout(resolve, Number(due - now) / 1e6 - 1));
    now = process.hrtime.bigint();
  }
  while (now < due) {
    await new Promise(setImmediate);
    now = process.hrtime.bigint();
  }
}

async function main() {
  const driver = new Driver(new Input(process.stdin));
  try {
    await driver.serve();
  } finally {
    driver.close();
  }
  process.exit(0);
}

main().catch((err) => {
  // cachemark quotes the last line of stderr: the stack first, then the error in one line
  process.stderr.write(`${err && err.stack}\n${NAME}: ${describe(err).replace(/\s+/g, ' ')}\n`);
  process.exit(1);
});
