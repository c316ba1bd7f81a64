#!/usr/bin/env node
// Runs Perfetto's own trace processor (the WebAssembly build that the Perfetto
// UI ships, `trace_processor.wasm`) on a trace file, and answers SQL queries
// with one JSON line each. Used by gpuperf's tests to read the timelines it
// writes as Perfetto reads them. Only Node's standard library is used.
//
//   node tp.js --wasm PATH/trace_processor.wasm TRACE [SQL...]
//
// First line on stdout: {"loaded":BYTES,"error":null|"..."}. Then one line per
// SQL argument, or, with none, per line read from stdin (each line a JSON
// string), until stdin closes:
//   {"columns":["a","b"],"rows":[[1,"x"],...],"error":null|"..."}
// 64-bit integers are printed as exact JSON numbers (never rounded to a double).
//
// How it talks to the engine: the wasm exports
// trace_processor_rpc_init(reply_fn, buffer_size) -> request buffer, and
// trace_processor_on_rpc_request(len), which reads `len` bytes of a
// TraceProcessorRpcStream (Perfetto's protos/perfetto/trace_processor/
// trace_processor.proto) from that buffer. Replies come back, as bytes of the
// same stream, through reply_fn(ptr, len), a function in the wasm's table.
'use strict';

const fs = require('fs');
const readline = require('readline');

// TraceProcessorRpc.TraceProcessorMethod
const TPM_APPEND_TRACE_DATA = 1;
const TPM_FINALIZE_TRACE_DATA = 2;
const TPM_QUERY_STREAMING = 3;
// QueryResult.CellsBatch.CellType
const CELL_NULL = 1;
const CELL_VARINT = 2;
const CELL_FLOAT64 = 3;
const CELL_STRING = 4;
const CELL_BLOB = 5;

const REQ_BUF = 32 << 20;
const TRACE_CHUNK = 16 << 20;

// ---- protobuf: the few wire types the RPC uses ----

function varint(n) {
  let v = BigInt(n);
  const out = [];
  do {
    let b = Number(v & 0x7fn);
    v >>= 7n;
    if (v) b |= 0x80;
    out.push(b);
  } while (v);
  return Buffer.from(out);
}

function field(num, wire, payload) {
  const tag = varint((num << 3) | wire);
  if (wire === 0) return Buffer.concat([tag, varint(payload)]);
  const body = Buffer.isBuffer(payload) ? payload : Buffer.from(payload, 'utf8');
  return Buffer.concat([tag, varint(body.length), body]);
}

