//! Bearer-token check for `/admin/*`: the static admin token, or (with `[auth.oauth]
//! admin_scope`) an OAuth access token from the issuer for `<public_url>/admin` with that scope.

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::Response;

use crate::api::error::{ApiError, ErrorCode};
use crate::api::state::AppState;

/// Refuses admin requests without the configured token; a daemon with no token and no admin
/// scope (loopback only, enforced by config validation) lets every request through.
pub async fn require_admin_token(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    // DNS rebinding would otherwise let a web page reach a daemon without a token.
    state.mcp_hosts.check(request.uri(), request.headers())?;
    let expected = state.config.admin.token.expose();
    let admin_scope = &state.config.auth.oauth.admin_scope;
    if expected.is_empty() && admin_scope.is_empty() {
        return Ok(next.run(request).await);
    }
    let presented =
        request.headers().get(AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(crate::access_token::bearer);
    match presented {
        None if admin_scope.is_empty() => Err(ApiError::new(
            ErrorCode::Unauthorized,
            "missing admin token: send Authorization: Bearer <token> ([admin] token)",
        )),
        None => Err(ApiError::new(
            ErrorCode::Unauthorized,
            format!(
                "missing admin token: send Authorization: Bearer <token>, the [admin] token or an OAuth access \
                 token for {} with the scope {:?}",
                state.config.auth.oauth.admin_resource(),
                admin_scope
            ),
        )),
        Some(token)
            if !expected.is_empty() && crate::access_token::secrets_match(token.as_bytes(), expected.as_bytes()) =>
        {
            Ok(next.run(request).await)
        }
        Some(token) if !admin_scope.is_empty() => {
            check_admin_oauth(&state, token).await?;
            Ok(next.run(request).await)
        }
        Some(_) => Err(ApiError::new(ErrorCode::Forbidden, "the admin token is not valid")),
    }
}

/// An OAuth token on the admin API: issued by our issuer for `<public_url>/admin` (a token for a
/// mount is refused) and holding `admin_scope`.
async fn check_admin_oauth(state: &AppState, token: &str) -> Result<(), ApiError> {
    let oauth = &state.config.auth.oauth;
    let Some(validator) = &state.oauth else {
        return Err(ApiError::internal("[auth.oauth] admin_scope without a validator"));
    };
    let refused = |why: String| {
        ApiError::new(ErrorCode::Forbidden, format!("the admin token is not valid: neither [admin] token nor {why}"))
    };
    match validator.validate(token, &oauth.admin_resource()).await {
        Ok(claims) if claims.scopes.contains(&oauth.admin_scope) => {
            tracing::debug!(subject = ?claims.sub, "admin request with an OAuth token");
            Ok(())
        }
        Ok(_) => {
            state.metrics.record_oauth_refusal("insufficient_scope");
            Err(refused(format!("an OAuth token with the scope {:?}", oauth.admin_scope)))
        }
        Err(crate::oauth::Refusal::IssuerUnavailable(why)) => {
            state.metrics.record_oauth_refusal("issuer_unavailable");
            Err(super::oauth::provider_unavailable(oauth, &why))
        }
        Err(refusal) => {
            state.metrics.record_oauth_refusal(refusal.reason());
            Err(refused(format!(
                "an OAuth access token for {} ({})",
                oauth.admin_resource(),
                refusal.reason().replace('_', " ")
            )))
        }
    }
}
