//! Server-side apply and field ownership: who manages which field of an
//! object (`metadata.managedFields`), kept up to date by every write, and
//! `application/apply-patch+yaml` merged by those ownerships. Pure: objects
//! and managers in, the object to store (its `managedFields` written) or
//! an [`ApplyError`] out; `http::patch` and the write handlers run it
//! inside the store's guarded read-modify-write.
//!
//! The semantics are structured-merge-diff's (`sigs.k8s.io/structured-merge-diff`)
//! and kube-apiserver's `fieldmanager`, learnt from their documentation and
//! source and written here anew:
//!
//! - A manager is a name, an operation (`Apply` or `Update`), for `Update`
//!   the apiVersion it wrote, and the subresource (`status`). Each owns a
//!   set of fields ([`fieldpath::FieldSet`], stored as `FieldsV1`).
//! - An update (POST, PUT, every non-apply PATCH, under `fieldManager` or
//!   the User-Agent's first word) takes the fields it added or changed
//!   from every other manager and owns them; fields it removed are owned
//!   by nobody. It never conflicts.
//! - An apply owns exactly the fields of its configuration ([`walk::field_set`]).
//!   The configuration is merged into the live object ([`walk::merge`]);
//!   fields the applier owned before and no longer sets are removed unless
//!   another manager owns them. Changing a field another manager owns is
//!   a conflict (`409`, one cause per field and manager) unless `force`,
//!   which takes it; setting it to the value it has shares it.
//! - Fields the server sets (`metadata.uid`, `name`, `resourceVersion`,
//!   `generation`, `creationTimestamp`, `managedFields`, `apiVersion`,
//!   `kind`) are nobody's; the status of a type with a status subresource
//!   is not the main resource's, and a status write owns only the status.
//! - `managedFields: []` (or `[{}]`) in a written object resets the
//!   ownerships; a written object without valid ones keeps the stored.
//! - kubectl moving an object from client-side to server-side apply: an
//!   apply by the manager `kubectl` does not conflict on fields the
//!   object's `last-applied-configuration` annotation set (and the object
//!   still has), and the annotation becomes the applied configuration.
//!
//! Where kubestore differs: kube drops a decoded `Update` manager's
//! struct-typed fields' own membership in ways that depend on Go's
//! zero values (pointer or not); here a struct that holds fields is never
//! a member itself, maps and list items always are. At most ten `Update`
//! managers are kept (older ones fold into `ancient-changes`), as in kube.

pub mod fieldpath;
pub mod walk;

#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::sync::LazyLock;

use serde_json::{json, Map, Value};

use crate::kube::error::{FieldCause, KubeError};
use crate::kube::resources::ResourceType;
use crate::kube::types::Schema;

use fieldpath::{FieldSet, Pe};
use walk::{Comparison, MissingKey, Ty};

/// kube's bound on a field manager's name.
pub const MAX_MANAGER_LEN: usize = 128;

/// How many `Update` managers an object keeps before the oldest fold into
/// [`ANCIENT_CHANGES`].
pub const MAX_UPDATE_MANAGERS: usize = 10;
pub const ANCIENT_CHANGES: &str = "ancient-changes";

/// A write's operation, as a managed-fields entry records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Apply,
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// Who writes: the manager's name and the subresource written
/// (`Some("status")`), and the apiVersion of the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manager {
    pub name: String,
    pub subresource: Option<String>,
    pub api_version: String,
}

/// One `metadata.managedFields` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub manager: String,
    pub operation: Operation,
    pub api_version: String,
    pub time: Option<String>,
    pub subresource: Option<String>,
    pub fields: FieldSet,
}

impl Entry {
    /// Whether `self` is `manager`'s entry for `op` (an apply's entry is
    /// the same whatever apiVersion it applied).
    fn is(&self, manager: &Manager, op: Operation) -> bool {
        self.manager == manager.name
            && self.operation == op
            && self.subresource == manager.subresource
            && (op == Operation::Apply || self.api_version == manager.api_version)
    }

    /// The manager as a conflict names it: `"name"[ with subresource
    /// "s"][ using <apiVersion>]` (`using` for updates only).
    fn describe(&self) -> String {
        let mut s = format!("{:?}", self.manager);
        if let Some(sub) = &self.subresource {
            s.push_str(&format!(" with subresource {sub:?}"));
        }
        if self.operation == Operation::Update {
            s.push_str(&format!(" using {}", self.api_version));
        }
        s
    }

