//! The serving side: mounted servers, tool calls, isolates and the egress policy.
//!
//! Nothing here imports generation or LLM code; serving never calls an LLM.

pub mod call;
pub mod code_mode;
pub mod discovery;
pub mod egress;
pub mod health;
pub mod isolate;
pub mod mount;
pub mod per_user;
pub mod quota;
pub mod registry;
pub mod server;
pub mod typescript;
