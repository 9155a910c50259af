//! Server-side printing: `meta.k8s.io/v1` Tables for `kubectl get`.

use std::collections::HashMap;

use serde_json::{json, Value};

use crate::http::status::ApiError;
use crate::kube::resources::ResourceType;

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

fn age(obj: &Value) -> String {
    obj.pointer("/metadata/creationTimestamp")
        .and_then(Value::as_str)
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| human_duration((chrono::Utc::now() - t.with_timezone(&chrono::Utc)).num_seconds()))
        .unwrap_or_else(|| "<unknown>".into())
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

/// Type-specific columns between NAME and AGE: (header, cell of an object).
type Column = (&'static str, fn(&Value) -> Value);

fn extra_columns(rt: &ResourceType) -> Vec<Column> {
    match rt.plural {
        "namespaces" => vec![("Status", |o| json!(str_at(o, "/status/phase")))],
        "configmaps" => vec![("Data", |o| json!(count_keys(o, &["data", "binaryData"])))],
        "secrets" => vec![
            ("Type", |o| json!(str_at(o, "/type"))),
            ("Data", |o| json!(count_keys(o, &["data"]))),
        ],
        "pods" => vec![("Status", |o| json!(str_at(o, "/status/phase")))],
        "services" => vec![
            ("Type", |o| json!(str_at(o, "/spec/type"))),
            ("Cluster-IP", |o| json!(str_at(o, "/spec/clusterIP"))),
        ],
        "deployments" => vec![("Ready", |o| {
            let ready = o
                .pointer("/status/readyReplicas")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            let want = o
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            json!(format!("{ready}/{want}"))
        })],
        "leases" => vec![("Holder", |o| json!(str_at(o, "/spec/holderIdentity")))],
        _ => Vec::new(),
    }
}

/// Renders objects as a Table; `includeObject` picks what each row carries.
pub fn render(
    rt: &ResourceType,
    items: &[Value],
    resource_version: &str,
    q: &HashMap<String, String>,
) -> Result<Value, ApiError> {
    let include = q
        .get("includeObject")
        .map(String::as_str)
        .unwrap_or("Metadata");
    if !matches!(include, "Metadata" | "Object" | "None") {
        return Err(ApiError::BadRequest(format!(
            "unrecognized includeObject value: {include:?}"
        )));
    }
    let extra = extra_columns(rt);
    let mut columns = vec![
        json!({"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace.", "priority": 0}),
    ];
    for (name, _) in &extra {
        columns.push(
            json!({"name": name, "type": "string", "format": "", "description": "", "priority": 0}),
        );
    }
    columns.push(json!({"name": "Age", "type": "string", "format": "", "description": "Time since the object was created.", "priority": 0}));
    let rows: Vec<Value> = items
        .iter()
        .map(|obj| {
            let mut cells = vec![json!(str_at(obj, "/metadata/name"))];
            cells.extend(extra.iter().map(|(_, cell)| cell(obj)));
            cells.push(json!(age(obj)));
            let mut row = json!({ "cells": cells });
            match include {
                "Object" => row["object"] = obj.clone(),
                "Metadata" => {
                    row["object"] = json!({
                        "kind": "PartialObjectMetadata",
                        "apiVersion": "meta.k8s.io/v1",
                        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
                    })
                }
                _ => {}
            }
            row
        })
        .collect();
    Ok(json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": { "resourceVersion": resource_version },
        "columnDefinitions": columns,
        "rows": rows,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
