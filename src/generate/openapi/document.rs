//! Reading a document (an API description, or a file one refers to) from JSON or YAML text into
//! JSON, with its cost bounded whatever the text holds.
//!
//! * **Size**: at most [`MAX_SPEC_BYTES`].
//! * **Nesting**: at most [`MAX_NESTING`] levels, checked by a linear scan before any parser
//!   runs ([`shape`]): libyaml's time grows with the square of the depth of flow collections.
//! * **Values**: at most one per [`BYTES_PER_VALUE`] bytes of text, beyond the first
//!   [`FREE_VALUES`] (real descriptions have 10 bytes or more per value). Counted by the same
//!   scan, since libyaml keeps an event of well over a hundred bytes per value before the first
//!   value is built, and again while values are built, with YAML aliases expanded: aliases let a
//!   few kilobytes expand into gigabytes (`[*a, *a, …]`, each `*a` a copy of a long list).
//! * **Time**: [`read`] parses on a blocking thread, never on the async threads, for at most
//!   [`CPU_BUDGET`] of that thread's CPU time, and stops when its future is dropped (the
//!   request or the generation job is gone). Only the building of values can be stopped: the
//!   YAML parser's first pass runs to its end, which the checks above keep short.
//!
//! YAML is read leniently: integer keys (`200:` response codes) become strings, integers beyond
//! 64 bits the nearest float, and tags keep their value; a plain `serde_json::Value` refuses all
//! three.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::de::{self, DeserializeSeed, Visitor};
use serde_json::{Map, Value};

use crate::serve::isolate::thread_cpu_time;

mod shape;

/// Largest description accepted (GitHub's is about 10 MB).
pub const MAX_SPEC_BYTES: usize = 32 * 1024 * 1024;
/// How deeply a document may nest: twice what the deepest of 47 real descriptions needs
/// (PagerDuty's, 30 levels), and below the parsers' own recursion limit of 128.
pub const MAX_NESTING: usize = 64;
/// A document may hold one value per this many bytes of its text (beyond [`FREE_VALUES`]).
pub const BYTES_PER_VALUE: usize = 4;
/// Values any document may hold, whatever its size.
pub const FREE_VALUES: usize = 100_000;
/// CPU time one document's parsing may take. A description at the size limit takes a few
/// seconds; only a document made to be slow comes near this.
pub const CPU_BUDGET: Duration = Duration::from_secs(20);
/// How many values are built between two looks at the clock and the cancellation flag.
const CHECK_EVERY: usize = 4096;

/// Parses `text` on a blocking thread; dropping the returned future stops the parse.
pub async fn read(text: String) -> Result<Value, DocumentError> {
    let cancelled = Arc::new(AtomicBool::new(false));
    let _cancel_when_dropped = CancelOnDrop(cancelled.clone());
    tokio::task::spawn_blocking(move || parse_until(&text, &cancelled)).await.map_err(DocumentError::Unread)?
}

/// Parses `text` on this thread: for callers already on a blocking thread, and tests.
pub fn parse(text: &str) -> Result<Value, DocumentError> {
    parse_until(text, &AtomicBool::new(false))
}

/// Why a document was not read. The messages name the limit that was reached and how a real
/// description stays within it.
#[derive(Debug, thiserror::Error)]
pub enum DocumentError {
    /// The blocking thread that parsed it panicked or was cancelled.
    #[error("the API description could not be read: {0}")]
    Unread(tokio::task::JoinError),
    #[error("the API description is {bytes} bytes; at most {MAX_SPEC_BYTES} are read")]
    TooLarge { bytes: usize },
    #[error(
        "the API description nests more than {MAX_NESTING} levels deep (line {}, column {}); real descriptions nest \
         less than half that deep: move deeply nested schemas to components and refer to them with $ref",
        .0.line,
        .0.column
    )]
    TooDeep(shape::TooDeep),
    #[error(
        "the API description holds more than {max_values} values, which is more than are read: one per \
         {BYTES_PER_VALUE} bytes of its text plus {FREE_VALUES}, counting every copy a YAML alias (`*name`) makes. \
         Real descriptions have 10 bytes or more per value; write repeated parts once and refer to them with $ref"
    )]
    TooManyValues { max_values: usize },
    #[error("reading the API description took more than {} s of CPU time; it is not read", CPU_BUDGET.as_secs())]
    TooSlow,
    #[error("reading the API description was stopped: nobody waits for it any more")]
    Cancelled,
    #[error("the API description is not valid JSON: {0}")]
    InvalidJson(serde_json::Error),
    #[error("the API description is not valid JSON or YAML: {0}")]
    InvalidYaml(yaml_serde::Error),
}

