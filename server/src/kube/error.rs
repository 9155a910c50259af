//! The Kubernetes layer's one error type: what went wrong with a verb, in
//! Kubernetes terms (not found, already exists, conflict, invalid with its
//! field causes, gone, too large a resource version, unavailable, outcome
//! unknown), never how it is sent. `http::status` is the only place that
//! turns a [`KubeError`] into a `Status` with its code, reason and message.
//!
//! Storage and Raft errors become kube errors here, once, so no call site
//! has to remember to remap them: a read below the compaction point is
//! [`KubeError::Expired`] wherever it happens.

use kubestore_raft::RaftNodeError;
use kubestore_storage::StoreError;
use serde_json::json;

use crate::kube::resources::ResourceType;

/// One field problem of an `Invalid` error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldCause {
    /// `FieldValueInvalid`, `FieldValueRequired`, ...
    pub reason: &'static str,
    pub field: String,
    /// The full message, `metadata.name: Invalid value: "x": ...`.
    pub message: String,
}

impl FieldCause {
    pub fn invalid(field: &str, value: &str, detail: &str) -> Self {
        Self {
            reason: "FieldValueInvalid",
            field: field.to_string(),
            message: format!("Invalid value: {}: {detail}", json!(value)),
        }
    }

    pub fn required(field: &str, detail: &str) -> Self {
        Self {
            reason: "FieldValueRequired",
            field: field.to_string(),
            message: format!("Required value: {detail}"),
        }
    }

    pub fn not_supported(field: &str, value: &str, supported: &[&str]) -> Self {
        let list: Vec<String> = supported.iter().map(|s| json!(s).to_string()).collect();
        Self {
            reason: "FieldValueNotSupported",
            field: field.to_string(),
            message: format!(
                "Unsupported value: {}: supported values: {}",
                json!(value),
                list.join(", ")
            ),
        }
    }

    pub fn forbidden(field: &str, detail: &str) -> Self {
        Self {
            reason: "FieldValueForbidden",
            field: field.to_string(),
            message: format!("Forbidden: {detail}"),
        }
    }
}

/// Every way a Kubernetes verb, read or input check can fail.
#[derive(Debug, Clone, thiserror::Error)]
pub enum KubeError {
    /// `resource` is the group resource (`deployments.apps`).
    #[error("{resource} \"{name}\" not found")]
    NotFound { resource: String, name: String },
    #[error("{resource} \"{name}\" already exists")]
    AlreadyExists { resource: String, name: String },
    /// An optimistic-concurrency or precondition failure.
    #[error("conflict on {resource} \"{name}\": {detail}")]
    Conflict {
        resource: String,
        name: String,
        detail: String,
    },
    /// A server-side apply that would change fields other managers own:
    /// kube's message and one `FieldManagerConflict` cause per field and
    /// manager.
    #[error("{message}")]
    ApplyConflict {
        message: String,
        causes: Vec<FieldCause>,
    },
    /// The object (or the list options, kind `ListOptions.meta.k8s.io`)
    /// fails validation; `kind` is the group kind.
    #[error("{kind} \"{name}\" is invalid ({} causes)", .causes.len())]
    Invalid {
        kind: String,
        group: String,
        name: String,
        causes: Vec<FieldCause>,
    },
    /// Malformed input: a selector, a continue token, a body, a number.
    #[error("{0}")]
    BadRequest(String),
    /// The verb is not allowed on this object.
    #[error("{message}")]
    Forbidden {
        resource: String,
        name: String,
        message: String,
    },
    /// A create in a namespace that is being terminated (`403`, with the
    /// `NamespaceTerminating` cause kube's lifecycle admission adds).
    #[error("{resource} \"{name}\" is forbidden: unable to create new content in namespace {namespace} because it is being terminated")]
    NamespaceTerminating {
        resource: String,
        name: String,
        namespace: String,
    },
    /// The revision a read needs was compacted away.
    #[error("{0}")]
    Expired(String),
    /// A continue token whose revision was compacted, with a fresh token
    /// that continues at the latest revision.
    #[error("{message}")]
    ExpiredContinue {
        message: String,
        token: Option<String>,
    },
    /// A read for a revision this node did not reach in time.
    #[error("too large resource version: {requested}, current: {current}")]
    TooLargeResourceVersion { requested: u64, current: u64 },
    /// The store cannot answer now (a snapshot is being installed).
    #[error("{0}")]
    Unavailable(String),
    /// Raft failed: retryable (unavailable), outcome unknown (timeout),
    /// a command over the limits, or fatal. See
    /// [`RaftNodeError::is_retryable`].
    #[error(transparent)]
    Raft(#[from] RaftNodeError),
    /// A broken invariant: never the client's fault.
    #[error("{0}")]
    Internal(String),
}

impl KubeError {
    pub fn not_found(rt: &ResourceType, name: &str) -> Self {
        KubeError::NotFound {
            resource: rt.group_resource(),
            name: name.to_string(),
        }
    }

    pub fn already_exists(rt: &ResourceType, name: &str) -> Self {
        KubeError::AlreadyExists {
            resource: rt.group_resource(),
            name: name.to_string(),
        }
    }

    /// The optimistic-concurrency failure of an update or delete.
    pub fn conflict(rt: &ResourceType, name: &str) -> Self {
        KubeError::Conflict {
            resource: rt.group_resource(),
            name: name.to_string(),
            detail: "the object has been modified; please apply your changes to the latest version and try again"
                .to_string(),
        }
    }

    pub fn invalid(rt: &ResourceType, name: &str, causes: Vec<FieldCause>) -> Self {
        KubeError::Invalid {
            kind: rt.group_kind(),
            group: rt.group.to_string(),
            name: name.to_string(),
            causes,
        }
    }

    /// Invalid list/watch options (kind `ListOptions`).
    pub fn invalid_list_options(causes: Vec<FieldCause>) -> Self {
        KubeError::Invalid {
            kind: "ListOptions.meta.k8s.io".into(),
            group: "meta.k8s.io".into(),
            name: String::new(),
            causes,
        }
    }
}

/// A storage read's failure: a compacted revision is kube's "too old"
/// (410) wherever it happens, an install in progress is unavailable (503),
/// anything else internal.
impl From<StoreError> for KubeError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Compacted { .. } => {
                KubeError::Expired("The resourceVersion for the provided list is too old.".into())
            }
            StoreError::Installing => KubeError::Unavailable(e.to_string()),
            other => KubeError::Internal(other.to_string()),
        }
    }
}

/// A write's failure: Raft's error keeps its class; a refusal by the state
/// machine or an answer of another command family cannot come from a
/// Kubernetes verb's transaction (its guards are compares, decided as a
/// failed txn, not refused), so it is internal.
impl From<crate::write::WriteError> for KubeError {
    fn from(e: crate::write::WriteError) -> Self {
        match e {
            crate::write::WriteError::Raft(e) => KubeError::Raft(e),
            other => KubeError::Internal(other.to_string()),
        }
    }
}
