//! Server-side printing: `meta.k8s.io/v1` Tables for `kubectl get`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use serde_json::{json, Value};

use crate::http::status::ApiError;
use crate::kube::cache::CachedObject;
use crate::kube::error::KubeError;
use crate::kube::resources::ResourceType;
use crate::kube::resources::{CustomType, PrinterColumn};

/// Formats an age the way kubectl prints it (`45s`, `5m10s`, `3h`, `12d`).
pub fn human_duration(secs: i64) -> String {
    let secs = secs.max(0);
    let (m, h, d) = (secs / 60, secs / 3600, secs / 86400);
    if secs < 120 {
        format!("{secs}s")
    } else if m < 10 {
        let s = secs % 60;
        if s == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{s}s")
        }
    } else if m < 180 {
        format!("{m}m")
    } else if h < 8 {
        let mm = m % 60;
        if mm == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{mm}m")
        }
    } else if h < 48 {
        format!("{h}h")
    } else if h < 24 * 8 {
        let hh = h % 24;
        if hh == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{hh}h")
        }
    } else if d < 365 * 2 {
        format!("{d}d")
    } else {
        let (y, dd) = (d / 365, d % 365);
        if y < 8 && dd != 0 {
            format!("{y}y{dd}d")
        } else {
            format!("{y}y")
        }
    }
}

/// How long ago an RFC 3339 timestamp was, as kubectl prints it.
fn since(timestamp: Option<&Value>) -> Option<String> {
    timestamp
        .and_then(Value::as_str)
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| human_duration((chrono::Utc::now() - t.with_timezone(&chrono::Utc)).num_seconds()))
}

fn age(obj: &Value) -> String {
    since(obj.pointer("/metadata/creationTimestamp")).unwrap_or_else(|| "<unknown>".into())
}

fn count_keys(obj: &Value, fields: &[&str]) -> usize {
    fields
        .iter()
        .filter_map(|f| obj.get(*f).and_then(Value::as_object))
        .map(|m| m.len())
        .sum()
}

