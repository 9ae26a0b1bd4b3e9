// The one handler every operation of an API description runs: it builds the request the
// description specifies from `plan` (declared above this text) and the tool's arguments.
// Serialisation follows OpenAPI 3: path `simple`/`label`/`matrix`, query `form` (exploded or
// not), `spaceDelimited`, `pipeDelimited` and `deepObject`, headers and cookies `simple`/`form`;
// bodies as JSON, form-urlencoded or text.
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
let body;
if (plan.body && args[plan.body.arg] !== undefined) {
  const value = args[plan.body.arg];
  headers['content-type'] = plan.body.type;
  if (plan.body.type.includes('json')) body = JSON.stringify(value);
  else if (plan.body.type.startsWith('application/x-www-form-urlencoded')) {
    body = isObject(value) ? entries(value).map(([k, x]) => `${enc(k)}=${enc(x)}`).join('&') : text(value);
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
return data;
