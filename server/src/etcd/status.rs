//! The one place where the etcd front end's errors become gRPC statuses:
//! etcd's codes and messages (its `api/v3rpc/rpctypes`), which clients
//! match on, and the mapping of storage's, Raft's and apply's errors to
//! them. Where etcd has no such error, the function says what etcd would
//! do and why kubestore answers otherwise.

use kubestore_raft::RaftNodeError;
use kubestore_storage::{ApplyError, InvalidCommand, StoreError};
use tonic::{Code, Status};

use crate::compaction::CompactError;
use crate::write::WriteError;

/// etcd's `ErrGRPCCompacted`.
pub(super) fn compacted() -> Status {
    Status::new(
        Code::OutOfRange,
        "etcdserver: mvcc: required revision has been compacted",
    )
}
pub(super) fn future_revision() -> Status {
    Status::new(
        Code::OutOfRange,
        "etcdserver: mvcc: required revision is a future revision",
    )
}
pub(super) fn no_space() -> Status {
    Status::new(
        Code::ResourceExhausted,
        "etcdserver: mvcc: database space exceeded",
    )
}
pub(super) fn lease_not_found() -> Status {
    Status::new(Code::NotFound, "etcdserver: requested lease not found")
}
pub(super) fn lease_exists() -> Status {
    Status::new(Code::FailedPrecondition, "etcdserver: lease already exists")
}
pub(super) fn lease_ttl_too_large() -> Status {
    Status::new(Code::OutOfRange, "etcdserver: too large lease TTL")
}
pub(super) fn too_many_ops() -> Status {
    Status::new(
        Code::InvalidArgument,
        "etcdserver: too many operations in txn request",
    )
}
pub(super) fn duplicate_key() -> Status {
    Status::new(
        Code::InvalidArgument,
        "etcdserver: duplicate key given in txn request",
    )
}
pub(super) fn key_not_found() -> Status {
    Status::new(Code::InvalidArgument, "etcdserver: key not found")
}
pub(super) fn empty_key() -> Status {
    Status::new(Code::InvalidArgument, "etcdserver: key is not provided")
}
pub(super) fn request_too_large() -> Status {
    Status::new(Code::InvalidArgument, "etcdserver: request is too large")
}
/// etcd has no answer of its own for this (it would try to send the
/// response and fail on gRPC's message limit, `ResourceExhausted`):
/// the ranges of a Txn return more than apply holds for one command
/// (`kubestore_storage::apply::MAX_TXN_RANGE_BYTES`).
pub(super) fn txn_response_too_large() -> Status {
    Status::new(
        Code::ResourceExhausted,
        format!(
            "etcdserver: txn range response is too large (over {} bytes); \
             use a limit, or a Range outside the txn",
            kubestore_storage::apply::MAX_TXN_RANGE_BYTES
        ),
    )
}
pub(super) fn no_leader() -> Status {
    Status::new(Code::Unavailable, "etcdserver: no leader")
}
pub(super) fn too_many_requests() -> Status {
    Status::resource_exhausted("etcdserver: too many requests")
}
pub(super) fn timeout() -> Status {
    Status::new(Code::Unavailable, "etcdserver: request timed out")
}
pub(super) fn txn_too_deep(depth: usize) -> Status {
    Status::new(
        Code::InvalidArgument,
        format!(
            "kubestore: txn nested {depth} levels deep, at most {}",
            kubestore_storage::MAX_TXN_DEPTH
        ),
    )
}
pub(super) fn not_supported(what: &str) -> Status {
    Status::new(
        Code::Unimplemented,
        format!("kubestore: {what} is not supported"),
    )
}

/// An empty `RequestOp` in a txn: etcd's `checkRequestOp` answers "key not
/// found" for it.
pub(super) fn empty_request_op() -> Status {
    key_not_found()
}

/// A compare result or target outside the enum (etcd has no check; its
/// clients cannot send one).
pub(super) fn unknown_compare(what: &str) -> Status {
    Status::invalid_argument(format!("unknown compare {what}"))
}

/// A broken invariant or a failed stream: never the client's fault.
pub(super) fn internal(e: &impl std::fmt::Display) -> Status {
    Status::internal(e.to_string())
}

/// The state machine answered a command with a result of another command:
/// a broken invariant, never the client's fault.
pub(super) fn unexpected_answer(answer: &impl std::fmt::Debug) -> Status {
    Status::internal(format!("unexpected state machine answer {answer:?}"))
}

