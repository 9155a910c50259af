//! The watch cache: every node's in-memory view of its Kubernetes objects.
//!
//! Per resource type it holds the current objects (a persistent ordered
//! map keyed by the etcd key, so a namespace is a key range) and a ring of
//! recent events, each paired with an immutable snapshot of the type's
//! objects right after that revision (structural sharing makes one per
//! revision cheap). Reads at the current state, at any retained revision
//! (Exact, continue tokens) and watches from a retained revision are served
//! from memory; older ones fall back to the MVCC history in storage.
//!
//! Invariants:
//! - The cache is fed by one task that reads the state machine's
//!   revision-ordered event log from the cache's own revision on, through
//!   storage's event cursor (`Store::events`, one batch of revisions per
//!   step), so it never skips or reorders a revision; when the cursor
//!   reports that the history it needs was compacted, the cache is
//!   rebuilt. [`WatchCache::revision`] is the
//!   revision every type is complete up to, quiet types included: it moves
//!   to the store's applied revision even when no event touched a type.
//! - A type's ring holds every event of that type after its `base`
//!   revision, and a snapshot for `base` and for the last revision of
//!   each feed step that touched the type, so every event lies between two
//!   snapshots. The objects at a revision between two snapshots are the
//!   earlier one with the ring's events up to that revision laid over it
//!   ([`TypeCache::snapshot_at`]). One snapshot per step rather than per
//!   revision: a persistent map shared with a snapshot copies the nodes on
//!   the path of the next insert, so a snapshot after every write made each
//!   write copy (and later free) a few nodes of pointers.
//! - When a Raft snapshot replaces the whole state (or history the cache
//!   still needed was compacted), the cache is rebuilt from one consistent
//!   read of storage and the rings restart at that revision.
//! - The lock is never held across an await; readers clone a snapshot
//!   (O(1)) and iterate it unlocked.
//! - A watcher is woken by the revisions that can change what it sees
//!   ([`WatchCache::subscribe_scope`]): every revision with an event under
//!   its key prefix (its type, or its type in one namespace) wakes it, and
//!   so does every rebuild or change of the served types. Revisions that
//!   touch only other types or namespaces do not.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use imbl::OrdMap;
use kubestore_storage::{
    Event, EventKind, EventStep, KeyRange, Revision, RevisionEvents, Stage, Store, StoreError,
};
use serde_json::Value;
use tokio::sync::watch;

use crate::kube::crd;
use crate::kube::object;
use crate::kube::resources::{self, ResourceType, TypeSet};
use crate::kube::selectors::{Attrs, Selectors};

/// Every key the cache mirrors starts with this.
const REGISTRY_PREFIX: &str = "/registry/";

/// At most this many objects are fed on the feed's own task per wake
/// ([`WatchCache::run`]); a step with more goes to the blocking pool, so
/// the feed never holds an async worker for long. Events outside the
/// registry (the etcd API's keys) feed nothing and do not count. Feeding
/// an object copies its stored bytes and inserts it (its render waits for
/// a reader, [`CachedObject`]), about a microsecond: a few entries of REST
/// writes from 64 clients (about 30 objects each) fit, where rendering on
/// the feed allowed 8 (BENCHMARKS.md, "The watch cache feeds from memory
/// on its own task", and "The watch cache renders an object when it is
/// first read").
const MEMORY_FEED_OBJECTS: usize = 256;

/// At most this many objects are rendered on an async worker by
/// [`CachedObject::render_all`]; more go to the blocking pool (a render is
/// a few microseconds).
const RENDER_ON_WORKER: usize = 64;

/// How a feed step of the cache may read the event log.
#[derive(Debug, Clone, Copy)]
enum Reads {
    /// Storage, blocking: anything, rebuilding when it must.
    Storage,
    /// Storage's ring of recent events alone, feeding at most this many
    /// more objects.
    Memory { objects: usize },
}

/// Whether `event` is the registry's: a Kubernetes object the cache
/// mirrors (the etcd API's own keys belong to no type).
fn in_registry(event: &Event) -> bool {
    event.kv.key.starts_with(REGISTRY_PREFIX.as_bytes())
}

/// How many of `batch`'s events are the registry's: the objects a feed of
/// it adds.
fn registry_events(batch: &[RevisionEvents]) -> usize {
    batch
        .iter()
        .flat_map(|(_, events)| events.iter())
        .filter(|e| in_registry(e))
        .count()
}

/// Where a feed step left the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fed {
    /// At the store's applied revision.
    CaughtUp,
    /// Behind it: the rest needs a storage read, or more rendering than
    /// the memory feed allows.
    NeedsStorage,
}

/// One object as clients see it (`kind`, `apiVersion` and
/// `metadata.resourceVersion` filled in), held as JSON alone: lists and
/// watches write its bytes, selectors read its [`Attrs`], and whoever
/// needs the tree parses it ([`CachedObject::to_value`]).
///
/// Why not keep the parsed `serde_json::Value` too: it was 5.5 KB of the
/// 7.6 KB a 1 KiB ConfigMap cost in the cache (serde_json's `BTreeMap`
/// allocates a node of about 640 bytes for each small map), and it is
/// read only where JSON bytes will not do (GET and lists as YAML or
/// Table, the first protobuf encoding, patch, scale, deletecollection,
/// controllers), which can afford a parse of a few microseconds
/// (`cache_memory` example, BENCHMARKS.md).
///
/// The JSON lives inside the object's watch event line
/// (`{"type":"<T>","object":<json>}\n`) for the event type it entered
/// the cache with (`ADDED` for a create or a load, `MODIFIED` for an
/// update, `DELETED` for a tombstone): the line every watcher sends for
/// that event is shared, and costs no second copy of the object.
///
/// An object decoded from storage is rendered lazily, as kube's
/// `cachingObject` serializes an object for watchers on first use: it
/// enters the cache as its stored bytes, and the first reader of its JSON,
/// its attributes or its tree renders the line (once; the stored bytes
/// are then dropped). Every node feeds every write into its cache, and
/// most writes are read on few nodes or none: a write nobody lists or
/// watches on a node costs that node a copy of its bytes, not a render.
#[derive(Debug)]
pub struct CachedObject {
    /// Its etcd key, shared with the cache's maps that index it.
    pub key: Arc<str>,
    /// The revision that last modified it (its resourceVersion).
    pub revision: u64,
    /// Its type, which the render reads.
    rt: &'static ResourceType,
    line_type: WatchEventType,
    /// The value as stored, until the object is rendered (then `None`:
    /// the line holds it).
    stored: Mutex<Option<Bytes>>,
    /// The line and attributes, made on first use.
    rendered: std::sync::OnceLock<Rendered>,
    /// Its message in a binary wire form (protobuf), made by the front end
    /// that first needs it ([`CachedObject::encoded_with`]) and kept, so
    /// every later list splices the bytes instead of encoding it again.
    encoded: std::sync::OnceLock<Bytes>,
}

/// What rendering an object makes.
#[derive(Debug)]
struct Rendered {
    /// The watch event line of the object's `line_type`; the JSON is what
    /// lies between its prefix and [`LINE_SUFFIX`] ([`CachedObject::json`]).
    line: Bytes,
    /// Its labels and field label values, for selectors.
    attrs: Attrs,
}

/// The type of a watch event carrying an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchEventType {
    Added,
    Modified,
    Deleted,
}

impl WatchEventType {
    pub fn as_str(self) -> &'static str {
        match self {
            WatchEventType::Added => "ADDED",
            WatchEventType::Modified => "MODIFIED",
            WatchEventType::Deleted => "DELETED",
        }
    }

    /// What a watch event line of this type holds before the object.
    fn line_prefix(self) -> &'static [u8] {
        match self {
            WatchEventType::Added => br#"{"type":"ADDED","object":"#,
            WatchEventType::Modified => br#"{"type":"MODIFIED","object":"#,
            WatchEventType::Deleted => br#"{"type":"DELETED","object":"#,
        }
    }
}

/// What a watch event line holds after the object.
const LINE_SUFFIX: &[u8] = b"}\n";

impl CachedObject {
    /// An object of type `rt` from its stored value, rendered on first
    /// use (`None`, logged, when the value is not a JSON object: one
    /// that does not start with `{`). A value that starts like an object
    /// but does not parse as one renders as an object with its name and
    /// namespace alone (logged): only a write through the etcd API can
    /// store one, and the cache serves every key it holds.
    pub fn decode(
        rt: &'static ResourceType,
        key: &[u8],
        value: &[u8],
        revision: u64,
        line_type: WatchEventType,
    ) -> Option<Self> {
        let key = Arc::from(String::from_utf8_lossy(key));
        Self::decode_keyed(rt, key, value, revision, line_type)
    }

    /// [`CachedObject::decode`] under a key already decoded (the feed has
    /// it, often as the previous state's).
    fn decode_keyed(
        rt: &'static ResourceType,
        key: Arc<str>,
        value: &[u8],
        revision: u64,
        line_type: WatchEventType,
    ) -> Option<Self> {
        if value.trim_ascii_start().first() != Some(&b'{') {
            object::not_an_object(key.as_bytes());
            return None;
        }
        Some(Self {
            key,
            revision,
            rt,
            line_type,
            // A copy, not a share of `value`'s buffer: a value decoded
            // from a log entry may share the whole entry's.
            stored: Mutex::new(Some(Bytes::copy_from_slice(value))),
            rendered: std::sync::OnceLock::new(),
            encoded: std::sync::OnceLock::new(),
        })
    }

    /// Wraps an object already in client form (e.g. a delete's last state)
    /// of type `rt`, as an `ADDED` line.
    pub fn from_value(rt: &'static ResourceType, object: &Value) -> Option<Self> {
        let meta = |f: &str| {
            object
                .pointer(&format!("/metadata/{f}"))
                .and_then(Value::as_str)
        };
        let revision = meta("resourceVersion")
            .and_then(|r| r.parse().ok())
            .unwrap_or(0);
        let key = meta("name")
            .map(|name| rt.key(meta("namespace"), name))
            .unwrap_or_default()
            .into();
        Self::build(key, rt, revision, object, WatchEventType::Added)
    }

