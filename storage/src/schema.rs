//! The on-disk schema: every column family, every key encoding and the
//! storage format version live in this one file.
//!
//! All integers in keys are big-endian so that RocksDB's byte order is the
//! numeric order. Values are bincode-encoded Rust structs from
//! [`crate::command`] and openraft.
//!
//! | column family | key | value |
//! |---|---|---|
//! | `raft_log` | log index (u64) | `Entry<TypeConfig>`: format 3 and 4 only; format 5 keeps the log in segment files (`crate::segment_log`), and opening an older directory moves these rows there |
//! | `raft_meta` | [`RAFT_VOTE`], [`RAFT_COMMITTED`], [`RAFT_LAST_PURGED`] | `Vote`, `LogId` |
//! | `raft_meta` | [`RAFT_LIVENESS_PROBE`] | anything: overwritten by every liveness probe |
//! | `raft_meta` | [`RAFT_BOOT_EPOCH`] | this node's boot epoch (u64): local, never replicated |
//! | `kv` | user key | current [`KeyValue`](crate::KeyValue) |
//! | `history` | [`history_key`]: escaped user key ++ revision (u64) | `Option<KeyValue>` (`None` = deleted) |
//! | `events` | revision (u64) | `Vec<StoredEvent>`: everything that revision changed, its states pointing into `history` (see [`crate::mvcc`]) |
//! | `sm_meta` | [`SM_LAST_APPLIED`], [`SM_MEMBERSHIP`], [`SM_REVISION`], ... | state-machine bookkeeping |
//! | `leases` | [`lease_key`]: `L` ++ id (i64) | [`LeaseRecord`](crate::LeaseRecord) |
//! | `leases` | [`lease_attachment_key`]: `K` ++ id (i64) ++ user key | empty: the key is attached to the lease |
//! | `sessions` | [`session_key`]: origin node (u64) | [`SessionState`](crate::session::SessionState): the origin's epoch and floor |
//! | `sessions` | [`session_group_key`]: origin node (u64) ++ its smallest seq (u64) ++ `G` | `Vec<(u64, Recorded)>`: the answers of the origin's proposals one log entry applied |
//! | `sessions` | [`session_record_key`]: origin node (u64) ++ seq (u64) | [`Recorded`](crate::session::Recorded): the answer of that proposal (format 3; read, no longer written) |

/// The data directory's format, bumped whenever what it holds changes
/// incompatibly. A directory written with another version is refused at
/// open.
/// Format 3 added the `sessions` column family (exactly-once proposals).
/// Format 4 keeps the records one log entry makes for an origin in one row
/// ([`session_group_key`]) instead of a row per proposal. Format 5 keeps the
/// Raft log in segment files of its own (`crate::segment_log`) instead of
/// the `raft_log` column family; a directory of format 3 or 4 opens, its
/// log is moved into segment files, and it is marked 5, while builds of
/// format 4 refuse it (they would find its log empty).
pub const FORMAT_VERSION: u32 = 5;

/// The directory formats this build opens: its own, and the two before,
/// whose rows are a subset of its own and whose log it moves.
pub const READABLE_FORMATS: [u32; 3] = [3, 4, FORMAT_VERSION];

/// The format of the snapshot files this build writes: the state
/// machine's rows, which format 5 left as format 4 wrote them, so a node
/// of format 4 installs a snapshot of format 5's.
pub const SNAPSHOT_FORMAT: u32 = 4;

/// The snapshot formats this build installs: format 3's rows are format
/// 4's less its grouped session records.
pub const READABLE_SNAPSHOT_FORMATS: [u32; 2] = [3, SNAPSHOT_FORMAT];