fn str_at(obj: &Value, pointer: &str) -> String {
    obj.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

/// A string, or kubectl's `<none>` for an absent or empty one.
fn str_or_none(obj: &Value, pointer: &str) -> Value {
    match obj.pointer(pointer).and_then(Value::as_str) {
        Some(s) if !s.is_empty() => json!(s),
        _ => json!("<none>"),
    }
}

fn int_at(obj: &Value, pointer: &str) -> i64 {
    obj.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

/// A workload's wanted replicas: kube's default of 1 when its spec has
/// none.
fn desired(obj: &Value) -> i64 {
    obj.pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1)
}

/// `ready/wanted` of a workload.
fn ready_of(obj: &Value) -> Value {
    json!(format!(
        "{}/{}",
        int_at(obj, "/status/readyReplicas"),
        desired(obj)
    ))
}

/// An int-or-string value as kubectl prints it, `N/A` when absent.
fn int_or_string(obj: &Value, pointer: &str) -> Value {
    match obj.pointer(pointer) {
        Some(Value::String(s)) => json!(s),
        Some(Value::Number(n)) => json!(n.to_string()),
        _ => json!("N/A"),
    }
}

/// A map as `k=v` pairs joined by commas (sorted), `<none>` when empty.
fn pairs(obj: &Value, pointer: &str) -> Value {
    let joined = obj
        .pointer(pointer)
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    if joined.is_empty() {
        json!("<none>")
    } else {
        json!(joined)
    }
}

/// Access modes abbreviated as kubectl prints them (`RWO,ROX`).
fn access_modes(obj: &Value, pointer: &str) -> Value {
    let modes: Vec<&str> = obj
        .pointer(pointer)
        .and_then(Value::as_array)
        .map(|ms| {
            ms.iter()
                .filter_map(Value::as_str)
                .map(|m| match m {
                    "ReadWriteOnce" => "RWO",
                    "ReadOnlyMany" => "ROX",
                    "ReadWriteMany" => "RWX",
                    "ReadWriteOncePod" => "RWOP",
                    other => other,
                })
                .collect()
        })
        .unwrap_or_default();
    json!(modes.join(","))
}

/// `Kind/name` of a reference.
fn reference(obj: &Value, pointer: &str) -> Value {
    let kind = str_at(obj, &format!("{pointer}/kind"));
    let name = str_at(obj, &format!("{pointer}/name"));
    json!(format!("{kind}/{name}"))
}

/// A job's completions as kubectl prints them (`1/1`, `0/1 of 3`).
fn completions(obj: &Value) -> Value {
    let succeeded = int_at(obj, "/status/succeeded");
    json!(
        match obj.pointer("/spec/completions").and_then(Value::as_i64) {
            Some(n) => format!("{succeeded}/{n}"),
            None => match obj.pointer("/spec/parallelism").and_then(Value::as_i64) {
                Some(p) if p > 1 => format!("{succeeded}/1 of {p}"),
                _ => format!("{succeeded}/1"),
            },
        }
    )
}

/// An ingress's hosts (`*` for none) and load balancer addresses.
fn ingress_hosts(obj: &Value) -> Value {
    let hosts: Vec<&str> = obj
        .pointer("/spec/rules")
        .and_then(Value::as_array)
        .map(|rs| {
            rs.iter()
                .filter_map(|r| r.get("host").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    if hosts.is_empty() {
        json!("*")
    } else {
        json!(hosts.join(","))
    }
}

fn load_balancer(obj: &Value) -> Value {
    let addresses: Vec<&str> = obj
        .pointer("/status/loadBalancer/ingress")
        .and_then(Value::as_array)
        .map(|is| {
            is.iter()
                .filter_map(|i| {
                    i.get("ip")
                        .or_else(|| i.get("hostname"))
                        .and_then(Value::as_str)
                })
                .collect()
        })
        .unwrap_or_default();
    json!(addresses.join(","))
}

/// One type-specific column between NAME and AGE: its header, its type
/// (`string`, `integer`) and the cell of an object.
type Column = (&'static str, &'static str, fn(&Value) -> Value);

/// The columns kubectl prints for each type (kube's printers), where they
/// are cheap to compute from the object alone.
fn extra_columns(rt: &ResourceType) -> Vec<Column> {
    match (rt.group, rt.plural) {
        ("", "namespaces") => vec![("Status", "string", |o| json!(str_at(o, "/status/phase")))],
        ("", "configmaps") => vec![("Data", "integer", |o| {
            json!(count_keys(o, &["data", "binaryData"]))
        })],
        ("", "secrets") => vec![
            ("Type", "string", |o| json!(str_at(o, "/type"))),
            ("Data", "integer", |o| json!(count_keys(o, &["data"]))),
        ],
        ("", "pods") => vec![("Status", "string", |o| json!(str_at(o, "/status/phase")))],
        ("", "services") => vec![
            ("Type", "string", |o| json!(str_at(o, "/spec/type"))),
            ("Cluster-IP", "string", |o| {
                json!(str_at(o, "/spec/clusterIP"))
            }),
        ],
        ("", "replicationcontrollers") | ("apps", "replicasets") => vec![
            ("Desired", "integer", |o| json!(desired(o))),
            ("Current", "integer", |o| {
                json!(int_at(o, "/status/replicas"))
            }),
            ("Ready", "integer", |o| {
                json!(int_at(o, "/status/readyReplicas"))
            }),
        ],
        ("", "persistentvolumeclaims") => vec![
            ("Status", "string", |o| json!(str_at(o, "/status/phase"))),
            ("Volume", "string", |o| json!(str_at(o, "/spec/volumeName"))),
            ("Capacity", "string", |o| {
                json!(str_at(o, "/status/capacity/storage"))
            }),
            ("Access Modes", "string", |o| {
                access_modes(o, "/status/accessModes")
            }),
            ("StorageClass", "string", |o| {
                str_or_none(o, "/spec/storageClassName")
            }),
        ],
        ("", "persistentvolumes") => vec![
            ("Capacity", "string", |o| {
                json!(str_at(o, "/spec/capacity/storage"))
            }),
            ("Access Modes", "string", |o| {
                access_modes(o, "/spec/accessModes")
            }),
            ("Reclaim Policy", "string", |o| {
                json!(str_at(o, "/spec/persistentVolumeReclaimPolicy"))
            }),
            ("Status", "string", |o| json!(str_at(o, "/status/phase"))),
            ("Claim", "string", |o| {
                let ns = str_at(o, "/spec/claimRef/namespace");
                let name = str_at(o, "/spec/claimRef/name");
                json!(if name.is_empty() {
                    String::new()
                } else {
                    format!("{ns}/{name}")
                })
            }),
            ("StorageClass", "string", |o| {
                json!(str_at(o, "/spec/storageClassName"))
            }),
        ],
        ("apps", "deployments") => vec![
            ("Ready", "string", ready_of),
            ("Up-to-date", "integer", |o| {
                json!(int_at(o, "/status/updatedReplicas"))
            }),
            ("Available", "integer", |o| {
                json!(int_at(o, "/status/availableReplicas"))
            }),
        ],
        ("apps", "statefulsets") => vec![("Ready", "string", ready_of)],
        ("apps", "daemonsets") => vec![
            ("Desired", "integer", |o| {
                json!(int_at(o, "/status/desiredNumberScheduled"))
            }),
            ("Current", "integer", |o| {
                json!(int_at(o, "/status/currentNumberScheduled"))
            }),
            ("Ready", "integer", |o| {
                json!(int_at(o, "/status/numberReady"))
            }),
            ("Up-to-date", "integer", |o| {
                json!(int_at(o, "/status/updatedNumberScheduled"))
            }),
            ("Available", "integer", |o| {
                json!(int_at(o, "/status/numberAvailable"))
            }),
            ("Node Selector", "string", |o| {
                pairs(o, "/spec/template/spec/nodeSelector")
            }),
        ],
        ("batch", "jobs") => vec![("Completions", "string", completions)],
        ("batch", "cronjobs") => vec![
            ("Schedule", "string", |o| json!(str_at(o, "/spec/schedule"))),
            ("Suspend", "boolean", |o| {
                json!(o
                    .pointer("/spec/suspend")
                    .and_then(Value::as_bool)
                    .unwrap_or(false))
            }),
            ("Active", "integer", |o| {
                json!(o
                    .pointer("/status/active")
                    .and_then(Value::as_array)
                    .map_or(0, Vec::len))
            }),
            ("Last Schedule", "string", |o| {
                json!(
                    since(o.pointer("/status/lastScheduleTime")).unwrap_or_else(|| "<none>".into())
                )
            }),
        ],
        ("autoscaling", "horizontalpodautoscalers") => vec![
            ("Reference", "string", |o| {
                reference(o, "/spec/scaleTargetRef")
            }),
            ("MinPods", "integer", |o| {
                json!(o
                    .pointer("/spec/minReplicas")
                    .and_then(Value::as_i64)
                    .unwrap_or(1))
            }),
            ("MaxPods", "integer", |o| {
                json!(int_at(o, "/spec/maxReplicas"))
            }),
            ("Replicas", "integer", |o| {
                json!(int_at(o, "/status/currentReplicas"))
            }),
        ],
        ("networking.k8s.io", "ingresses") => vec![
            ("Class", "string", |o| {
                str_or_none(o, "/spec/ingressClassName")
            }),
            ("Hosts", "string", ingress_hosts),
            ("Address", "string", load_balancer),
        ],
        ("networking.k8s.io", "networkpolicies") => vec![("Pod-Selector", "string", |o| {
            pairs(o, "/spec/podSelector/matchLabels")
        })],
        ("policy", "poddisruptionbudgets") => vec![
            ("Min Available", "string", |o| {
                int_or_string(o, "/spec/minAvailable")
            }),
            ("Max Unavailable", "string", |o| {
                int_or_string(o, "/spec/maxUnavailable")
            }),
            ("Allowed Disruptions", "integer", |o| {
                json!(int_at(o, "/status/disruptionsAllowed"))
            }),
        ],
        ("rbac.authorization.k8s.io", "rolebindings" | "clusterrolebindings") => {
            vec![("Role", "string", |o| reference(o, "/roleRef"))]
        }
        ("storage.k8s.io", "storageclasses") => vec![
            ("Provisioner", "string", |o| {
                json!(str_at(o, "/provisioner"))
            }),
            ("ReclaimPolicy", "string", |o| {
                json!(o
                    .get("reclaimPolicy")
                    .and_then(Value::as_str)
                    .unwrap_or("Delete"))
            }),
            ("VolumeBindingMode", "string", |o| {
                json!(o
                    .get("volumeBindingMode")
                    .and_then(Value::as_str)
                    .unwrap_or("Immediate"))
            }),
            ("AllowVolumeExpansion", "boolean", |o| {
                json!(o
                    .get("allowVolumeExpansion")
                    .and_then(Value::as_bool)
                    .unwrap_or(false))
            }),
        ],
        ("coordination.k8s.io", "leases") => {
            vec![("Holder", "string", |o| {
                json!(str_at(o, "/spec/holderIdentity"))
            })]
        }
        _ => Vec::new(),
    }
}

/// The names (or images) of a pod template's containers, joined by commas
/// as kube's printers join them.
fn containers_of(obj: &Value, pointer: &str, field: &str) -> Value {
    let list: Vec<&str> = obj
        .pointer(pointer)
        .and_then(Value::as_array)
        .map(|cs| cs.iter().filter_map(|c| c[field].as_str()).collect())
        .unwrap_or_default();
    json!(list.join(","))
}

/// The label selector at `pointer` as kube prints it (`app=web,tier in
/// (a,b)`), `<none>` for none.
fn selector_at(obj: &Value, pointer: &str) -> Value {
    match crate::kube::scale::selector_string(obj.pointer(pointer)) {
        Ok(s) if !s.is_empty() => json!(s),
        _ => json!("<none>"),
    }
}

/// A string field, or kube's `<none>` when it is absent or empty.
fn str_or_placeholder(obj: &Value, pointer: &str) -> Value {
    match obj.pointer(pointer).and_then(Value::as_str) {
        Some(s) if !s.is_empty() => json!(s),
        _ => json!("<none>"),
    }
}

/// A pod's readiness gates as kube prints them: `<none>`, or how many of
/// them its conditions say are true out of how many there are.
fn readiness_gates(obj: &Value) -> Value {
    let gates: Vec<&str> = obj
        .pointer("/spec/readinessGates")
        .and_then(Value::as_array)
        .map(|gs| {
            gs.iter()
                .filter_map(|g| g["conditionType"].as_str())
                .collect()
        })
        .unwrap_or_default();
    if gates.is_empty() {
        return json!("<none>");
    }
    let conditions = obj
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let ready = gates
        .iter()
        .filter(|g| {
            conditions
                .iter()
                .any(|c| c["type"] == **g && c["status"] == "True")
        })
        .count();
    json!(format!("{ready}/{}", gates.len()))
}

/// The columns kube's printers add for `-o wide` (priority 1), after
/// `Age`, where they come from the object alone.
fn wide_columns(rt: &ResourceType) -> Vec<Column> {
    const TEMPLATE: &str = "/spec/template/spec/containers";
    const JOB_TEMPLATE: &str = "/spec/jobTemplate/spec/template/spec/containers";
    match (rt.group, rt.plural) {
        ("", "pods") => vec![
            ("IP", "string", |o| str_or_placeholder(o, "/status/podIP")),
            ("Node", "string", |o| {
                str_or_placeholder(o, "/spec/nodeName")
            }),
            ("Nominated Node", "string", |o| {
                str_or_placeholder(o, "/status/nominatedNodeName")
            }),
            ("Readiness Gates", "string", readiness_gates),
        ],
        ("", "services") => vec![("Selector", "string", |o| pairs(o, "/spec/selector"))],
        ("", "replicationcontrollers") => vec![
            ("Containers", "string", |o| {
                containers_of(o, TEMPLATE, "name")
            }),
            ("Images", "string", |o| containers_of(o, TEMPLATE, "image")),
            ("Selector", "string", |o| pairs(o, "/spec/selector")),
        ],
        ("apps", "deployments" | "replicasets" | "daemonsets") | ("batch", "jobs") => vec![
            ("Containers", "string", |o| {
                containers_of(o, TEMPLATE, "name")
            }),
            ("Images", "string", |o| containers_of(o, TEMPLATE, "image")),
            ("Selector", "string", |o| selector_at(o, "/spec/selector")),
        ],
        ("apps", "statefulsets") => vec![
            ("Containers", "string", |o| {
                containers_of(o, TEMPLATE, "name")
            }),
            ("Images", "string", |o| containers_of(o, TEMPLATE, "image")),
        ],
        ("batch", "cronjobs") => vec![
            ("Containers", "string", |o| {
                containers_of(o, JOB_TEMPLATE, "name")
            }),
            ("Images", "string", |o| {
                containers_of(o, JOB_TEMPLATE, "image")
            }),
            ("Selector", "string", |o| {
                selector_at(o, "/spec/jobTemplate/spec/selector")
            }),
        ],
        _ => Vec::new(),
    }
}

/// What each row of a Table carries of its object (`includeObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Include {
    /// The object's metadata, as a `PartialObjectMetadata` (the default).
    Metadata,
    /// The whole object.
    Object,
    /// Nothing but the cells.
    None,
}

fn include_of(q: &HashMap<String, String>) -> Result<Include, ApiError> {
    match q.get("includeObject").map(String::as_str) {
        None | Some("Metadata") => Ok(Include::Metadata),
        Some("Object") => Ok(Include::Object),
        Some("None") => Ok(Include::None),
        Some(other) => Err(ApiError::BadRequest(format!(
            "unrecognized includeObject value: {other:?}"
        ))),
    }
}

/// Renders objects as a Table; `includeObject` picks what each row carries.
pub fn render(
    rt: &ResourceType,
    items: &[Value],
    resource_version: &str,
    q: &HashMap<String, String>,
) -> Result<Value, ApiError> {
    let include = include_of(q)?;
    let (columns, cells) = columns_of(rt);
    let metadata = json!({ "resourceVersion": resource_version });
    let table = table_of(&columns, &cells, items, &metadata, include);
    serde_json::to_value(&table).map_err(table_error)
}

/// A list as a Table, as JSON bytes: `meta` is the list's metadata. Each
/// object is parsed once, its row written from it in place (its metadata
/// is not copied into a tree of the whole table) and dropped before the
/// next, so a list costs one parse per object and one pass of output.
/// Byte for byte what printing [`render`]'s Table of the same objects,
/// with `meta` as its metadata, gives.
pub fn render_list(
    rt: &ResourceType,
    items: &[Arc<CachedObject>],
    meta: &Value,
    q: &HashMap<String, String>,
) -> Result<Vec<u8>, ApiError> {
    let include = include_of(q)?;
    let (columns, cells) = columns_of(rt);
    let table = table_of(&columns, &cells, items, meta, include);
    serde_json::to_vec(&table).map_err(table_error)
}

fn table_error(e: serde_json::Error) -> ApiError {
    ApiError::Kube(KubeError::Internal(format!("rendering a table: {e}")))
}

const TABLE_API_VERSION: &str = "meta.k8s.io/v1";

/// The Table of `items` with `columns` and `metadata`, each row's cells
/// from `cells`, ready to be serialized (as a `Value` or as bytes).
fn table_of<'a, T: TableItem>(
    columns: &'a [Value],
    cells: &'a CellsOf<'static>,
    items: &'a [T],
    metadata: &'a Value,
    include: Include,
) -> TableJson<'a, T> {
    TableJson {
        api_version: TABLE_API_VERSION,
        column_definitions: columns,
        kind: "Table",
        metadata,
        rows: RowsJson {
            items,
            cells,
            include,
        },
    }
}

/// An object a Table row is made from: parsed already, or parsed when its
/// row is written.
trait TableItem {
    fn object(&self) -> Cow<'_, Value>;
}

impl TableItem for Value {
    fn object(&self) -> Cow<'_, Value> {
        Cow::Borrowed(self)
    }
}

