//! The only file that names RocksDB: one database, one WAL, the column
//! families of [`crate::schema`], atomic write batches and ordered scans.
//!
//! Everything above this file sees bytes, [`Cf`]s and [`Batch`]es, so the
//! engine could be swapped without touching the MVCC or Raft code.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamilyDescriptor, DBIteratorWithThreadMode,
    DBRawIteratorWithThreadMode, Direction, IteratorMode, Options, ReadOptions, WriteBatch,
    WriteBufferManager, WriteOptions, DB,
};

use crate::error::StoreError;
use crate::schema::Cf;

/// One row: key and value.
pub type Row = (Vec<u8>, Vec<u8>);

/// What RocksDB may hold in memory, memtables and cached blocks together:
/// one LRU block cache of this size, shared by every column family, to
/// which a write buffer manager charges the memtables. RocksDB's defaults
/// give each column family its own cache and up to two 64 MiB memtables,
/// so a node under a steady write load grew by hundreds of megabytes
/// (every put writes to four column families) before the first flush;
/// with one budget, memtables and cached blocks stay within it (the
/// index and filter blocks of open tables are outside it, as by default).
pub const MEMORY_BUDGET_BYTES: usize = 128 << 20;

/// A column family's memtable size: a flush at most every 16 MiB, so
/// several column families fit the budget at once.
const MEMTABLE_BYTES: usize = 16 << 20;

/// How many flushed tables `history` gathers in L0 before they are
/// compacted into the level below (RocksDB's default is 4). Every write
/// adds a row at its own key's place (the user key, then the revision), so
/// each L0 table spans the whole key space and each compaction rewrites
/// all of the level below: fewer, larger compactions rewrite it less
/// often. Its reads are seeks of one key's rows, which look in each L0
/// table's index and its blocks in the cache.
const HISTORY_L0_COMPACTION_TRIGGER: i32 = 8;

/// A shared handle on the one RocksDB instance of a node.
#[derive(Clone)]
pub struct Engine {
    db: Arc<DB>,
    path: PathBuf,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("path", &self.path).finish()
    }
}

