//! Pulling JSON and JavaScript out of LLM replies.
//!
//! Models are asked for a bare JSON object or one fenced code block, and mostly comply, but
//! they also wrap JSON in a fence, add a sentence before or after, or fence code with a
//! different tag. These functions accept all of that and, when nothing usable is found, say
//! why in words that can go straight back to the model in a repair turn.
//!
//! Preference order for JSON: a ```` ```json ```` block, any other fenced block, the whole
//! reply, then a JSON object embedded in prose. For JavaScript: a ```` ```js ````/
//! ```` ```javascript ```` block, an untagged block, any fenced block, then the whole reply.
//! A fence that is never closed (a reply cut off at `max_tokens`) runs to the end.

use serde_json::Value;

/// At most this many `{` positions are tried when looking for an object inside prose, so a
/// long reply full of braces costs little.
const MAX_EMBEDDED_STARTS: usize = 32;

/// A fenced code block: its info string (e.g. `json`) and its content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fence<'a> {
    info: &'a str,
    body: &'a str,
    closed: bool,
}

impl Fence<'_> {
    /// The language tag: the info string's first word, lower-cased.
    fn language(&self) -> String {
        self.info.split_whitespace().next().unwrap_or("").to_ascii_lowercase()
    }
}

/// The fenced blocks of a Markdown reply (``` or ~~~, three or more, closed by a line of at
/// least as many of the same character).
fn fences(text: &str) -> Vec<Fence<'_>> {
    let mut fences = Vec::new();
    let mut open: Option<(u8, usize, &str, usize)> = None; // (char, count, info, body start)
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let start = offset;
        offset += line.len();
        let trimmed = line.trim();
        match open {
            None => {
                let Some(marker) = trimmed.bytes().next().filter(|c| *c == b'`' || *c == b'~') else { continue };
                let count = trimmed.bytes().take_while(|c| *c == marker).count();
                let info = trimmed[count..].trim();
                // A backtick fence's info string cannot contain backticks (that is inline code).
                if count >= 3 && !(marker == b'`' && info.contains('`')) {
                    open = Some((marker, count, info, offset));
                }
            }
            Some((marker, count, info, body_start)) => {
                let closes = trimmed.len() >= count && trimmed.bytes().all(|c| c == marker);
                if closes {
                    fences.push(Fence { info, body: &text[body_start..start], closed: true });
                    open = None;
                }
            }
        }
    }
    if let Some((_, _, info, body_start)) = open {
        fences.push(Fence { info, body: &text[body_start.min(text.len())..], closed: false });
    }
    fences
}

/// Why a reply holds no usable JSON, in words that can go back to the model.
#[derive(Debug, thiserror::Error)]
pub enum JsonReplyError {
    /// The most likely candidate, at `place`, does not parse.
    #[error("{place} is not valid JSON: {error}{}", cut_off_hint(.error))]
    Invalid { place: JsonPlace, error: serde_json::Error },
    #[error("the reply is empty")]
    Empty,
    #[error("the reply contains no JSON object")]
    NoObject,
}

/// Where in a reply the JSON was looked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonPlace {
    JsonFence,
    OtherFence,
    WholeReply,
    EmbeddedObject,
}

impl std::fmt::Display for JsonPlace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            JsonPlace::JsonFence => "the ```json block",
            JsonPlace::OtherFence => "the fenced block",
            JsonPlace::WholeReply => "the reply",
            JsonPlace::EmbeddedObject => "the JSON object in the reply",
        })
    }
}

/// A reply that stops in the middle of its JSON was most likely cut off at the token limit.
fn cut_off_hint(error: &serde_json::Error) -> &'static str {
    if error.is_eof() { " (it ends too early: was the reply cut off? keep it shorter)" } else { "" }
}

