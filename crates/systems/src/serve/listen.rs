//! The accept loop, with the bounds axum's own `serve` lacks: a cap on open connections,
//! hyper's header-read timeout (which also ends idle keep-alive connections), a write that
//! makes no progress is a closed connection, and a shutdown that asks every connection to
//! finish its request in flight, then drops whatever is still open after the grace period.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Sleep;

use super::limits::Limits;
use super::metrics::ServerMetrics;

/// What a client past the connection cap reads (if its socket takes it at once) before its
/// connection closes.
fn busy_response() -> String {
    let body = r#"{"error": "too many connections are open; retry shortly"}"#;
    format!(
        "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

use super::limits::MAX_HEAD_BYTES;

/// How serving ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drained {
    /// Every connection finished within the grace period.
    Clean,
    /// This many connections were still open at the deadline and were dropped.
    Dropped(usize),
}

/// Serves `app` on `listener` until `stop` resolves, then drains (see the module comment).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: &Limits,
    metrics: &ServerMetrics,
    stop: impl Future<Output = ()>,
) -> Drained {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let (closing, closing_rx) = watch::channel(false);
    let mut conns = JoinSet::new();
    let mut builder = http1::Builder::new();
    // max_header_size is the limit itself (431 past it); max_buf_size alone let a head through
    // until hyper's read buffer filled, about twice as large.
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_header_size(MAX_HEAD_BYTES)
        .max_buf_size(MAX_HEAD_BYTES)
        .keep_alive(true);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    let Ok(slot) = slots.clone().try_acquire_owned() else {
                        metrics.connection_refused();
                        let _ = stream.try_write(busy_response().as_bytes());
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    let io = TokioIo::new(WriteDeadline::new(stream, limits.write_timeout));
                    let conn = builder.serve_connection(io, TowerToHyperService::new(app.clone()));
                    let (mut closing, metrics) = (closing_rx.clone(), metrics.clone());
                    metrics.connection_opened();
                    conns.spawn(async move {
                        tokio::pin!(conn);
                        tokio::select! {
                            _ = conn.as_mut() => {}
                            _ = async { let _ = closing.wait_for(|c| *c).await; } => {
                                conn.as_mut().graceful_shutdown();
                                let _ = conn.await;
                            }
                        }
                        drop(slot);
                        metrics.connection_closed();
                    });
                }
                // Out of file descriptors and the like: wait a moment instead of spinning.
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            },
        }
    }
    drop(listener);
    let _ = closing.send(true);
    let drain = async { while conns.join_next().await.is_some() {} };
    if tokio::time::timeout(limits.shutdown_grace, drain).await.is_ok() {
        return Drained::Clean;
    }
    while conns.try_join_next().is_some() {}
    let left = conns.len();
    conns.shutdown().await;
    Drained::Dropped(left)
}

/// A socket whose writes fail once they have made no progress for `limit`: hyper waits for a
/// writable socket for ever, so a client that sends requests but never reads the answers
/// would otherwise hold its connection (and a slot under the cap) until the process ends.
struct WriteDeadline {
    inner: TcpStream,
    limit: Duration,
    stalled: Option<Pin<Box<Sleep>>>,
}

impl WriteDeadline {
    fn new(inner: TcpStream, limit: Duration) -> Self {
        WriteDeadline { inner, limit, stalled: None }
    }

    /// Progress disarms the deadline; waiting arms it (once) and fails when it passes.
    fn watch<T>(&mut self, r: Poll<io::Result<T>>, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        if r.is_ready() {
            self.stalled = None;
            return r;
        }
        let limit = self.limit;
        let sleep = self.stalled.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "the client stopped reading the response"))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for WriteDeadline {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for WriteDeadline {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(r, cx)
    }

    fn poll_write_vectored(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.watch(r, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.watch(r, cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.watch(r, cx)
    }
}
