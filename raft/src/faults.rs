//! Fault injection shared by a node's client and server side: tests and
//! the fault-schedule checker cut a node off from its peers with it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Fault injection shared by a node's client and server side.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    isolated: Arc<AtomicBool>,
}

impl Faults {
    /// Cuts the node off from (or reconnects it to) every peer.
    pub fn set_isolated(&self, isolated: bool) {
        self.isolated.store(isolated, Ordering::SeqCst);
    }

    /// Whether the node is cut off now.
    pub fn is_isolated(&self) -> bool {
        self.isolated.load(Ordering::SeqCst)
    }
}
