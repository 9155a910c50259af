//! Strategic merge patch (`application/strategic-merge-patch+json`): a
//! patch of a built-in object merged into it the way kube-apiserver merges
//! it, with the merge keys and patch strategies of [`crate::kube::types`].
//! Pure: an object and a patch in, the patched object or a [`PatchError`]
//! out; `http::patch` runs it inside the store's guarded
//! read-modify-write.
//!
//! The rules, as `k8s.io/apimachinery/pkg/util/strategicpatch` applies a
//! patch (its documented semantics, written here from them, not copied):
//!
//! - Maps merge key by key, recursively; `null` deletes a key. A field
//!   whose patch strategy is `replace` is replaced whole.
//! - A list whose field has patch strategy `merge` is merged: objects by
//!   the field's merge key (a patch item updates the item with the same
//!   key, or is added), scalars as a union. Every other list (atomic,
//!   unknown fields) is replaced by the patch's. Merged items the patch
//!   names come in the patch's order; the others keep their relative
//!   order and are interleaved by their order in the live list (so an
//!   item new to the list, without `$setElementOrder`, comes first).
//! - `$patch: replace` in a map replaces the map by the rest of the patch
//!   map; `$patch: delete` makes it empty. In a merged list, an item
//!   `{"$patch": "delete", <key>: v}` removes the items with that key, and
//!   `{"$patch": "replace"}` replaces the list by the patch's other items.
//!   `$patch: merge` and other values are refused.
//! - `$setElementOrder/<field>: [..]` orders a list: the items it names in
//!   its order, the others interleaved by the live order; the patch's own
//!   items must appear in it in the same order.
//! - `$deleteFromPrimitiveList/<field>: [..]` removes those values from a
//!   merged list of scalars (`finalizers`).
//! - `$retainKeys: [..]` drops every key of the live map it does not name;
//!   every key the patch sets must be named.
//!
//! Where kubestore differs, and why: kube-apiserver decodes the merged
//! map into a typed object, which drops `null`s, directive keys and
//! unknown fields a patch added; kubestore stores JSON, so values a patch
//! adds are cleaned of `null`s and directives here, and a `$`-key that is
//! neither a directive nor a field of the type is refused (kube keeps
//! silent without `fieldValidation=Strict`, kubectl's default, which
//! refuses it). kube answers a patch it cannot apply for a reason other
//! than a malformed directive (no merge key, an unknown `$patch`) with a
//! 500; kubestore with `422 Invalid`, as it is the client's patch.
//!
//! No crate does this: `json-patch`'s merge is RFC 7386, which has no
//! schema, and the Kubernetes Rust crates only build patches.

use std::collections::HashSet;

use serde_json::{Map, Value};

use crate::kube::error::{FieldCause, KubeError};
use crate::kube::resources::ResourceType;
use crate::kube::types::{FieldDef, Schema, Shape, TypeDef};

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ELEMENT_ORDER: &str = "$setElementOrder";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList";

/// Why a strategic merge patch cannot be applied. The first three are
/// kube's `400 BadRequest`s, worded as kube words them; the rest `422`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    #[error("invalid patch format of primitive list")]
    PrimitiveListFormat,
    #[error("invalid patch format of retainKeys")]
    RetainKeysFormat,
    #[error("invalid patch format of setElementOrder list")]
    SetElementOrderFormat,
    #[error("lists of lists are not supported")]
    ListOfLists,
    #[error("list element types are not identical in {field}")]
    MixedElements { field: String },
    #[error("{field}: expected a list, but received {found}")]
    NotAList { field: String, found: &'static str },
    #[error("map: {map} does not contain declared merge key: {key}")]
    NoMergeKey { map: String, key: String },
    #[error("cannot merge lists without merge key for {field}")]
    ListWithoutMergeKey { field: String },
    #[error("unknown patch type: {directive} in map: {map}")]
    UnknownPatchType { directive: String, map: String },
    #[error("merging lists cannot yet be specified in the patch")]
    MergeDirectiveInList,
    #[error("The order in patch list:\n{patch}\n doesn't match $setElementOrder list:\n{order}\n")]
    OrderMismatch { patch: String, order: String },
    #[error("unknown directive or field {0:?}")]
    UnknownDirective(String),
}

impl PatchError {
    /// Whether kube answers it with `400 BadRequest` (a malformed
    /// directive) rather than `422`.
    pub fn is_bad_request(&self) -> bool {
        matches!(
            self,
            PatchError::PrimitiveListFormat
                | PatchError::RetainKeysFormat
                | PatchError::SetElementOrderFormat
        )
    }