/// Sets the flag when dropped, so the parse behind an abandoned future stops.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn parse_until(text: &str, cancelled: &AtomicBool) -> Result<Value, DocumentError> {
    if text.len() > MAX_SPEC_BYTES {
        return Err(DocumentError::TooLarge { bytes: text.len() });
    }
    let max_values = text.len() / BYTES_PER_VALUE + FREE_VALUES;
    let shape = shape::measure(text, MAX_NESTING).map_err(DocumentError::TooDeep)?;
    if shape.values > max_values {
        return Err(Stop::TooManyValues.error(max_values));
    }
    let budget = Budget {
        values_left: Cell::new(max_values),
        cpu_deadline: thread_cpu_time() + CPU_BUDGET,
        cancelled,
        until_check: Cell::new(CHECK_EVERY),
        stopped: Cell::new(None),
    };
    let reader = Reader { budget: &budget };
    let trimmed = text.trim_start();
    let parsed = if trimmed.starts_with('{') {
        let mut json = serde_json::Deserializer::from_str(trimmed);
        reader.deserialize(&mut json).and_then(|value| json.end().map(|()| value)).map_err(DocumentError::InvalidJson)
    } else {
        reader.deserialize(yaml_serde::Deserializer::from_str(text)).map_err(DocumentError::InvalidYaml)
    };
    match budget.stopped.get() {
        Some(stop) => Err(stop.error(max_values)),
        None => parsed,
    }
}

/// Why the building of values stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    TooManyValues,
    TooSlow,
    Cancelled,
}

impl Stop {
    fn error(self, max_values: usize) -> DocumentError {
        match self {
            Stop::TooManyValues => DocumentError::TooManyValues { max_values },
            Stop::TooSlow => DocumentError::TooSlow,
            Stop::Cancelled => DocumentError::Cancelled,
        }
    }
}

/// What is left for one parse to spend.
struct Budget<'a> {
    values_left: Cell<usize>,
    cpu_deadline: Duration,
    cancelled: &'a AtomicBool,
    until_check: Cell<usize>,
    stopped: Cell<Option<Stop>>,
}

impl Budget<'_> {
    /// Pays for one value; every [`CHECK_EVERY`] values, also looks at the clock and the flag.
    fn spend<E: de::Error>(&self) -> Result<(), E> {
        let stop = if self.values_left.get() == 0 {
            Some(Stop::TooManyValues)
        } else {
            self.values_left.set(self.values_left.get() - 1);
            let until_check = self.until_check.get() - 1;
            self.until_check.set(if until_check == 0 { CHECK_EVERY } else { until_check });
            if until_check > 0 {
                None
            } else if self.cancelled.load(Ordering::Relaxed) {
                Some(Stop::Cancelled)
            } else if thread_cpu_time() > self.cpu_deadline {
                Some(Stop::TooSlow)
            } else {
                None
            }
        };
        match stop {
            Some(stop) => {
                self.stopped.set(Some(stop));
                // The parser wraps this in its own message; `parse_until` reports `stopped`.
                Err(E::custom("stopped"))
            }
            None => Ok(()),
        }
    }
}

/// Builds a JSON value from any JSON or YAML value, leniently, paying for each one.
#[derive(Clone, Copy)]
struct Reader<'a> {
    budget: &'a Budget<'a>,
}