    /// The object of type `rt` at `revision` whose client form is
    /// `object`, rendered now.
    fn build(
        key: Arc<str>,
        rt: &'static ResourceType,
        revision: u64,
        object: &Value,
        line_type: WatchEventType,
    ) -> Option<Self> {
        let line = Self::line_of(object, line_type)?;
        let rendered = std::sync::OnceLock::new();
        let _ = rendered.set(Rendered {
            line,
            attrs: Attrs::of(rt, object),
        });
        Some(Self {
            key,
            revision,
            rt,
            line_type,
            stored: Mutex::new(None),
            rendered,
            encoded: std::sync::OnceLock::new(),
        })
    }

    /// The watch event line of `line_type` for `object`.
    fn line_of(object: &Value, line_type: WatchEventType) -> Option<Bytes> {
        let prefix = line_type.line_prefix();
        let mut line = Vec::with_capacity(1024);
        line.extend_from_slice(prefix);
        serde_json::to_writer(&mut line, object).ok()?;
        line.extend_from_slice(LINE_SUFFIX);
        // Exactly the bytes: the cache holds one of these per object.
        line.shrink_to_fit();
        Some(Bytes::from(line))
    }

    /// Renders those of `objects` not rendered yet, so that a read about
    /// to write them all (a list, a selector's scan) does not render them
    /// one by one on an async worker: more than [`RENDER_ON_WORKER`] go
    /// to the blocking pool. The first list of a large collection a node
    /// serves renders every object of it (100,000 ConfigMaps: about a
    /// quarter of a second of CPU).
    pub async fn render_all<'a>(objects: impl IntoIterator<Item = &'a Arc<CachedObject>>) {
        let pending: Vec<Arc<CachedObject>> = objects
            .into_iter()
            .filter(|o| o.rendered.get().is_none())
            .cloned()
            .collect();
        if pending.len() <= RENDER_ON_WORKER {
            for o in &pending {
                o.rendered();
            }
            return;
        }
        let span = tracing::debug_span!("render_all", objects = pending.len());
        let rendered = tokio::task::spawn_blocking(move || {
            span.in_scope(|| {
                for o in &pending {
                    o.rendered();
                }
            })
        })
        .await;
        if let Err(e) = rendered {
            // The objects render when read, on the caller's task.
            tracing::debug!(error = %e, "rendering off the worker failed");
        }
    }

    /// Whether the object has been rendered.
    #[cfg(test)]
    fn is_rendered(&self) -> bool {
        self.rendered.get().is_some()
    }

    /// The stored value, while the object is not rendered.
    fn stored(&self) -> Option<Bytes> {
        self.stored
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The line and attributes, rendered from the stored bytes on the
    /// first call.
    fn rendered(&self) -> &Rendered {
        self.rendered.get_or_init(|| {
            // The one initialisation takes the stored bytes: the line
            // holds the object from now on.
            let stored = self
                .stored
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take()
                .unwrap_or_default();
            self.render(&stored)
        })
    }

    /// Renders `value`, the stored bytes: the line straight from them,
    /// parsing only what the selectors read; what cannot be copied is
    /// parsed whole; what does not parse as an object is rendered as its
    /// name and namespace alone.
    fn render(&self, value: &[u8]) -> Rendered {
        let rt = self.rt;
        if let Some((members, metadata)) = Attrs::reads(rt) {
            let prefix = self.line_type.line_prefix();
            let mut line = Vec::with_capacity(prefix.len() + value.len() + 96);
            line.extend_from_slice(prefix);
            let wanted = object::Wanted {
                members: &members,
                metadata: &metadata,
            };
            if let Some(read) =
                object::write_client_json(rt, value, self.revision, wanted, &mut line)
            {
                line.extend_from_slice(LINE_SUFFIX);
                line.shrink_to_fit();
                return Rendered {
                    line: Bytes::from(line),
                    attrs: Attrs::of(rt, &read),
                };
            }
        }
        let object = match serde_json::from_slice::<Value>(value) {
            Ok(Value::Object(stored)) => object::to_client(rt, stored, self.revision),
            _ => object::named_only(rt, &self.key, self.revision),
        };
        let line = Self::line_of(&object, self.line_type).unwrap_or_else(|| {
            // Printing a tree of JSON values into memory does not fail;
            // an empty object keeps the line well formed if it ever did.
            let mut line = self.line_type.line_prefix().to_vec();
            line.extend_from_slice(b"{}");
            line.extend_from_slice(LINE_SUFFIX);
            Bytes::from(line)
        });
        Rendered {
            line,
            attrs: Attrs::of(rt, &object),
        }
    }

    /// Where the JSON lies in the line.
    fn json_range(&self) -> std::ops::Range<usize> {
        self.line_type.line_prefix().len()..self.line().len() - LINE_SUFFIX.len()
    }

    /// The watch event line of the type the object entered with.
    fn line(&self) -> &Bytes {
        &self.rendered().line
    }

    /// The object as JSON.
    pub fn json(&self) -> &[u8] {
        &self.line()[self.json_range()]
    }

    /// The object as JSON, sharing the cache's bytes.
    pub fn json_bytes(&self) -> Bytes {
        self.line().slice(self.json_range())
    }

    /// The object as a tree, parsed from its JSON on every call: a few
    /// microseconds for a 1 KiB object. Lists and watches never need it.
    pub fn to_value(&self) -> Value {
        // The bytes were written by serde_json from a `Value`.
        serde_json::from_slice(self.json()).unwrap_or(Value::Null)
    }

    /// The object's `metadata` alone, as `{"metadata": ...}`, without its
    /// `managedFields`, for readers that need nothing else (the
    /// controllers, on every event): the other members, and the managed
    /// fields, are skipped as they are parsed, with no tree built for them.
    pub fn to_metadata_value(&self) -> Value {
        #[derive(serde::Deserialize)]
        struct MetadataOnly {
            metadata: Option<UnmanagedMetadata>,
        }
        let wrap = |metadata| {
            Value::Object(serde_json::Map::from_iter([(
                "metadata".to_string(),
                Value::Object(metadata),
            )]))
        };
        // Not rendered yet: the stored metadata is the client's but for
        // the resourceVersion, so the leader's controllers, which read
        // every write, render nothing.
        if self.rendered.get().is_none() {
            if let Some(stored) = self.stored() {
                if let Ok(MetadataOnly { metadata }) = serde_json::from_slice(&stored) {
                    let UnmanagedMetadata(mut metadata) = metadata.unwrap_or_default();
                    metadata.insert(
                        "resourceVersion".into(),
                        Value::String(self.revision.to_string()),
                    );
                    return wrap(metadata);
                }
            }
        }
        match serde_json::from_slice::<MetadataOnly>(self.json()) {
            Ok(MetadataOnly {
                metadata: Some(UnmanagedMetadata(metadata)),
            }) => wrap(metadata),
            _ => Value::Null,
        }
    }

    /// Whether `selectors` select this object: from its rendered
    /// attributes, or (rendered for another definition of its type) from
    /// the object itself.
    pub fn matches(&self, selectors: &Selectors) -> bool {
        if selectors.is_empty() {
            return true;
        }
        selectors
            .matches_attrs(&self.rendered().attrs)
            .unwrap_or_else(|| selectors.matches(&self.to_value()))
    }

    /// The JSON watch event line of `event` for this object: the shared
    /// line when it is the type the object entered the cache with, else
    /// built now (an initial `ADDED` of an updated object, a `DELETED`
    /// when it stops matching a selector).
    pub fn watch_line(&self, event: WatchEventType) -> Bytes {
        if event == self.line_type {
            return self.line().clone();
        }
        let mut line = Vec::with_capacity(self.line().len() + 3);
        self.write_watch_line(event, &mut line);
        Bytes::from(line)
    }

    /// Appends a JSON watch event line of `event` for this object to `out`,
    /// built anew.
    fn write_watch_line(&self, event: WatchEventType, out: &mut Vec<u8>) {
        out.extend_from_slice(event.line_prefix());
        out.extend_from_slice(self.json());
        out.extend_from_slice(LINE_SUFFIX);
    }

    /// The heap bytes this object holds (its stored bytes, or once
    /// rendered its line and its attributes; not the protobuf form some
    /// front ends keep beside it).
    pub fn heap_bytes(&self) -> usize {
        let held = match self.rendered.get() {
            Some(r) => r.line.len() + r.attrs.heap_bytes(),
            None => self.stored().map_or(0, |b| b.len()),
        };
        self.key.len() + held
    }

    /// The object in a binary wire form: `encode`'s bytes, made on the
    /// first call and kept with the object. Every caller must encode the
    /// same way (the cache holds one encoding per object); an error is
    /// returned and nothing kept.
    pub fn encoded_with<E>(
        &self,
        encode: impl FnOnce(&Value) -> Result<Bytes, E>,
    ) -> Result<Bytes, E> {
        if let Some(bytes) = self.encoded.get() {
            return Ok(bytes.clone());
        }
        let bytes = encode(&self.to_value())?;
        Ok(self.encoded.get_or_init(|| bytes).clone())
    }

    /// The same object shown at another revision, as a `DELETED` line: a
    /// deletion (or an object leaving a selector) shows the last state
    /// with the revision that removed it.
    pub fn at_revision(&self, revision: u64) -> Option<Self> {
        if self.rendered.get().is_none() {
            if let Some(stored) = self.stored() {
                // Not rendered: the same stored bytes, rendered at
                // `revision` when someone reads them.
                return Some(Self {
                    key: self.key.clone(),
                    revision,
                    rt: self.rt,
                    line_type: WatchEventType::Deleted,
                    stored: Mutex::new(Some(stored)),
                    rendered: std::sync::OnceLock::new(),
                    encoded: std::sync::OnceLock::new(),
                });
            }
        }
        let mut object = self.to_value();
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert(
                "resourceVersion".into(),
                Value::String(revision.to_string()),
            );
        }
        Self::build(
            self.key.clone(),
            self.rt,
            revision,
            &object,
            WatchEventType::Deleted,
        )
    }
}

/// An object's `metadata` without `managedFields`, which is skipped
/// unparsed: the larger part of the metadata of an object written by
/// kubectl or any client that applies, and read by no controller.
#[derive(Default)]
struct UnmanagedMetadata(serde_json::Map<String, Value>);

