//! kubestore's openraft type configuration. It lives next to the
//! replicated command (below the log store and the state machine, which
//! name it) so `raft` can depend on `storage` without a cycle.

use std::sync::Arc;

use openraft::StoredMembership;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::command::{Command, Response};
use crate::ids::NodeId;

/// What openraft knows of a member: its peer address (`--peer-addr`).
pub type Node = openraft::BasicNode;

openraft::declare_raft_types!(
    /// The openraft type configuration of kubestore. It lives next to the
    /// replicated command so `raft` can depend on `storage` without a cycle.
    pub TypeConfig:
        D = SharedCommand,
        R = Response,
        NodeId = NodeId,
        Node = Node,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = tokio::fs::File,
        AsyncRuntime = openraft::TokioRuntime,
);

/// The command a log entry carries, shared: openraft clones an entry
/// for each reader (the apply of it, the replication to each follower),
/// and the log store serves the newest entries from memory, so a clone is
/// one reference count, not a copy of every key and value. Encoded
/// exactly as the [`Command`] it holds (on disk and on the wire).
#[derive(Debug, Clone, PartialEq)]
pub struct SharedCommand(Arc<Command>);

impl From<Command> for SharedCommand {
    fn from(cmd: Command) -> Self {
        Self(Arc::new(cmd))
    }
}

impl std::ops::Deref for SharedCommand {
    type Target = Command;

    fn deref(&self) -> &Command {
        &self.0
    }
}

impl std::fmt::Display for SharedCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl Serialize for SharedCommand {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for SharedCommand {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Command::deserialize(deserializer).map(Self::from)
    }
}

/// One Raft log entry of kubestore (a [`Command`], a membership change or a
/// blank entry).
pub type Entry = openraft::Entry<TypeConfig>;

/// The last applied membership, as openraft stores it in the state machine.
pub type SmMembership = StoredMembership<NodeId, Node>;
