//! Whitelist candidates for a generation: the hosts of the prompt's URLs and the operator's
//! domains (always admitted), and hosts found in the fetched documents (admitted only when the
//! plan's endpoints use them). Each keeps its provenance for the admin view; refused ones say why.

use crate::generate::docs::FetchedDocument;
use crate::generate::endpoint::Endpoint;
use crate::generate::plan::Plan;
use crate::whitelist::{Provenance, RefusedDomain, Whitelist, WhitelistEntry, admit};

/// Whitelist candidates with their provenance, before and after the plan is known.
pub struct Candidates {
    /// Prompt URL hosts and operator domains: always on the whitelist.
    fixed: Vec<WhitelistEntry>,
    /// Hosts found in documents: on the whitelist only if the plan uses them.
    discovered: Vec<WhitelistEntry>,
    refused: Vec<RefusedDomain>,
}

impl Candidates {
    pub fn collect(prompt_urls: &[String], allow_domains: &[String], documents: &[FetchedDocument]) -> Candidates {
        let mut candidates = Candidates { fixed: Vec::new(), discovered: Vec::new(), refused: Vec::new() };
        for url in prompt_urls {
            if let Some(host) = url::Url::parse(url).ok().and_then(|u| u.host_str().map(str::to_string)) {
                candidates.consider(&host, Provenance::Prompt, Some(format!("in the prompt: {url}")));
            }
        }
        for domain in allow_domains {
            candidates.consider(domain, Provenance::Operator, None);
        }
        for document in documents {
            for found in &document.discovered_urls {
                if let Some(host) = url::Url::parse(found).ok().and_then(|u| u.host_str().map(str::to_string)) {
                    candidates.consider(&host, Provenance::Discovered, Some(format!("found on {}", document.url)));
                }
            }
        }
        candidates
    }

    fn consider(&mut self, host: &str, source: Provenance, detail: Option<String>) {
        match admit(host, source, detail) {
            Ok(entry) => {
                let known = self.fixed.iter().chain(&self.discovered).any(|e| e.domain == entry.domain);
                if !known {
                    match source {
                        Provenance::Discovered => self.discovered.push(entry),
                        _ => self.fixed.push(entry),
                    }
                }
            }
            Err(refused) => {
                if !self.refused.iter().any(|r| r.domain == refused.domain) {
                    self.refused.push(refused);
                }
            }
        }
    }

    /// Every admitted candidate, for the planner.
    pub fn domains(&self) -> Vec<String> {
        self.fixed.iter().chain(&self.discovered).map(|e| e.domain.clone()).collect()
    }

    /// Fixed entries plus the discovered domains the plan's endpoints reference.
    pub fn whitelist_for(&self, plan: &Plan) -> (Whitelist, Vec<RefusedDomain>) {
        let mut whitelist = Whitelist::default();
        for entry in &self.fixed {
            whitelist.add(entry.clone());
        }
        let mut refused = self.refused.clone();
        let endpoints: Vec<(&str, &Endpoint)> = plan
            .tools
            .iter()
            .flat_map(|tool| tool.endpoints_used.iter().map(move |endpoint| (tool.name.as_str(), endpoint)))
            .collect();
        for entry in &self.discovered {
            let single = Whitelist::from_entries(vec![entry.clone()]);
            let users: Vec<&str> = endpoints
                .iter()
                .filter(|(_, endpoint)| single.allows(endpoint.host()))
                .map(|(tool, _)| *tool)
                .collect();
            if users.is_empty() {
                refused.push(RefusedDomain {
                    domain: entry.domain.clone(),
                    source: Provenance::Discovered,
                    detail: entry.detail.clone(),
                    reason: "no planned tool uses it".into(),
                });
            } else {
                let mut users = users;
                users.dedup();
                let detail = format!("{}; used by {}", entry.detail.clone().unwrap_or_default(), users.join(", "));
                whitelist.add(WhitelistEntry { detail: Some(detail), ..entry.clone() });
            }
        }
        (whitelist, refused)
    }
}