impl Engine {
    /// Opens (or creates) the database under `dir`, with every column family.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir).map_err(|e| StoreError::Io(dir.display().to_string(), e))?;
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        opts.set_compression_type(rocksdb::DBCompressionType::Lz4);
        opts.increase_parallelism(2);
        // The WAL carries the Raft metadata (vote, purge point) and the
        // state machine's bookkeeping written with it: recover every write
        // that was synced, drop a torn tail. The log itself is in segment
        // files of its own (`crate::segment_log`).
        opts.set_wal_recovery_mode(rocksdb::DBRecoveryMode::PointInTime);
        // The state machine's rows skip the WAL ([`Engine::write_unlogged`]):
        // they are durable once flushed, and every column family flushes
        // together, so a crash leaves the state exactly as it was at one
        // flush (its last-applied id with it), never one column family
        // ahead of another. The Raft log re-applies the rest.
        opts.set_atomic_flush(true);
        let cache = Cache::new_lru_cache(MEMORY_BUDGET_BYTES);
        let memtables = WriteBufferManager::new_write_buffer_manager_with_cache(
            MEMORY_BUDGET_BYTES / 2,
            false,
            cache.clone(),
        );
        opts.set_write_buffer_manager(&memtables);
        let mut tables = BlockBasedOptions::default();
        tables.set_block_cache(&cache);
        // Column families read by whole key get Bloom filters, in their
        // tables and their memtables: most of their reads are for one key
        // that is often absent (a create's guard reads the key it creates),
        // and a filter answers such a miss without searching each level
        // and memtable. Ten bits per key: about 1% false positives for
        // 1.25 bytes a key. The others are read by range or seek, where a
        // whole-key filter does not apply.
        let mut filtered = BlockBasedOptions::default();
        filtered.set_block_cache(&cache);
        filtered.set_bloom_filter(10.0, false);
        let cfs = Cf::ALL.iter().map(|cf| {
            let mut cf_opts = Options::default();
            cf_opts.set_compression_type(rocksdb::DBCompressionType::Lz4);
            cf_opts.set_write_buffer_size(MEMTABLE_BYTES);
            if cf.read_by_key() {
                cf_opts.set_block_based_table_factory(&filtered);
                cf_opts.set_memtable_prefix_bloom_ratio(0.02);
                cf_opts.set_memtable_whole_key_filtering(true);
            } else {
                cf_opts.set_block_based_table_factory(&tables);
            }
            if *cf == Cf::History {
                cf_opts.set_level_zero_file_num_compaction_trigger(HISTORY_L0_COMPACTION_TRIGGER);
            }
            ColumnFamilyDescriptor::new(cf.name(), cf_opts)
        });
        let db = DB::open_cf_descriptors(&opts, dir, cfs)?;
        Ok(Self {
            db: Arc::new(db),
            path: dir.to_path_buf(),
        })
    }

    fn handle(&self, cf: Cf) -> Result<&rocksdb::ColumnFamily, StoreError> {
        self.db
            .cf_handle(cf.name())
            .ok_or_else(|| StoreError::Corrupt(format!("column family {} is missing", cf.name())))
    }

    pub fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.db.get_cf(self.handle(cf)?, key)?)
    }

    pub fn batch(&self) -> Batch<'_> {
        Batch {
            engine: self,
            inner: WriteBatch::default(),
        }
    }

    /// An empty batch whose buffer already holds `bytes`. RocksDB keeps a
    /// batch's records in one string that doubles as it grows, copying
    /// what it held each time: a batch of a few hundred KiB (an entry of
    /// 256 puts) was copied about once more in all, and allocated a dozen
    /// times. Callers pass what they are about to stage ([`RECORD_OVERHEAD`]
    /// per row beyond its key and value).
    pub fn batch_with_capacity(&self, bytes: usize) -> Batch<'_> {
        Batch {
            engine: self,
            inner: WriteBatch::with_capacity_bytes(bytes),
        }
    }

    /// Writes a batch atomically. `sync` fsyncs the WAL before returning,
    /// which also persists every earlier unsynced batch.
    pub fn write(&self, batch: Batch<'_>, sync: bool) -> Result<(), StoreError> {
        let mut opts = WriteOptions::default();
        opts.set_sync(sync);
        self.db.write_opt(batch.inner, &opts)?;
        Ok(())
    }

    /// Writes a batch atomically, without the WAL: a crash loses it unless
    /// an [`Engine::flush_all`] completed after it. Only for rows whose loss
    /// is recovered another way: the state machine's (re-applied from the
    /// Raft log, which is never purged past a flushed state; see
    /// `crate::purge`) and a snapshot install's (redone from its staged
    /// file). It saves writing every such row twice, to the WAL and to the
    /// memtable, and makes the log's fsyncs carry only the log.
    pub fn write_unlogged(&self, batch: Batch<'_>) -> Result<(), StoreError> {
        let mut opts = WriteOptions::default();
        opts.disable_wal(true);
        self.db.write_opt(batch.inner, &opts)?;
        Ok(())
    }

    /// Writes every column family's memtables to table files, atomically
    /// (one flush of them all), and waits: every write before, unlogged
    /// ones included, is durable afterwards.
    pub fn flush_all(&self) -> Result<(), StoreError> {
        let handles = Cf::ALL
            .iter()
            .map(|&cf| self.handle(cf))
            .collect::<Result<Vec<_>, _>>()?;
        let mut opts = rocksdb::FlushOptions::default();
        opts.set_wait(true);
        self.db.flush_cfs_opt(&handles, &opts)?;
        Ok(())
    }

    /// Rows of `cf` with `start <= key < end` (no `end`: to the last row), in
    /// ascending key order.
    pub fn scan(&self, cf: Cf, start: &[u8], end: Option<&[u8]>) -> Result<Scan<'_>, StoreError> {
        self.scan_with(cf, start, end, Direction::Forward, ReadOptions::default())
    }

    fn scan_with<'a>(
        &'a self,
        cf: Cf,
        start: &[u8],
        end: Option<&[u8]>,
        direction: Direction,
        mut opts: ReadOptions,
    ) -> Result<Scan<'a>, StoreError> {
        if let Some(end) = end {
            opts.set_iterate_upper_bound(end.to_vec());
        }
        let iter =
            self.db
                .iterator_cf_opt(self.handle(cf)?, opts, IteratorMode::From(start, direction));
        Ok(Scan { iter })
    }

    /// The last row of `cf` whose key is in `lower..=key`, read with
    /// `opts`: one seek back. The lower bound also bounds the work: without
    /// it, a seek that finds no live row near `key` steps back over every
    /// deleted row before it (a purged history's tombstones), however many.
    fn floor_with(
        &self,
        cf: Cf,
        lower: &[u8],
        key: &[u8],
        mut opts: ReadOptions,
    ) -> Result<Option<Row>, StoreError> {
        opts.set_iterate_lower_bound(lower.to_vec());
        let mut iter = self.db.raw_iterator_cf_opt(self.handle(cf)?, opts);
        iter.seek_for_prev(key);
        match iter.item() {
            Some((k, v)) => Ok(Some((k.to_vec(), v.to_vec()))),
            None => iter.status().map(|()| None).map_err(StoreError::from),
        }
    }

    /// A cursor over `cf` that seeks both ways: one iterator for many
    /// lookups, each a seek rather than a new iterator.
    pub fn cursor(&self, cf: Cf) -> Result<Cursor<'_>, StoreError> {
        Ok(Cursor {
            iter: self.db.raw_iterator_cf(self.handle(cf)?),
        })
    }

    /// A cursor over the rows of `cf` with `lower <= key < upper` (no
    /// `upper`: to the last row), read with `opts`, not yet positioned.
    fn cursor_within(
        &self,
        cf: Cf,
        lower: &[u8],
        upper: Option<&[u8]>,
        mut opts: ReadOptions,
    ) -> Result<Cursor<'_>, StoreError> {
        opts.set_iterate_lower_bound(lower.to_vec());
        if let Some(upper) = upper {
            opts.set_iterate_upper_bound(upper.to_vec());
        }
        Ok(Cursor {
            iter: self.db.raw_iterator_cf_opt(self.handle(cf)?, opts),
        })
    }

    /// The last row of `cf`, if any.
    pub fn last(&self, cf: Cf) -> Result<Option<Row>, StoreError> {
        let mut iter = self.db.iterator_cf(self.handle(cf)?, IteratorMode::End);
        match iter.next() {
            Some(row) => {
                let (k, v) = row?;
                Ok(Some((k.into_vec(), v.into_vec())))
            }
            None => Ok(None),
        }
    }

    /// Runs `f` against a consistent point-in-time view of the whole database.
    pub fn with_snapshot<R>(&self, f: impl FnOnce(&SnapshotView<'_>) -> R) -> R {
        let snapshot = self.db.snapshot();
        f(&SnapshotView {
            engine: self,
            snapshot,
        })
    }

    /// Removes every row of `cf` (used when a snapshot replaces the state).
    pub fn clear(&self, cf: Cf) -> Result<(), StoreError> {
        let Some((last, _)) = self.last(cf)? else {
            return Ok(());
        };
        let mut end = last;
        end.push(0);
        self.db
            .delete_range_cf(self.handle(cf)?, [].as_slice(), end.as_slice())?;
        Ok(())
    }

    /// Approximate bytes on disk (SST files plus memtables).
    pub fn approximate_size(&self) -> u64 {
        let mut total = 0;
        for cf in Cf::ALL {
            if let Ok(handle) = self.handle(cf) {
                for prop in [
                    "rocksdb.total-sst-files-size",
                    "rocksdb.cur-size-all-mem-tables",
                ] {
                    if let Ok(Some(n)) = self.db.property_int_value_cf(handle, prop) {
                        total += n;
                    }
                }
            }
        }
        total
    }
}

