//! Writing a command through Raft and unpacking its answer: one helper per
//! command family (a transaction, a lease command, a compaction), shared
//! by both front ends and the compactor, so no caller matches
//! [`RaftNode::write`]'s response by hand.
//!
//! A write fails in one of three ways, kept apart in [`WriteError`]: Raft
//! could not commit it (or does not know whether it did), the state
//! machine refused it ([`ApplyError`], decided identically on every node),
//! or the state machine answered something the command cannot produce (a
//! broken invariant). Each front end maps them to its own wire once:
//! `kube::error` to kube's errors, `etcd::status` to etcd's.

use kubestore_raft::{RaftNode, RaftNodeError};
use kubestore_storage::{ApplyError, Command, CommandResult, LeaseRecord, Revision, TxnResponse};

/// Why a write did not produce the answer its command expects.
#[derive(Debug, Clone, thiserror::Error)]
pub enum WriteError {
    /// Not committed, or not known to be: see [`RaftNodeError`]'s classes.
    #[error(transparent)]
    Raft(#[from] RaftNodeError),
    /// Committed, and refused by the state machine: no revision used;
    /// `revision` is the store's when it refused.
    #[error("{error}")]
    Apply {
        error: ApplyError,
        revision: Revision,
    },
    /// An answer of another command family: a broken invariant.
    #[error("unexpected state machine answer {0:?}")]
    Unexpected(Box<CommandResult>),
}

/// Runs one transaction (`cmd` is a [`Command::Txn`], already checked by
/// the caller against its front end's limits); its response and the
/// revision it was applied at (a transaction that wrote nothing answers
/// the current revision).
pub async fn txn(node: &RaftNode, cmd: Command) -> Result<(TxnResponse, Revision), WriteError> {
    let resp = node.write(cmd).await?;
    match resp.result {
        Ok(CommandResult::Txn(t)) => Ok((t, resp.revision)),
        Ok(other) => Err(WriteError::Unexpected(Box::new(other))),
        Err(error) => Err(WriteError::Apply {
            error,
            revision: resp.revision,
        }),
    }
}

/// What the state machine answers a lease command.
#[derive(Debug, Clone)]
pub enum LeaseAnswer {
    /// The lease after a grant or a keep-alive.
    Lease(LeaseRecord),
    /// A revoke or an expiry, with the number of keys it deleted.
    Revoked { deleted: u64 },
}

/// Runs one lease command (grant, keep-alive, revoke, expire); its answer
/// and revision.
pub async fn lease(node: &RaftNode, cmd: Command) -> Result<(LeaseAnswer, Revision), WriteError> {
    let resp = node.write(cmd).await?;
    match resp.result {
        Ok(CommandResult::Lease(l)) => Ok((LeaseAnswer::Lease(l), resp.revision)),
        Ok(CommandResult::LeaseRevoked { deleted }) => {
            Ok((LeaseAnswer::Revoked { deleted }, resp.revision))
        }
        Ok(other) => Err(WriteError::Unexpected(Box::new(other))),
        Err(error) => Err(WriteError::Apply {
            error,
            revision: resp.revision,
        }),
    }
}

/// Runs one compaction to `revision`.
pub async fn compact(node: &RaftNode, revision: Revision) -> Result<(), WriteError> {
    let resp = node.write(Command::Compact { revision }).await?;
    match resp.result {
        Ok(CommandResult::Compacted) => Ok(()),
        Ok(other) => Err(WriteError::Unexpected(Box::new(other))),
        Err(error) => Err(WriteError::Apply {
            error,
            revision: resp.revision,
        }),
    }
}