impl TableItem for Arc<CachedObject> {
    fn object(&self) -> Cow<'_, Value> {
        Cow::Owned(self.to_value())
    }
}

/// A Table as written (members in the order a `Value` prints them).
#[derive(Serialize)]
#[serde(bound = "")]
struct TableJson<'a, T: TableItem> {
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    #[serde(rename = "columnDefinitions")]
    column_definitions: &'a [Value],
    kind: &'static str,
    metadata: &'a Value,
    rows: RowsJson<'a, T>,
}

/// A Table's rows, each made from its object as it is written.
struct RowsJson<'a, T> {
    items: &'a [T],
    cells: &'a CellsOf<'static>,
    include: Include,
}

impl<T: TableItem> Serialize for RowsJson<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let no_metadata = Value::Object(serde_json::Map::new());
        let mut rows = s.serialize_seq(Some(self.items.len()))?;
        for item in self.items {
            let obj = item.object();
            let object = match self.include {
                Include::Metadata => Some(RowObject::Metadata(
                    obj.get("metadata").unwrap_or(&no_metadata),
                )),
                Include::Object => Some(RowObject::Whole(obj.as_ref())),
                Include::None => None,
            };
            rows.serialize_element(&RowJson {
                cells: (self.cells)(&obj),
                object,
            })?;
        }
        rows.end()
    }
}

