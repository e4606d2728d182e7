//! Ctrl-C and SIGTERM for `gpulab serve`: the first begins a graceful shutdown, a second one
//! exits at once (what a user pressing Ctrl-C twice means). Both are registered before the
//! server says it is serving, so an early signal is never lost to the default action.

use std::io;

use tokio::sync::oneshot;

/// The signals, registered once (a stream per kind, so none is missed between two waits).
pub struct Signals {
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
}

impl Signals {
    /// Registers the handlers; call inside the server's runtime.
    pub fn register() -> io::Result<Signals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Signals { int: signal(SignalKind::interrupt())?, term: signal(SignalKind::terminate())? })
        }
        #[cfg(not(unix))]
        Ok(Signals {})
    }

    /// The next signal's number (2 = SIGINT / Ctrl-C, 15 = SIGTERM).
    async fn next(&mut self) -> i32 {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.int.recv() => 2,
                _ = self.term.recv() => 15,
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            2
        }
    }

    /// Sends on `first` at the first signal; at the second, exits the process with
    /// 128 + its number without waiting for anything.
    pub async fn watch(mut self, first: oneshot::Sender<()>, grace: std::time::Duration) {
        let _ = self.next().await;
        eprintln!("stopping: finishing the requests in flight (at most {grace:?}); press Ctrl-C again to exit now");
        let _ = first.send(());
        let sig = self.next().await;
        eprintln!("second signal: exiting now");
        std::process::exit(128 + sig);
    }
}
