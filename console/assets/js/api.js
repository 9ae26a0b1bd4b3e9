// The admin API as the console uses it: the admin token (kept in this tab's sessionStorage,
// sent only in the Authorization header, never in a URL), JSON requests whose failures carry
// the API's own error message, and Server-Sent Events read through fetch (EventSource cannot
// send a header).

const TOKEN_KEY = "mcpbootd.adminToken";

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

/** A failed request: `status` (0 when the daemon could not be reached), the API's error `code`
 * and `message` (`{"error": {"code", "message"}}`). */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
  /** The admin token is missing or wrong: the console asks for it again. */
  get unauthorized() {
    return this.status === 401 || (this.status === 403 && this.code === "forbidden");
  }
}

const listeners = new Set();
/** Called with the ApiError whenever a request is refused for its token. */
export function onUnauthorized(listener) {
  listeners.add(listener);
}

function headers(extra) {
  const all = { Accept: "application/json", ...extra };
  const current = token();
  if (current) all.Authorization = `Bearer ${current}`;
  return all;
}

async function failure(response) {
  let code = "http_" + response.status;
  let message = `${response.status} ${response.statusText}`.trim();
  try {
    const body = await response.json();
    if (body && body.error && typeof body.error === "object") {
      code = body.error.code || code;
      message = body.error.message || message;
    }
  } catch {
    // Not JSON (a proxy's error page): the status line says what happened.
  }
  const error = new ApiError(response.status, code, message);
  if (error.unauthorized) listeners.forEach((listener) => listener(error));
  return error;
}

/** `method` `path` with an optional JSON `body`; resolves to the parsed answer (null for 204). */
export async function request(method, path, body, { signal } = {}) {
  let response;
  try {
    response = await fetch(path, {
      method,
      headers: headers(body === undefined ? {} : { "Content-Type": "application/json" }),
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
      cache: "no-store",
      credentials: "omit",
    });
  } catch (cause) {
    if (cause.name === "AbortError") throw cause;
    throw new ApiError(0, "unreachable", `the daemon did not answer (${cause.message}); is it running?`);
  }
  if (!response.ok) throw await failure(response);
  if (response.status === 204) return null;
  const type = response.headers.get("Content-Type") || "";
  return type.includes("json") ? response.json() : response.text();
}

export const get = (path, options) => request("GET", path, undefined, options);
export const post = (path, body, options) => request("POST", path, body ?? {}, options);
export const put = (path, body, options) => request("PUT", path, body, options);
export const del = (path, options) => request("DELETE", path, undefined, options);

/** `encodeURIComponent` for each interpolated value: `path\`/admin/servers/${id}\``. */
export function path(strings, ...values) {
  return strings.reduce((out, part, i) => out + part + (i < values.length ? encodeURIComponent(values[i]) : ""), "");
}

/**
 * Follows an event stream: `onEvent(name, data)` for each event (data parsed as JSON when it is).
 * Resolves when the stream ends; aborting `signal` closes it. Errors reject with an ApiError.
 */
export async function events(streamPath, onEvent, signal) {
  let response;
  try {
    response = await fetch(streamPath, { headers: headers({ Accept: "text/event-stream" }), signal, cache: "no-store", credentials: "omit" });
  } catch (cause) {
    if (cause.name === "AbortError") return;
    throw new ApiError(0, "unreachable", `the daemon did not answer (${cause.message}); is it running?`);
  }
  if (!response.ok) throw await failure(response);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value.replace(/\r\n?/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        let name = "message";
        const data = [];
        for (const line of block.split("\n")) {
          if (line.startsWith(":")) continue; // keep-alive comment
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
          if (field === "event") name = text;
          else if (field === "data") data.push(text);
        }
        if (data.length === 0) continue;
        const raw = data.join("\n");
        let parsed = raw;
        try {
          parsed = JSON.parse(raw);
        } catch {
          // Plain text data.
        }
        onEvent(name, parsed);
      }
    }
  } catch (cause) {
    if (cause.name !== "AbortError") throw new ApiError(0, "stream_ended", `the event stream broke off (${cause.message})`);
  } finally {
    reader.releaseLock();
  }
}
