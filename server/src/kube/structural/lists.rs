//! apiextensions' list-type validation, the second of the three passes
//! (after kube-openapi's value validation in `validate`): a `set` list's
//! items are unique, a `map` list's unique by their keys.

use serde_json::{Map, Value};

use super::validate::{go_value, same};
use super::{child, Additional, Node};
use crate::kube::error::{BadValue, FieldCause};

/// apiextensions' `listtype` validation: items of a `set` list must be
/// unique, items of a `map` list unique by their keys (`Duplicate
/// value` at every repeat after the first).
pub(super) fn list_sets_and_maps(node: &Node, value: &Value) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    lists(node, value, "", &mut causes);
    causes
}

fn lists(node: &Node, value: &Value, path: &str, causes: &mut Vec<FieldCause>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                if let Some(p) = node.properties.get(k) {
                    lists(p, v, &child(path, k), causes);
                } else if let Some(Additional::Schema(a)) = &node.additional {
                    lists(a, v, &format!("{path}[{k}]"), causes);
                }
            }
        }
        Value::Array(items) => {
            match node.list_type.as_deref() {
                Some("set") => {
                    for (i, item) in items.iter().enumerate() {
                        if items[..i].iter().any(|b| same(item, b)) {
                            causes.push(FieldCause::duplicate(
                                &format!("{path}[{i}]"),
                                BadValue::Go(go_value(item)),
                            ));
                        }
                    }
                }
                Some("map") => list_map(node, items, path, causes),
                _ => {}
            }
            if let Some(schema) = &node.items {
                for (i, item) in items.iter().enumerate() {
                    lists(schema, item, &format!("{path}[{i}]"), causes);
                }
            }
        }
        _ => {}
    }
}

fn list_map(node: &Node, items: &[Value], path: &str, causes: &mut Vec<FieldCause>) {
    for (i, item) in items.iter().enumerate() {
        if !item.is_object() && !item.is_null() {
            causes.push(FieldCause::invalid_value(
                &format!("{path}[{i}]"),
                BadValue::of_json(item),
                "must be an object for an array of list-type map",
            ));
            return;
        }
    }
    let keys: Vec<Map<String, Value>> = items
        .iter()
        .map(|item| {
            node.list_map_keys
                .iter()
                .filter_map(|k| item.get(k).map(|v| (k.clone(), v.clone())))
                .collect()
        })
        .collect();
    for (i, k) in keys.iter().enumerate() {
        let v = Value::Object(k.clone());
        if keys[..i]
            .iter()
            .any(|b| same(&v, &Value::Object(b.clone())))
        {
            causes.push(FieldCause::duplicate(
                &format!("{path}[{i}]"),
                BadValue::Go(go_value(&v)),
            ));
        }
    }
}
