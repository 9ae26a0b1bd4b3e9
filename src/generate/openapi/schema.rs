//! Making a description's JSON Schemas fit for tools: [`sanitize`] drops OpenAPI-only keywords and
//! the malformed ones a real description has, so the daemon's schema checks accept an input
//! schema, and [`output_schema`] loosens a response schema to the shape real results keep to.

use serde_json::{Map, Value, json};

/// The output schema of an object response, made lenient: real APIs add fields, leave out ones
/// their description calls required, send `null` where it says a string, a float where it says
/// an integer and values its enums do not list, and a client rejects a result that does not
/// match the listed schema. The shape is kept (which fields, of which types); the rest is not.
pub fn output_schema(schema: &Value) -> Option<Map<String, Value>> {
    let object = schema.as_object()?;
    let is_object = object.get("type").is_some_and(|t| t == "object")
        || (object.get("type").is_none() && object.contains_key("properties"));
    if !is_object {
        return None;
    }
    let mut lenient = schema.clone();
    loosen(&mut lenient);
    // MCP lists an output schema as an object type (the result itself is never null).
    lenient["type"] = Value::String("object".into());
    match lenient {
        Value::Object(map) => Some(sanitize(map)),
        _ => None,
    }
}

/// Keywords a result is not checked against: constraints an API's data rarely keeps to.
const UNCHECKED_IN_RESULTS: &[&str] = &[
    "required",
    "additionalProperties",
    "unevaluatedProperties",
    "propertyNames",
    "format",
    "pattern",
    "enum",
    "const",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "not",
    "if",
    "then",
    "else",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "contains",
    "additionalItems",
    "unevaluatedItems",
];

fn loosen(value: &mut Value) {
    each_schema(value, &mut |schema| {
        for key in UNCHECKED_IN_RESULTS {
            schema.remove(*key);
        }
        // Loosened branches overlap, and `oneOf` fails a value that matches two of them.
        if let Some(branches) = schema.remove("oneOf") {
            schema.insert("anyOf".into(), branches);
        }
        // Any field may be null, an integer may come as a float (`1.0`), a string as a number
        // (identifiers and codes described as strings are often sent as numbers), and a boolean
        // as a number (APIs that store flags as integers send `1` and `0`).
        let widened = match schema.get("type") {
            Some(Value::String(name)) => Some(vec![Value::String(name.clone())]),
            Some(Value::Array(names)) => Some(names.clone()),
            _ => None,
        };
        if let Some(names) = widened {
            let mut wide: Vec<Value> = Vec::new();
            let numeric_too =
                names.iter().any(|name| name == "string" || name == "boolean").then(|| Value::String("number".into()));
            for name in names.into_iter().chain(numeric_too).chain([Value::String("null".into())]) {
                let name = if name == "integer" { Value::String("number".into()) } else { name };
                if !wide.contains(&name) {
                    wide.push(name);
                }
            }
            schema.insert("type".into(), Value::Array(wide));
        }
    });
}

/// Calls `visit` on `schema` and every schema inside it, telling keywords from property names:
/// `properties` holds schemas under arbitrary names, `items` a schema, `allOf` a list of them.
fn each_schema(schema: &mut Value, visit: &mut impl FnMut(&mut Map<String, Value>)) {
    let Value::Object(map) = schema else { return };
    visit(map);
    for (key, value) in map.iter_mut() {
        match key.as_str() {
            "properties" | "patternProperties" | "definitions" | "$defs" | "dependentSchemas" => {
                if let Value::Object(named) = value {
                    named.values_mut().for_each(|s| each_schema(s, visit));
                }
            }
            "items"
            | "additionalProperties"
            | "additionalItems"
            | "not"
            | "contains"
            | "propertyNames"
            | "if"
            | "then"
            | "else"
            | "unevaluatedProperties"
            | "unevaluatedItems" => match value {
                Value::Array(list) => list.iter_mut().for_each(|s| each_schema(s, visit)),
                other => each_schema(other, visit),
            },
            "allOf" | "anyOf" | "oneOf" | "prefixItems" => {
                if let Value::Array(list) = value {
                    list.iter_mut().for_each(|s| each_schema(s, visit));
                }
            }
            _ => {}
        }
    }
}

