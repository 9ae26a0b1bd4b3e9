//! What changes between two versions of a server: tools added, removed and renamed, and per
//! tool its title, description, schemas and annotations (structurally, as JSON Patch
//! operations) and its handler (a unified diff); the whitelist; the credentials the tools need.

use serde_json::Value;
use similar::TextDiff;

use crate::api::model::{Renamed, TextChange, ToolChange, ValueChange, VersionDiff};
use crate::catalog::GenerationRecord;
use crate::toolset::ToolSpec;

/// `from` → `to`.
pub fn diff(from: &GenerationRecord, to: &GenerationRecord) -> VersionDiff {
    let old = from.tools.tools();
    let new = to.tools.tools();
    let named = |tools: &[ToolSpec], name: &str| tools.iter().any(|t| t.name == name);
    let mut only_old: Vec<&ToolSpec> = old.iter().filter(|t| !named(new, &t.name)).collect();
    let mut only_new: Vec<&ToolSpec> = new.iter().filter(|t| !named(old, &t.name)).collect();
    let mut diff = VersionDiff { from: from.version, to: to.version, ..VersionDiff::default() };
    // A tool that left under one name and came back under another with the same handler, or
    // failing that the same input schema with parameters (tools without any all look alike),
    // was renamed.
    let mut pairs: Vec<(&ToolSpec, &ToolSpec)> = Vec::new();
    fn same_handler(a: &ToolSpec, b: &ToolSpec) -> bool {
        a.handler == b.handler
    }
    fn same_parameters(a: &ToolSpec, b: &ToolSpec) -> bool {
        let has_parameters = a.input_schema.get("properties").and_then(Value::as_object).is_some_and(|p| !p.is_empty());
        has_parameters && a.input_schema == b.input_schema
    }
    let rules: [fn(&ToolSpec, &ToolSpec) -> bool; 2] = [same_handler, same_parameters];
    for same in rules {
        only_old.retain(|gone| match only_new.iter().position(|came| same(gone, came)) {
            Some(index) => {
                pairs.push((gone, only_new.remove(index)));
                false
            }
            None => true,
        });
    }
    diff.removed = only_old.iter().map(|t| t.name.clone()).collect();
    diff.added = only_new.iter().map(|t| t.name.clone()).collect();
    diff.renamed = pairs.iter().map(|(a, b)| Renamed { from: a.name.clone(), to: b.name.clone() }).collect();
    for tool in new {
        let before = old
            .iter()
            .find(|t| t.name == tool.name)
            .or_else(|| pairs.iter().find(|(_, renamed)| renamed.name == tool.name).map(|(gone, _)| *gone));
        if let Some(change) = before.and_then(|before| tool_change(before, tool)) {
            diff.changed.push(change);
        }
    }
    let domains = |g: &GenerationRecord| g.whitelist.domains();
    let (old_domains, new_domains) = (domains(from), domains(to));
    diff.whitelist_added = new_domains.iter().filter(|d| !old_domains.contains(d)).cloned().collect();
    diff.whitelist_removed = old_domains.iter().filter(|d| !new_domains.contains(d)).cloned().collect();
    let (old_credentials, new_credentials) = (credentials_needed(from), credentials_needed(to));
    diff.credentials_added = new_credentials.iter().filter(|c| !old_credentials.contains(c)).cloned().collect();
    diff.credentials_removed = old_credentials.iter().filter(|c| !new_credentials.contains(c)).cloned().collect();
    diff
}

