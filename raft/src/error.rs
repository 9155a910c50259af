//! The raft layer's one error type. Cloneable, because one read-barrier
//! round answers many waiting readers.

use kubestore_storage::NodeId;

#[derive(Debug, Clone, thiserror::Error)]
pub enum RaftNodeError {
    #[error("no leader is known (an election may be in progress)")]
    NoLeader,
    #[error("timed out waiting for {0}")]
    Timeout(&'static str),
    #[error("node {node} could not be reached: {message}")]
    Unreachable { node: NodeId, message: String },
    /// The request reached the leader but its outcome is unknown: it may or
    /// may not have been committed.
    #[error("the outcome of the write is unknown: {0}")]
    Indeterminate(String),
    #[error("raft: {0}")]
    Raft(String),
    #[error("storage: {0}")]
    Storage(String),
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("the node is shutting down")]
    ShuttingDown,
    /// The command was refused before it was proposed (it does not meet
    /// the node's command limits): it was not applied.
    #[error("invalid command: {0}")]
    InvalidCommand(#[from] kubestore_storage::InvalidCommand),
}

impl RaftNodeError {
    /// This error as the answer to a write that may have reached a leader:
    /// a timeout stays a timeout, anything else becomes
    /// [`RaftNodeError::Indeterminate`] (never a definite failure).
    pub fn outcome_unknown(self) -> Self {
        match self {
            e @ (RaftNodeError::Timeout(_) | RaftNodeError::Indeterminate(_)) => e,
            e => RaftNodeError::Indeterminate(e.to_string()),
        }
    }
}

impl From<kubestore_storage::StoreError> for RaftNodeError {
    fn from(e: kubestore_storage::StoreError) -> Self {
        RaftNodeError::Storage(e.to_string())
    }
}
