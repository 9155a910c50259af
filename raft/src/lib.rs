//! kubestore's Raft layer: one openraft node per process, replicating the
//! storage crate's commands over a tonic transport.
//!
//! Its one job is to turn "a front end wants this command committed" or
//! "wants a linearizable read" into the right Raft operations, from any
//! node. It knows nothing of Kubernetes kinds or HTTP.
//!
//! # Invariants
//!
//! - A write is acknowledged only once its entry is committed on a quorum
//!   (openraft) and applied on the node that answers.
//! - Writes arriving at a follower are forwarded to the leader internally.
//!   A forward is retried at the next leader when the target answered "not
//!   the leader" or was unreachable; any other failure is reported as
//!   [`RaftNodeError::Indeterminate`]. An unreachable leader may still have
//!   committed the write, so a retry can reach the state machine twice:
//!   callers guard their writes with preconditions (as every Kubernetes
//!   verb does), so the second attempt fails its guard instead of applying
//!   twice.
//! - Exactly-once writes: [`session::ClientSession`] names each write with a
//!   `ProposalId` kept across its retries, and the state machine applies a
//!   `Command::Tagged` proposal at most once (see `kubestore_storage::session`).
//!   (`RaftNode::write` does not tag its writes yet; until it does, the
//!   preconditions above are what guard a retried write.)
//! - Writes are group-committed: whatever is queued when a batch goes out
//!   rides in one [`kubestore_storage::Command::Batch`] entry (or one
//!   forwarded RPC), with one answer per write. Compactions go alone.
//! - [`RaftNode::linearizable_barrier`] returns only after this node has
//!   applied everything committed before the call began (ReadIndex).
//!   A leader that confirmed its leadership with a quorum less than its
//!   read lease ago answers read indexes without another round; the lease
//!   is a quarter of the followers' refusal to vote (see `lease`).
//!
//! # Layout
//!
//! - [`node`]: start/bootstrap, write forwarding, read barrier, status.
//! - [`network`]: the tonic transport and fault injection.
//! - `propose`: group commit of writes into batch entries.
//! - `read`: batching of concurrent read-index requests into rounds.
//! - `lease`: the leader's read lease, which skips rounds while it holds.
//! - [`session`]: this process's proposal ids, for exactly-once writes.
//! - [`error`]: the layer's one error type, [`RaftNodeError`].

pub mod error;
mod lease;
pub mod network;
pub mod node;
mod propose;
mod read;
pub mod session;

pub use error::RaftNodeError;
pub use network::Faults;
pub use node::{ClusterStatus, Member, RaftNode, RaftNodeConfig};
pub use session::ClientSession;
