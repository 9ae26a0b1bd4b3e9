//! The catalog: the only module that holds SQL.
//!
//! Two backends behind one API: SQLite (a file next to the daemon, the default, which needs
//! nothing) and PostgreSQL (shared by several replicas). Queries go through sqlx's `Any` driver
//! and are written once, with `$N` placeholders both engines accept; where the engines' SQL
//! differs (JSON functions, mostly) [`Catalog::sql`] picks the statement for the backend. Each
//! backend has its own migrations (`migrations/sqlite`, `migrations/postgres`) that produce the
//! same tables; PostgreSQL spells flags `BOOLEAN` and integers `BIGINT`. Rows are read into
//! `#[derive(sqlx::FromRow)]` structs by column name, a flag as `values::Flag` (which takes
//! SQLite's integers and PostgreSQL's booleans) and JSON columns as text, converted (and checked)
//! into the public records with `TryFrom`.
//!
//! Servers point at their active generation; a generation is immutable once finished and owns its
//! tools. Every multi-row write happens in one transaction, so a failed registration leaves no
//! half-written rows. The call log is written in batches by a background writer (see
//! [`CallLog`]) so that tool calls never wait for the disk.
//!
//! The room is layered. At the bottom, what every module shares: `error` ([`CatalogError`]),
//! `values` (how times, JSON, flags and foreign text are stored), `sql` (statement text and the
//! [`Backend`]) and the rows several writers insert (`tools`, `credential_rows`); then
//! `registrations` (the batched toolset writer) and `db` (the [`Catalog`] handle: opening, pools,
//! lock, probes); then one module per entity, each adding its methods to [`Catalog`]:
//! [`servers`], [`generations`] (the life of a prompt generation), [`versions`] (numbered
//! generations, review, activation, drift state, tool failures), [`calls`] (the call log),
//! [`credentials`] (sealed upstream API credentials), [`accounts`], [`discovery`], [`leases`],
//! [`changes`] and [`copy`]. This file only declares them and re-exports the public API.

pub use crate::config::CatalogLocation;

mod accounts;
mod calls;
mod changes;
mod copy;
mod credential_rows;
mod credentials;
mod db;
mod discovery;
mod error;
mod generations;
mod leases;
mod registrations;
mod servers;
mod sql;
mod tools;
mod values;
mod versions;

pub use accounts::{ConnectionRecord, FlowRecord, NewConnection, TakenFlow};
pub use calls::{CallCounts, CallFilter, CallLog, CallRecord, EgressRecord, Retention};
pub use changes::CatalogChange;
pub use copy::{CopiedTable, CopyError};
pub use credential_rows::NewCredential;
pub use credentials::{CredentialRecord, PutCredential};
pub use db::{Catalog, Replica};
pub use discovery::{DiscoveryIndex, DiscoveryRecord, OperationEntry, OperationRecord};
pub use error::CatalogError;
pub use generations::{
    CachedGeneration, DocumentRef, FinishedGeneration, GenerationDetails, GenerationRecord, NewDocument,
    NewPromptServer, StageTimings, StartGeneration,
};
pub use leases::ClaimedGeneration;
pub use registrations::NewToolsetServer;
pub use servers::{MountRecord, ServedGeneration, ServerRecord, ServerSummary};
pub use sql::Backend;
pub use tools::ToolExtras;
pub use values::{GENERATOR_VERSION, format_millis, now_millis};
pub use versions::{DriftEvent, DriftState, DriftSubject, FailedCall, Review, VersionRefusal, VersionSummary};