class Reader {
  constructor(buf, start = 0, end = buf.length) {
    this.buf = buf;
    this.pos = start;
    this.end = end;
  }
  done() {
    return this.pos >= this.end;
  }
  // A varint as a BigInt (int64 fields are two's complement in 10 bytes).
  varint() {
    let v = 0n;
    let shift = 0n;
    for (;;) {
      if (this.pos >= this.end) throw new Error('truncated varint');
      const b = this.buf[this.pos++];
      v |= BigInt(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
      shift += 7n;
    }
  }
  // Returns [field number, wire type, value]: a BigInt for varints, a
  // [start, end) pair for length-delimited fields, a position for fixed ones.
  next() {
    const tag = Number(this.varint());
    const num = tag >>> 3;
    const wire = tag & 7;
    switch (wire) {
      case 0:
        return [num, wire, this.varint()];
      case 1:
        this.pos += 8;
        return [num, wire, this.pos - 8];
      case 2: {
        const len = Number(this.varint());
        const start = this.pos;
        this.pos += len;
        if (this.pos > this.end) throw new Error('truncated field');
        return [num, wire, [start, this.pos]];
      }
      case 5:
        this.pos += 4;
        return [num, wire, this.pos - 4];
      default:
        throw new Error(`unsupported wire type ${wire}`);
    }
  }
}

const toI64 = (v) => BigInt.asIntN(64, v);

// ---- the engine: instantiation with the few host functions it imports ----

const ENOSYS = 52; // errno values as Emscripten's libc numbers them
const ENOTTY = 59;
const WASI_EBADF = 8;

function loadEngine(wasmPath) {
  let memory;
  const heap = () => new Uint8Array(memory.buffer);
  const view = () => new DataView(memory.buffer);
  const cstr = (p) => {
    const h = heap();
    let e = p;
    while (h[e]) e++;
    return Buffer.from(h.subarray(p, e)).toString('utf8');
  };
  const stderrLines = [];
  const logErr = (s) => {
    stderrLines.push(s);
    if (stderrLines.length > 200) stderrLines.shift();
    if (process.env.TP_VERBOSE) process.stderr.write(s.endsWith('\n') ? s : s + '\n');
  };
  const fail = () => -ENOSYS;
  const env = {
    emscripten_get_now: () => performance.now(),
    emscripten_date_now: () => Date.now(),
    __assert_fail: (cond, file, line, func) => {
      throw new Error(`assertion failed: ${cstr(cond)} at ${cstr(file)}:${line} ${cstr(func)}`);
    },
    _abort_js: () => {
      throw new Error('trace processor aborted: ' + stderrLines.slice(-5).join(' | '));
    },
    emscripten_err: (p) => logErr(cstr(p)),
    __syscall_fcntl64: () => 0,
    __syscall_ioctl: () => -ENOTTY,
    __syscall_faccessat: fail,
    __syscall_fchmod: fail,
    __syscall_chmod: fail,
    __syscall_fchown32: fail,
    __syscall_openat: fail,
    __syscall_fstat64: fail,
    __syscall_stat64: fail,
    __syscall_newfstatat: fail,
    __syscall_lstat64: fail,
    __syscall_ftruncate64: fail,
    __syscall_getcwd: fail,
    __syscall_mkdirat: fail,
    __syscall_readlinkat: fail,
    __syscall_rmdir: fail,
    __syscall_unlinkat: fail,
    __syscall_utimensat: fail,
    _mmap_js: fail,
    _munmap_js: fail,
    // Time zone: UTC, with empty names.
    _tzset_js: (timezone, daylight, stdName, dstName) => {
      const v = view();
      v.setInt32(timezone, 0, true);
      v.setInt32(daylight, 0, true);
      heap()[stdName] = 0;
      heap()[dstName] = 0;
    },
    _timegm_js: (tm) => {
      const v = view();
      const t = Date.UTC(
        v.getInt32(tm + 20, true) + 1900,
        v.getInt32(tm + 16, true),
        v.getInt32(tm + 12, true),
        v.getInt32(tm + 8, true),
        v.getInt32(tm + 4, true),
        v.getInt32(tm, true),
      );
      return BigInt(Math.floor(t / 1000));
    },
    _gmtime_js: (t, tm) => writeTm(view(), Number(t), tm),
    _localtime_js: (t, tm) => writeTm(view(), Number(t), tm),
    emscripten_get_heap_max: () => 65536 * 65536 - 65536,
    emscripten_resize_heap: (requested) => {
      const need = (requested >>> 0) - memory.buffer.byteLength;
      if (need <= 0) return 1;
      try {
        memory.grow(Math.ceil(need / 65536));
        return 1;
      } catch (e) {
        return 0;
      }
    },
  };
  const wasi = {
    fd_write: (fd, iov, iovcnt, pnum) => {
      const v = view();
      let n = 0;
      let s = '';
      for (let i = 0; i < iovcnt; i++) {
        const p = v.getUint32(iov + 8 * i, true);
        const len = v.getUint32(iov + 8 * i + 4, true);
        s += Buffer.from(heap().subarray(p, p + len)).toString('utf8');
        n += len;
      }
      if (fd === 1 || fd === 2) logErr(s);
      view().setUint32(pnum, n, true);
      return 0;
    },
    fd_read: () => WASI_EBADF,
    fd_close: () => 0,
    fd_seek: () => WASI_EBADF,
    fd_sync: () => 0,
    fd_fdstat_get: () => WASI_EBADF,
    clock_time_get: (id, precision, ptime) => {
      const ns = id === 0 ? BigInt(Date.now()) * 1000000n : process.hrtime.bigint();
      view().setBigUint64(ptime, ns, true);
      return 0;
    },
    environ_sizes_get: (pcount, psize) => {
      view().setUint32(pcount, 0, true);
      view().setUint32(psize, 0, true);
      return 0;
    },
    environ_get: () => 0,
  };
  const module = new WebAssembly.Module(fs.readFileSync(wasmPath));
  const inst = new WebAssembly.Instance(module, { env, wasi_snapshot_preview1: wasi });
  const ex = inst.exports;
  memory = ex.memory;
  ex.emscripten_stack_init();
  ex.__wasm_call_ctors();
  return { ex, heap, stderrLines };
}

function writeTm(v, secs, tm) {
  const d = new Date(secs * 1000);
  const fields = [
    d.getUTCSeconds(),
    d.getUTCMinutes(),
    d.getUTCHours(),
    d.getUTCDate(),
    d.getUTCMonth(),
    d.getUTCFullYear() - 1900,
    d.getUTCDay(),
    Math.floor((d - Date.UTC(d.getUTCFullYear(), 0, 1)) / 86400000),
    0,
  ];
  fields.forEach((f, i) => v.setInt32(tm + 4 * i, f, true));
  v.setInt32(tm + 36, 0, true); // tm_gmtoff
  v.setUint32(tm + 40, 0, true); // tm_zone
}

// A wasm function of type (i32, i32) -> () that calls `fn`: the reply callback
// must live in the engine's function table, which holds only wasm functions.
function wasmCallback(fn) {
  const bytes = Uint8Array.from([
    0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version 1
    0x01, 0x06, 0x01, 0x60, 0x02, 0x7f, 0x7f, 0x00, // type 0: (i32, i32) -> ()
    0x02, 0x07, 0x01, 0x01, 0x65, 0x01, 0x66, 0x00, 0x00, // import "e" "f": type 0
    0x07, 0x05, 0x01, 0x01, 0x66, 0x00, 0x00, // export "f": function 0
  ]);
  const m = new WebAssembly.Module(bytes);
  return new WebAssembly.Instance(m, { e: { f: fn } }).exports.f;
}

// ---- the RPC session ----

class TraceProcessor {
  constructor(wasmPath) {
    const { ex, heap, stderrLines } = loadEngine(wasmPath);
    this.ex = ex;
    this.heap = heap;
    this.stderrLines = stderrLines;
    this.seq = 0;
    this.rx = Buffer.alloc(0);
    this.replies = [];
    const table = ex.__indirect_function_table;
    const idx = table.grow(1);
    table.set(idx, wasmCallback((ptr, len) => this.onReply(ptr >>> 0, len >>> 0)));
    this.reqBuf = ex.trace_processor_rpc_init(idx, REQ_BUF) >>> 0;
  }