    /// The error a PATCH of `name` answers with.
    pub fn into_kube(self, rt: &ResourceType, name: &str) -> KubeError {
        if self.is_bad_request() {
            KubeError::BadRequest(self.to_string())
        } else {
            KubeError::invalid(
                rt,
                name,
                vec![FieldCause::invalid("patch", "", &self.to_string())],
            )
        }
    }
}

/// Applies `patch` to `original`, an object of the type `root`.
pub fn apply(
    schema: &Schema,
    root: &TypeDef,
    original: Map<String, Value>,
    patch: Map<String, Value>,
) -> Result<Map<String, Value>, PatchError> {
    Merger { schema }.merge_map(original, patch, Node::Struct(root))
}

/// What the schema says about the map being merged.
#[derive(Debug, Clone, Copy)]
enum Node<'a> {
    /// An object of a known type: its fields.
    Struct(&'a TypeDef),
    /// A map whose values all have one shape (labels, `data`).
    Map(&'a Shape),
    /// Nothing known: unknown fields, `RawExtension`.
    Untyped,
}

impl<'a> Node<'a> {
    /// The field's definition (for a struct's field) and the shape of its
    /// value, when known.
    fn lookup(self, key: &str) -> (Option<&'a FieldDef>, Option<&'a Shape>) {
        match self {
            Node::Struct(t) => match t.field(key) {
                Some(f) => (Some(f), Some(&f.shape)),
                None => (None, None),
            },
            Node::Map(shape) => (None, Some(shape)),
            Node::Untyped => (None, None),
        }
    }

    /// Whether `key` is a key this node may hold (a `$`-key must be a
    /// declared field, or inside untyped content).
    fn allows_dollar_key(self, key: &str) -> bool {
        match self {
            Node::Struct(t) => t.field(key).is_some(),
            Node::Map(_) => false,
            Node::Untyped => true,
        }
    }
}

struct Merger<'s> {
    schema: &'s Schema,
}

