//! Reads: get and list, served from the watch cache (now, after a read
//! barrier, or once it reached a revision), a retained cache snapshot at
//! an exact revision, or the MVCC history in storage below what the cache
//! retains; and pagination, every page read at the first page's revision.

use std::ops::Bound;
use std::sync::Arc;

use kubestore_raft::RaftNodeError;
use kubestore_storage::{KeyRange, RangeRequest, Revision};

use super::{Freshness, KubeStore, Listed, ReadPath};
use crate::kube::cache::{CachedObject, Objects, WatchEventType};
use crate::kube::error::KubeError;
use crate::kube::paging::{self, ContinueToken, PageRequest};
use crate::kube::resources::ResourceType;
use crate::kube::selectors::Selectors;

/// How long a read for a revision this node has not reached waits before
/// answering `504` (kube's watch cache waits 3 s too).
const TOO_LARGE_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// How long a most-recent read waits for the watch cache to reach the
/// revision the read barrier returned (it is normally already there).
const CACHE_CATCH_UP: std::time::Duration = std::time::Duration::from_secs(10);

/// Where a read finds its objects.
enum View {
    /// A watch-cache map of the type at `revision`.
    Cached {
        objects: Objects,
        revision: u64,
        served: ReadPath,
    },
    /// Storage's MVCC history at this revision.
    History(u64),
}

/// One page from a map of objects: up to `limit` matches (all with 0)
/// from key `start` within `prefix`; the key of the next match, if any, and
/// how many objects follow (without selectors).
///
/// How many follow is known without a scan when `size` says how many
/// objects the collection holds from `start` on: the whole collection on a
/// first page (the map's per-namespace counts), what the previous page's
/// token carried on a later one. Otherwise (a token without a count, such
/// as one continuing at the latest revision after a `410`) the rest is
/// counted: the one path whose cost grows with the collection.
fn page_of(
    objects: &Objects,
    prefix: &str,
    start: &str,
    selectors: &Selectors,
    limit: u64,
    size: CollectionSize,
) -> (Vec<Arc<CachedObject>>, Option<String>, Option<u64>) {
    let mut items = Vec::new();
    let mut rest = objects
        .range::<_, str>((Bound::Included(start), Bound::Unbounded))
        .take_while(|(k, _)| k.starts_with(prefix))
        .map(|(_, o)| o)
        .filter(|o| o.matches(selectors));
    while let Some(obj) = rest.next() {
        if limit > 0 && items.len() as u64 == limit {
            let remaining = selectors.is_empty().then(|| match size {
                CollectionSize::From(from) => from.saturating_sub(limit),
                CollectionSize::Unknown => 1 + rest.count() as u64,
            });
            return (items, Some(obj.key.to_string()), remaining);
        }
        items.push(obj.clone());
    }
    (items, None, None)
}

/// How many objects of a collection a page starts with, from the start key
/// on, if known without a scan.
#[derive(Debug, Clone, Copy)]
enum CollectionSize {
    From(u64),
    Unknown,
}

impl KubeStore {
    /// Waits (3 s at most) for this node's watch cache to reach revision
    /// `rv`; then `504` Too large resource version, as kube answers.
    pub async fn wait_for_revision(&self, rv: u64) -> Result<(), KubeError> {
        if self.cache.wait_for(rv, TOO_LARGE_WAIT).await {
            Ok(())
        } else {
            Err(KubeError::TooLargeResourceVersion {
                requested: rv,
                current: self.cache.revision(),
            })
        }
    }

    /// A linearizable read point: the barrier, then the cache caught up to
    /// it. Returns the revision to read at.
    pub async fn quorum_revision(&self) -> Result<u64, KubeError> {
        let applied = self.node.linearizable_barrier().await?;
        if !self
            .cache
            .wait_for(applied.revision.0, CACHE_CATCH_UP)
            .await
        {
            return Err(RaftNodeError::Timeout("the watch cache to reach the read barrier").into());
        }
        Ok(applied.revision.0)
    }

