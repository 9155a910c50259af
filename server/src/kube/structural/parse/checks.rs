//! The rules a parsed schema must meet beyond its shape, run by
//! [`parse_root`](super::parse_root) after the tree is read: kube's
//! structural invariants (types, embedded resources, int-or-string,
//! metadata at the root), extensions used where they mean something
//! (list and map types, list-map keys), completeness (every field a value
//! validation names is in the structural schema), and defaults that are
//! pruned and valid.

use serde_json::{Map, Value};

use super::super::{child, embedded, prune, validate, Additional, Node};
use super::{key, Level, Parser};
use crate::kube::error::{BadValue, FieldCause};

impl Parser {
    /// `validateStructuralInvariants`: types, embedded resources,
    /// int-or-string, metadata at the root.
    pub(super) fn invariants(
        &mut self,
        node: &Node,
        m: &Map<String, Value>,
        path: &str,
        level: Level,
    ) {
        let ty_path = child(path, "type");
        if node.ty == "array" && node.items.is_none() {
            self.causes.push(FieldCause::required(
                &child(path, "items"),
                "must be specified",
            ));
        }
        if node.additional.is_some() && level == Level::Root {
            self.causes.push(FieldCause::forbidden(
                &child(path, "additionalProperties"),
                "must not be used at the root",
            ));
        }
        if node.int_or_string && node.preserve_unknown {
            self.causes.push(FieldCause::invalid_value(
                &child(path, "x-kubernetes-preserve-unknown-fields"),
                BadValue::Bool(true),
                "must be false if x-kubernetes-int-or-string is true",
            ));
        }
        if node.int_or_string && node.embedded {
            self.causes.push(FieldCause::invalid_value(
                &child(path, "x-kubernetes-embedded-resource"),
                BadValue::Bool(true),
                "must be false if x-kubernetes-int-or-string is true",
            ));
        }
        if node.embedded && node.ty != "object" {
            let msg = "must be object if x-kubernetes-embedded-resource is true";
            if node.ty.is_empty() {
                self.causes.push(FieldCause::required(&ty_path, msg));
            } else {
                self.causes
                    .push(FieldCause::invalid(&ty_path, &node.ty, msg));
            }
        } else if node.ty.is_empty() && !node.int_or_string && !node.preserve_unknown {
            let msg = match level {
                Level::Root => "must not be empty at the root",
                Level::Item => "must not be empty for specified array items",
                Level::Field => "must not be empty for specified object fields",
            };
            self.causes.push(FieldCause::required(&ty_path, msg));
        }
        if node.embedded && node.additional.is_some() {
            self.causes.push(FieldCause::forbidden(
                &child(path, "additionalProperties"),
                "must not be used if x-kubernetes-embedded-resource is set",
            ));
        }
        if level == Level::Root && !node.ty.is_empty() && node.ty != "object" {
            self.causes.push(FieldCause::invalid(
                &ty_path,
                &node.ty,
                "must be object at the root",
            ));
        }
        let check_metadata = level == Level::Root || node.embedded;
        let props = child(path, "properties");
        for k in ["kind", "apiVersion"] {
            if let Some(p) = node.properties.get(k).filter(|_| check_metadata) {
                if p.ty != "string" {
                    self.causes.push(FieldCause::invalid(
                        &child(&key(&props, k), "type"),
                        &p.ty,
                        "must be string",
                    ));
                }
            }
        }
        if let Some(meta) = node.properties.get("metadata") {
            let at = key(&props, "metadata");
            if check_metadata && meta.ty != "object" {
                self.causes.push(FieldCause::invalid(
                    &child(&at, "type"),
                    &meta.ty,
                    "must be object",
                ));
            }
            if level == Level::Root {
                let raw = m
                    .get("properties")
                    .and_then(|p| p.get("metadata"))
                    .and_then(Value::as_object);
                if raw.is_some_and(|raw| !metadata_is_implicit(raw)) {
                    self.causes.push(FieldCause::forbidden(
                        &at,
                        "must not specify anything other than name and generateName, but metadata is implicitly specified",
                    ));
                }
            }
        }
        if node.embedded && !node.preserve_unknown && node.properties.is_empty() {
            self.causes.push(FieldCause::required(
                &props,
                "must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
            ));
        }
    }

