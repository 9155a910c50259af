//! Disk fault injection, for the fault-schedule checker and tests: a slow
//! disk (every log fsync takes longer), a slow state machine (every apply
//! waits before it writes) and a slow snapshot install (as a snapshot of
//! millions of rows takes). All are off unless set; the server only
//! exposes them when started with fault injection enabled.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Delays shared by a node's log flusher and state machine. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct DiskFaults {
    inner: Arc<Delays>,
}

#[derive(Debug, Default)]
struct Delays {
    fsync_ms: AtomicU64,
    apply_ms: AtomicU64,
    install_ms: AtomicU64,
}

impl DiskFaults {
    /// Every log fsync from now on takes at least `delay` longer.
    pub fn set_fsync_delay(&self, delay: Duration) {
        self.inner.fsync_ms.store(millis(delay), Ordering::SeqCst);
    }

    /// Every apply of committed entries from now on waits `delay` first.
    pub fn set_apply_delay(&self, delay: Duration) {
        self.inner.apply_ms.store(millis(delay), Ordering::SeqCst);
    }

    /// Every snapshot install from now on takes `delay` longer, counted as
    /// part of the install ([`crate::Store::subscribe_installing`] says
    /// installing meanwhile).
    pub fn set_install_delay(&self, delay: Duration) {
        self.inner.install_ms.store(millis(delay), Ordering::SeqCst);
    }

    /// The delay every log fsync waits now (zero: none).
    pub fn fsync_delay(&self) -> Duration {
        Duration::from_millis(self.inner.fsync_ms.load(Ordering::SeqCst))
    }

    /// The delay every apply waits now (zero: none).
    pub fn apply_delay(&self) -> Duration {
        Duration::from_millis(self.inner.apply_ms.load(Ordering::SeqCst))
    }

    /// The delay every snapshot install takes now (zero: none).
    pub fn install_delay(&self) -> Duration {
        Duration::from_millis(self.inner.install_ms.load(Ordering::SeqCst))
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
