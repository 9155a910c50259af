//! The raft layer's one error type, [`RaftNodeError`], and the typed
//! causes it carries. Cloneable, because one read-barrier round answers
//! many waiting readers.
//!
//! The variants fall into four classes, which is what a front end maps to
//! the wire (see [`RaftNodeError::is_retryable`],
//! [`RaftNodeError::is_outcome_unknown`], [`RaftNodeError::is_fatal`]):
//!
//! - **retryable**: nothing was applied and the node may answer later
//!   (no leader yet, the leader unreachable, this node stopping);
//! - **outcome unknown**: a write may or may not have committed (a
//!   deadline passed, or an attempt that may have reached a leader failed);
//! - **refused**: the command breaks the node's limits and was never
//!   proposed;
//! - **fatal**: the Raft core, its storage, the configuration or a peer's
//!   protocol failed; retrying the same request here will not help.

use std::sync::Arc;

use kubestore_storage::{ApplyError, InvalidCommand, NodeId, StoreError};

/// Every way a [`crate::RaftNode`] operation can fail.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RaftNodeError {
    /// Retryable: no leader is known within the request's deadline.
    #[error("no leader is known (an election may be in progress)")]
    NoLeader,
    /// Retryable: the leader (or the peer asked) could not be reached.
    #[error("node {node} could not be reached: {cause}")]
    Unreachable {
        /// The node that could not be reached.
        node: NodeId,
        /// Why not.
        cause: Unreachable,
    },
    /// Retryable elsewhere: this node is stopping.
    #[error("the node is shutting down")]
    ShuttingDown,
    /// The deadline passed while waiting for the named step; for a write,
    /// its outcome is unknown.
    #[error("timed out waiting for {0}")]
    Timeout(&'static str),
    /// The request reached the leader but its outcome is unknown: it may or
    /// may not have been committed.
    #[error("the outcome of the write is unknown: {0}")]
    Indeterminate(UnknownOutcome),
    /// The command was refused before it was proposed (it does not meet
    /// the node's command limits): it was not applied.
    #[error("invalid command: {0}")]
    InvalidCommand(#[from] InvalidCommand),
    /// Fatal: the openraft core stopped (a storage or internal error).
    #[error("raft: {0}")]
    Fatal(Arc<openraft::error::Fatal<NodeId>>),
    /// Fatal: storage failed to open or read.
    #[error("storage: {0}")]
    Storage(Arc<StoreError>),
    /// Fatal: the node's configuration is not usable.
    #[error("invalid configuration: {0}")]
    Config(ConfigError),
    /// Fatal for this request: a peer or the proposer broke the protocol
    /// between nodes (an answer of the wrong shape, an undecodable
    /// command).
    #[error("raft: {0}")]
    Protocol(ProtocolError),
}

/// Why a peer could not be reached.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Unreachable {
    /// The node is not in the membership, so it has no address.
    #[error("not a member")]
    NotAMember,
    /// This node is cut off by fault injection.
    #[error("isolated by fault injection")]
    Isolated,
    /// The peer's address is not a usable URI.
    #[error("{0}")]
    Address(Arc<tonic::transport::Error>),
    /// The stream the call went on ended before the answer came (the
    /// peer went away, or its connection broke).
    #[error("the stream to it ended")]
    StreamEnded,
}

/// Why a write's outcome is unknown.
#[derive(Debug, Clone, thiserror::Error)]
pub enum UnknownOutcome {
    /// The leader answered the forwarded write with an error, in its words
    /// (the peer protocol carries the leader's error as text).
    #[error("{0}")]
    Leader(String),
    /// The leader's answer could not be decoded.
    #[error("undecodable forward reply: {0}")]
    UndecodableReply(Arc<bincode::Error>),
    /// The state machine could not tell whether the proposal applied
    /// ([`ApplyError::StaleProposal`], [`ApplyError::DuplicateResponseDropped`]).
    #[error("{0}")]
    Apply(ApplyError),
    /// An attempt that may have reached a leader failed with this error.
    #[error("{0}")]
    After(Box<RaftNodeError>),
}

/// A configuration [`crate::RaftNode::start`] refuses.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ConfigError {
    /// This node's id is not among the members it was given.
    #[error("node {id} is not among the members {members:?}")]
    NotAMember {
        /// This node's id.
        id: NodeId,
        /// The members' ids.
        members: Vec<NodeId>,
    },
    /// A read lease too long to be safe (see the `lease` module).
    #[error("the read lease ({lease:?}) must be at most half the minimum election timeout ({election_timeout_min:?})")]
    ReadLeaseTooLong {
        /// The read lease asked for.
        lease: std::time::Duration,
        /// The minimum election timeout; the lease may be half of it.
        election_timeout_min: std::time::Duration,
    },
    /// openraft's own check of its settings.
    #[error("{0}")]
    Openraft(Arc<openraft::ConfigError>),
}