    /// The CRD validation of the list and map extensions.
    pub(super) fn extensions(&mut self, node: &Node, path: &str) {
        let ty_path = child(path, "type");
        if let Some(mt) = &node.map_type {
            let msg = "must be object if x-kubernetes-map-type is specified";
            if node.ty.is_empty() {
                self.causes.push(FieldCause::required(&ty_path, msg));
            } else if node.ty != "object" {
                self.causes
                    .push(FieldCause::invalid(&ty_path, &node.ty, msg));
            }
            if mt != "atomic" && mt != "granular" {
                self.causes.push(FieldCause::not_supported(
                    &child(path, "x-kubernetes-map-type"),
                    mt,
                    &["atomic", "granular"],
                ));
            }
        }
        let lt_path = child(path, "x-kubernetes-list-type");
        if let Some(lt) = &node.list_type {
            let msg = "must be array if x-kubernetes-list-type is specified";
            if node.ty.is_empty() {
                self.causes.push(FieldCause::required(&ty_path, msg));
            } else if node.ty != "array" {
                self.causes
                    .push(FieldCause::invalid(&ty_path, &node.ty, msg));
            } else if lt == "set" {
                if let Some(items) = &node.items {
                    if items.list_type.as_deref().is_some_and(|t| t != "atomic") {
                        self.causes.push(FieldCause::invalid(
                            &child(&child(path, "items"), "x-kubernetes-list-type"),
                            items.list_type.as_deref().unwrap_or(""),
                            "must be atomic as item of a list with x-kubernetes-list-type=set",
                        ));
                    }
                    if items.ty == "object" && items.map_type.as_deref() != Some("atomic") {
                        self.causes.push(FieldCause::invalid_value(
                            &child(&child(path, "items"), "x-kubernetes-map-type"),
                            BadValue::Go(
                                items
                                    .map_type
                                    .as_deref()
                                    .map_or("null".to_string(), crate::kube::error::go_quote),
                            ),
                            "must be atomic as item of a list with x-kubernetes-list-type=set",
                        ));
                    }
                }
            }
            if !["atomic", "set", "map"].contains(&lt.as_str()) {
                self.causes.push(FieldCause::not_supported(
                    &lt_path,
                    lt,
                    &["atomic", "set", "map"],
                ));
            }
        }
        if !node.list_map_keys.is_empty() {
            let msg = "must be map if x-kubernetes-list-map-keys is non-empty";
            match node.list_type.as_deref() {
                None => self.causes.push(FieldCause::required(&lt_path, msg)),
                Some("map") => {}
                Some(other) => self.causes.push(FieldCause::invalid(&lt_path, other, msg)),
            }
        }
        if node.list_type.as_deref() == Some("map") {
            let keys_path = child(path, "x-kubernetes-list-map-keys");
            let items_path = child(path, "items");
            if node.list_map_keys.is_empty() {
                self.causes.push(FieldCause::required(
                    &keys_path,
                    "must not be empty if x-kubernetes-list-type is map",
                ));
            }
            match &node.items {
                None => self.causes.push(FieldCause::required(
                    &items_path,
                    "must have a schema if x-kubernetes-list-type is map",
                )),
                Some(items) if items.ty != "object" => self.causes.push(FieldCause::invalid(
                    &child(&items_path, "type"),
                    &items.ty,
                    "must be object if parent array's x-kubernetes-list-type is map",
                )),
                Some(items) => {
                    let keys_value = BadValue::Go(format!(
                        "[]string{{{}}}",
                        node.list_map_keys
                            .iter()
                            .map(|k| crate::kube::error::go_quote(k))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                    let mut seen = std::collections::BTreeSet::new();
                    for k in &node.list_map_keys {
                        if !seen.insert(k) {
                            self.causes.push(FieldCause::invalid_value(
                                &keys_path,
                                keys_value.clone(),
                                "must not contain duplicate entries",
                            ));
                        }
                        let Some(p) = items.properties.get(k) else {
                            self.causes.push(FieldCause::invalid_value(
                                &keys_path,
                                keys_value.clone(),
                                "entries must all be names of item properties",
                            ));
                            continue;
                        };
                        let prop_path = key(&child(&items_path, "properties"), k);
                        if !matches!(p.ty.as_str(), "string" | "integer" | "number" | "boolean")
                            && !p.int_or_string
                        {
                            self.causes.push(FieldCause::invalid(
                                &child(&prop_path, "type"),
                                &p.ty,
                                "must be a scalar type if parent array's x-kubernetes-list-type is map",
                            ));
                        }
                        if p.default.is_none() && !items.checks.required.contains(k) {
                            self.causes.push(FieldCause::required(
                                &child(&prop_path, "default"),
                                "this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property",
                            ));
                        }
                        if p.nullable {
                            self.causes.push(FieldCause::forbidden(
                                &child(&prop_path, "nullable"),
                                "this property is in x-kubernetes-list-map-keys, so it cannot be nullable",
                            ));
                        }
                    }
                }
            }
        }
        if matches!(node.list_type.as_deref(), Some("map" | "set"))
            && node.items.as_ref().is_some_and(|i| i.nullable)
        {
            self.causes.push(FieldCause::forbidden(
                &child(&child(path, "items"), "nullable"),
                &format!(
                    "cannot be nullable when x-kubernetes-list-type is {}",
                    node.list_type.as_deref().unwrap_or("")
                ),
            ));
        }
    }

    /// `validateStructuralCompleteness`: every property and item a value
    /// validation names is specified by the structural schema too.
    pub(super) fn completeness(&mut self, node: &Node, path: &str) {
        let vs = value_validations(node, path);
        for (v, vpath) in vs {
            self.complete(v, Some(node), path, &vpath);
        }
        for (k, p) in &node.properties {
            self.completeness(p, &key(&child(path, "properties"), k));
        }
        if let Some(i) = &node.items {
            self.completeness(i, &child(path, "items"));
        }
        if let Some(Additional::Schema(a)) = &node.additional {
            self.completeness(a, &child(path, "additionalProperties"));
        }
    }

    fn complete(&mut self, v: &Node, s: Option<&Node>, spath: &str, vpath: &str) {
        let Some(s) = s else {
            self.causes.push(FieldCause::required(
                spath,
                &format!("because it is defined in {vpath}"),
            ));
            return;
        };
        for (inner, ipath) in value_validations(v, vpath) {
            self.complete(inner, Some(s), spath, &ipath);
        }
        if let Some(items) = &v.items {
            self.complete(
                items,
                s.items.as_deref(),
                &child(spath, "items"),
                &child(vpath, "items"),
            );
        }
        for (k, vp) in &v.properties {
            let sp = key(&child(spath, "properties"), k);
            let vpp = key(&child(vpath, "properties"), k);
            match s.properties.get(k) {
                Some(sfield) => self.complete(vp, Some(sfield), &sp, &vpp),
                None => self.causes.push(FieldCause::required(
                    &sp,
                    &format!("because it is defined in {vpp}"),
                )),
            }
        }
    }

    /// Every default is pruned and valid against its own schema.
    pub(super) fn defaults(&mut self, node: &Node, path: &str, root: bool) {
        if let Some(d) = &node.default {
            let at = child(path, "default");
            let mut copy = d.clone();
            let pruned = prune::prune_node(node, &mut copy, root || node.embedded);
            if !pruned.is_empty() {
                self.causes.push(FieldCause::invalid_value(
                    &at,
                    BadValue::of_json(d),
                    "must not have unknown fields",
                ));
            } else {
                self.causes
                    .extend(validate::openapi(node, d, None, "", Some(&at)));
                self.causes.extend(
                    embedded::embedded_resources(node, d, false)
                        .into_iter()
                        .map(|mut c| {
                            c.field = child(&at, &c.field);
                            c
                        }),
                );
            }
        }
        for (k, p) in &node.properties {
            self.defaults(p, &key(&child(path, "properties"), k), false);
        }
        if let Some(i) = &node.items {
            self.defaults(i, &child(path, "items"), false);
        }
        if let Some(Additional::Schema(a)) = &node.additional {
            self.defaults(a, &child(path, "additionalProperties"), false);
        }
    }
}

/// A node's `allOf`, `anyOf`, `oneOf` and `not` with their paths.
fn value_validations<'a>(node: &'a Node, path: &str) -> Vec<(&'a Node, String)> {
    let mut out = Vec::new();
    if let Some(n) = &node.checks.not {
        out.push((n.as_ref(), child(path, "not")));
    }
    for (k, list) in [
        ("allOf", &node.checks.all_of),
        ("anyOf", &node.checks.any_of),
        ("oneOf", &node.checks.one_of),
    ] {
        for (i, n) in list.iter().enumerate() {
            out.push((n, format!("{}[{i}]", child(path, k))));
        }
    }
    out
}

/// The root's `metadata` schema says nothing but its type, its default
/// and the schemas of `name` and `generateName` (kube drops those three;
/// anything else would contradict the implicit ObjectMeta).
fn metadata_is_implicit(raw: &Map<String, Value>) -> bool {
    raw.iter().all(|(k, v)| match k.as_str() {
        "type" | "default" => true,
        "properties" => v
            .as_object()
            .is_some_and(|p| !p.is_empty() && p.keys().all(|k| k == "name" || k == "generateName")),
        _ => false,
    })
}
