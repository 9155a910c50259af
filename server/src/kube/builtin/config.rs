//! Config maps and secrets: their keys are config keys, their contents at
//! most 1 MiB, a secret's type carries the keys it needs; once
//! `immutable`, the data may not change; a secret's type never does. A
//! secret's `stringData` is written into its `data` (base64) and dropped,
//! as kube's conversion does, so it reads back as kube's would.

use base64::Engine as _;
use serde_json::{Map, Value};

use super::{has, obj, obj_entry, text, Path};
use crate::kube::error::{BadValue, FieldCause};
use crate::kube::names;
use crate::kube::objectmeta::FIELD_IMMUTABLE;

/// `core.MaxSecretSize`, also a config map's limit.
const MAX_SIZE: usize = 1024 * 1024;
const IMMUTABLE_SET: &str = "field is immutable when `immutable` is set";

fn decoded_len(v: &Value) -> usize {
    v.as_str()
        .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
        .map_or(0, |b| b.len())
}

fn keys(data: Option<&Map<String, Value>>, path: &Path) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    for key in data.into_iter().flat_map(Map::keys) {
        for msg in names::config_map_key(key) {
            causes.push(FieldCause::invalid(path.key(key).as_str(), key, &msg));
        }
    }
    causes
}

/// `ValidateConfigMap`.
pub fn validate_config_map(cm: &Map<String, Value>) -> Vec<FieldCause> {
    let data = obj(cm, "data");
    let binary = obj(cm, "binaryData");
    let mut causes = Vec::new();
    let data_path = Path::new("data");
    for key in data.into_iter().flat_map(Map::keys) {
        for msg in names::config_map_key(key) {
            causes.push(FieldCause::invalid(data_path.key(key).as_str(), key, &msg));
        }
        if binary.is_some_and(|b| b.contains_key(key)) {
            causes.push(FieldCause::invalid(
                data_path.key(key).as_str(),
                key,
                "duplicate of key present in binaryData",
            ));
        }
    }
    causes.extend(keys(binary, &Path::new("binaryData")));
    let size: usize = data
        .into_iter()
        .flat_map(Map::values)
        .map(|v| v.as_str().map_or(0, str::len))
        .chain(binary.into_iter().flat_map(Map::values).map(decoded_len))
        .fold(0, usize::saturating_add);
    if size > MAX_SIZE {
        causes.push(FieldCause::too_long("", MAX_SIZE));
    }
    causes
}

/// `ValidateConfigMapUpdate`: an immutable config map stays so, with its
/// data.
pub fn validate_config_map_update(
    old: &Map<String, Value>,
    new: &Map<String, Value>,
) -> Vec<FieldCause> {
    let mut causes = immutable_contents(old, new, &["data", "binaryData"]);
    causes.extend(validate_config_map(new));
    causes
}

fn immutable_contents(
    old: &Map<String, Value>,
    new: &Map<String, Value>,
    fields: &[&str],
) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    if old.get("immutable").and_then(Value::as_bool) != Some(true) {
        return causes;
    }
    if new.get("immutable").and_then(Value::as_bool) != Some(true) {
        causes.push(FieldCause::forbidden("immutable", IMMUTABLE_SET));
    }
    for field in fields {
        // An empty map is no map, as kube compares them.
        let contents = |o: &Map<String, Value>| obj(o, field).filter(|m| !m.is_empty()).cloned();
        if contents(old) != contents(new) {
            causes.push(FieldCause::forbidden(field, IMMUTABLE_SET));
        }
    }
    causes
}

/// `ValidateSecret`: keys, size, and the keys of its type.
pub fn validate_secret(secret: &Map<String, Value>) -> Vec<FieldCause> {
    let data = obj(secret, "data");
    let data_path = Path::new("data");
    let mut causes = keys(data, &data_path);
    let size: usize = data
        .into_iter()
        .flat_map(Map::values)
        .map(decoded_len)
        .fold(0, usize::saturating_add);
    if size > MAX_SIZE {
        causes.push(FieldCause::too_long(data_path.as_str(), MAX_SIZE));
    }
    let has_key = |k: &str| data.is_some_and(|d| d.contains_key(k));
    let required = |k: &str| FieldCause::required(data_path.key(k).as_str(), "");
    match text(secret, "type") {
        "kubernetes.io/service-account-token" => {
            let annotated = obj(secret, "metadata")
                .and_then(|m| obj(m, "annotations"))
                .is_some_and(|a| !text(a, "kubernetes.io/service-account.name").is_empty());
            if !annotated {
                causes.push(FieldCause::required(
                    Path::new("metadata")
                        .child("annotations")
                        .key("kubernetes.io/service-account.name")
                        .as_str(),
                    "",
                ));
            }
        }
        "kubernetes.io/dockercfg" => causes.extend(docker_config(data, ".dockercfg", &data_path)),
        "kubernetes.io/dockerconfigjson" => {
            causes.extend(docker_config(data, ".dockerconfigjson", &data_path));
        }
        "kubernetes.io/basic-auth" if !has_key("username") && !has_key("password") => {
            causes.push(required("username"));
            causes.push(required("password"));
        }
        "kubernetes.io/ssh-auth"
            if data
                .and_then(|d| d.get("ssh-privatekey"))
                .map_or(0, decoded_len)
                == 0 =>
        {
            causes.push(required("ssh-privatekey"));
        }
        "kubernetes.io/tls" => {
            for key in ["tls.crt", "tls.key"] {
                if !has_key(key) {
                    causes.push(required(key));
                }
            }
        }
        _ => {}
    }
    causes
}

/// A docker config secret's key: present, and JSON.
fn docker_config(data: Option<&Map<String, Value>>, key: &str, path: &Path) -> Vec<FieldCause> {
    let Some(value) = data.and_then(|d| d.get(key)) else {
        return vec![FieldCause::required(path.key(key).as_str(), "")];
    };
    let bytes = value
        .as_str()
        .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
        .unwrap_or_default();
    match serde_json::from_slice::<Map<String, Value>>(&bytes) {
        Ok(_) => Vec::new(),
        Err(e) => vec![FieldCause::invalid(
            path.key(key).as_str(),
            "<secret contents redacted>",
            &e.to_string(),
        )],
    }
}

/// `ValidateSecretUpdate`: the type never changes; an immutable secret
/// stays so, with its data.
pub fn validate_secret_update(
    old: &Map<String, Value>,
    new: &Map<String, Value>,
) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    let (before, after) = (text(old, "type"), text(new, "type"));
    if before != after {
        causes.push(FieldCause::invalid_value(
            "type",
            BadValue::from(after),
            FIELD_IMMUTABLE,
        ));
    }
    causes.extend(immutable_contents(old, new, &["data"]));
    causes.extend(validate_secret(new));
    causes
}

/// Kube's conversion of a secret's `stringData`: each value becomes the
/// base64 of its key in `data` (overriding it), and `stringData` goes.
pub fn merge_string_data(secret: &mut Map<String, Value>) {
    let Some(Value::Object(strings)) = secret.remove("stringData") else {
        return;
    };
    if strings.is_empty() && !has(secret, "data") {
        return;
    }
    if let Some(data) = obj_entry(secret, "data") {
        for (k, v) in strings {
            let text = v.as_str().unwrap_or_default();
            data.insert(
                k,
                Value::String(base64::engine::general_purpose::STANDARD.encode(text)),
            );
        }
    }
}
