//! How the catalog stores values: times as milliseconds since the epoch, structured values as
//! JSON text, flags as `BOOLEAN` or integers, foreign text without NUL, and the generator
//! version each generation is stamped with.

use std::time::Duration;

use serde::Serialize;
use sqlx::any::{Any, AnyTypeInfo, AnyTypeInfoKind, AnyValueRef};
use sqlx::error::BoxDynError;
use sqlx::{Decode, Type, ValueRef};

use super::error::CatalogError;

/// Version of the code that produced a generation; part of the generation cache key.
pub const GENERATOR_VERSION: &str = concat!("mcpbootd-", env!("CARGO_PKG_VERSION"));

/// A flag column as a row struct reads it: `BOOLEAN` on PostgreSQL, an integer on SQLite. A
/// field of a row struct reads one with `#[sqlx(try_from = "Flag")]`, or as `Option<Flag>` when
/// the column is nullable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flag(pub bool);

impl From<Flag> for bool {
    fn from(flag: Flag) -> bool {
        flag.0
    }
}

impl Type<Any> for Flag {
    fn type_info() -> AnyTypeInfo {
        <bool as Type<Any>>::type_info()
    }

    fn compatible(ty: &AnyTypeInfo) -> bool {
        ty.kind() == AnyTypeInfoKind::Bool || ty.kind().is_integer()
    }
}

impl<'r> Decode<'r, Any> for Flag {
    fn decode(value: AnyValueRef<'r>) -> Result<Flag, BoxDynError> {
        if value.type_info().kind() == AnyTypeInfoKind::Bool {
            <bool as Decode<Any>>::decode(value).map(Flag)
        } else {
            <i64 as Decode<Any>>::decode(value).map(|number| Flag(number != 0))
        }
    }
}

pub fn now_millis() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// RFC 3339 with milliseconds, UTC.
pub fn format_millis(millis: i64) -> String {
    let time = std::time::UNIX_EPOCH + Duration::from_millis(millis.max(0) as u64);
    humantime::format_rfc3339_millis(time).to_string()
}

/// Text the daemon did not write itself (a handler's console and errors, fetched documents, a
/// script, an upstream's answer, a token's claims) as the catalog stores it: each NUL character
/// replaced by U+FFFD. PostgreSQL's `TEXT` cannot hold NUL and refuses the whole statement (a
/// call-log batch, a generation's documents) over one; SQLite gets the same text, so a catalog
/// holds the same whichever engine it is on, and `mcpbootd migrate` copies it as it is. Owned,
/// because the `Any` driver copies a borrowed string when it is bound anyway.
pub fn stored_text(text: &str) -> String {
    if text.contains('\0') { text.replace('\0', "\u{FFFD}") } else { text.to_owned() }
}

pub fn to_json<T: Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).expect("catalog values serialise")
}

pub fn from_json<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, CatalogError> {
    serde_json::from_str(text).map_err(|e| CatalogError::Corrupt(e.to_string()))
}

/// A nullable JSON column's value.
pub fn from_optional_json<T: serde::de::DeserializeOwned>(text: Option<&str>) -> Result<Option<T>, CatalogError> {
    text.map(from_json).transpose()
}