/// RocksDB name of [`Cf::RaftLog`]: the Raft log entries by index, in
/// directories of format 3 and 4.
pub const CF_RAFT_LOG: &str = "raft_log";
/// RocksDB name of [`Cf::RaftMeta`]: vote, commit, purge point, boot epoch.
pub const CF_RAFT_META: &str = "raft_meta";
/// RocksDB name of [`Cf::Kv`]: every live key's current state.
pub const CF_KV: &str = "kv";
/// RocksDB name of [`Cf::History`]: every state of every key by revision.
pub const CF_HISTORY: &str = "history";
/// RocksDB name of [`Cf::Events`]: what each revision changed.
pub const CF_EVENTS: &str = "events";
/// RocksDB name of [`Cf::SmMeta`]: the state machine's bookkeeping.
pub const CF_SM_META: &str = "sm_meta";
/// RocksDB name of [`Cf::Leases`]: lease records and key attachments.
pub const CF_LEASES: &str = "leases";
/// RocksDB name of [`Cf::Sessions`]: the proposal session table.
pub const CF_SESSIONS: &str = "sessions";

use crate::ids::LeaseId;

/// A column family. The engine maps each to its RocksDB handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cf {
    /// Raft log entries, keyed by index, in directories of format 3 and 4
    /// (local: not in snapshots). Empty once such a directory is opened:
    /// the log moves to segment files.
    RaftLog,
    /// openraft's vote, committed and purged log ids, and the node's local
    /// rows (liveness probe, boot epoch); not in snapshots.
    RaftMeta,
    /// The current state of every live key, keyed by user key.
    Kv,
    /// Every state of every key, keyed by escaped user key and revision.
    History,
    /// What each revision changed, keyed by revision (the watch log).
    Events,
    /// Last applied log id, membership, revision, compaction point, format
    /// version.
    SmMeta,
    /// Lease records and which keys are attached to each lease.
    Leases,
    /// The proposal session table (exactly-once apply).
    Sessions,
}

impl Cf {
    /// Every column family, in the order they are created.
    pub const ALL: [Cf; 8] = [
        Cf::RaftLog,
        Cf::RaftMeta,
        Cf::Kv,
        Cf::History,
        Cf::Events,
        Cf::SmMeta,
        Cf::Leases,
        Cf::Sessions,
    ];

    /// The column families that hold replicated state-machine data (what a
    /// snapshot carries whole, besides the bookkeeping rows of `sm_meta`):
    /// the MVCC store, the leases and the proposal sessions.
    pub const STATE_MACHINE: [Cf; 5] = [Cf::Kv, Cf::History, Cf::Events, Cf::Leases, Cf::Sessions];

    /// Whether the column family serves reads of one whole key, where a
    /// Bloom filter pays: the current values (a guard or a put reads its
    /// key), the bookkeeping rows, the leases and the sessions. The log,
    /// the history and the events are read by range or seek.
    pub fn read_by_key(self) -> bool {
        matches!(
            self,
            Cf::Kv | Cf::RaftMeta | Cf::SmMeta | Cf::Leases | Cf::Sessions
        )
    }

    /// The column family's RocksDB name (`CF_*`).
    pub fn name(self) -> &'static str {
        match self {
            Cf::RaftLog => CF_RAFT_LOG,
            Cf::RaftMeta => CF_RAFT_META,
            Cf::Kv => CF_KV,
            Cf::History => CF_HISTORY,
            Cf::Events => CF_EVENTS,
            Cf::SmMeta => CF_SM_META,
            Cf::Leases => CF_LEASES,
            Cf::Sessions => CF_SESSIONS,
        }
    }

    /// A stable one-byte tag, used in snapshot files.
    pub fn tag(self) -> u8 {
        match self {
            Cf::RaftLog => 0,
            Cf::RaftMeta => 1,
            Cf::Kv => 2,
            Cf::History => 3,
            Cf::Events => 4,
            Cf::SmMeta => 5,
            Cf::Leases => 6,
            Cf::Sessions => 7,
        }
    }

    /// The column family of a snapshot file's tag ([`Cf::tag`]), `None`
    /// for a tag no column family has.
    pub fn from_tag(tag: u8) -> Option<Cf> {
        Cf::ALL.into_iter().find(|cf| cf.tag() == tag)
    }
}

