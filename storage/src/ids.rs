//! The numbers that cross the crate boundaries, each its own type, so a
//! revision is never passed where a log index or a lease id is meant.
//!
//! Every type here is a newtype over the integer it always was: serde
//! sees a newtype struct, which bincode (the log, snapshots, the peer
//! protocol) and JSON (`/debug/cluster`) encode exactly as the bare
//! integer, and the schema's key encodings write the inner integer, so
//! nothing on the wire or on disk changed when they were introduced.
//!
//! Member ids stay the bare [`NodeId`] alias, see there for why.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A revision of the MVCC store: it advances by exactly one for every
/// applied command that writes (a transaction's writes share one), and is
/// etcd's revision and a Kubernetes `resourceVersion`. `Revision(0)` is
/// "none" or "before anything" wherever a revision may be absent (an
/// absent key's create and mod revision, an empty store).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct Revision(pub u64);

impl Revision {
    /// The revision of an empty store, and of a key that does not exist.
    pub const ZERO: Revision = Revision(0);

    /// The revision after this one: the one the next write gets.
    pub fn next(self) -> Revision {
        Revision(self.0 + 1)
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl From<u64> for Revision {
    /// A revision from its number as the wire carries it (an etcd
    /// revision, a parsed `resourceVersion`).
    fn from(n: u64) -> Self {
        Revision(n)
    }
}

/// The index of an entry in the Raft log (openraft's `LogId::index`).
/// Entries are applied in index order; `LogIndex(0)` is "nothing applied
/// yet" (openraft's first entry has index 1 or more). A read index is a
/// log index: a read may be served once the node has applied it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct LogIndex(pub u64);

impl fmt::Display for LogIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A lease's id, chosen by the client or the granting front end (etcd's
/// `int64` lease ids). `LeaseId(0)` ([`LeaseId::NONE`]) is "no lease": a
/// key-value attached to no lease carries it, and no lease is granted
/// with it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct LeaseId(pub i64);

impl LeaseId {
    /// No lease: what a key attached to no lease carries.
    pub const NONE: LeaseId = LeaseId(0);

    /// Whether this is [`LeaseId::NONE`].
    pub fn is_none(self) -> bool {
        self == Self::NONE
    }
}

impl fmt::Display for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A member's id in the Raft group (`--id`; etcd's `member_id`).
///
/// A documented alias, not a newtype, by choice: it is openraft's
/// `NodeId` in [`crate::TypeConfig`], so openraft hands it back bare from
/// every metric and membership the node reads (`current_leader`, the
/// membership's nodes), and the server uses it as a `tracing` span field,
/// which a newtype would have to be converted for at each site. There is
/// no second kind of member id it could be confused with, and every other
/// integer at the boundary (revisions, log indexes, lease ids) is a
/// distinct type, so passing one of those where a member id is meant
/// still fails to compile.
pub type NodeId = u64;

#[cfg(test)]
mod tests {
    use super::*;

    /// The newtypes encode exactly as the integers they wrap (bincode: the
    /// log, snapshots, the peer protocol), and decode from them.
    #[test]
    fn every_id_encodes_as_its_bare_integer() {
        assert_eq!(
            bincode::serialize(&Revision(42)).ok(),
            bincode::serialize(&42u64).ok()
        );
        assert_eq!(
            bincode::serialize(&LogIndex(7)).ok(),
            bincode::serialize(&7u64).ok()
        );
        assert_eq!(
            bincode::serialize(&LeaseId(-3)).ok(),
            bincode::serialize(&-3i64).ok()
        );
        let raw = bincode::serialize(&(9u64, -9i64)).expect("encode");
        assert_eq!(
            bincode::deserialize::<(Revision, LeaseId)>(&raw).ok(),
            Some((Revision(9), LeaseId(-9)))
        );
    }
}
