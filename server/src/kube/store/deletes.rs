//! Deletes: one object (`DELETE`), a collection (`deletecollection`),
//! and a namespace's `/finalize`. What a delete does (finalizers,
//! propagation, a namespace's termination) is [`crate::kube::deletion`]'s
//! decision, made on the state the write is guarded by; each one object
//! goes through [`KubeStore::read_modify_write`] like every other change.

use std::sync::Arc;

use serde_json::{json, Value};

use kubestore_storage::{Compare, CompareOp, Txn};

use super::writes::{delete_key, put, Change, UPDATE_RETRIES};
use super::{Freshness, GuardedWrite, KubeStore, Listed, ReadPath};
use crate::kube::admission;
use crate::kube::cache::CachedObject;
use crate::kube::deletion::{self, DeletePlan};
use crate::kube::error::KubeError;
use crate::kube::object;
use crate::kube::options::{DeleteOptions, DryRun};
use crate::kube::resources::{self, ResourceType};
use crate::kube::selectors::Selectors;

/// What a DELETE did: the object (its last state, or as it is kept while
/// finalizers hold it) and whether it is gone.
#[derive(Debug, Clone)]
pub struct Deleted {
    pub object: Value,
    /// Removed now; `false`: kept, marked for deletion (or a dry run of
    /// that).
    pub gone: bool,
}

