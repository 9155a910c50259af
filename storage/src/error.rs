//! The storage layer's one error type.

use crate::ids::{NodeId, Revision};

/// Every way a storage operation can fail: the engine or the disk (fatal
/// to the node's Raft core when it happens in the log store or apply), or a
/// read the store refuses (compacted, future, mid-install), which a front
/// end answers as its protocol says.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// RocksDB failed, in its words.
    #[error("storage engine: {0}")]
    Engine(String),
    /// A value did not encode or decode (bincode).
    #[error("encoding: {0}")]
    Codec(#[from] bincode::Error),
    /// Stored bytes are not what the schema says they must be.
    #[error("corrupt data: {0}")]
    Corrupt(String),
    /// A file operation failed on the named path (snapshots, the data
    /// directory).
    #[error("i/o on {0}: {1}")]
    Io(String, #[source] std::io::Error),
    /// A read below the compaction point: its history is gone.
    #[error("required revision {requested} has been compacted (compacted at {compacted})")]
    Compacted {
        /// The revision asked for.
        requested: Revision,
        /// The compaction point: the oldest revision still readable.
        compacted: Revision,
    },
    /// A read at a revision the store has not reached.
    #[error("required revision {requested} is a future revision (current {current})")]
    FutureRevision {
        /// The revision asked for.
        requested: Revision,
        /// The store's current revision.
        current: Revision,
    },
    /// A snapshot install replaced (or is replacing) the state during the
    /// read, which may have seen part of both; retry it.
    #[error("a snapshot is being installed; the state is not readable until it completes")]
    Installing,
    /// A read run on the blocking pool ([`crate::Store::run_blocking`])
    /// panicked or was cancelled by the runtime shutting down.
    #[error("a blocking read task failed: {0}")]
    ReadTask(String),
    /// The log's fsync failed (or its flusher is gone) before an entry
    /// this node had counted as written was on disk.
    #[error("the log's fsync failed: {0}")]
    LogSync(String),
    /// The data directory was written by a build of another storage
    /// format ([`crate::schema::FORMAT_VERSION`]); it is not opened.
    #[error("data directory has storage format {found}, this build reads {expected}")]
    FormatVersion {
        /// The format the directory records.
        found: u32,
        /// The format this build reads and writes.
        expected: u32,
    },
    /// A snapshot file of another storage format; refused before anything
    /// is cleared.
    #[error("snapshot {path} has storage format {found}, this build reads {expected}")]
    SnapshotFormatVersion {
        /// The snapshot file.
        path: String,
        /// The format its header records.
        found: u32,
        /// The format this build reads and writes.
        expected: u32,
    },
}

impl StoreError {
    /// Converts into openraft's error, attributing it to `subject`/`verb`.
    pub(crate) fn into_raft(
        self,
        subject: openraft::ErrorSubject<NodeId>,
        verb: openraft::ErrorVerb,
    ) -> openraft::StorageError<NodeId> {
        openraft::StorageIOError::new(subject, verb, openraft::AnyError::new(&self)).into()
    }
}
