//! The connect pages (`/connect/...`): where a person connects their own account for a server's
//! per-user credential, and sees and removes their connections. HTML for a browser, outside the
//! API's description like the console; every step's logic is in `accounts::flow`.
//!
//! The pages run no script and load nothing (`default-src 'none'`), are never cached, and may
//! not be framed. The account page's session is a cookie (`HttpOnly`, `SameSite=Lax`, path
//! `/connect`, `Secure` over https) naming a catalog row, so any replica knows it; removing a
//! connection is a form post whose `Origin` must be the daemon's own.

use axum::Form;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::Deserialize;

use crate::accounts::flow::{Next, Refusal, SESSION_LIFETIME, SignedIn};
use crate::api::state::AppState;

const SESSION_COOKIE: &str = "mcpbootd_connect";

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/connect", get(account))
        .route("/connect/signin", get(signed_in))
        .route("/connect/callback", get(upstream_callback))
        .route("/connect/key", post(submit_key))
        .route("/connect/remove", post(remove))
        .route("/connect/{token}", get(open_link))
}

#[derive(Deserialize)]
struct Callback {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
}

#[derive(Deserialize)]
struct KeyForm {
    flow: String,
    api_key: String,
}

#[derive(Deserialize)]
struct RemoveForm {
    id: String,
}

async fn open_link(State(state): State<AppState>, Path(token): Path<String>) -> Response {
    respond(&state, state.accounts.open_link(&token).await)
}

async fn signed_in(State(state): State<AppState>, Query(callback): Query<Callback>) -> Response {
    let Some(flow_state) = callback.state.as_deref() else {
        return refused(Refusal::Invalid("the sign-in came back without its state".into()));
    };
    respond(&state, state.accounts.signed_in(callback.code.as_deref(), flow_state, callback.error.as_deref()).await)
}

async fn upstream_callback(State(state): State<AppState>, Query(callback): Query<Callback>) -> Response {
    let Some(flow_state) = callback.state.as_deref() else {
        return refused(Refusal::Invalid("the authorization came back without its state".into()));
    };
    respond(
        &state,
        state.accounts.upstream_callback(callback.code.as_deref(), flow_state, callback.error.as_deref()).await,
    )
}

async fn submit_key(State(state): State<AppState>, Form(form): Form<KeyForm>) -> Response {
    respond(&state, state.accounts.submit_key(&form.flow, &form.api_key).await)
}

/// The account page: the signed-in person's connections, or a sign-in first.
async fn account(State(state): State<AppState>, headers: HeaderMap) -> Response {
    match signed_in_person(&state, &headers).await {
        Ok(Some(person)) => match state.accounts.connections_of(&person).await {
            Ok(connections) => {
                let rows: Vec<String> = connections
                    .iter()
                    .map(|c| {
                        format!(
                            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><form method=\"post\" \
                             action=\"/connect/remove\"><input type=\"hidden\" name=\"id\" value=\"{}\">\
                             <button type=\"submit\">Remove</button></form></td></tr>",
                            escape(&c.server_id),
                            escape(&c.credential),
                            escape(&c.scopes),
                            time(c.connected_at),
                            escape(&c.id)
                        )
                    })
                    .collect();
                let body = if rows.is_empty() {
                    "<p>You have no connected accounts.</p>".to_string()
                } else {
                    format!(
                        "<table><tr><th>Server</th><th>Credential</th><th>Scopes</th><th>Connected</th><th></th></tr>{}</table>",
                        rows.join("")
                    )
                };
                page(
                    StatusCode::OK,
                    "Your connected accounts",
                    &format!("<p>Signed in as <b>{}</b>.</p>{body}", escape(&person.subject)),
                )
            }
            Err(refusal) => refused(refusal),
        },
        Ok(None) => respond(&state, state.accounts.open_account().await),
        Err(refusal) => refused(refusal),
    }
}

