//! External `$ref`s: a description split over several files (`$ref: "schemas/pet.yaml#/Pet"`).
//!
//! Every document a reference names is fetched (only from the description's own origin, its
//! scheme, host and port, and from hosts the caller allows besides: the operator's domains), its
//! own references followed in turn, and all of
//! them are placed under one key of the root document, with every reference rewritten to a local
//! pointer. After that the description is one document and [`super::Spec`] resolves it as usual.
//! A document that cannot be fetched leaves its references open (`{}`), with a warning.

use std::collections::HashMap;
use std::future::Future;

use serde_json::{Map, Value};
use url::Url;

/// Where fetched documents are placed in the root document.
pub const EXTERNAL_KEY: &str = "x-mcpbootd-external";
/// Documents fetched for one description at most.
const MAX_DOCUMENTS: usize = 64;

/// Fetches the documents `root` (read from `base`) refers to and rewrites every reference to a
/// local one. `fetch` returns a document's text, or why it could not (quoted in a warning).
/// Documents of `base`'s origin may be fetched, and those `also_allowed` accepts. Returns
/// warnings for documents that were not used.
pub async fn inline<F, Fut, E>(
    root: &mut Value,
    base: &Url,
    also_allowed: impl Fn(&Url) -> bool,
    fetch: F,
) -> Vec<String>
where
    F: Fn(Url) -> Fut,
    Fut: Future<Output = Result<String, E>>,
    E: std::fmt::Display,
{
    let mut found = Found::default();
    rewrite(root, base, None, &mut found);
    if found.urls.is_empty() {
        return Vec::new();
    }
    let mut warnings = Vec::new();
    let mut documents: Vec<Value> = Vec::new();
    while documents.len() < found.urls.len() {
        let index = documents.len();
        let url = found.urls[index].clone();
        let document = if index >= MAX_DOCUMENTS {
            warnings
                .push(format!("{url}: more than {MAX_DOCUMENTS} referenced documents; its references are left open"));
            Value::Object(Map::new())
        } else if !may_fetch(&url, base, &also_allowed) {
            warnings.push(format!(
                "{url}: referenced by the description but neither of its origin ({}) nor on allow_domains; its \
                 references are left open (list the host in allow_domains to use it)",
                base.origin().ascii_serialization()
            ));
            Value::Object(Map::new())
        } else {
            let mut unusable = |error: &dyn std::fmt::Display| {
                warnings.push(format!(
                    "{url}: referenced by the description but not usable ({error}); its references are left open"
                ));
                Value::Object(Map::new())
            };
            match fetch(url.clone()).await {
                Ok(text) => match super::document::read(text).await {
                    Ok(mut document) => {
                        rewrite(&mut document, &url, Some(index), &mut found);
                        document
                    }
                    Err(error) => unusable(&error),
                },
                Err(error) => unusable(&error),
            }
        };
        documents.push(document);
    }
    if let Value::Object(map) = root {
        map.insert(EXTERNAL_KEY.into(), Value::Array(documents));
    }
    warnings
}

/// Whether a referenced document may be fetched: one of the description's own origin, or one
/// `also_allowed` accepts. The origin is compared whole: another port of the description's host
/// is another service (an admin interface, a database), which a description must not reach.
fn may_fetch(url: &Url, description: &Url, also_allowed: impl Fn(&Url) -> bool) -> bool {
    url.origin() == description.origin() || also_allowed(url)
}

/// The documents referenced so far, by URL (without fragment), in the order they were met.
#[derive(Default)]
struct Found {
    urls: Vec<Url>,
    index: HashMap<Url, usize>,
}

/// Rewrites every `$ref` in `value`, a part of the document at `base` (stored at `slot`, or the
/// root when `None`), to a pointer into the root document.
fn rewrite(value: &mut Value, base: &Url, slot: Option<usize>, found: &mut Found) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(reference)) = map.get_mut("$ref") {
                let (document, pointer) = reference.split_once('#').unwrap_or((reference.as_str(), ""));
                let target = if document.is_empty() {
                    slot
                } else {
                    match base.join(document) {
                        Ok(mut url) => {
                            url.set_fragment(None);
                            let next = found.urls.len();
                            let index = *found.index.entry(url.clone()).or_insert(next);
                            if index == next {
                                found.urls.push(url);
                            }
                            Some(index)
                        }
                        // Not a URL: left as it is, so it resolves to nothing (`{}`).
                        Err(_) => return,
                    }
                };
                if let Some(index) = target {
                    *reference = format!("#/{EXTERNAL_KEY}/{index}{pointer}");
                }
            }
            for (key, child) in map.iter_mut() {
                // Examples are data: a `$ref` key inside one is not a reference.
                if !matches!(key.as_str(), "example" | "examples" | "default" | "enum" | "const") {
                    rewrite(child, base, slot, found);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| rewrite(item, base, slot, found)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::generate::openapi::Spec;

    #[tokio::test]
    async fn referenced_files_are_fetched_and_resolved_with_cycles_and_refusals() {
        let files: HashMap<&str, &str> = [
            ("https://api.test/schemas/pet.yaml", "Pet:\n  type: object\n  properties:\n    owner: {$ref: 'owner.json#/Owner'}\n    tag: {$ref: '#/Tag'}\nTag: {type: string}\n"),
            ("https://api.test/schemas/owner.json", r#"{"Owner": {"type": "object", "properties": {"pets": {"type": "array", "items": {"$ref": "pet.yaml#/Pet"}}}}}"#),
        ]
        .into();
        let mut root = json!({
            "openapi": "3.0.0",
            "paths": {"/pets": {"get": {
                "parameters": [{"$ref": "https://elsewhere.test/params.yaml#/Limit"}],
                "responses": {"200": {"description": "ok", "content": {"application/json": {"schema": {"$ref": "schemas/pet.yaml#/Pet"}}}}}
            }}}
        });
        let base = Url::parse("https://api.test/openapi.yaml").unwrap();
        let warnings = inline(
            &mut root,
            &base,
            |_| false,
            |url: Url| {
                let text = files.get(url.as_str()).map(|t| t.to_string()).ok_or_else(|| "404".to_string());
                async move { text }
            },
        )
        .await;
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("elsewhere.test") && warnings[0].contains("allow_domains"), "{warnings:?}");
        let spec = Spec::from_value(root).unwrap();
        let operation = &spec.operations()[0];
        let pet = operation.response.as_ref().unwrap();
        assert_eq!(pet["properties"]["tag"], json!({"type": "string"}), "a local ref inside a fetched file");
        assert_eq!(
            pet["properties"]["owner"]["properties"]["pets"]["items"],
            json!({}),
            "the cycle across files is cut"
        );
        assert!(operation.parameters.is_empty(), "the refused parameter is left out");
    }

    #[test]
    fn only_the_description_origin_or_an_allowed_host_may_be_fetched() {
        let description = Url::parse("https://api.test/v1/openapi.yaml").unwrap();
        let operator = |url: &Url| url.host_str() == Some("schemas.test");
        let cases = [
            ("https://api.test/v1/schemas/pet.yaml", true),
            ("https://api.test:443/other/pet.yaml", true),
            ("https://schemas.test:8443/pet.yaml", true),
            // Another port or scheme of the description's host is another service.
            ("https://api.test:8443/pet.yaml", false),
            ("http://api.test/pet.yaml", false),
            ("http://api.test:6379/", false),
            ("https://elsewhere.test/pet.yaml", false),
            ("file:///etc/passwd", false),
        ];
        for (url, expected) in cases {
            assert_eq!(may_fetch(&Url::parse(url).unwrap(), &description, operator), expected, "{url}");
        }
    }
}
