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
//!   (openraft) and applied on the leader that proposed it: its response is
//!   that apply's. A follower that forwarded it passes the leader's
//!   response on and may not have applied the entry itself yet; a read
//!   that must see it goes through [`RaftNode::linearizable_barrier`].
//! - Writes arriving at a follower are forwarded to the leader internally.
//!   An attempt is retried at the next leader when the target answered
//!   "not the leader", was unreachable, did not answer within
//!   [`node::PEER_ATTEMPT_TIMEOUT`], or another leader became known
//!   meanwhile. Every attempt of one write carries the same
//!   `ProposalId` ([`session::ClientSession`]), and the state machine
//!   applies a `Command::Tagged` proposal at most once (see
//!   `kubestore_storage::session`), so a retry never applies a write twice,
//!   whatever the command and whatever the timing. This safety is the
//!   proposal id's alone: it does not rest on what the command does (a
//!   blind etcd put or a lease keep-alive has no precondition to stop a
//!   second copy), nor on anything a front end adds.
//! - Once an attempt may have reached a leader, a write that does not end
//!   in an answer is reported as unknown ([`RaftNodeError::Timeout`] or
//!   [`RaftNodeError::Indeterminate`]), never as a definite failure.
//! - Writes are group-committed: whatever is queued when a batch goes out
//!   (after the tasks already runnable had their turn) rides in one
//!   [`kubestore_storage::Command::Batch`] entry (or one forwarded
//!   message), with one answer per write. Compactions go alone.
//! - [`RaftNode::linearizable_barrier`] returns only after this node has
//!   applied everything committed before the call began (ReadIndex): a
//!   read index is always at or above the leader's commit index at a
//!   moment it still led (never its applied index, which may trail a
//!   follower's).
//!   A leader that confirmed its leadership with a quorum less than its
//!   read lease ago answers read indexes without another round; the lease
//!   is at most half the minimum election timeout, and so under half of
//!   any follower's refusal to vote (see `lease`).
//!
//! - Commands are validated before they are proposed
//!   ([`kubestore_storage::Command::validate`] against
//!   [`RaftNodeConfig::command_limits`]): by [`RaftNode::write`], and by the
//!   leader again for every command a peer forwards, refused with
//!   `InvalidArgument`. Decoding a command from a peer bounds its nesting.
//! - The node-to-node services are served on the peer port only, never
//!   beside a client API.
//!
//! # Layout
//!
//! - [`node`]: the node's core: start/bootstrap, configuration, leader
//!   tracking, membership, status.
//! - `forward`: writes from any node: propose or forward to the leader,
//!   deadlines, retry at the next leader.
//! - `call_stream`: calls to a peer as messages on one long-lived TCP
//!   connection of the peer port, paired with their answers by `seq`:
//!   replication, forwarded writes and a follower's read indexes travel
//!   this way. [`call_stream::call_all`] speaks it as a peer does.
//! - [`peer_port`]: the peer port's listener, which serves call streams
//!   and hands every other connection to the peer gRPC server.
//! - `election`: the election timer at millisecond resolution (openraft
//!   0.9 checks election timeouts only every 1.5 heartbeats).
//! - `read_index`: linearizable reads: the leader's lease or a quorum
//!   round, a follower's `ReadIndex` RPC, the wait for the local apply.
//! - [`cluster_rpc`]: what peers call on the peer port beside Raft:
//!   forwarded writes and read indexes (call streams), and the client
//!   address (`ClusterService`, gRPC).
//! - [`network`]: the Raft transport (entries travel on one call stream
//!   per leader and follower, votes and snapshots as gRPC calls).
//! - `faults`: fault injection (a node cut off from its peers).
//! - `propose`: group commit of writes into batch entries.
//! - `read`: batching of concurrent read-index requests into rounds.
//! - `lease`: the leader's read lease, which skips rounds while it holds.
//! - [`session`]: this process's proposal ids, for exactly-once writes.
//! - [`error`]: the layer's one error type, [`RaftNodeError`], with typed
//!   causes, in four classes a front end maps to the wire: retryable
//!   ([`RaftNodeError::is_retryable`]), outcome unknown
//!   ([`RaftNodeError::is_outcome_unknown`]), refused before proposal
//!   (`InvalidCommand`) and fatal ([`RaftNodeError::is_fatal`]).

#![warn(missing_docs)]

pub mod call_stream;
pub mod cluster_rpc;
pub mod config;
mod election;
pub mod error;
mod faults;
mod forward;
mod lease;
pub mod network;
pub mod node;
pub mod peer_port;
mod propose;
mod read;
mod read_index;
pub mod session;

pub use config::{command_limits, RaftNodeConfig};
pub use error::{ConfigError, ProtocolError, RaftNodeError, UnknownOutcome, Unreachable};
pub use network::Faults;
pub use node::{ClusterStatus, Member, RaftNode};
pub use session::ClientSession;
