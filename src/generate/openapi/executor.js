// The one handler every operation of an API description runs: it builds the request the
// description specifies from `plan` (declared above this text) and the tool's arguments.
// Serialisation follows OpenAPI 3: path `simple`/`label`/`matrix`, query `form` (exploded or
// not), `spaceDelimited`, `pipeDelimited` and `deepObject`, headers and cookies `simple`/`form`;
// bodies as JSON, form-urlencoded, text, multipart/form-data or the bytes of one file (as they
// are, or as base64 text when the description says `format: byte`).
//
// A file argument is `{content_base64}` or `{url}` (with optional `filename` and `media_type`).
// A URL is fetched with this sandbox's own `fetch`, so the server's egress policy decides it like
// any request: a host off the whitelist is denied, and a file larger than the response limit
// fails with the limit's name. Base64 content is bounded by the arguments' size limit.
//
// Every path segment that holds a parameter must stay one ordinary segment. URL normalisation
// removes a `.` segment and climbs one level on `..`, also when they are percent-encoded, and
// some servers decode a path more than once or fold `．` into `.`; an empty segment changes the
// path too. A value that would do any of that would send the request, with the server's
// credentials, to another resource, so it is refused (the prelude's `pathSegment` applies the
// same rule to handlers written by the compiler).
const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const text = (v) => (typeof v === 'string' ? v : isObject(v) || Array.isArray(v) ? JSON.stringify(v) : String(v));
const enc = (v) => encodeURIComponent(text(v));
const entries = (v) => Object.entries(v).filter(([, x]) => x !== undefined && x !== null);
function pathValue(p, v) {
  const prefix = p.style === 'label' ? '.' : p.style === 'matrix' ? `;${p.name}=` : '';
  const sep = p.style === 'label' && p.explode ? '.' : p.style === 'matrix' && p.explode ? `;${p.name}=` : ',';
  if (Array.isArray(v)) return prefix + v.map(enc).join(sep);
  if (isObject(v)) {
    const pairs = entries(v);
    if (p.explode) return (p.style === 'matrix' ? ';' : prefix) + pairs.map(([k, x]) => `${enc(k)}=${enc(x)}`).join(p.style === 'matrix' ? ';' : sep);
    return prefix + pairs.flatMap(([k, x]) => [enc(k), enc(x)]).join(',');
  }
  return prefix + enc(v);
}
// What a server may take a segment to mean: decoded as often as it decodes, compatibility
// characters folded, and read as a path of its own (a decoded `/` or `\` separates).
function meanings(segment) {
  let s = segment;
  for (let i = 0; i < 4; i++) {
    let next;
    try { next = decodeURIComponent(s); } catch { break; }
    if (next === s) break;
    s = next;
  }
  return s.normalize('NFKC').split(/[\\/]/);
}
function expandSegment(template) {
  const used = plan.params.filter((p) => p.in === 'path' && template.includes(`{${p.name}}`));
  let segment = template;
  for (const p of used) segment = segment.split(`{${p.name}}`).join(pathValue(p, args[p.arg]));
  if (!used.length) return segment;
  const names = used.map((p) => p.arg).join(' and ');
  const shown = used.map((p) => JSON.stringify(text(args[p.arg]))).join(' and ');
  const operation = `${plan.method} ${plan.path}`;
  if (segment === '') {
    throw new Error(`the path parameter ${names} is empty, which would leave an empty path segment in ${operation} and address another resource; pass a non-empty value`);
  }
  if (meanings(segment).some((part) => part === '.' || part === '..')) {
    throw new Error(`the path parameter ${names} (${shown}) would make a "." or ".." path segment, which URL normalisation removes or climbs (also when percent-encoded), so ${operation} would reach another resource; pass the value itself, without "." or ".." segments`);
  }
  return segment;
}
function queryPairs(p, v) {
  const name = enc(p.name);
  if (Array.isArray(v)) {
    if (p.style === 'spaceDelimited') return [`${name}=${v.map(enc).join('%20')}`];
    if (p.style === 'pipeDelimited') return [`${name}=${v.map(enc).join('|')}`];
    return p.explode ? v.map((x) => `${name}=${enc(x)}`) : [`${name}=${v.map(enc).join(',')}`];
  }
  if (isObject(v)) {
    if (p.style === 'deepObject') return entries(v).map(([k, x]) => `${name}%5B${enc(k)}%5D=${enc(x)}`);
    return p.explode
      ? entries(v).map(([k, x]) => `${enc(k)}=${enc(x)}`)
      : [`${name}=${entries(v).flatMap(([k, x]) => [enc(k), enc(x)]).join(',')}`];
  }
  return [`${name}=${enc(v)}`];
}
function headerValue(p, v) {
  if (Array.isArray(v)) return v.map(text).join(',');
  if (isObject(v)) return entries(v).map(([k, x]) => (p.explode ? `${k}=${text(x)}` : `${k},${text(x)}`)).join(',');
  return text(v);
}
const query = [], headers = {}, cookies = [];
for (const p of plan.params) {
  const v = args[p.arg];
  if (v === undefined || v === null) {
    if (p.in === 'path') throw new Error(`the path parameter ${p.arg} is required`);
    continue;
  }
  if (p.in === 'query') query.push(...queryPairs(p, v));
  else if (p.in === 'header') headers[p.name] = headerValue(p, v);
  else if (p.in === 'cookie') cookies.push(`${p.name}=${enc(headerValue(p, v))}`);
}
const path = plan.path.split('/').map(expandSegment).join('/');
if (cookies.length) headers.cookie = cookies.join('; ');
if (plan.accept && !Object.keys(headers).some((h) => h.toLowerCase() === 'accept')) headers.accept = plan.accept;
function base64Bytes(data, what) {
  const clean = data.replace(/[\s]+/g, '').replace(/-/g, '+').replace(/_/g, '/');
  let binary;
  try { binary = atob(clean); } catch {
    throw new Error(`${what}: content_base64 is not valid base64; give the file's bytes base64-encoded`);
  }
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}
function base64Text(bytes) {
  let binary = '';
  for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(binary);
}
// A media type given for a part: it goes into the body's part headers, so it must be one line.
function mediaType(type, what) {
  if (type === undefined || type === null) return undefined;
  if (typeof type !== 'string' || !/^[\w!#$&^.+-]+\/[\w!#$&^.+-]+( *;[^\r\n]*)?$/.test(type)) {
    throw new Error(`${what}: media_type ${JSON.stringify(type)} is not a media type like "image/png"`);
  }
  return type;
}
async function fileOf(value, what) {
  if (!isObject(value)) {
    throw new Error(`${what} must be a file: {"content_base64": "..."} or {"url": "https://..."}, with optional filename and media_type`);
  }
  const type = mediaType(value.media_type, what);
  const named = typeof value.filename === 'string' && value.filename !== '' ? value.filename : undefined;
  if (typeof value.content_base64 === 'string') return { bytes: base64Bytes(value.content_base64, what), filename: named, type };
  if (typeof value.url === 'string') {
    let response;
    try { response = await fetch(value.url); } catch (e) {
      throw new Error(`${what}: the file at ${value.url} could not be fetched: ${e.message}`);
    }
    if (!response.ok) throw new Error(`${what}: fetching the file at ${value.url} answered ${response.status} ${response.statusText}`);
    const bytes = new Uint8Array(await response.arrayBuffer());
    let last = new URL(response.url || value.url).pathname.split('/').pop() || '';
    try { last = decodeURIComponent(last); } catch {}
    const fetchedType = (response.headers.get('content-type') || '').split(/[\r\n]/)[0] || undefined;
    return { bytes, filename: named ?? (last || undefined), type: type ?? fetchedType };
  }
  throw new Error(`${what} needs content_base64 (the bytes, base64-encoded) or url (where to fetch them)`);
}
const encoder = new TextEncoder();
// A name or file name inside a part header, escaped as browsers do (WHATWG multipart/form-data).
const quoted = (v) => String(v).replace(/["\r\n]/g, (c) => (c === '"' ? '%22' : c === '\r' ? '%0D' : '%0A'));
async function multipart(value, files) {
  const boundary = `----mcpbootd${Math.random().toString(16).slice(2)}${Math.random().toString(16).slice(2)}`;
  const chunks = [];
  const part = (head, bytes) => chunks.push(encoder.encode(`--${boundary}\r\n${head}\r\n\r\n`), bytes, encoder.encode('\r\n'));
  for (const [name, field] of entries(isObject(value) ? value : {})) {
    const items = Array.isArray(field) ? field : [field];
    for (const item of items) {
      if (files.includes(name)) {
        const file = await fileOf(item, `the file field ${name}`);
        const disposition = `Content-Disposition: form-data; name="${quoted(name)}"; filename="${quoted(file.filename ?? name)}"`;
        part(`${disposition}\r\nContent-Type: ${file.type ?? 'application/octet-stream'}`, file.bytes);
      } else if (isObject(item) || Array.isArray(item)) {
        part(`Content-Disposition: form-data; name="${quoted(name)}"\r\nContent-Type: application/json`, encoder.encode(JSON.stringify(item)));
      } else {
        part(`Content-Disposition: form-data; name="${quoted(name)}"`, encoder.encode(text(item)));
      }
    }
  }
  chunks.push(encoder.encode(`--${boundary}--\r\n`));
  const bytes = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
  let at = 0;
  for (const c of chunks) { bytes.set(c, at); at += c.length; }
  return [bytes, boundary];
}
let body;
if (plan.body && args[plan.body.arg] !== undefined) {
  const value = args[plan.body.arg];
  const kind = plan.body.kind;
  headers['content-type'] = plan.body.type;
  if (kind === 'json') body = JSON.stringify(value);
  else if (kind === 'form') {
    body = isObject(value) ? entries(value).map(([k, x]) => `${enc(k)}=${enc(x)}`).join('&') : text(value);
  } else if (kind === 'multipart') {
    const [bytes, boundary] = await multipart(value, plan.body.files);
    body = bytes;
    headers['content-type'] = `${plan.body.type.split(';')[0]}; boundary=${boundary}`;
  } else if (kind === 'binary') {
    const file = await fileOf(value, `the body ${plan.body.arg}`);
    // `format: byte` or `contentEncoding: base64`: the API takes the bytes as base64 text.
    body = plan.body.encoding === 'base64' ? base64Text(file.bytes) : file.bytes;
    // A wildcard in the description (`image/*`) is not a type to send: the file's own is.
    if (plan.body.type.includes('*')) headers['content-type'] = file.type ?? 'application/octet-stream';
  } else body = text(value);
}
const url = plan.base.replace(/\/$/, '') + path + (query.length ? `?${query.join('&')}` : '');
const response = await fetch(url, { method: plan.method, headers, body });
const raw = await response.text();
let data = raw;
try { data = raw === '' ? null : JSON.parse(raw); } catch {}
if (!response.ok) {
  const auth = (response.status === 401 || response.status === 403) && plan.auth.length
    ? ` This operation needs ${plan.auth.join(' or ')}; an operator adds it with PUT /admin/servers/{id}/credentials/{name}.`
    : '';
  throw new Error(`${plan.method} ${path} answered ${response.status} ${response.statusText}: ${raw.slice(0, 800)}${auth}`);
}
// An answer with nothing in it (no body, or `null`) is an empty object where the tool's results
// are objects, so it matches the listed output schema.
if (plan.object && data === null) return {};
return data;
