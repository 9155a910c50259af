//! The walks of an object along its schema that server-side apply needs:
//! the set of fields a value sets ([`field_set`]), what changed between two
//! objects ([`compare`]), an applied configuration merged into the live
//! object ([`merge`]), and fields taken out of an object ([`remove`]).
//!
//! How a value is walked is its [`Ty`], read from the built-in types'
//! schema (`kube::types`) as structured-merge-diff reads the OpenAPI
//! extensions: a struct or a map is granular (each field or key on its
//! own) unless `x-kubernetes-map-type: atomic`; a list is atomic (owned
//! and replaced whole) unless `x-kubernetes-list-type` is `map` (items
//! keyed by `x-kubernetes-list-map-keys`) or `set` (scalar items by
//! value); a list without a list type but with patch strategy `merge` is
//! keyed by its merge key (a set, for scalars), as kube reads the older
//! types. Content without a schema (`RawExtension`, fields the schema does
//! not declare, types without one) is a granular map with atomic lists.

use serde_json::{Map, Value};

use super::fieldpath::{FieldSet, Pe};
use crate::kube::types::{FieldDef, ListType, MapType, Schema, Shape, TypeDef};

/// How a value is walked.
#[derive(Debug, Clone, Copy)]
pub enum Ty<'a> {
    /// A scalar, or anything owned and replaced whole.
    Atomic,
    /// An object of a known type, field by field.
    Struct(&'a TypeDef),
    /// An object whose values all have one shape (labels, `data`).
    Map(&'a Shape),
    /// A list of scalars, item by item.
    Set,
    /// A list of objects keyed by these fields, with items of this shape.
    ListMap(&'a [String], &'a Shape),
    /// No schema: a granular map, atomic lists.
    Untyped,
}

impl<'a> Ty<'a> {
    /// The walk of a root object of the type `root`.
    pub fn root(root: &'a TypeDef) -> Self {
        if root.map_type() == Some(MapType::Atomic) {
            Ty::Atomic
        } else {
            Ty::Struct(root)
        }
    }

    /// The walk of a value of `shape`, declared by `def` when it is a
    /// struct's field (list and map types are properties of the field).
    pub fn of(schema: &'a Schema, shape: &'a Shape, def: Option<&'a FieldDef>) -> Self {
        let atomic_map = def.is_some_and(|d| d.map_type == Some(MapType::Atomic));
        match shape {
            Shape::Scalar(_) => Ty::Atomic,
            Shape::Untyped => Ty::Untyped,
            Shape::Object(name) => match schema.type_def(name) {
                Some(t) if atomic_map || t.map_type() == Some(MapType::Atomic) => Ty::Atomic,
                Some(t) => Ty::Struct(t),
                None => Ty::Untyped,
            },
            Shape::Map(_) if atomic_map => Ty::Atomic,
            Shape::Map(values) => Ty::Map(values),
            Shape::List(item) => {
                let Some(def) = def else {
                    return Ty::Atomic;
                };
                let scalar_items = matches!(item.as_ref(), Shape::Scalar(_));
                match def.list_type {
                    Some(ListType::Atomic) => Ty::Atomic,
                    Some(ListType::Set) if scalar_items => Ty::Set,
                    Some(ListType::Set) => Ty::Atomic,
                    Some(ListType::Map) if !def.list_map_keys.is_empty() => {
                        Ty::ListMap(&def.list_map_keys, item)
                    }
                    Some(ListType::Map) => Ty::Atomic,
                    None if def.merges() && scalar_items => Ty::Set,
                    None if def.merges() => match &def.merge_key {
                        Some(key) => Ty::ListMap(std::slice::from_ref(key), item),
                        None => Ty::Atomic,
                    },
                    None => Ty::Atomic,
                }
            }
        }
    }

    /// The walk of the value under `key` of an object walked as `self`.
    fn child(self, schema: &'a Schema, key: &str) -> Ty<'a> {
        match self {
            Ty::Struct(t) => match t.field(key) {
                Some(def) => Ty::of(schema, &def.shape, Some(def)),
                None => Ty::Untyped,
            },
            Ty::Map(values) => Ty::of(schema, values, None),
            _ => Ty::Untyped,
        }
    }

    /// Whether a key of an object walked as `self` is a map item (owned
    /// on its own, as kube records map keys) rather than a struct field.
    fn keys_are_items(self) -> bool {
        !matches!(self, Ty::Struct(_))
    }

    /// Whether a value is walked by parts under this type; anything else
    /// (a scalar, an atomic value, a value of the wrong JSON type) is a
    /// leaf.
    fn granular(self, v: &Value) -> bool {
        match self {
            Ty::Struct(_) | Ty::Map(_) | Ty::Untyped => v.is_object(),
            Ty::Set | Ty::ListMap(..) => v.is_array(),
            Ty::Atomic => false,
        }
    }
}

/// Why a value cannot be walked: an item of a keyed list without any of
/// its keys.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: associative list with keys has an element that omits key field {keys:?}")]
pub struct MissingKey {
    pub path: String,
    pub keys: String,
}

/// The path element of a list item of a list walked as `ty`.
/// The defaults of list-map key fields, which a key takes when an item
/// leaves the field out: structured-merge-diff reads them from kube's
/// OpenAPI v3 schemas, which the v2 specification `kube::types` is
/// generated from lacks. Only ports' `protocol` (`TCP`: container,
/// service and endpoint ports, keyed by port and protocol) has one, so
/// an applied `{port: 80}` is the stored, defaulted `{port: 80, protocol:
/// TCP}`, not a second port.
const KEY_DEFAULTS: &[(&str, &str)] = &[("protocol", "TCP")];

fn item_pe(ty: Ty<'_>, item: &Value, at: &[Pe]) -> Result<Pe, MissingKey> {
    match ty {
        Ty::ListMap(keys, _) => {
            let mut found = Map::new();
            if let Value::Object(o) = item {
                for k in keys {
                    if let Some(v) = o.get(k) {
                        found.insert(k.clone(), v.clone());
                    }
                }
                // Defaults only complete a key the item has a part of.
                if !found.is_empty() {
                    for k in keys {
                        if let Some((_, d)) = KEY_DEFAULTS
                            .iter()
                            .find(|(f, _)| f == k && !found.contains_key(*f))
                        {
                            found.insert(k.clone(), Value::String((*d).to_string()));
                        }
                    }
                }
            }
            if found.is_empty() {
                return Err(MissingKey {
                    path: super::fieldpath::path_string(at),
                    keys: keys.join(","),
                });
            }
            Ok(Pe::key(&found))
        }
        _ => Ok(Pe::value(item)),
    }
}

/// The items of a keyed list or set by their path elements, in order.
fn items<'v>(ty: Ty<'_>, list: &'v [Value], at: &[Pe]) -> Result<Vec<(Pe, &'v Value)>, MissingKey> {
    list.iter()
        .map(|item| Ok((item_pe(ty, item, at)?, item)))
        .collect()
}

fn item_ty<'a>(schema: &'a Schema, ty: Ty<'a>) -> Ty<'a> {
    match ty {
        Ty::ListMap(_, item) => Ty::of(schema, item, None),
        _ => Ty::Atomic,
    }
}

/// The fields `value` sets: every scalar and atomic value, every map key
/// and list item (with what they hold), and struct fields set to `null`
/// or `{}`; not the structs that merely hold fields.
pub fn field_set(schema: &Schema, ty: Ty<'_>, value: &Value) -> Result<FieldSet, MissingKey> {
    let mut set = FieldSet::new();
    collect(schema, ty, value, &mut Vec::new(), &mut set)?;
    Ok(set)
}

fn collect(
    schema: &Schema,
    ty: Ty<'_>,
    value: &Value,
    path: &mut Vec<Pe>,
    set: &mut FieldSet,
) -> Result<(), MissingKey> {
    if !ty.granular(value) {
        set.insert(path);
        return Ok(());
    }
    match value {
        Value::Object(m) => {
            for (k, v) in m {
                path.push(Pe::field(k));
                collect(schema, ty.child(schema, k), v, path, set)?;
                let empty = v.is_null() || v.as_object().is_some_and(Map::is_empty);
                if empty || ty.keys_are_items() {
                    set.insert(path);
                }
                path.pop();
            }
        }
        Value::Array(list) => {
            let ity = item_ty(schema, ty);
            for (pe, item) in items(ty, list, path)? {
                path.push(pe);
                collect(schema, ity, item, path, set)?;
                set.insert(path);
                path.pop();
            }
        }
        _ => set.insert(path),
    }
    Ok(())
}

/// What changed from one object to another, as sets of fields.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Comparison {
    pub added: FieldSet,
    pub modified: FieldSet,
    pub removed: FieldSet,
}

