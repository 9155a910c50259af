//! The storage layer's one error type.

use crate::command::Revision;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("storage engine: {0}")]
    Engine(String),
    #[error("encoding: {0}")]
    Codec(#[from] bincode::Error),
    #[error("corrupt data: {0}")]
    Corrupt(String),
    #[error("i/o on {0}: {1}")]
    Io(String, #[source] std::io::Error),
    #[error("required revision {requested} has been compacted (compacted at {compacted})")]
    Compacted {
        requested: Revision,
        compacted: Revision,
    },
    #[error("required revision {requested} is a future revision (current {current})")]
    FutureRevision {
        requested: Revision,
        current: Revision,
    },
    #[error("a snapshot is being installed; the state is not readable until it completes")]
    Installing,
    /// A read run on the blocking pool ([`crate::Store::run_blocking`])
    /// panicked or was cancelled by the runtime shutting down.
    #[error("a blocking read task failed: {0}")]
    ReadTask(String),
    #[error("data directory has storage format {found}, this build reads {expected}")]
    FormatVersion { found: u32, expected: u32 },
    #[error("snapshot {path} has storage format {found}, this build reads {expected}")]
    SnapshotFormatVersion {
        path: String,
        found: u32,
        expected: u32,
    },
}

impl StoreError {
    /// Converts into openraft's error, attributing it to `subject`/`verb`.
    pub(crate) fn into_raft(
        self,
        subject: openraft::ErrorSubject<crate::NodeId>,
        verb: openraft::ErrorVerb,
    ) -> openraft::StorageError<crate::NodeId> {
        openraft::StorageIOError::new(subject, verb, openraft::AnyError::new(&self)).into()
    }
}
