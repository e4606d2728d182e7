//! The one way to ask a run to stop: a shared flag that whoever watches sets (the lab's Stop
//! button, a closed event channel, a test) and every loop checks between its units of work —
//! the training loop, data-parallel replicas, a checkpointed child's parent, the simulator.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A stop request, shared by cheap clones. `Stop::default()` is a new, unset one.
#[derive(Clone, Debug)]
pub struct Stop(Option<Arc<AtomicBool>>);

impl Default for Stop {
    fn default() -> Stop {
        Stop::new()
    }
}

static NEVER: Stop = Stop(None);

impl Stop {
    pub fn new() -> Stop {
        Stop(Some(Arc::new(AtomicBool::new(false))))
    }

    /// One already set: a run handed it stops at its first check.
    pub fn set_already() -> Stop {
        let s = Stop::new();
        s.set();
        s
    }

    /// The stop nobody can set, for runs that nobody watches.
    pub fn never() -> &'static Stop {
        &NEVER
    }

    /// Asks every holder to stop (nothing for `never`).
    pub fn set(&self) {
        if let Some(f) = &self.0 {
            f.store(true, Ordering::Relaxed);
        }
    }

    pub fn is_set(&self) -> bool {
        self.0.as_ref().is_some_and(|f| f.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clone_sees_the_stop_and_never_stays_unset() {
        let s = Stop::new();
        let c = s.clone();
        assert!(!c.is_set());
        s.set();
        assert!(c.is_set() && Stop::set_already().is_set());
        Stop::never().set();
        assert!(!Stop::never().is_set());
    }
}