/// How `after` differs from `before`; `None` if it does not (a rename alone is listed apart).
fn tool_change(before: &ToolSpec, after: &ToolSpec) -> Option<ToolChange> {
    let text = |a: &Option<String>, b: &Option<String>| (a != b).then(|| TextChange { from: a.clone(), to: b.clone() });
    let object = |map: Option<&serde_json::Map<String, Value>>| map.map_or(Value::Null, |m| Value::Object(m.clone()));
    let change = ToolChange {
        name: after.name.clone(),
        title: text(&before.title, &after.title),
        description: text(&Some(before.description.clone()), &Some(after.description.clone())),
        input_schema: value_changes(&object(Some(&before.input_schema)), &object(Some(&after.input_schema))),
        output_schema: value_changes(&object(before.output_schema.as_ref()), &object(after.output_schema.as_ref())),
        annotations: value_changes(&object(before.annotations.as_ref()), &object(after.annotations.as_ref())),
        handler: handler_diff(&before.handler, &after.handler),
    };
    let unchanged = change.title.is_none()
        && change.description.is_none()
        && change.input_schema.is_empty()
        && change.output_schema.is_empty()
        && change.annotations.is_empty()
        && change.handler.is_none();
    (!unchanged).then_some(change)
}

/// The structural changes from `before` to `after`, as JSON Patch operations with the value
/// each replaced or removed.
pub fn value_changes(before: &Value, after: &Value) -> Vec<ValueChange> {
    json_patch::diff(before, after)
        .0
        .into_iter()
        .filter_map(|operation| {
            let (op, path, to) = match operation {
                json_patch::PatchOperation::Add(add) => ("add", add.path.to_string(), Some(add.value)),
                json_patch::PatchOperation::Remove(remove) => ("remove", remove.path.to_string(), None),
                json_patch::PatchOperation::Replace(replace) => {
                    ("replace", replace.path.to_string(), Some(replace.value))
                }
                // A diff only adds, removes and replaces.
                _ => return None,
            };
            let from = if op == "add" { None } else { before.pointer(&path).cloned() };
            Some(ValueChange { op: op.to_string(), path, from, to })
        })
        .collect()
}

/// A unified diff of two handlers (3 lines of context); `None` when they are the same.
pub fn handler_diff(before: &str, after: &str) -> Option<String> {
    if before == after {
        return None;
    }
    let (before, after) = (with_final_newline(before), with_final_newline(after));
    let diff = TextDiff::from_lines(before.as_str(), after.as_str());
    Some(diff.unified_diff().context_radius(3).header("before", "after").to_string())
}

fn with_final_newline(text: &str) -> String {
    if text.ends_with('\n') { text.to_string() } else { format!("{text}\n") }
}

/// The credentials a version's tools need: an API description's security schemes.
fn credentials_needed(generation: &GenerationRecord) -> Vec<String> {
    let auth =
        generation.details.plan.as_ref().and_then(|plan| plan.pointer("/openapi/auth")).and_then(Value::as_array);
    let mut names: Vec<String> =
        auth.into_iter().flatten().filter_map(|need| need["credential"].as_str().map(str::to_string)).collect();
    names.sort();
    names.dedup();
    names
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn schema_changes_are_structural_and_name_the_old_value() {
        let before = json!({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]});
        let after = json!({"type": "object", "properties": {"id": {"type": "string"}, "q": {"type": "string"}}, "required": ["id"]});
        let changes = value_changes(&before, &after);
        assert!(changes.contains(&ValueChange {
            op: "replace".into(),
            path: "/properties/id/type".into(),
            from: Some(json!("integer")),
            to: Some(json!("string")),
        }));
        assert!(changes.iter().any(|c| c.op == "add" && c.path == "/properties/q" && c.from.is_none()));
        assert!(value_changes(&before, &before).is_empty());
    }

    #[test]
    fn a_handler_diff_is_unified_with_context() {
        let diff = handler_diff("const a = 1;\nreturn a;", "const a = 2;\nreturn a;").unwrap();
        assert!(diff.starts_with("--- before\n+++ after\n@@ -1,2 +1,2 @@\n"), "{diff}");
        assert!(diff.contains("-const a = 1;\n+const a = 2;\n return a;\n"), "{diff}");
        assert_eq!(handler_diff("return 1;", "return 1;"), None);
    }
}
