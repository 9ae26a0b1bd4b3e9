// An upstream API on loopback for tests/it/connected_accounts.rs: the resource server whose users
// connect their accounts to the daemon. It checks each request's credential the way a real API
// does and says whose it was, so a test can tell which user's token the daemon sent.
//
// Usage: node upstream.mjs [API_ISSUER] [--host NAME]
//
// Listens on 127.0.0.1, port 0, and prints one JSON line, {"origin": "http://NAME:PORT", "local":
// "http://127.0.0.1:PORT"}: NAME defaults to 127.0.0.1; tests pass the name the daemon's
// `[egress.resolve]` maps to 127.0.0.1, which handlers fetch, and use `local` themselves. Runs until
// stdin closes or it is killed.
//
// API_ISSUER is the authorization server (provider.mjs --upstream) whose access tokens the API
// accepts. That provider is started with the API's origin, which is known only once this process
// listens, so the issuer may come later instead: without the argument, the first line read from
// stdin is the issuer (requests before it get 503).
//
// Any path except /test/*:
// * `Authorization: Bearer <JWT>`: verified against the issuer's JWKS (found through its discovery
//   document), with `iss` = API_ISSUER and `aud` = this API's origin, and not expired. 200
//   {"sub", "scope", "path"}, or 401 {"error": "invalid_token", "error_description"}.
// * `X-Api-Key: <key>`: any key is accepted; 200 {"api_key_sha256": hex of its SHA-256, "path"}.
// * neither: 401 {"error": "no credentials"}.
// `GET /test/stats`: {"requests", "bearer", "api_key", "unauthorized", "subjects": {sub: count},
// "api_keys": {sha256: count}, "refusals": [error_description…]}, over the requests above.
// `GET /test/ready`: 200 once the issuer is known (and its JWKS URL found), 503 before.

import { createHash } from 'node:crypto';
import { createServer } from 'node:http';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';

import { createRemoteJWKSet, errors as joseErrors, jwtVerify } from 'jose';

const USAGE = 'usage: upstream.mjs [API_ISSUER] [--host NAME]';
let args;
try {
  args = parseArgs({ allowPositionals: true, options: { host: { type: 'string', default: '127.0.0.1' } } });
} catch (error) {
  console.error(`${error.message}\n${USAGE}`);
  process.exit(2);
}
if (args.positionals.length > 1 || !/^[A-Za-z0-9.-]+$/.test(args.values.host)) {
  console.error(USAGE);
  process.exit(2);
}

let issuer = null;
// The key set, fetched once the issuer is known; jose fetches the JWKS again when a token names a
// key it has not seen.
let keys = null;
const stats = { requests: 0, bearer: 0, api_key: 0, unauthorized: 0, subjects: {}, api_keys: {}, refusals: [] };

async function setIssuer(value) {
  if (!/^https?:\/\/[^/]+/.test(value)) throw new Error(`not an issuer URL: ${value}`);
  const response = await fetch(`${value}/.well-known/openid-configuration`);
  if (!response.ok) throw new Error(`the issuer's discovery document: HTTP ${response.status}`);
  const metadata = await response.json();
  keys = createRemoteJWKSet(new URL(metadata.jwks_uri));
  issuer = value;
  console.error(`upstream: tokens from ${issuer} for ${origin}`);
}

function json(res, status, body) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

function refuse(res, body) {
  stats.unauthorized += 1;
  if (body.error_description) stats.refusals.push(body.error_description);
  json(res, 401, body);
}

async function answer(req, res) {
  const path = req.url.split('?')[0];
  if (path === '/test/stats' && req.method === 'GET') {
    json(res, 200, stats);
    return;
  }
  if (path === '/test/ready' && req.method === 'GET') {
    json(res, keys ? 200 : 503, { issuer });
    return;
  }
  if (!keys) {
    json(res, 503, { error: 'the API does not know its token issuer yet' });
    return;
  }
  stats.requests += 1;
  const authorization = req.headers.authorization ?? '';
  const apiKey = req.headers['x-api-key'];
  if (authorization.toLowerCase().startsWith('bearer ')) {
    stats.bearer += 1;
    let payload;
    try {
      ({ payload } = await jwtVerify(authorization.slice(7).trim(), keys, {
        issuer,
        audience: origin,
        algorithms: ['ES256'],
      }));
    } catch (error) {
      const description = error instanceof joseErrors.JOSEError ? `${error.code}: ${error.message}` : String(error);
      refuse(res, { error: 'invalid_token', error_description: description });
      return;
    }
    stats.subjects[payload.sub] = (stats.subjects[payload.sub] ?? 0) + 1;
    json(res, 200, { sub: payload.sub, scope: payload.scope ?? null, path });
    return;
  }
  if (typeof apiKey === 'string' && apiKey) {
    stats.api_key += 1;
    const sha256 = createHash('sha256').update(apiKey).digest('hex');
    stats.api_keys[sha256] = (stats.api_keys[sha256] ?? 0) + 1;
    json(res, 200, { api_key_sha256: sha256, path });
    return;
  }
  refuse(res, { error: 'no credentials' });
}

const server = createServer((req, res) => {
  // The body is not used; it is drained so the connection can be reused.
  req.resume();
  answer(req, res).catch((error) => {
    console.error('upstream:', error);
    if (!res.headersSent) json(res, 500, { error: String(error) });
  });
});
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const { port } = server.address();
const origin = `http://${args.values.host}:${port}`;

const [given] = args.positionals;
const lines = createInterface({ input: process.stdin });
if (given) {
  await setIssuer(given);
} else {
  lines.once('line', (line) => {
    setIssuer(line.trim()).catch((error) => {
      console.error(`upstream: ${error.message}`);
      process.exit(1);
    });
  });
}
process.stdout.write(`${JSON.stringify({ origin, local: `http://127.0.0.1:${port}` })}\n`);

// The test holds stdin open; when it exits (or drops the pipe) this process goes with it.
lines.on('close', () => process.exit(0));
process.stdin.on('error', () => process.exit(0));