async fn remove(State(state): State<AppState>, headers: HeaderMap, Form(form): Form<RemoveForm>) -> Response {
    if !same_origin(&state, &headers) {
        return refused(Refusal::Invalid("this form must be sent from the daemon's own page".into()));
    }
    let person = match signed_in_person(&state, &headers).await {
        Ok(Some(person)) => person,
        Ok(None) => return Redirect::to("/connect").into_response(),
        Err(refusal) => return refused(refusal),
    };
    match state.accounts.delete_connection(None, &form.id, Some(&person)).await {
        Ok(_) => Redirect::to("/connect").into_response(),
        Err(error) => refused(Refusal::from(error)),
    }
}

async fn signed_in_person(state: &AppState, headers: &HeaderMap) -> Result<Option<SignedIn>, Refusal> {
    let Some(secret) = cookie(headers, SESSION_COOKIE) else { return Ok(None) };
    state.accounts.session(&secret).await
}

/// Whether a form post comes from the daemon's own pages (browsers send `Origin` with posts).
fn same_origin(state: &AppState, headers: &HeaderMap) -> bool {
    let own = url::Url::parse(&state.config.auth.oauth.public_url).map(|url| url.origin().ascii_serialization());
    let sent = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok());
    matches!((own, sent), (Ok(own), Some(sent)) if own == sent)
}

fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.to_string())
}

fn respond(state: &AppState, next: Result<Next, Refusal>) -> Response {
    match next {
        Ok(Next::Redirect(url)) => Redirect::to(&url).into_response(),
        Ok(Next::KeyForm { flow, server, credential }) => page(
            StatusCode::OK,
            "Enter your API key",
            &format!(
                "<p>Server <b>{}</b> sends your own key for <b>{}</b>. It is stored encrypted and sent only to that \
                 API; nobody is shown it again.</p><form method=\"post\" action=\"/connect/key\">\
                 <input type=\"hidden\" name=\"flow\" value=\"{}\"><label>API key <input type=\"password\" \
                 name=\"api_key\" autocomplete=\"off\" required></label> <button type=\"submit\">Connect</button></form>",
                escape(&server),
                escape(&credential),
                escape(&flow)
            ),
        ),
        Ok(Next::Connected { server, credential }) => page(
            StatusCode::OK,
            "Connected",
            &format!(
                "<p>Connected: <b>{}</b> now calls with your account for <b>{}</b>. Return to your MCP host and \
                 retry the call.</p><p><a href=\"/connect\">Your connected accounts</a></p>",
                escape(&server),
                escape(&credential)
            ),
        ),
        Ok(Next::Session(secret)) => {
            let secure = if state.config.auth.oauth.public_url.starts_with("https://") { "; Secure" } else { "" };
            let cookie = format!(
                "{SESSION_COOKIE}={secret}; Path=/connect; HttpOnly; SameSite=Lax; Max-Age={}{secure}",
                SESSION_LIFETIME.as_secs()
            );
            let mut response = Redirect::to("/connect").into_response();
            if let Ok(value) = HeaderValue::from_str(&cookie) {
                response.headers_mut().insert(header::SET_COOKIE, value);
            }
            response
        }
        Err(refusal) => refused(refusal),
    }
}

fn refused(refusal: Refusal) -> Response {
    let status = StatusCode::from_u16(refusal.status()).unwrap_or(StatusCode::BAD_REQUEST);
    page(status, "Not connected", &format!("<p>{}</p>", escape(&refusal.to_string())))
}

fn page(status: StatusCode, title: &str, body: &str) -> Response {
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title} - mcpbootd</title>\
         <meta name=\"viewport\" content=\"width=device-width\"><style>body{{font:16px system-ui,sans-serif;\
         max-width:40em;margin:3em auto;padding:0 1em}}td,th{{padding:.3em .6em;text-align:left}}</style></head>\
         <body><h1>{title}</h1>{body}</body></html>",
        title = escape(title)
    );
    let mut response = (status, html).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
        ),
    );
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}

/// A UTC time, RFC 3339.
fn time(millis: i64) -> String {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_millis(millis.max(0) as u64))
        .to_string()
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}