/// The JSON object (or array) in a reply; the error explains what is wrong with the most
/// likely candidate.
pub fn json_value(reply: &str) -> Result<Value, JsonReplyError> {
    let fences = fences(reply);
    let (json_fences, other_fences): (Vec<&Fence<'_>>, Vec<&Fence<'_>>) =
        fences.iter().partition(|f| f.language().starts_with("json"));
    let mut first_error: Option<JsonReplyError> = None;
    let mut note = |place: JsonPlace, error: serde_json::Error| {
        if first_error.is_none() {
            first_error = Some(JsonReplyError::Invalid { place, error });
        }
    };
    let candidates = json_fences
        .iter()
        .map(|f| (f, JsonPlace::JsonFence))
        .chain(other_fences.iter().map(|f| (f, JsonPlace::OtherFence)));
    for (fence, place) in candidates {
        match serde_json::from_str::<Value>(fence.body.trim()) {
            Ok(value) if is_container(&value) => return Ok(value),
            Ok(_) => {}
            Err(error) => note(place, error),
        }
    }
    let bare = reply.trim();
    match serde_json::from_str::<Value>(bare) {
        Ok(value) if is_container(&value) => return Ok(value),
        Ok(_) => {}
        Err(error) if bare.starts_with(['{', '[']) => note(JsonPlace::WholeReply, error),
        Err(_) => {}
    }
    // Prose around one object: parse from each `{` and ignore whatever follows the object.
    let mut embedded_error = None;
    for (position, _) in reply.match_indices('{').take(MAX_EMBEDDED_STARTS) {
        let mut values = serde_json::Deserializer::from_str(&reply[position..]).into_iter::<Value>();
        match values.next() {
            Some(Ok(value)) if value.is_object() => return Ok(value),
            Some(Err(error)) if embedded_error.is_none() => embedded_error = Some(error),
            _ => {}
        }
    }
    if let Some(error) = embedded_error {
        note(JsonPlace::EmbeddedObject, error);
    }
    Err(first_error.unwrap_or(if reply.trim().is_empty() { JsonReplyError::Empty } else { JsonReplyError::NoObject }))
}

fn is_container(value: &Value) -> bool {
    value.is_object() || value.is_array()
}

/// The JavaScript in a reply, `None` when it holds no code at all.
pub fn javascript(reply: &str) -> Option<String> {
    let fences = fences(reply);
    let is_js = |f: &&Fence<'_>| matches!(f.language().as_str(), "js" | "javascript" | "mjs" | "ecmascript" | "node");
    let chosen = fences
        .iter()
        .find(is_js)
        .or_else(|| fences.iter().find(|f| f.info.is_empty()))
        .or_else(|| fences.first())
        .map(|f| f.body)
        .unwrap_or(reply);
    let code = trim_blank_lines(chosen);
    (!code.is_empty()).then(|| code.to_string())
}

