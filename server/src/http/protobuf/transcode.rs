//! Kube's JSON to and from its protobuf messages, field by field through
//! the descriptors (`schema`), as kube's Go types would read one and
//! write the other:
//!
//! - field names are the descriptors' JSON names; a field named `,inline`
//!   (Go's `json:",inline"`, such as `Volume.volumeSource`) has its own
//!   fields in the parent's object;
//! - `Time` and `MicroTime` are RFC 3339 strings (seconds, microseconds),
//!   `Duration` Go's duration string, `Quantity` its string,
//!   `IntOrString` a number or a string, `RawExtension`, `FieldsV1` and
//!   `apiextensions.JSON` the JSON they carry, and the `JSONSchemaPropsOr*`
//!   unions a schema or the other alternative; a message of only a
//!   repeated `items` field (`ExtraValue`, `Verbs`) is a JSON array;
//! - decoding leaves out what Go's `omitempty` leaves out and protobuf
//!   cannot: a string or bytes field that is empty (unless the field is
//!   required) and a zero `Time`. A number or `false` is kept, since a
//!   pointer field explicitly set to zero (`replicas: 0`) means something.
//!
//! JSON keys the message has no field for (`apiVersion` and `kind`, which
//! the envelope carries, or a field newer than the descriptors) are not
//! encoded.

use base64::Engine as _;
use bytes::Bytes;
use chrono::{DateTime, SecondsFormat, Utc};
use prost_reflect::{
    DynamicMessage, FieldDescriptor, Kind, MapKey, MessageDescriptor, ReflectMessage, Value as Pb,
};
use serde_json::{Map, Number, Value};

use super::schema::{names, Schema};

/// A body that cannot be transcoded.
#[derive(Debug, thiserror::Error)]
pub enum TranscodeError {
    #[error("{field}: {problem}")]
    Field { field: String, problem: String },
}

fn field_error(field: &str, problem: impl std::fmt::Display) -> TranscodeError {
    TranscodeError::Field {
        field: field.to_string(),
        problem: problem.to_string(),
    }
}

/// The JSON name that marks an inlined field.
const INLINE: &str = ",inline";

/// Go's zero `time.Time`, as its `Unix()` gives it.
const GO_ZERO_TIME_SECONDS: i64 = -62_135_596_800;

// ---- protobuf to JSON ----

/// Kube's JSON of a message.
pub fn to_json(msg: &DynamicMessage) -> Result<Value, TranscodeError> {
    let desc = msg.descriptor();
    if let Some(v) = special_to_json(msg)? {
        return Ok(v);
    }
    let mut out = Map::new();
    fields_to_json(msg, &desc, &mut out)?;
    Ok(Value::Object(out))
}

fn fields_to_json(
    msg: &DynamicMessage,
    desc: &MessageDescriptor,
    out: &mut Map<String, Value>,
) -> Result<(), TranscodeError> {
    let schema = Schema::get();
    for (field, value) in msg.fields() {
        let name = field.json_name();
        if name == INLINE {
            if let Pb::Message(inner) = value {
                fields_to_json(inner, &inner.descriptor(), out)?;
            }
            continue;
        }
        let required = schema.is_required(desc, name);
        if let Some(v) = field_to_json(&field, value, required)? {
            out.insert(name.to_string(), v);
        }
    }
    Ok(())
}

/// A set field's JSON, or `None` where kube's JSON leaves it out.
fn field_to_json(
    field: &FieldDescriptor,
    value: &Pb,
    required: bool,
) -> Result<Option<Value>, TranscodeError> {
    Ok(match value {
        Pb::String(s) if s.is_empty() && !required => None,
        Pb::Bytes(b) if b.is_empty() && !required => None,
        Pb::List(items) if items.is_empty() => None,
        Pb::Map(entries) if entries.is_empty() => None,
        Pb::List(items) => Some(Value::Array(
            items.iter().map(value_to_json).collect::<Result<_, _>>()?,
        )),
        Pb::Map(entries) => {
            let mut map = Map::new();
            for (k, v) in entries {
                let MapKey::String(k) = k else {
                    return Err(field_error(field.name(), "a map key is not a string"));
                };
                map.insert(k.clone(), value_to_json(v)?);
            }
            Some(Value::Object(map))
        }
        Pb::Message(m) if is_zero_time(m) => None,
        other => Some(value_to_json(other)?),
    })
}