impl<'de> serde::Deserialize<'de> for UnmanagedMetadata {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> serde::de::Visitor<'de> for Members {
            type Value = UnmanagedMetadata;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object's metadata")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut members: A,
            ) -> Result<Self::Value, A::Error> {
                let mut kept = serde_json::Map::new();
                while let Some(name) = members.next_key::<String>()? {
                    if name == "managedFields" {
                        members.next_value::<serde::de::IgnoredAny>()?;
                    } else {
                        kept.insert(name, members.next_value()?);
                    }
                }
                Ok(UnmanagedMetadata(kept))
            }
        }
        deserializer.deserialize_map(Members)
    }
}

/// A type's objects at one revision, keyed by etcd key, and how many sit
/// under each parent key (`/registry/<type>/<namespace>/`, or the type's
/// own prefix for cluster-scoped types), so a list knows its size without
/// a scan. Both maps are persistent: a clone is O(1) and shares structure.
/// Keys are shared (`Arc<str>`): the object's own key indexes it, and the
/// copy of a map node that a change of a snapshotted map makes copies
/// pointers, not strings.
#[derive(Debug, Clone, Default)]
pub struct Objects {
    by_key: OrdMap<Arc<str>, Arc<CachedObject>>,
    per_parent: imbl::HashMap<Arc<str>, usize>,
}

impl std::ops::Deref for Objects {
    type Target = OrdMap<Arc<str>, Arc<CachedObject>>;

    fn deref(&self) -> &Self::Target {
        &self.by_key
    }
}

/// The parent of an etcd key: everything up to and including its last `/`.
fn parent_of(key: &str) -> &str {
    key.rfind('/').map_or("", |i| &key[..=i])
}

impl Objects {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces the object at its key. A replacement leaves the
    /// counts alone; neither allocates a key.
    pub fn insert(&mut self, object: Arc<CachedObject>) {
        if let Some(current) = self.by_key.get_mut(&*object.key) {
            *current = object;
            return;
        }
        let parent = parent_of(&object.key);
        match self.per_parent.get_mut(parent) {
            Some(n) => *n += 1,
            None => {
                self.per_parent.insert(Arc::from(parent), 1);
            }
        }
        self.by_key.insert(object.key.clone(), object);
    }

    /// Removes the object at `key`, if there is one.
    pub fn remove(&mut self, key: &str) {
        if self.by_key.remove(key).is_none() {
            return;
        }
        let parent = parent_of(key);
        match self.per_parent.get_mut(parent) {
            Some(n) if *n > 1 => *n -= 1,
            _ => {
                self.per_parent.remove(parent);
            }
        }
    }

    /// How many objects are direct children of `parent` (a namespace's
    /// collection prefix, `/registry/<type>/<namespace>/`): O(1). The
    /// whole map is one type's, so its `len` counts the whole collection.
    pub fn children_of(&self, parent: &str) -> usize {
        self.per_parent.get(parent).copied().unwrap_or(0)
    }
}

/// One change to one object, with the states on either side.
#[derive(Debug, Clone)]
pub struct CachedEvent {
    pub revision: u64,
    pub kind: EventKind,
    /// Put: the new state (`None` if the value is not an object). Delete:
    /// the last state at the deletion's revision, as DELETED shows it.
    pub object: Option<Arc<CachedObject>>,
    /// The state before, if there was one.
    pub prev: Option<Arc<CachedObject>>,
}

impl CachedEvent {
    /// Makes `objects` what this event left them: a written object goes
    /// in; a deleted one, or one whose new value is not an object (as
    /// [`TypeCache::apply`] leaves it out), goes.
    fn replay(&self, objects: &mut Objects) {
        match (self.kind, &self.object) {
            (EventKind::Put, Some(object)) => objects.insert(object.clone()),
            _ => {
                if let Some(prev) = &self.prev {
                    objects.remove(&prev.key);
                }
            }
        }
    }
}

/// How much history the rings keep (`--watch-cache-events`,
/// `--watch-cache-seconds`). kube keeps 100 events per type and at least
/// 75 s; a ring of pointers is cheap, so the defaults keep more and let
/// resumed watches stay in memory.
#[derive(Debug, Clone, Copy)]
pub struct CacheLimits {
    /// Events kept per type.
    pub max_events: usize,
    /// Events older than this are dropped.
    pub max_age: Duration,
}

/// The answer of [`WatchCache::events_after`] when the ring no longer
/// holds the requested start: read storage history instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BehindRing {
    /// The oldest revision the ring can resume from.
    pub base: u64,
}

struct TypeCache {
    rt: &'static ResourceType,
    prefix: String,
    objects: Objects,
    /// The oldest revision a snapshot is retained for.
    base: u64,
    /// `(revision, objects after it)`, oldest first; the first is `base`.
    snapshots: VecDeque<(u64, Objects)>,
    /// Every event of the type after `base`, with when it arrived.
    events: VecDeque<(Instant, CachedEvent)>,
}

impl TypeCache {
    fn new(rt: &'static ResourceType, objects: Objects, revision: u64) -> Self {
        Self {
            rt,
            prefix: rt.collection_prefix(None),
            objects: objects.clone(),
            base: revision,
            snapshots: VecDeque::from([(revision, objects)]),
            events: VecDeque::new(),
        }
    }

    fn apply(&mut self, event: &Event, now: Instant) {
        let revision = event.kv.mod_revision.0;
        let key = String::from_utf8_lossy(&event.kv.key);
        let prev = self.objects.get(&*key).cloned();
        let object = match event.kind {
            EventKind::Put => {
                let line = if prev.is_some() {
                    WatchEventType::Modified
                } else {
                    WatchEventType::Added
                };
                // The key decoded above, shared with the previous state's
                // object when there is one.
                let shared = prev
                    .as_ref()
                    .map_or_else(|| Arc::from(&*key), |p| p.key.clone());
                CachedObject::decode_keyed(self.rt, shared, &event.kv.value, revision, line)
                    .map(Arc::new)
            }
            EventKind::Delete => None,
        };
        match &object {
            Some(obj) => self.objects.insert(obj.clone()),
            None => self.objects.remove(&key),
        }
        // A delete shows the last state at the deletion's revision.
        let object = match event.kind {
            EventKind::Put => object,
            EventKind::Delete => prev
                .as_ref()
                .and_then(|p| p.at_revision(revision))
                .map(Arc::new),
        };
        self.events.push_back((
            now,
            CachedEvent {
                revision,
                kind: event.kind,
                object,
                prev,
            },
        ));
    }

    /// Records the snapshot after `revision`, the last revision of a feed
    /// step that touched the type (once per step), and trims the ring to
    /// its limits.
    fn seal(&mut self, revision: u64, limits: &CacheLimits, now: Instant) {
        if self.snapshots.back().map(|(r, _)| *r) != Some(revision) {
            self.snapshots.push_back((revision, self.objects.clone()));
        }
        let too_old = |at: &Instant| now.duration_since(*at) > limits.max_age;
        // Drop whole revisions, oldest first, while the ring is past its
        // limits; the objects after the last one dropped become the base.
        let (mut dropped, mut cut) = (0, None);
        while let Some((at, event)) = self.events.get(dropped) {
            if self.events.len() - dropped <= limits.max_events && !too_old(at) {
                break;
            }
            let revision = event.revision;
            while self
                .events
                .get(dropped)
                .is_some_and(|(_, e)| e.revision == revision)
            {
                dropped += 1;
            }
            cut = Some(revision);
        }
        let Some(cut) = cut else {
            return;
        };
        // Built before the events it is made from go (a copy of the
        // snapshot before it with at most a step's events laid over it).
        let Some(base) = self.snapshot_at(cut) else {
            return;
        };
        self.events.drain(..dropped);
        while self.snapshots.front().is_some_and(|(r, _)| *r <= cut) {
            self.snapshots.pop_front();
        }
        self.snapshots.push_front((cut, base));
        self.base = cut;
    }

    /// The objects right after `revision`: the last snapshot at or before
    /// it, with the ring's events after that snapshot up to `revision`
    /// laid over a copy of it (at most one feed step's events).
    fn snapshot_at(&self, revision: u64) -> Option<Objects> {
        if revision < self.base {
            return None;
        }
        let i = self.snapshots.partition_point(|(r, _)| *r <= revision);
        let (at, snapshot) = self.snapshots.get(i.checked_sub(1)?)?;
        let mut objects = snapshot.clone();
        let from = self.events.partition_point(|(_, e)| e.revision <= *at);
        for (_, event) in self.events.range(from..) {
            if event.revision > revision {
                break;
            }
            event.replay(&mut objects);
        }
        Some(objects)
    }
}

struct CacheState {
    /// Every type is complete up to this revision.
    revision: u64,
    /// The store's reset counter this cache was built for.
    resets: u64,
    /// The types served at `revision`: the built-ins and what the
    /// CustomResourceDefinitions the cache holds define.
    served: Arc<TypeSet>,
    /// One per served type, in `served`'s order.
    types: Vec<TypeCache>,
}

impl CacheState {
    fn find(&self, rt: &ResourceType) -> Option<&TypeCache> {
        self.types.iter().find(|t| std::ptr::eq(t.rt, rt))
    }

    /// The served types as the definitions the cache holds make them.
    fn defined_types(&self) -> TypeSet {
        let definitions = resources::custom_resource_definitions();
        match self.find(definitions) {
            Some(t) => {
                let definitions: Vec<Value> = t.objects.values().map(|o| o.to_value()).collect();
                crd::type_set(&definitions)
            }
            None => TypeSet::builtin(),
        }
    }
}

/// The node's watch cache; cheap to clone.
#[derive(Clone)]
pub struct WatchCache {
    state: Arc<RwLock<CacheState>>,
    revision: watch::Sender<u64>,
    triggers: Arc<Triggers>,
    store: Store,
    limits: CacheLimits,
}

/// The wake-ups of watchers, one channel per key prefix watched: a type's
/// collection prefix (all its namespaces), or one namespace's. Without
/// them every watcher woke for every revision of every type, and a
/// thousand watchers of one namespace each woke, locked the cache and
/// found nothing whenever any other namespace or type was written.
#[derive(Default)]
struct Triggers {
    by_prefix: Mutex<TriggerMap>,
}

