//! The admin API's request and response bodies: what the handlers send and accept, what the
//! command-line client reads and writes, and what the OpenAPI document describes.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::api::error::ErrorCode;

/// Every error response: `{"error": {"code", "message"}}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    pub code: ErrorCode,
    /// What went wrong and how to fix it.
    pub message: String,
}