    /// Where a read of `freshness` finds the type's objects.
    async fn view(&self, rt: &ResourceType, freshness: Freshness) -> Result<View, KubeError> {
        let current = |served| {
            let (objects, revision) = self.cache.current(rt);
            View::Cached {
                objects,
                revision,
                served,
            }
        };
        Ok(match freshness {
            Freshness::MostRecent => {
                self.quorum_revision().await?;
                current(ReadPath::QuorumCache)
            }
            Freshness::Any => current(ReadPath::Cache),
            Freshness::NotOlderThan(rv) => {
                self.wait_for_revision(rv).await?;
                current(ReadPath::Cache)
            }
            Freshness::Exact(rv) => {
                self.wait_for_revision(rv).await?;
                self.exact(rt, rv)
            }
        })
    }

    /// The type at exactly `rv`: a retained cache snapshot, else history.
    fn exact(&self, rt: &ResourceType, rv: u64) -> View {
        match self.cache.snapshot_at(rt, rv) {
            Some(objects) => View::Cached {
                objects,
                revision: rv,
                served: ReadPath::Snapshot,
            },
            None => View::History(rv),
        }
    }

    /// One object, or `NotFound`, and how it was read.
    #[tracing::instrument(level = "debug", skip(self, rt), fields(resource = rt.plural))]
    pub async fn get(
        &self,
        rt: &'static ResourceType,
        ns: Option<&str>,
        name: &str,
        freshness: Freshness,
    ) -> Result<(Arc<CachedObject>, ReadPath), KubeError> {
        let key = rt.key(ns, name);
        match self.view(rt, freshness).await? {
            View::Cached {
                objects, served, ..
            } => objects
                .get(key.as_str())
                .map(|o| (o.clone(), served))
                .ok_or_else(|| KubeError::not_found(rt, name)),
            View::History(rv) => {
                let resp = self.node.store().range(&RangeRequest {
                    range: KeyRange::single(key.into_bytes()),
                    revision: Some(Revision(rv)),
                    ..RangeRequest::default()
                })?;
                resp.kvs
                    .first()
                    .and_then(|kv| {
                        let line = WatchEventType::Added;
                        CachedObject::decode(rt, &kv.key, &kv.value, kv.mod_revision.0, line)
                    })
                    .map(|o| (Arc::new(o), ReadPath::History))
                    .ok_or_else(|| KubeError::not_found(rt, name))
            }
        }
    }

    /// Every object of a collection that matches `selectors`, in key order.
    #[tracing::instrument(level = "debug", skip(self, rt, selectors), fields(resource = rt.plural))]
    pub async fn list(
        &self,
        rt: &'static ResourceType,
        ns: Option<&str>,
        freshness: Freshness,
        selectors: &Selectors,
    ) -> Result<Listed, KubeError> {
        self.list_page(rt, ns, freshness, selectors, &PageRequest::default())
            .await
    }

