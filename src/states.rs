//! The named states the daemon stores, reports and counts: a server's or generation's status,
//! generation stages and outcomes, call outcomes, which door a call came through.
//!
//! Each is an enum whose spelling lives here once. [`text_enum!`] gives every one the same
//! conversions: `as_str`/`Display`, `FromStr` (the error lists the accepted values), serde as
//! the string, an OpenAPI schema listing the values, and `sqlx` encoding as TEXT, so the catalog
//! binds and reads values of these types instead of string literals. Other modules use the macro
//! for their own spelled-once values (the admin API's error codes).

/// A value that is not one of an enum's spellings; says which were expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} {value:?}; expected one of: {expected}")]
pub struct UnknownValue {
    pub kind: &'static str,
    pub value: String,
    pub expected: String,
}

/// Declares a fieldless enum spelled as lower-case text on the wire and in the catalog.
macro_rules! text_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident ($kind:literal) {
            $( $(#[$variant_meta:meta])* $variant:ident = $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis enum $name {
            $( $(#[$variant_meta])* $variant, )+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub const fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $text, )+
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = $crate::states::UnknownValue;

            fn from_str(value: &str) -> Result<Self, Self::Err> {
                match value {
                    $( $text => Ok($name::$variant), )+
                    _ => Err($crate::states::UnknownValue {
                        kind: $kind,
                        value: value.to_owned(),
                        expected: [$($text),+].join(", "),
                    }),
                }
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }

        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                utoipa::openapi::schema::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::String)
                    .enum_values(Some([$($text),+]))
                    .into()
            }
        }

        impl utoipa::ToSchema for $name {}

        impl<DB: sqlx::Database> sqlx::Type<DB> for $name
        where
            str: sqlx::Type<DB>,
        {
            fn type_info() -> DB::TypeInfo {
                <str as sqlx::Type<DB>>::type_info()
            }

            fn compatible(ty: &DB::TypeInfo) -> bool {
                <str as sqlx::Type<DB>>::compatible(ty)
            }
        }

        // Encoded as an owned string: sqlx's `Any` driver encodes a `&'a str` only into a query
        // of lifetime `'a`, which a `&'static str` would force on every other argument.
        impl<'q, DB: sqlx::Database> sqlx::Encode<'q, DB> for $name
        where
            String: sqlx::Encode<'q, DB>,
        {
            fn encode_by_ref(
                &self,
                buf: &mut <DB as sqlx::Database>::ArgumentBuffer,
            ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
                <String as sqlx::Encode<'q, DB>>::encode(self.as_str().to_owned(), buf)
            }
        }

        impl<'r, DB: sqlx::Database> sqlx::Decode<'r, DB> for $name
        where
            &'r str: sqlx::Decode<'r, DB>,
        {
            fn decode(value: <DB as sqlx::Database>::ValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
                Ok(<&'r str as sqlx::Decode<'r, DB>>::decode(value)?.parse()?)
            }
        }
    };
}

pub(crate) use text_enum;

text_enum! {
    /// Where a server or one of its generations is: waiting, in a stage, or finished.
    pub enum Status ("status") {
        Pending = "pending",
        Fetching = "fetching",
        Planning = "planning",
        Compiling = "compiling",
        Testing = "testing",
        /// Tools stored; a server in this status is being served.
        Ready = "ready",
        /// A dry run's plan, stored without tools.
        Planned = "planned",
        Failed = "failed",
        /// Tools stored and self-tested, waiting for an operator to approve them before they are
        /// served (`[generation] require_approval`).
        AwaitingApproval = "awaiting_approval",
        /// An operator refused the version that awaited approval; it is never served.
        Rejected = "rejected",
    }
}

impl Status {
    /// The statuses of a generation that has not finished.
    pub const RUNNING: [Status; 5] =
        [Status::Pending, Status::Fetching, Status::Planning, Status::Compiling, Status::Testing];

    /// Whether a generation in this status has finished (`ready`, `planned`, `failed`,
    /// `awaiting_approval` or `rejected`).
    pub fn is_final(self) -> bool {
        !Status::RUNNING.contains(&self)
    }
}

text_enum! {
    /// A step of a generation; its status while the step runs.
    pub enum Stage ("stage") {
        Fetching = "fetching",
        Planning = "planning",
        Compiling = "compiling",
        Testing = "testing",
    }
}

impl From<Stage> for Status {
    fn from(stage: Stage) -> Status {
        match stage {
            Stage::Fetching => Status::Fetching,
            Stage::Planning => Status::Planning,
            Stage::Compiling => Status::Compiling,
            Stage::Testing => Status::Testing,
        }
    }
}

text_enum! {
    /// How a generation ended.
    pub enum GenerationOutcome ("generation outcome") {
        /// Tools stored and the generation becomes the server's active one.
        Ready = "ready",
        /// Dry run: plan stored, nothing mounted.
        Planned = "planned",
        Failed = "failed",
    }
}

impl From<GenerationOutcome> for Status {
    fn from(outcome: GenerationOutcome) -> Status {
        match outcome {
            GenerationOutcome::Ready => Status::Ready,
            GenerationOutcome::Planned => Status::Planned,
            GenerationOutcome::Failed => Status::Failed,
        }
    }
}

text_enum! {
    /// What started a generation (a version of a server).
    pub enum Trigger ("trigger") {
        /// The server's registration.
        Registration = "registration",
        /// An operator's `POST .../regenerate`.
        Regenerate = "regenerate",
        /// A documentation drift check found changed documents.
        Drift = "drift",
        /// A targeted regeneration of some tools (`"tools"` in the regenerate body).
        Repair = "repair",
    }
}

