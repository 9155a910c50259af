//! The options of the write verbs, validated as kube validates them:
//! `dryRun` (on create, update, patch and delete) and `DeleteOptions`
//! (preconditions, propagation policy, grace period). What the options
//! make a write do is decided by the store (`dryRun`) and by
//! [`crate::kube::deletion`] (a delete's effect).
//!
//! An invalid option is kube's `422 Invalid` of the options kind
//! (`CreateOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value:
//! ["x"]: supported values: "All"`), as the kube-apiserver's handlers
//! answer it (apimachinery `ValidateDryRun`, `ValidateDeleteOptions`).

use serde_json::{json, Map, Value};

use crate::kube::error::{FieldCause, KubeError};

/// Which verb's options: the kind named in an invalid-options error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionsKind {
    Create,
    Update,
    Patch,
    Delete,
}

impl OptionsKind {
    fn kind(self) -> &'static str {
        match self {
            OptionsKind::Create => "CreateOptions.meta.k8s.io",
            OptionsKind::Update => "UpdateOptions.meta.k8s.io",
            OptionsKind::Patch => "PatchOptions.meta.k8s.io",
            OptionsKind::Delete => "DeleteOptions.meta.k8s.io",
        }
    }

    fn invalid(self, causes: Vec<FieldCause>) -> KubeError {
        KubeError::Invalid {
            kind: self.kind().into(),
            group: "meta.k8s.io".into(),
            name: String::new(),
            causes,
        }
    }
}

/// Whether a write is a dry run: every check runs, nothing is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DryRun {
    #[default]
    No,
    /// `dryRun=All`.
    All,
}

impl DryRun {
    /// The `dryRun` values of a request: none (or only empty ones) is a
    /// real write, `All` a dry run, anything else refused as kube does.
    pub fn parse<S: AsRef<str>>(values: &[S], verb: OptionsKind) -> Result<Self, KubeError> {
        let values: Vec<&str> = values
            .iter()
            .map(AsRef::as_ref)
            .filter(|v| !v.is_empty())
            .collect();
        if values.is_empty() {
            return Ok(DryRun::No);
        }
        if values.iter().all(|v| *v == "All") {
            return Ok(DryRun::All);
        }
        Err(verb.invalid(vec![FieldCause {
            reason: "FieldValueNotSupported",
            field: "dryRun".into(),
            message: format!(
                "Unsupported value: {}: supported values: \"All\"",
                json!(values)
            ),
        }]))
    }

    pub fn is_dry_run(self) -> bool {
        self == DryRun::All
    }
}

/// Optional preconditions of a delete (`DeleteOptions.preconditions`).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Preconditions {
    pub uid: Option<String>,
    pub resource_version: Option<u64>,
}

/// What happens to the dependents of a deleted object
/// (`DeleteOptions.propagationPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    /// Dependents are kept, their owner references to it removed (the
    /// `orphan` finalizer, finished by the garbage collector).
    Orphan,
    /// The object goes now, its dependents after it (the garbage collector).
    Background,
    /// Its dependents go first (the `foregroundDeletion` finalizer).
    Foreground,
}

impl Propagation {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "Orphan" => Some(Propagation::Orphan),
            "Background" => Some(Propagation::Background),
            "Foreground" => Some(Propagation::Foreground),
            _ => None,
        }
    }
}

/// A delete's options, read from its body or its query.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DeleteOptions {
    pub preconditions: Preconditions,
    /// `None`: the type's default, or what the object's finalizers say.
    pub propagation: Option<Propagation>,
    /// The deprecated `orphanDependents`: `true` is `Orphan`, `false`
    /// deletes dependents (and makes a delete that did not finish `202`).
    pub orphan_dependents: Option<bool>,
    /// `gracePeriodSeconds`: pods delete gracefully
    /// ([`crate::kube::deletion::pod_grace_period`]); every other type
    /// ignores it, and one held by finalizers records a grace period of
    /// 0, as kube does.
    pub grace_period_seconds: Option<i64>,
    pub dry_run: DryRun,
}