#[derive(Serialize)]
struct RowJson<'a> {
    cells: Vec<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    object: Option<RowObject<'a>>,
}

/// What a row carries of its object.
enum RowObject<'a> {
    Whole(&'a Value),
    /// A `PartialObjectMetadata` of this metadata.
    Metadata(&'a Value),
}

impl Serialize for RowObject<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            RowObject::Whole(obj) => obj.serialize(s),
            RowObject::Metadata(metadata) => {
                let mut map = s.serialize_map(Some(3))?;
                map.serialize_entry("apiVersion", TABLE_API_VERSION)?;
                map.serialize_entry("kind", "PartialObjectMetadata")?;
                map.serialize_entry("metadata", metadata)?;
                map.end()
            }
        }
    }
}

/// The columns of `rt`'s Table, and what makes a row's cells.
fn columns_of(rt: &ResourceType) -> (Vec<Value>, CellsOf<'static>) {
    if let Some(custom) = rt.custom {
        return custom_columns(custom);
    }
    let extra = extra_columns(rt);
    let mut columns = vec![
        json!({"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace.", "priority": 0}),
    ];
    for (name, kind, _) in &extra {
        columns.push(
            json!({"name": name, "type": kind, "format": "", "description": "", "priority": 0}),
        );
    }
    columns.push(json!({"name": "Age", "type": "string", "format": "", "description": "Time since the object was created.", "priority": 0}));
    let wide = wide_columns(rt);
    for (name, kind, _) in &wide {
        columns.push(
            json!({"name": name, "type": kind, "format": "", "description": "", "priority": 1}),
        );
    }
    let cells = move |obj: &Value| {
        let mut cells = vec![json!(str_at(obj, "/metadata/name"))];
        cells.extend(extra.iter().map(|(_, _, cell)| cell(obj)));
        cells.push(json!(age(obj)));
        cells.extend(wide.iter().map(|(_, _, cell)| cell(obj)));
        cells
    };
    (columns, Box::new(cells))
}