text_enum! {
    /// How a server's last documentation drift check went (`docs/versions.md`).
    pub enum DriftStatus ("drift status") {
        /// A check is running.
        Checking = "checking",
        Unchanged = "unchanged",
        /// A document changed; a candidate version was started (or one awaits approval).
        Drifted = "drifted",
        /// A document could not be fetched, or the check was interrupted.
        Failed = "failed",
    }
}

text_enum! {
    /// What an operator did to a version.
    pub enum VersionChange ("version change") {
        Approved = "approved",
        Rejected = "rejected",
        Activated = "activated",
    }
}

text_enum! {
    /// How a server was registered.
    pub enum ServerKind ("server kind") {
        /// Hand-written tools, registered whole.
        Toolset = "toolset",
        /// A prompt the daemon generates tools from.
        Prompt = "prompt",
        /// An API description the daemon derives tools from.
        OpenApi = "openapi",
    }
}

text_enum! {
    /// Where a generation's tools came from.
    pub enum GenerationSource ("generation source") {
        /// Registered as written.
        Toolset = "toolset",
        /// Planned and written by the LLM.
        Llm = "llm",
        /// Derived from an API description (the LLM, if any, only chose and described).
        OpenApi = "openapi",
    }
}

text_enum! {
    /// How a tool call ended, as the call log and metrics record it.
    pub enum CallOutcome ("call outcome") {
        /// The handler returned (its result may still be a tool error).
        Ok = "ok",
        /// The handler threw, or returned something that is not a tool result.
        Error = "error",
        /// The handler failed after the egress policy refused one of its requests.
        Denied = "denied",
        /// Over the wall-clock or CPU limit.
        Timeout = "timeout",
        /// Over a memory, stack, fetch or size limit.
        Limit = "limit",
        /// Admission refused the call (queue full or waited too long).
        Busy = "busy",
        /// The daemon was shutting down and did not start the call.
        ShuttingDown = "shutting_down",
        /// The call was stopped before it finished: its client went away, its server was
        /// deleted, or the script that made it ended.
        Cancelled = "cancelled",
    }
}

text_enum! {
    /// Which door a call came through.
    pub enum Via ("call route") {
        /// `tools/call` on the server's MCP mount.
        Mcp = "mcp",
        /// `POST /admin/servers/{id}/call`.
        Admin = "admin",
        /// `call_tool` in a code-mode script (the call log names the script as its parent).
        Script = "script",
    }
}

text_enum! {
    /// What the egress's upstream protection did with a request before it left (the call log's
    /// egress rows and metrics; see `serve::egress::upstream`).
    pub enum UpstreamDecision ("upstream decision") {
        /// Held until the time an earlier `Retry-After` from the origin named.
        RetryAfterWait = "retry_after_wait",
        /// Refused: the origin's `Retry-After` ends after the call's deadline.
        RetryAfterRefused = "retry_after_refused",
        /// Refused: the origin's circuit breaker is open.
        BreakerOpen = "breaker_open",
        /// Let through as the one probe of a half-open circuit breaker.
        BreakerProbe = "breaker_probe",
        /// Held until the server's rate limit for the origin allowed it.
        UpstreamLimitWait = "upstream_limit_wait",
        /// Refused: the server's rate limit for the origin allows it only after the call's deadline.
        UpstreamLimitRefused = "upstream_limit_refused",
    }
}

text_enum! {
    /// How the egress's HTTP cache took part in a GET (see `serve::egress::cache`).
    pub enum CacheUse ("cache use") {
        /// Answered from the cache; the upstream was not asked.
        Hit = "hit",
        /// A stored response was revalidated with the upstream (304) and answered from the cache.
        Revalidated = "revalidated",
        /// Not in the cache, and the response was not stored.
        Miss = "miss",
        /// Not in the cache (or stale), and the response was stored.
        Stored = "stored",
    }
}

/// A status from text that may come from a newer daemon: unknown values are not final.
pub fn is_final_status(status: &str) -> bool {
    status.parse::<Status>().is_ok_and(Status::is_final)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_reads_back_from_its_spelling() {
        for status in Status::ALL {
            assert_eq!(status.as_str().parse::<Status>(), Ok(*status));
            assert_eq!(serde_json::to_value(status).unwrap(), serde_json::json!(status.as_str()));
        }
        for outcome in CallOutcome::ALL {
            assert_eq!(serde_json::from_value::<CallOutcome>(serde_json::json!(outcome.as_str())).unwrap(), *outcome);
        }
    }

    #[test]
    fn an_unknown_spelling_names_the_accepted_ones() {
        let error = "bogus".parse::<Via>().unwrap_err();
        assert_eq!(error.to_string(), "unknown call route \"bogus\"; expected one of: mcp, admin, script");
        let error = serde_json::from_str::<Status>("\"done\"").unwrap_err().to_string();
        assert!(error.contains("expected one of: pending, fetching"), "{error}");
    }

    #[test]
    fn only_stages_and_pending_are_not_final() {
        let finals: Vec<&str> = Status::ALL.iter().filter(|s| s.is_final()).map(|s| s.as_str()).collect();
        assert_eq!(finals, ["ready", "planned", "failed", "awaiting_approval", "rejected"]);
        for stage in Stage::ALL {
            assert!(!Status::from(*stage).is_final());
        }
        assert!(!is_final_status("some-future-stage"));
    }
}