/// A broken exchange between nodes or inside the proposer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProtocolError {
    /// A batch got a different number of answers than it had writes.
    #[error("{sent} writes were answered with {answered} responses")]
    AnswerCount {
        /// Writes sent.
        sent: usize,
        /// Responses received.
        answered: usize,
    },
    /// A batch was answered with something other than one response per
    /// write.
    #[error("a batch of {sent} writes was answered with {answer:?}")]
    BatchAnswer {
        /// Writes sent.
        sent: usize,
        /// The answer received.
        answer: Arc<kubestore_storage::Response>,
    },
    /// A command to forward did not encode.
    #[error("encoding a command: {0}")]
    Encode(Arc<bincode::Error>),
    /// openraft refused a client write for a reason other than "not the
    /// leader" (a membership change in progress).
    #[error("{0}")]
    ClientWrite(Arc<openraft::error::ClientWriteError<NodeId, openraft::BasicNode>>),
    /// openraft refused to initialize the cluster.
    #[error("{0}")]
    Initialize(Arc<openraft::error::InitializeError<NodeId, openraft::BasicNode>>),
    /// The leader refused a read index, in its words (as the peer
    /// protocol carries it).
    #[error("{0}")]
    ReadIndex(String),
    /// The raft core's task ended unexpectedly at shutdown.
    #[error("{0}")]
    Shutdown(Arc<tokio::task::JoinError>),
}

impl RaftNodeError {
    /// Nothing was applied and the same request may succeed later or on
    /// another node: no leader, an unreachable leader, a stopping node.
    /// Front ends answer "unavailable".
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            RaftNodeError::NoLeader
                | RaftNodeError::Unreachable { .. }
                | RaftNodeError::ShuttingDown
        )
    }

    /// A write may or may not have committed (or a read did not finish in
    /// time). Front ends answer "timeout".
    pub fn is_outcome_unknown(&self) -> bool {
        matches!(
            self,
            RaftNodeError::Timeout(_) | RaftNodeError::Indeterminate(_)
        )
    }

    /// The node or a peer failed in a way retrying this request will not
    /// mend: front ends answer an internal error.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            RaftNodeError::Fatal(_)
                | RaftNodeError::Storage(_)
                | RaftNodeError::Config(_)
                | RaftNodeError::Protocol(_)
        )
    }

    /// This error as the answer to a write that may have reached a leader:
    /// a timeout stays a timeout, anything else becomes
    /// [`RaftNodeError::Indeterminate`] (never a definite failure).
    pub fn outcome_unknown(self) -> Self {
        match self {
            e @ (RaftNodeError::Timeout(_) | RaftNodeError::Indeterminate(_)) => e,
            e => RaftNodeError::Indeterminate(UnknownOutcome::After(Box::new(e))),
        }
    }
}

impl From<StoreError> for RaftNodeError {
    fn from(e: StoreError) -> Self {
        RaftNodeError::Storage(Arc::new(e))
    }
}

impl From<openraft::error::Fatal<NodeId>> for RaftNodeError {
    fn from(e: openraft::error::Fatal<NodeId>) -> Self {
        RaftNodeError::Fatal(Arc::new(e))
    }
}

impl From<ProtocolError> for RaftNodeError {
    fn from(e: ProtocolError) -> Self {
        RaftNodeError::Protocol(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_error_stays_small() {
        // Every result of the write and read paths carries it.
        assert!(std::mem::size_of::<RaftNodeError>() <= 64);
    }

    #[test]
    fn every_error_is_in_exactly_one_class() {
        let errors = [
            RaftNodeError::NoLeader,
            RaftNodeError::Unreachable {
                node: 2,
                cause: Unreachable::Isolated,
            },
            RaftNodeError::ShuttingDown,
            RaftNodeError::Timeout("a leader"),
            RaftNodeError::Indeterminate(UnknownOutcome::Leader("x".into())),
            RaftNodeError::InvalidCommand(InvalidCommand::EmptyKey),
            RaftNodeError::Fatal(Arc::new(openraft::error::Fatal::Stopped)),
            RaftNodeError::Protocol(ProtocolError::AnswerCount {
                sent: 2,
                answered: 1,
            }),
        ];
        for e in errors {
            let refused = matches!(e, RaftNodeError::InvalidCommand(_));
            let classes = [
                e.is_retryable(),
                e.is_outcome_unknown(),
                e.is_fatal(),
                refused,
            ];
            assert_eq!(classes.iter().filter(|c| **c).count(), 1, "{e:?}");
        }
    }

    #[test]
    fn a_failed_attempt_becomes_unknown_keeping_its_words() {
        let e = RaftNodeError::Unreachable {
            node: 3,
            cause: Unreachable::Isolated,
        }
        .outcome_unknown();
        assert!(e.is_outcome_unknown());
        assert_eq!(
            e.to_string(),
            "the outcome of the write is unknown: node 3 could not be reached: isolated by fault injection"
        );
        let t = RaftNodeError::Timeout("the write to commit").outcome_unknown();
        assert!(matches!(t, RaftNodeError::Timeout(_)));
    }
}