impl Comparison {
    /// Added or modified: what a writer takes from other managers.
    pub fn changed(&self) -> FieldSet {
        self.added.union(&self.modified)
    }
}

fn compare_leaf(old: Option<&Value>, new: Option<&Value>, path: &[Pe], c: &mut Comparison) {
    match (old, new) {
        (None, Some(_)) => c.added.insert(path),
        (Some(_), None) => c.removed.insert(path),
        (Some(o), Some(n)) if o != n => c.modified.insert(path),
        _ => {}
    }
}

fn compare_at(
    schema: &Schema,
    ty: Ty<'_>,
    old: Option<&Value>,
    new: Option<&Value>,
    path: &mut Vec<Pe>,
    c: &mut Comparison,
) -> Result<(), MissingKey> {
    let granular = |v: Option<&Value>| v.is_none_or(|v| ty.granular(v));
    let empty = |v: Option<&Value>| {
        v.is_none_or(|v| match v {
            Value::Object(m) => m.is_empty(),
            Value::Array(l) => l.is_empty(),
            _ => false,
        })
    };
    if !granular(old) || !granular(new) || (empty(old) && empty(new)) {
        if !path.is_empty() {
            compare_leaf(old, new, path, c);
        }
        return Ok(());
    }
    match (old, new) {
        (None | Some(Value::Object(_)), None | Some(Value::Object(_))) => {
            let none = Map::new();
            let om = old.and_then(Value::as_object).unwrap_or(&none);
            let nm = new.and_then(Value::as_object).unwrap_or(&none);
            compare_fields(schema, ty, om, nm, path, c)?;
        }
        _ => {
            let none = Vec::new();
            let ol = old.and_then(Value::as_array).unwrap_or(&none);
            let nl = new.and_then(Value::as_array).unwrap_or(&none);
            let oi = items(ty, ol, path)?;
            let ni = items(ty, nl, path)?;
            let mut pes: Vec<&Pe> = oi.iter().chain(ni.iter()).map(|(pe, _)| pe).collect();
            pes.sort();
            pes.dedup();
            let ity = item_ty(schema, ty);
            for pe in pes {
                let o = oi.iter().find(|(p, _)| p == pe).map(|(_, v)| *v);
                let n = ni.iter().find(|(p, _)| p == pe).map(|(_, v)| *v);
                path.push(pe.clone());
                compare_at(schema, ity, o, n, path, c)?;
                compare_leaf_presence(o, n, path, c);
                path.pop();
            }
        }
    }
    Ok(())
}