impl DeleteOptions {
    /// Decodes `DeleteOptions` from the JSON fields a client sent, in its
    /// body (with or without `kind`/`apiVersion`) or as query parameters
    /// (`fields` then holds strings), and validates them.
    pub fn decode(fields: &Map<String, Value>) -> Result<Self, KubeError> {
        let bad =
            |what: &str| KubeError::BadRequest(format!("couldn't decode DeleteOptions: {what}"));
        let mut opts = DeleteOptions::default();
        if let Some(p) = fields.get("preconditions").filter(|p| !p.is_null()) {
            let p = p
                .as_object()
                .ok_or_else(|| bad("preconditions must be an object"))?;
            opts.preconditions.uid = match p.get("uid") {
                None | Some(Value::Null) => None,
                Some(Value::String(u)) => Some(u.clone()),
                Some(_) => return Err(bad("preconditions.uid must be a string")),
            };
            opts.preconditions.resource_version = match p.get("resourceVersion") {
                None | Some(Value::Null) => None,
                Some(Value::String(rv)) => Some(rv.parse().map_err(|_| {
                    KubeError::BadRequest(format!("invalid resourceVersion precondition {rv:?}"))
                })?),
                Some(_) => return Err(bad("preconditions.resourceVersion must be a string")),
            };
        }
        opts.grace_period_seconds = match fields.get("gracePeriodSeconds") {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) => Some(n.as_i64().ok_or_else(|| bad("gracePeriodSeconds"))?),
            Some(Value::String(s)) if s.is_empty() => None,
            Some(Value::String(s)) => Some(s.parse().map_err(|_| bad("gracePeriodSeconds"))?),
            Some(_) => return Err(bad("gracePeriodSeconds must be an integer")),
        };
        opts.orphan_dependents = match fields.get("orphanDependents") {
            None | Some(Value::Null) => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(Value::String(s)) if s.is_empty() => None,
            // Query parameters: kube's lenient booleans.
            Some(Value::String(s)) => Some(!(s == "0" || s.eq_ignore_ascii_case("false"))),
            Some(_) => return Err(bad("orphanDependents must be a boolean")),
        };
        let policy = match fields.get("propagationPolicy") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.is_empty() => None,
            Some(Value::String(s)) => Some(s.as_str()),
            Some(_) => return Err(bad("propagationPolicy must be a string")),
        };
        let dry_run: Vec<String> = match fields.get("dryRun") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| v.as_str().map(str::to_string))
                .collect::<Option<_>>()
                .ok_or_else(|| bad("dryRun must be a list of strings"))?,
            Some(_) => return Err(bad("dryRun must be a list of strings")),
        };

        let mut causes = Vec::new();
        if let Some(p) = policy {
            if opts.orphan_dependents.is_some() {
                causes.push(FieldCause::invalid(
                    "propagationPolicy",
                    p,
                    "orphanDependents and deletionPropagation cannot be both set",
                ));
            }
            match Propagation::parse(p) {
                Some(parsed) => opts.propagation = Some(parsed),
                None => causes.push(FieldCause::not_supported(
                    "propagationPolicy",
                    p,
                    &["Foreground", "Background", "Orphan", "nil"],
                )),
            }
        }
        match DryRun::parse(&dry_run, OptionsKind::Delete) {
            Ok(d) => opts.dry_run = d,
            Err(KubeError::Invalid { causes: c, .. }) => causes.extend(c),
            Err(e) => return Err(e),
        }
        if causes.is_empty() {
            Ok(opts)
        } else {
            Err(OptionsKind::Delete.invalid(causes))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!("an object"),
        }
    }

    #[test]
    fn dry_run_is_all_or_nothing_and_anything_else_is_kubes_422() {
        assert_eq!(
            DryRun::parse::<&str>(&[], OptionsKind::Create).ok(),
            Some(DryRun::No)
        );
        assert_eq!(
            DryRun::parse(&[""], OptionsKind::Create).ok(),
            Some(DryRun::No)
        );
        assert_eq!(
            DryRun::parse(&["All"], OptionsKind::Update).ok(),
            Some(DryRun::All)
        );
        match DryRun::parse(&["Some"], OptionsKind::Create) {
            Err(KubeError::Invalid {
                kind, name, causes, ..
            }) => {
                assert_eq!(kind, "CreateOptions.meta.k8s.io");
                assert_eq!(name, "");
                assert_eq!(causes[0].field, "dryRun");
                assert_eq!(
                    causes[0].message,
                    r#"Unsupported value: ["Some"]: supported values: "All""#
                );
            }
            other => panic!("expected 422, got {other:?}"),
        }
    }

    #[test]
    fn delete_options_come_from_a_body_or_a_query_and_are_validated() {
        let body = fields(json!({
            "kind": "DeleteOptions", "apiVersion": "v1",
            "propagationPolicy": "Foreground",
            "preconditions": {"uid": "u1", "resourceVersion": "42"},
            "gracePeriodSeconds": 0,
            "dryRun": ["All"]
        }));
        let opts = DeleteOptions::decode(&body).expect("valid");
        assert_eq!(opts.propagation, Some(Propagation::Foreground));
        assert_eq!(opts.preconditions.uid.as_deref(), Some("u1"));
        assert_eq!(opts.preconditions.resource_version, Some(42));
        assert_eq!(opts.grace_period_seconds, Some(0));
        assert!(opts.dry_run.is_dry_run());

        let query = fields(json!({"propagationPolicy": "Orphan", "gracePeriodSeconds": "5"}));
        let opts = DeleteOptions::decode(&query).expect("valid");
        assert_eq!(opts.propagation, Some(Propagation::Orphan));
        assert_eq!(opts.grace_period_seconds, Some(5));

        match DeleteOptions::decode(&fields(json!({"propagationPolicy": "Sideways"}))) {
            Err(KubeError::Invalid { kind, causes, .. }) => {
                assert_eq!(kind, "DeleteOptions.meta.k8s.io");
                assert_eq!(causes[0].reason, "FieldValueNotSupported");
            }
            other => panic!("expected 422, got {other:?}"),
        }
        assert!(matches!(
            DeleteOptions::decode(&fields(
                json!({"propagationPolicy": "Orphan", "orphanDependents": true})
            )),
            Err(KubeError::Invalid { .. })
        ));
        assert!(matches!(
            DeleteOptions::decode(&fields(json!({"preconditions": {"resourceVersion": "x"}}))),
            Err(KubeError::BadRequest(_))
        ));
    }
}
