// A real OpenID provider (panva's oidc-provider) on loopback, in one of two roles.
//
// The operator's identity provider (tests/it/oauth_provider.rs, tests/it/connected_accounts.rs):
//
//   node provider.mjs RESOURCE_ORIGIN [RESOURCE_ORIGIN…] [--connect-client ID:SECRET:REDIRECT_URI]…
//
// the authorization server an MCP host signs in at before it calls a mount behind [auth.oauth].
// Access tokens are issued only for resources under a RESOURCE_ORIGIN (a daemon's public URL; one
// per daemon when several share the provider), as ES256 JWTs whose `aud` is the requested
// resource. What an MCP host relies on at a provider is configured as a production one would be:
// open dynamic client registration (public clients, `token_endpoint_auth_method: none`),
// authorization code with PKCE (S256, required), RFC 8707 resource indicators.
// `--connect-client` adds a static confidential client: the daemon itself, signing in the person
// who opens a connect link (`[auth.oauth] connect_client_id`). It may use the authorization code
// grant only, authenticates with client_secret_basic (client_secret_post is accepted as well: the
// provider takes either for a client with a secret) and gets ES256 ID tokens. Repeating the flag
// with the same ID adds redirect URIs (one per daemon).
//
// The authorization server of an upstream API (tests/it/connected_accounts.rs):
//
//   node provider.mjs --upstream API_ORIGIN --client ID:SECRET:REDIRECT_URI [--access-ttl SECONDS]
//
// the server a daemon is an OAuth client of for a per-user credential. `--client` (repeatable as
// above) is the daemon's static confidential client: authorization code and refresh token grants,
// PKCE S256 required, a refresh token with every code exchange whether or not `offline_access` is
// asked for, and a new one with every refresh (rotation: a refresh token used twice is reuse, and
// the provider then revokes the whole grant, as careful providers do). Scopes `notes:read
// notes:write offline_access`. The resource API_ORIGIN must be asked for (`resource` at the
// authorization endpoint); its access tokens are ES256 JWTs with `aud` = API_ORIGIN, living
// `--access-ttl` seconds (default 3600). Without the resource the token is opaque, which the API
// (upstream.mjs) refuses. Revocation (RFC 7009) is on; it takes refresh tokens (revoking one ends
// the grant), not the JWT access tokens. Its cookies have names of their own: both providers
// listen on 127.0.0.1, and cookies are per host, not per port.
//
// Both print one JSON line on stdout once listening on 127.0.0.1 port 0, {"issuer":
// "http://127.0.0.1:PORT", "kid": …} (the signing key's id), and run until stdin closes or they are
// killed. Sign-in and consent are the built-in development forms (devInteractions): any login name
// and password are accepted, and the login name is the subject (`sub`).
//
// Test-only endpoints:
// * `POST /test/rotate` replaces the signing key by a fresh one (new `kid`) without a restart, the
//   way a provider rotates its keys: the JWKS then lists only the new key, which a resource server
//   that cached the old one must fetch to verify the tokens signed with it.
// * `GET /test/stats`: what the token and revocation endpoints were asked, for tests that count
//   refreshes: `{"grants": {GRANT_TYPE: requests}, "token_requests": [{grant_type, status, error,
//   client_auth, resource, code_verifier, at}], "revocations": [{status, error, token_type_hint,
//   client_auth, at}]}`, oldest first (`client_auth` is client_secret_basic or client_secret_post).
// * `POST /test/forget-refresh-tokens`: destroys every refresh token issued so far, as a provider
//   does when the user revokes the app's access; the next refresh gets `invalid_grant`. Answers
//   `{"forgotten": N}`.

