//! Label and field selectors, parsed as kube parses them and matched
//! against JSON objects, or against the [`Attrs`] the watch cache renders
//! once per object so that matching a cached object parses nothing.
//!
//! Hand-written: there is no maintained Rust crate for kube's selector
//! grammar, and the grammar is small (comma-separated requirements).
//!
//! The field labels each type can be selected by are data, in one table
//! ([`TYPE_FIELDS`]): the labels kube's `AddFieldLabelConversionFunc`
//! accepts for the type (unknown ones are `400` with its "field label not
//! supported" wording; a type without such a function takes only
//! `metadata.name` and `metadata.namespace`, with kube's default wording)
//! and how its `GetAttrs` renders each value (booleans as `true`/`false`,
//! integers in decimal, absent values as their Go zero value or the
//! default kube's `defaults.go` would have stored).

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use serde_json::Value;

use crate::kube::error::KubeError;
use crate::kube::resources::ResourceType;

#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelReq {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
    Greater(String, i64),
    Less(String, i64),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldReq {
    field: &'static FieldLabel,
    value: String,
    equal: bool,
}

/// How kube's `GetAttrs` renders a field label's value from an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Render {
    /// The first non-empty string at these JSON pointers, else the
    /// default (the value kube's defaulting stores; `""` for none).
    Text(&'static [&'static str], &'static str),
    /// A boolean as Go's `strconv.FormatBool`: absent is `false`.
    Boolean(&'static str),
    /// An integer as Go's `strconv.Itoa`: absent is `0`.
    Integer(&'static str),
    /// A custom type's selectable field: a string, number or boolean as
    /// its text, anything else (or nothing) as `""`.
    Scalar(&'static str),
}

impl Render {
    /// The JSON pointers it reads.
    fn paths(&'static self) -> &'static [&'static str] {
        match self {
            Render::Text(paths, _) => paths,
            Render::Boolean(path) | Render::Integer(path) | Render::Scalar(path) => {
                std::slice::from_ref(path)
            }
        }
    }

    fn value(self, obj: &Value) -> String {
        match self {
            Render::Text(paths, default) => paths
                .iter()
                .filter_map(|p| at_pointer(obj, p).and_then(Value::as_str))
                .find(|s| !s.is_empty())
                .unwrap_or(default)
                .to_string(),
            Render::Boolean(path) => at_pointer(obj, path)
                .and_then(Value::as_bool)
                .unwrap_or(false)
                .to_string(),
            Render::Integer(path) => match at_pointer(obj, path) {
                Some(Value::Number(n)) if n.is_i64() || n.is_u64() => n.to_string(),
                _ => "0".to_string(),
            },
            Render::Scalar(path) => match at_pointer(obj, path) {
                Some(Value::String(s)) => s.clone(),
                Some(v @ (Value::Number(_) | Value::Bool(_))) => v.to_string(),
                _ => String::new(),
            },
        }
    }
}

/// What `pointer` (a JSON pointer) points at in `obj`, as
/// [`Value::pointer`] finds it, without its allocation of every token: the
/// watch cache renders each written object's field labels on every node.
/// A pointer with an escape (`~`) or through an array takes
/// [`Value::pointer`]'s path.
fn at_pointer<'v>(obj: &'v Value, pointer: &str) -> Option<&'v Value> {
    let Some(tokens) = pointer.strip_prefix('/') else {
        return obj.pointer(pointer);
    };
    if pointer.contains('~') {
        return obj.pointer(pointer);
    }
    let mut at = obj;
    for token in tokens.split('/') {
        at = match at {
            Value::Object(members) => members.get(token)?,
            Value::Array(_) => return obj.pointer(pointer),
            _ => return None,
        };
    }
    Some(at)
}

/// A field label a type can be selected by.
#[derive(Debug, PartialEq, Eq)]
pub struct FieldLabel {
    label: &'static str,
    render: Render,
}

const fn text(label: &'static str, paths: &'static [&'static str]) -> FieldLabel {
    FieldLabel {
        label,
        render: Render::Text(paths, ""),
    }
}

const NAME: FieldLabel = text("metadata.name", &["/metadata/name"]);
const NAMESPACE: FieldLabel = text("metadata.namespace", &["/metadata/namespace"]);

/// The field labels of one type with a field label conversion of its own.
struct TypeFields {
    group: &'static str,
    plural: &'static str,
    fields: &'static [FieldLabel],
    /// Labels accepted under an old name (pods' `spec.host`).
    aliases: &'static [(&'static str, &'static str)],
}

/// Every type with a field label conversion function in kube
/// (`pkg/apis/core/v1/conversion.go`, `pkg/apis/batch/v1/conversion.go`),
/// with its `GetAttrs` fields (`pkg/registry/*/*/strategy.go`). apps/v1
/// registers none: a replica set's `status.replicas` is kube's default
/// error there, as it is here. Every other type takes [`DEFAULT_FIELDS`].
static TYPE_FIELDS: &[TypeFields] = &[
    TypeFields {
        group: "",
        plural: "pods",
        fields: &[
            NAME,
            NAMESPACE,
            text("spec.nodeName", &["/spec/nodeName"]),
            FieldLabel {
                label: "spec.restartPolicy",
                render: Render::Text(&["/spec/restartPolicy"], "Always"),
            },
            FieldLabel {
                label: "spec.schedulerName",
                render: Render::Text(&["/spec/schedulerName"], "default-scheduler"),
            },
            text("spec.serviceAccountName", &["/spec/serviceAccountName"]),
            FieldLabel {
                label: "spec.hostNetwork",
                render: Render::Boolean("/spec/hostNetwork"),
            },
            text("status.phase", &["/status/phase"]),
            // The first of `podIPs` (v1's `podIP` when it has none).
            text("status.podIP", &["/status/podIPs/0/ip", "/status/podIP"]),
            // Accepted by kube's conversion, absent from its field set: it
            // matches only the empty value.
            text("status.podIPs", &[]),
            text("status.nominatedNodeName", &["/status/nominatedNodeName"]),
        ],
        aliases: &[("spec.host", "spec.nodeName")],
    },
    TypeFields {
        group: "",
        plural: "events",
        fields: &[
            NAME,
            NAMESPACE,
            text("involvedObject.kind", &["/involvedObject/kind"]),
            text("involvedObject.namespace", &["/involvedObject/namespace"]),
            text("involvedObject.name", &["/involvedObject/name"]),
            text("involvedObject.uid", &["/involvedObject/uid"]),
            text("involvedObject.apiVersion", &["/involvedObject/apiVersion"]),
            text(
                "involvedObject.resourceVersion",
                &["/involvedObject/resourceVersion"],
            ),
            text("involvedObject.fieldPath", &["/involvedObject/fieldPath"]),
            text("reason", &["/reason"]),
            text("reportingComponent", &["/reportingComponent"]),
            // `source.component`, else the reporting controller.
            text("source", &["/source/component", "/reportingComponent"]),
            text("type", &["/type"]),
        ],
        aliases: &[],
    },
    TypeFields {
        group: "",
        plural: "nodes",
        fields: &[
            NAME,
            FieldLabel {
                label: "spec.unschedulable",
                render: Render::Boolean("/spec/unschedulable"),
            },
        ],
        aliases: &[],
    },
    TypeFields {
        group: "",
        plural: "namespaces",
        fields: &[NAME, text("status.phase", &["/status/phase"])],
        aliases: &[],
    },
    TypeFields {
        group: "",
        plural: "secrets",
        fields: &[
            NAME,
            NAMESPACE,
            FieldLabel {
                label: "type",
                render: Render::Text(&["/type"], "Opaque"),
            },
        ],
        aliases: &[],
    },
    TypeFields {
        group: "",
        plural: "services",
        fields: &[
            NAME,
            NAMESPACE,
            text("spec.clusterIP", &["/spec/clusterIP"]),
            FieldLabel {
                label: "spec.type",
                render: Render::Text(&["/spec/type"], "ClusterIP"),
            },
        ],
        aliases: &[],
    },
    TypeFields {
        group: "",
        plural: "replicationcontrollers",
        fields: &[
            NAME,
            NAMESPACE,
            FieldLabel {
                label: "status.replicas",
                render: Render::Integer("/status/replicas"),
            },
        ],
        aliases: &[],
    },
    TypeFields {
        group: "batch",
        plural: "jobs",
        fields: &[
            NAME,
            NAMESPACE,
            FieldLabel {
                label: "status.successful",
                render: Render::Integer("/status/succeeded"),
            },
        ],
        aliases: &[],
    },
];

/// The fields of a type without a conversion function of its own (kube's
/// `DefaultMetaV1FieldSelectorConversion`).
static DEFAULT_FIELDS: &[FieldLabel] = &[NAME, NAMESPACE];

/// A custom type's field labels: the name, the namespace and its
/// definition's `selectableFields`, made once per type (types live as
/// long as the process).
fn custom_fields(rt: &'static ResourceType) -> &'static [FieldLabel] {
    static MADE: LazyLock<Mutex<HashMap<usize, &'static [FieldLabel]>>> =
        LazyLock::new(|| Mutex::new(HashMap::new()));
    let mut made = MADE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    made.entry(rt as *const ResourceType as usize)
        .or_insert_with(|| {
            let mut fields = vec![NAME, NAMESPACE];
            for f in rt
                .custom
                .map(|c| c.selectable_fields.as_slice())
                .unwrap_or_default()
            {
                let label: &'static str = Box::leak(f.clone().into_boxed_str());
                let pointer: &'static str =
                    Box::leak(format!("/{}", f.replace('.', "/")).into_boxed_str());
                fields.push(FieldLabel {
                    label,
                    render: Render::Scalar(pointer),
                });
            }
            Box::leak(fields.into_boxed_slice())
        })
}

/// The field labels of `rt`, in its table's order, and the old names it
/// accepts for some of them. Custom types have no aliases.
fn fields_of(
    rt: &'static ResourceType,
) -> (
    &'static [FieldLabel],
    &'static [(&'static str, &'static str)],
) {
    if rt.custom.is_some() {
        return (custom_fields(rt), &[]);
    }
    TYPE_FIELDS
        .iter()
        .find(|t| t.group == rt.group && t.plural == rt.plural)
        .map_or((DEFAULT_FIELDS, &[]), |t| (t.fields, t.aliases))
}

/// The field label `label` of `rt` (an alias resolved), or kube's `400`.
fn field_label(rt: &'static ResourceType, label: &str) -> Result<&'static FieldLabel, KubeError> {
    let (fields, aliases) = fields_of(rt);
    if rt.custom.is_some() {
        return fields.iter().find(|f| f.label == label).ok_or_else(|| {
            let known: Vec<String> = fields.iter().map(|f| format!("{:?}", f.label)).collect();
            KubeError::BadRequest(format!(
                "{label:?} is not a known field selector: only {}",
                known.join(", ")
            ))
        });
    }
    let own = !std::ptr::eq(fields, DEFAULT_FIELDS);
    let label = aliases
        .iter()
        .find(|(from, _)| *from == label)
        .map_or(label, |(_, to)| *to);
    fields.iter().find(|f| f.label == label).ok_or_else(|| {
        KubeError::BadRequest(if own {
            format!("field label not supported: {label}")
        } else {
            format!(
                "\"{label}\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
            )
        })
    })
}

/// The members [`Attrs::of`] reads of an object: its top-level ones and
/// `metadata`'s own ([`Attrs::reads`]).
pub type AttrReads = (Vec<&'static str>, Vec<&'static str>);

/// What selectors read of one object, rendered once when it enters the
/// watch cache: the values of its type's field labels and its labels, as
/// kube's watch cache keeps `GetAttrs`' labels and fields beside each
/// object. Matching a cached object then parses nothing, which is what
/// lets the cache hold objects as JSON alone (a kubelet's
/// `spec.nodeName=` watch tests every pod event).
///
/// Every cached object carries one, so it is packed: one string holding
/// the field values in the table's order, then each label's key and value,
/// and the end offset of each part: two allocations.
#[derive(Debug, Clone)]
pub struct Attrs {
    /// The table the values were rendered for; a selector parsed against
    /// another (a custom type whose definition changed) cannot use them.
    fields: &'static [FieldLabel],
    text: Box<str>,
    ends: Box<[u32]>,
}

impl Attrs {
    /// Renders the field values of `rt`'s labels and collects the labels
    /// of `obj`.
    pub fn of(rt: &'static ResourceType, obj: &Value) -> Self {
        let (fields, _) = fields_of(rt);
        let mut text = String::new();
        let mut ends = Vec::new();
        let mut push = |part: &str| {
            text.push_str(part);
            ends.push(text.len());
        };
        for f in fields {
            push(&f.render.value(obj));
        }
        if let Some(labels) = obj.pointer("/metadata/labels").and_then(Value::as_object) {
            for (k, v) in labels {
                if let Some(v) = v.as_str() {
                    push(k);
                    push(v);
                }
            }
        }
        match ends.iter().map(|&e| u32::try_from(e)).collect() {
            Ok(ends) => Self {
                fields,
                text: text.into_boxed_str(),
                ends,
            },
            // Beyond 4 GiB of attributes (never, under the body limit):
            // keep none, so every selector falls back to the object itself.
            Err(_) => Self {
                fields: &[],
                text: Box::default(),
                ends: Box::default(),
            },
        }
    }

    /// The members of an object of `rt` that [`Attrs::of`] reads: its
    /// top-level ones and `metadata`'s own (`labels` among them), so a
    /// caller may parse those alone. `None` when a field label's path
    /// cannot be named so (a pointer segment with an escape).
    pub fn reads(rt: &'static ResourceType) -> Option<AttrReads> {
        let (fields, _) = fields_of(rt);
        let mut members = vec!["metadata"];
        let mut metadata = vec!["labels"];
        for path in fields.iter().flat_map(|f| f.render.paths()) {
            let mut segments = path.strip_prefix('/')?.split('/');
            let first = segments.next().filter(|s| !s.contains('~'))?;
            let (list, member) = if first == "metadata" {
                let second = segments.next().filter(|s| !s.contains('~'))?;
                (&mut metadata, second)
            } else {
                (&mut members, first)
            };
            if !list.contains(&member) {
                list.push(member);
            }
        }
        Some((members, metadata))
    }

    fn part(&self, i: usize) -> &str {
        let start = match i {
            0 => 0,
            _ => self.ends[i - 1] as usize,
        };
        &self.text[start..self.ends[i] as usize]
    }

    /// The rendered value of `field`; `None` when it is not in the table
    /// these attributes were rendered for.
    fn field(&self, field: &FieldLabel) -> Option<&str> {
        let i = self.fields.iter().position(|f| std::ptr::eq(f, field))?;
        Some(self.part(i))
    }

    /// The value of label `key`, if the object has it (objects carry few
    /// labels: a scan).
    fn label(&self, key: &str) -> Option<&str> {
        (self.fields.len()..self.ends.len())
            .step_by(2)
            .find(|&i| self.part(i) == key)
            .map(|i| self.part(i + 1))
    }

    /// The heap bytes these attributes hold.
    pub fn heap_bytes(&self) -> usize {
        self.text.len() + self.ends.len() * std::mem::size_of::<u32>()
    }
}

/// The selectors of one list, watch or deletecollection request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selectors {
    labels: Vec<LabelReq>,
    fields: Vec<FieldReq>,
}

impl Selectors {
    /// Parses `labelSelector` and `fieldSelector` for type `rt`; an unknown
    /// field or a syntax error is a `400`.
    pub fn parse(
        rt: &'static ResourceType,
        label: Option<&str>,
        field: Option<&str>,
    ) -> Result<Self, KubeError> {
        Ok(Self {
            labels: match label {
                Some(s) => parse_labels(s).map_err(|e| {
                    KubeError::BadRequest(format!("unable to parse requirement: {e}"))
                })?,
                None => Vec::new(),
            },
            fields: match field {
                Some(s) => parse_fields(rt, s)?,
                None => Vec::new(),
            },
        })
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }

    /// The `metadata.name=x` requirement, if the field selector has one.
    pub fn required_name(&self) -> Option<&str> {
        self.fields
            .iter()
            .find(|f| f.equal && f.field.label == "metadata.name")
            .map(|f| f.value.as_str())
    }

    /// Whether `obj` is selected, read from the object itself.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels").and_then(Value::as_object);
        self.select(
            |k| labels.and_then(|l| l.get(k)).and_then(Value::as_str),
            |f| Some(f.render.value(obj).into()),
        )
        .unwrap_or(false)
    }

    /// Whether the object `attrs` were rendered from is selected; `None`
    /// when they were rendered for another table of field labels than
    /// this selector's (ask [`Selectors::matches`] with the object).
    pub fn matches_attrs(&self, attrs: &Attrs) -> Option<bool> {
        self.select(|k| attrs.label(k), |f| attrs.field(f).map(Into::into))
    }

    /// Every requirement against an object's labels (`label`) and field
    /// values (`field`; `None` when it cannot say).
    fn select<'a>(
        &self,
        label: impl Fn(&str) -> Option<&'a str>,
        field: impl Fn(&FieldLabel) -> Option<std::borrow::Cow<'a, str>>,
    ) -> Option<bool> {
        let mut fields_ok = true;
        for f in &self.fields {
            fields_ok &= (field(f.field)? == f.value.as_str()) == f.equal;
        }
        Some(fields_ok && self.labels.iter().all(|req| req.matches(label(req.key()))))
    }
}

impl LabelReq {
    fn key(&self) -> &str {
        match self {
            LabelReq::Equals(k, _)
            | LabelReq::NotEquals(k, _)
            | LabelReq::In(k, _)
            | LabelReq::NotIn(k, _)
            | LabelReq::Exists(k)
            | LabelReq::NotExists(k)
            | LabelReq::Greater(k, _)
            | LabelReq::Less(k, _) => k,
        }
    }

    /// Whether an object whose label [`LabelReq::key`] is `label` meets it.
    fn matches(&self, label: Option<&str>) -> bool {
        match self {
            LabelReq::Equals(_, v) => label == Some(v.as_str()),
            LabelReq::NotEquals(_, v) => label != Some(v.as_str()),
            LabelReq::In(_, vs) => label.is_some_and(|l| vs.iter().any(|v| v == l)),
            LabelReq::NotIn(_, vs) => label.is_none_or(|l| !vs.iter().any(|v| v == l)),
            LabelReq::Exists(_) => label.is_some(),
            LabelReq::NotExists(_) => label.is_none(),
            LabelReq::Greater(_, n) => label
                .and_then(|l| l.parse::<i64>().ok())
                .is_some_and(|l| l > *n),
            LabelReq::Less(_, n) => label
                .and_then(|l| l.parse::<i64>().ok())
                .is_some_and(|l| l < *n),
        }
    }
}

fn parse_fields(rt: &'static ResourceType, s: &str) -> Result<Vec<FieldReq>, KubeError> {
    let mut out = Vec::new();
    for part in split_unescaped(s, ',') {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let (path, value, equal) = if let Some(i) = part.find("!=") {
            (&part[..i], &part[i + 2..], false)
        } else if let Some(i) = part.find("==") {
            (&part[..i], &part[i + 2..], true)
        } else if let Some(i) = part.find('=') {
            (&part[..i], &part[i + 1..], true)
        } else {
            return Err(KubeError::BadRequest(format!(
                "invalid field selector: {part:?}: no operator"
            )));
        };
        out.push(FieldReq {
            field: field_label(rt, path.trim())?,
            value: unescape(value.trim()),
            equal,
        });
    }
    Ok(out)
}

fn split_unescaped(s: &str, sep: char) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut escaped = false;
    for c in s.chars() {
        if escaped {
            if let Some(p) = parts.last_mut() {
                p.push('\\');
                p.push(c);
            }
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == sep {
            parts.push(String::new());
        } else if let Some(p) = parts.last_mut() {
            p.push(c);
        }
    }
    parts
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}

// kube's label formats, shared with metadata validation.
fn valid_label_key(k: &str) -> bool {
    crate::kube::names::qualified_name(k).is_empty()
}

fn valid_label_value(v: &str) -> bool {
    crate::kube::names::label_value(v).is_empty()
}

/// Splits on commas that are not inside a `( ... )` set.
fn split_requirements(s: &str) -> Result<Vec<&str>, String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err("unbalanced ')'".into());
                }
            }
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unbalanced '('".into());
    }
    out.push(&s[start..]);
    Ok(out)
}

