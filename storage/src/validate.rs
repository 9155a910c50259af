//! Checks of a command on its own, before it is proposed: what a command
//! may look like whatever the state of the store (how many operations, how
//! deep, how many bytes, which lease TTLs). The state-dependent checks
//! (compare guards, duplicate keys, lease existence, compaction) stay in
//! [`crate::apply`], decided identically on every node; node state such as
//! the etcd quota stays with the front end that has it.
//!
//! Every front end runs [`Command::validate`] before it proposes, and the
//! leader runs it again on every command a peer forwards, so a command that
//! did not come through a front end (a forged forward on the peer port) is
//! held to the same rules.

use crate::command::{Command, CompareTarget, KeyRange, Op, Txn, MAX_TXN_DEPTH};

/// etcd's maximum lease TTL, in seconds.
pub const MAX_LEASE_TTL: i64 = 9_000_000_000;
/// etcd's minimum lease TTL (about 1.5 election timeouts): the etcd front
/// end raises smaller requested TTLs to it before it proposes.
pub const MIN_LEASE_TTL: i64 = 2;

/// What one command may carry. Nesting ([`MAX_TXN_DEPTH`]) and lease TTLs
/// ([`MIN_LEASE_TTL`]..=[`MAX_LEASE_TTL`]) are the same for every source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most compares, and most operations in either branch, of one txn
    /// (every nested txn on its own), as etcd's `--max-txn-ops`.
    pub max_txn_ops: usize,
    /// Most bytes of keys, range ends, values and compared values in one
    /// command ([`Command::payload_bytes`]; a batch's members each).
    pub max_command_bytes: usize,
    /// Most commands in a [`Command::Batch`] (0: no batches).
    pub max_batch_commands: usize,
    /// Most payload bytes of all the commands of a batch together.
    pub max_batch_bytes: usize,
}

impl Limits {
    /// The etcd API's: etcd's default `--max-txn-ops` (128) and
    /// `--max-request-bytes` (1.5 MiB; a request's payload bytes are never
    /// more than its encoded size). Clients send no batches.
    pub const ETCD: Limits = Limits {
        max_txn_ops: 128,
        max_command_bytes: 1536 * 1024,
        max_batch_commands: 0,
        max_batch_bytes: 0,
    };
}

/// Why a command was refused before it was proposed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidCommand {
    /// One level of a txn (its compares, or one branch) holds more
    /// operations than [`Limits::max_txn_ops`].
    #[error("too many operations in txn request: {ops}, at most {max}")]
    TooManyOps {
        /// Operations found at that level.
        ops: usize,
        /// The limit.
        max: usize,
    },
    /// Txns nested deeper than [`MAX_TXN_DEPTH`].
    #[error("txn nested {depth} levels deep, at most {max}")]
    TooDeep {
        /// The nesting found.
        depth: usize,
        /// The limit.
        max: usize,
    },
    /// More bytes of keys and values than [`Limits::max_command_bytes`].
    #[error("request is too large: {bytes} bytes of keys and values, at most {max}")]
    TooLarge {
        /// Bytes of keys and values in the command.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// A put, range, delete or compare with an empty key.
    #[error("key is not provided")]
    EmptyKey,
    /// A lease TTL above [`MAX_LEASE_TTL`] (etcd's bound).
    #[error("too large lease TTL: {ttl} s, at most {max}")]
    LeaseTtlTooLarge {
        /// The TTL asked, in seconds.
        ttl: i64,
        /// The limit.
        max: i64,
    },
    /// A lease TTL below [`MIN_LEASE_TTL`].
    #[error("too small lease TTL: {ttl} s, at least {min}")]
    LeaseTtlTooSmall {
        /// The TTL asked, in seconds.
        ttl: i64,
        /// The limit.
        min: i64,
    },
    /// A grant of [`crate::LeaseId::NONE`], which names no lease.
    #[error("lease id 0 names no lease")]
    NoLeaseId,
    /// A batch over [`Limits::max_batch_commands`] or
    /// [`Limits::max_batch_bytes`].
    #[error("batch too large: {commands} commands of {bytes} bytes, at most {max_commands} of {max_bytes}")]
    BatchTooLarge {
        /// Commands in the batch.
        commands: usize,
        /// Their payload bytes together.
        bytes: usize,
        /// The command limit.
        max_commands: usize,
        /// The byte limit.
        max_bytes: usize,
    },
    /// A batch member that may not ride in a batch (named).
    #[error("{0} cannot be batched")]
    NotBatchable(String),
    /// A tagged command wrapping a batch or another tagged command.
    #[error("a tagged proposal must wrap one plain command")]
    MalformedProposal,
}