#[derive(Default)]
struct TriggerMap {
    channels: HashMap<Vec<u8>, watch::Sender<u64>>,
    /// Channels are dropped once no watcher holds them, in a sweep when
    /// the map has doubled since the last one (amortised O(1)).
    sweep_at: usize,
}

impl Triggers {
    fn lock(&self) -> std::sync::MutexGuard<'_, TriggerMap> {
        // Holds only channels: a panic elsewhere leaves nothing half-done.
        self.by_prefix
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn subscribe(&self, prefix: &[u8], revision: u64) -> watch::Receiver<u64> {
        let mut map = self.lock();
        if map.channels.len() >= map.sweep_at {
            map.channels.retain(|_, tx| tx.receiver_count() > 0);
            map.sweep_at = (map.channels.len() * 2).max(64);
        }
        match map.channels.get(prefix) {
            Some(tx) => tx.subscribe(),
            None => {
                let (tx, rx) = watch::channel(revision);
                map.channels.insert(prefix.to_vec(), tx);
                rx
            }
        }
    }

    /// Wakes the watchers of each prefix in `touched` at `revision`.
    fn wake(&self, touched: &[Vec<u8>], revision: u64) {
        let map = self.lock();
        for prefix in touched {
            if let Some(tx) = map.channels.get(prefix) {
                tx.send_replace(revision);
            }
        }
    }

    /// Wakes every watcher at `revision`.
    fn wake_all(&self, revision: u64) {
        for tx in self.lock().channels.values() {
            tx.send_replace(revision);
        }
    }
}

/// The prefixes an event under a type's collection `prefix` wakes: the
/// type's, and for a namespaced type its namespace's.
fn trigger_prefixes(rt: &ResourceType, prefix: &str, key: &[u8], out: &mut Vec<Vec<u8>>) {
    let mut push = |p: &[u8]| {
        if !out.iter().any(|o| o.as_slice() == p) {
            out.push(p.to_vec());
        }
    };
    push(prefix.as_bytes());
    if rt.namespaced {
        let rest = &key[prefix.len().min(key.len())..];
        if let Some(slash) = rest.iter().position(|b| *b == b'/') {
            push(&key[..prefix.len() + slash + 1]);
        }
    }
}

impl std::fmt::Debug for WatchCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchCache")
            .field("revision", &*self.revision.borrow())
            .finish_non_exhaustive()
    }
}