  // Collects reply bytes and splits them into TraceProcessorRpc messages.
  onReply(ptr, len) {
    const chunk = Buffer.from(this.heap().slice(ptr, ptr + len));
    this.rx = this.rx.length ? Buffer.concat([this.rx, chunk]) : chunk;
    for (;;) {
      const r = new Reader(this.rx);
      let msg;
      try {
        const [num, wire, range] = r.next();
        if (num !== 1 || wire !== 2) throw new Error(`bad RPC stream field ${num}`);
        msg = this.rx.subarray(range[0], range[1]);
      } catch (e) {
        if (/truncated/.test(e.message)) return;
        throw e;
      }
      this.replies.push(msg);
      this.rx = this.rx.subarray(r.pos);
      if (!this.rx.length) return;
    }
  }

  // Sends one request and returns the replies it produced (the engine answers
  // synchronously, within trace_processor_on_rpc_request).
  call(method, args) {
    const msg = Buffer.concat([field(1, 0, this.seq++), field(2, 0, method), args || Buffer.alloc(0)]);
    const stream = field(1, 2, msg);
    for (let off = 0; off < stream.length; off += REQ_BUF) {
      const part = stream.subarray(off, Math.min(stream.length, off + REQ_BUF));
      this.heap().set(part, this.reqBuf);
      this.ex.trace_processor_on_rpc_request(part.length);
    }
    const out = this.replies;
    this.replies = [];
    return out.map(parseRpc);
  }

  load(trace) {
    let error = null;
    for (let off = 0; off < trace.length; off += TRACE_CHUNK) {
      const data = trace.subarray(off, Math.min(trace.length, off + TRACE_CHUNK));
      for (const r of this.call(TPM_APPEND_TRACE_DATA, field(101, 2, data))) {
        error = error || r.fatal || r.appendError;
      }
      if (error) break;
    }
    for (const r of this.call(TPM_FINALIZE_TRACE_DATA)) error = error || r.fatal;
    return error;
  }