    pub fn to_json(&self) -> Value {
        let mut e = json!({
            "manager": self.manager,
            "operation": self.operation.as_str(),
            "apiVersion": self.api_version,
            "fieldsType": "FieldsV1",
            "fieldsV1": self.fields.to_fields_v1(),
        });
        if let Some(t) = &self.time {
            e["time"] = json!(t);
        }
        if let Some(s) = &self.subresource {
            e["subresource"] = json!(s);
        }
        e
    }

    pub fn from_json(v: &Value) -> Option<Entry> {
        let operation = match v.get("operation")?.as_str()? {
            "Apply" => Operation::Apply,
            "Update" => Operation::Update,
            _ => return None,
        };
        if v.get("fieldsType")
            .is_some_and(|t| t.as_str() != Some("FieldsV1"))
        {
            return None;
        }
        let fields = match v.get("fieldsV1") {
            Some(f) => FieldSet::from_fields_v1(f)?,
            None => FieldSet::new(),
        };
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        Some(Entry {
            manager: s("manager").unwrap_or_default(),
            operation,
            api_version: s("apiVersion").unwrap_or_default(),
            time: s("time"),
            subresource: s("subresource").filter(|s| !s.is_empty()),
            fields,
        })
    }
}

/// Why an apply (or the tracking of an update) failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    /// Fields other managers own would change: one `(manager, path)` per
    /// conflict, in kube's order (managers sorted, paths in order).
    #[error("{}", conflict_message(.0))]
    Conflicts(Vec<(String, String)>),
    #[error(transparent)]
    MissingKey(#[from] MissingKey),
    /// An applied configuration that sets `metadata.managedFields`.
    #[error("metadata.managedFields must be nil")]
    ManagedFieldsSet,
    /// A configuration of a type that is atomic at its root and is not an
    /// object.
    #[error("the applied configuration is not a JSON object")]
    NotAnObject,
}

fn conflict_message(c: &[(String, String)]) -> String {
    if let [(manager, path)] = c {
        return format!("Apply failed with 1 conflict: conflict with {manager}: {path}");
    }
    let mut lines = Vec::new();
    let mut last: Option<&str> = None;
    for (manager, path) in c {
        if last != Some(manager) {
            lines.push(format!("conflicts with {manager}:"));
            last = Some(manager);
        }
        lines.push(format!("- {path}"));
    }
    format!(
        "Apply failed with {} conflicts: {}",
        c.len(),
        lines.join("\n")
    )
}

impl From<ApplyError> for KubeError {
    fn from(e: ApplyError) -> Self {
        match &e {
            ApplyError::Conflicts(c) => KubeError::ApplyConflict {
                message: e.to_string(),
                causes: c
                    .iter()
                    .map(|(manager, path)| FieldCause {
                        reason: "FieldManagerConflict",
                        field: path.clone(),
                        message: format!("conflict with {manager}"),
                    })
                    .collect(),
            },
            ApplyError::MissingKey(_) | ApplyError::ManagedFieldsSet | ApplyError::NotAnObject => {
                KubeError::BadRequest(e.to_string())
            }
        }
    }
}

/// What the field manager needs to know of the type being written.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub schema: &'a Schema,
    pub ty: Ty<'a>,
    /// The type has a status subresource: its main resource does not own
    /// `status`.
    pub status_subresource: bool,
}

impl Target<'static> {
    /// The built-in schema of `rt`, or none (a granular map) for a type
    /// without one.
    pub fn of(rt: &ResourceType) -> Self {
        let custom: Option<&'static crate::kube::resources::CustomType> = rt.custom;
        if let Some(schema) = custom.and_then(|c| c.type_schema.as_ref()) {
            // A custom type: its schema's list types and map keys.
            let ty = schema
                .for_kind(rt.group, rt.version, rt.kind)
                .map_or(Ty::Untyped, Ty::root);
            return Target {
                schema,
                ty,
                status_subresource: rt.has_status_subresource(),
            };
        }
        let schema = Schema::builtin();
        let ty = schema
            .for_kind(rt.group, rt.version, rt.kind)
            .map_or(Ty::Untyped, Ty::root);
        Target {
            schema,
            ty,
            status_subresource: rt.has_status_subresource(),
        }
    }
}

