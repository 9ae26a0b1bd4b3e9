//! Keeping a server's `tools/list` small enough for a host to take in: a description's schemas,
//! inlined per tool, can list as megabytes (an object type used by every operation is repeated in
//! each), and hosts load the whole listing into a model's context.
//!
//! [`fit`] measures the listing the tools make and, over [`MAX_LISTING_BYTES`], shares the room
//! left by names, descriptions and annotations among the tools' schemas: a tool whose schemas fit
//! its share keeps them whole, and what small tools leave goes to the larger ones. A tool over its
//! share loses detail in steps until it fits: first the descriptions nested in its schemas, then
//! its output schema's deep levels, then its input schema's. A level cut off becomes permissive
//! (its `type` alone, so any value of that type is accepted; an argument with one possible value
//! keeps it), never stricter, so a result or an argument that matched before still matches: a
//! `oneOf` whose branches lost detail becomes an `anyOf`, and a `not` that would refuse more goes.
//! File arguments (`{content_base64 | url, …}`) are never cut into: a host must know how to send
//! a file.

use serde_json::{Map, Value};

use crate::toolset::ToolSpec;

/// The largest `tools/list` result the derived tools may make, in bytes of JSON.
pub const MAX_LISTING_BYTES: usize = 256 * 1024;
/// Room kept for the JSON-RPC envelope and the fields a host's listing adds to each tool.
const ENVELOPE_BYTES: usize = 16 * 1024;
const PER_TOOL_OVERHEAD: usize = 64;
/// Nested descriptions kept in a trimmed input schema are cut to this many characters.
const NESTED_DESCRIPTION_CHARS: usize = 100;

/// Trims the tools' schemas so that their listing fits [`MAX_LISTING_BYTES`]; returns how many
/// tools lost detail.
pub fn fit(tools: &mut [&mut ToolSpec]) -> usize {
    let fixed: usize = tools.iter().map(|tool| fixed_size(tool)).sum();
    let room = MAX_LISTING_BYTES.saturating_sub(ENVELOPE_BYTES + fixed);
    let wants: Vec<usize> = tools.iter().map(|tool| schemas_size(tool)).collect();
    if wants.iter().sum::<usize>() <= room {
        return 0;
    }
    let shares = shares(&wants, room);
    let mut trimmed = 0;
    for (tool, share) in tools.iter_mut().zip(shares) {
        if schemas_size(tool) > share {
            shrink(tool, share);
            trimmed += 1;
        }
    }
    trimmed
}

/// The most one operation's schemas may take when every operation of a description is stored
/// for discovery mode: `describe_operation` answers with them, and a model reads that answer.
/// Without a bound, a description whose operations each inline a large shared object stores
/// hundreds of kilobytes per operation.
pub const MAX_OPERATION_SCHEMA_BYTES: usize = 16 * 1024;

/// Trims one tool's schemas, the same way [`fit`] does, until they take at most `budget` bytes;
/// returns whether it lost detail.
pub fn bound(tool: &mut ToolSpec, budget: usize) -> bool {
    if schemas_size(tool) <= budget {
        return false;
    }
    shrink(tool, budget);
    true
}

/// Each want, or an equal share of what is left when it is larger: the smallest wants are met
/// first, and what they leave is shared among the rest.
fn shares(wants: &[usize], room: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..wants.len()).collect();
    order.sort_by_key(|&i| wants[i]);
    let mut out = vec![0; wants.len()];
    let mut left = room;
    for (taken, &i) in order.iter().enumerate() {
        let share = left / (wants.len() - taken);
        out[i] = wants[i].min(share);
        left -= out[i];
    }
    out
}

/// The steps a tool over its share goes through, as (input depth, output depth) kept; `None`
/// keeps every level. The first step only shortens nested descriptions.
const STEPS: &[(Option<usize>, Option<usize>)] = &[
    (None, None),
    (None, Some(4)),
    (None, Some(3)),
    (None, Some(2)),
    (Some(6), Some(2)),
    (Some(5), Some(1)),
    (Some(4), Some(1)),
    (Some(3), Some(1)),
    (Some(2), Some(1)),
    (Some(2), Some(0)),
    (Some(1), Some(0)),
];

fn shrink(tool: &mut ToolSpec, share: usize) {
    let input = Value::Object(std::mem::take(&mut tool.input_schema));
    let output = tool.output_schema.take().map(Value::Object);
    let mut best = None;
    for &(input_depth, output_depth) in STEPS {
        let input = trimmed(&input, input_depth, Side::Input);
        let output = output.as_ref().map(|o| trimmed(o, output_depth, Side::Output));
        let size = size(&input) + output.as_ref().map_or(0, size);
        best = Some((input, output));
        if size <= share {
            break;
        }
    }
    let (input, output) = best.expect("there is a step");
    tool.input_schema = into_map(input);
    tool.output_schema = output.map(into_map);
}