/// A consistent view of the database at one instant.
pub struct SnapshotView<'a> {
    engine: &'a Engine,
    snapshot: rocksdb::Snapshot<'a>,
}

impl SnapshotView<'_> {
    pub fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.snapshot.get_cf(self.engine.handle(cf)?, key)?)
    }

    pub fn scan(&self, cf: Cf, start: &[u8], end: Option<&[u8]>) -> Result<Scan<'_>, StoreError> {
        self.engine
            .scan_with(cf, start, end, Direction::Forward, self.read_options())
    }

    /// Read options that read this view's snapshot.
    fn read_options(&self) -> ReadOptions {
        let mut opts = ReadOptions::default();
        opts.set_snapshot(&self.snapshot);
        opts
    }
}

/// An ordered scan over one column family.
pub struct Scan<'a> {
    iter: DBIteratorWithThreadMode<'a, DB>,
}

impl Iterator for Scan<'_> {
    type Item = Result<(Box<[u8]>, Box<[u8]>), StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.iter.next().map(|row| row.map_err(StoreError::from))
    }
}

/// A positioned iterator over one column family ([`Engine::cursor`]).
pub struct Cursor<'a> {
    iter: DBRawIteratorWithThreadMode<'a, DB>,
}

impl Cursor<'_> {
    /// Moves to the first row whose key is at least `key`.
    pub fn seek(&mut self, key: &[u8]) {
        self.iter.seek(key);
    }

    /// Moves to the row after the current one.
    pub fn next(&mut self) {
        self.iter.next();
    }

    /// Moves to the last row whose key is at most `key`.
    pub fn seek_for_prev(&mut self, key: &[u8]) {
        self.iter.seek_for_prev(key);
    }

    /// Moves to the row before the current one.
    pub fn prev(&mut self) {
        self.iter.prev();
    }

    /// The current row, or `None` past either end (or after an error,
    /// which [`Cursor::status`] tells).
    pub fn row(&self) -> Option<(&[u8], &[u8])> {
        self.iter.item()
    }

    /// The error that ended the cursor early, if any.
    pub fn status(&self) -> Result<(), StoreError> {
        Ok(self.iter.status()?)
    }
}

