//! The server's bounds on every client: how long it may take, how much it may send, how many
//! may be connected, and how long a shutdown waits for them. Each has a default fit for a
//! loopback lab server and a CLI flag (`gpulab serve --help`).

use std::time::Duration;

use gpulab_core::error::{Error, Result};

#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    /// Largest request body (bytes); a larger one is refused with 413 before it is read.
    pub max_body_bytes: usize,
    /// Bytes of bodies being read or parsed at once, all clients together; a request waits
    /// (within `body_timeout`) for room, so memory stays bounded however many send at once.
    pub body_budget_bytes: usize,
    /// Connections open at once; one more is answered 503 and closed.
    pub max_connections: usize,
    /// Time a client has to send a request's headers, counted from when its connection is
    /// ready for the next request, so it is also the keep-alive idle timeout.
    pub header_timeout: Duration,
    /// Time a client has to send a request's body once its headers are in (408 after).
    pub body_timeout: Duration,
    /// Time a response write may make no progress (a client that stops reading) before the
    /// connection is closed.
    pub write_timeout: Duration,
    /// After a shutdown begins, how long requests in flight have to finish; then the
    /// connections still open are dropped.
    pub shutdown_grace: Duration,
}

/// The largest request head (request line and headers) the server reads: a larger one is
/// answered 431 and the connection closed. Fixed: no client of a predict API needs more.
pub const MAX_HEAD_BYTES: usize = 64 << 10;

/// Largest request body (bytes) by default.
pub const DEFAULT_MAX_BODY: usize = 16 << 20;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: DEFAULT_MAX_BODY,
            body_budget_bytes: 64 << 20,
            max_connections: 256,
            header_timeout: Duration::from_secs(5),
            body_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(3),
        }
    }
}

/// Beyond these a setting is a typo, not a plan.
pub const MAX_BODY_LIMIT: usize = 1 << 30;
pub const MAX_CONNECTIONS_LIMIT: usize = 65_536;
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

impl Limits {
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidConfig(m));
        if self.max_body_bytes == 0 || self.max_body_bytes > MAX_BODY_LIMIT {
            return bad(format!("max body {} bytes must be between 1 and {MAX_BODY_LIMIT}", self.max_body_bytes));
        }
        if self.body_budget_bytes < self.max_body_bytes || self.body_budget_bytes > u32::MAX as usize {
            return bad(format!(
                "body budget {} bytes must hold at least one largest body ({} bytes) and at most {} bytes",
                self.body_budget_bytes,
                self.max_body_bytes,
                u32::MAX
            ));
        }
        if self.max_connections == 0 || self.max_connections > MAX_CONNECTIONS_LIMIT {
            return bad(format!("max connections {} must be between 1 and {MAX_CONNECTIONS_LIMIT}", self.max_connections));
        }
        for (name, d) in [("header", self.header_timeout), ("body", self.body_timeout), ("write", self.write_timeout)] {
            if d.is_zero() || d > MAX_TIMEOUT {
                return bad(format!("{name} timeout {d:?} must be above 0 and at most 1 h"));
            }
        }
        if self.shutdown_grace > MAX_TIMEOUT {
            return bad(format!("shutdown grace {:?} must be at most 1 h", self.shutdown_grace));
        }
        Ok(())
    }
}

/// Makes this process allocate buffers of 1 MiB and more with their own mapping, returned to the
/// system when freed. glibc otherwise raises that threshold after the first large free and keeps
/// later request bodies in its heaps, so the peak memory of a server under large bodies grows
/// past the body budget (measured: 143 MB for a 60 MiB budget; 65 MB with this). Process-wide:
/// for the `gpulab serve` process, not a library default.
pub fn return_large_buffers_to_the_system() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; called before the server's threads start.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}
