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
use std::fmt;

use serde_json::{Map, Value};

/// The type an error is about, as its messages name it. The type table
/// (`kube::resources`) implements it: errors sit below the table, so the
/// table depends on them and not the other way round.
pub trait ErrorSubject {
    /// The group-qualified resource: `configmaps`, `deployments.apps`.
    fn group_resource(&self) -> String;
    /// The group-qualified kind: `ConfigMap`, `Deployment.apps`.
    fn group_kind(&self) -> String;
    /// The API group (`""` for the core group).
    fn group(&self) -> &str;
}

/// One field problem of an `Invalid` error, as apimachinery's
/// `field.Error` becomes a `StatusCause`: its reason (the error type), its
/// field path (`spec.containers[0].image`) and its message, the error
/// body without the path (`Required value`, `Invalid value: "x": detail`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldCause {
    /// `FieldValueInvalid`, `FieldValueRequired`, ...
    pub reason: &'static str,
    pub field: String,
    /// The message, `Invalid value: "x": ...` (the `Status` message puts
    /// the field in front of it).
    pub message: String,
}

/// The value a field error shows, printed as kube's `field.Error` prints
/// its Go value: a string quoted (`%q`), a number or boolean bare, a nil
/// pointer as `"null"`, and anything else as Go's `%#v` of the value
/// ([`BadValue::Go`], already rendered; see [`BadValue::string_map`] and
/// [`BadValue::label_selector`] for the two kube shows most).
#[derive(Debug, Clone, PartialEq)]
pub enum BadValue {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    /// A Go rendering, printed as is.
    Go(String),
}

impl BadValue {
    /// A JSON value as kube would show the Go value decoded from it:
    /// scalars as scalars, `null` as `"null"`, a list or an object as its
    /// JSON (kube shows its internal struct with `%#v`, which has no JSON
    /// equivalent; the JSON says the same).
    pub fn of_json(value: &Value) -> Self {
        match value {
            Value::String(s) => BadValue::Str(s.clone()),
            Value::Bool(b) => BadValue::Bool(*b),
            Value::Number(n) => match n.as_i64() {
                Some(i) => BadValue::Int(i),
                None => BadValue::Float(n.as_f64().unwrap_or_default()),
            },
            Value::Null => BadValue::Str("null".into()),
            other => BadValue::Go(other.to_string()),
        }
    }

    /// A `map[string]string` (labels, a selector's `matchLabels`) as Go's
    /// `%#v` prints it: `map[string]string{"app":"web", "tier":"fe"}`,
    /// keys sorted; `map[string]string(nil)` for none. Values that are not
    /// strings are shown as their JSON.
    pub fn string_map(map: Option<&Map<String, Value>>) -> Self {
        BadValue::Go(go_string_map(map))
    }

    /// A `metav1.LabelSelector` as Go's `%#v` prints it (what kube shows
    /// for an immutable selector):
    /// `v1.LabelSelector{MatchLabels:map[string]string{"app":"web"},
    /// MatchExpressions:[]v1.LabelSelectorRequirement(nil)}`; an absent
    /// selector (a nil pointer) is `"null"`.
    pub fn label_selector(selector: Option<&Value>) -> Self {
        let Some(Value::Object(sel)) = selector else {
            return BadValue::Str("null".into());
        };
        let labels = go_string_map(sel.get("matchLabels").and_then(Value::as_object));
        let expressions = match sel.get("matchExpressions").and_then(Value::as_array) {
            None => "[]v1.LabelSelectorRequirement(nil)".to_string(),
            Some(list) => {
                let items: Vec<String> = list
                    .iter()
                    .map(|req| {
                        let text = |k: &str| req.get(k).and_then(Value::as_str).unwrap_or("");
                        let values = match req.get("values").and_then(Value::as_array) {
                            None => "[]string(nil)".to_string(),
                            Some(vs) => format!(
                                "[]string{{{}}}",
                                vs.iter()
                                    .map(|v| go_quote(v.as_str().unwrap_or("")))
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        };
                        format!(
                            "v1.LabelSelectorRequirement{{Key:{}, Operator:{}, Values:{values}}}",
                            go_quote(text("key")),
                            go_quote(text("operator"))
                        )
                    })
                    .collect();
                format!("[]v1.LabelSelectorRequirement{{{}}}", items.join(", "))
            }
        };
        BadValue::Go(format!(
            "v1.LabelSelector{{MatchLabels:{labels}, MatchExpressions:{expressions}}}"
        ))
    }
}

impl From<&str> for BadValue {
    fn from(s: &str) -> Self {
        BadValue::Str(s.to_string())
    }
}

impl From<String> for BadValue {
    fn from(s: String) -> Self {
        BadValue::Str(s)
    }
}

impl From<i64> for BadValue {
    fn from(i: i64) -> Self {
        BadValue::Int(i)
    }
}

impl From<bool> for BadValue {
    fn from(b: bool) -> Self {
        BadValue::Bool(b)
    }
}

impl fmt::Display for BadValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadValue::Str(s) => f.write_str(&go_quote(s)),
            BadValue::Int(i) => write!(f, "{i}"),
            // Go's %v of a float64: the shortest representation.
            BadValue::Float(x) => write!(f, "{x}"),
            BadValue::Bool(b) => write!(f, "{b}"),
            BadValue::Go(s) => f.write_str(s),
        }
    }
}

