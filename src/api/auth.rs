//! Bearer-token check for `/admin/*`.

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::Response;

use crate::api::AppState;
use crate::api::error::{ApiError, ErrorCode};

/// Refuses admin requests without the configured token; a daemon with no token (loopback only,
/// enforced by config validation) lets every request through.
pub async fn require_admin_token(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    // DNS rebinding would otherwise let a web page reach a daemon without a token.
    state.mcp_hosts.check(request.uri(), request.headers())?;
    let expected = state.config.admin.token.expose();
    if expected.is_empty() {
        return Ok(next.run(request).await);
    }
    let presented = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")));
    match presented {
        None => Err(ApiError::new(
            ErrorCode::Unauthorized,
            "missing admin token: send Authorization: Bearer <token> ([admin] token)",
        )),
        Some(token) if crate::access_token::secrets_match(token.trim().as_bytes(), expected.as_bytes()) => {
            Ok(next.run(request).await)
        }
        Some(_) => Err(ApiError::new(ErrorCode::Forbidden, "the admin token is not valid")),
    }
}