/// openraft's last saved vote (`Vote`).
pub const RAFT_VOTE: &[u8] = b"vote";
/// openraft's last saved committed log id (`Option<LogId>`).
pub const RAFT_COMMITTED: &[u8] = b"committed";
/// The log id of the last purged entry (`LogId`).
pub const RAFT_LAST_PURGED: &[u8] = b"last_purged";
/// Written (synced) by [`crate::Store::check_writable`], the liveness probe.
pub const RAFT_LIVENESS_PROBE: &[u8] = b"liveness_probe";
/// The epoch of this node's current process (u64 big-endian), raised at
/// every open: the `epoch` of the proposal ids it hands out. Local to the
/// node (not in snapshots): it names this node's processes, not state.
pub const RAFT_BOOT_EPOCH: &[u8] = b"boot_epoch";

/// The storage format the data directory was written in ([`FORMAT_VERSION`]).
pub const SM_FORMAT_VERSION: &[u8] = b"format_version";
/// The log id of the last applied entry, written in each entry's batch.
pub const SM_LAST_APPLIED: &[u8] = b"last_applied";
/// The last applied membership (openraft's `StoredMembership`).
pub const SM_MEMBERSHIP: &[u8] = b"membership";
/// The revision of the last write (u64 big-endian).
pub const SM_REVISION: &[u8] = b"revision";
/// The revision the history was last compacted to (u64 big-endian).
pub const SM_COMPACTED: &[u8] = b"compacted";
/// The meta of the snapshot currently kept on disk (`SnapshotMeta`).
pub const SM_SNAPSHOT_META: &[u8] = b"snapshot_meta";
/// Present while a received snapshot is being installed: if the process dies
/// half-way, the install is redone from the kept file at the next open.
pub const SM_INSTALLING: &[u8] = b"installing";

/// The `leases` row of lease `id`.
pub fn lease_key(id: LeaseId) -> [u8; 9] {
    let mut k = [b'L'; 9];
    k[1..].copy_from_slice(&id.0.to_be_bytes());
    k
}

/// The first `leases` row of any lease record (all ids are positive).
pub const LEASE_RECORDS_START: [u8; 1] = [b'L'];
/// The end (exclusive) of the lease records.
pub const LEASE_RECORDS_END: [u8; 1] = [b'L' + 1];

/// The `leases` row recording that `key` is attached to lease `id`.
pub fn lease_attachment_key(id: LeaseId, key: &[u8]) -> Vec<u8> {
    let mut k = lease_attachment_prefix(id);
    k.extend_from_slice(key);
    k
}

/// The prefix of every attachment row of lease `id`.
pub fn lease_attachment_prefix(id: LeaseId) -> Vec<u8> {
    let mut k = Vec::with_capacity(9);
    k.push(b'K');
    k.extend_from_slice(&id.0.to_be_bytes());
    k
}

/// The `sessions` row of origin node `origin`'s session state.
pub fn session_key(origin: u64) -> [u8; 8] {
    origin.to_be_bytes()
}

/// The `sessions` row of the answer to proposal `seq` of `origin`. It
/// sorts after the origin's state row and before the next origin's.
pub fn session_record_key(origin: u64, seq: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&origin.to_be_bytes());
    k[8..].copy_from_slice(&seq.to_be_bytes());
    k
}

/// The tag that ends a [`session_group_key`].
const SESSION_GROUP_TAG: u8 = b'G';

/// The `sessions` row of the answers one log entry recorded for `origin`'s
/// proposals, `first` the smallest of their seqs. It sorts after the
/// origin's state row, beside its one-record rows, and before the next
/// origin's rows.
pub fn session_group_key(origin: u64, first: u64) -> [u8; 17] {
    let mut k = [0u8; 17];
    k[..16].copy_from_slice(&session_record_key(origin, first));
    k[16] = SESSION_GROUP_TAG;
    k
}

/// The end (exclusive) of every record row of `origin`: above its
/// largest [`session_group_key`], below the next origin's state row.
pub fn session_records_end(origin: u64) -> [u8; 17] {
    let mut k = [0xFFu8; 17];
    k[..8].copy_from_slice(&origin.to_be_bytes());
    k
}

