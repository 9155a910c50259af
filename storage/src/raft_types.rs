//! kubestore's openraft type configuration. It lives next to the
//! replicated command (below the log store and the state machine, which
//! name it) so `raft` can depend on `storage` without a cycle.

use openraft::StoredMembership;

use crate::command::{Command, Response};
use crate::ids::NodeId;

/// What openraft knows of a member: its peer address (`--peer-addr`).
pub type Node = openraft::BasicNode;

openraft::declare_raft_types!(
    /// The openraft type configuration of kubestore. It lives next to the
    /// replicated command so `raft` can depend on `storage` without a cycle.
    pub TypeConfig:
        D = Command,
        R = Response,
        NodeId = NodeId,
        Node = Node,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = tokio::fs::File,
        AsyncRuntime = openraft::TokioRuntime,
);

/// One Raft log entry of kubestore (a [`Command`], a membership change or a
/// blank entry).
pub type Entry = openraft::Entry<TypeConfig>;

/// The last applied membership, as openraft stores it in the state machine.
pub type SmMembership = StoredMembership<NodeId, Node>;