impl<'s> Merger<'s> {
    /// The node of a value of shape `shape`.
    fn node(&self, shape: Option<&'s Shape>) -> Node<'s> {
        match shape {
            Some(Shape::Object(name)) => self
                .schema
                .type_def(name)
                .map_or(Node::Untyped, Node::Struct),
            Some(Shape::Map(values)) => Node::Map(values.as_ref()),
            _ => Node::Untyped,
        }
    }

    /// The node of the items of a list of shape `shape`.
    fn item_node(&self, shape: Option<&'s Shape>) -> Node<'s> {
        match shape {
            Some(Shape::List(item)) => self.node(Some(item.as_ref())),
            _ => Node::Untyped,
        }
    }

    fn merge_map(
        &self,
        mut original: Map<String, Value>,
        mut patch: Map<String, Value>,
        node: Node<'s>,
    ) -> Result<Map<String, Value>, PatchError> {
        if let Some(directive) = patch.get(DIRECTIVE) {
            return match directive.as_str() {
                Some("replace") => {
                    patch.remove(DIRECTIVE);
                    Ok(clean_map(patch))
                }
                Some("delete") => Ok(Map::new()),
                _ => Err(unknown_patch_type(directive, &patch)),
            };
        }

        if let Some(keys) = patch.remove(RETAIN_KEYS) {
            let Value::Array(keys) = keys else {
                return Err(PatchError::RetainKeysFormat);
            };
            let keep: HashSet<&str> = keys.iter().filter_map(Value::as_str).collect();
            let unnamed = patch.iter().any(|(k, v)| {
                !v.is_null()
                    && !k.starts_with(DELETE_FROM_PRIMITIVE_LIST)
                    && !k.starts_with(SET_ELEMENT_ORDER)
                    && !keep.contains(k.as_str())
            });
            if unnamed {
                return Err(PatchError::RetainKeysFormat);
            }
            original.retain(|k, _| keep.contains(k.as_str()));
        }

        let order_keys: Vec<String> = patch
            .keys()
            .filter(|k| k.starts_with(SET_ELEMENT_ORDER))
            .cloned()
            .collect();
        for key in order_keys {
            let order = patch.remove(&key).unwrap_or(Value::Null);
            let field = directive_field(&key, SET_ELEMENT_ORDER)
                .ok_or(PatchError::SetElementOrderFormat)?;
            let Value::Array(order) = order else {
                return Err(PatchError::SetElementOrderFormat);
            };
            self.set_element_order(&mut original, &mut patch, field, &order, node)?;
        }

        let mut dropped: Option<String> = None;
        for (key, value) in patch {
            let (field, delete_list) = if key.starts_with(DELETE_FROM_PRIMITIVE_LIST) {
                let field = directive_field(&key, DELETE_FROM_PRIMITIVE_LIST)
                    .ok_or(PatchError::PrimitiveListFormat)?;
                (field.to_string(), true)
            } else {
                (key, false)
            };
            if !delete_list && field.starts_with('$') && !node.allows_dollar_key(&field) {
                return Err(PatchError::UnknownDirective(field));
            }
            if value.is_null() {
                original.remove(&field);
                continue;
            }
            let (def, shape) = node.lookup(&field);
            let Some(current) = original.get_mut(&field) else {
                if !delete_list {
                    if let Some(v) = clean(value) {
                        original.insert(field, v);
                    }
                }
                continue;
            };
            match (current, value) {
                (Value::Object(current), Value::Object(value)) => {
                    let merged = if def.is_some_and(FieldDef::replaces) {
                        clean_map(value)
                    } else {
                        self.merge_map(std::mem::take(current), value, self.node(shape))?
                    };
                    *current = merged;
                }
                (Value::Array(current), Value::Array(value)) => {
                    let merged = self.merge_list_field(
                        &field,
                        std::mem::take(current),
                        value,
                        def,
                        shape,
                        delete_list,
                    )?;
                    *current = merged;
                }
                (current, value) => {
                    // Scalars, or values of different types: the patch's
                    // value (a deletion list deletes nothing from them).
                    if delete_list && !same_kind(current, &value) {
                        continue;
                    }
                    match clean(value) {
                        Some(v) => *current = v,
                        None => dropped = Some(field),
                    }
                }
            }
            if let Some(field) = dropped.take() {
                original.remove(&field);
            }
        }
        Ok(original)
    }

    /// A list field merged (patch strategy `merge`, or a deletion list) or
    /// replaced.
    fn merge_list_field(
        &self,
        field: &str,
        original: Vec<Value>,
        patch: Vec<Value>,
        def: Option<&'s FieldDef>,
        shape: Option<&'s Shape>,
        delete_list: bool,
    ) -> Result<Vec<Value>, PatchError> {
        if delete_list || def.is_some_and(FieldDef::merges) {
            let merge_key = def.and_then(|d| d.merge_key.as_deref());
            self.merge_list(
                field,
                original,
                patch,
                self.item_node(shape),
                merge_key,
                delete_list,
            )
        } else {
            Ok(clean_list(patch))
        }
    }

    fn merge_list(
        &self,
        field: &str,
        original: Vec<Value>,
        patch: Vec<Value>,
        item: Node<'s>,
        merge_key: Option<&str>,
        delete_list: bool,
    ) -> Result<Vec<Value>, PatchError> {
        if original.is_empty() && patch.is_empty() {
            return Ok(original);
        }
        if !items_are_objects(field, &original, &patch)? {
            if delete_list {
                return Ok(original
                    .into_iter()
                    .filter(|v| !patch.contains(v))
                    .collect());
            }
            let mut merged: Vec<Value> = Vec::with_capacity(original.len() + patch.len());
            for v in original.iter().chain(patch.iter()) {
                if !merged.contains(v) {
                    merged.push(v.clone());
                }
            }
            return order(merged, &patch, &original, None);
        }
        let Some(key) = merge_key else {
            return Err(PatchError::ListWithoutMergeKey {
                field: field.to_string(),
            });
        };
        let (original, patch) = special_items(original, patch, key)?;
        let mut merged = original.clone();
        for p in &patch {
            let Value::Object(p) = p else { continue };
            let Some(wanted) = p.get(key) else {
                return Err(no_merge_key(p, key));
            };
            match merged.iter().position(|o| o.get(key) == Some(wanted)) {
                Some(i) => {
                    let current = match std::mem::take(&mut merged[i]) {
                        Value::Object(m) => m,
                        _ => Map::new(),
                    };
                    merged[i] = Value::Object(self.merge_map(current, p.clone(), item)?);
                }
                None => merged.push(Value::Object(clean_map(p.clone()))),
            }
        }
        order(merged, &patch, &original, Some(key))
    }

    /// `$setElementOrder/<field>`: the field merged (if the patch has it)
    /// and ordered; both lists are then done with.
    fn set_element_order(
        &self,
        original: &mut Map<String, Value>,
        patch: &mut Map<String, Value>,
        field: &str,
        order_list: &[Value],
        node: Node<'s>,
    ) -> Result<(), PatchError> {
        if field.starts_with('$') && !node.allows_dollar_key(field) {
            return Err(PatchError::UnknownDirective(field.to_string()));
        }
        let current = match original.remove(field) {
            None => None,
            Some(Value::Array(l)) => Some(l),
            Some(other) => return Err(not_a_list(field, &other)),
        };
        let patched = match patch.remove(field) {
            None => None,
            Some(Value::Array(l)) => Some(l),
            Some(other) => return Err(not_a_list(field, &other)),
        };
        let (def, shape) = node.lookup(field);
        let merge_key = def.and_then(|d| d.merge_key.as_deref());
        if let Some(p) = &patched {
            check_order(p, order_list, merge_key)?;
        }
        let live = current.clone().unwrap_or_default();
        let merged = match (current, patched) {
            (Some(c), None) => c,
            (None, Some(p)) => clean_list(p),
            (Some(c), Some(p)) => self.merge_list_field(field, c, p, def, shape, false)?,
            (None, None) => return Ok(()),
        };
        let ordered = order(merged, order_list, &live, merge_key)?;
        original.insert(field.to_string(), Value::Array(ordered));
        Ok(())
    }
}

/// The field a `<prefix>/<field>` directive key names.
fn directive_field<'k>(key: &'k str, prefix: &str) -> Option<&'k str> {
    match key.split_once('/') {
        Some((p, field)) if p == prefix => Some(field),
        _ => None,
    }
}

