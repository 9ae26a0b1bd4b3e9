//! `--wait`: follows a generation through its stages until it is ready, planned or failed.
//!
//! Status comes from the daemon's `GET /admin/servers/{id}/events` stream; a daemon without that
//! route (404), a stream that is not SSE, or one that breaks off before the end falls back to
//! polling `GET /admin/servers/{id}` every 250 ms, so older daemons work too. On a terminal the
//! progress is an `indicatif` spinner line on stderr, with one line per finished stage; elsewhere
//! it is one plain `stage: <status>` line per change.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::Value;

use crate::client::output::{generation_by_id, seconds};
use crate::client::{AdminClient, ClientError};
use crate::states::Status;

const POLL_INTERVAL: Duration = Duration::from_millis(250);
const SPINNER_TICK: Duration = Duration::from_millis(100);
const SPINNER_FRAMES: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

/// How a generation ended, with the server view fetched after the end.
#[derive(Debug)]
pub struct GenerationEnd {
    /// `ready`, `planned` or `failed`.
    pub status: Status,
    pub error: Option<String>,
    pub view: Value,
}

/// A final status in a daemon's reply; `None` while the generation runs (or for a status this
/// client does not know, which a newer daemon may send while it runs).
fn final_status(status: &str) -> Option<Status> {
    status.parse().ok().filter(|status: &Status| status.is_final())
}

/// Follows generation `generation_id` of server `id` (the newest one when `None`) to its end,
/// showing progress on stderr.
pub async fn follow(client: &AdminClient, id: &str, generation_id: Option<i64>) -> Result<GenerationEnd, ClientError> {
    let mut display = Display::new(std::io::stderr().is_terminal());
    if let Some(end) = follow_events(client, id, generation_id, &mut display).await? {
        let view = client.server(id).await?;
        let error = end.error.or_else(|| generation_error(&view, generation_id));
        display.finish(end.status);
        return Ok(GenerationEnd { status: end.status, error, view });
    }
    let mut first = true;
    loop {
        if !first {
            tokio::time::sleep(POLL_INTERVAL).await;
        }
        first = false;
        let view = client.server(id).await?;
        let status = view["status"].as_str().unwrap_or("unknown");
        if let Some(status) = final_status(status) {
            display.finish(status);
            let error = generation_error(&view, generation_id);
            return Ok(GenerationEnd { status, error, view });
        }
        display.stage(status);
    }
}

/// One `status` or `done` event.
struct Update {
    status: Status,
    error: Option<String>,
}

/// Reads the events stream until the generation ends. `Ok(None)` means "poll instead": no
/// stream, or it ended or broke before a final status.
async fn follow_events(
    client: &AdminClient,
    id: &str,
    generation_id: Option<i64>,
    display: &mut Display,
) -> Result<Option<Update>, ClientError> {
    let mut events = match client.events(id).await {
        Ok(Some(events)) => events,
        Ok(None) | Err(ClientError::Unreachable { .. }) => return Ok(None),
        Err(error) => return Err(error),
    };
    loop {
        let event = match events.next().await {
            Ok(Some(event)) => event,
            Ok(None) | Err(_) => return Ok(None),
        };
        if event.event != "status" && event.event != "done" {
            continue;
        }
        let Ok(data) = serde_json::from_str::<Value>(&event.data) else { continue };
        let Some(status) = data["status"].as_str() else { continue };
        // A stream may report an older generation (the one serving) before ours starts.
        let ours = match (generation_id, data["generation_id"].as_i64()) {
            (Some(wanted), Some(got)) => wanted == got,
            _ => true,
        };
        if !ours {
            if event.event == "done" {
                return Ok(None);
            }
            continue;
        }
        if let Some(status) = final_status(status) {
            let error = data["error"].as_str().map(str::to_string);
            return Ok(Some(Update { status, error }));
        }
        if event.event == "done" {
            return Ok(None);
        }
        display.stage(status);
    }
}

fn generation_error(view: &Value, generation_id: Option<i64>) -> Option<String> {
    generation_by_id(view, generation_id).and_then(|g| g["error"].as_str()).map(str::to_string)
}

/// The progress display on stderr: an `indicatif` spinner on a terminal, plain lines elsewhere.
struct Display {
    started: Instant,
    /// The stage in progress and when it began.
    current: Option<(String, Instant)>,
    spinner: Option<ProgressBar>,
}

impl Display {
    fn new(tty: bool) -> Display {
        let spinner = tty.then(|| {
            let spinner = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
                .unwrap_or_else(|_| ProgressStyle::default_spinner())
                .tick_strings(&SPINNER_FRAMES);
            spinner.set_style(style);
            spinner.enable_steady_tick(SPINNER_TICK);
            spinner
        });
        Display { started: Instant::now(), current: None, spinner }
    }

    /// A stage began (repeats of the current one are ignored).
    fn stage(&mut self, status: &str) {
        if self.current.as_ref().is_some_and(|(s, _)| s == status) {
            return;
        }
        let now = Instant::now();
        let previous = self.current.replace((status.to_string(), now));
        match &self.spinner {
            Some(spinner) => {
                if let Some((stage, since)) = previous {
                    spinner.println(format!("✓ {stage:<10} {}", seconds(now - since)));
                }
                spinner.set_message(status.to_string());
                spinner.reset_elapsed();
            }
            None => eprintln!("stage: {status}"),
        }
    }

    /// The generation ended with `status`: close the last stage and stop the spinner.
    fn finish(&mut self, status: Status) {
        let previous = self.current.take();
        let Some(spinner) = self.spinner.take() else {
            eprintln!("stage: {status}");
            return;
        };
        let mark = if status == Status::Failed { '✗' } else { '✓' };
        if let Some((stage, since)) = previous {
            spinner.println(format!("{mark} {stage:<10} {}", seconds(since.elapsed())));
        }
        spinner.println(format!("{mark} {status} after {}", seconds(self.started.elapsed())));
        spinner.finish_and_clear();
    }
}

impl Drop for Display {
    /// Interrupted (Ctrl-C, an error): leave the terminal with a clean line.
    fn drop(&mut self) {
        if let Some(spinner) = self.spinner.take() {
            spinner.finish_and_clear();
        }
    }
}
