//! A Server-Sent Events parser for byte chunks as they come off the wire.
//!
//! The subset of the `text/event-stream` format the daemon uses and a few things it might: `event:`
//! and `data:` fields (several `data:` lines join with `\n`), one optional space after the colon,
//! `:` comment lines (keep-alives) ignored, `id:`/`retry:` and unknown fields ignored, a blank line
//! ends an event (one still open when the stream ends is dropped, as the format says). Lines end
//! with `\n` or `\r\n`. Chunks may split lines and UTF-8 sequences anywhere.

/// One dispatched event; `event` is `"message"` when the stream named none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub event: String,
    pub data: String,
}

#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of an unfinished line.
    partial: Vec<u8>,
    event: Option<String>,
    data: Option<String>,
}

impl SseParser {
    /// Feeds one chunk; returns the events it completed.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut events = Vec::new();
        let mut rest = chunk;
        while let Some(newline) = rest.iter().position(|&b| b == b'\n') {
            self.partial.extend_from_slice(&rest[..newline]);
            rest = &rest[newline + 1..];
            let mut line = std::mem::take(&mut self.partial);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            if let Some(event) = self.line(&String::from_utf8_lossy(&line)) {
                events.push(event);
            }
        }
        self.partial.extend_from_slice(rest);
        events
    }

    fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            let event = self.event.take();
            let data = self.data.take()?;
            return Some(SseEvent { event: event.filter(|e| !e.is_empty()).unwrap_or_else(|| "message".into()), data });
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_string()),
            "data" => match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_string()),
            },
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: &str, data: &str) -> SseEvent {
        SseEvent { event: name.into(), data: data.into() }
    }

    fn parse_in_chunks(input: &[u8], size: usize) -> Vec<SseEvent> {
        let mut parser = SseParser::default();
        input.chunks(size).flat_map(|c| parser.push(c)).collect()
    }

    #[test]
    fn parses_named_events_comments_and_multiline_data() {
        let input = ": keep-alive\n\nevent: status\ndata: {\"status\":\"fetching\"}\n\n\
                     event:done\r\ndata: a\r\ndata:b\r\nid: 7\r\nretry: 10\r\n\r\ndata: plain\n\n";
        let expected =
            vec![event("status", "{\"status\":\"fetching\"}"), event("done", "a\nb"), event("message", "plain")];
        for size in [1, 2, 3, 7, input.len()] {
            assert_eq!(parse_in_chunks(input.as_bytes(), size), expected, "chunk size {size}");
        }
    }

    #[test]
    fn events_without_data_or_without_their_blank_line_are_not_dispatched() {
        assert_eq!(parse_in_chunks(b"event: status\n\n", 4), vec![]);
        assert_eq!(parse_in_chunks(b"event: status\ndata: x", 4), vec![]);
        assert_eq!(parse_in_chunks(b"data\n\n", 4), vec![event("message", "")]);
    }

    #[test]
    fn utf8_split_across_chunks_survives() {
        let input = "event: status\ndata: planning ⠋ é\n\n".as_bytes();
        assert_eq!(parse_in_chunks(input, 1), vec![event("status", "planning ⠋ é")]);
    }
}