    /// One page of a collection. Without a continue token the page is read
    /// at the freshness asked for; with one, at the token's revision, so
    /// every page shows the same snapshot (from the cache while it retains
    /// that revision, then from history, then `410`).
    #[tracing::instrument(level = "debug", skip(self, rt, selectors, page), fields(resource = rt.plural))]
    pub async fn list_page(
        &self,
        rt: &'static ResourceType,
        ns: Option<&str>,
        freshness: Freshness,
        selectors: &Selectors,
        page: &PageRequest,
    ) -> Result<Listed, KubeError> {
        let prefix = rt.collection_prefix(ns);
        let (start, view) = match &page.token {
            Some(t) => {
                let view = match t.revision {
                    // A token from another node may name a revision this
                    // one has not applied yet (and a forged one any
                    // revision): wait for it as for an exact read, then
                    // `504`, rather than read the future from storage.
                    Some(rv) => {
                        self.wait_for_revision(rv).await?;
                        self.exact(rt, rv)
                    }
                    None => {
                        let (objects, revision) = self.cache.current(rt);
                        View::Cached {
                            objects,
                            revision,
                            served: ReadPath::Cache,
                        }
                    }
                };
                (format!("{prefix}{}", t.start), view)
            }
            None => (prefix.clone(), self.view(rt, freshness).await?),
        };
        let (items, next, remaining, revision, served) = match view {
            View::Cached {
                objects,
                revision,
                served,
            } => {
                let size = match &page.token {
                    // The first page: the whole collection.
                    None if ns.is_some() => {
                        CollectionSize::From(objects.children_of(&prefix) as u64)
                    }
                    None => CollectionSize::From(objects.len() as u64),
                    // A later page of the same snapshot: what the previous
                    // page said followed it.
                    Some(t) => t
                        .remaining
                        .map_or(CollectionSize::Unknown, CollectionSize::From),
                };
                if !selectors.is_empty() && page.limit == 0 {
                    // The selectors read every object from the start on (a
                    // page renders those it scans, up to its limit).
                    let from = (Bound::Included(start.as_str()), Bound::Unbounded);
                    let scanned = objects
                        .range::<_, str>(from)
                        .take_while(|(k, _)| k.starts_with(&prefix))
                        .map(|(_, o)| o);
                    CachedObject::render_all(scanned).await;
                }
                let (items, next, remaining) =
                    page_of(&objects, &prefix, &start, selectors, page.limit, size);
                CachedObject::render_all(&items).await;
                (items, next, remaining, revision, served)
            }
            View::History(rv) => {
                let (items, next, remaining) = self
                    .page_from_history(rt, &prefix, start, rv, selectors, page)
                    .await?;
                (items, next, remaining, rv, ReadPath::History)
            }
        };
        let continue_token = next.map(|key| {
            ContinueToken {
                revision: Some(revision),
                start: key[prefix.len()..].to_string(),
                remaining,
            }
            .encode()
        });
        Ok(Listed {
            items,
            revision: Revision(revision),
            continue_token,
            remaining,
            served,
        })
    }

    /// A page read from the MVCC history at `rv`: for exact revisions the
    /// cache no longer retains. `410` once compacted.
    async fn page_from_history(
        &self,
        rt: &'static ResourceType,
        prefix: &str,
        start: String,
        rv: u64,
        selectors: &Selectors,
        page: &PageRequest,
    ) -> Result<(Vec<Arc<CachedObject>>, Option<String>, Option<u64>), KubeError> {
        let mut start = start.into_bytes();
        let end = kubestore_storage::prefix_end(prefix.as_bytes());
        let limit = page.limit;
        let mut items = Vec::new();
        let mut remaining = None;
        let mut next: Option<String> = None;
        // With selectors a chunk may match fewer than `limit`: read on.
        loop {
            let read = RangeRequest {
                range: KeyRange {
                    key: start.clone(),
                    range_end: end.clone(),
                },
                limit: if limit > 0 { limit.max(64) } else { 0 },
                revision: Some(Revision(rv)),
                ..RangeRequest::default()
            };
            // A history scan: off the async workers.
            let resp = self
                .node
                .store()
                .run_blocking(move |s| s.range(&read))
                .await
                .map_err(|e| match e {
                    kubestore_storage::StoreError::Compacted { .. } if page.token.is_some() => {
                        let fresh = page.token.as_ref().map(|t| {
                            ContinueToken {
                                revision: None,
                                start: t.start.clone(),
                                remaining: None,
                            }
                            .encode()
                        });
                        paging::expired_continue(fresh)
                    }
                    other => KubeError::from(other),
                })?;
            let total = resp.count;
            let mut taken = 0u64;
            for kv in &resp.kvs {
                taken += 1;
                if limit > 0 && items.len() as u64 == limit {
                    // One more match exists beyond the page.
                    next = Some(String::from_utf8_lossy(&kv.key).into_owned());
                    break;
                }
                let line = WatchEventType::Added;
                if let Some(obj) =
                    CachedObject::decode(rt, &kv.key, &kv.value, kv.mod_revision.0, line)
                        .filter(|o| o.matches(selectors))
                {
                    items.push(Arc::new(obj));
                }
            }
            if next.is_some() {
                if selectors.is_empty() {
                    remaining = Some(total - (taken - 1));
                }
                break;
            }
            match resp.kvs.last() {
                Some(last) if resp.more => {
                    start = last.key.to_vec();
                    start.push(0);
                }
                _ => break,
            }
        }
        Ok((items, next, remaining))
    }
}
