//! Span fields for the JSON log format, formatted without building a map of JSON values.
//!
//! The JSON formatter stores each span's fields as a JSON object text when the span is created and
//! parses it again only when an event inside the span is logged. `tracing-subscriber`'s own
//! `JsonFields` collects the fields into a `BTreeMap` of `serde_json::Value`s and serialises that
//! through a UTF-8-checking adaptor; with two spans per tool call (the HTTP request and the call)
//! that was the largest logging cost of a call even when nothing is logged. [`SpanJsonFields`]
//! writes the same object — keys sorted, a repeated key keeping its last value, `Debug` and
//! `Display` values as strings, `log.*` metadata skipped — straight into the span's buffer.

use std::fmt::{self, Write};

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::{FormatFields, FormattedFields};

/// Formats span fields as `JsonFields` does (see the module docs).
#[derive(Debug, Default, Clone, Copy)]
pub struct SpanJsonFields;

impl<'writer> FormatFields<'writer> for SpanJsonFields {
    fn format_fields<R: RecordFields>(&self, mut writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = Visitor::default();
        fields.record(&mut visitor);
        visitor.finish(&mut writer)
    }

    /// Fields recorded after creation (`Span::record`, rare): merged exactly as `JsonFields` does.
    fn add_fields(
        &self,
        current: &'writer mut FormattedFields<Self>,
        fields: &tracing::span::Record<'_>,
    ) -> fmt::Result {
        let mut json = FormattedFields::<JsonFields>::new(std::mem::take(&mut current.fields));
        let result = JsonFields::new().add_fields(&mut json, fields);
        current.fields = json.fields;
        result
    }
}

/// Field values already encoded as JSON in `values`, by key; sorted and deduplicated at the end.
struct Visitor {
    entries: Vec<(&'static str, std::ops::Range<usize>)>,
    values: String,
}

impl Default for Visitor {
    fn default() -> Self {
        Visitor { entries: Vec::with_capacity(8), values: String::with_capacity(128) }
    }
}

impl Visitor {
    fn push(&mut self, name: &'static str, encode: impl FnOnce(&mut String)) {
        let start = self.values.len();
        encode(&mut self.values);
        self.entries.push((name, start..self.values.len()));
    }

    fn finish(mut self, writer: &mut Writer<'_>) -> fmt::Result {
        // Stable, so among equal keys the last recorded comes last and wins, as in a map.
        self.entries.sort_by_key(|(name, _)| *name);
        // Composed here and written once: the span's buffer starts empty and would grow piecemeal.
        let names: usize = self.entries.iter().map(|(name, _)| name.len() + 4).sum();
        let mut out = String::with_capacity(self.values.len() + names + 2);
        out.push('{');
        for (i, (name, range)) in self.entries.iter().enumerate() {
            if self.entries.get(i + 1).is_some_and(|(next, _)| next == name) {
                continue;
            }
            if out.len() > 1 {
                out.push(',');
            }
            write_json_str(&mut out, name)?;
            out.push(':');
            out.push_str(&self.values[range.clone()]);
        }
        out.push('}');
        writer.write_str(&out)
    }
}

impl Visit for Visitor {
    fn record_f64(&mut self, field: &Field, value: f64) {
        // Non-finite numbers become `null`, as `serde_json::Value::from(f64)` makes them.
        self.push(field.name(), |out| match serde_json::Number::from_f64(value) {
            Some(number) => {
                let _ = write!(out, "{number}");
            }
            None => out.push_str("null"),
        });
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.push(field.name(), |out| {
            let _ = write!(out, "{value}");
        });
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.push(field.name(), |out| {
            let _ = write!(out, "{value}");
        });
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.push(field.name(), |out| out.push_str(if value { "true" } else { "false" }));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.push(field.name(), |out| {
            let _ = write_json_str(out, value);
        });
    }

    fn record_bytes(&mut self, field: &Field, value: &[u8]) {
        self.push(field.name(), |out| {
            out.push('[');
            for (i, byte) in value.iter().enumerate() {
                let _ = write!(out, "{}{byte}", if i == 0 { "" } else { "," });
            }
            out.push(']');
        });
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let name = field.name();
        if name.starts_with("log.") {
            return;
        }
        let name = name.strip_prefix("r#").unwrap_or(name);
        self.push(name, |out| {
            out.push('"');
            let _ = write!(JsonEscape(&mut *out), "{value:?}");
            out.push('"');
        });
    }
}

fn write_json_str(out: &mut impl Write, value: &str) -> fmt::Result {
    out.write_char('"')?;
    JsonEscape(&mut *out).write_str(value)?;
    out.write_char('"')
}

/// Escapes what JSON strings cannot hold as is, the way `serde_json` does.
struct JsonEscape<W>(W);

impl<W: Write> Write for JsonEscape<W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut plain = 0;
        for (i, byte) in s.bytes().enumerate() {
            let escaped = match byte {
                b'"' => "\\\"",
                b'\\' => "\\\\",
                b'\n' => "\\n",
                b'\r' => "\\r",
                b'\t' => "\\t",
                0x08 => "\\b",
                0x0c => "\\f",
                0x00..=0x1f => "",
                _ => continue,
            };
            self.0.write_str(&s[plain..i])?;
            if escaped.is_empty() {
                write!(self.0, "\\u{byte:04x}")?;
            } else {
                self.0.write_str(escaped)?;
            }
            plain = i + 1;
        }
        self.0.write_str(&s[plain..])
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;

    use super::*;

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Buffer {
        type Writer = Buffer;
        fn make_writer(&'a self) -> Buffer {
            self.clone()
        }
    }

    /// Logs the same spans and events with both field formatters, as `telemetry::init` sets up JSON.
    fn log_with<N>(fields: N) -> String
    where
        N: for<'w> FormatFields<'w> + Send + Sync + 'static,
    {
        let buffer = Buffer::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(buffer.clone())
            .with_max_level(tracing::Level::TRACE)
            .without_time()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .fmt_fields(fields)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let id = "0190c3a8-7b7c-7d3e-9f00-123456789abc".to_string();
            let http =
                tracing::info_span!("http", method = %"POST", route = "/servers/{id}/mcp", server_id = "weather");
            let _http = http.enter();
            let call = tracing::info_span!(
                "call",
                server_id = %"weather",
                tool = %"forecast",
                execution_id = %id,
                count = 3u64,
                delta = -7i64,
                ratio = 0.25f64,
                nan = f64::NAN,
                ok = true,
                r#type = ?"debug \"quoted\"",
                text = "tab\tnew\nline \u{1} \u{7f} é 😀 \\ \"",
                empty = "",
                bytes = &b"ab"[..],
                pending = tracing::field::Empty,
            );
            let _call = call.enter();
            tracing::info!(extra = 1, "inside");
            call.record("pending", "now set");
            call.record("count", 4u64);
            tracing::warn!("after record");
            let dup = tracing::info_span!("dup", a = 1, b = 2, a = "second");
            dup.in_scope(|| tracing::info!("duplicates"));
            let bare = tracing::info_span!("bare");
            bare.in_scope(|| tracing::info!("no fields"));
        });
        String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn logs_are_the_same_as_with_json_fields() {
        let expected = log_with(JsonFields::new());
        let actual = log_with(SpanJsonFields);
        assert_eq!(expected.lines().count(), 4, "{expected}");
        assert_eq!(actual, expected);
    }
}