/// Whether the items of the lists are objects (else scalars); refuses
/// lists of lists and mixed lists.
fn items_are_objects(field: &str, a: &[Value], b: &[Value]) -> Result<bool, PatchError> {
    let mut kind = None;
    for v in a.iter().chain(b) {
        if v.is_array() {
            return Err(PatchError::ListOfLists);
        }
        let k = kind_name(v);
        match kind {
            None => kind = Some(k),
            Some(seen) if seen != k => {
                return Err(PatchError::MixedElements {
                    field: field.to_string(),
                })
            }
            Some(_) => {}
        }
    }
    Ok(kind == Some("object"))
}

/// The `$patch` items of a merged list of objects: deletions applied to
/// `original`; a `replace` makes the patch's other items the list. Returns
/// the list to merge into and the patch's plain items.
fn special_items(
    mut original: Vec<Value>,
    patch: Vec<Value>,
    key: &str,
) -> Result<(Vec<Value>, Vec<Value>), PatchError> {
    let mut plain = Vec::with_capacity(patch.len());
    let mut replace = false;
    for v in patch {
        let Some(directive) = v.get(DIRECTIVE).cloned() else {
            plain.push(v);
            continue;
        };
        match directive.as_str() {
            Some("delete") => {
                let Some(wanted) = v.get(key) else {
                    return Err(no_merge_key(v.as_object().unwrap_or(&Map::new()), key));
                };
                original.retain(|o| o.get(key) != Some(wanted));
            }
            Some("replace") => replace = true,
            Some("merge") => return Err(PatchError::MergeDirectiveInList),
            _ => {
                return Err(unknown_patch_type(
                    &directive,
                    v.as_object().unwrap_or(&Map::new()),
                ))
            }
        }
    }
    if replace {
        Ok((clean_list(plain), Vec::new()))
    } else {
        Ok((original, plain))
    }
}

/// kube's check that the patch's items appear in `$setElementOrder` in
/// the same relative order (deletions aside).
fn check_order(
    patch: &[Value],
    order: &[Value],
    merge_key: Option<&str>,
) -> Result<(), PatchError> {
    if patch.is_empty() || order.is_empty() {
        return Ok(());
    }
    let items: Vec<&Value> = match merge_key {
        Some(_) => patch
            .iter()
            .filter(|v| v.get(DIRECTIVE).and_then(Value::as_str) != Some("delete"))
            .collect(),
        None => patch.iter().collect(),
    };
    let (mut p, mut o) = (0, 0);
    while p < items.len() && o < order.len() {
        if items[p].get(DIRECTIVE).is_some() {
            p += 1;
            continue;
        }
        let equal = match merge_key {
            None => items[p] == &order[o],
            Some(key) => {
                let left = items[p]
                    .get(key)
                    .ok_or_else(|| no_merge_key_value(items[p], key))?;
                let right = order[o]
                    .get(key)
                    .ok_or_else(|| no_merge_key_value(&order[o], key))?;
                left == right
            }
        };
        if equal {
            p += 1;
        }
        o += 1;
    }
    if p < items.len() {
        return Err(PatchError::OrderMismatch {
            patch: Value::Array(patch.to_vec()).to_string(),
            order: Value::Array(order.to_vec()).to_string(),
        });
    }
    Ok(())
}