/// A custom type's columns (kube's CRD table convertor): the name, then
/// its `additionalPrinterColumns` (an `Age` of the creation time when it
/// has none), each cell the value its JSON path finds (`null` when none);
/// a `date` cell printed as an age.
fn custom_columns(custom: &'static CustomType) -> (Vec<Value>, CellsOf<'static>) {
    let default_age = [PrinterColumn {
        name: "Age".into(),
        type_: "date".into(),
        format: String::new(),
        description: String::new(),
        priority: 0,
        json_path: ".metadata.creationTimestamp".into(),
    }];
    let printed: Vec<PrinterColumn> = if custom.printer_columns.is_empty() {
        default_age.to_vec()
    } else {
        custom.printer_columns.clone()
    };
    let mut columns = vec![
        json!({"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names", "priority": 0}),
    ];
    for c in &printed {
        columns.push(json!({
            "name": c.name, "type": c.type_, "format": c.format,
            "description": c.description, "priority": c.priority,
        }));
    }
    let cells = move |obj: &Value| {
        let mut cells = vec![json!(str_at(obj, "/metadata/name"))];
        for c in &printed {
            let found = json_path(obj, &c.json_path);
            cells.push(match (c.type_.as_str(), found) {
                ("date", Some(Value::String(t))) => json!(since(Some(&json!(t))).unwrap_or(t)),
                (_, Some(v)) => v,
                (_, None) => Value::Null,
            });
        }
        cells
    };
    (columns, Box::new(cells))
}