/// The fields no manager owns whatever the object: `apiVersion`, `kind`,
/// `metadata` and its server-set members; the second set adds `status`,
/// for a main resource whose type has a status subresource. Built once:
/// built per write they took 0.8% of the nodes' CPU under REST updates.
static NEVER_OWNED: LazyLock<[FieldSet; 2]> = LazyLock::new(|| {
    let mut set = FieldSet::new();
    for f in ["apiVersion", "kind", "metadata"] {
        set.insert(&[Pe::field(f)]);
    }
    for f in [
        "name",
        "namespace",
        "creationTimestamp",
        "selfLink",
        "uid",
        "generation",
        "managedFields",
        "resourceVersion",
    ] {
        set.insert(&[Pe::field("metadata"), Pe::field(f)]);
    }
    let mut with_status = set.clone();
    with_status.insert(&[Pe::field("status")]);
    [set, with_status]
});

/// The fields no manager owns, for a write of `manager` to `objs` (the
/// objects before and after): [`NEVER_OWNED`], and for the status
/// subresource every top-level field of either but `status`.
fn ignored(
    target: &Target<'_>,
    manager: &Manager,
    objs: &[&Map<String, Value>],
) -> Cow<'static, FieldSet> {
    let [plain, with_status] = &*NEVER_OWNED;
    if manager.subresource.as_deref() == Some("status") {
        let mut set = plain.clone();
        for top in top_keys(objs) {
            if top != "status" {
                set.insert(&[Pe::field(top)]);
            }
        }
        return Cow::Owned(set);
    }
    Cow::Borrowed(if target.status_subresource {
        with_status
    } else {
        plain
    })
}

fn top_keys<'v>(objs: &[&'v Map<String, Value>]) -> Vec<&'v String> {
    let mut keys: Vec<&String> = objs.iter().flat_map(|o| o.keys()).collect();
    keys.sort();
    keys.dedup();
    keys
}

/// The managers recorded in `obj`; `None` when it has none or they do not
/// decode.
fn decode(obj: &Map<String, Value>) -> Option<Vec<Entry>> {
    let list = obj.get("metadata")?.get("managedFields")?.as_array()?;
    list.iter().map(Entry::from_json).collect()
}

/// Whether `obj` asks for its managers to be reset (`managedFields: []`
/// or a single empty entry).
fn asks_reset(obj: &Map<String, Value>) -> bool {
    match obj
        .get("metadata")
        .and_then(|m| m.get("managedFields"))
        .and_then(Value::as_array)
    {
        Some(l) if l.is_empty() => true,
        Some(l) if l.len() == 1 => l[0].as_object().is_some_and(Map::is_empty),
        _ => false,
    }
}

/// The managers an update starts from: those the written object carries
/// (a client may rewrite them), reset by an empty list, else the stored
/// object's; a status write always starts from the stored ones.
fn managers_before(
    manager: &Manager,
    old: Option<&Map<String, Value>>,
    new: &Map<String, Value>,
) -> Vec<Entry> {
    let stored = || old.and_then(decode).unwrap_or_default();
    if manager.subresource.is_some() {
        return stored();
    }
    if asks_reset(new) {
        return Vec::new();
    }
    match decode(new) {
        Some(entries) if !entries.is_empty() => entries,
        _ => stored(),
    }
}

/// Writes `entries` into `obj`'s `metadata.managedFields` in kube's order
/// (applies first, then by time, manager, apiVersion, subresource),
/// folding the oldest updates past [`MAX_UPDATE_MANAGERS`] into
/// [`ANCIENT_CHANGES`].
fn encode(obj: &mut Map<String, Value>, mut entries: Vec<Entry>, now: &str) {
    entries.retain(|e| !e.fields.is_empty());
    let key = |e: &Entry| {
        (
            e.operation == Operation::Update,
            e.time.clone().unwrap_or_default(),
            e.manager.clone(),
            e.api_version.clone(),
            e.subresource.clone(),
        )
    };
    entries.sort_by_key(key);
    let is_ancient = |e: &Entry| e.manager == ANCIENT_CHANGES && e.operation == Operation::Update;
    let had_ancient = entries.iter().any(is_ancient);
    let updates = entries
        .iter()
        .filter(|e| e.operation == Operation::Update && !is_ancient(e))
        .count();
    if updates + usize::from(had_ancient) > MAX_UPDATE_MANAGERS {
        // Fold the oldest updates (and the earlier ancient changes) into
        // one entry, keeping the newest MAX - 1 updates as they are.
        let fold = updates + 1 - MAX_UPDATE_MANAGERS;
        let mut ancient = Entry {
            manager: ANCIENT_CHANGES.into(),
            operation: Operation::Update,
            api_version: String::new(),
            time: Some(now.to_string()),
            subresource: None,
            fields: FieldSet::new(),
        };
        let mut folded = 0;
        entries.retain(|e| {
            let take = is_ancient(e)
                || (e.operation == Operation::Update && folded < fold && {
                    folded += 1;
                    true
                });
            if take {
                ancient.fields = ancient.fields.union(&e.fields);
                ancient.api_version = e.api_version.clone();
            }
            !take
        });
        entries.push(ancient);
        entries.sort_by_key(key);
    }
    let meta = crate::kube::object::metadata_mut(obj);
    if entries.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert(
            "managedFields".into(),
            Value::Array(entries.iter().map(Entry::to_json).collect()),
        );
    }
}