/// The identity of a list item for ordering: its merge key's value, or
/// the item itself.
fn identity<'v>(v: &'v Value, merge_key: Option<&str>) -> Option<&'v Value> {
    match merge_key {
        Some(k) => v.get(k),
        None => Some(v),
    }
}

fn position(list: &[Value], v: &Value, merge_key: Option<&str>) -> Option<usize> {
    let id = identity(v, merge_key);
    list.iter().position(|o| identity(o, merge_key) == id)
}

/// Orders a merged list as kube does: the items `wanted` names, in its
/// order, and the others (server-only), in their `live` order, merged so
/// that a server-only item goes before a wanted item only when both are
/// in the live list and it came first there.
fn order(
    merged: Vec<Value>,
    wanted: &[Value],
    live: &[Value],
    merge_key: Option<&str>,
) -> Result<Vec<Value>, PatchError> {
    if let Some(key) = merge_key {
        for v in merged.iter().chain(wanted) {
            if v.get(key).is_none() {
                return Err(no_merge_key_value(v, key));
            }
        }
    }
    let (mut named, mut server_only): (Vec<Value>, Vec<Value>) = merged
        .into_iter()
        .partition(|v| position(wanted, v, merge_key).is_some());
    named.sort_by_key(|v| position(wanted, v, merge_key).unwrap_or(usize::MAX));
    server_only.sort_by_key(|v| position(live, v, merge_key).unwrap_or(usize::MAX));

    let mut out = Vec::with_capacity(named.len() + server_only.len());
    let mut named = named.into_iter().peekable();
    let mut server_only = server_only.into_iter().peekable();
    loop {
        let take_server = match (server_only.peek(), named.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(s), Some(n)) => {
                match (position(live, s, merge_key), position(live, n, merge_key)) {
                    (Some(si), Some(ni)) => si < ni,
                    _ => false,
                }
            }
        };
        let next = if take_server {
            server_only.next()
        } else {
            named.next()
        };
        out.extend(next);
    }
    Ok(out)
}

fn kind_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "object",
    }
}

fn same_kind(a: &Value, b: &Value) -> bool {
    kind_name(a) == kind_name(b)
}

/// A value a patch adds, as the typed object would hold it: `null` map
/// entries dropped, and no directives (a map carrying `$patch` is dropped
/// whole, as kube drops it; directive keys are removed). `None` when the
/// value itself is dropped.
fn clean(v: Value) -> Option<Value> {
    match v {
        Value::Object(m) => {
            if m.contains_key(DIRECTIVE) {
                None
            } else {
                Some(Value::Object(clean_map(m)))
            }
        }
        Value::Array(l) => Some(Value::Array(clean_list(l))),
        other => Some(other),
    }
}

fn clean_map(m: Map<String, Value>) -> Map<String, Value> {
    m.into_iter()
        .filter(|(k, v)| !v.is_null() && !is_directive_key(k))
        .filter_map(|(k, v)| clean(v).map(|v| (k, v)))
        .collect()
}

fn clean_list(l: Vec<Value>) -> Vec<Value> {
    l.into_iter().filter_map(clean).collect()
}

fn is_directive_key(k: &str) -> bool {
    k == DIRECTIVE
        || k == RETAIN_KEYS
        || k.starts_with(SET_ELEMENT_ORDER)
        || k.starts_with(DELETE_FROM_PRIMITIVE_LIST)
}

fn unknown_patch_type(directive: &Value, map: &Map<String, Value>) -> PatchError {
    PatchError::UnknownPatchType {
        directive: match directive {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        },
        map: Value::Object(map.clone()).to_string(),
    }
}

fn no_merge_key(map: &Map<String, Value>, key: &str) -> PatchError {
    PatchError::NoMergeKey {
        map: Value::Object(map.clone()).to_string(),
        key: key.to_string(),
    }
}

fn no_merge_key_value(v: &Value, key: &str) -> PatchError {
    PatchError::NoMergeKey {
        map: v.to_string(),
        key: key.to_string(),
    }
}

fn not_a_list(field: &str, v: &Value) -> PatchError {
    PatchError::NotAList {
        field: field.to_string(),
        found: kind_name(v),
    }
}

#[cfg(test)]
mod tests;
