// A real OpenID provider (panva's oidc-provider) on loopback for tests/it/oauth_provider.rs: the
// authorization server an MCP host signs in at before it calls a mount behind [auth.oauth].
//
// Usage: node provider.mjs RESOURCE_ORIGIN
//
// Listens on 127.0.0.1, port 0, and prints one JSON line, {"issuer":"http://127.0.0.1:PORT",
// "kid":…} (the signing key's id). Runs until stdin closes or it is killed. Access tokens are issued
// only for resources under RESOURCE_ORIGIN (the daemon's public URL), as ES256 JWTs whose `aud` is
// the requested resource.
//
// What an MCP host relies on at a provider is configured as a production one would be: open
// dynamic client registration (public clients, `token_endpoint_auth_method: none`), authorization
// code with PKCE (S256, required), RFC 8707 resource indicators. Sign-in and consent are the
// built-in development forms (devInteractions): any login name and password are accepted.
//
// Test-only: `POST /test/rotate` replaces the signing key by a fresh one (new `kid`) without a
// restart, the way a provider rotates its keys: the JWKS then lists only the new key, which a
// resource server that cached the old one must fetch to verify the tokens signed with it.

import { generateKeyPairSync, randomBytes, randomUUID } from 'node:crypto';
import { createServer } from 'node:http';

import Provider, { errors } from 'oidc-provider';

// stdout carries one line, the one the test reads; oidc-provider prints its notices with
// console.info, so they join its warnings on stderr.
console.info = console.error;
console.log = console.error;

const origin = process.argv[2];
if (!origin || !/^https?:\/\/[^/]+$/.test(origin)) {
  console.error('usage: provider.mjs RESOURCE_ORIGIN (e.g. http://127.0.0.1:8080, no trailing slash)');
  process.exit(2);
}

// Kept across rotations: a rotation changes the signing key, nothing else.
const cookieKeys = [randomBytes(32).toString('base64url')];

function signingKey() {
  const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  return { ...privateKey.export({ format: 'jwk' }), kid: randomUUID(), alg: 'ES256', use: 'sig' };
}

function configuration(key) {
  return {
    // The default in-memory adapter keeps its store at module level, so every Provider built in
    // this process (before and after a rotation) sees the same clients, grants and sessions.
    jwks: { keys: [key] },
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
          if (!resource.startsWith(`${origin}/`)) {
            throw new errors.InvalidTarget(`this provider issues tokens for ${origin}/… only`);
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

// The node server stays; what it forwards to is swapped on rotation.
let handler = null;
const server = createServer((req, res) => {
  if (req.method === 'POST' && req.url === '/test/rotate') {
    const key = signingKey();
    handler = new Provider(issuer, configuration(key)).callback();
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ kid: key.kid }));
    return;
  }
  handler(req, res);
});

await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
// No trailing slash: the daemon compares the issuer with its configuration exactly.
const issuer = `http://127.0.0.1:${server.address().port}`;
const key = signingKey();
handler = new Provider(issuer, configuration(key)).callback();
process.stdout.write(`${JSON.stringify({ issuer, kid: key.kid })}\n`);

// The test holds stdin open; when it exits (or drops the pipe) this process goes with it.
process.stdin.on('end', () => process.exit(0));
process.stdin.on('error', () => process.exit(0));
process.stdin.resume();
