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

use crate::api::model::{GenerationEvent, ServerView};
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
    pub view: ServerView,
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
        if view.status.is_final() {
            display.finish(view.status);
            let error = generation_error(&view, generation_id);
            return Ok(GenerationEnd { status: view.status, error, view });
        }
        display.stage(view.status.as_str());
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
        // A status this client does not know (from a newer daemon) is not shown.
        let Ok(data) = serde_json::from_str::<GenerationEvent>(&event.data) else { continue };
        // A stream may report an older generation (the one serving) before ours starts.
        if generation_id.is_some_and(|wanted| wanted != data.generation_id) {
            if event.event == "done" {
                return Ok(None);
            }
            continue;
        }
        if data.status.is_final() {
            return Ok(Some(Update { status: data.status, error: data.error }));
        }
        if event.event == "done" {
            return Ok(None);
        }
        display.stage(data.status.as_str());
    }
}

fn generation_error(view: &ServerView, generation_id: Option<i64>) -> Option<String> {
    generation_by_id(view, generation_id).and_then(|g| g.error.clone())
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