fn value_to_json(value: &Pb) -> Result<Value, TranscodeError> {
    Ok(match value {
        Pb::Bool(b) => Value::Bool(*b),
        Pb::I32(n) => Value::from(*n),
        Pb::I64(n) => Value::from(*n),
        Pb::U32(n) => Value::from(*n),
        Pb::U64(n) => Value::from(*n),
        Pb::F32(n) => Number::from_f64(f64::from(*n)).map_or(Value::Null, Value::Number),
        Pb::F64(n) => Number::from_f64(*n).map_or(Value::Null, Value::Number),
        Pb::String(s) => Value::String(s.clone()),
        Pb::Bytes(b) => Value::String(base64::engine::general_purpose::STANDARD.encode(b)),
        Pb::EnumNumber(n) => Value::from(*n),
        Pb::Message(m) => to_json(m)?,
        Pb::List(items) => Value::Array(items.iter().map(value_to_json).collect::<Result<_, _>>()?),
        Pb::Map(_) => return Err(field_error("map", "a map inside a list")),
    })
}

fn int_field(msg: &DynamicMessage, name: &str) -> i64 {
    match msg.get_field_by_name(name).as_deref() {
        Some(Pb::I64(n)) => *n,
        Some(Pb::I32(n)) => i64::from(*n),
        _ => 0,
    }
}

pub(super) fn string_field(msg: &DynamicMessage, name: &str) -> String {
    match msg.get_field_by_name(name).as_deref() {
        Some(Pb::String(s)) => s.clone(),
        _ => String::new(),
    }
}

pub(super) fn bytes_field(msg: &DynamicMessage, name: &str) -> Bytes {
    match msg.get_field_by_name(name).as_deref() {
        Some(Pb::Bytes(b)) => b.clone(),
        _ => Bytes::new(),
    }
}

fn is_zero_time(msg: &DynamicMessage) -> bool {
    let name = msg.descriptor();
    (name.full_name() == names::TIME || name.full_name() == names::MICRO_TIME)
        && matches!(int_field(msg, "seconds"), 0 | GO_ZERO_TIME_SECONDS)
        && int_field(msg, "nanos") == 0
}

/// JSON carried as bytes: JSON text, or an embedded protobuf object (a
/// `k8s\0` envelope), decoded to its JSON.
fn embedded_json(raw: &[u8], what: &str) -> Result<Value, TranscodeError> {
    if raw.is_empty() {
        return Ok(Value::Null);
    }
    if raw.starts_with(super::MAGIC) {
        return super::decode_object(raw, None).map_err(|e| field_error(what, e));
    }
    serde_json::from_slice(raw).map_err(|e| field_error(what, format!("not JSON: {e}")))
}

/// The JSON of a message kube spells other than as an object of its
/// fields; `None` for a plain message.
fn special_to_json(msg: &DynamicMessage) -> Result<Option<Value>, TranscodeError> {
    let desc = msg.descriptor();
    let name = desc.full_name();
    let v = match name {
        names::TIME | names::MICRO_TIME => {
            let seconds = int_field(msg, "seconds");
            let nanos = u32::try_from(int_field(msg, "nanos")).unwrap_or(0);
            let time = DateTime::<Utc>::from_timestamp(seconds, nanos)
                .ok_or_else(|| field_error(name, "a time out of range"))?;
            let format = if name == names::TIME {
                SecondsFormat::Secs
            } else {
                SecondsFormat::Micros
            };
            Value::String(time.to_rfc3339_opts(format, true))
        }
        names::DURATION => Value::String(go_duration(int_field(msg, "duration"))),
        names::QUANTITY => Value::String(string_field(msg, "string")),
        names::INT_OR_STRING => {
            if int_field(msg, "type") == 1 {
                Value::String(string_field(msg, "strVal"))
            } else {
                Value::from(int_field(msg, "intVal"))
            }
        }
        names::RAW_EXTENSION | names::FIELDS_V1 => embedded_json(&bytes_field(msg, "raw"), name)?,
        n if names::is_json(n) => embedded_json(&bytes_field(msg, "raw"), name)?,
        n => match names::schema_union(n) {
            Some(which) => schema_union_to_json(msg, which)?,
            None if is_item_list(&desc) => match msg.get_field_by_name("items").as_deref() {
                Some(items @ Pb::List(_)) => value_to_json(items)?,
                _ => Value::Array(Vec::new()),
            },
            None => return Ok(None),
        },
    };
    Ok(Some(v))
}