  query(sql) {
    const replies = this.call(TPM_QUERY_STREAMING, field(103, 2, field(1, 2, sql)));
    const res = { columns: [], rows: [], error: null };
    let cells = [];
    for (const r of replies) {
      if (r.fatal) res.error = r.fatal;
      if (!r.query) continue;
      if (r.query.columns.length) res.columns = r.query.columns;
      if (r.query.error) res.error = r.query.error;
      cells = cells.concat(r.query.cells);
    }
    const n = res.columns.length;
    for (let i = 0; n && i < cells.length; i += n) res.rows.push(cells.slice(i, i + n));
    return res;
  }
}

function parseRpc(buf) {
  const out = { fatal: null, appendError: null, query: null };
  const r = new Reader(buf);
  while (!r.done()) {
    const [num, wire, v] = r.next();
    if (wire !== 2) continue;
    const text = () => buf.subarray(v[0], v[1]).toString('utf8');
    if (num === 5) out.fatal = text();
    else if (num === 201) out.appendError = parseAppend(buf, v);
    else if (num === 203) out.query = parseQueryResult(buf, v);
  }
  return out;
}

function parseAppend(buf, [s, e]) {
  const r = new Reader(buf, s, e);
  let error = null;
  while (!r.done()) {
    const [num, wire, v] = r.next();
    if (num === 2 && wire === 2) error = buf.subarray(v[0], v[1]).toString('utf8');
  }
  return error;
}

function parseQueryResult(buf, [s, e]) {
  const res = { columns: [], error: null, cells: [] };
  const r = new Reader(buf, s, e);
  while (!r.done()) {
    const [num, wire, v] = r.next();
    if (wire !== 2) continue;
    if (num === 1) res.columns.push(buf.subarray(v[0], v[1]).toString('utf8'));
    else if (num === 2) res.error = buf.subarray(v[0], v[1]).toString('utf8') || null;
    else if (num === 3) res.cells.push(...parseBatch(buf, v));
  }
  return res;
}

function parseBatch(buf, [s, e]) {
  const types = [];
  const ints = [];
  const doubles = [];
  const blobs = [];
  let strings = [];
  const r = new Reader(buf, s, e);
  const packed = (v, each) => {
    const p = new Reader(buf, v[0], v[1]);
    while (!p.done()) each(p);
  };
  while (!r.done()) {
    const [num, wire, v] = r.next();
    if (num === 1) {
      if (wire === 2) packed(v, (p) => types.push(Number(p.varint())));
      else types.push(Number(v));
    } else if (num === 2) {
      if (wire === 2) packed(v, (p) => ints.push(toI64(p.varint())));
      else ints.push(toI64(v));
    } else if (num === 3) {
      if (wire === 2) {
        for (let o = v[0]; o < v[1]; o += 8) doubles.push(buf.readDoubleLE(o));
      } else doubles.push(buf.readDoubleLE(v));
    } else if (num === 4 && wire === 2) {
      blobs.push(buf.subarray(v[0], v[1]).toString('base64'));
    } else if (num === 5 && wire === 2) {
      const parts = buf.subarray(v[0], v[1]).toString('utf8').split('\0');
      parts.pop(); // each cell ends with a NUL
      strings = strings.concat(parts);
    }
  }
  let i = 0;
  let d = 0;
  let b = 0;
  let t = 0;
  return types.map((ty) => {
    switch (ty) {
      case CELL_NULL:
        return null;
      case CELL_VARINT:
        return ints[i++];
      case CELL_FLOAT64:
        return doubles[d++];
      case CELL_STRING:
        return strings[t++];
      case CELL_BLOB:
        return { blob: blobs[b++] };
      default:
        throw new Error(`unknown cell type ${ty}`);
    }
  });
}

// JSON with 64-bit integers written exactly.
function json(v) {
  if (typeof v === 'bigint') return v.toString();
  if (typeof v === 'number') return Number.isFinite(v) ? JSON.stringify(v) : 'null';
  if (Array.isArray(v)) return '[' + v.map(json).join(',') + ']';
  if (v && typeof v === 'object') {
    return '{' + Object.entries(v).map(([k, x]) => JSON.stringify(k) + ':' + json(x)).join(',') + '}';
  }
  return JSON.stringify(v);
}

function main() {
  const args = process.argv.slice(2);
  const w = args.indexOf('--wasm');
  if (w < 0 || args.length < w + 3) {
    process.stderr.write('usage: node tp.js --wasm TRACE_PROCESSOR_WASM TRACE [SQL...]\n');
    process.exit(2);
  }
  const wasm = args[w + 1];
  args.splice(w, 2);
  const [tracePath, ...queries] = args;
  const tp = new TraceProcessor(wasm);
  const trace = fs.readFileSync(tracePath);
  const error = tp.load(trace);
  const say = (v) => process.stdout.write(json(v) + '\n');
  say({ loaded: trace.length, error });
  const answer = (sql) => {
    try {
      say(tp.query(sql));
    } catch (e) {
      say({ columns: [], rows: [], error: `bridge: ${e.message}` });
    }
  };
  if (queries.length) {
    queries.forEach(answer);
    return;
  }
  const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  rl.on('line', (line) => {
    if (line.trim()) answer(JSON.parse(line));
  });
}

main();