impl<'de> DeserializeSeed<'de> for Reader<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Reader<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON or YAML value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.budget.spend()?;
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.budget.spend()?;
        Ok(Value::from(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.budget.spend()?;
        Ok(Value::from(v))
    }
    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Value, E> {
        self.budget.spend()?;
        Ok(i64::try_from(v).map(Value::from).unwrap_or_else(|_| float(v as f64)))
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Value, E> {
        self.budget.spend()?;
        Ok(u64::try_from(v).map(Value::from).unwrap_or_else(|_| float(v as f64)))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.budget.spend()?;
        Ok(float(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.budget.spend()?;
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.budget.spend()?;
        Ok(Value::String(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.budget.spend()?;
        Ok(Value::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.budget.spend()?;
        Ok(Value::Null)
    }
    fn visit_some<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.budget.spend()?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.budget.spend()?;
        let mut object = Map::new();
        while let Some((key, value)) = map.next_entry_seed(self, self)? {
            let key = match key {
                Value::String(text) => text,
                other => other.to_string(),
            };
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<Value, A::Error> {
        use serde::de::VariantAccess;
        let (_tag, variant): (String, _) = data.variant()?;
        variant.newtype_variant_seed(self)
    }
}

fn float(v: f64) -> Value {
    serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn json_and_yaml_read_alike_and_yaml_leniently() {
        let yaml = "a: [1, {b: true}]\n200: {description: ok}\nhuge: 123456789012345678901234567890\ntagged: !x 5\n";
        let value = parse(yaml).unwrap();
        assert_eq!(value["a"], json!([1, {"b": true}]));
        assert_eq!(value["200"]["description"], "ok", "an integer key becomes a string");
        assert!(value["huge"].as_f64().unwrap() > 1e29);
        assert_eq!(value["tagged"], 5);
        assert_eq!(parse(r#"  {"a": [1, {"b": true}]}"#).unwrap(), json!({"a": [1, {"b": true}]}));
        assert!(matches!(parse(r#"{"a": 1} x"#), Err(DocumentError::InvalidJson(_))));
        assert!(matches!(parse("a: [unclosed"), Err(DocumentError::InvalidYaml(_))));
    }

    #[test]
    fn deep_nesting_is_refused_before_parsing_with_the_limit_and_place() {
        let deep = format!("openapi: 3.0.0\npaths: {}{}", "[".repeat(200_000), "]".repeat(200_000));
        let started = std::time::Instant::now();
        let error = parse(&deep).unwrap_err().to_string();
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
        assert!(error.contains("more than 64 levels deep (line 2, column 71)"), "{error}");
        let json = format!("{}{}", "{\"a\": ".repeat(100), "}".repeat(100));
        assert!(parse(&json).unwrap_err().to_string().contains("more than 64 levels"));
        let nested_64 = format!("{}1{}", "[".repeat(64), "]".repeat(64));
        assert!(parse(&nested_64).is_ok());
    }

    #[test]
    fn documents_of_more_values_than_their_size_allows_are_refused_aliases_expanded() {
        let items = vec!["1"; 3000].join(", ");
        let copies = vec!["*a"; 3000].join(", ");
        let bomb = format!("openapi: 3.0.0\nx: &a [{items}]\ny: [{copies}]\n");
        let started = std::time::Instant::now();
        let error = parse(&bomb).unwrap_err().to_string();
        let limit = format!("more than {} values", bomb.len() / BYTES_PER_VALUE + FREE_VALUES);
        assert!(error.contains(&limit) && error.contains("YAML alias"), "{error}");
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
        let few = format!("openapi: 3.0.0\nx: &a [{items}]\ny: [*a, *a]\n");
        assert_eq!(parse(&few).unwrap()["y"][1].as_array().unwrap().len(), 3000);
        // The smallest values, without aliases: refused by the scan, before libyaml keeps an
        // event for each.
        let dense = format!("[{}]", vec!["1"; 200_000].join(","));
        let limit = format!("more than {} values", dense.len() / BYTES_PER_VALUE + FREE_VALUES);
        assert!(parse(&dense).unwrap_err().to_string().contains(&limit));
    }

    #[test]
    fn real_descriptions_read_and_their_shape_is_counted_exactly() {
        fn depth(value: &Value) -> usize {
            match value {
                Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
                Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
                _ => 0,
            }
        }
        let samples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/openapi-samples");
        let mut read = 0;
        for entry in std::fs::read_dir(samples).unwrap() {
            let path = entry.unwrap().path();
            if !path.extension().is_some_and(|e| e == "json" || e == "yaml") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let value = parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let shape = shape::measure(&text, MAX_NESTING).unwrap();
            assert_eq!(shape.depth, depth(&value), "{}", path.display());
            assert!(shape.values * 8 < text.len(), "{}: {shape:?}", path.display());
            read += 1;
        }
        assert!(read >= 6, "{read} samples");
    }

    #[test]
    fn a_parse_nobody_waits_for_stops() {
        let long = format!("[{}]", vec!["1"; 100_000].join(","));
        let cancelled = AtomicBool::new(true);
        assert!(matches!(parse_until(&long, &cancelled), Err(DocumentError::Cancelled)));
        assert!(parse_until("[1, 2]", &cancelled).is_ok(), "a short parse ends before its first check");
    }

    #[test]
    fn each_refusal_reads_as_before() {
        let too_deep = DocumentError::TooDeep(shape::TooDeep { line: 2, column: 71 });
        assert_eq!(
            too_deep.to_string(),
            "the API description nests more than 64 levels deep (line 2, column 71); real descriptions nest less \
             than half that deep: move deeply nested schemas to components and refer to them with $ref"
        );
        assert_eq!(
            DocumentError::TooLarge { bytes: 40_000_000 }.to_string(),
            "the API description is 40000000 bytes; at most 33554432 are read"
        );
        assert_eq!(
            DocumentError::TooManyValues { max_values: 100_250 }.to_string(),
            "the API description holds more than 100250 values, which is more than are read: one per 4 bytes of its \
             text plus 100000, counting every copy a YAML alias (`*name`) makes. Real descriptions have 10 bytes or \
             more per value; write repeated parts once and refer to them with $ref"
        );
        assert_eq!(
            DocumentError::TooSlow.to_string(),
            "reading the API description took more than 20 s of CPU time; it is not read"
        );
        assert_eq!(
            DocumentError::Cancelled.to_string(),
            "reading the API description was stopped: nobody waits for it any more"
        );
        let json = parse(r#"{"a": 1} x"#).unwrap_err().to_string();
        assert_eq!(json, "the API description is not valid JSON: trailing characters at line 1 column 10");
        let yaml = parse("a: [unclosed").unwrap_err().to_string();
        assert!(yaml.starts_with("the API description is not valid JSON or YAML: "), "{yaml}");
    }
}