/// What a row costs a [`Batch`] beyond its key and value: the record's
/// type, column family and two length prefixes (RocksDB's
/// `WriteBatchInternal::Put`), rounded up.
pub const RECORD_OVERHEAD: usize = 16;

/// An atomic group of writes across column families.
pub struct Batch<'a> {
    engine: &'a Engine,
    inner: WriteBatch,
}

impl Batch<'_> {
    pub fn put(&mut self, cf: Cf, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        self.inner.put_cf(self.engine.handle(cf)?, key, value);
        Ok(())
    }

    pub fn delete(&mut self, cf: Cf, key: &[u8]) -> Result<(), StoreError> {
        self.inner.delete_cf(self.engine.handle(cf)?, key);
        Ok(())
    }

    /// Deletes rows with `start <= key < end`.
    pub fn delete_range(&mut self, cf: Cf, start: &[u8], end: &[u8]) -> Result<(), StoreError> {
        self.inner
            .delete_range_cf(self.engine.handle(cf)?, start, end);
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// The bytes the batch holds: its records as RocksDB encodes them.
    #[cfg(test)]
    pub(crate) fn size_in_bytes(&self) -> usize {
        self.inner.size_in_bytes()
    }
}

impl From<rocksdb::Error> for StoreError {
    fn from(e: rocksdb::Error) -> Self {
        StoreError::Engine(e.into_string())
    }
}

/// A reader of one row as RocksDB holds it ([`Source::visit_row`]).
pub(crate) type RowVisitor<'a> = &'a mut dyn FnMut(&[u8]) -> Result<(), StoreError>;

/// Something rows can be read from: the live engine or a point-in-time view.
pub(crate) trait Source {
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError>;
    /// Runs `visit` on the row `key` of `cf` where RocksDB holds it (pinned,
    /// not copied); whether there was one.
    fn visit_row(&self, cf: Cf, key: &[u8], visit: RowVisitor<'_>) -> Result<bool, StoreError>;
    fn scan(&self, cf: Cf, start: &[u8], end: Option<&[u8]>) -> Result<Scan<'_>, StoreError>;
    /// The last row of `cf` whose key is in `lower..=key`, if any.
    fn floor(&self, cf: Cf, lower: &[u8], key: &[u8]) -> Result<Option<Row>, StoreError>;
    /// A cursor over the rows of `cf` with `lower <= key < upper` (no
    /// `upper`: to the last row), not yet positioned: rows are read where
    /// RocksDB holds them, and it can skip ahead with a seek.
    fn cursor_between(
        &self,
        cf: Cf,
        lower: &[u8],
        upper: Option<&[u8]>,
    ) -> Result<Cursor<'_>, StoreError>;
}

impl Source for Engine {
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Engine::get(self, cf, key)
    }
    fn visit_row(&self, cf: Cf, key: &[u8], visit: RowVisitor<'_>) -> Result<bool, StoreError> {
        match self.db.get_pinned_cf(self.handle(cf)?, key)? {
            Some(row) => visit(&row).map(|()| true),
            None => Ok(false),
        }
    }
    fn scan(&self, cf: Cf, start: &[u8], end: Option<&[u8]>) -> Result<Scan<'_>, StoreError> {
        Engine::scan(self, cf, start, end)
    }
    fn floor(&self, cf: Cf, lower: &[u8], key: &[u8]) -> Result<Option<Row>, StoreError> {
        self.floor_with(cf, lower, key, ReadOptions::default())
    }
    fn cursor_between(
        &self,
        cf: Cf,
        lower: &[u8],
        upper: Option<&[u8]>,
    ) -> Result<Cursor<'_>, StoreError> {
        self.cursor_within(cf, lower, upper, ReadOptions::default())
    }
}

impl Source for SnapshotView<'_> {
    fn get(&self, cf: Cf, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        SnapshotView::get(self, cf, key)
    }
    fn visit_row(&self, cf: Cf, key: &[u8], visit: RowVisitor<'_>) -> Result<bool, StoreError> {
        match self.snapshot.get_pinned_cf(self.engine.handle(cf)?, key)? {
            Some(row) => visit(&row).map(|()| true),
            None => Ok(false),
        }
    }
    fn scan(&self, cf: Cf, start: &[u8], end: Option<&[u8]>) -> Result<Scan<'_>, StoreError> {
        SnapshotView::scan(self, cf, start, end)
    }
    fn floor(&self, cf: Cf, lower: &[u8], key: &[u8]) -> Result<Option<Row>, StoreError> {
        self.engine.floor_with(cf, lower, key, self.read_options())
    }
    fn cursor_between(
        &self,
        cf: Cf,
        lower: &[u8],
        upper: Option<&[u8]>,
    ) -> Result<Cursor<'_>, StoreError> {
        self.engine
            .cursor_within(cf, lower, upper, self.read_options())
    }
}