/// An item (list item or map key) that appeared or went is itself added
/// or removed.
/// What changed from `old` to `new`, two objects walked as `ty`. Takes
/// the objects as maps, so the field manager's comparison of every update
/// copies neither into a value.
pub fn compare(
    schema: &Schema,
    ty: Ty<'_>,
    old: &Map<String, Value>,
    new: &Map<String, Value>,
) -> Result<Comparison, MissingKey> {
    let mut c = Comparison::default();
    // As `compare_at` at the root: an object is walked field by field
    // where `ty` is granular for objects; otherwise, or with nothing in
    // either, the root is one leaf without a path, which records nothing.
    let granular = matches!(ty, Ty::Struct(_) | Ty::Map(_) | Ty::Untyped);
    if granular && !(old.is_empty() && new.is_empty()) {
        compare_fields(schema, ty, old, new, &mut Vec::new(), &mut c)?;
    }
    Ok(c)
}

/// The fields of two objects at `path`, compared member by member.
fn compare_fields(
    schema: &Schema,
    ty: Ty<'_>,
    om: &Map<String, Value>,
    nm: &Map<String, Value>,
    path: &mut Vec<Pe>,
    c: &mut Comparison,
) -> Result<(), MissingKey> {
    let mut keys: Vec<&String> = om.keys().chain(nm.keys()).collect();
    keys.sort();
    keys.dedup();
    for k in keys {
        path.push(Pe::field(k));
        let (o, n) = (om.get(k), nm.get(k));
        let cty = ty.child(schema, k);
        compare_at(schema, cty, o, n, path, c)?;
        // A map key, or a map that appeared or went, is itself added or
        // removed (kube's `.` on a new map); a struct or a list that
        // merely holds fields is not.
        if ty.keys_are_items() || matches!(cty, Ty::Map(_) | Ty::Untyped) {
            compare_leaf_presence(o, n, path, c);
        }
        path.pop();
    }
    Ok(())
}