/// The value a simple JSON path (`.spec.replicas`, `.status.conditions[0].type`)
/// names in `obj`.
fn json_path(obj: &Value, path: &str) -> Option<Value> {
    let mut at = obj;
    let path = path.trim().trim_start_matches('{').trim_end_matches('}');
    for part in path
        .trim_start_matches('.')
        .split('.')
        .filter(|p| !p.is_empty())
    {
        let (field, indices) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !field.is_empty() {
            at = at.get(field)?;
        }
        for index in indices.split('[').filter(|s| !s.is_empty()) {
            let index = index
                .trim_end_matches(']')
                .trim_matches('\'')
                .trim_matches('"');
            at = match index.parse::<usize>() {
                Ok(i) => at.get(i)?,
                Err(_) => at.get(index)?,
            };
        }
    }
    Some(at.clone())
}

/// What makes a row's cells of an object.
type CellsOf<'a> = Box<dyn Fn(&Value) -> Vec<Value> + 'a>;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ages_read_like_kubectl() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(130), "2m10s");
        assert_eq!(human_duration(60 * 30), "30m");
        assert_eq!(human_duration(3600 * 5 + 60 * 7), "5h7m");
        assert_eq!(human_duration(3600 * 30), "30h");
        assert_eq!(human_duration(86400 * 3 + 3600 * 2), "3d2h");
        assert_eq!(human_duration(86400 * 100), "100d");
    }

    fn row(group: &str, plural: &str, obj: Value) -> (Vec<String>, Vec<Value>) {
        let rt = crate::kube::resources::RESOURCES
            .iter()
            .find(|r| r.group == group && r.plural == plural)
            .unwrap_or_else(|| panic!("{plural}"));
        let t = render(rt, &[obj], "1", &HashMap::new()).expect("a table");
        let names = t["columnDefinitions"]
            .as_array()
            .expect("columns")
            .iter()
            .map(|c| c["name"].as_str().unwrap_or("").to_string())
            .collect();
        let cells = t["rows"][0]["cells"].as_array().expect("cells").clone();
        (names, cells)
    }

    #[test]
    fn a_list_written_as_bytes_equals_the_printed_table() {
        use crate::kube::cache::WatchEventType;
        let cases = [
            (
                "",
                "v1",
                "configmaps",
                json!({"metadata": {"name": "a", "namespace": "default", "creationTimestamp": "2026-01-01T00:00:00Z", "labels": {"x": "1"}}, "data": {"k": "v", "l": "w"}}),
            ),
            (
                "",
                "v1",
                "configmaps",
                json!({"metadata": {"name": "b", "namespace": "default"}}),
            ),
            (
                "apps",
                "v1",
                "deployments",
                json!({"metadata": {"name": "d", "namespace": "default", "creationTimestamp": "2026-01-01T00:00:00Z"}, "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "c", "image": "nginx"}]}}}, "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}}),
            ),
        ];
        for (group, version, plural, obj) in cases {
            let rt = crate::kube::resources::find(group, version, plural).expect(plural);
            let items: Vec<Arc<CachedObject>> = (0..3)
                .map(|i| {
                    let mut o = obj.clone();
                    o["metadata"]["name"] = json!(format!(
                        "{}-{i}",
                        o["metadata"]["name"].as_str().unwrap_or("")
                    ));
                    let key = format!("/registry/{plural}/default/{i}");
                    let bytes = o.to_string();
                    Arc::new(
                        CachedObject::decode(
                            rt,
                            key.as_bytes(),
                            bytes.as_bytes(),
                            10 + i,
                            WatchEventType::Added,
                        )
                        .expect("decoded"),
                    )
                })
                .collect();
            let meta =
                json!({"resourceVersion": "12", "continue": "token", "remainingItemCount": 4});
            for include in [None, Some("Metadata"), Some("Object"), Some("None")] {
                let q: HashMap<String, String> = include
                    .map(|i| HashMap::from([("includeObject".to_string(), i.to_string())]))
                    .unwrap_or_default();
                let values: Vec<Value> = items.iter().map(|o| o.to_value()).collect();
                let mut printed = render(rt, &values, "12", &q).expect("a table");
                printed["metadata"] = meta.clone();
                let written = render_list(rt, &items, &meta, &q).expect("a table");
                assert_eq!(
                    String::from_utf8_lossy(&written),
                    printed.to_string(),
                    "{plural} {include:?}"
                );
            }
        }
        let bad = HashMap::from([("includeObject".to_string(), "All".to_string())]);
        assert!(render_list(crate::kube::resources::namespaces(), &[], &json!({}), &bad).is_err());
    }

    #[test]
    fn workloads_print_their_replicas_as_kubectl_does() {
        let (cols, cells) = row(
            "apps",
            "replicasets",
            json!({"metadata": {"name": "rs"}, "spec": {"replicas": 3},
                   "status": {"replicas": 2, "readyReplicas": 1}}),
        );
        assert_eq!(
            cols,
            [
                "Name",
                "Desired",
                "Current",
                "Ready",
                "Age",
                "Containers",
                "Images",
                "Selector"
            ]
        );
        assert_eq!(&cells[..4], &[json!("rs"), json!(3), json!(2), json!(1)]);
        let (cols, cells) = row(
            "apps",
            "deployments",
            json!({"metadata": {"name": "web"}, "spec": {"replicas": 3},
                   "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}}),
        );
        assert_eq!(
            cols,
            [
                "Name",
                "Ready",
                "Up-to-date",
                "Available",
                "Age",
                "Containers",
                "Images",
                "Selector"
            ]
        );
        assert_eq!(&cells[1..4], &[json!("2/3"), json!(3), json!(2)]);
        // `-o wide`: the template's containers and images, the selector.
        let (_, cells) = row(
            "apps",
            "deployments",
            json!({"metadata": {"name": "web"}, "spec": {"replicas": 1,
                   "selector": {"matchLabels": {"app": "web"},
                                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["fe", "be"]}]},
                   "template": {"spec": {"containers": [
                       {"name": "app", "image": "nginx:1.27"}, {"name": "proxy", "image": "envoy"}]}}}}),
        );
        assert_eq!(
            &cells[5..],
            &[
                json!("app,proxy"),
                json!("nginx:1.27,envoy"),
                json!("app=web,tier in (be,fe)")
            ]
        );
        let (cols, cells) = row(
            "",
            "pods",
            json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n1",
                   "readinessGates": [{"conditionType": "a"}, {"conditionType": "b"}]},
                   "status": {"podIP": "10.0.0.7", "conditions": [{"type": "a", "status": "True"}]}}),
        );
        assert_eq!(
            &cols[3..],
            ["IP", "Node", "Nominated Node", "Readiness Gates"]
        );
        assert_eq!(
            &cells[3..],
            &[
                json!("10.0.0.7"),
                json!("n1"),
                json!("<none>"),
                json!("1/2")
            ]
        );
        let (_, cells) = row(
            "apps",
            "statefulsets",
            json!({"metadata": {"name": "db"}, "spec": {}}),
        );
        assert_eq!(cells[1], "0/1", "kube's default of one replica");
        let (_, cells) = row(
            "batch",
            "jobs",
            json!({"metadata": {"name": "j"}, "spec": {"parallelism": 3}, "status": {"succeeded": 1}}),
        );
        assert_eq!(cells[1], "1/1 of 3");
    }

    #[test]
    fn every_served_type_has_a_name_and_an_age() {
        for rt in crate::kube::resources::RESOURCES.iter() {
            let t = render(
                rt,
                &[json!({"metadata": {"name": "x"}})],
                "1",
                &HashMap::new(),
            )
            .expect("a table");
            let cols = t["columnDefinitions"].as_array().expect("columns");
            assert_eq!(cols[0]["name"], "Name", "{}", rt.plural);
            // Age ends the default columns; `-o wide`'s (priority 1) follow.
            let default: Vec<&Value> = cols.iter().filter(|c| c["priority"] == 0).collect();
            assert_eq!(default[default.len() - 1]["name"], "Age", "{}", rt.plural);
            assert!(
                cols[default.len()..].iter().all(|c| c["priority"] == 1),
                "{}",
                rt.plural
            );
            let cells = t["rows"][0]["cells"].as_array().expect("cells");
            assert_eq!(cells.len(), cols.len(), "{}", rt.plural);
            assert_eq!(cells[0], "x");
        }
        let (cols, cells) = row(
            "rbac.authorization.k8s.io",
            "rolebindings",
            json!({"metadata": {"name": "rb"}, "roleRef": {"kind": "Role", "name": "reader"}}),
        );
        assert_eq!(cols, ["Name", "Role", "Age"]);
        assert_eq!(cells[1], "Role/reader");
    }
}