/// Drops leading blank lines and trailing whitespace but keeps the first line's indentation,
/// so line numbers in compile errors match what the model sees in its own reply block.
fn trim_blank_lines(text: &str) -> &str {
    let text = text.trim_end();
    let mut start = 0;
    for line in text.split_inclusive('\n') {
        if line.trim().is_empty() {
            start += line.len();
        } else {
            break;
        }
    }
    &text[start.min(text.len())..]
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn json_from_replies() {
        let cases: &[(&str, &str, Value)] = &[
            ("bare object", r#"{"tools": []}"#, json!({"tools": []})),
            ("bare with whitespace", "\n  {\"a\": 1}\n\n", json!({"a": 1})),
            ("bare array", "[1, 2]", json!([1, 2])),
            ("json fence", "Here is the plan:\n```json\n{\"a\": 1}\n```\nDone.", json!({"a": 1})),
            ("JSON fence upper-case", "```JSON\n{\"a\": 1}\n```", json!({"a": 1})),
            ("untagged fence", "```\n{\"a\": 2}\n```", json!({"a": 2})),
            ("tilde fence", "~~~json\n{\"a\": 3}\n~~~", json!({"a": 3})),
            ("json fence preferred", "```js\n{\"a\": 1}\n```\n```json\n{\"b\": 2}\n```", json!({"b": 2})),
            ("broken json fence falls back", "```json\n{oops\n```\n```\n{\"c\": 3}\n```", json!({"c": 3})),
            ("indented fence", "  ```json\n  {\"a\": 1}\n  ```", json!({"a": 1})),
            ("four backticks around three", "````json\n{\"s\": \"```\"}\n````", json!({"s": "```"})),
            ("prose around", "Sure! {\"a\": {\"b\": \"}\"}} Hope this helps {x}.", json!({"a": {"b": "}"}})),
            ("prose with braces first", "Use {placeholders}: {\"a\": 1}", json!({"a": 1})),
            ("unclosed fence", "```json\n{\"a\": 1}\n", json!({"a": 1})),
        ];
        for (name, reply, expected) in cases {
            assert_eq!(json_value(reply).unwrap_or_else(|e| panic!("{name}: {e}")), *expected, "{name}");
        }
    }

    #[test]
    fn json_errors_say_what_is_wrong() {
        let cases: &[(&str, &str, &str)] = &[
            ("empty", "  ", "the reply is empty"),
            ("prose only", "I cannot do that.", "the reply contains no JSON object"),
            ("scalar", "42", "the reply contains no JSON object"),
            (
                "broken fence",
                "```json\n{\"a\": 1,,}\n```",
                "the ```json block is not valid JSON: key must be a string at line 1 column 9",
            ),
            (
                "broken other fence",
                "```js\n{\"a\": 1,,}\n```",
                "the fenced block is not valid JSON: key must be a string at line 1 column 9",
            ),
            ("broken bare", "{\"a\": }", "the reply is not valid JSON: expected value at line 1 column 7"),
            (
                "cut off",
                "```json\n{\"tools\": [{\"name\": \"x\"",
                "the ```json block is not valid JSON: EOF while parsing an object at line 1 column 23 (it ends too \
                 early: was the reply cut off? keep it shorter)",
            ),
            (
                "cut off in prose",
                "Plan: {\"tools\": [",
                "the JSON object in the reply is not valid JSON: EOF while parsing a list at line 1 column 11 (it ends \
                 too early: was the reply cut off? keep it shorter)",
            ),
        ];
        for (name, reply, expected) in cases {
            assert_eq!(json_value(reply).unwrap_err().to_string(), *expected, "{name}");
        }
    }

    #[test]
    fn javascript_from_replies() {
        let cases: &[(&str, &str, Option<&str>)] = &[
            ("bare", "return 1;", Some("return 1;")),
            ("bare with blank lines", "\n\n  const a = 1;\nreturn a;\n\n", Some("  const a = 1;\nreturn a;")),
            ("js fence", "Here:\n```js\nreturn 1;\n```\nThat's it.", Some("return 1;")),
            ("javascript fence", "```javascript\nreturn 2;\n```", Some("return 2;")),
            ("JavaScript fence", "```JavaScript\nreturn 3;\n```", Some("return 3;")),
            ("js preferred over others", "```json\n{}\n```\n```js\nreturn 4;\n```", Some("return 4;")),
            ("first js block wins", "```js\nreturn 5;\n```\nUsage:\n```js\nhandler({})\n```", Some("return 5;")),
            ("untagged", "```\nreturn 6;\n```", Some("return 6;")),
            ("other tag", "```typescript\nreturn 7 as number;\n```", Some("return 7 as number;")),
            ("unclosed", "```js\nreturn 8;", Some("return 8;")),
            ("template literal with backticks", "```js\nreturn `a\n``b`;\n```", Some("return `a\n``b`;")),
            ("empty", "   \n", None),
            ("empty fence", "```js\n```", None),
        ];
        for (name, reply, expected) in cases {
            assert_eq!(javascript(reply).as_deref(), *expected, "{name}");
        }
    }

    #[test]
    fn fence_scanning() {
        let text = "a\n```json title\nx\n```\n~~~\ny\n";
        let found = fences(text);
        assert_eq!(found.len(), 2);
        assert_eq!((found[0].info, found[0].body, found[0].closed), ("json title", "x\n", true));
        assert_eq!(found[0].language(), "json");
        assert_eq!((found[1].body, found[1].closed), ("y\n", false));
        // Inline code is not a fence.
        assert!(fences("use ```x``` here").is_empty());
    }
}