/// A command over etcd's limits, refused before it is proposed.
pub(super) fn invalid(e: InvalidCommand) -> Status {
    match e {
        InvalidCommand::TooManyOps { .. } => too_many_ops(),
        InvalidCommand::TooDeep { depth, .. } => txn_too_deep(depth),
        InvalidCommand::TooLarge { .. } => request_too_large(),
        InvalidCommand::EmptyKey => empty_key(),
        InvalidCommand::LeaseTtlTooLarge { .. } => lease_ttl_too_large(),
        // Not reachable from a client request (the front end picks the id
        // and raises small TTLs; clients send no batches or tags).
        e @ (InvalidCommand::LeaseTtlTooSmall { .. }
        | InvalidCommand::NoLeaseId
        | InvalidCommand::BatchTooLarge { .. }
        | InvalidCommand::NotBatchable(_)
        | InvalidCommand::MalformedProposal) => {
            Status::invalid_argument(format!("etcdserver: {e}"))
        }
    }
}

/// Raft's errors by class: no leader (retryable), timed out (outcome
/// unknown), refused (over the limits); anything fatal is `Internal`.
pub(super) fn raft(e: RaftNodeError) -> Status {
    match e {
        RaftNodeError::NoLeader => no_leader(),
        RaftNodeError::Unreachable { .. } => no_leader(),
        e if e.is_outcome_unknown() => timeout(),
        RaftNodeError::ShuttingDown => Status::unavailable("etcdserver: server stopped"),
        RaftNodeError::InvalidCommand(e) => invalid(e),
        other => Status::internal(other.to_string()),
    }
}

/// A storage read's failure.
pub(super) fn store(e: StoreError) -> Status {
    match e {
        StoreError::Compacted { .. } => compacted(),
        StoreError::FutureRevision { .. } => future_revision(),
        // etcd has no such state (a member restoring a snapshot does not
        // serve); kubestore's own words, with etcd's code for "try later".
        StoreError::Installing => Status::unavailable("etcdserver: a snapshot is being installed"),
        other => Status::internal(other.to_string()),
    }
}

/// A refusal decided in apply.
pub(super) fn apply(e: ApplyError) -> Status {
    match e {
        ApplyError::Compacted => compacted(),
        ApplyError::FutureRevision => future_revision(),
        ApplyError::DuplicateKey => duplicate_key(),
        ApplyError::KeyNotFound => key_not_found(),
        ApplyError::LeaseNotFound => lease_not_found(),
        ApplyError::LeaseExists => lease_exists(),
        // Never reaches a client: only the lease keeper proposes expiries.
        ApplyError::LeaseRenewed => lease_not_found(),
        // Never reaches a client: the proposer batches only batchable commands.
        ApplyError::NotBatchable => Status::internal(e.to_string()),
        // The write may or may not have been applied: etcd's answer for an
        // unknown outcome.
        ApplyError::StaleProposal | ApplyError::DuplicateResponseDropped => timeout(),
        // Never reaches a client: only `RaftNode::write` tags commands.
        ApplyError::MalformedProposal => Status::internal(e.to_string()),
        ApplyError::ResponseTooLarge => txn_response_too_large(),
    }
}

/// A write's failure: Raft's by class, the state machine's refusal, or an
/// answer of another command family (a broken invariant).
pub(super) fn write(e: WriteError) -> Status {
    match e {
        WriteError::Raft(e) => raft(e),
        WriteError::Apply { error, .. } => apply(error),
        WriteError::Unexpected(answer) => unexpected_answer(&answer),
    }
}

/// A compaction's failure.
pub(super) fn compact(e: CompactError) -> Status {
    match e {
        CompactError::FutureRevision(_) => future_revision(),
        CompactError::AlreadyCompacted { .. } => compacted(),
        CompactError::Raft(e) => raft(e),
        other => Status::internal(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubestore_raft::{UnknownOutcome, Unreachable};

    #[test]
    fn raft_errors_map_by_class_in_etcds_words() {
        let unreachable = RaftNodeError::Unreachable {
            node: 2,
            cause: Unreachable::Isolated,
        };
        for (e, code, message) in [
            (
                RaftNodeError::NoLeader,
                Code::Unavailable,
                "etcdserver: no leader",
            ),
            (unreachable, Code::Unavailable, "etcdserver: no leader"),
            (
                RaftNodeError::ShuttingDown,
                Code::Unavailable,
                "etcdserver: server stopped",
            ),
            (
                RaftNodeError::Timeout("the write to commit"),
                Code::Unavailable,
                "etcdserver: request timed out",
            ),
            (
                RaftNodeError::Indeterminate(UnknownOutcome::Leader("gone".into())),
                Code::Unavailable,
                "etcdserver: request timed out",
            ),
        ] {
            let s = raft(e);
            assert_eq!((s.code(), s.message()), (code, message));
        }
    }

    #[test]
    fn an_empty_txn_op_is_etcds_key_not_found() {
        let s = empty_request_op();
        assert_eq!(s.code(), Code::InvalidArgument);
        assert_eq!(s.message(), "etcdserver: key not found");
    }
}