impl KubeStore {
    /// A DELETE of one object with `opts`, decided by
    /// [`deletion::plan_delete`] (a namespace:
    /// [`deletion::plan_namespace_delete`]) on the state the write is
    /// guarded by, after the preconditions: the object is removed now, or
    /// kept marked for deletion (finalizers, or a terminating namespace)
    /// for the controllers to finish.
    #[tracing::instrument(level = "debug", skip(self, rt, opts), fields(resource = rt.plural))]
    pub async fn delete(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Deleted, KubeError> {
        admission::admit_delete(rt, name)?;
        let key = rt.key(ns, name);
        let now = chrono::Utc::now();
        let (deleted, revision) = self
            .read_modify_write(rt, name, &key, UPDATE_RETRIES, opts.dry_run, |current| {
                let stored = current.stored();
                deletion::check_preconditions(
                    rt,
                    name,
                    stored,
                    current.revision(),
                    &opts.preconditions,
                )?;
                let last = current.object().unwrap_or_else(|| json!({}));
                let plan = if rt.plural == "namespaces" {
                    deletion::plan_namespace_delete(stored, now)
                } else {
                    deletion::plan_delete(rt, stored, opts, now)
                };
                let (ops, deleted) = match plan {
                    DeletePlan::Delete => (
                        vec![delete_key(&key)],
                        Deleted {
                            object: last,
                            gone: true,
                        },
                    ),
                    DeletePlan::Mark(marked) => (
                        vec![put(&key, &marked)],
                        Deleted {
                            object: Value::Object(marked),
                            gone: false,
                        },
                    ),
                    DeletePlan::Pending => (
                        Vec::new(),
                        Deleted {
                            object: last,
                            gone: false,
                        },
                    ),
                };
                Ok::<_, KubeError>(Change {
                    ops,
                    precondition: None,
                    answer: deleted,
                })
            })
            .await?;
        let mut deleted = deleted;
        if !deleted.gone {
            if let Some(meta) = deleted
                .object
                .get_mut("metadata")
                .and_then(Value::as_object_mut)
            {
                meta.insert("resourceVersion".into(), json!(revision.0.to_string()));
            }
        }
        Ok(deleted)
    }

    /// Removes the namespace controller's `kubernetes` finalizer from a
    /// terminating namespace whose contents are gone, and the namespace
    /// with it when no other finalizer holds it. Guarded like any update;
    /// a namespace that is not terminating is left alone.
    pub async fn finalize_namespace(&self, name: &str) -> Result<(), KubeError> {
        let rt = resources::namespaces();
        let key = rt.key(None, name);
        self.read_modify_write(rt, name, &key, UPDATE_RETRIES, DryRun::No, |current| {
            let mut stored = current.stored().clone();
            if !deletion::is_being_deleted(&stored) {
                return Ok::<_, KubeError>(Change {
                    ops: Vec::new(),
                    precondition: None,
                    answer: (),
                });
            }
            let left: Vec<String> = deletion::namespace_finalizers(&stored)
                .into_iter()
                .filter(|f| f != deletion::FINALIZER_NAMESPACE)
                .collect();
            let op = if left.is_empty() && deletion::finalizers(&stored).is_empty() {
                delete_key(&key)
            } else {
                let spec = stored.entry("spec").or_insert_with(|| json!({}));
                if !spec.is_object() {
                    *spec = json!({});
                }
                spec["finalizers"] = json!(left);
                put(&key, &stored)
            };
            Ok(Change {
                ops: vec![op],
                precondition: None,
                answer: (),
            })
        })
        .await?;
        Ok(())
    }

    /// Deletes every object of a collection matching `selectors` with
    /// `opts` (each as [`deletion::plan_delete`] decides: removed, or kept
    /// marked while finalizers hold it) and returns what was deleted or
    /// marked. Each object is guarded by the revision it was listed at, so
    /// one changed meanwhile (and maybe no longer matching) is listed again
    /// rather than deleted blindly; all changes share one revision.
    /// Namespaces have no collection delete (the front end answers `405`,
    /// as kube does).
    #[tracing::instrument(level = "debug", skip(self, rt, selectors, opts), fields(resource = rt.plural))]
    pub async fn delete_collection(
        &self,
        rt: &'static ResourceType,
        ns: Option<&str>,
        selectors: &Selectors,
        opts: &DeleteOptions,
    ) -> Result<Listed, KubeError> {
        let now = chrono::Utc::now();
        for _ in 0..UPDATE_RETRIES {
            let listed = self.list(rt, ns, Freshness::MostRecent, selectors).await?;
            let mut compare = Vec::new();
            let mut success = Vec::new();
            let mut deleted = Vec::new();
            for cached in listed.items {
                let item = &cached.to_value();
                let name = item
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                let item_ns = item
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .map(str::to_string);
                let Value::Object(mut stored) = item.clone() else {
                    continue;
                };
                object::metadata_mut(&mut stored).remove("resourceVersion");
                let key = rt.key(item_ns.as_deref(), &name);
                let op = match deletion::plan_delete(rt, &stored, opts, now) {
                    DeletePlan::Delete => {
                        deleted.push(cached.clone());
                        delete_key(&key)
                    }
                    DeletePlan::Mark(marked) => {
                        deleted.extend(
                            CachedObject::from_value(rt, &Value::Object(marked.clone()))
                                .map(Arc::new),
                        );
                        put(&key, &marked)
                    }
                    DeletePlan::Pending => {
                        deleted.push(cached.clone());
                        continue;
                    }
                };
                compare.push(Compare::mod_revision(
                    key.clone(),
                    CompareOp::Equal,
                    cached.revision,
                ));
                success.push(op);
            }
            let revision = if success.is_empty() || opts.dry_run.is_dry_run() {
                listed.revision
            } else {
                let txn = Txn {
                    compare,
                    success,
                    failure: Vec::new(),
                };
                match self.write_txn(txn).await? {
                    (resp, revision) if resp.succeeded => revision,
                    _ => {
                        self.count_guard_failure(GuardedWrite::DeleteCollection);
                        continue;
                    }
                }
            };
            return Ok(Listed {
                items: deleted,
                revision,
                continue_token: None,
                remaining: None,
                served: ReadPath::QuorumCache,
            });
        }
        Err(KubeError::Conflict {
            resource: rt.group_resource(),
            name: String::new(),
            detail: "the collection kept changing; try again".into(),
        })
    }
}
