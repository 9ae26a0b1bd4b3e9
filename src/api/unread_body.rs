//! A request body the handler did not read to its end (a 413 for a body over
//! `[server] max_body_bytes`, a refusal decided from the headers) is drained in the background,
//! within bounds, instead of being dropped with the connection.
//!
//! Dropping it makes hyper close the connection while the client may still be sending; the
//! kernel then answers the unread bytes with a reset, and the client reports "connection reset"
//! instead of the answer that explains the refusal. Draining lets the client finish sending and
//! read that answer. The drain stops after [`DRAIN_BYTES`] or [`DRAIN_TIME`], whichever comes
//! first, so a client cannot use it to keep the daemon reading.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use futures_util::StreamExt;
use http_body::{Frame, SizeHint};

/// Bytes of an unread body drained at most, after the handler has answered.
const DRAIN_BYTES: usize = 64 * 1024 * 1024;
/// How long an unread body is drained at most.
const DRAIN_TIME: Duration = Duration::from_secs(2);

pub async fn drain_unread(request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let body = Body::new(DrainOnDrop { inner: Some(body), finished: false });
    next.run(Request::from_parts(parts, body)).await
}

/// The request body, drained in a task of its own if it is dropped before its end.
struct DrainOnDrop {
    inner: Option<Body>,
    finished: bool,
}

impl HttpBody for DrainOnDrop {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        let Some(inner) = this.inner.as_mut() else { return Poll::Ready(None) };
        let polled = Pin::new(inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) {
            this.finished = true;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(HttpBody::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.as_ref().map(HttpBody::size_hint).unwrap_or_default()
    }
}

impl Drop for DrainOnDrop {
    fn drop(&mut self) {
        let Some(body) = self.inner.take().filter(|body| !self.finished && !body.is_end_stream()) else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        runtime.spawn(async move {
            let mut chunks = body.into_data_stream();
            let mut left = DRAIN_BYTES;
            let drain = async {
                while let Some(Ok(chunk)) = chunks.next().await {
                    left = left.saturating_sub(chunk.len());
                    if left == 0 {
                        break;
                    }
                }
            };
            let _ = tokio::time::timeout(DRAIN_TIME, drain).await;
        });
    }
}