fn parse_labels(s: &str) -> Result<Vec<LabelReq>, String> {
    let mut out = Vec::new();
    if s.trim().is_empty() {
        return Ok(out);
    }
    for raw in split_requirements(s)? {
        let req = raw.trim();
        if req.is_empty() {
            return Err(format!("found '', expected: identifier in {s:?}"));
        }
        let key_ok = |k: &str| -> Result<String, String> {
            let k = k.trim();
            if valid_label_key(k) {
                Ok(k.to_string())
            } else {
                Err(format!("invalid label key {k:?}"))
            }
        };
        let val_ok = |v: &str| -> Result<String, String> {
            let v = v.trim();
            if valid_label_value(v) {
                Ok(v.to_string())
            } else {
                Err(format!("invalid label value: {v:?}"))
            }
        };
        let set = |rest: &str| -> Result<Vec<String>, String> {
            let rest = rest.trim();
            let inner = rest
                .strip_prefix('(')
                .and_then(|r| r.strip_suffix(')'))
                .ok_or_else(|| format!("expected a '(...)' set in {req:?}"))?;
            inner.split(',').map(val_ok).collect()
        };
        if let Some(k) = req.strip_prefix('!') {
            out.push(LabelReq::NotExists(key_ok(k)?));
        } else if let Some(i) = req.find("!=") {
            out.push(LabelReq::NotEquals(
                key_ok(&req[..i])?,
                val_ok(&req[i + 2..])?,
            ));
        } else if let Some(i) = req.find("==") {
            out.push(LabelReq::Equals(key_ok(&req[..i])?, val_ok(&req[i + 2..])?));
        } else if let Some(i) = req.find('=') {
            out.push(LabelReq::Equals(key_ok(&req[..i])?, val_ok(&req[i + 1..])?));
        } else if let Some(i) = req.find(" notin ") {
            out.push(LabelReq::NotIn(key_ok(&req[..i])?, set(&req[i + 7..])?));
        } else if let Some(i) = req.find(" in ") {
            out.push(LabelReq::In(key_ok(&req[..i])?, set(&req[i + 4..])?));
        } else if let Some(i) = req.find('>') {
            let n = req[i + 1..]
                .trim()
                .parse()
                .map_err(|_| format!("invalid integer in {req:?}"))?;
            out.push(LabelReq::Greater(key_ok(&req[..i])?, n));
        } else if let Some(i) = req.find('<') {
            let n = req[i + 1..]
                .trim()
                .parse()
                .map_err(|_| format!("invalid integer in {req:?}"))?;
            out.push(LabelReq::Less(key_ok(&req[..i])?, n));
        } else {
            out.push(LabelReq::Exists(key_ok(req)?));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::resources;
    use serde_json::json;

    fn sel(label: &str, field: &str) -> Selectors {
        let pods = resources::find("", "v1", "pods").expect("pods");
        Selectors::parse(
            pods,
            Some(label).filter(|s| !s.is_empty()),
            Some(field).filter(|s| !s.is_empty()),
        )
        .expect("parse")
    }

    #[test]
    fn a_field_is_found_where_a_json_pointer_finds_it() {
        let obj = json!({
            "metadata": {"name": "n", "a/b": 1, "m~n": 2, "": 3},
            "spec": {"list": [{"x": "first"}, {"x": "second"}], "flag": true},
            "status": "text",
        });
        for pointer in [
            "",
            "/",
            "/metadata",
            "/metadata/name",
            "/metadata/missing",
            "/metadata/a~1b",
            "/metadata/m~0n",
            "/metadata/",
            "/spec/list/1/x",
            "/spec/list/01/x",
            "/spec/list/9/x",
            "/spec/flag",
            "/spec/flag/deeper",
            "/status/0",
            "metadata/name",
        ] {
            assert_eq!(at_pointer(&obj, pointer), obj.pointer(pointer), "{pointer}");
        }
    }

    #[test]
    fn rendered_attributes_select_as_the_object_does() {
        let pods = resources::find("", "v1", "pods").expect("pods");
        let pod = json!({"metadata": {"name": "p", "namespace": "ns",
                                       "labels": {"app": "web", "b": "2", "tier": "fe", "z": "", "n": 7}},
                         "spec": {"nodeName": "node-1", "hostNetwork": true},
                         "status": {"podIPs": [{"ip": "10.0.0.9"}]}});
        let attrs = Attrs::of(pods, &pod);
        for (label, field) in [
            ("app=web", ""),
            ("app=db", ""),
            ("tier in (fe,be),b>1", ""),
            ("z", ""),
            ("!z", ""),
            ("a", ""),
            ("zz notin (x)", ""),
            // Not a string: no label at all, as the object reads.
            ("n", ""),
            ("", "spec.nodeName=node-1"),
            ("", "spec.host=node-2"),
            ("", "spec.hostNetwork=true,status.podIP=10.0.0.9"),
            ("", "spec.restartPolicy=Always,metadata.namespace!=ns"),
            (
                "app=web",
                "metadata.name=p,spec.schedulerName=default-scheduler",
            ),
        ] {
            let s = sel(label, field);
            assert_eq!(
                s.matches_attrs(&attrs),
                Some(s.matches(&pod)),
                "{label:?} {field:?}"
            );
        }
        assert_eq!(sel("b=2,app=web", "").matches_attrs(&attrs), Some(true));

        // Attributes rendered for another type's table answer nothing.
        let cms = resources::find("", "v1", "configmaps").expect("configmaps");
        let other = Attrs::of(cms, &pod);
        assert_eq!(sel("", "spec.nodeName=node-1").matches_attrs(&other), None);
        // A label-only selector needs no table.
        assert_eq!(sel("app=web", "").matches_attrs(&other), Some(true));
        // An unlabelled object with empty values holds its two ends alone.
        let empty = Attrs::of(cms, &json!({"metadata": {}}));
        assert_eq!(empty.heap_bytes(), 2 * std::mem::size_of::<u32>());
    }

    #[test]
    fn label_operators_match_as_kube_defines_them() {
        let obj =
            json!({"metadata": {"name": "a", "labels": {"app": "web", "tier": "fe", "n": "5"}}});
        for (s, want) in [
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("missing!=x", true),
            ("app in (web,db)", true),
            ("app notin (web)", false),
            ("missing notin (x)", true),
            ("app", true),
            ("!app", false),
            ("!missing", true),
            ("n>4,n<6", true),
            ("app=web,tier=be", false),
        ] {
            assert_eq!(sel(s, "").matches(&obj), want, "{s}");
        }
    }

    #[test]
    fn field_selectors_and_their_errors() {
        let obj =
            json!({"metadata": {"name": "a", "namespace": "d"}, "status": {"phase": "Running"}});
        assert!(sel("", "metadata.name=a,status.phase=Running").matches(&obj));
        assert!(!sel("", "metadata.namespace!=d").matches(&obj));
        let cm = resources::find("", "v1", "configmaps").expect("cm");
        match Selectors::parse(cm, None, Some("spec.x=1")) {
            Err(KubeError::BadRequest(m)) => {
                assert!(m.contains("is not a known field selector"), "{m}")
            }
            other => panic!("{other:?}"),
        }
        assert!(Selectors::parse(cm, Some("a in (b"), None).is_err());
        assert!(Selectors::parse(cm, Some("Bad Key=1"), None).is_err());
    }

    fn served(group: &str, plural: &str) -> &'static ResourceType {
        resources::RESOURCES
            .iter()
            .find(|r| r.group == group && r.plural == plural)
            .unwrap_or_else(|| panic!("{plural}"))
    }

    fn fields(group: &str, plural: &str, field: &str) -> Result<Selectors, String> {
        Selectors::parse(served(group, plural), None, Some(field)).map_err(|e| e.to_string())
    }

    #[test]
    fn events_are_selected_by_their_involved_object_as_kubectl_describe_asks() {
        let event = json!({
            "metadata": {"name": "web.1", "namespace": "d"},
            "involvedObject": {"kind": "Deployment", "namespace": "d", "name": "web",
                               "uid": "u-1", "apiVersion": "apps/v1"},
            "reason": "ScalingReplicaSet", "type": "Normal",
            "reportingComponent": "deployment-controller",
        });
        // What `kubectl describe deployment web` sends.
        let describe = "involvedObject.name=web,involvedObject.namespace=d,\
                        involvedObject.kind=Deployment,involvedObject.uid=u-1";
        assert!(fields("", "events", describe)
            .expect("valid")
            .matches(&event));
        let other = "involvedObject.name=web,involvedObject.uid=u-2";
        assert!(!fields("", "events", other).expect("valid").matches(&event));
        assert!(
            fields("", "events", "reason=ScalingReplicaSet,type!=Warning")
                .expect("valid")
                .matches(&event)
        );
        // `source` is the source component, else the reporting controller.
        assert!(fields("", "events", "source=deployment-controller")
            .expect("valid")
            .matches(&event));
        let mut sourced = event.clone();
        sourced["source"] = json!({"component": "kubelet"});
        assert!(fields("", "events", "source=kubelet")
            .expect("valid")
            .matches(&sourced));
        assert_eq!(
            fields("", "events", "spec.x=1").map(|_| ()),
            Err("field label not supported: spec.x".to_string())
        );
    }

    #[test]
    fn non_string_values_compare_as_kube_renders_them() {
        let node = json!({"metadata": {"name": "n1"}});
        assert!(fields("", "nodes", "spec.unschedulable=false")
            .expect("valid")
            .matches(&node));
        let cordoned = json!({"metadata": {"name": "n1"}, "spec": {"unschedulable": true}});
        assert!(fields("", "nodes", "spec.unschedulable=true")
            .expect("valid")
            .matches(&cordoned));
        assert!(!fields("", "nodes", "spec.unschedulable=false")
            .expect("valid")
            .matches(&cordoned));
        let rc = json!({"metadata": {"name": "a"}, "status": {"replicas": 3}});
        assert!(fields("", "replicationcontrollers", "status.replicas=3")
            .expect("valid")
            .matches(&rc));
        assert!(fields("", "replicationcontrollers", "status.replicas=0")
            .expect("valid")
            .matches(&json!({"metadata": {"name": "b"}})));
        let job = json!({"metadata": {"name": "j"}, "status": {"succeeded": 1}});
        assert!(fields("batch", "jobs", "status.successful=1")
            .expect("valid")
            .matches(&job));
        let pod = json!({"metadata": {"name": "p"}, "spec": {"hostNetwork": true},
                         "status": {"podIPs": [{"ip": "10.0.0.7"}]}});
        assert!(fields(
            "",
            "pods",
            "spec.hostNetwork=true,status.podIP=10.0.0.7,spec.restartPolicy=Always"
        )
        .expect("valid")
        .matches(&pod));
        // Old clients' `spec.host` is `spec.nodeName`.
        let placed = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n1"}});
        assert!(fields("", "pods", "spec.host=n1")
            .expect("valid")
            .matches(&placed));
        // A secret without a type is kube's default `Opaque`.
        assert!(fields("", "secrets", "type=Opaque")
            .expect("valid")
            .matches(&json!({"metadata": {"name": "s"}})));
    }

    #[test]
    fn each_type_takes_only_its_own_labels_with_kubes_wording() {
        // apps/v1 registers no conversion: kube's default answer.
        assert_eq!(
            fields("apps", "replicasets", "status.replicas=1").map(|_| ()),
            Err("\"status.replicas\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"".to_string())
        );
        assert!(fields("apps", "replicasets", "metadata.namespace=d").is_ok());
        // Cluster-scoped types with their own conversion have no namespace.
        assert_eq!(
            fields("", "namespaces", "metadata.namespace=x").map(|_| ()),
            Err("field label not supported: metadata.namespace".to_string())
        );
        assert!(fields("", "namespaces", "status.phase=Active").is_ok());
        assert!(fields("", "services", "spec.type=ClusterIP,spec.clusterIP=None").is_ok());
        assert!(fields("", "secrets", "type=kubernetes.io/tls").is_ok());
        assert!(fields(
            "rbac.authorization.k8s.io",
            "clusterroles",
            "metadata.name=admin"
        )
        .is_ok());
    }
}

/// Property tests: any selector string parses or is a `400`, and a parsed
/// selector matches any object without panicking.
#[cfg(test)]
mod proptests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::fuzz;
    use crate::kube::resources;

    /// Selector text built from the grammar's tokens, and arbitrary text.
    fn selector() -> impl Strategy<Value = String> {
        let token = proptest::sample::select(
            &[
                "app",
                "tier",
                "example.com/app",
                "metadata.name",
                "metadata.namespace",
                "spec.nodeName",
                "status.phase",
                "=",
                "==",
                "!=",
                "!",
                " in ",
                " notin ",
                "(",
                ")",
                ",",
                ">",
                "<",
                "5",
                "-1",
                "99999999999999999999",
                "web",
                "\\",
                "\\,",
                " ",
                "\u{0}",
                "é",
            ][..],
        );
        prop_oneof![
            3 => proptest::collection::vec(token, 0..10).prop_map(|t| t.concat()),
            1 => fuzz::text(),
        ]
    }

    proptest! {
        #![proptest_config(fuzz::config())]

        #[test]
        fn any_selector_parses_or_is_a_bad_request(
            label in proptest::option::of(selector()),
            field in proptest::option::of(selector()),
            obj in fuzz::object_value(),
        ) {
            for rt in resources::RESOURCES.iter() {
                match Selectors::parse(rt, label.as_deref(), field.as_deref()) {
                    Ok(s) => {
                        let matched = s.matches(&obj);
                        prop_assert_eq!(s.matches_attrs(&Attrs::of(rt, &obj)), Some(matched));
                        let _ = s.required_name();
                    }
                    Err(e) => prop_assert!(matches!(e, KubeError::BadRequest(_)), "{e:?}"),
                }
            }
        }

        #[test]
        fn an_equality_selector_matches_exactly_the_objects_with_that_label(
            key in "[a-z][a-z0-9]{0,8}",
            value in "[a-z0-9]{1,8}",
            other in "[a-z0-9]{1,8}",
        ) {
            let cm = resources::find("", "v1", "configmaps").expect("configmaps");
            let s = Selectors::parse(cm, Some(&format!("{key}={value}")), None).expect("valid");
            let with = |v: &str| json!({"metadata": {"labels": {key.clone(): v}}});
            prop_assert!(s.matches(&with(&value)));
            prop_assert_eq!(s.matches(&with(&other)), other == value);
            let unlabelled = json!({"metadata": {}});
            prop_assert!(!s.matches(&unlabelled));
        }
    }
}
