//! The web console: static files embedded in the binary (`console/assets/`, listed by
//! `build.rs`), served at `/console`. The page holds no data; everything it shows comes from the
//! admin API with the admin token the operator types in, so these routes need no token.
//!
//! Every response carries a Content-Security-Policy that allows scripts, styles and requests from
//! this origin only: no inline script can run, no data can leave for another site, and no other
//! site can frame the console.

use std::path::Path;
use std::sync::LazyLock;

use axum::Router;
use axum::extract::{Path as UrlPath, State};
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, ETAG, IF_NONE_MATCH, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS,
    X_FRAME_OPTIONS,
};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use sha2::{Digest, Sha256};

use crate::api::error::{ApiError, ErrorCode};
use crate::api::state::AppState;

/// `(name under console/assets, contents)`, sorted by name.
const EMBEDDED: &[(&str, &[u8])] = include!(concat!(env!("OUT_DIR"), "/console_assets.rs"));

/// The page every console URL starts from.
const INDEX: &str = "index.html";

/// Same-origin only. `img-src data:` shows images a tool returns (base64 in its result);
/// `form-action 'none'`: forms are handled by script, never submitted.
pub const CONTENT_SECURITY_POLICY_VALUE: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; font-src 'self'; manifest-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// The console's routes, or none when `[admin] console = false`.
pub fn routes(state: &AppState) -> Router<AppState> {
    if !state.config.admin.console {
        return Router::new();
    }
    Router::new()
        .route("/console", get(index))
        .route("/console/", get(|| async { Redirect::permanent("/console") }))
        .route("/console/{*file}", get(file))
}

async fn index(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    serve(&state, INDEX, &headers).await
}

async fn file(
    State(state): State<AppState>,
    UrlPath(name): UrlPath<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    serve(&state, &name, &headers).await
}

/// One embedded file by name; with `[admin] console_assets_dir` set, its current contents on disk.
async fn serve(state: &AppState, name: &str, headers: &HeaderMap) -> Result<Response, ApiError> {
    let not_found =
        || ApiError::new(ErrorCode::RouteNotFound, format!("no console file {name:?}; the console starts at /console"));
    let dir = &state.config.admin.console_assets_dir;
    let (body, etag) = if dir.as_os_str().is_empty() {
        let index = EMBEDDED.binary_search_by(|(embedded, _)| (*embedded).cmp(name)).map_err(|_| not_found())?;
        (EMBEDDED[index].1.to_vec(), ETAGS[index].clone())
    } else {
        // Files added since the build are served too; a name cannot leave the directory.
        if !is_plain_relative(name) {
            return Err(not_found());
        }
        let body = tokio::fs::read(Path::new(dir).join(name)).await.map_err(|e| {
            ApiError::new(
                ErrorCode::RouteNotFound,
                format!("console file {name:?} is not readable in [admin] console_assets_dir {}: {e}", dir.display()),
            )
        })?;
        let etag = etag_of(&body);
        (body, etag)
    };
    let mut response = if headers.get(IF_NONE_MATCH).is_some_and(|sent| sent.as_bytes() == etag.as_bytes()) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(CONTENT_TYPE, HeaderValue::from_static(content_type(name)))], body).into_response()
    };
    let set = response.headers_mut();
    set.insert(ETAG, etag);
    // Names carry no content hash, so the browser asks again each time (a 304 when unchanged).
    set.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    set.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY_VALUE));
    set.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    set.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    set.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    set.insert(HeaderName::from_static("cross-origin-opener-policy"), HeaderValue::from_static("same-origin"));
    Ok(response)
}

/// Relative, with segments of letters, digits, `-`, `_` and `.` that do not start with a dot: no
/// `..`, no hidden files, no absolute paths.
fn is_plain_relative(name: &str) -> bool {
    name.split('/').all(|segment| {
        !segment.is_empty()
            && !segment.starts_with('.')
            && segment.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    })
}

/// The embedded files' entity tags, in `EMBEDDED` order.
static ETAGS: LazyLock<Vec<HeaderValue>> = LazyLock::new(|| EMBEDDED.iter().map(|(_, body)| etag_of(body)).collect());

fn etag_of(body: &[u8]) -> HeaderValue {
    let digest = Sha256::digest(body);
    let hex: String = digest[..12].iter().map(|byte| format!("{byte:02x}")).collect();
    HeaderValue::from_str(&format!("\"{hex}\"")).expect("hex is a valid header value")
}

fn content_type(name: &str) -> &'static str {
    known_content_type(name).unwrap_or("application/octet-stream")
}

fn known_content_type(name: &str) -> Option<&'static str> {
    Some(match name.rsplit_once('.').map(|(_, extension)| extension) {
        Some("html") => "text/html; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        Some("json" | "webmanifest") => "application/json",
        Some("txt") => "text/plain; charset=utf-8",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_files_are_sorted_and_include_the_page() {
        assert!(EMBEDDED.windows(2).all(|pair| pair[0].0 < pair[1].0), "build.rs sorts the table");
        assert!(EMBEDDED.iter().any(|(name, _)| *name == INDEX));
        for (name, _) in EMBEDDED {
            assert!(!name.contains("..") && !name.starts_with('/'), "{name}");
            assert!(known_content_type(name).is_some(), "{name} has a type the browser can use");
        }
    }

    #[test]
    fn files_from_a_directory_stay_inside_it() {
        for name in ["index.html", "js/pages/server.js", "vendor/highlight/core.min.js"] {
            assert!(is_plain_relative(name), "{name}");
        }
        for name in ["../Cargo.toml", "/etc/passwd", "js/../../x", ".git/config", "js//x.js", "js\\x.js", "a b.js", ""]
        {
            assert!(!is_plain_relative(name), "{name}");
        }
    }

    #[test]
    fn the_policy_allows_nothing_from_elsewhere() {
        for directive in CONTENT_SECURITY_POLICY_VALUE.split(';') {
            let directive = directive.trim();
            assert!(!directive.contains("unsafe"), "{directive}");
            assert!(!directive.contains("http"), "{directive}");
            assert!(!directive.contains('*'), "{directive}");
        }
    }
}