/// A record row of the `sessions` column family, by what its key names.
/// Ordered as the keys are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SessionRecordRow {
    /// The row's only seq (format 3), or the smallest of its group's.
    pub first: u64,
    /// A group of answers ([`session_group_key`]), not one
    /// ([`session_record_key`]).
    pub group: bool,
}

impl SessionRecordRow {
    /// The row's key in `origin`'s session.
    pub fn key(self, origin: u64) -> Vec<u8> {
        if self.group {
            session_group_key(origin, self.first).to_vec()
        } else {
            session_record_key(origin, self.first).to_vec()
        }
    }
}

/// A `sessions` row key, split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionRowKey {
    /// The origin's state row ([`session_key`]).
    State(u64),
    /// One of the origin's record rows.
    Records(u64, SessionRecordRow),
}

/// Splits a `sessions` row key; `None` if it is none of the three shapes.
pub fn split_session_key(row: &[u8]) -> Option<SessionRowKey> {
    match row.len() {
        8 => Some(SessionRowKey::State(decode_u64(row)?)),
        16 => Some(SessionRowKey::Records(
            decode_u64(&row[..8])?,
            SessionRecordRow {
                first: decode_u64(&row[8..])?,
                group: false,
            },
        )),
        17 if row[16] == SESSION_GROUP_TAG => Some(SessionRowKey::Records(
            decode_u64(&row[..8])?,
            SessionRecordRow {
                first: decode_u64(&row[8..16])?,
                group: true,
            },
        )),
        _ => None,
    }
}

/// A key of one big-endian `u64` (a log index, a revision), so that byte
/// order is numeric order.
pub fn u64_key(n: u64) -> [u8; 8] {
    n.to_be_bytes()
}

/// The `u64` of a [`u64_key`], `None` if `bytes` is not 8 bytes long.
pub fn decode_u64(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(bytes.try_into().ok()?))
}

/// Escapes a user key so that escaped keys sort exactly like the raw keys and
/// no escaped key is a prefix of another: every `0x00` becomes `0x00 0xFF`, and
/// the key ends with `0x00 0x01`. The revision suffix follows the terminator.
pub fn escape_user_key(key: &[u8], out: &mut Vec<u8>) {
    for &b in key {
        out.push(b);
        if b == 0 {
            out.push(0xFF);
        }
    }
    out.extend_from_slice(&[0x00, 0x01]);
}

/// The `history` row of `key` at `revision`.
pub fn history_key(key: &[u8], revision: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len() + 10);
    history_key_into(key, revision, &mut out);
    out
}

/// [`history_key`] into `out`, replacing what it held.
pub fn history_key_into(key: &[u8], revision: u64, out: &mut Vec<u8>) {
    out.clear();
    escape_user_key(key, out);
    out.extend_from_slice(&revision.to_be_bytes());
}

/// The first `history` row of `key` (any revision).
pub fn history_key_start(key: &[u8]) -> Vec<u8> {
    history_key(key, 0)
}

/// Splits a `history` row key into the user key as escaped (terminator
/// included) and the revision, without unescaping: rows of one user key
/// have equal escaped parts.
pub fn split_history_row(row: &[u8]) -> Option<(&[u8], u64)> {
    if row.len() < 10 {
        return None;
    }
    let (escaped, rev) = row.split_at(row.len() - 8);
    if !escaped.ends_with(&[0x00, 0x01]) {
        return None;
    }
    Some((escaped, decode_u64(rev)?))
}

/// A key after every `history` row of the user key escaped as `escaped`
/// and before any other key's: a seek to it lands on the next key's first
/// row.
pub fn history_rows_end(escaped: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(escaped.len() + 9);
    out.extend_from_slice(escaped);
    out.extend_from_slice(&[0xFF; 8]);
    out.push(0x00);
    out
}