impl WatchCache {
    /// An empty cache over `store`; [`WatchCache::run`] fills and feeds it.
    pub fn new(store: Store, limits: CacheLimits) -> Self {
        let served = TypeSet::builtin();
        let types = served
            .iter()
            .map(|rt| TypeCache::new(rt, Objects::new(), 0))
            .collect();
        Self {
            state: Arc::new(RwLock::new(CacheState {
                revision: 0,
                resets: u64::MAX,
                served: Arc::new(served),
                types,
            })),
            revision: watch::channel(0).0,
            triggers: Arc::default(),
            store,
            limits,
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, CacheState> {
        // A panic while holding the lock cannot leave a half-applied
        // revision visible (revision is set last), so poison is ignored.
        self.state
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, CacheState> {
        self.state
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The types this node serves at the cache's revision: the built-ins
    /// and the custom types of its CustomResourceDefinitions.
    pub fn types(&self) -> Arc<TypeSet> {
        self.read().served.clone()
    }

    /// The revision the cache is complete up to.
    pub fn revision(&self) -> u64 {
        *self.revision.borrow()
    }

    /// A receiver that changes whenever the cache's revision moves.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.revision.subscribe()
    }

    /// A receiver that changes whenever a revision has an event under
    /// `prefix` (a type's collection prefix, or a namespace's within it),
    /// and on every rebuild or change of the served types: what a watcher
    /// of `prefix` waits on. Its value is a revision the cache reached, not
    /// the cache's own revision.
    pub fn subscribe_scope(&self, prefix: &[u8]) -> watch::Receiver<u64> {
        self.triggers.subscribe(prefix, self.revision())
    }

    /// Waits until the cache reaches `revision`, at most `wait`; whether it did.
    pub async fn wait_for(&self, revision: u64, wait: Duration) -> bool {
        let mut rx = self.subscribe();
        if *rx.borrow() >= revision {
            return true;
        }
        let reached = matches!(
            tokio::time::timeout(wait, rx.wait_for(|r| *r >= revision)).await,
            Ok(Ok(_))
        );
        reached
    }

    /// The type's current objects and the revision they are current at.
    pub fn current(&self, rt: &ResourceType) -> (Objects, u64) {
        let state = self.read();
        let objects = state
            .find(rt)
            .map(|t| t.objects.clone())
            .unwrap_or_default();
        (objects, state.revision)
    }

    /// The type's objects exactly at `revision`, if the ring still holds
    /// it and the cache has reached it.
    pub fn snapshot_at(&self, rt: &ResourceType, revision: u64) -> Option<Objects> {
        // Below the store's compaction point reads are refused here as in
        // storage (`410`), even while the ring still holds them.
        let compacted = self.store.applied().compacted.0;
        let state = self.read();
        if revision > state.revision || revision < compacted {
            return None;
        }
        state.find(rt)?.snapshot_at(revision)
    }

    /// The type's events after `after`, up to at most `limit` events but
    /// never splitting a revision, and the revision they are complete to.
    /// `Err` when the ring no longer reaches back to `after`.
    pub fn events_after(
        &self,
        rt: &ResourceType,
        after: u64,
        limit: usize,
    ) -> Result<(Vec<CachedEvent>, u64), BehindRing> {
        let compacted = self.store.applied().compacted.0;
        let state = self.read();
        let Some(t) = state.find(rt) else {
            // A custom type no longer served as `rt` (its definition
            // changed or went): its events are storage's to give.
            return Err(BehindRing {
                base: state.revision,
            });
        };
        if after < t.base || after < compacted {
            return Err(BehindRing {
                base: t.base.max(compacted),
            });
        }
        let start = t.events.partition_point(|(_, e)| e.revision <= after);
        let mut out: Vec<CachedEvent> = Vec::new();
        for (_, e) in t.events.range(start..) {
            if out.len() >= limit && out.last().is_some_and(|l| l.revision != e.revision) {
                // Complete up to the last revision taken.
                let upto = out.last().map_or(after, |l| l.revision);
                return Ok((out, upto));
            }
            out.push(e.clone());
        }
        Ok((out, state.revision))
    }

    /// [`WatchCache::catch_up`] on tokio's blocking pool: it reads
    /// storage (the event log, or everything for a rebuild), which must
    /// not occupy an async worker.
    pub async fn catch_up_blocking(&self) -> Result<(), StoreError> {
        let cache = self.clone();
        let span = tracing::Span::current();
        tokio::task::spawn_blocking(move || span.in_scope(|| cache.catch_up()))
            .await
            .map_err(|e| StoreError::ReadTask(e.to_string()))?
    }

    /// Feeds the cache from the store until `stop` turns true.
    ///
    /// What storage's ring of recent events holds is fed on this task, up
    /// to [`MEMORY_FEED_OBJECTS`] objects per wake: it reads no
    /// storage, and handing each applied entry to the blocking pool woke
    /// a pool thread per entry, which cost more than the feed itself
    /// under 1 KiB puts (BENCHMARKS.md, "The watch cache feeds from memory
    /// on its own task"). A rebuild, a step with more objects to feed
    /// and events the ring no longer holds are read on the blocking pool.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let mut applied = self.store.subscribe();
        loop {
            let fed = match self.feed(Reads::Memory {
                objects: MEMORY_FEED_OBJECTS,
            }) {
                Ok(Fed::CaughtUp) => Ok(()),
                Ok(Fed::NeedsStorage) => self.catch_up_blocking().await,
                Err(e) => Err(e),
            };
            match fed {
                Ok(()) => {}
                Err(StoreError::Installing) => {
                    tracing::debug!("watch cache waits for a snapshot install to finish");
                }
                Err(e) => tracing::warn!(error = %e, "watch cache cannot read the event log"),
            }
            tokio::select! {
                changed = applied.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                _ = stop.wait_for(|s| *s) => return,
            }
        }
    }

    /// Applies everything the store has applied beyond the cache; rebuilds
    /// after a reset or when the history it needs is gone. Blocking: it
    /// may read storage.
    #[tracing::instrument(level = "trace", skip(self))]
    pub fn catch_up(&self) -> Result<(), StoreError> {
        self.feed(Reads::Storage).map(|_| ())
    }

    /// Applies what the store has applied beyond the cache, reading as
    /// `reads` allows.
    fn feed(&self, mut reads: Reads) -> Result<Fed, StoreError> {
        loop {
            let applied = self.store.applied();
            let (revision, resets) = {
                let s = self.read();
                (s.revision, s.resets)
            };
            if resets != applied.resets {
                match reads {
                    Reads::Memory { .. } => return Ok(Fed::NeedsStorage),
                    Reads::Storage => {
                        self.rebuild(applied.resets)?;
                        continue;
                    }
                }
            }
            let mut cursor = self.store.events(Revision(revision));
            let step = match reads {
                Reads::Storage => cursor.next_blocking()?,
                Reads::Memory { .. } => match cursor.next_in_memory() {
                    Some(step) => step?,
                    None => return Ok(Fed::NeedsStorage),
                },
            };
            match step {
                // Every revision up to `applied` is in the log the cursor
                // read (and belongs to the reset generation checked above).
                EventStep::CaughtUp { .. } => {
                    if applied.revision.0 > revision {
                        self.write().revision = applied.revision.0;
                        self.revision.send_replace(applied.revision.0);
                    }
                    return Ok(Fed::CaughtUp);
                }
                EventStep::Events(batch) => {
                    if let Reads::Memory { objects } = &mut reads {
                        // The blocking catch-up reads the same step again,
                        // from the ring (shared events, not copies).
                        let fed = registry_events(&batch);
                        if fed > *objects {
                            return Ok(Fed::NeedsStorage);
                        }
                        *objects -= fed;
                    }
                    self.apply(batch)
                }
                EventStep::Compacted { .. } => match reads {
                    Reads::Memory { .. } => return Ok(Fed::NeedsStorage),
                    Reads::Storage => self.rebuild(applied.resets)?,
                },
            }
        }
    }

    fn apply(&self, batch: Vec<RevisionEvents>) {
        let now = Instant::now();
        let mut last = None;
        let mut woken: Vec<Vec<u8>> = Vec::new();
        let mut redefined_any = false;
        {
            let mut state = self.write();
            let definitions = resources::custom_resource_definitions().collection_prefix(None);
            // Each type this step changed, and the last revision that did.
            let mut touched: Vec<(usize, u64)> = Vec::new();
            for (revision, events) in &batch {
                let mut redefined = false;
                // Keys outside the registry (the etcd API's own) belong to
                // no type: only the revision moves for them.
                let registry = events.iter().filter(|e| in_registry(e));
                for event in registry {
                    redefined |= event.kv.key.starts_with(definitions.as_bytes());
                    // Every version of a custom type shares its prefix.
                    for i in 0..state.types.len() {
                        if event.kv.key.starts_with(state.types[i].prefix.as_bytes()) {
                            let t = &state.types[i];
                            trigger_prefixes(t.rt, &t.prefix, &event.kv.key, &mut woken);
                            state.types[i].apply(event, now);
                            match touched.iter_mut().find(|(t, _)| *t == i) {
                                Some((_, last)) => *last = revision.0,
                                None => touched.push((i, revision.0)),
                            }
                        }
                    }
                }
                if redefined {
                    // The types are replaced: seal what they hold first.
                    for (i, at) in touched.drain(..) {
                        state.types[i].seal(at, &self.limits, now);
                    }
                    redefined_any |= self.redefine(&mut state, revision.0);
                }
                state.revision = revision.0;
                last = Some(revision.0);
            }
            for (i, at) in touched {
                state.types[i].seal(at, &self.limits, now);
            }
        }
        if let Some(r) = last {
            self.revision.send_replace(r);
            if redefined_any {
                self.triggers.wake_all(r);
            } else {
                self.triggers.wake(&woken, r);
            }
        }
        self.store.timings().record_since(Stage::CacheFeed, now);
    }

    /// The definitions changed at `revision`: serve what they define from
    /// it on. A type no longer defined is dropped; a new one starts with
    /// its objects as storage holds them at `revision` (none, unless the
    /// etcd API wrote some before its definition). When storage cannot
    /// give them, the cache is rebuilt on its next step. Whether the
    /// served types changed.
    fn redefine(&self, state: &mut CacheState, revision: u64) -> bool {
        let served = state.defined_types();
        if served == *state.served {
            return false;
        }
        let mut old: Vec<TypeCache> = std::mem::take(&mut state.types);
        let mut types = Vec::with_capacity(served.iter().count());
        for rt in served.iter() {
            if let Some(i) = old.iter().position(|t| std::ptr::eq(t.rt, rt)) {
                types.push(old.swap_remove(i));
                continue;
            }
            let objects = match load_type(&self.store, rt, revision) {
                Ok(objects) => objects,
                Err(e) => {
                    tracing::warn!(error = %e, resource = rt.plural, revision, "cannot load a new custom type; rebuilding the cache");
                    state.resets = u64::MAX;
                    Objects::new()
                }
            };
            types.push(TypeCache::new(rt, objects, revision));
        }
        tracing::info!(
            revision,
            custom = served.custom().count(),
            "served types changed"
        );
        state.types = types;
        state.served = Arc::new(served);
        true
    }

    /// Reloads every type from one consistent read of storage. The read
    /// and the decoding of every object happen without the cache's lock
    /// ([`load`] does not see the cache): until the new contents are
    /// swapped in, readers are served the old ones, at the old revision,
    /// and quorum reads wait for the cache to reach theirs as usual.
    #[tracing::instrument(level = "debug", skip(self))]
    fn rebuild(&self, resets: u64) -> Result<(), StoreError> {
        let loaded = load(&self.store)?;
        self.install(loaded, resets);
        Ok(())
    }

    /// Swaps in what [`load`] read: one short write lock.
    fn install(&self, loaded: Loaded, resets: u64) {
        let Loaded {
            served,
            maps,
            revision,
        } = loaded;
        let objects: usize = maps.iter().map(|m| m.len()).sum();
        let types = served
            .iter()
            .zip(maps)
            .map(|(rt, objects)| TypeCache::new(rt, objects, revision))
            .collect();
        {
            let mut state = self.write();
            state.types = types;
            state.served = Arc::new(served);
            state.revision = revision;
            state.resets = resets;
        }
        tracing::info!(revision, objects, "watch cache rebuilt");
        self.revision.send_replace(revision);
        self.triggers.wake_all(revision);
    }
}

/// Every served type's objects as one consistent read of storage found
/// them, decoded, in the served types' order.
struct Loaded {
    served: TypeSet,
    maps: Vec<Objects>,
    revision: u64,
}

/// Reads and decodes every object under [`REGISTRY_PREFIX`] from one
/// consistent view, one key-value at a time (blocking: RocksDB scans):
/// first the CustomResourceDefinitions, which say what the served types
/// are, then every object of those types.
fn load(store: &Store) -> Result<Loaded, StoreError> {
    store.read_view(|view| {
        let definitions = resources::custom_resource_definitions();
        let mut defs: Vec<Value> = Vec::new();
        let range = KeyRange::prefix(definitions.collection_prefix(None).into_bytes());
        view.scan(&range, None, |kv| {
            if let Some(def) =
                object::from_stored(definitions, &kv.key, &kv.value, kv.mod_revision.0)
            {
                defs.push(def);
            }
            Ok(std::ops::ControlFlow::Continue(()))
        })?;
        let served = crd::type_set(&defs);
        let types: Vec<&'static ResourceType> = served.iter().collect();
        let prefixes: Vec<String> = types.iter().map(|rt| rt.collection_prefix(None)).collect();
        let mut maps: Vec<Objects> = vec![Objects::new(); types.len()];
        let range = KeyRange::prefix(REGISTRY_PREFIX.as_bytes().to_vec());
        let revision = view.scan(&range, None, |kv| {
            for (i, p) in prefixes.iter().enumerate() {
                if kv.key.starts_with(p.as_bytes()) {
                    if let Some(obj) = CachedObject::decode(
                        types[i],
                        &kv.key,
                        &kv.value,
                        kv.mod_revision.0,
                        WatchEventType::Added,
                    ) {
                        maps[i].insert(Arc::new(obj));
                    }
                }
            }
            Ok(std::ops::ControlFlow::Continue(()))
        })?;
        Ok(Loaded {
            served,
            maps,
            revision: revision.0,
        })
    })
}

/// One type's objects as storage holds them at `revision`.
fn load_type(
    store: &Store,
    rt: &'static ResourceType,
    revision: u64,
) -> Result<Objects, StoreError> {
    let mut objects = Objects::new();
    let range = KeyRange::prefix(rt.collection_prefix(None).into_bytes());
    store.read_view(|view| {
        view.scan(&range, Some(Revision(revision)), |kv| {
            let line = WatchEventType::Added;
            if let Some(obj) = CachedObject::decode(rt, &kv.key, &kv.value, kv.mod_revision.0, line)
            {
                objects.insert(Arc::new(obj));
            }
            Ok(std::ops::ControlFlow::Continue(()))
        })
    })?;
    Ok(objects)
}

#[cfg(test)]
mod tests {
    use kubestore_storage::{Command, DeleteRequest, Entry, Op, PutRequest, StateMachine, Txn};
    use openraft::storage::RaftStateMachine;
    use openraft::{CommittedLeaderId, EntryPayload, LogId};

    use super::*;
    use crate::kube::resources;

    /// Applies a put of configmap `name` as log entry `index`.
    async fn put_configmap(sm: &mut StateMachine, index: u64, rt: &ResourceType, name: &str) {
        let value = serde_json::json!({"metadata": {"name": name, "namespace": "default"}});
        let entry = Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(
                Command::Txn(Txn {
                    success: vec![Op::Put(PutRequest::new(
                        rt.key(Some("default"), name),
                        value.to_string(),
                    ))],
                    ..Txn::default()
                })
                .into(),
            ),
        };
        let responses = sm.apply(vec![entry]).await.expect("apply");
        assert!(responses[0].result.is_ok(), "{:?}", responses[0]);
    }

    fn names(objects: &Objects) -> Vec<String> {
        objects
            .values()
            .map(|o| {
                o.to_value()["metadata"]["name"]
                    .as_str()
                    .unwrap_or("")
                    .to_string()
            })
            .collect()
    }

    #[tokio::test]
    async fn a_rebuild_reads_storage_unlocked_and_readers_keep_the_old_contents_until_the_swap() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (_log, mut sm, store) = kubestore_storage::open(dir.path()).expect("open");
        let rt = resources::find("", "v1", "configmaps").expect("configmaps");
        put_configmap(&mut sm, 1, rt, "a").await;
        let cache = WatchCache::new(
            store.clone(),
            CacheLimits {
                max_events: 100,
                max_age: Duration::from_secs(60),
            },
        );
        cache.catch_up_blocking().await.expect("filled");
        assert_eq!(cache.revision(), 1);

        // Phase 1: the rebuild's read and decode. `load` is given the
        // store, not the cache: it cannot take the cache's lock.
        put_configmap(&mut sm, 2, rt, "b").await;
        let loaded = load(&store).expect("load");
        assert_eq!(loaded.revision, 2);

        // Meanwhile readers are served the old contents, at the old
        // revision, and nothing holds the lock.
        let (objects, revision) = cache.current(rt);
        assert_eq!((names(&objects), revision), (vec!["a".to_string()], 1));
        assert!(cache.state.try_write().is_ok(), "the lock is free");

        // Phase 2: the swap, one short write lock; readers see it whole.
        let resets = cache.read().resets;
        cache.install(loaded, resets);
        let (objects, revision) = cache.current(rt);
        assert_eq!(
            (names(&objects), revision),
            (vec!["a".to_string(), "b".to_string()], 2)
        );
        assert_eq!(cache.revision(), 2, "waiting readers are woken");
    }

    /// A store in a temporary directory, its state machine (entries are
    /// applied in order, one revision per write) and a watch cache over it.
    struct Fixture {
        _dir: tempfile::TempDir,
        sm: StateMachine,
        cache: WatchCache,
        next: u64,
    }