fn compare_leaf_presence(
    old: Option<&Value>,
    new: Option<&Value>,
    path: &[Pe],
    c: &mut Comparison,
) {
    match (old, new) {
        (None, Some(_)) => c.added.insert(path),
        (Some(_), None) => c.removed.insert(path),
        _ => {}
    }
}

/// `config` merged into `live` (both walked as `ty`): what the config sets
/// wins, granular maps are merged key by key (a `null` in the config takes
/// the key out), keyed lists and sets item by item (live items keep their
/// places, new ones follow in the config's order), everything else is
/// replaced.
pub fn merge(
    schema: &Schema,
    ty: Ty<'_>,
    live: Option<&Value>,
    config: &Value,
    at: &mut Vec<Pe>,
) -> Result<Value, MissingKey> {
    let Some(live) = live.filter(|l| ty.granular(l) && ty.granular(config)) else {
        return Ok(clean(config));
    };
    match (live, config) {
        (Value::Object(lm), Value::Object(cm)) => {
            let mut out = lm.clone();
            for (k, cv) in cm {
                if cv.is_null() {
                    out.remove(k);
                    continue;
                }
                at.push(Pe::field(k));
                let merged = merge(schema, ty.child(schema, k), lm.get(k), cv, at)?;
                at.pop();
                out.insert(k.clone(), merged);
            }
            Ok(Value::Object(out))
        }
        (Value::Array(ll), Value::Array(cl)) => {
            let ity = item_ty(schema, ty);
            let mut out: Vec<(Pe, Value)> = items(ty, ll, at)?
                .into_iter()
                .map(|(pe, v)| (pe, v.clone()))
                .collect();
            for (pe, cv) in items(ty, cl, at)? {
                at.push(pe.clone());
                match out.iter_mut().find(|(p, _)| *p == pe) {
                    Some((_, lv)) => *lv = merge(schema, ity, Some(&*lv), cv, at)?,
                    None => out.push((pe, merge(schema, ity, None, cv, at)?)),
                }
                at.pop();
            }
            Ok(Value::Array(out.into_iter().map(|(_, v)| v).collect()))
        }
        _ => Ok(clean(config)),
    }
}

/// A configured value as stored: `null` map values dropped (kube's typed
/// decoding drops them too).
fn clean(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), clean(v)))
                .collect(),
        ),
        Value::Array(l) => Value::Array(l.iter().map(clean).collect()),
        other => other.clone(),
    }
}

/// Takes out of `value` (walked as `ty`) every member of `set` that no
/// path of `keep` lies at or under; where something kept lies below a
/// member, only the members below it that nothing keeps go.
pub fn remove(
    schema: &Schema,
    ty: Ty<'_>,
    value: &mut Value,
    set: &FieldSet,
    keep: &FieldSet,
    path: &mut Vec<Pe>,
) -> Result<(), MissingKey> {
    if !ty.granular(value) {
        return Ok(());
    }
    match value {
        Value::Object(m) => {
            for pe in set.elements() {
                let Some(k) = pe.field_name() else {
                    continue;
                };
                path.push(pe.clone());
                if set.is_member(pe) && !keep.has_at_or_under(path) {
                    m.remove(k);
                } else if let (Some(sub), Some(v)) = (set.child(pe), m.get_mut(k)) {
                    let was_empty = is_empty_container(v);
                    remove(schema, ty.child(schema, k), v, sub, keep, path)?;
                    // A list or map emptied by the removal goes too, as
                    // kube's typed encoding omits an empty one.
                    if !was_empty && is_empty_container(v) {
                        m.remove(k);
                    }
                }
                path.pop();
            }
        }
        Value::Array(list) => {
            let ity = item_ty(schema, ty);
            let pes: Vec<Pe> = items(ty, list, path)?
                .into_iter()
                .map(|(pe, _)| pe)
                .collect();
            let mut kept = Vec::with_capacity(list.len());
            for (pe, mut item) in pes.into_iter().zip(list.drain(..)) {
                path.push(pe.clone());
                if set.is_member(&pe) && !keep.has_at_or_under(path) {
                    path.pop();
                    continue;
                }
                if let Some(sub) = set.child(&pe) {
                    remove(schema, ity, &mut item, sub, keep, path)?;
                }
                path.pop();
                kept.push(item);
            }
            *list = kept;
        }
        _ => {}
    }
    Ok(())
}

fn is_empty_container(v: &Value) -> bool {
    match v {
        Value::Object(m) => m.is_empty(),
        Value::Array(l) => l.is_empty(),
        _ => false,
    }
}