/// Splits a `history` row key into the user key and the revision.
pub fn split_history_key(row: &[u8]) -> Option<(Vec<u8>, u64)> {
    let (escaped, revision) = split_history_row(row)?;
    let body = &escaped[..escaped.len() - 2];
    let mut key = Vec::with_capacity(body.len());
    let mut i = 0;
    while i < body.len() {
        let b = body[i];
        key.push(b);
        if b == 0 {
            if body.get(i + 1) != Some(&0xFF) {
                return None;
            }
            i += 1;
        }
        i += 1;
    }
    Some((key, revision))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_keys_sort_like_user_keys_then_revisions() {
        let keys: Vec<&[u8]> = vec![b"", b"a", b"a\0", b"a\0b", b"a\x01", b"ab", b"b"];
        let mut rows = Vec::new();
        for k in &keys {
            for rev in [1u64, 7, 300] {
                rows.push(history_key(k, rev));
            }
        }
        let mut sorted = rows.clone();
        sorted.sort();
        assert_eq!(
            rows, sorted,
            "escaped keys must keep user-key then revision order"
        );
        for k in &keys {
            let row = history_key(k, 42);
            assert_eq!(split_history_key(&row), Some((k.to_vec(), 42)));
        }
    }

    #[test]
    fn the_end_of_a_keys_history_rows_is_before_the_next_keys_first() {
        let keys: Vec<&[u8]> = vec![b"", b"a", b"a\0", b"a\0b", b"a\x01", b"ab", b"b"];
        for (i, k) in keys.iter().enumerate() {
            let row = history_key(k, 5);
            let (escaped, rev) = split_history_row(&row).expect("a history row");
            assert_eq!(rev, 5);
            let end = history_rows_end(escaped);
            assert!(history_key(k, u64::MAX) < end, "past every row of {k:?}");
            for later in &keys[i + 1..] {
                assert!(end < history_key_start(later), "{k:?} before {later:?}");
                let later_row = history_key(later, 5);
                let (other, _) = split_history_row(&later_row).expect("row");
                assert_ne!(escaped, other);
            }
        }
        assert_eq!(split_history_row(b"short"), None);
    }

    #[test]
    fn session_rows_sort_by_origin_state_first_then_seq() {
        let mut rows: Vec<Vec<u8>> = Vec::new();
        for origin in [1u64, 2, 256, u64::MAX - 1] {
            rows.push(session_key(origin).to_vec());
            for seq in [0u64, 1, 300, u64::MAX] {
                let one = SessionRecordRow {
                    first: seq,
                    group: false,
                };
                let group = SessionRecordRow {
                    first: seq,
                    group: true,
                };
                assert!(one < group, "rows order as their keys");
                rows.push(one.key(origin));
                rows.push(group.key(origin));
                assert!(group.key(origin).as_slice() < session_records_end(origin).as_slice());
            }
            assert!(session_records_end(origin).as_slice() < session_key(origin + 1).as_slice());
        }
        let mut sorted = rows.clone();
        sorted.sort();
        assert_eq!(rows, sorted);
        assert_eq!(
            split_session_key(&session_key(7)),
            Some(SessionRowKey::State(7))
        );
        assert_eq!(
            split_session_key(&session_record_key(7, 9)),
            Some(SessionRowKey::Records(
                7,
                SessionRecordRow {
                    first: 9,
                    group: false
                }
            ))
        );
        assert_eq!(
            split_session_key(&session_group_key(7, 9)),
            Some(SessionRowKey::Records(
                7,
                SessionRecordRow {
                    first: 9,
                    group: true
                }
            ))
        );
        assert_eq!(split_session_key(b"odd"), None);
        assert_eq!(split_session_key(&[0u8; 17]), None, "no group tag");
    }

    #[test]
    fn malformed_history_rows_are_rejected() {
        assert_eq!(split_history_key(b"short"), None);
        assert_eq!(
            split_history_key(b"a\0\x02\x00\x00\x00\x00\x00\x00\x00\x01"),
            None
        );
    }
}
