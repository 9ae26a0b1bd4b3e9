// Web-platform surface of the isolate.
//
// It runs once, when the engine builds the image every call starts from (wasm.rs), so each
// call begins with it already run; what it builds is part of that image, so keep it small. It
// evaluates to a function that receives the native bindings (an object that is never reachable
// from the handler's globals) and returns the hooks the Rust event loop drives:
// [fetchDone, fetchFail, timerFire, describe, fetch, runScript].
(function (native) {
  'use strict';
  const G = globalThis;
  const TE = TypeError;
  const apply = Reflect.apply;
  const def = (o, k, v) => Object.defineProperty(o, k, { value: v, writable: true, configurable: true, enumerable: false });
  const usv = (v) => String(v).toWellFormed();

  // QuickJS-ng adds this non-ECMAScript global; the isolate exposes exactly the documented set.
  delete G.queueMicrotask;

  // ---- array built-ins on huge lengths ---------------------------------------------------
  // Some of QuickJS's array built-ins walk indices 0..length of any array-like:
  // `Array.prototype.reverse.call({length: 2 ** 53 - 1})` would run until the call's CPU limit
  // ends it, with an error that says nothing of why. No array a call can hold is longer than its
  // memory allows, so a longer length can only be a sparse array or an array-like that lies: the
  // methods below refuse it before the walk, naming the method. (Others, like `indexOf`, `every`,
  // `map`, `find` and `reduce`, are left alone: they end at the CPU limit like any loop, and every
  // wrapper is a call more on every use.) The wrappers take the cheapest form: one object literal
  // of methods (methods get no `prototype` object) and plain assignments; the price is that these
  // methods' `length` is 0.
  {
    const AP = Array.prototype, originals = {};
    const lengthOf = (o) => { const n = Math.trunc(Number(o.length)); return n > 0 ? n : 0; };
    const refuse = (name, n) => {
      throw new RangeError(`Array.prototype.${name}: a length of ${n} is more elements than this sandbox's memory can hold (at most ${native.maxElements}); an array-like's length must match its contents`);
    };
    const walk = (name, self, args) => {
      if (self != null) {
        const n = lengthOf(Object(self));
        if (n > native.maxElements) refuse(name, n);
      }
      return apply(originals[name], self, args);
    };
    const guarded = {
      copyWithin(...a) { return walk('copyWithin', this, a); },
      fill(...a) { return walk('fill', this, a); },
      flat(...a) { return walk('flat', this, a); },
      flatMap(...a) { return walk('flatMap', this, a); },
      join(...a) { return walk('join', this, a); },
      reverse(...a) { return walk('reverse', this, a); },
      shift(...a) { return walk('shift', this, a); },
      slice(...a) { return walk('slice', this, a); },
      sort(...a) { return walk('sort', this, a); },
      splice(...a) { return walk('splice', this, a); },
      toLocaleString(...a) { return walk('toLocaleString', this, a); },
      toReversed(...a) { return walk('toReversed', this, a); },
      toSorted(...a) { return walk('toSorted', this, a); },
      toSpliced(...a) { return walk('toSpliced', this, a); },
      unshift(...a) { return walk('unshift', this, a); },
      with(...a) { return walk('with', this, a); },
      concat(...a) {
        for (const x of a) if (x !== null && typeof x === 'object' && lengthOf(x) > native.maxElements) refuse('concat', lengthOf(x));
        return walk('concat', this, a);
      },
    };
    for (const name in guarded) {
      originals[name] = AP[name];
      AP[name] = guarded[name];
    }
  }

  // ---- console -------------------------------------------------------------------------
  function fmt(v) {
    switch (typeof v) {
      case 'string': return v;
      case 'bigint': return v + 'n';
      case 'symbol': return v.toString();
      case 'function': return '[Function: ' + (v.name || 'anonymous') + ']';
      case 'object': {
        if (v === null) return 'null';
        if (v instanceof Error) {
          const d = describe(v);
          return d[1] ? d[0] + '\n' + d[1].replace(/\n$/, '') : d[0];
        }
        try {
          const seen = new WeakSet();
          const s = JSON.stringify(v, (k, x) => {
            if (typeof x === 'bigint') return x + 'n';
            if (typeof x === 'function') return '[Function: ' + (x.name || 'anonymous') + ']';
            if (typeof x === 'symbol') return x.toString();
            if (typeof x === 'object' && x !== null) {
              if (seen.has(x)) return '[Circular]';
              seen.add(x);
              if (x instanceof Map) return { '[Map]': Array.from(x) };
              if (x instanceof Set) return { '[Set]': Array.from(x) };
            }
            return x;
          });
          return s === undefined ? String(v) : s;
        } catch {
          try { return String(v); } catch { return '[object]'; }
        }
      }
      default: return String(v);
    }
  }
  let consoleOpen = true;
  const con = {};
  for (const level of ['log', 'info', 'warn', 'error', 'debug']) {
    def(con, level, function (...args) {
      // Once the Rust side has hit max_console_bytes it says so and we stop formatting.
      if (!consoleOpen) return;
      let line = '';
      for (let i = 0; i < args.length; i++) line += (i ? ' ' : '') + fmt(args[i]);
      consoleOpen = native.console(level, line.toWellFormed());
    });
  }
  def(G, 'console', con);

  // ---- timers (the clock and the queue live in Rust; callbacks live here) ------------------
  const timers = new Map();
  def(G, 'setTimeout', function setTimeout(callback, delay, ...args) {
    if (typeof callback !== 'function') throw new TE('setTimeout: callback must be a function');
    const id = native.timerSet(Number(delay) || 0);
    timers.set(id, [callback, args]);
    return id;
  });
  def(G, 'clearTimeout', function clearTimeout(id) {
    if (timers.delete(id)) native.timerClear(id);
  });
  function timerFire(id) {
    const t = timers.get(id);
    if (t === undefined) return;
    timers.delete(id);
    apply(t[0], undefined, t[1]);
  }

  // ---- encoding ------------------------------------------------------------------------
  function toBytes(input, what) {
    if (input instanceof ArrayBuffer || (typeof SharedArrayBuffer === 'function' && input instanceof SharedArrayBuffer)) return new Uint8Array(input);
    if (ArrayBuffer.isView(input)) return new Uint8Array(input.buffer, input.byteOffset, input.byteLength);
    throw new TE(what + ': expected an ArrayBuffer or a typed array / DataView');
  }
  class TextEncoder {
    get encoding() { return 'utf-8'; }
    encode(input = '') { return native.utf8Encode(usv(input)); }
    encodeInto(source, dest) {
      if (!(dest instanceof Uint8Array)) throw new TE('TextEncoder.encodeInto: destination must be a Uint8Array');
      const s = usv(source);
      let read = 0, written = 0;
      for (const ch of s) {
        const cp = ch.codePointAt(0);
        const n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
        if (written + n > dest.length) break;
        read += ch.length;
        written += n;
      }
      dest.set(native.utf8Encode(s.slice(0, read)));
      return { read, written };
    }
  }
  const UTF8 = ['utf-8', 'utf8', 'unicode-1-1-utf-8', 'unicode11utf8', 'unicode20utf8', 'x-unicode20utf8'];
  // Length of an incomplete UTF-8 sequence at the end of `b` (0 if it ends cleanly).
  function incompleteTail(b) {
    for (let i = b.length - 1, k = 1; i >= 0 && k <= 4; i--, k++) {
      const c = b[i];
      if ((c & 0xc0) === 0x80) continue;
      const need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
      return need > k ? k : 0;
    }
    return 0;
  }
  class TextDecoder {
    #fatal; #ignoreBOM; #pending = null; #started = false;
    constructor(label = 'utf-8', options = undefined) {
      const l = String(label).trim().toLowerCase();
      if (!UTF8.includes(l)) throw new RangeError(`TextDecoder: unsupported encoding '${label}' (only utf-8 is available)`);
      this.#fatal = !!(options && options.fatal);
      this.#ignoreBOM = !!(options && options.ignoreBOM);
    }
    get encoding() { return 'utf-8'; }
    get fatal() { return this.#fatal; }
    get ignoreBOM() { return this.#ignoreBOM; }
    decode(input = undefined, options = undefined) {
      let b = input === undefined ? new Uint8Array(0) : toBytes(input, 'TextDecoder.decode');
      const stream = !!(options && options.stream);
      if (this.#pending !== null) {
        const joined = new Uint8Array(this.#pending.length + b.length);
        joined.set(this.#pending);
        joined.set(b, this.#pending.length);
        b = joined;
        this.#pending = null;
      }
      if (stream) {
        const cut = incompleteTail(b);
        if (cut) { this.#pending = b.slice(b.length - cut); b = b.subarray(0, b.length - cut); }
      }
      let s = native.utf8Decode(b, this.#fatal);
      if (!this.#started && !this.#ignoreBOM && s.charCodeAt(0) === 0xfeff) s = s.slice(1);
      this.#started = stream && (this.#started || s.length > 0);
      return s;
    }
  }
  def(G, 'TextEncoder', TextEncoder);
  def(G, 'TextDecoder', TextDecoder);

  // ---- URLSearchParams / URL (parsing and serialisation are native, WHATWG via `url`) -----
  let linkParams, resetParams, setQuery;
  const pairs = (flat) => { const out = []; for (let i = 0; i + 1 < flat.length; i += 2) out.push([flat[i], flat[i + 1]]); return out; };
  class URLSearchParams {
    #list = [];
    #url = null;
    constructor(init = undefined) {
      if (init === undefined || init === null) return;
      if (typeof init === 'object' || typeof init === 'function') {
        if (init instanceof URLSearchParams) { this.#list = init.#list.map((p) => [p[0], p[1]]); return; }
        if (typeof init[Symbol.iterator] === 'function') {
          for (const pair of init) {
            const p = Array.from(pair);
            if (p.length !== 2) throw new TE('URLSearchParams: each pair must have exactly two elements');
            this.#list.push([usv(p[0]), usv(p[1])]);
          }
          return;
        }
        for (const k of Object.keys(init)) this.#list.push([usv(k), usv(init[k])]);
        return;
      }
      let s = usv(init);
      if (s.startsWith('?')) s = s.slice(1);
      this.#list = pairs(native.formParse(s));
    }
    #update() { if (this.#url !== null) setQuery(this.#url, this.toString()); }
    get size() { return this.#list.length; }
    append(name, value) { this.#list.push([usv(name), usv(value)]); this.#update(); }
    delete(name, value = undefined) {
      const n = usv(name), v = value === undefined ? undefined : usv(value);
      this.#list = this.#list.filter((p) => !(p[0] === n && (v === undefined || p[1] === v)));
      this.#update();
    }
    get(name) { const n = usv(name); const p = this.#list.find((p) => p[0] === n); return p ? p[1] : null; }
    getAll(name) { const n = usv(name); return this.#list.filter((p) => p[0] === n).map((p) => p[1]); }
    has(name, value = undefined) {
      const n = usv(name), v = value === undefined ? undefined : usv(value);
      return this.#list.some((p) => p[0] === n && (v === undefined || p[1] === v));
    }
    set(name, value) {
      const n = usv(name), v = usv(value);
      const i = this.#list.findIndex((p) => p[0] === n);
      if (i < 0) this.#list.push([n, v]);
      else { this.#list[i][1] = v; this.#list = this.#list.filter((p, j) => j <= i || p[0] !== n); }
      this.#update();
    }
    sort() { this.#list.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0)); this.#update(); }
    toString() { return native.formSerialize(this.#list.flat()); }
    forEach(cb, thisArg = undefined) { for (const p of this.#list.slice()) apply(cb, thisArg, [p[1], p[0], this]); }
    *entries() { for (const p of this.#list.slice()) yield [p[0], p[1]]; }
    *keys() { for (const p of this.#list.slice()) yield p[0]; }
    *values() { for (const p of this.#list.slice()) yield p[1]; }
    [Symbol.iterator]() { return this.entries(); }
    get [Symbol.toStringTag]() { return 'URLSearchParams'; }
    static {
      linkParams = (sp, url) => { sp.#url = url; };
      resetParams = (sp, query) => { sp.#list = query ? pairs(native.formParse(query)) : []; };
    }
  }
  // Components arrays from native.urlParse / native.urlSet:
  // [href, origin, protocol, username, password, host, hostname, port, pathname, search, hash]
  class URL {
    #c;
    #sp = null;
    constructor(url, base = undefined) {
      const c = native.urlParse(usv(url), base === undefined ? undefined : usv(base));
      if (c == null) throw new TE(`Invalid URL: '${usv(url)}'` + (base === undefined ? '' : ` with base '${usv(base)}'`));
      this.#c = c;
    }
    static canParse(url, base = undefined) { return native.urlParse(usv(url), base === undefined ? undefined : usv(base)) != null; }
    static parse(url, base = undefined) { try { return new URL(url, base); } catch { return null; } }
    #set(field, value) { const c = native.urlSet(this.#c[0], field, usv(value)); if (c != null) this.#c = c; }
    #resync() { if (this.#sp !== null) resetParams(this.#sp, this.#c[9].slice(1)); }
    get href() { return this.#c[0]; }
    set href(v) {
      const c = native.urlParse(usv(v), undefined);
      if (c == null) throw new TE(`Invalid URL: '${usv(v)}'`);
      this.#c = c;
      this.#resync();
    }
    get origin() { return this.#c[1]; }
    get protocol() { return this.#c[2]; }
    set protocol(v) { this.#set('protocol', v); }
    get username() { return this.#c[3]; }
    set username(v) { this.#set('username', v); }
    get password() { return this.#c[4]; }
    set password(v) { this.#set('password', v); }
    get host() { return this.#c[5]; }
    set host(v) { this.#set('host', v); }
    get hostname() { return this.#c[6]; }
    set hostname(v) { this.#set('hostname', v); }
    get port() { return this.#c[7]; }
    set port(v) { this.#set('port', v); }
    get pathname() { return this.#c[8]; }
    set pathname(v) { this.#set('pathname', v); }
    get search() { return this.#c[9]; }
    set search(v) { this.#set('search', v); this.#resync(); }
    get hash() { return this.#c[10]; }
    set hash(v) { this.#set('hash', v); }
    get searchParams() {
      if (this.#sp === null) { this.#sp = new URLSearchParams(this.#c[9].slice(1)); linkParams(this.#sp, this); }
      return this.#sp;
    }
    toString() { return this.#c[0]; }
    toJSON() { return this.#c[0]; }
    get [Symbol.toStringTag]() { return 'URL'; }
    static { setQuery = (url, q) => url.#set('search', q); }
  }
  def(G, 'URLSearchParams', URLSearchParams);
  def(G, 'URL', URL);

  // ---- pathSegment -----------------------------------------------------------------------
  // A value placed in a URL path must stay one ordinary segment. `encodeURIComponent` keeps `/`
  // out, but URL normalisation removes a `.` segment and climbs one level on `..`, also when
  // they are percent-encoded, some servers decode a path more than once (and then see the
  // segments inside a value) or fold `．` into `.`, and an empty segment changes the path too:
  // each would send the request, with the server's credentials, to another resource. The OpenAPI
  // executor applies the same rule to the paths it builds.
  def(G, 'pathSegment', function pathSegment(value) {
    const kind = value === null ? 'null' : typeof value;
    if (!['string', 'number', 'bigint', 'boolean'].includes(kind)) {
      throw new TE(`pathSegment(value): the value must be a string or a number, not ${kind}`);
    }
    const segment = encodeURIComponent(usv(value));
    if (segment === '') throw new RangeError('pathSegment(value): the value is empty, which would leave an empty path segment; pass a non-empty value');
    let meaning = segment;
    for (let i = 0; i < 4; i++) {
      let next;
      try { next = decodeURIComponent(meaning); } catch { break; }
      if (next === meaning) break;
      meaning = next;
    }
    if (meaning.normalize('NFKC').split(/[\\/]/).some((part) => part === '.' || part === '..')) {
      throw new RangeError(`pathSegment(value): ${JSON.stringify(usv(value))} would make a "." or ".." path segment, which URL normalisation removes or climbs (also when percent-encoded), so the request would reach another resource; pass the value itself, without "." or ".." segments`);
    }
    return segment;
  });

  // ---- Headers -------------------------------------------------------------------------
  const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
  function hname(n) {
    n = usv(n);
    if (!TOKEN.test(n)) throw new TE(`Invalid header name: ${JSON.stringify(n)}`);
    return n.toLowerCase();
  }
  function hvalue(v) {
    v = usv(v).replace(/^[\t\n\r ]+|[\t\n\r ]+$/g, '');
    if (/[\0\r\n]/.test(v)) throw new TE('Invalid header value: must not contain NUL, CR or LF');
    return v;
  }
  let headerList, headersFrom;
  class Headers {
    #m = new Map(); // lower-case name -> [values]
    constructor(init = undefined) {
      if (init === undefined || init === null) return;
      if (init instanceof Headers) { for (const [k, vs] of init.#m) this.#m.set(k, vs.slice()); return; }
      if (typeof init !== 'object' && typeof init !== 'function') throw new TE('Headers: expected an object, an array of pairs or Headers');
      if (typeof init[Symbol.iterator] === 'function') {
        for (const pair of init) {
          const p = Array.from(pair);
          if (p.length !== 2) throw new TE('Headers: each pair must have exactly two elements');
          this.append(p[0], p[1]);
        }
      } else {
        for (const k of Object.keys(init)) this.append(k, init[k]);
      }
    }
    append(name, value) { const n = hname(name), v = hvalue(value); const vs = this.#m.get(n); if (vs) vs.push(v); else this.#m.set(n, [v]); }
    set(name, value) { this.#m.set(hname(name), [hvalue(value)]); }
    delete(name) { this.#m.delete(hname(name)); }
    get(name) { const vs = this.#m.get(hname(name)); return vs ? vs.join(', ') : null; }
    has(name) { return this.#m.has(hname(name)); }
    getSetCookie() { return (this.#m.get('set-cookie') || []).slice(); }
    *entries() {
      for (const n of [...this.#m.keys()].sort()) {
        const vs = this.#m.get(n);
        if (vs === undefined) continue;
        if (n === 'set-cookie') { for (const v of vs) yield [n, v]; } else yield [n, vs.join(', ')];
      }
    }
    *keys() { for (const e of this.entries()) yield e[0]; }
    *values() { for (const e of this.entries()) yield e[1]; }
    [Symbol.iterator]() { return this.entries(); }
    forEach(cb, thisArg = undefined) { for (const [k, v] of this.entries()) apply(cb, thisArg, [v, k, this]); }
    get [Symbol.toStringTag]() { return 'Headers'; }
    static {
      headerList = (h) => { const out = []; for (const [k, vs] of h.#m) for (const v of vs) out.push(k, v); return out; };
      // Response headers come from the host already parsed; skip validation so a response is never lost to it.
      headersFrom = (flat) => {
        const h = new Headers();
        for (let i = 0; i + 1 < flat.length; i += 2) {
          const n = flat[i].toLowerCase(), vs = h.#m.get(n);
          if (vs) vs.push(flat[i + 1]); else h.#m.set(n, [flat[i + 1]]);
        }
        return h;
      };
    }
  }
  def(G, 'Headers', Headers);

  // ---- bodies and Response -------------------------------------------------------------
  // Returns [Uint8Array | null, default content-type | null]. A plain object or array body is
  // sent as JSON (the Fetch standard would send "[object Object]", which is never intended).
  function bodyBytes(body) {
    if (body === undefined || body === null) return [null, null];
    if (typeof body === 'string') return [native.utf8Encode(body.toWellFormed()), 'text/plain;charset=UTF-8'];
    if (body instanceof URLSearchParams) return [native.utf8Encode(body.toString()), 'application/x-www-form-urlencoded;charset=UTF-8'];
    if (body instanceof ArrayBuffer || ArrayBuffer.isView(body)) return [toBytes(body, 'body').slice(), null];
    if (typeof body === 'object') {
      const json = JSON.stringify(body);
      return [native.utf8Encode(json === undefined ? 'null' : json.toWellFormed()), 'application/json'];
    }
    return [native.utf8Encode(usv(body)), 'text/plain;charset=UTF-8'];
  }
  function decodeText(b) {
    const s = native.utf8Decode(b, false);
    return s.charCodeAt(0) === 0xfeff ? s.slice(1) : s;
  }
  const INTERNAL = Symbol('internal');
  class Response {
    #status = 200; #statusText = ''; #headers; #url = ''; #redirected = false; #body = null; #used = false;
    constructor(body = null, init = undefined, internal = undefined) {
      if (internal === INTERNAL) {
        // [status, statusText, url, redirected, flatHeaders, ArrayBuffer]
        const r = init;
        this.#status = r[0]; this.#statusText = r[1]; this.#url = r[2]; this.#redirected = r[3];
        this.#headers = headersFrom(r[4]);
        this.#body = new Uint8Array(r[5]);
        return;
      }
      init = init ?? {};
      if (init.status !== undefined) {
        const s = Number(init.status);
        if (!Number.isInteger(s) || s < 200 || s > 599) throw new RangeError('Response: status must be an integer between 200 and 599');
        this.#status = s;
      }
      if (init.statusText !== undefined) this.#statusText = usv(init.statusText);
      this.#headers = new Headers(init.headers);
      const [bytes, type] = bodyBytes(body);
      this.#body = bytes;
      if (type !== null && !this.#headers.has('content-type')) this.#headers.set('content-type', type);
    }
    get status() { return this.#status; }
    get ok() { return this.#status >= 200 && this.#status < 300; }
    get statusText() { return this.#statusText; }
    get headers() { return this.#headers; }
    get url() { return this.#url; }
    get redirected() { return this.#redirected; }
    get type() { return 'basic'; }
    get bodyUsed() { return this.#used; }
    // There are no streams in the isolate: bodies are fully buffered by the host.
    get body() { return null; }
    #consume() {
      if (this.#used) throw new TE('Response body has already been consumed');
      this.#used = true;
      return this.#body === null ? new Uint8Array(0) : this.#body;
    }
    async text() { return decodeText(this.#consume()); }
    async json() { return JSON.parse(decodeText(this.#consume())); }
    async arrayBuffer() { const b = this.#consume(); return b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength); }
    async bytes() { return this.#consume().slice(); }
    clone() {
      if (this.#used) throw new TE('Response.clone: body has already been consumed');
      const r = new Response(null);
      r.#status = this.#status; r.#statusText = this.#statusText; r.#url = this.#url; r.#redirected = this.#redirected;
      r.#headers = new Headers(this.#headers);
      r.#body = this.#body === null ? null : this.#body.slice();
      return r;
    }
    static json(data, init = undefined) {
      const r = new Response(JSON.stringify(data), init);
      if (!(init && init.headers && new Headers(init.headers).has('content-type'))) r.headers.set('content-type', 'application/json');
      return r;
    }
    get [Symbol.toStringTag]() { return 'Response'; }
  }
  def(G, 'Response', Response);

  // ---- fetch ---------------------------------------------------------------------------
  const METHODS = ['DELETE', 'GET', 'HEAD', 'OPTIONS', 'POST', 'PUT', 'PATCH'];
  const pending = new Map(); // id -> [resolve, reject, TypeError created at the call site]
  function fetch(input, init = undefined) {
    // Created here, before anything is awaited, so its stack points at the handler line that
    // called fetch(); a later host failure reuses it with the host's message.
    const site = new TE('fetch failed');
    return new Promise((resolve, reject) => {
      init = init ?? {};
      if (typeof init !== 'object') throw new TE('fetch: init must be an object');
      let url;
      if (input instanceof URL) url = input.href;
      else if (input !== null && typeof input === 'object' && typeof input.url === 'string') url = input.url;
      else url = usv(input);
      let method = 'GET';
      if (init.method !== undefined) {
        method = usv(init.method);
        if (!TOKEN.test(method)) throw new TE(`fetch: invalid method '${method}'`);
        if (METHODS.includes(method.toUpperCase())) method = method.toUpperCase();
      }
      const headers = new Headers(init.headers);
      const [body, type] = bodyBytes(init.body);
      if (body !== null && (method === 'GET' || method === 'HEAD')) throw new TE(`fetch: a ${method} request cannot have a body`);
      if (type !== null && !headers.has('content-type')) headers.set('content-type', type);
      const redirect = init.redirect === undefined ? 'follow' : usv(init.redirect);
      if (redirect !== 'follow' && redirect !== 'manual' && redirect !== 'error') throw new TE(`fetch: invalid redirect mode '${redirect}'`);
      const id = native.fetchStart(url, method, headerList(headers), body === null ? undefined : body, redirect);
      pending.set(id, [resolve, reject, site]);
    });
  }
  def(G, 'fetch', fetch);
  function fetchDone(id, response) {
    const p = pending.get(id);
    if (p === undefined) return;
    pending.delete(id);
    p[0](new Response(null, response, INTERNAL));
  }
  function fetchFail(id, message) {
    const p = pending.get(id);
    if (p === undefined) return;
    pending.delete(id);
    p[2].message = message;
    p[1](p[2]);
  }

  // ---- structuredClone -------------------------------------------------------------------
  function structuredClone(value, options = undefined) {
    const seen = new Map();
    const fail = (what) => { throw new DOMException(what + ' could not be cloned', 'DataCloneError'); };
    const clone = (v) => {
      if (typeof v === 'function' || typeof v === 'symbol') fail(typeof v);
      if (typeof v !== 'object' || v === null) return v;
      if (seen.has(v)) return seen.get(v);
      let out;
      const fill = (o, src) => { seen.set(v, o); for (const k of Object.keys(src)) o[k] = clone(src[k]); return o; };
      if (Array.isArray(v)) return fill(new Array(v.length), v);
      if (v instanceof Map) { out = new Map(); seen.set(v, out); for (const [k, x] of v) out.set(clone(k), clone(x)); return out; }
      if (v instanceof Set) { out = new Set(); seen.set(v, out); for (const x of v) out.add(clone(x)); return out; }
      if (v instanceof Date) out = new Date(v.getTime());
      else if (v instanceof RegExp) out = new RegExp(v.source, v.flags);
      else if (v instanceof ArrayBuffer) out = v.slice(0);
      else if (v instanceof DataView) out = new DataView(clone(v.buffer), v.byteOffset, v.byteLength);
      else if (ArrayBuffer.isView(v)) out = new v.constructor(clone(v.buffer), v.byteOffset, v.length);
      else if (v instanceof Error) {
        const C = { EvalError, RangeError, ReferenceError, SyntaxError, TypeError, URIError }[v.name] || Error;
        out = new C(v.message);
      } else if (v instanceof Boolean || v instanceof Number || v instanceof String) out = Object(v.valueOf());
      else if (v instanceof Promise || v instanceof WeakMap || v instanceof WeakSet || v instanceof WeakRef) fail(Object.prototype.toString.call(v));
      else return fill({}, v);
      seen.set(v, out);
      return out;
    };
    return clone(value);
  }
  def(G, 'structuredClone', structuredClone);

  // ---- error description for the Rust side: [text, stack] ---------------------------------
  function describe(e) {
    try {
      if (e instanceof Error) {
        let name = 'Error', msg = '', stack = '';
        try { name = String(e.name); } catch {}
        try { msg = String(e.message); } catch {}
        try { if (typeof e.stack === 'string') stack = e.stack; } catch {}
        return [msg ? (name ? name + ': ' + msg : msg) : name, stack];
      }
      return [fmt(e), ''];
    } catch {
      return ['(a value that could not be described)', ''];
    }
  }

  // ---- code-mode scripts -------------------------------------------------------------------
  // A script gets `call_tool` and typed stubs instead of `fetch`. A tool call is a request to
  // `tool:<server>/<tool>` on the same host channel, which only a script's host answers (with
  // the JSON of `{ok, value}` or `{ok: false, error: {code, message}}`). Runs the script and
  // returns a promise of `{value}`, `{}` (nothing returned) or `{unserialisable: reason}`.
  class ToolError extends Error {
    constructor(message, code) { super(message); this.code = code; }
    get name() { return 'ToolError'; }
  }
  function runScript(script, input, hostFetch, toolsJson) {
    // Scripts have no network: their tools are their only way out.
    delete G.fetch;
    const fail = (code, message) => ({ ok: false, error: { code, message } });
    const call_tool = async function call_tool(server, tool, args) {
      if (typeof server !== 'string' || typeof tool !== 'string') {
        return fail('INVALID_ARGUMENTS', 'call_tool(server, tool, args): server and tool must be strings');
      }
      if (args === undefined || args === null) args = {};
      if (typeof args !== 'object' || Array.isArray(args)) {
        return fail('INVALID_ARGUMENTS', `call_tool: the arguments of ${server}.${tool} must be an object`);
      }
      let body;
      try { body = JSON.stringify(args); } catch (e) {
        return fail('INVALID_ARGUMENTS', `call_tool: the arguments of ${server}.${tool} cannot be converted to JSON: ${describe(e)[0]}`);
      }
      let response;
      try {
        response = await hostFetch('tool:' + encodeURIComponent(server) + '/' + encodeURIComponent(tool), { method: 'POST', body });
      } catch (e) {
        return fail('INTERNAL', `the call to ${server}.${tool} could not be made: ${e.message}`);
      }
      return JSON.parse(await response.text());
    };
    const api = JSON.parse(toolsJson), tools = {};
    const stub = (server, name) => async function (args) {
      // Made before the await, so its stack names the script line of the call.
      const site = new ToolError('', '');
      const r = await call_tool(server, name, args);
      if (r.ok) return r.value;
      site.message = `${server}.${name}: ${r.error.message}`;
      site.code = r.error.code;
      throw site;
    };
    for (const server of Object.keys(api)) {
      // `["tool", ...]`, or `{tools: [...], operations: true}` for a server whose every
      // operation is callable by its id (discovery mode): any other name is a stub too.
      const entry = api[server], stubs = {};
      const names = Array.isArray(entry) ? entry : entry.tools;
      for (const name of names) stubs[name] = stub(server, name);
      Object.freeze(stubs);
      tools[server] = Array.isArray(entry) || !entry.operations ? stubs : new Proxy(stubs, {
        get(target, name) {
          // `then` stays absent, so awaiting `tools.<server>` does not call an operation.
          if (typeof name !== 'string' || name === 'then' || name in target) return target[name];
          return stub(server, name);
        },
      });
    }
    Object.freeze(tools);
    return script(input, call_tool, tools).then((value) => {
      if (value === undefined) return {};
      try {
        JSON.stringify(value, function (key, v) {
          const at = key === '' ? 'the result' : `the value at key ${JSON.stringify(key)}`;
          if (typeof v === 'function') throw new TE(`${at} is a function`);
          if (typeof v === 'symbol') throw new TE(`${at} is a symbol`);
          return v;
        });
      } catch (e) {
        return { unserialisable: describe(e)[0] };
      }
      return { value };
    }, (e) => {
      // Uncaught: the text, and the stack with lines counted within the script.
      const [thrown, stack] = describe(e);
      const frames = stack.split('\n').filter((f) => f.includes('handler:')).map((f) => f.replace(/handler:(\d+)/, (m, n) => 'script:' + (n - 1)));
      const at = /script:(\d+)/.exec(frames[0] || '');
      return { thrown, stack: frames.join('\n'), line: at ? Number(at[1]) : null };
    });
  }

  return [fetchDone, fetchFail, timerFire, describe, fetch, runScript];
})