/// A schema the daemon's JSON Schema checks accept: OpenAPI-only keywords removed, and
/// keywords whose values are not what JSON Schema allows (a real description's mistakes)
/// dropped rather than refusing the tool.
pub fn sanitize(schema: Map<String, Value>) -> Map<String, Value> {
    let mut value = Value::Object(schema);
    each_schema(&mut value, &mut |map| {
        for key in ["nullable", "discriminator", "xml", "externalDocs", "example"] {
            map.remove(key);
        }
        // `$ref`s are inlined by now; `$id`, anchors and recursive references (some of them
        // from other JSON Schema drafts) would only point elsewhere.
        map.retain(|key, _| !key.starts_with('$'));
        for key in ["readOnly", "writeOnly", "deprecated", "uniqueItems"] {
            if map.get(key).is_some_and(|v| !v.is_boolean()) {
                map.remove(key);
            }
        }
        // OpenAPI 3.0's boolean exclusiveMinimum/Maximum are not JSON Schema 2020-12.
        for key in ["exclusiveMinimum", "exclusiveMaximum"] {
            if map.get(key).is_some_and(|v| !v.is_number()) {
                map.remove(key);
            }
        }
        let type_ok = |t: &Value| {
            const TYPES: [&str; 7] = ["string", "number", "integer", "boolean", "object", "array", "null"];
            match t {
                Value::String(name) => TYPES.contains(&name.as_str()),
                Value::Array(names) => names.iter().all(|n| n.as_str().is_some_and(|n| TYPES.contains(&n))),
                _ => false,
            }
        };
        if map.get("type").is_some_and(|t| !type_ok(t)) {
            map.remove("type");
        }
        for key in ["minimum", "maximum", "multipleOf"] {
            if map.get(key).is_some_and(|v| !v.is_number()) {
                map.remove(key);
            }
        }
        for key in ["minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties"] {
            if map.get(key).is_some_and(|v| !v.is_u64()) {
                map.remove(key);
            }
        }
        if map.get("required").is_some_and(|r| !r.as_array().is_some_and(|names| names.iter().all(Value::is_string))) {
            map.remove("required");
        }
        if map.get("enum").is_some_and(|e| !e.is_array()) {
            map.remove("enum");
        }
        if map.get("pattern").is_some_and(|p| !p.as_str().is_some_and(regex_compiles)) {
            map.remove("pattern");
        }
        for key in ["properties", "patternProperties", "definitions", "$defs"] {
            if map.get(key).is_some_and(|p| !p.is_object()) {
                map.remove(key);
            }
        }
        for key in ["items", "additionalProperties", "not"] {
            if map.get(key).is_some_and(|s| !s.is_object() && !s.is_boolean()) {
                map.remove(key);
            }
        }
        for key in ["allOf", "anyOf", "oneOf"] {
            if map
                .get(key)
                .is_some_and(|list| !list.as_array().is_some_and(|l| !l.is_empty() && l.iter().all(Value::is_object)))
            {
                map.remove(key);
            }
        }
    });
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// Whether a `pattern` is a regular expression the daemon's schema checks can compile.
fn regex_compiles(pattern: &str) -> bool {
    crate::toolset::validator(&json!({"type": "string", "pattern": pattern})).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broken_keywords_are_dropped_and_output_schemas_are_lenient() {
        let input = json!({"type": "object", "properties": {
            "a": {"type": {}, "minimum": "1", "nullable": true},
            "b": {"type": "string", "pattern": "(?<=x)y", "exclusiveMinimum": true},
            "required": {"type": "string", "format": "uuid"},
            "c": {"allOf": [], "items": "x"}
        }});
        let Value::Object(input) = input else { unreachable!() };
        let clean = Value::Object(sanitize(input));
        assert_eq!(clean["properties"]["a"], json!({}));
        assert_eq!(clean["properties"]["b"], json!({"type": "string"}));
        assert_eq!(clean["properties"]["required"]["format"], "uuid", "a property named `required` is a property");
        assert_eq!(clean["properties"]["c"], json!({}));
        crate::toolset::validator(&clean).unwrap();
        let output = output_schema(&json!({"properties": {"id": {"type": "string", "format": "uuid"}, "format": {"type": "string"}}, "required": ["id"]})).unwrap();
        assert_eq!(
            Value::Object(output),
            json!({"type": "object", "properties": {"id": {"type": ["string", "number", "null"]}, "format": {"type": ["string", "number", "null"]}}})
        );
    }

    #[test]
    fn output_schemas_accept_what_descriptions_are_known_to_get_wrong() {
        let schema = json!({"type": "object", "required": ["id"], "additionalProperties": false, "properties": {
            "id": {"type": "integer", "minimum": 1},
            "state": {"type": "string", "enum": ["open", "closed"]},
            "owner": {"oneOf": [{"type": "object", "properties": {"login": {"type": "string"}}}, {"type": "object"}]},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 1},
            "hidden": {"type": "boolean"}
        }});
        let output = Value::Object(output_schema(&schema).unwrap());
        let validator = crate::toolset::validator(&output).unwrap();
        for result in [
            json!({"id": 1.5, "state": "archived", "owner": {"login": "x"}, "tags": ["a", "b", null], "extra": true}),
            json!({"id": null, "state": null, "owner": null, "tags": null}),
            json!({}),
        ] {
            assert!(validator.is_valid(&result), "{result} against {output}");
        }
        assert!(!validator.is_valid(&json!({"id": "seven"})), "types are still checked");
        assert!(validator.is_valid(&json!({"state": 3})), "a string may come as a number");
        assert!(validator.is_valid(&json!({"hidden": 1})), "a boolean may come as 1 or 0");
        assert!(!validator.is_valid(&json!({"hidden": "yes"})), "but not as text");
        assert_eq!(output["type"], "object", "the result itself is an object");
    }
}
