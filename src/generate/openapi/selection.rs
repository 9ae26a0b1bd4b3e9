//! Which of a description's operations a server derives and which it lists: the operator's
//! `operations` filter, the cap of `[generation] max_tools`, discovery mode (a server that lists
//! some operations and reaches all of them through search) with the rule that picks the listed
//! ones when no LLM chose, and what `search_operations` finds an operation by. Choosing with an
//! LLM is `select`'s job.

use super::spec::Operation;
use crate::serve::discovery::STANDARD_TOOLS;
use crate::serve::discovery::search::SearchDocument;
use crate::toolset::OperationFilter;

/// Which operations become tools, and whether the server lists them all.
#[derive(Debug, Clone, Copy)]
pub struct Selection<'a> {
    /// The operator's `operations` filter.
    pub filter: &'a OperationFilter,
    /// `[generation] max_tools`: the most tools a server lists.
    pub max_tools: usize,
    /// The operator's discovery setting; `None`: on when more operations can become tools than
    /// `max_tools`.
    pub discovery: Option<bool>,
    /// The operations (`METHOD /path`) an LLM chose to list, when one chose.
    pub chosen: Option<&'a [String]>,
}

/// Whether a server whose description has `callable` operations that can become tools is in
/// discovery mode.
pub fn discovery_mode(setting: Option<bool>, callable: usize, max_tools: usize) -> bool {
    setting.unwrap_or(callable > max_tools)
}

/// How many of its operations a server lists: all of `max_tools`, or in discovery mode what
/// the standard tools leave.
pub fn listed_limit(discovery: bool, max_tools: usize) -> usize {
    if discovery { max_tools.saturating_sub(STANDARD_TOOLS.len()) } else { max_tools }
}

/// The operations `filter` selects, in document order.
pub fn filtered<'a>(operations: &'a [Operation], filter: &OperationFilter) -> Vec<&'a Operation> {
    operations
        .iter()
        .filter(|op| filter.include.is_empty() || filter.include.iter().any(|rule| matches(rule, op)))
        .filter(|op| !filter.exclude.iter().any(|rule| matches(rule, op)))
        .collect()
}

/// Whether an `operations` rule selects `op`.
pub fn matches(rule: &str, op: &Operation) -> bool {
    let rule = rule.trim();
    if let Some(tag) = rule.strip_prefix("tag:") {
        return op.tags.iter().any(|t| t.eq_ignore_ascii_case(tag.trim()));
    }
    if let Some(id) = rule.strip_prefix("operationId:") {
        return op.operation_id.as_deref() == Some(id.trim());
    }
    if let Some((method, path)) = rule.split_once(' ') {
        return method.eq_ignore_ascii_case(&op.method) && path.trim() == op.path;
    }
    op.operation_id.as_deref() == Some(rule)
}

/// The listed operations of a discovery-mode server when no LLM chose them: the most useful
/// `limit`, by a rule an operator can predict (docs/openapi.md). Operations are grouped by
/// their first tag (else their first path segment), so every part of the API is represented;
/// within a group reads come before writes, live operations before deprecated ones and short
/// paths before long ones; the groups then take turns, in document order, until `limit`.
/// Returns positions in `operations`, in document order.
pub fn most_useful(operations: &[&Operation], limit: usize) -> Vec<usize> {
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for (index, op) in operations.iter().enumerate() {
        let group = op
            .tags
            .first()
            .cloned()
            .unwrap_or_else(|| op.path.split('/').find(|s| !s.is_empty()).unwrap_or("").to_string());
        match groups.iter_mut().find(|(name, _)| *name == group) {
            Some((_, members)) => members.push(index),
            None => groups.push((group, vec![index])),
        }
    }
    let method_rank = |method: &str| match method {
        "GET" | "HEAD" => 0,
        "POST" => 1,
        "PUT" | "PATCH" => 2,
        _ => 3,
    };
    for (_, members) in &mut groups {
        members.sort_by_key(|&i| {
            let op = operations[i];
            (op.deprecated, method_rank(&op.method), op.path.split('/').filter(|s| !s.is_empty()).count(), i)
        });
    }
    let mut chosen = Vec::with_capacity(limit);
    let mut round = 0;
    while chosen.len() < limit && groups.iter().any(|(_, members)| members.len() > round) {
        for (_, members) in &groups {
            if chosen.len() < limit
                && let Some(&index) = members.get(round)
            {
                chosen.push(index);
            }
        }
        round += 1;
    }
    chosen.sort_unstable();
    chosen
}

/// What an operation is found by in `search_operations`.
pub fn search_document(op: &Operation) -> SearchDocument<'_> {
    SearchDocument {
        // An operation without an operationId is named after its method and path, which the
        // path's own field already indexes.
        operation: op.operation_id.as_deref().unwrap_or(""),
        method: &op.method,
        path: &op.path,
        // A description without a summary (GitHub's) says what the operation is in its first
        // sentence.
        summary: op.summary.as_deref().or_else(|| op.description.as_deref().map(first_sentence)),
        description: op.description.as_deref(),
        tags: &op.tags,
        parameters: op.parameters.iter().map(|p| p.name.as_str()).collect(),
    }
}

fn first_sentence(text: &str) -> &str {
    let end = text.find(". ").or_else(|| text.find('\n')).unwrap_or(text.len());
    let end = (0..=end.min(200)).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listing_rule_takes_turns_across_tags() {
        let op =
            |tag: &str, method: &str, path: &str| Operation { tags: vec![tag.into()], ..Operation::bare(method, path) };
        let operations = [
            op("a", "DELETE", "/a/{id}"),
            op("a", "POST", "/a"),
            op("a", "GET", "/a/{id}/deep/list"),
            op("a", "GET", "/a"),
            op("b", "POST", "/b"),
            op("c", "GET", "/c"),
        ];
        let refs: Vec<&Operation> = operations.iter().collect();
        assert_eq!(most_useful(&refs, 3), [3, 4, 5]);
        assert_eq!(most_useful(&refs, 4), [2, 3, 4, 5]);
        assert_eq!(most_useful(&refs, 10).len(), 6);
    }
}