/// `JSONSchemaPropsOrArray` (a schema or an array of them),
/// `JSONSchemaPropsOrBool` (a schema or a bool) and
/// `JSONSchemaPropsOrStringArray` (a schema or an array of strings).
fn schema_union_to_json(msg: &DynamicMessage, which: &str) -> Result<Value, TranscodeError> {
    let (other, other_is_set) = match which {
        "Array" => ("jSONSchemas", msg.has_field_by_name("jSONSchemas")),
        "Bool" => ("allows", !msg.has_field_by_name("schema")),
        _ => ("property", msg.has_field_by_name("property")),
    };
    if other_is_set {
        let value = msg.get_field_by_name(other);
        return match value.as_deref() {
            Some(v) => value_to_json(v),
            None => Ok(Value::Null),
        };
    }
    match msg.get_field_by_name("schema").as_deref() {
        Some(Pb::Message(schema)) => to_json(schema),
        _ => Ok(Value::Object(Map::new())),
    }
}

/// A message of one repeated field, `items`, that kube's OpenAPI has no
/// definition of: its JSON is the array (`ExtraValue`, `Verbs`).
fn is_item_list(desc: &MessageDescriptor) -> bool {
    let mut fields = desc.fields();
    matches!(
        (fields.next(), fields.next()),
        (Some(f), None) if f.name() == "items" && f.is_list()
    ) && !desc.full_name().ends_with("List")
}

/// Go's `time.Duration.String()`: `1h2m3.5s`, `1.5ms`, `0s`.
pub fn go_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let n = nanos.unsigned_abs();
    let fraction = |value: u64, unit: u64| {
        let whole = value / unit;
        let rest = value % unit;
        if rest == 0 {
            whole.to_string()
        } else {
            let digits = unit.ilog10() as usize;
            let frac = format!("{rest:0digits$}");
            format!("{whole}.{}", frac.trim_end_matches('0'))
        }
    };
    if n < 1_000 {
        return format!("{sign}{n}ns");
    }
    if n < 1_000_000 {
        return format!("{sign}{}µs", fraction(n, 1_000));
    }
    if n < 1_000_000_000 {
        return format!("{sign}{}ms", fraction(n, 1_000_000));
    }
    let hours = n / 3_600_000_000_000;
    let minutes = n / 60_000_000_000 % 60;
    let seconds = fraction(n % 60_000_000_000, 1_000_000_000);
    match (hours, minutes) {
        (0, 0) => format!("{sign}{seconds}s"),
        (0, m) => format!("{sign}{m}m{seconds}s"),
        (h, m) => format!("{sign}{h}h{m}m{seconds}s"),
    }
}

/// Parses Go's duration syntax (`1h30m`, `1.5s`, `300ms`) into nanoseconds.
pub fn parse_go_duration(s: &str) -> Option<i64> {
    let (negative, mut rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if rest == "0" {
        return Some(0);
    }
    let mut total: f64 = 0.0;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..number_len].parse().ok()?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += number * scale;
    }
    let total = if negative { -total } else { total };
    (total.abs() < 9.2e18).then_some(total.round() as i64)
}

// ---- JSON to protobuf ----

/// The message of a JSON object.
pub fn from_json(desc: &MessageDescriptor, json: &Value) -> Result<DynamicMessage, TranscodeError> {
    let mut msg = DynamicMessage::new(desc.clone());
    if special_from_json(&mut msg, json)? {
        return Ok(msg);
    }
    let Value::Object(object) = json else {
        return Err(field_error(desc.name(), "expected an object"));
    };
    fields_from_json(&mut msg, object)?;
    Ok(msg)
}