impl Command {
    /// Checks the command on its own against `limits` (see the module
    /// docs). Cheap: one walk over the command, no store access.
    pub fn validate(&self, limits: &Limits) -> Result<(), InvalidCommand> {
        match self {
            Command::Txn(txn) => {
                validate_txn(txn, limits, 1)?;
                check_size(self.payload_bytes(), limits)
            }
            Command::LeaseGrant { id, ttl } => {
                if id.is_none() {
                    return Err(InvalidCommand::NoLeaseId);
                }
                if *ttl > MAX_LEASE_TTL {
                    return Err(InvalidCommand::LeaseTtlTooLarge {
                        ttl: *ttl,
                        max: MAX_LEASE_TTL,
                    });
                }
                if *ttl < MIN_LEASE_TTL {
                    return Err(InvalidCommand::LeaseTtlTooSmall {
                        ttl: *ttl,
                        min: MIN_LEASE_TTL,
                    });
                }
                Ok(())
            }
            Command::Compact { .. }
            | Command::LeaseRevoke { .. }
            | Command::LeaseExpire { .. }
            | Command::LeaseKeepAlive { .. } => Ok(()),
            Command::Batch(cmds) => {
                let bytes = self.payload_bytes();
                if cmds.len() > limits.max_batch_commands || bytes > limits.max_batch_bytes {
                    return Err(InvalidCommand::BatchTooLarge {
                        commands: cmds.len(),
                        bytes,
                        max_commands: limits.max_batch_commands,
                        max_bytes: limits.max_batch_bytes,
                    });
                }
                for cmd in cmds {
                    if !cmd.is_batchable() {
                        return Err(InvalidCommand::NotBatchable(cmd.to_string()));
                    }
                    cmd.validate(limits)?;
                }
                Ok(())
            }
            Command::Tagged { cmd, .. } => match **cmd {
                Command::Batch(_) | Command::Tagged { .. } => {
                    Err(InvalidCommand::MalformedProposal)
                }
                ref plain => plain.validate(limits),
            },
        }
    }

    /// The bytes of keys, range ends, values and compared values the
    /// command carries: what its size is made of, and never more than the
    /// encoded size of the request it came from.
    pub fn payload_bytes(&self) -> usize {
        match self {
            Command::Txn(txn) => txn_bytes(txn),
            Command::Batch(cmds) => cmds.iter().map(Command::payload_bytes).sum(),
            Command::Tagged { cmd, .. } => cmd.payload_bytes(),
            Command::Compact { .. }
            | Command::LeaseGrant { .. }
            | Command::LeaseRevoke { .. }
            | Command::LeaseExpire { .. }
            | Command::LeaseKeepAlive { .. } => 0,
        }
    }
}

fn check_size(bytes: usize, limits: &Limits) -> Result<(), InvalidCommand> {
    if bytes > limits.max_command_bytes {
        return Err(InvalidCommand::TooLarge {
            bytes,
            max: limits.max_command_bytes,
        });
    }
    Ok(())
}

/// etcd's order: the op counts of a level, then its compares' keys, then
/// each op (a nested txn the same way, depth first).
fn validate_txn(txn: &Txn, limits: &Limits, depth: usize) -> Result<(), InvalidCommand> {
    if depth > MAX_TXN_DEPTH {
        return Err(InvalidCommand::TooDeep {
            depth,
            max: MAX_TXN_DEPTH,
        });
    }
    let ops = txn
        .compare
        .len()
        .max(txn.success.len())
        .max(txn.failure.len());
    if ops > limits.max_txn_ops {
        return Err(InvalidCommand::TooManyOps {
            ops,
            max: limits.max_txn_ops,
        });
    }
    if txn.compare.iter().any(|c| c.range.key.is_empty()) {
        return Err(InvalidCommand::EmptyKey);
    }
    for op in txn.success.iter().chain(&txn.failure) {
        match op {
            Op::Range(r) => check_key(&r.range.key)?,
            Op::Put(p) => check_key(&p.key)?,
            Op::Delete(d) => check_key(&d.range.key)?,
            Op::Txn(nested) => validate_txn(nested, limits, depth + 1)?,
        }
    }
    Ok(())
}

fn check_key(key: &[u8]) -> Result<(), InvalidCommand> {
    if key.is_empty() {
        Err(InvalidCommand::EmptyKey)
    } else {
        Ok(())
    }
}

fn range_bytes(r: &KeyRange) -> usize {
    r.key.len() + r.range_end.len()
}

