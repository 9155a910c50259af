//! apiextensions' validation of embedded resources, the third pass: an
//! embedded object's `apiVersion`, `kind` and metadata checked as kube
//! checks them.

use serde_json::{Map, Value};

use super::{child, Additional, Node};
use crate::kube::error::{BadValue, FieldCause};
use crate::kube::names;
use crate::kube::names::NameRule;
use crate::kube::objectmeta;

/// apiextensions' `objectmeta` validation of embedded resources (nodes
/// with `x-kubernetes-embedded-resource`, and the object itself when
/// `root`): `apiVersion` and `kind` required and well-formed, metadata
/// as kube checks an embedded object's (name as a path segment,
/// generateName, namespace, labels, annotations).
pub(super) fn embedded_resources(node: &Node, value: &Value, root: bool) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    embedded(node, value, "", root, &mut causes);
    causes
}

fn embedded(node: &Node, value: &Value, path: &str, force: bool, causes: &mut Vec<FieldCause>) {
    match value {
        Value::Object(map) => {
            if node.embedded || force {
                embedded_resource(map, path, causes);
            }
            for (k, v) in map {
                if let Some(p) = node.properties.get(k) {
                    embedded(p, v, &child(path, k), false, causes);
                } else if let Some(Additional::Schema(a)) = &node.additional {
                    embedded(a, v, &format!("{path}[{k}]"), false, causes);
                }
            }
        }
        Value::Array(items) => {
            if let Some(schema) = &node.items {
                for (i, item) in items.iter().enumerate() {
                    embedded(schema, item, &format!("{path}[{i}]"), false, causes);
                }
            }
        }
        _ => {}
    }
}

fn embedded_resource(map: &Map<String, Value>, path: &str, causes: &mut Vec<FieldCause>) {
    for k in ["apiVersion", "kind"] {
        if !map.contains_key(k) {
            causes.push(FieldCause::required(&child(path, k), ""));
        }
    }
    for (k, v) in map {
        let at = child(path, k);
        match k.as_str() {
            "apiVersion" => match v.as_str() {
                None => causes.push(FieldCause::invalid_value(
                    &at,
                    BadValue::of_json(v),
                    "must be a string",
                )),
                Some("") => causes.push(FieldCause::invalid(&at, "", "must not be empty")),
                Some(av) if av.matches('/').count() > 1 => causes.push(FieldCause::invalid(
                    &at,
                    av,
                    &format!("unexpected GroupVersion string: {av}"),
                )),
                Some(_) => {}
            },
            "kind" => match v.as_str() {
                None => causes.push(FieldCause::invalid_value(
                    &at,
                    BadValue::of_json(v),
                    "must be a string",
                )),
                Some("") => causes.push(FieldCause::invalid(&at, "", "must not be empty")),
                Some(kind) => {
                    let errs = names::dns1035_label(&kind.to_lowercase());
                    if !errs.is_empty() {
                        causes.push(FieldCause::invalid(
                            &at,
                            kind,
                            &format!(
                                "may have mixed case, but should otherwise match: {}",
                                errs.join(",")
                            ),
                        ));
                    }
                }
            },
            "metadata" => match v.as_object() {
                None => causes.push(FieldCause::invalid_value(
                    &at,
                    BadValue::of_json(v),
                    "must be an object",
                )),
                Some(meta) => embedded_metadata(meta, &at, causes),
            },
            _ => {}
        }
    }
}

fn embedded_metadata(meta: &Map<String, Value>, at: &str, causes: &mut Vec<FieldCause>) {
    let text = |k: &str| meta.get(k).and_then(Value::as_str).unwrap_or("");
    let generate_name = text("generateName");
    if !generate_name.is_empty() {
        for msg in names::name_errors(NameRule::PathSegment, generate_name, true) {
            causes.push(FieldCause::invalid(
                &child(at, "generateName"),
                generate_name,
                &msg,
            ));
        }
    }
    let name = text("name");
    if !name.is_empty() {
        for msg in names::name_errors(NameRule::PathSegment, name, false) {
            causes.push(FieldCause::invalid(&child(at, "name"), name, &msg));
        }
    }
    let namespace = text("namespace");
    if !namespace.is_empty() {
        for msg in names::dns1123_label(namespace) {
            causes.push(FieldCause::invalid(
                &child(at, "namespace"),
                namespace,
                &msg,
            ));
        }
    }
    if let Some(labels) = meta.get("labels").and_then(Value::as_object) {
        causes.extend(objectmeta::validate_labels(labels, &child(at, "labels")));
    }
    if let Some(annotations) = meta.get("annotations").and_then(Value::as_object) {
        causes.extend(objectmeta::validate_annotations(
            annotations,
            &child(at, "annotations"),
        ));
    }
}