#[derive(Clone, Copy, PartialEq)]
enum Side {
    Input,
    Output,
}

/// `schema` with nested descriptions shortened (input) or dropped (output), and every level
/// deeper than `depth` made permissive.
fn trimmed(schema: &Value, depth: Option<usize>, side: Side) -> Value {
    let mut copy = schema.clone();
    trim_level(&mut copy, 0, depth, side);
    copy
}

/// Trims one level and those beneath it; returns whether a level lost what it checks (a
/// shortened description checks nothing, so it does not count).
fn trim_level(schema: &mut Value, level: usize, depth: Option<usize>, side: Side) -> bool {
    let Value::Object(map) = schema else { return false };
    if is_file_argument(map) {
        return false;
    }
    if level > 0 {
        match side {
            Side::Output => {
                map.remove("description");
                map.remove("title");
            }
            Side::Input => {
                if let Some(Value::String(text)) = map.get_mut("description")
                    && text.chars().count() > NESTED_DESCRIPTION_CHARS
                {
                    let cut: String = text.chars().take(NESTED_DESCRIPTION_CHARS - 1).collect();
                    *text = format!("{}…", cut.trim_end());
                }
                map.remove("title");
            }
        }
    }
    if depth.is_some_and(|depth| level >= depth) && level > 0 {
        // Permissive from here: its type, and (for arguments) what it is and its one possible
        // value, if it has one. That value is what usually tells a `oneOf`'s branches apart (a
        // message's `"role": {"const": "user"}`), and it takes a few bytes.
        let mut kept = Map::new();
        for key in ["type", "description", "const", "enum"] {
            let value = map.get(key).filter(|value| match key {
                "type" => true,
                "description" | "const" => side == Side::Input,
                _ => side == Side::Input && value.as_array().is_some_and(|values| values.len() == 1),
            });
            if let Some(value) = value {
                kept.insert(key.to_string(), value.clone());
            }
        }
        let cut = kept.len() < map.len();
        *map = kept;
        return cut;
    }
    if depth.is_some_and(|depth| level >= depth) {
        // The top level at depth 0: an object with no listed fields.
        let before = map.len();
        map.retain(|key, _| key == "type" || key == "description");
        return map.len() < before;
    }
    let mut cut = false;
    let mut loosened_one_of = false;
    let mut loosened_not = false;
    for (key, value) in map.iter_mut() {
        match key.as_str() {
            "properties" | "patternProperties" | "$defs" | "definitions" => {
                if let Value::Object(named) = value {
                    for schema in named.values_mut() {
                        cut |= trim_level(schema, level + 1, depth, side);
                    }
                }
            }
            "items" | "additionalProperties" | "contains" => cut |= trim_level(value, level + 1, depth, side),
            "not" => loosened_not = trim_level(value, level + 1, depth, side),
            "allOf" | "anyOf" | "oneOf" | "prefixItems" => {
                let mut branch_cut = false;
                if let Value::Array(list) = value {
                    for schema in list.iter_mut() {
                        branch_cut |= trim_level(schema, level + 1, depth, side);
                    }
                }
                loosened_one_of |= key == "oneOf" && branch_cut;
                cut |= branch_cut;
            }
            _ => {}
        }
    }
    // Loosening can make a schema stricter in two places, and a cut must only ever accept more.
    // Under `oneOf`, branches that lost what told them apart can both match a value, which
    // `oneOf` then refuses (two branches cut down to `{"type": "object"}` refuse every object):
    // it becomes `anyOf`. Under `not`, a looser schema refuses more: the `not` goes.
    if loosened_one_of && let Some(branches) = map.remove("oneOf") {
        merge_any_of(map, branches);
    }
    if loosened_not {
        map.remove("not");
    }
    cut || loosened_one_of || loosened_not
}

/// Adds `branches` as an `anyOf`; a level with an `anyOf` already needs both to hold, so the
/// second goes into an `allOf`.
fn merge_any_of(map: &mut Map<String, Value>, branches: Value) {
    if map.contains_key("anyOf") {
        let all = map.entry("allOf").or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(list) = all {
            list.push(serde_json::json!({"anyOf": branches}));
        }
    } else {
        map.insert("anyOf".to_string(), branches);
    }
}

/// A file argument's schema (see `body::file_schema`), which the trimming leaves whole.
fn is_file_argument(schema: &Map<String, Value>) -> bool {
    schema.get("properties").and_then(Value::as_object).is_some_and(|p| p.contains_key("content_base64"))
}

