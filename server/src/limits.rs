//! Overload protection: at most so many requests in flight per node, read
//! only and mutating counted apart, as kube-apiserver's
//! `--max-requests-inflight` and `--max-mutating-requests-inflight` do.
//! A request over its limit is refused at once (REST `429` with
//! `Retry-After`, etcd `ResourceExhausted`) instead of queueing, so an
//! overloaded node's memory stays bounded and the requests it admitted
//! keep their latency. Watches are exempt (they are long-running and
//! bounded by their own queues); both front ends share one budget. Every
//! admitted request is timed from its admission to its answer (the slot
//! held), per class, for `/metrics`: the latency the limits keep bounded.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::histogram::Histogram;

/// Which budget a request draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestClass {
    ReadOnly,
    Mutating,
}

/// The request is over its class's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("too many {class:?} requests in flight")]
pub struct Overloaded {
    pub class: RequestClass,
}

/// A request's place in its budget; released, and the time it was held
/// recorded, when dropped.
#[derive(Debug)]
pub struct Admitted {
    _permit: Option<OwnedSemaphorePermit>,
    budget: Arc<Budget>,
    since: Instant,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let held = self.since.elapsed().as_secs_f64();
        self.budget
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .observe(held);
    }
}

#[derive(Debug)]
struct Budget {
    limit: usize,
    /// `None`: no limit.
    slots: Option<Arc<Semaphore>>,
    rejected: AtomicU64,
    /// How long admitted requests held their slot.
    held: Mutex<Histogram>,
}

impl Budget {
    fn new(limit: usize) -> Self {
        Self {
            limit,
            slots: (limit > 0).then(|| Arc::new(Semaphore::new(limit))),
            rejected: AtomicU64::new(0),
            held: Mutex::new(Histogram::default()),
        }
    }
}

/// The node's in-flight limits. Cheap to clone.
#[derive(Debug, Clone)]
pub struct InflightLimits {
    read_only: Arc<Budget>,
    mutating: Arc<Budget>,
}

impl InflightLimits {
    /// `0` means no limit for that class.
    pub fn new(max_read_only: usize, max_mutating: usize) -> Self {
        Self {
            read_only: Arc::new(Budget::new(max_read_only)),
            mutating: Arc::new(Budget::new(max_mutating)),
        }
    }

    fn budget(&self, class: RequestClass) -> &Arc<Budget> {
        match class {
            RequestClass::ReadOnly => &self.read_only,
            RequestClass::Mutating => &self.mutating,
        }
    }

    /// Takes a slot of `class`, or refuses at once.
    pub fn admit(&self, class: RequestClass) -> Result<Admitted, Overloaded> {
        let budget = self.budget(class);
        let permit = match &budget.slots {
            None => None,
            Some(slots) => match slots.clone().try_acquire_owned() {
                Ok(permit) => Some(permit),
                Err(_) => {
                    budget.rejected.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(?class, "request refused: too many in flight");
                    return Err(Overloaded { class });
                }
            },
        };
        Ok(Admitted {
            _permit: permit,
            budget: budget.clone(),
            since: Instant::now(),
        })
    }

    /// Requests of `class` in flight now (0 when unlimited: not counted).
    pub fn in_flight(&self, class: RequestClass) -> usize {
        let budget = self.budget(class);
        budget
            .slots
            .as_ref()
            .map_or(0, |s| budget.limit - s.available_permits())
    }

    /// Requests of `class` refused so far.
    pub fn rejected(&self, class: RequestClass) -> u64 {
        self.budget(class).rejected.load(Ordering::Relaxed)
    }

    /// How long admitted requests of `class` held their slot so far.
    pub fn held(&self, class: RequestClass) -> Histogram {
        self.budget(class)
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl Default for InflightLimits {
    fn default() -> Self {
        Self::new(
            crate::config::DEFAULT_MAX_REQUESTS_INFLIGHT,
            crate::config::DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_class_refuses_and_counts_while_the_other_admits() {
        let limits = InflightLimits::new(1, 2);
        let read = limits.admit(RequestClass::ReadOnly).expect("first read");
        assert_eq!(
            limits
                .admit(RequestClass::ReadOnly)
                .expect_err("second read"),
            Overloaded {
                class: RequestClass::ReadOnly
            }
        );
        assert_eq!(limits.rejected(RequestClass::ReadOnly), 1);
        let _w1 = limits.admit(RequestClass::Mutating).expect("write 1");
        let _w2 = limits.admit(RequestClass::Mutating).expect("write 2");
        assert!(limits.admit(RequestClass::Mutating).is_err());
        drop(read);
        assert!(
            limits.admit(RequestClass::ReadOnly).is_ok(),
            "a released slot is reused"
        );
    }

    #[test]
    fn every_admitted_request_is_timed_when_it_ends_limited_or_not() {
        let limits = InflightLimits::new(0, 1);
        drop(limits.admit(RequestClass::Mutating).expect("admitted"));
        drop(limits.admit(RequestClass::ReadOnly).expect("admitted"));
        drop(limits.admit(RequestClass::ReadOnly).expect("admitted"));
        assert!(limits.admit(RequestClass::Mutating).is_ok());
        let render = |class| {
            let mut out = String::new();
            limits.held(class).render(&mut out, "h", "");
            out
        };
        assert!(render(RequestClass::Mutating).contains("h_count{} 2\n"));
        assert!(render(RequestClass::ReadOnly).contains("h_count{} 2\n"));
    }

    #[test]
    fn zero_means_unlimited() {
        let limits = InflightLimits::new(0, 0);
        let held: Vec<_> = (0..10_000)
            .map(|_| limits.admit(RequestClass::Mutating).expect("admitted"))
            .collect();
        assert_eq!(held.len(), 10_000);
        assert_eq!(limits.rejected(RequestClass::Mutating), 0);
    }
}