fn txn_bytes(txn: &Txn) -> usize {
    let compares: usize = txn
        .compare
        .iter()
        .map(|c| {
            range_bytes(&c.range)
                + match &c.target {
                    CompareTarget::Value(v) => v.len(),
                    _ => 0,
                }
        })
        .sum();
    let ops: usize = txn
        .success
        .iter()
        .chain(&txn.failure)
        .map(|op| match op {
            Op::Range(r) => range_bytes(&r.range),
            Op::Put(p) => p.key.len() + p.value.len(),
            Op::Delete(d) => range_bytes(&d.range),
            Op::Txn(nested) => txn_bytes(nested),
        })
        .sum();
    compares + ops
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{
        Compare, CompareOp, DeleteRequest, LeaseId, ProposalId, PutRequest, Revision,
    };

    const LIMITS: Limits = Limits {
        max_txn_ops: 3,
        max_command_bytes: 100,
        max_batch_commands: 2,
        max_batch_bytes: 150,
    };

    fn put(key: &str, value_len: usize) -> Op {
        Op::Put(PutRequest::new(
            key.as_bytes().to_vec(),
            vec![b'v'; value_len],
        ))
    }

    fn txn(success: Vec<Op>) -> Command {
        Command::Txn(Txn {
            success,
            ..Txn::default()
        })
    }

    fn nested(depth: usize) -> Txn {
        let mut t = Txn {
            success: vec![put("k", 0)],
            ..Txn::default()
        };
        for _ in 1..depth {
            t = Txn {
                success: vec![Op::Txn(t)],
                ..Txn::default()
            };
        }
        t
    }

    fn tagged(cmd: Command) -> Command {
        Command::Tagged {
            id: ProposalId {
                origin: 1,
                epoch: 1,
                seq: 1,
            },
            floor: 1,
            cmd: Box::new(cmd),
        }
    }

    #[test]
    fn op_counts_are_per_branch_and_per_level() {
        assert_eq!(
            txn(vec![put("a", 1), put("b", 1), put("c", 1)]).validate(&LIMITS),
            Ok(())
        );
        assert_eq!(
            txn(vec![put("a", 1), put("b", 1), put("c", 1), put("d", 1)]).validate(&LIMITS),
            Err(InvalidCommand::TooManyOps { ops: 4, max: 3 })
        );
        let compares = Command::Txn(Txn {
            compare: (0..4)
                .map(|i| Compare::mod_revision(format!("k{i}"), CompareOp::Equal, 0))
                .collect(),
            ..Txn::default()
        });
        assert_eq!(
            compares.validate(&LIMITS),
            Err(InvalidCommand::TooManyOps { ops: 4, max: 3 })
        );
        // Three in success and three in failure is within limits.
        let both = Command::Txn(Txn {
            success: vec![put("a", 1), put("b", 1), put("c", 1)],
            failure: vec![put("a", 1), put("b", 1), put("c", 1)],
            ..Txn::default()
        });
        assert_eq!(both.validate(&LIMITS), Ok(()));
        // A nested txn is held to the count on its own.
        let inner = Txn {
            success: vec![put("a", 1), put("b", 1), put("c", 1), put("d", 1)],
            ..Txn::default()
        };
        assert_eq!(
            txn(vec![Op::Txn(inner)]).validate(&LIMITS),
            Err(InvalidCommand::TooManyOps { ops: 4, max: 3 })
        );
    }

    #[test]
    fn nesting_is_bounded() {
        let big = Limits {
            max_command_bytes: usize::MAX,
            ..LIMITS
        };
        assert_eq!(Command::Txn(nested(MAX_TXN_DEPTH)).validate(&big), Ok(()));
        assert_eq!(
            Command::Txn(nested(MAX_TXN_DEPTH + 1)).validate(&big),
            Err(InvalidCommand::TooDeep {
                depth: MAX_TXN_DEPTH + 1,
                max: MAX_TXN_DEPTH
            })
        );
    }

    #[test]
    fn sizes_count_keys_values_and_compared_values() {
        assert_eq!(txn(vec![put("k", 99)]).validate(&LIMITS), Ok(()));
        assert_eq!(
            txn(vec![put("k", 100)]).validate(&LIMITS),
            Err(InvalidCommand::TooLarge {
                bytes: 101,
                max: 100
            })
        );
        let compared = Command::Txn(Txn {
            compare: vec![Compare {
                range: KeyRange::single("k"),
                op: CompareOp::Equal,
                target: CompareTarget::Value(vec![0; 60]),
            }],
            success: vec![Op::Delete(DeleteRequest {
                range: KeyRange {
                    key: b"a".to_vec(),
                    range_end: vec![b'z'; 40],
                },
                prev_kv: false,
            })],
            failure: vec![],
        });
        assert_eq!(compared.payload_bytes(), 1 + 60 + 1 + 40);
        assert!(matches!(
            compared.validate(&LIMITS),
            Err(InvalidCommand::TooLarge { bytes: 102, .. })
        ));
    }

    #[test]
    fn keys_must_be_given() {
        assert_eq!(
            txn(vec![put("", 1)]).validate(&LIMITS),
            Err(InvalidCommand::EmptyKey)
        );
        let compare = Command::Txn(Txn {
            compare: vec![Compare::mod_revision("", CompareOp::Equal, 0)],
            ..Txn::default()
        });
        assert_eq!(compare.validate(&LIMITS), Err(InvalidCommand::EmptyKey));
        // etcd's order: the op count of a level before its keys.
        assert!(matches!(
            txn(vec![put("", 1), put("b", 1), put("c", 1), put("d", 1)]).validate(&LIMITS),
            Err(InvalidCommand::TooManyOps { .. })
        ));
    }

    #[test]
    fn lease_grants_are_within_etcd_ttls_and_name_a_lease() {
        let grant = |id, ttl| Command::LeaseGrant {
            id: LeaseId(id),
            ttl,
        };
        assert_eq!(grant(7, MIN_LEASE_TTL).validate(&LIMITS), Ok(()));
        assert_eq!(grant(7, MAX_LEASE_TTL).validate(&LIMITS), Ok(()));
        assert_eq!(
            grant(7, MAX_LEASE_TTL + 1).validate(&LIMITS),
            Err(InvalidCommand::LeaseTtlTooLarge {
                ttl: MAX_LEASE_TTL + 1,
                max: MAX_LEASE_TTL
            })
        );
        assert!(matches!(
            grant(7, -5).validate(&LIMITS),
            Err(InvalidCommand::LeaseTtlTooSmall { ttl: -5, .. })
        ));
        assert_eq!(
            grant(0, 10).validate(&LIMITS),
            Err(InvalidCommand::NoLeaseId)
        );
        assert_eq!(
            Command::LeaseKeepAlive { id: LeaseId(3) }.validate(&LIMITS),
            Ok(())
        );
    }

    #[test]
    fn batches_and_tags_are_checked_member_by_member() {
        let ok = txn(vec![put("a", 10)]);
        assert_eq!(
            Command::Batch(vec![ok.clone(), ok.clone()]).validate(&LIMITS),
            Ok(())
        );
        assert!(matches!(
            Command::Batch(vec![ok.clone(); 3]).validate(&LIMITS),
            Err(InvalidCommand::BatchTooLarge { commands: 3, .. })
        ));
        let big = txn(vec![put("a", 90)]);
        assert!(matches!(
            Command::Batch(vec![big.clone(), big]).validate(&LIMITS),
            Err(InvalidCommand::BatchTooLarge { bytes: 182, .. })
        ));
        assert_eq!(
            Command::Batch(vec![ok.clone(), txn(vec![put("", 1)])]).validate(&LIMITS),
            Err(InvalidCommand::EmptyKey)
        );
        assert!(matches!(
            Command::Batch(vec![Command::Compact {
                revision: Revision(1)
            }])
            .validate(&LIMITS),
            Err(InvalidCommand::NotBatchable(_))
        ));
        assert!(matches!(
            Command::Batch(vec![Command::Batch(vec![])]).validate(&LIMITS),
            Err(InvalidCommand::NotBatchable(_))
        ));
        assert_eq!(
            Command::Batch(vec![ok.clone()]).validate(&Limits::ETCD),
            Err(InvalidCommand::BatchTooLarge {
                commands: 1,
                bytes: 11,
                max_commands: 0,
                max_bytes: 0
            })
        );
        // A tag is looked through; it must wrap one plain command.
        assert_eq!(tagged(ok.clone()).validate(&LIMITS), Ok(()));
        assert_eq!(
            tagged(txn(vec![put("a", 200)])).validate(&LIMITS),
            Err(InvalidCommand::TooLarge {
                bytes: 201,
                max: 100
            })
        );
        assert_eq!(
            tagged(Command::Batch(vec![ok.clone()])).validate(&LIMITS),
            Err(InvalidCommand::MalformedProposal)
        );
        assert_eq!(
            tagged(tagged(ok)).validate(&LIMITS),
            Err(InvalidCommand::MalformedProposal)
        );
        assert_eq!(
            Command::Batch(vec![tagged(txn(vec![put("a", 1)]))]).validate(&LIMITS),
            Ok(())
        );
    }

    #[test]
    fn etcd_limits_are_etcds_defaults() {
        let ops = |n| txn((0..n).map(|i| put(&format!("k{i}"), 1)).collect());
        assert_eq!(ops(128).validate(&Limits::ETCD), Ok(()));
        assert!(matches!(
            ops(129).validate(&Limits::ETCD),
            Err(InvalidCommand::TooManyOps { ops: 129, max: 128 })
        ));
        assert!(matches!(
            txn(vec![put("k", 1536 * 1024)]).validate(&Limits::ETCD),
            Err(InvalidCommand::TooLarge { .. })
        ));
    }
}