fn fields_from_json(
    msg: &mut DynamicMessage,
    object: &Map<String, Value>,
) -> Result<(), TranscodeError> {
    let desc = msg.descriptor();
    for field in desc.fields() {
        if field.json_name() == INLINE {
            let Kind::Message(inner) = field.kind() else {
                continue;
            };
            let mut sub = DynamicMessage::new(inner);
            fields_from_json(&mut sub, object)?;
            if sub.fields().next().is_some() {
                msg.set_field(&field, Pb::Message(sub));
            }
            continue;
        }
        match object.get(field.json_name()) {
            None | Some(Value::Null) => {}
            Some(v) => {
                let value = field_from_json(&field, v)?;
                msg.set_field(&field, value);
            }
        }
    }
    Ok(())
}

fn field_from_json(field: &FieldDescriptor, json: &Value) -> Result<Pb, TranscodeError> {
    if field.is_map() {
        let Value::Object(entries) = json else {
            return Err(field_error(field.json_name(), "expected an object"));
        };
        let Kind::Message(entry) = field.kind() else {
            return Err(field_error(
                field.json_name(),
                "a map without an entry type",
            ));
        };
        let value_field = entry.map_entry_value_field();
        let mut map = std::collections::HashMap::with_capacity(entries.len());
        for (k, v) in entries {
            if v.is_null() {
                continue;
            }
            let value = scalar_from_json(&value_field, v)
                .map_err(|e| field_error(&format!("{}.{k}", field.json_name()), e))?;
            map.insert(MapKey::String(k.clone()), value);
        }
        return Ok(Pb::Map(map));
    }
    if field.is_list() {
        let Value::Array(items) = json else {
            return Err(field_error(field.json_name(), "expected an array"));
        };
        return Ok(Pb::List(
            items
                .iter()
                .map(|v| scalar_from_json(field, v))
                .collect::<Result<_, _>>()?,
        ));
    }
    scalar_from_json(field, json)
}

