//! The registry of mounted servers: what `/servers/{id}/mcp` looks up on every request.
//!
//! Mounting builds everything a call needs once (argument validators, the egress policy, the MCP
//! service), so the hot path is a read-lock and a hash lookup.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use serde_json::Value;

use crate::catalog::ServerRecord;
use crate::config::Config;
use crate::serve::call::{CallError, CallOutput, CallableTool, Caller, Via};
use crate::serve::egress::ServerPolicy;
use crate::serve::mount::{McpMount, McpSettings};
use crate::toolset::ServerId;

/// A ready server as the serving path sees it.
pub struct MountedServer {
    pub id: ServerId,
    pub name: String,
    pub generation_id: i64,
    /// Hex sha256 of the token MCP clients must present, when one is set.
    pub access_token_sha256: Option<String>,
    pub policy: Arc<ServerPolicy>,
    pub tools: Vec<CallableTool>,
}

pub struct Registry {
    mounts: RwLock<HashMap<ServerId, Arc<Mounted>>>,
    mcp: McpSettings,
    max_response_bytes: u64,
}

/// A mounted server plus its MCP endpoint.
pub struct Mounted {
    pub server: Arc<MountedServer>,
    pub mcp: McpMount,
}

impl MountedServer {
    pub fn tool(&self, name: &str) -> Option<&CallableTool> {
        self.tools.iter().find(|t| t.spec.name == name)
    }

    pub async fn call(&self, caller: &Caller, tool: &str, arguments: Value, via: Via) -> Result<CallOutput, CallError> {
        let tool = self.tool(tool).ok_or_else(|| CallError::UnknownTool(tool.to_string()))?;
        caller.call(&self.id, self.generation_id, &self.policy, tool, arguments, via).await
    }
}

impl Registry {
    pub fn new(config: &Config, caller: Caller) -> Registry {
        Registry {
            mounts: RwLock::new(HashMap::new()),
            max_response_bytes: caller.max_response_bytes(),
            mcp: McpSettings::new(config, caller),
        }
    }

    /// Mounts (or re-mounts) a ready server from its catalog record.
    pub fn mount(&self, record: &ServerRecord) -> Result<(), String> {
        let generation = record
            .generation
            .as_ref()
            .ok_or_else(|| format!("server {} has no active generation", record.id))?;
        let tools = generation
            .tools
            .tools()
            .iter()
            .cloned()
            .map(CallableTool::new)
            .collect::<Result<Vec<_>, _>>()?;
        let server = Arc::new(MountedServer {
            id: record.id.clone(),
            name: record.name.clone(),
            generation_id: generation.id,
            access_token_sha256: record.access_token_sha256.clone(),
            policy: Arc::new(ServerPolicy {
                whitelist: generation.whitelist.clone(),
                max_response_bytes: self.max_response_bytes,
                any_host: false,
            }),
            tools,
        });
        let mcp = McpMount::new(server.clone(), &self.mcp);
        let previous = self.write().insert(record.id.clone(), Arc::new(Mounted { server, mcp }));
        if let Some(previous) = previous {
            previous.mcp.close();
        }
        Ok(())
    }

    /// Unmounts a server; its open MCP streams are closed at once.
    pub fn unmount(&self, id: &ServerId) -> bool {
        match self.write().remove(id) {
            Some(mounted) => {
                mounted.mcp.close();
                true
            }
            None => false,
        }
    }

    pub fn get(&self, id: &ServerId) -> Option<Arc<MountedServer>> {
        self.read().get(id).map(|m| m.server.clone())
    }

    pub fn get_mounted(&self, id: &ServerId) -> Option<Arc<Mounted>> {
        self.read().get(id).cloned()
    }

    pub fn len(&self) -> usize {
        self.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Closes every MCP endpoint's streams (shutdown).
    pub fn close_all(&self) {
        for mounted in self.read().values() {
            mounted.mcp.close();
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<ServerId, Arc<Mounted>>> {
        self.mounts.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<ServerId, Arc<Mounted>>> {
        self.mounts.write().unwrap_or_else(|p| p.into_inner())
    }
}