/// Sets `manager`'s entry for `op` to `fields` (a new entry, or a changed
/// one, gets the time `now`).
fn set_own(
    entries: &mut Vec<Entry>,
    manager: &Manager,
    op: Operation,
    fields: FieldSet,
    now: &str,
) {
    match entries.iter_mut().find(|e| e.is(manager, op)) {
        Some(e) => {
            if e.fields != fields || e.api_version != manager.api_version {
                e.time = Some(now.to_string());
            }
            e.fields = fields;
            e.api_version = manager.api_version.clone();
        }
        None => entries.push(Entry {
            manager: manager.name.clone(),
            operation: op,
            api_version: manager.api_version.clone(),
            time: Some(now.to_string()),
            subresource: manager.subresource.clone(),
            fields,
        }),
    }
}

/// Compares two objects, leaving out the fields nobody owns.
fn compare_owned(
    target: &Target<'_>,
    manager: &Manager,
    old: &Map<String, Value>,
    new: &Map<String, Value>,
) -> Result<Comparison, MissingKey> {
    let ignored = ignored(target, manager, &[old, new]);
    let c = walk::compare(target.schema, target.ty, old, new)?;
    Ok(Comparison {
        added: c.added.recursive_difference(&ignored),
        modified: c.modified.recursive_difference(&ignored),
        removed: c.removed.recursive_difference(&ignored),
    })
}

/// Records an `Update` by `manager` that turns `old` (`None` for a
/// create) into `new`: `new`'s `metadata.managedFields` are rewritten.
pub fn track_update(
    target: &Target<'_>,
    manager: &Manager,
    old: Option<&Map<String, Value>>,
    new: &mut Map<String, Value>,
    now: &str,
) -> Result<(), ApplyError> {
    let mut entries = managers_before(manager, old, new);
    let empty = Map::new();
    let c = compare_owned(target, manager, old.unwrap_or(&empty), new)?;
    let changed = c.changed();
    let mut mine = FieldSet::new();
    for e in &mut entries {
        if e.is(manager, Operation::Update) {
            mine = e.fields.clone();
        } else {
            e.fields = e.fields.difference(&changed).difference(&c.removed);
        }
    }
    let mine = mine.difference(&c.removed).union(&changed);
    set_own(&mut entries, manager, Operation::Update, mine, now);
    encode(new, entries, now);
    Ok(())
}