    fn configmaps() -> &'static ResourceType {
        resources::find("", "v1", "configmaps").expect("configmaps")
    }

    fn secrets() -> &'static ResourceType {
        resources::find("", "v1", "secrets").expect("secrets")
    }

    impl Fixture {
        fn new(max_events: usize) -> Self {
            let dir = tempfile::tempdir().expect("tempdir");
            let (_log, sm, store) = kubestore_storage::open(dir.path()).expect("open");
            let cache = WatchCache::new(
                store.clone(),
                CacheLimits {
                    max_events,
                    max_age: Duration::from_secs(3600),
                },
            );
            // The first catch-up builds the cache (empty, at 0); the
            // fixture's writes are then fed as events.
            cache.catch_up().expect("start");
            Self {
                _dir: dir,
                sm,
                cache,
                next: 1,
            }
        }

        async fn apply(&mut self, cmd: Command) {
            let entry = Entry {
                log_id: LogId::new(CommittedLeaderId::new(1, 1), self.next),
                payload: EntryPayload::Normal(cmd.into()),
            };
            self.next += 1;
            let responses = self.sm.apply(vec![entry]).await.expect("apply");
            assert!(responses[0].result.is_ok(), "{:?}", responses[0]);
        }

        /// Puts object `name` of `rt` in `default` with `labels`.
        async fn put(&mut self, rt: &ResourceType, name: &str, labels: serde_json::Value) {
            let value = serde_json::json!({
                "metadata": {"name": name, "namespace": "default", "labels": labels}
            });
            self.put_raw(&rt.key(Some("default"), name), &value.to_string())
                .await;
        }

        async fn put_raw(&mut self, key: &str, value: &str) {
            self.apply(Command::Txn(Txn {
                success: vec![Op::Put(PutRequest::new(key, value))],
                ..Txn::default()
            }))
            .await;
        }

        async fn delete(&mut self, rt: &ResourceType, name: &str) {
            self.apply(Command::Txn(Txn {
                success: vec![Op::Delete(DeleteRequest {
                    range: KeyRange::single(rt.key(Some("default"), name)),
                    prev_kv: false,
                })],
                ..Txn::default()
            }))
            .await;
        }

        async fn compact(&mut self, revision: u64) {
            self.apply(Command::Compact {
                revision: Revision(revision),
            })
            .await;
        }

        fn catch_up(&self) {
            self.cache.catch_up().expect("catch up");
        }

        /// `(revision, kind, name, revision shown, name of prev)` of the
        /// type's cached events after `after`, and the revision they are
        /// complete to.
        fn events_after(&self, rt: &ResourceType, after: u64, limit: usize) -> Drain {
            let name = |o: &Arc<CachedObject>| {
                o.to_value()["metadata"]["name"]
                    .as_str()
                    .unwrap_or("")
                    .to_string()
            };
            let (events, upto) = self.cache.events_after(rt, after, limit)?;
            let events = events
                .iter()
                .map(|e| {
                    (
                        e.revision,
                        e.kind,
                        e.object.as_ref().map(name).unwrap_or_default(),
                        e.object.as_ref().map(|o| o.revision),
                        e.prev.as_ref().map(name),
                    )
                })
                .collect();
            Ok((events, upto))
        }
    }

    /// A drain of [`Fixture::events_after`].
    type Drain = Result<(Vec<EventSummary>, u64), BehindRing>;
    /// `(revision, kind, name, revision shown, name of prev)`.
    type EventSummary = (u64, EventKind, String, Option<u64>, Option<String>);

    #[tokio::test]
    async fn the_feed_applies_events_in_order_and_keeps_the_states_on_either_side() {
        let mut f = Fixture::new(100);
        let cm = configmaps();
        f.put(cm, "a", serde_json::json!({})).await; // 1
        f.put(cm, "b", serde_json::json!({})).await; // 2
        f.put(cm, "a", serde_json::json!({"v": "2"})).await; // 3
        f.delete(cm, "b").await; // 4
        f.catch_up();

        let (objects, revision) = f.cache.current(cm);
        assert_eq!((names(&objects), revision), (vec!["a".to_string()], 4));
        assert_eq!(objects.values().next().map(|o| o.revision), Some(3));

        use EventKind::{Delete, Put};
        let s = |v: &str| v.to_string();
        assert_eq!(
            f.events_after(cm, 0, 100),
            Ok((
                vec![
                    (1, Put, s("a"), Some(1), None),
                    (2, Put, s("b"), Some(2), None),
                    (3, Put, s("a"), Some(3), Some(s("a"))),
                    // A deletion shows the last state at its own revision.
                    (4, Delete, s("b"), Some(4), Some(s("b"))),
                ],
                4
            ))
        );
        assert_eq!(f.events_after(cm, 2, 100).map(|(e, _)| e.len()), Ok(2));
        assert_eq!(f.events_after(cm, 4, 100), Ok((vec![], 4)));
    }

    #[tokio::test]
    async fn a_feed_from_memory_stops_at_its_budget_and_where_storage_must_be_read() {
        let mut f = Fixture::new(100);
        let cm = configmaps();
        // Keys outside the registry render nothing: no budget needed.
        for key in ["/other/a", "/other/b"] {
            f.put_raw(key, "v").await; // 1, 2
        }
        assert_eq!(
            f.cache.feed(Reads::Memory { objects: 0 }).expect("feed"),
            Fed::CaughtUp
        );
        assert_eq!(f.cache.revision(), 2);

        // Three objects to feed: a budget of two leaves them to storage.
        for name in ["a", "b", "c"] {
            f.put(cm, name, serde_json::json!({})).await; // 3..=5
        }
        assert_eq!(
            f.cache.feed(Reads::Memory { objects: 2 }).expect("feed"),
            Fed::NeedsStorage
        );
        assert_eq!(f.cache.revision(), 2);
        assert_eq!(
            f.cache.feed(Reads::Memory { objects: 3 }).expect("feed"),
            Fed::CaughtUp
        );
        let (objects, revision) = f.cache.current(cm);
        assert_eq!((names(&objects).len(), revision), (3, 5));

        // The history after the cache's revision is compacted away:
        // memory does not answer, and the cache stays where it was until
        // a storage read rebuilds it.
        f.put(cm, "d", serde_json::json!({})).await; // 6
        f.put(cm, "e", serde_json::json!({})).await; // 7
        f.compact(7).await;
        assert_eq!(
            f.cache
                .feed(Reads::Memory {
                    objects: MEMORY_FEED_OBJECTS
                })
                .expect("feed"),
            Fed::NeedsStorage
        );
        assert_eq!(f.cache.revision(), 5);
        f.catch_up();
        let (objects, revision) = f.cache.current(cm);
        assert_eq!((names(&objects).len(), revision), (5, 7));
    }

    #[tokio::test]
    async fn a_quiet_type_and_writes_outside_the_registry_still_move_the_revision() {
        let mut f = Fixture::new(100);
        f.put(configmaps(), "a", serde_json::json!({})).await; // 1
        f.put_raw("/not-kube/x", "1").await; // 2
        f.put_raw(&configmaps().key(Some("default"), "junk"), "not json")
            .await; // 3: skipped, not an object
        f.catch_up();
        assert_eq!(f.cache.revision(), 3);
        let (quiet, at) = f.cache.current(secrets());
        assert!(quiet.is_empty());
        assert_eq!(at, 3, "the quiet type is complete up to 3");
        assert_eq!(f.events_after(secrets(), 0, 100), Ok((vec![], 3)));
        let (cms, _) = f.cache.current(configmaps());
        assert_eq!(names(&cms), vec!["a".to_string()]);
    }

    #[tokio::test]
    async fn a_drain_never_splits_a_revision_and_says_how_far_it_is_complete() {
        let mut f = Fixture::new(100);
        let cm = configmaps();
        f.put(cm, "a", serde_json::json!({})).await; // 1
        let both = |name: &str| {
            Op::Put(PutRequest::new(
                cm.key(Some("default"), name),
                serde_json::json!({"metadata": {"name": name, "namespace": "default"}}).to_string(),
            ))
        };
        f.apply(Command::Txn(Txn {
            success: vec![both("b"), both("c")],
            ..Txn::default()
        }))
        .await; // 2: two events
        f.put(cm, "d", serde_json::json!({})).await; // 3
        f.catch_up();

        let revisions = |r: Drain| {
            r.map(|(events, upto)| (events.iter().map(|e| e.0).collect::<Vec<_>>(), upto))
        };
        assert_eq!(revisions(f.events_after(cm, 0, 1)), Ok((vec![1], 1)));
        assert_eq!(
            revisions(f.events_after(cm, 1, 1)),
            Ok((vec![2, 2], 2)),
            "revision 2 whole, past the limit"
        );
        assert_eq!(revisions(f.events_after(cm, 2, 1)), Ok((vec![3], 3)));
    }

    #[tokio::test]
    async fn exact_reads_come_from_the_snapshot_of_each_retained_revision() {
        let mut f = Fixture::new(100);
        let cm = configmaps();
        f.put(cm, "a", serde_json::json!({})).await; // 1
        f.put(cm, "b", serde_json::json!({})).await; // 2
        f.put(secrets(), "s", serde_json::json!({})).await; // 3: another type
        f.delete(cm, "a").await; // 4
        f.catch_up();

        let at = |rev: u64| f.cache.snapshot_at(cm, rev).map(|o| names(&o));
        assert_eq!(at(0), Some(vec![]), "the empty start is retained");
        assert_eq!(at(1), Some(vec!["a".to_string()]));
        assert_eq!(at(2), Some(vec!["a".to_string(), "b".to_string()]));
        assert_eq!(
            at(3),
            Some(vec!["a".to_string(), "b".to_string()]),
            "a revision of another type reads the last snapshot before it"
        );
        assert_eq!(at(4), Some(vec!["b".to_string()]));
        assert_eq!(at(5), None, "beyond the cache's revision");
    }

    /// `names` as [`snapshots_through`] shows a retained revision.
    fn s(names: &[&str]) -> Option<Vec<String>> {
        Some(names.iter().map(|n| n.to_string()).collect())
    }

    /// The names in `rt`'s snapshot at every revision from 0 to `upto`.
    fn snapshots_through(f: &Fixture, rt: &ResourceType, upto: u64) -> Vec<Option<Vec<String>>> {
        (0..=upto)
            .map(|rev| f.cache.snapshot_at(rt, rev).map(|o| names(&o)))
            .collect()
    }

    /// A feed step seals one snapshot per type however many of its
    /// revisions touched it; every revision inside the step still reads
    /// exactly, deletions, re-creations and values that are not objects
    /// included, as it did when each revision had its own snapshot.
    #[tokio::test]
    async fn a_step_keeps_one_snapshot_and_every_revision_inside_it_reads_exactly() {
        let mut f = Fixture::new(100);
        let cm = configmaps();
        f.put(cm, "a", serde_json::json!({})).await; // 1
        f.put(cm, "b", serde_json::json!({})).await; // 2
        f.delete(cm, "a").await; // 3
        f.put_raw(&cm.key(Some("default"), "b"), "not an object")
            .await; // 4: b leaves the cache
        f.put(cm, "a", serde_json::json!({"again": "yes"})).await; // 5
        f.put(secrets(), "s", serde_json::json!({})).await; // 6: another type
        f.catch_up();

        let snapshots = {
            let state = f.cache.read();
            let t = state.find(cm).expect("configmaps");
            t.snapshots.iter().map(|(r, _)| *r).collect::<Vec<_>>()
        };
        assert_eq!(
            snapshots,
            vec![0, 5],
            "the start, and the step's last revision of the type"
        );
        assert_eq!(
            snapshots_through(&f, cm, 6),
            vec![
                s(&[]),
                s(&["a"]),
                s(&["a", "b"]),
                s(&["b"]),
                s(&[]),
                s(&["a"]),
                s(&["a"])
            ]
        );
        let again = f.cache.snapshot_at(cm, 5).expect("at 5");
        let a = again.get(cm.key(Some("default"), "a").as_str()).expect("a");
        assert_eq!(a.revision, 5, "the object as written at 5, not as at 1");
    }

    /// Past its limits the ring drops whole revisions even inside a step,
    /// and the objects after the last one dropped become the base.
    #[tokio::test]
    async fn the_ring_cuts_inside_a_step_and_the_base_is_the_state_at_the_cut() {
        let mut f = Fixture::new(3);
        let cm = configmaps();
        for name in ["a", "b", "c"] {
            f.put(cm, name, serde_json::json!({})).await; // 1..=3
        }
        f.delete(cm, "b").await; // 4
        f.put(cm, "d", serde_json::json!({})).await; // 5
        f.catch_up();

        // Three events kept (3, 4, 5): the base is the state after 2.
        assert_eq!(
            f.events_after(cm, 1, 100),
            Err(BehindRing { base: 2 }),
            "events after 1 are gone"
        );
        assert_eq!(
            snapshots_through(&f, cm, 5),
            vec![
                None,
                None,
                s(&["a", "b"]),
                s(&["a", "b", "c"]),
                s(&["a", "c"]),
                s(&["a", "c", "d"])
            ]
        );
        // A later step cuts again, from the base it left.
        f.put(cm, "e", serde_json::json!({})).await; // 6
        f.catch_up();
        assert_eq!(
            snapshots_through(&f, cm, 6)[3..].to_vec(),
            vec![
                s(&["a", "b", "c"]),
                s(&["a", "c"]),
                s(&["a", "c", "d"]),
                s(&["a", "c", "d", "e"])
            ]
        );
        assert!(f.cache.snapshot_at(cm, 2).is_none(), "below the new base");
    }

    #[tokio::test]
    async fn the_ring_drops_whole_revisions_past_its_limit_and_the_base_moves() {
        let mut f = Fixture::new(2);
        let cm = configmaps();
        for name in ["a", "b", "c", "d"] {
            f.put(cm, name, serde_json::json!({})).await; // 1..=4
        }
        f.catch_up();

        // Two events kept: revisions 3 and 4; the snapshot of 2 is the base.
        assert_eq!(
            f.events_after(cm, 1, 100),
            Err(BehindRing { base: 2 }),
            "events after 1 are no longer all in the ring"
        );
        assert_eq!(
            f.events_after(cm, 2, 100).map(|(e, upto)| (e.len(), upto)),
            Ok((2, 4))
        );
        assert!(f.cache.snapshot_at(cm, 1).is_none(), "below the base");
        assert_eq!(
            f.cache.snapshot_at(cm, 2).map(|o| names(&o)),
            Some(vec!["a".to_string(), "b".to_string()])
        );
        // The current state is whole whatever the ring dropped.
        assert_eq!(f.cache.current(cm).0.len(), 4);
    }

    #[tokio::test]
    async fn reads_below_the_compaction_point_are_refused_while_the_ring_holds_them() {
        let mut f = Fixture::new(100);
        let cm = configmaps();
        for name in ["a", "b", "c", "d"] {
            f.put(cm, name, serde_json::json!({})).await; // 1..=4
        }
        f.catch_up();
        f.compact(3).await;

        assert!(f.cache.snapshot_at(cm, 2).is_none(), "compacted");
        assert!(
            f.cache.snapshot_at(cm, 3).is_some(),
            "at the compaction point"
        );
        assert_eq!(
            f.events_after(cm, 2, 100),
            Err(BehindRing { base: 3 }),
            "a watcher this old reads storage, which reports the compaction"
        );
        assert_eq!(f.events_after(cm, 3, 100).map(|(e, _)| e.len()), Ok(1));
    }

    #[tokio::test]
    async fn a_cache_behind_compacted_history_is_rebuilt_at_the_current_revision() {
        let mut f = Fixture::new(100);
        let cm = configmaps();
        f.put(cm, "a", serde_json::json!({})).await; // 1
        f.catch_up();
        f.put(cm, "b", serde_json::json!({})).await; // 2
        f.delete(cm, "a").await; // 3
        f.put(cm, "c", serde_json::json!({})).await; // 4
        f.compact(3).await; // the cache, at 1, needs 2 onwards

        f.catch_up();
        let (objects, revision) = f.cache.current(cm);
        assert_eq!(
            (names(&objects), revision),
            (vec!["b".to_string(), "c".to_string()], 4)
        );
        assert_eq!(f.cache.revision(), 4);
        // The rings restart at the rebuild's revision.
        assert_eq!(f.events_after(cm, 3, 100), Err(BehindRing { base: 4 }));
        assert_eq!(f.events_after(cm, 4, 100), Ok((vec![], 4)));

        // And the feed goes on from there.
        f.put(cm, "d", serde_json::json!({})).await; // 5
        f.catch_up();
        assert_eq!(f.events_after(cm, 4, 100).map(|(e, _)| e.len()), Ok(1));
    }

    #[tokio::test]
    async fn a_revision_wakes_the_watchers_of_its_type_and_namespace_and_a_rebuild_wakes_all() {
        let mut f = Fixture::new(100);
        let cm = configmaps();
        let scope = |rt: &ResourceType, ns: Option<&str>| {
            f.cache.subscribe_scope(rt.collection_prefix(ns).as_bytes())
        };
        let mut every_configmap = scope(cm, None);
        let mut in_default = scope(cm, Some("default"));
        let in_other = scope(cm, Some("other"));
        let mut every_secret = scope(secrets(), None);
        let woken = |rx: &watch::Receiver<u64>| rx.has_changed().expect("the cache lives");

        f.put(cm, "a", serde_json::json!({})).await; // 1, in default
        f.catch_up();
        assert!(woken(&every_configmap) && woken(&in_default));
        assert!(!woken(&in_other), "another namespace sleeps");
        assert!(!woken(&every_secret), "another type sleeps");
        assert_eq!(*in_default.borrow_and_update(), 1);
        every_configmap.borrow_and_update();
        f.put_raw("/not-kube/x", "1").await; // 2
        f.catch_up();
        assert!(
            !woken(&every_configmap),
            "a write outside the type wakes none"
        );

        // A rebuild (here: the history the cache needs was compacted)
        // wakes every watcher, whatever it watches.
        f.put(cm, "b", serde_json::json!({})).await; // 3
        f.delete(cm, "a").await; // 4
        f.compact(4).await;
        f.catch_up();
        for rx in [&every_configmap, &in_default, &in_other, &every_secret] {
            assert!(woken(rx));
        }
        assert_eq!(*every_secret.borrow_and_update(), 4);
    }

    #[tokio::test]
    async fn not_older_than_reads_wait_for_the_feed_and_give_up_at_their_deadline() {
        let mut f = Fixture::new(100);
        f.put(configmaps(), "a", serde_json::json!({})).await; // 1
        assert!(
            !f.cache.wait_for(1, Duration::from_millis(1)).await,
            "not fed yet"
        );
        let waiter = {
            let cache = f.cache.clone();
            tokio::spawn(async move { cache.wait_for(1, Duration::from_secs(30)).await })
        };
        f.cache.catch_up_blocking().await.expect("fed");
        assert!(waiter.await.expect("waiter"), "woken by the feed");
        assert!(f.cache.wait_for(0, Duration::ZERO).await, "already there");
    }

    #[test]
    fn objects_count_each_namespace_and_a_snapshot_keeps_its_counts() {
        let object = |ns: &str, name: &str, v: &str| {
            Arc::new(
                CachedObject::from_value(
                    configmaps(),
                    &serde_json::json!({"metadata": {"name": name, "namespace": ns}, "data": {"v": v}}),
                )
                .expect("object"),
            )
        };
        let mut objects = Objects::new();
        for (ns, name) in [("a", "x"), ("a", "y"), ("b", "x")] {
            objects.insert(object(ns, name, "1"));
        }
        // Replacing an object does not count it twice.
        objects.insert(object("a", "x", "2"));
        assert_eq!(
            objects
                .get("/registry/configmaps/a/x")
                .map(|o| o.to_value()["data"]["v"].clone()),
            Some(serde_json::json!("2"))
        );
        let snapshot = objects.clone();
        objects.remove("/registry/configmaps/a/y");
        objects.remove("/registry/configmaps/a/absent");
        objects.remove("/registry/configmaps/b/x");
        let counts = |o: &Objects| {
            [
                "/registry/configmaps/a/",
                "/registry/configmaps/b/",
                "/registry/configmaps/c/",
            ]
            .map(|p| o.children_of(p))
        };
        assert_eq!((counts(&snapshot), snapshot.len()), ([2, 1, 0], 3));
        assert_eq!((counts(&objects), objects.len()), ([1, 0, 0], 1));
    }

    #[tokio::test]
    async fn an_objects_json_is_its_shared_watch_line_for_the_event_it_came_with() {
        let mut f = Fixture::new(100);
        f.put(configmaps(), "a", serde_json::json!({"app": "x"}))
            .await; // 1: created
        f.put(configmaps(), "b", serde_json::json!({"app": "y"}))
            .await; // 2: created
        f.put(configmaps(), "b", serde_json::json!({"app": "z"}))
            .await; // 3: updated
        f.catch_up();
        let (objects, _) = f.cache.current(configmaps());
        let object = |key: &str| objects.get(key).expect("cached").clone();
        let (created, updated) = (
            object("/registry/configmaps/default/a"),
            object("/registry/configmaps/default/b"),
        );
        for (obj, came_with, other) in [
            (&created, WatchEventType::Added, WatchEventType::Modified),
            (&updated, WatchEventType::Modified, WatchEventType::Added),
        ] {
            let line = obj.watch_line(came_with);
            let parsed: Value = serde_json::from_slice(&line).expect("json line");
            assert_eq!(parsed["type"], came_with.as_str());
            assert_eq!(parsed["object"], obj.to_value());
            assert_eq!(parsed["object"]["kind"], "ConfigMap");
            assert_eq!(
                parsed["object"]["metadata"]["resourceVersion"],
                obj.revision.to_string()
            );
            // One allocation: the line every watcher shares holds the JSON.
            let json = obj.json_bytes();
            assert_eq!(json.as_ptr(), line[line.len() - json.len() - 2..].as_ptr());
            assert_eq!(line.as_ptr(), obj.watch_line(came_with).as_ptr(), "shared");
            // Another event type is built, with the same object.
            let built = obj.watch_line(other);
            assert_ne!(built.as_ptr(), line.as_ptr());
            let parsed: Value = serde_json::from_slice(&built).expect("json line");
            assert_eq!(parsed["type"], other.as_str());
            assert_eq!(parsed["object"], obj.to_value());
            let mut written = b"x".to_vec();
            obj.write_watch_line(other, &mut written);
            assert_eq!(&written[1..], &built[..]);
        }
        assert_eq!(updated.to_value()["metadata"]["labels"]["app"], "z");

        // A tombstone is a DELETED line at the deletion's revision.
        let tombstone = updated.at_revision(4).expect("encodes");
        let parsed: Value =
            serde_json::from_slice(&tombstone.watch_line(WatchEventType::Deleted)).expect("json");
        assert_eq!(parsed["type"], "DELETED");
        assert_eq!(parsed["object"]["metadata"]["resourceVersion"], "4");
        assert_eq!(parsed["object"]["metadata"]["labels"]["app"], "z");
    }

    #[test]
    fn the_metadata_value_is_the_objects_metadata_without_managed_fields_and_nothing_else() {
        let rt = resources::find("", "v1", "configmaps").expect("configmaps");
        let stored = serde_json::json!({
            "metadata": {"name": "c", "namespace": "default", "uid": "u1",
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u0"}],
                "finalizers": ["f"], "deletionTimestamp": "2026-01-01T00:00:00Z",
                "managedFields": [{"manager": "kubectl", "operation": "Apply",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:big": {}}}}]},
            "data": {"big": "x".repeat(1024)},
        });
        let obj = CachedObject::decode(
            rt,
            b"/registry/configmaps/default/c",
            stored.to_string().as_bytes(),
            7,
            WatchEventType::Added,
        )
        .expect("decoded");
        let whole = obj.to_value();
        let mut metadata = whole["metadata"].clone();
        let managed = metadata
            .as_object_mut()
            .and_then(|m| m.remove("managedFields"));
        assert!(managed.is_some(), "the object has managed fields");
        assert_eq!(
            obj.to_metadata_value(),
            serde_json::json!({"metadata": metadata})
        );
        assert_eq!(whole["metadata"]["uid"], "u1");
        assert!(whole.get("data").is_some());
    }

    #[test]
    fn an_object_is_rendered_on_first_read_and_reads_the_same_either_way() {
        let rt = configmaps();
        let key = b"/registry/configmaps/default/c";
        let stored = serde_json::json!({
            "metadata": {"name": "c", "namespace": "default", "uid": "u1",
                "labels": {"app": "a"},
                "managedFields": [{"manager": "m", "operation": "Update",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:k": {}}}}]},
            "data": {"k": "v"},
        })
        .to_string();
        let lazy = CachedObject::decode(rt, key, stored.as_bytes(), 9, WatchEventType::Modified)
            .expect("an object");
        assert!(!lazy.is_rendered());
        assert_eq!(lazy.heap_bytes(), key.len() + stored.len());

        // What the controllers read, and a tombstone, render nothing.
        let metadata = lazy.to_metadata_value();
        let tombstone = lazy.at_revision(12).expect("a tombstone");
        assert!(!lazy.is_rendered() && !tombstone.is_rendered());
        assert_eq!(metadata["metadata"]["resourceVersion"], "9");
        assert!(metadata["metadata"].get("managedFields").is_none());

        // A selector renders it, once; the stored bytes go.
        let app_a = Selectors::parse(rt, Some("app=a"), None).expect("valid");
        let app_b = Selectors::parse(rt, Some("app=b"), None).expect("valid");
        assert!(lazy.matches(&app_a) && !lazy.matches(&app_b));
        assert!(lazy.is_rendered());
        assert!(lazy.stored().is_none(), "the line holds the object now");
        let line = lazy.watch_line(WatchEventType::Modified);
        assert_eq!(
            lazy.heap_bytes(),
            key.len() + line.len() + lazy.rendered().attrs.heap_bytes()
        );

        // The same object, JSON and metadata as an eager render gives.
        let eager = object::from_stored(rt, key, stored.as_bytes(), 9).expect("an object");
        assert_eq!(lazy.to_value(), eager);
        assert_eq!(lazy.json(), serde_json::to_vec(&eager).expect("json"));
        assert_eq!(lazy.to_metadata_value(), metadata);
        let parsed: Value = serde_json::from_slice(&line).expect("a json line");
        assert_eq!(parsed["type"], "MODIFIED");
        assert_eq!(parsed["object"], eager);

        // The tombstone made before the render and one made after it.
        let after = lazy.at_revision(12).expect("a tombstone");
        assert!(after.is_rendered());
        assert_eq!(tombstone.json(), after.json());
        assert_eq!(
            tombstone.watch_line(WatchEventType::Deleted),
            after.watch_line(WatchEventType::Deleted)
        );
        assert_eq!(tombstone.to_value()["metadata"]["resourceVersion"], "12");
    }

    #[test]
    fn a_value_that_starts_like_an_object_and_does_not_parse_shows_its_name_alone() {
        let rt = configmaps();
        let key = b"/registry/configmaps/default/junk";
        assert!(CachedObject::decode(rt, key, b"not json", 3, WatchEventType::Added).is_none());
        let junk = CachedObject::decode(rt, key, br#" {"metadata": "#, 3, WatchEventType::Added)
            .expect("kept: it starts like an object");
        assert_eq!(
            junk.to_value(),
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "junk", "namespace": "default", "resourceVersion": "3"}})
        );
        let by_name = Selectors::parse(rt, None, Some("metadata.name=junk")).expect("valid");
        assert!(junk.matches(&by_name));
    }

    #[tokio::test]
    async fn the_feed_renders_nothing_until_a_reader_does() {
        let mut f = Fixture::new(100);
        let cm = configmaps();
        f.put(cm, "a", serde_json::json!({"app": "x"})).await; // 1
        f.put(cm, "a", serde_json::json!({"app": "y"})).await; // 2
        f.delete(cm, "a").await; // 3
        f.put(cm, "b", serde_json::json!({})).await; // 4
        assert_eq!(
            f.cache
                .feed(Reads::Memory {
                    objects: MEMORY_FEED_OBJECTS
                })
                .expect("feed"),
            Fed::CaughtUp
        );
        let (objects, revision) = f.cache.current(cm);
        assert_eq!(revision, 4);
        let events = f.cache.events_after(cm, 0, 100).expect("in the ring").0;
        assert_eq!(events.len(), 4);
        let held = || {
            events
                .iter()
                .flat_map(|e| [&e.object, &e.prev])
                .flatten()
                .chain(objects.values())
        };
        assert!(held().all(|o| !o.is_rendered()));
        // The deletion shows the last state at its own revision.
        let tombstone = events[2].object.as_ref().expect("the last state");
        let shown = tombstone.to_value();
        assert_eq!(shown["metadata"]["resourceVersion"], "3");
        assert_eq!(shown["metadata"]["labels"]["app"], "y");
        assert_eq!(names(&objects), ["b"]);
        assert!(held().any(|o| o.is_rendered()));
    }

    #[tokio::test]
    async fn render_all_renders_what_a_read_will_write_on_the_worker_or_off_it() {
        let rt = configmaps();
        let objects: Vec<Arc<CachedObject>> = (0..2 * RENDER_ON_WORKER)
            .map(|i| {
                let stored =
                    serde_json::json!({"metadata": {"name": format!("c{i}"), "namespace": "d"}});
                let key = rt.key(Some("d"), &format!("c{i}"));
                let obj = CachedObject::decode(
                    rt,
                    key.as_bytes(),
                    stored.to_string().as_bytes(),
                    1,
                    WatchEventType::Added,
                );
                Arc::new(obj.expect("an object"))
            })
            .collect();
        // A few: on the caller's task.
        CachedObject::render_all(&objects[..3]).await;
        assert_eq!(objects.iter().filter(|o| o.is_rendered()).count(), 3);
        // More than the worker's share: on the blocking pool, all of them.
        CachedObject::render_all(&objects).await;
        assert!(objects.iter().all(|o| o.is_rendered()));
        assert_eq!(objects[7].to_value()["metadata"]["name"], "c7");
    }
}