/// A string as Go's `strconv.Quote` (`%q`) writes it: printable runes
/// as they are, `\a \b \f \n \r \t \v`, other control bytes as `\xNN`,
/// other unprintable runes as `\uNNNN` or `\UNNNNNNNN`.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() || c == '\u{feff}' || ('\u{2028}'..='\u{2029}').contains(&c) => {
                let n = c as u32;
                if n <= 0xffff {
                    out.push_str(&format!("\\u{n:04x}"));
                } else {
                    out.push_str(&format!("\\U{n:08x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn go_string_map(map: Option<&Map<String, Value>>) -> String {
    let Some(map) = map else {
        return "map[string]string(nil)".to_string();
    };
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    let entries: Vec<String> = keys
        .into_iter()
        .map(|k| {
            let v = match &map[k] {
                Value::String(s) => go_quote(s),
                other => other.to_string(),
            };
            format!("{}:{v}", go_quote(k))
        })
        .collect();
    format!("map[string]string{{{}}}", entries.join(", "))
}

impl FieldCause {
    fn with(reason: &'static str, field: &str, message: String) -> Self {
        Self {
            reason,
            field: field.to_string(),
            message,
        }
    }

    /// `Invalid value: "<value>": <detail>` of a string value.
    pub fn invalid(field: &str, value: &str, detail: &str) -> Self {
        Self::invalid_value(field, BadValue::from(value), detail)
    }

    /// `Invalid value: <value>: <detail>` of any value.
    pub fn invalid_value(field: &str, value: BadValue, detail: &str) -> Self {
        Self::with(
            "FieldValueInvalid",
            field,
            with_detail(format!("Invalid value: {value}"), detail),
        )
    }

    /// `Required value`, with `: <detail>` when there is one.
    pub fn required(field: &str, detail: &str) -> Self {
        Self::with(
            "FieldValueRequired",
            field,
            with_detail("Required value".into(), detail),
        )
    }

    /// `Unsupported value: "<value>": supported values: "a", "b"` of a
    /// string value.
    pub fn not_supported(field: &str, value: &str, supported: &[&str]) -> Self {
        Self::not_supported_value(field, BadValue::from(value), supported)
    }

    /// [`not_supported`](Self::not_supported) of any value.
    pub fn not_supported_value(field: &str, value: BadValue, supported: &[&str]) -> Self {
        let list: Vec<String> = supported.iter().map(|s| go_quote(s)).collect();
        let detail = if list.is_empty() {
            String::new()
        } else {
            format!("supported values: {}", list.join(", "))
        };
        Self::with(
            "FieldValueNotSupported",
            field,
            with_detail(format!("Unsupported value: {value}"), &detail),
        )
    }

    /// `Forbidden: <detail>`.
    pub fn forbidden(field: &str, detail: &str) -> Self {
        Self::with(
            "FieldValueForbidden",
            field,
            with_detail("Forbidden".into(), detail),
        )
    }

    /// `Duplicate value: <value>`.
    pub fn duplicate(field: &str, value: BadValue) -> Self {
        Self::with(
            "FieldValueDuplicate",
            field,
            format!("Duplicate value: {value}"),
        )
    }

    /// `Not found: <value>`.
    pub fn not_found(field: &str, value: BadValue) -> Self {
        Self::with("FieldValueNotFound", field, format!("Not found: {value}"))
    }

    /// `Too long: may not be more than <max> bytes` (the value is never
    /// shown).
    pub fn too_long(field: &str, max: usize) -> Self {
        let unit = if max == 1 { "byte" } else { "bytes" };
        Self::with(
            "FieldValueTooLong",
            field,
            format!("Too long: may not be more than {max} {unit}"),
        )
    }
}

/// kube's error body: the detail follows a `: ` when there is one.
fn with_detail(mut head: String, detail: &str) -> String {
    if !detail.is_empty() {
        head.push_str(": ");
        head.push_str(detail);
    }
    head
}

/// Every way a Kubernetes verb, read or input check can fail.
#[derive(Debug, Clone, thiserror::Error)]
pub enum KubeError {
    /// `resource` is the group resource (`deployments.apps`).
    #[error("{resource} \"{name}\" not found")]
    NotFound { resource: String, name: String },
    #[error("{resource} \"{name}\" already exists")]
    AlreadyExists { resource: String, name: String },
    /// Every name generated from `generateName` was taken (kube's
    /// `NewGenerateNameConflict`: `409 AlreadyExists`, retry after 1 s).
    #[error("{resource} \"{name}\" already exists, the server was not able to generate a unique name for the object")]
    GeneratedNameConflict { resource: String, name: String },
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
    /// The verb is not allowed on the resource now (a create of a custom
    /// resource whose definition is being deleted).
    #[error("{0}")]
    MethodNotAllowed(String),
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
    pub fn not_found(rt: &impl ErrorSubject, name: &str) -> Self {
        KubeError::NotFound {
            resource: rt.group_resource(),
            name: name.to_string(),
        }
    }

    pub fn already_exists(rt: &impl ErrorSubject, name: &str) -> Self {
        KubeError::AlreadyExists {
            resource: rt.group_resource(),
            name: name.to_string(),
        }
    }

    /// The last of the names generated for a create was taken too.
    pub fn generated_name_conflict(rt: &impl ErrorSubject, name: &str) -> Self {
        KubeError::GeneratedNameConflict {
            resource: rt.group_resource(),
            name: name.to_string(),
        }
    }

    /// The optimistic-concurrency failure of an update or delete.
    pub fn conflict(rt: &impl ErrorSubject, name: &str) -> Self {
        KubeError::Conflict {
            resource: rt.group_resource(),
            name: name.to_string(),
            detail: "the object has been modified; please apply your changes to the latest version and try again"
                .to_string(),
        }
    }

    pub fn invalid(rt: &impl ErrorSubject, name: &str, causes: Vec<FieldCause>) -> Self {
        KubeError::Invalid {
            kind: rt.group_kind(),
            group: rt.group().to_string(),
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