/// Applies `config` (the decoded apply patch, `kind` and `apiVersion`
/// checked) as `manager` to `live` (`None`: the object does not exist and
/// is created). Returns the object to store, its `managedFields` written.
pub fn apply(
    target: &Target<'_>,
    manager: &Manager,
    live: Option<&Map<String, Value>>,
    mut config: Map<String, Value>,
    force: bool,
    now: &str,
) -> Result<Map<String, Value>, ApplyError> {
    if let Some(meta) = config.get_mut("metadata").and_then(Value::as_object_mut) {
        match meta.remove("managedFields") {
            None | Some(Value::Null) => {}
            Some(Value::Array(l)) if l.is_empty() => {}
            Some(_) => return Err(ApplyError::ManagedFieldsSet),
        }
    }
    let empty = Map::new();
    let live_obj = live.unwrap_or(&empty);
    let mut entries = live.and_then(decode).unwrap_or_default();
    let ignored = ignored(target, manager, &[live_obj, &config]);
    let config_value = Value::Object(config);
    let applied =
        walk::field_set(target.schema, target.ty, &config_value)?.recursive_difference(&ignored);

    let mut merged = walk::merge(
        target.schema,
        target.ty,
        Some(&Value::Object(live_obj.clone())),
        &config_value,
        &mut Vec::new(),
    )?;
    let last = entries
        .iter()
        .find(|e| e.is(manager, Operation::Apply))
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    let mut keep = applied.clone();
    for e in entries.iter().filter(|e| !e.is(manager, Operation::Apply)) {
        keep = keep.union(&e.fields);
    }
    walk::remove(
        target.schema,
        target.ty,
        &mut merged,
        &last,
        &keep,
        &mut Vec::new(),
    )?;
    let Value::Object(mut merged) = merged else {
        return Err(ApplyError::NotAnObject);
    };
    // The stored managers are not the config's business.
    if let Some(m) = live_obj
        .get("metadata")
        .and_then(|m| m.get("managedFields"))
    {
        crate::kube::object::metadata_mut(&mut merged).insert("managedFields".into(), m.clone());
    }

    let c = compare_owned(target, manager, live_obj, &merged)?;
    let changed = c.changed();
    let mut conflicts: Vec<(String, fieldpath::Path)> = Vec::new();
    for e in entries.iter().filter(|e| !e.is(manager, Operation::Apply)) {
        for path in e.fields.intersection(&changed).paths() {
            conflicts.push((e.describe(), path));
        }
    }
    if manager.name == KUBECTL && !conflicts.is_empty() {
        // kubectl moving from client- to server-side apply: what its
        // last-applied configuration set (and the object still has) is
        // its own already, as kube's last-applied manager allows.
        if let Some(allowed) = last_applied_fields(target, live_obj) {
            conflicts.retain(|(_, path)| !allowed.has(path));
        }
    }
    if !force && !conflicts.is_empty() {
        conflicts.sort_by(|a, b| a.0.cmp(&b.0));
        return Err(ApplyError::Conflicts(
            conflicts
                .into_iter()
                .map(|(m, p)| (m, fieldpath::path_string(&p)))
                .collect(),
        ));
    }
    for e in entries
        .iter_mut()
        .filter(|e| !e.is(manager, Operation::Apply))
    {
        e.fields = e.fields.difference(&changed).difference(&c.removed);
    }
    set_own(&mut entries, manager, Operation::Apply, applied, now);
    encode(&mut merged, entries, now);
    if manager.name == KUBECTL {
        sync_last_applied(&mut merged, config_value);
    }
    Ok(merged)
}

/// The field manager of `kubectl apply --server-side`.
pub const KUBECTL: &str = "kubectl";
/// Client-side apply's record of what it applied.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

fn last_applied(obj: &Map<String, Value>) -> Option<&str> {
    obj.get("metadata")?
        .get("annotations")?
        .get(LAST_APPLIED)?
        .as_str()
        .filter(|s| !s.is_empty())
}

/// The fields both the last-applied configuration of `live` and `live`
/// itself set; `None` without one (or one that is not an object).
fn last_applied_fields(target: &Target<'_>, live: &Map<String, Value>) -> Option<FieldSet> {
    let config: Value = serde_json::from_str(last_applied(live)?).ok()?;
    if !config.is_object() {
        return None;
    }
    let of_config = walk::field_set(target.schema, target.ty, &config).ok()?;
    let of_live = walk::field_set(target.schema, target.ty, &Value::Object(live.clone())).ok()?;
    Some(of_config.intersection(&of_live))
}

/// After a server-side apply by kubectl of an object client-side apply
/// managed, its last-applied annotation becomes the applied configuration
/// (without the annotation itself), as kube keeps the two in step.
fn sync_last_applied(merged: &mut Map<String, Value>, mut config: Value) {
    if last_applied(merged).is_none() {
        return;
    }
    if let Some(a) = config
        .get_mut("metadata")
        .and_then(|m| m.get_mut("annotations"))
        .and_then(Value::as_object_mut)
    {
        a.remove(LAST_APPLIED);
    }
    let annotations = crate::kube::object::metadata_mut(merged)
        .entry("annotations")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(a) = annotations.as_object_mut() {
        a.insert(LAST_APPLIED.into(), Value::String(config.to_string()));
    }
}
