//! A structural schema as the typed-schema table
//! ([`crate::kube::types::Schema`]) that server-side apply and field
//! validation read: one [`TypeDef`] per object node (named by the kind
//! and the node's path), lists with their list type and map keys, maps
//! from `additionalProperties`, `metadata` as the built-in `ObjectMeta`.

use std::collections::BTreeMap;

use super::{Additional, Node};
use crate::kube::types::{FieldDef, ListType, MapType, Scalar, Schema, Shape, TypeDef};

/// The built-in type every object's (and embedded resource's) metadata is.
const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

pub(super) fn build(root: &Node, group: &str, version: &str, kind: &str) -> Schema {
    let root_name = if group.is_empty() {
        format!("{version}.{kind}")
    } else {
        format!("{group}/{version}.{kind}")
    };
    let mut types = BTreeMap::new();
    object_type(root, &root_name, true, &mut types);
    Schema::for_custom_kind(group, version, kind, &root_name, types)
}

/// Define the object type `name` for `node` (with `apiVersion`, `kind`
/// and `metadata` when it is a resource).
fn object_type(node: &Node, name: &str, resource: bool, types: &mut BTreeMap<String, TypeDef>) {
    let mut fields = BTreeMap::new();
    for (k, p) in &node.properties {
        fields.insert(k.clone(), field(p, &format!("{name}.{k}"), types));
    }
    if resource || node.embedded {
        for k in ["apiVersion", "kind"] {
            fields
                .entry(k.to_string())
                .or_insert_with(|| plain(Shape::Scalar(Scalar::String)));
        }
        fields.insert(
            "metadata".to_string(),
            plain(Shape::Object(OBJECT_META.to_string())),
        );
    }
    let map_type = node.map_type.as_deref().and_then(map_type);
    types.insert(
        name.to_string(),
        TypeDef::new(fields, node.checks.required.clone(), map_type),
    );
}

fn plain(shape: Shape) -> FieldDef {
    FieldDef {
        shape,
        patch_strategy: Vec::new(),
        merge_key: None,
        list_type: None,
        list_map_keys: Vec::new(),
        map_type: None,
    }
}

fn map_type(s: &str) -> Option<MapType> {
    match s {
        "atomic" => Some(MapType::Atomic),
        "granular" => Some(MapType::Granular),
        _ => None,
    }
}

fn field(node: &Node, name: &str, types: &mut BTreeMap<String, TypeDef>) -> FieldDef {
    let mut def = plain(shape(node, name, types));
    def.list_type = match node.list_type.as_deref() {
        Some("atomic") => Some(ListType::Atomic),
        Some("set") => Some(ListType::Set),
        Some("map") => Some(ListType::Map),
        _ => None,
    };
    def.list_map_keys = node.list_map_keys.clone();
    def.map_type = node.map_type.as_deref().and_then(map_type);
    def
}

/// The shape of a node's values; object nodes become types named `name`.
fn shape(node: &Node, name: &str, types: &mut BTreeMap<String, TypeDef>) -> Shape {
    if node.int_or_string {
        return Shape::Scalar(Scalar::IntOrString);
    }
    match node.ty.as_str() {
        "string" => Shape::Scalar(match node.format.as_deref() {
            Some("byte") => Scalar::Byte,
            Some("date-time" | "datetime") => Scalar::DateTime,
            _ => Scalar::String,
        }),
        "integer" => Shape::Scalar(Scalar::Integer),
        "number" => Shape::Scalar(Scalar::Number),
        "boolean" => Shape::Scalar(Scalar::Boolean),
        "array" => match &node.items {
            Some(items) => Shape::List(Box::new(shape(items, &format!("{name}[]"), types))),
            None => Shape::List(Box::new(Shape::Untyped)),
        },
        "object" if node.properties.is_empty() && !node.embedded => match &node.additional {
            Some(Additional::Schema(values)) => {
                Shape::Map(Box::new(shape(values, &format!("{name}{{}}"), types)))
            }
            Some(Additional::Any) => Shape::Map(Box::new(Shape::Untyped)),
            None if node.preserve_unknown => Shape::Untyped,
            None => {
                object_type(node, name, false, types);
                Shape::Object(name.to_string())
            }
        },
        "object" => {
            object_type(node, name, false, types);
            Shape::Object(name.to_string())
        }
        _ => Shape::Untyped,
    }
}