fn into_map(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

fn size(value: &Value) -> usize {
    serde_json::to_string(value).map_or(0, |text| text.len())
}

fn fixed_size(tool: &ToolSpec) -> usize {
    let text = |value: &str| value.len() + 2;
    PER_TOOL_OVERHEAD
        + text(&tool.name)
        + tool.title.as_deref().map_or(0, text)
        + text(&tool.description)
        + tool.annotations.as_ref().map_or(0, |a| size(&Value::Object(a.clone())))
}

fn schemas_size(tool: &ToolSpec) -> usize {
    size(&Value::Object(tool.input_schema.clone()))
        + tool.output_schema.as_ref().map_or(0, |o| size(&Value::Object(o.clone())))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn shares_meet_small_wants_first() {
        assert_eq!(shares(&[10, 100, 1000], 2000), [10, 100, 1000]);
        assert_eq!(shares(&[10, 100, 1000], 310), [10, 100, 200]);
        assert_eq!(shares(&[500, 500], 600), [300, 300]);
    }

    #[test]
    fn cut_levels_become_permissive_and_files_stay_whole() {
        let schema = json!({"type": "object", "properties": {
            "a": {"type": "object", "description": "x".repeat(300), "properties": {"b": {"type": "integer", "minimum": 3}}},
            "file": {"type": "object", "properties": {"content_base64": {"type": "string"}, "url": {"type": "string"}}}
        }});
        let input = trimmed(&schema, Some(1), Side::Input);
        assert_eq!(input["properties"]["a"]["type"], "object");
        assert!(input["properties"]["a"].get("properties").is_none(), "{input}");
        assert!(input["properties"]["a"]["description"].as_str().unwrap().chars().count() <= NESTED_DESCRIPTION_CHARS);
        assert!(input["properties"]["file"]["properties"]["url"].is_object(), "a file argument is kept whole");
        let output = trimmed(&schema, Some(0), Side::Output);
        assert_eq!(output, json!({"type": "object"}));
        let validator = crate::toolset::validator(&input).unwrap();
        assert!(validator.is_valid(&json!({"a": {"b": 1, "c": "anything"}})), "the cut level accepts more, not less");
    }

    #[test]
    fn a_cut_never_refuses_what_the_whole_schema_accepts() {
        // Branches told apart by a `const` below the cut, and a `not` whose details are cut.
        let branch = |kind: &str| json!({"type": "object", "properties": {"kind": {"type": "string", "const": kind, "minLength": 1}, "size": {"type": "integer"}}});
        let schema = json!({"type": "object", "properties": {
            "shape": {"oneOf": [branch("square"), branch("circle")]},
            "choice": {"anyOf": [{"type": "object"}], "oneOf": [branch("a"), branch("b")]},
            "other": {"type": "object", "not": {"type": "object", "properties": {"kind": {"const": "banned"}}, "required": ["kind"]}},
            "kept": {"oneOf": [{"type": "string"}, {"type": "integer"}]}
        }});
        let value = json!({"shape": {"kind": "square", "size": 2}, "choice": {"kind": "a"}, "other": {"kind": "fine"}, "kept": 3});
        assert!(crate::toolset::validator(&schema).unwrap().is_valid(&value));
        for depth in 1..=3 {
            let input = trimmed(&schema, Some(depth), Side::Input);
            let validator = crate::toolset::validator(&input).unwrap();
            assert!(validator.is_valid(&value), "at depth {depth}: {input:#}");
        }
        let input = trimmed(&schema, Some(2), Side::Input);
        assert!(input["properties"]["shape"].get("oneOf").is_none(), "{input:#}");
        assert_eq!(input["properties"]["shape"]["anyOf"].as_array().unwrap().len(), 2);
        assert!(input["properties"]["other"].get("not").is_none(), "{input:#}");
        assert!(input["properties"]["kept"]["oneOf"].is_array(), "a oneOf whose branches keep all they check stays");
        let input = trimmed(&schema, Some(3), Side::Input);
        let kinds = &input["properties"]["shape"]["anyOf"];
        assert_eq!(
            (&kinds[0]["properties"]["kind"]["const"], &kinds[1]["properties"]["kind"]["const"]),
            (&json!("square"), &json!("circle")),
            "a cut level keeps its one value: {input:#}"
        );
        let trimmed_whole = trimmed(&schema, None, Side::Input);
        assert_eq!(
            trimmed_whole["properties"]["shape"]["oneOf"].as_array().unwrap().len(),
            2,
            "nothing cut, nothing changed"
        );
    }
}
