//! A predict body, read and parsed within bounds: its declared size checked before a byte is
//! read (413), room reserved in a budget shared by every request before it is buffered (so N
//! clients sending at once cannot hold more than the budget) — at most `UPFRONT_BYTES` before
//! the body starts to arrive and the rest as it arrives, so clients that declare large bodies
//! and send nothing cannot hold the budget from a small request — a deadline for the whole body
//! (408), and a large body parsed on the blocking pool, a few at a time, so parsing never
//! stalls the async workers that answer `/healthz` and every other client.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode, header};
use http_body_util::BodyExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::parse::{Refusal, parse_predict_body};

/// A refusal: the status and a message that names the problem.
pub type Failure = (StatusCode, String);

/// Bodies up to this size are parsed where they were read (a few microseconds); larger ones
/// go to the blocking pool.
const INLINE_PARSE_BYTES: usize = 64 << 10;

/// What a request reserves of the budget before its body arrives: any small predict's whole
/// body, so it never waits behind others; a larger body reserves the rest as it arrives, in
/// steps of at least this.
const UPFRONT_BYTES: usize = 64 << 10;

/// A body held in memory, with its share of the budget.
pub struct Buffered {
    pub bytes: Vec<u8>,
    permit: OwnedSemaphorePermit,
}

/// Reads `body` (whose headers are `headers`) by `deadline`, at most `max_bytes`, inside the
/// shared `budget` (permits = bytes).
pub async fn read(
    body: Body,
    headers: &HeaderMap,
    max_bytes: usize,
    budget: &Arc<Semaphore>,
    deadline: Instant,
) -> Result<Buffered, Failure> {
    let too_large = |n: &str| {
        (StatusCode::PAYLOAD_TOO_LARGE, format!("the body is {n} bytes; this server takes at most {max_bytes} (gpulab serve --max-body)"))
    };
    let declared = match headers.get(header::CONTENT_LENGTH) {
        None => None,
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .ok_or_else(|| (StatusCode::BAD_REQUEST, "Content-Length is not a number".to_string()))?,
        ),
    };
    if let Some(n) = declared.filter(|&n| n > max_bytes as u64) {
        return Err(too_large(&n.to_string()));
    }
    // The most this body may be: its declared length, or the largest allowed (chunked).
    let cap = declared.map_or(max_bytes, |n| n as usize);
    let busy = || (StatusCode::SERVICE_UNAVAILABLE, "the server is busy reading other large bodies; retry shortly".to_string());
    let closing = |_: tokio::sync::AcquireError| (StatusCode::SERVICE_UNAVAILABLE, "the server is shutting down".to_string());
    let reserve = |n: usize| {
        let budget = budget.clone();
        async move { tokio::time::timeout_at(deadline, budget.acquire_many_owned(n as u32)).await.map_err(|_| busy())?.map_err(closing) }
    };
    let mut held = cap.min(UPFRONT_BYTES);
    let mut permit = reserve(held).await?;
    let mut bytes = Vec::with_capacity(held);
    let mut body = body;
    loop {
        let frame = tokio::time::timeout_at(deadline, body.frame())
            .await
            .map_err(|_| (StatusCode::REQUEST_TIMEOUT, "the body did not arrive in time (gpulab serve --body-timeout)".to_string()))?;
        let Some(frame) = frame else { break };
        let frame = frame.map_err(|e| (StatusCode::BAD_REQUEST, format!("could not read the request body: {e}")))?;
        if let Some(data) = frame.data_ref() {
            let need = bytes.len() + data.len();
            if need > cap {
                return Err(too_large(&format!("more than {cap}")));
            }
            if need > held {
                // Room for these bytes before they are kept, in steps so a large body is not
                // one wait per frame.
                let more = (need - held).max(UPFRONT_BYTES).min(cap - held);
                permit.merge(reserve(more).await?);
                held += more;
                bytes.reserve_exact(held - bytes.len());
            }
            bytes.extend_from_slice(data);
        }
    }
    if let Some(unused) = permit.split(held - bytes.len()) {
        drop(unused);
    }
    Ok(Buffered { bytes, permit })
}

/// Parses a buffered body into samples (see `parse`); 413 for too many, 400 otherwise. The
/// body's budget is released when the parse ends, even if the client has gone.
pub async fn parse(body: Buffered, features: usize, max_inputs: usize, parsers: &Arc<Semaphore>) -> Result<Vec<Vec<f32>>, Failure> {
    let status = |r: Refusal| match r {
        Refusal::TooLarge(m) => (StatusCode::PAYLOAD_TOO_LARGE, m),
        Refusal::Bad(m) => (StatusCode::BAD_REQUEST, m),
    };
    if body.bytes.len() <= INLINE_PARSE_BYTES {
        return parse_predict_body(&body.bytes, features, max_inputs).map_err(status);
    }
    let turn =
        parsers.clone().acquire_owned().await.map_err(|_| (StatusCode::SERVICE_UNAVAILABLE, "the server is shutting down".to_string()))?;
    let parsed = tokio::task::spawn_blocking(move || {
        let _held = (turn, body.permit);
        parse_predict_body(&body.bytes, features, max_inputs)
    })
    .await
    .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, format!("the body parser stopped: {e}")))?;
    parsed.map_err(status)
}