import { generateKeyPairSync, randomBytes, randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';

import Provider, { errors } from 'oidc-provider';

// stdout carries one line, the one the test reads; oidc-provider prints its notices with
// console.info, so they join its warnings on stderr.
console.info = console.error;
console.log = console.error;

const USAGE = 'usage: provider.mjs RESOURCE_ORIGIN… [--connect-client ID:SECRET:REDIRECT_URI]…\n'
  + '       provider.mjs --upstream API_ORIGIN --client ID:SECRET:REDIRECT_URI… [--access-ttl SECONDS]\n'
  + '(origins like http://127.0.0.1:8080, no trailing slash)';

function usage(problem) {
  console.error(`${problem}\n${USAGE}`);
  process.exit(2);
}

let args;
try {
  args = parseArgs({
    allowPositionals: true,
    options: {
      'connect-client': { type: 'string', multiple: true, default: [] },
      upstream: { type: 'string' },
      client: { type: 'string', multiple: true, default: [] },
      'access-ttl': { type: 'string', default: '3600' },
    },
  });
} catch (error) {
  usage(error.message);
}
const { values: options, positionals: origins } = args;

const isOrigin = (value) => /^https?:\/\/[^/]+$/.test(value);
const upstreamOrigin = options.upstream;
if (upstreamOrigin !== undefined) {
  if (!isOrigin(upstreamOrigin) || origins.length || options['connect-client'].length) {
    usage('--upstream takes one API origin and no resource origins or --connect-client');
  }
  if (!options.client.length) usage('--upstream needs --client ID:SECRET:REDIRECT_URI');
} else {
  if (!origins.length || !origins.every(isOrigin)) usage('expected one or more resource origins');
  if (options.client.length) usage('--client belongs to --upstream; the sign-in client is --connect-client');
}
const accessTtl = Number(options['access-ttl']);
if (!Number.isInteger(accessTtl) || accessTtl < 1) usage('--access-ttl must be a whole number of seconds');

// `ID:SECRET:REDIRECT_URI` flags, merged by ID: one client with every redirect URI given for it.
function staticClients(flags, shape) {
  const byId = new Map();
  for (const flag of flags) {
    const [, id, secret, redirectUri] = /^([^:]+):([^:]+):(https?:\/\/.+)$/.exec(flag) ?? [];
    if (!id) usage(`not ID:SECRET:REDIRECT_URI: ${flag}`);
    const client = byId.get(id) ?? { client_id: id, client_secret: secret, redirect_uris: [], ...shape };
    if (client.client_secret !== secret) usage(`two secrets for the client ${id}`);
    if (!client.redirect_uris.includes(redirectUri)) client.redirect_uris.push(redirectUri);
    byId.set(id, client);
  }
  return [...byId.values()];
}

// Kept across rotations: a rotation changes the signing key, nothing else.
const cookieKeys = [randomBytes(32).toString('base64url')];

function signingKey() {
  const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  return { ...privateKey.export({ format: 'jwk' }), kid: randomUUID(), alg: 'ES256', use: 'sig' };
}

// The operator's provider: what tests/it/oauth_provider.rs was written against, plus the
// daemon's sign-in client when one is given.
function identityProvider(key) {
  return {
    // The default in-memory adapter keeps its store at module level, so every Provider built in
    // this process (before and after a rotation) sees the same clients, grants and sessions.
    jwks: { keys: [key] },
    clients: staticClients(options['connect-client'], {
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
      id_token_signed_response_alg: 'ES256',
    }),
    // The MCP scopes are listed so discovery advertises them in `scopes_supported`: hosts that find
    // no scope in the resource's metadata ask for what the provider lists (the Python SDK does).
    scopes: ['openid', 'offline_access', 'mcp:read', 'mcp:write'],
    // Dynamically registered clients would otherwise get RS256 ID tokens, which needs an RSA key.
    clientDefaults: { id_token_signed_response_alg: 'ES256' },
    cookies: { keys: cookieKeys },
    pkce: { required: () => true },
    features: {
      devInteractions: { enabled: true },
      // Open registration: MCP hosts register themselves, with no initial access token.
      registration: { enabled: true, initialAccessToken: false },
      resourceIndicators: {
        enabled: true,
        // The access token is for the resource the host asked for at the authorization endpoint,
        // even when the token request repeats it or leaves it out.
        useGrantedResource: () => true,
        getResourceServerInfo(ctx, resource) {
          if (!origins.some((origin) => resource.startsWith(`${origin}/`))) {
            throw new errors.InvalidTarget(`this provider issues tokens for ${origins.join(', ')}/… only`);
          }
          return {
            scope: 'mcp:read mcp:write',
            audience: resource,
            accessTokenFormat: 'jwt',
            jwt: { sign: { alg: 'ES256' } },
          };
        },
      },
    },
  };
}

// The upstream API's authorization server, with the daemon as its only client.
function upstreamProvider(key) {
  return {
    jwks: { keys: [key] },
    clients: staticClients(options.client, {
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
      id_token_signed_response_alg: 'ES256',
    }),
    scopes: ['openid', 'offline_access', 'notes:read', 'notes:write'],
    cookies: {
      keys: cookieKeys,
      names: { session: '_up_session', interaction: '_up_interaction', resume: '_up_interaction_resume' },
    },
    pkce: { required: () => true },
    // Many APIs hand out refresh tokens without `offline_access`; the test counts on one, so the
    // daemon need not know this provider's rules for asking.
    issueRefreshToken: (ctx, client) => client.grantTypeAllowed('refresh_token'),
    rotateRefreshToken: true,
    ttl: { AccessToken: accessTtl },
    features: {
      devInteractions: { enabled: true },
      revocation: { enabled: true },
      resourceIndicators: {
        enabled: true,
        // No default resource: a daemon that drops `authorize_params.resource` gets an opaque
        // token, which the API refuses, rather than a test that passes by accident.
        useGrantedResource: () => true,
        getResourceServerInfo(ctx, resource) {
          if (resource !== upstreamOrigin && resource !== `${upstreamOrigin}/`) {
            throw new errors.InvalidTarget(`this provider issues tokens for ${upstreamOrigin} only`);
          }
          return {
            scope: 'notes:read notes:write',
            audience: upstreamOrigin,
            accessTokenTTL: accessTtl,
            accessTokenFormat: 'jwt',
            jwt: { sign: { alg: 'ES256' } },
          };
        },
      },
    },
  };
}

// What the token and revocation endpoints were asked; kept across rotations.
const stats = { grants: {}, token_requests: [], revocations: [] };
// Every refresh token issued, for /test/forget-refresh-tokens (consumed ones included: destroying
// one that is gone already is harmless).
const refreshTokens = new Set();

function clientAuth(ctx) {
  if (ctx.get('authorization').toLowerCase().startsWith('basic ')) return 'client_secret_basic';
  return ctx.oidc?.params?.client_secret ? 'client_secret_post' : 'none';
}

function build(key) {
  const provider = new Provider(issuer, upstreamOrigin ? upstreamProvider(key) : identityProvider(key));
  provider.use(async (ctx, next) => {
    await next();
    const route = ctx.oidc?.route;
    if (route !== 'token' && route !== 'revocation') return;
    const params = ctx.oidc.params ?? {};
    const error = ctx.status >= 400 ? (ctx.body?.error ?? String(ctx.status)) : null;
    const at = new Date().toISOString();
    if (route === 'token') {
      const grantType = params.grant_type ?? '(none)';
      stats.grants[grantType] = (stats.grants[grantType] ?? 0) + 1;
      stats.token_requests.push({
        grant_type: grantType,
        status: ctx.status,
        error,
        client_auth: clientAuth(ctx),
        resource: params.resource ?? null,
        code_verifier: Boolean(params.code_verifier),
        at,
      });
    } else {
      stats.revocations.push({
        status: ctx.status,
        error,
        token_type_hint: params.token_type_hint ?? null,
        client_auth: clientAuth(ctx),
        at,
      });
    }
  });
  provider.on('refresh_token.saved', (token) => refreshTokens.add(token));
  provider.on('server_error', (ctx, error) => console.error('server_error', error));
  return provider.callback();
}

function json(res, status, body) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

// The node server stays; what it forwards to is swapped on rotation.
let handler = null;
const server = createServer((req, res) => {
  if (req.method === 'POST' && req.url === '/test/rotate') {
    const key = signingKey();
    handler = build(key);
    json(res, 200, { kid: key.kid });
    return;
  }
  if (req.method === 'GET' && req.url === '/test/stats') {
    json(res, 200, stats);
    return;
  }
  if (req.method === 'POST' && req.url === '/test/forget-refresh-tokens') {
    const tokens = [...refreshTokens];
    refreshTokens.clear();
    Promise.all(tokens.map((token) => token.destroy())).then(
      () => json(res, 200, { forgotten: tokens.length }),
      (error) => json(res, 500, { error: String(error) }),
    );
    return;
  }
  handler(req, res);
});

await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
// No trailing slash: the daemon compares the issuer with its configuration exactly.
const issuer = `http://127.0.0.1:${server.address().port}`;
const key = signingKey();
handler = build(key);
process.stdout.write(`${JSON.stringify({ issuer, kid: key.kid })}\n`);

// The test holds stdin open; when it exits (or drops the pipe) this process goes with it.
process.stdin.on('end', () => process.exit(0));
process.stdin.on('error', () => process.exit(0));
process.stdin.resume();
