//! What kube does to a custom resource before validating it: unknown
//! fields pruned (apiextensions' `pruning`), then non-nullable nulls
//! dropped and defaults applied (its `defaulting`).

use serde_json::{Map, Value};

use super::{child, Additional, Node};

/// The fields every object and embedded resource has whatever its schema
/// says.
const META_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// Prune an object (the resource root: `apiVersion`, `kind` and
/// `metadata` kept); the removed paths, sorted.
pub(super) fn prune(root: &Node, obj: &mut Value) -> Vec<String> {
    prune_node(root, obj, true)
}

/// Prune `value` by `node`; `embedded` treats it as an embedded resource
/// (the root of an object is one).
pub(super) fn prune_node(node: &Node, value: &mut Value, embedded: bool) -> Vec<String> {
    let mut removed = Vec::new();
    walk(Some(node), value, "", embedded, &mut removed);
    removed.sort();
    removed
}

/// The schema of a key of an object whose node is `node`: its property,
/// else `additionalProperties` (`Some(None)`: any value, pruned as
/// unknown inside), else unknown (`None`).
fn field_schema<'a>(node: &'a Node, k: &str) -> Option<Option<&'a Node>> {
    if let Some(p) = node.properties.get(k) {
        return Some(Some(p));
    }
    match &node.additional {
        Some(Additional::Schema(s)) => Some(Some(s)),
        Some(Additional::Any) => Some(None),
        None => None,
    }
}

fn walk(
    node: Option<&Node>,
    value: &mut Value,
    path: &str,
    embedded: bool,
    removed: &mut Vec<String>,
) {
    if let Some(n) = node.filter(|n| n.preserve_unknown) {
        return skip(n, value, path, embedded, removed);
    }
    match value {
        Value::Object(map) => {
            let Some(n) = node else {
                removed.extend(map.keys().map(|k| child(path, k)));
                map.clear();
                return;
            };
            let embedded = embedded || n.embedded;
            map.retain(|k, v| {
                if embedded && META_FIELDS.contains(&k.as_str()) {
                    return true;
                }
                match field_schema(n, k) {
                    Some(schema) => {
                        walk(schema, v, &child(path, k), false, removed);
                        true
                    }
                    None => {
                        if !META_FIELDS.contains(&k.as_str()) || !path.is_empty() {
                            removed.push(child(path, k));
                        }
                        false
                    }
                }
            });
        }
        Value::Array(items) => {
            let items_node = node.and_then(|n| n.items.as_deref());
            for (i, item) in items.iter_mut().enumerate() {
                walk(items_node, item, &format!("{path}[{i}]"), false, removed);
            }
        }
        _ => {}
    }
}

/// Under `x-kubernetes-preserve-unknown-fields`: unknown keys stay, known
/// ones are pruned by their schemas.
fn skip(node: &Node, value: &mut Value, path: &str, embedded: bool, removed: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            let embedded = embedded || node.embedded;
            for (k, v) in map.iter_mut() {
                if embedded && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                if let Some(Some(schema)) = field_schema(node, k) {
                    walk(Some(schema), v, &child(path, k), false, removed);
                }
            }
        }
        Value::Array(items) => {
            if let Some(items_node) = node.items.as_deref() {
                for (i, item) in items.iter_mut().enumerate() {
                    skip(items_node, item, &format!("{path}[{i}]"), false, removed);
                }
            }
        }
        _ => {}
    }
}

/// Drop non-nullable nulls without a default, then apply defaults.
pub(super) fn apply_defaults(root: &Node, obj: &mut Value) {
    prune_nulls(Some(root), obj);
    default(root, obj);
}

/// The schema of a key for defaulting: its property, else the
/// `additionalProperties` schema.
fn value_schema<'a>(node: &'a Node, k: &str) -> Option<&'a Node> {
    match field_schema(node, k) {
        Some(Some(s)) => Some(s),
        _ => None,
    }
}

fn non_nullable_null(v: &Value, schema: Option<&Node>) -> bool {
    v.is_null() && schema.is_some_and(|s| !s.nullable)
}

/// `PruneNonNullableNullsWithoutDefaults`.
fn prune_nulls(node: Option<&Node>, value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|k, v| {
                let schema = node.and_then(|n| value_schema(n, k));
                if non_nullable_null(v, schema) && schema.is_some_and(|s| s.default.is_none()) {
                    return false;
                }
                prune_nulls(schema, v);
                true
            });
        }
        Value::Array(items) => {
            let schema = node.and_then(|n| n.items.as_deref());
            for item in items {
                prune_nulls(schema, item);
            }
        }
        _ => {}
    }
}

/// `Default`: absent (or non-nullable null) properties get their
/// defaults, then every value is defaulted by its own schema; so a
/// nested default applies only where its parent exists (or was itself
/// defaulted).
fn default(node: &Node, value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (k, p) in &node.properties {
                let Some(d) = &p.default else { continue };
                let missing = map.get(k).is_none_or(|v| non_nullable_null(v, Some(p)));
                if missing {
                    map.insert(k.clone(), d.clone());
                }
            }
            default_values(node, map);
        }
        Value::Array(items) => {
            let Some(schema) = node.items.as_deref() else {
                return;
            };
            for item in items {
                if non_nullable_null(item, Some(schema)) {
                    if let Some(d) = &schema.default {
                        *item = d.clone();
                    }
                }
                default(schema, item);
            }
        }
        _ => {}
    }
}

fn default_values(node: &Node, map: &mut Map<String, Value>) {
    for (k, v) in map.iter_mut() {
        if let Some(p) = node.properties.get(k) {
            default(p, v);
        } else if let Some(Additional::Schema(s)) = &node.additional {
            if non_nullable_null(v, Some(s)) {
                if let Some(d) = &s.default {
                    *v = d.clone();
                }
            }
            default(s, v);
        }
    }
}