/// One value of a field's kind (its element for a list or map).
fn scalar_from_json(field: &FieldDescriptor, json: &Value) -> Result<Pb, TranscodeError> {
    let name = field.json_name();
    let wrong = |expected: &str| field_error(name, format!("expected {expected}, got {json}"));
    let integer = || -> Result<i64, TranscodeError> {
        json.as_i64()
            .or_else(|| json.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
            .ok_or_else(|| wrong("an integer"))
    };
    Ok(match field.kind() {
        Kind::Bool => Pb::Bool(json.as_bool().ok_or_else(|| wrong("a boolean"))?),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => {
            Pb::I32(i32::try_from(integer()?).map_err(|_| wrong("a 32-bit integer"))?)
        }
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => Pb::I64(integer()?),
        Kind::Uint32 | Kind::Fixed32 => {
            Pb::U32(u32::try_from(integer()?).map_err(|_| wrong("a 32-bit unsigned integer"))?)
        }
        Kind::Uint64 | Kind::Fixed64 => {
            Pb::U64(u64::try_from(integer()?).map_err(|_| wrong("an unsigned integer"))?)
        }
        Kind::Double => Pb::F64(json.as_f64().ok_or_else(|| wrong("a number"))?),
        Kind::Float => Pb::F32(json.as_f64().ok_or_else(|| wrong("a number"))? as f32),
        Kind::String => Pb::String(json.as_str().ok_or_else(|| wrong("a string"))?.to_string()),
        Kind::Bytes => {
            let text = json.as_str().ok_or_else(|| wrong("a base64 string"))?;
            Pb::Bytes(
                base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .map_err(|e| field_error(name, e))?
                    .into(),
            )
        }
        Kind::Enum(_) => {
            Pb::EnumNumber(i32::try_from(integer()?).map_err(|_| wrong("an enum number"))?)
        }
        Kind::Message(desc) => Pb::Message(from_json(&desc, json)?),
    })
}

fn set(msg: &mut DynamicMessage, name: &str, value: Pb) -> Result<(), TranscodeError> {
    msg.try_set_field_by_name(name, value)
        .map_err(|e| field_error(name, e))
}

/// Fills a message kube spells other than as an object of its fields;
/// `false` for a plain message.
fn special_from_json(msg: &mut DynamicMessage, json: &Value) -> Result<bool, TranscodeError> {
    let desc = msg.descriptor();
    let name = desc.full_name();
    let wrong = |expected: &str| field_error(name, format!("expected {expected}, got {json}"));
    match name {
        names::TIME | names::MICRO_TIME => {
            let text = json.as_str().ok_or_else(|| wrong("an RFC 3339 time"))?;
            let time = DateTime::parse_from_rfc3339(text).map_err(|e| field_error(name, e))?;
            set(msg, "seconds", Pb::I64(time.timestamp()))?;
            let nanos = i32::try_from(time.timestamp_subsec_nanos()).unwrap_or(0);
            if nanos != 0 {
                set(msg, "nanos", Pb::I32(nanos))?;
            }
        }
        names::DURATION => {
            let text = json.as_str().ok_or_else(|| wrong("a duration"))?;
            let nanos = parse_go_duration(text).ok_or_else(|| wrong("a duration"))?;
            set(msg, "duration", Pb::I64(nanos))?;
        }
        names::QUANTITY => {
            let text = match json {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                _ => return Err(wrong("a quantity")),
            };
            set(msg, "string", Pb::String(text))?;
        }
        names::INT_OR_STRING => match json {
            Value::String(s) => {
                set(msg, "type", Pb::I64(1))?;
                set(msg, "strVal", Pb::String(s.clone()))?;
            }
            Value::Number(_) => {
                let n = json
                    .as_i64()
                    .ok_or_else(|| wrong("an integer or a string"))?;
                set(msg, "type", Pb::I64(0))?;
                let n = i32::try_from(n).map_err(|_| wrong("a 32-bit integer"))?;
                set(msg, "intVal", Pb::I32(n))?;
            }
            _ => return Err(wrong("an integer or a string")),
        },
        n if n == names::RAW_EXTENSION || n == names::FIELDS_V1 || names::is_json(n) => {
            set(msg, "raw", Pb::Bytes(json.to_string().into_bytes().into()))?;
        }
        n => match names::schema_union(n) {
            Some(which) => schema_union_from_json(msg, which, json)?,
            None if is_item_list(&desc) => {
                let field = desc
                    .get_field_by_name("items")
                    .ok_or_else(|| wrong("a list"))?;
                let value = field_from_json(&field, json)?;
                msg.set_field(&field, value);
            }
            None => return Ok(false),
        },
    }
    Ok(true)
}

fn schema_union_from_json(
    msg: &mut DynamicMessage,
    which: &str,
    json: &Value,
) -> Result<(), TranscodeError> {
    let desc = msg.descriptor();
    let (other, is_other) = match which {
        "Array" => ("jSONSchemas", json.is_array()),
        "Bool" => ("allows", json.is_boolean()),
        _ => ("property", json.is_array()),
    };
    let name = if is_other { other } else { "schema" };
    let field = desc
        .get_field_by_name(name)
        .ok_or_else(|| field_error(desc.name(), format!("no field {name}")))?;
    let value = field_from_json(&field, json)?;
    msg.set_field(&field, value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn round_trip(api_version: &str, kind: &str, object: Value) -> Value {
        let desc = Schema::get().kind(api_version, kind).expect("a message");
        let msg = from_json(&desc, &object).expect("encodes");
        let bytes = prost::Message::encode_to_vec(&msg);
        let back = DynamicMessage::decode(desc, bytes.as_slice()).expect("decodes");
        to_json(&back).expect("to json")
    }

    #[test]
    fn a_deployment_keeps_its_special_fields_through_protobuf() {
        let object = json!({
            "metadata": {
                "name": "web", "namespace": "default", "generation": 3,
                "creationTimestamp": "2024-05-01T10:20:30Z",
                "labels": {"app": "web"},
                "managedFields": [{"manager": "kubectl", "operation": "Apply",
                    "time": "2024-05-01T10:20:30Z", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {"f:replicas": {}}}}]
            },
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": "web"}},
                "strategy": {"type": "RollingUpdate",
                    "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "containers": [{
                            "name": "nginx", "image": "nginx:1.27",
                            "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}},
                            "livenessProbe": {"httpGet": {"path": "/", "port": 80}},
                            "ports": [{"containerPort": 80, "protocol": "TCP"}]
                        }],
                        "volumes": [{"name": "data", "emptyDir": {"sizeLimit": "1Gi"}},
                                    {"name": "cfg", "configMap": {"name": "web-config"}}]
                    }
                }
            }
        });
        let back = round_trip("apps/v1", "Deployment", object.clone());
        assert_eq!(back, object);
    }

    #[test]
    fn a_crd_schema_keeps_its_dollar_names_unions_and_extensions() {
        let object = json!({
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "names": {"plural": "widgets", "kind": "Widget"},
                "scope": "Namespaced",
                "versions": [{
                    "name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": true,
                        "properties": {
                            "spec": {"type": "object", "default": {"size": 1},
                                "additionalProperties": false,
                                "properties": {"tags": {"type": "array",
                                    "items": {"type": "string"},
                                    "x-kubernetes-list-type": "set"}},
                                "x-kubernetes-validations": [{"rule": "self.size > 0"}]},
                            "any": {"x-kubernetes-int-or-string": true,
                                "anyOf": [{"type": "integer"}, {"type": "string"}]}
                        },
                        "dependencies": {"a": ["b"]}
                    }}
                }]
            }
        });
        let back = round_trip(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            object.clone(),
        );
        assert_eq!(back, object);
    }

    #[test]
    fn empty_strings_and_zero_times_are_left_out_but_zero_numbers_kept() {
        let desc = Schema::get().kind("v1", "ConfigMap").expect("ConfigMap");
        let meta_field = desc.get_field_by_name("metadata").expect("metadata");
        let Kind::Message(meta_desc) = meta_field.kind() else {
            panic!("metadata is a message")
        };
        let mut meta = DynamicMessage::new(meta_desc.clone());
        meta.set_field_by_name("name", Pb::String("c".into()));
        meta.set_field_by_name("generateName", Pb::String(String::new()));
        meta.set_field_by_name("generation", Pb::I64(0));
        let Some(Kind::Message(time)) = meta_desc
            .get_field_by_name("creationTimestamp")
            .map(|f| f.kind())
        else {
            panic!("creationTimestamp is a message")
        };
        meta.set_field_by_name("creationTimestamp", Pb::Message(DynamicMessage::new(time)));
        let mut cm = DynamicMessage::new(desc);
        cm.set_field(&meta_field, Pb::Message(meta));
        assert_eq!(
            to_json(&cm).expect("json"),
            json!({"metadata": {"name": "c", "generation": 0}})
        );
    }

    #[test]
    fn durations_read_and_write_as_go_spells_them() {
        for (nanos, text) in [
            (0, "0s"),
            (1_500_000, "1.5ms"),
            (90_000_000_000, "1m30s"),
            (3_600_000_000_000, "1h0m0s"),
            (3_723_500_000_000, "1h2m3.5s"),
            (-2_000_000_000, "-2s"),
        ] {
            assert_eq!(go_duration(nanos), text);
            assert_eq!(parse_go_duration(text), Some(nanos), "{text}");
        }
        assert_eq!(parse_go_duration("5m"), Some(300_000_000_000));
        assert_eq!(parse_go_duration("1x"), None);
        assert_eq!(parse_go_duration(""), None);
    }

    #[test]
    fn a_wrong_json_type_is_an_error_naming_the_field() {
        let desc = Schema::get().kind("v1", "ConfigMap").expect("ConfigMap");
        let err = from_json(&desc, &json!({"data": {"a": 1}})).expect_err("not a string");
        assert!(err.to_string().contains("data"), "{err}");
    }
}
