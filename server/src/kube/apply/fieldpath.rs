//! Field paths and sets of them, and their `FieldsV1` encoding (the
//! `fieldsV1` of a `metadata.managedFields` entry).
//!
//! A path is a list of [`Pe`]s (path elements), each one of the four kinds
//! `FieldsV1` knows, kept in its encoded form so that sets order and
//! compare them as kube encodes them:
//!
//! - `f:<name>`: a field of a struct or a key of a map;
//! - `k:<json object>`: an item of a list keyed by its list-map keys
//!   (`k:{"containerPort":80,"protocol":"TCP"}`, keys sorted, compact);
//! - `v:<json value>`: an item of a set (a list of scalars);
//! - `i:<index>`: an item of a list by position (not produced here:
//!   atomic lists are owned whole; read back when a client wrote one).
//!
//! A [`FieldSet`] is a trie: at each level the elements that are members
//! (owned) and the children (sets below an element). An element can be
//! both, which `FieldsV1` writes as `".": {}` beside the children; a
//! member without children is `{}`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::{Map, Value};

/// One path element in its `FieldsV1` form (`f:spec`, `k:{"name":"a"}`,
/// `v:"x"`, `i:0`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pe(String);

impl Pe {
    /// A struct field or a map key.
    pub fn field(name: &str) -> Self {
        Pe(format!("f:{name}"))
    }

    /// A list item keyed by the values of its list-map keys. `keys` is an
    /// object; serde_json's map is ordered, so the encoding is canonical.
    pub fn key(keys: &Map<String, Value>) -> Self {
        Pe(format!("k:{}", Value::Object(keys.clone())))
    }

    /// An item of a set of scalars.
    pub fn value(v: &Value) -> Self {
        Pe(format!("v:{v}"))
    }

    /// Parses an encoded element; `None` for anything `FieldsV1` does not
    /// define (`k:` and `v:` must hold JSON, `i:` a number).
    pub fn parse(s: &str) -> Option<Self> {
        let (kind, rest) = s.split_at_checked(2)?;
        let ok = match kind {
            "f:" => true,
            "k:" => matches!(serde_json::from_str::<Value>(rest), Ok(Value::Object(_))),
            "v:" => serde_json::from_str::<Value>(rest).is_ok(),
            "i:" => rest.parse::<u64>().is_ok(),
            _ => false,
        };
        ok.then(|| Pe(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The field name of an `f:` element.
    pub fn field_name(&self) -> Option<&str> {
        self.0.strip_prefix("f:")
    }
}

/// kube's rendering of an element in a path (`fieldpath.Path.String()`):
/// `.name`, `[name="a"]`, `[="x"]`, `[0]`.
impl fmt::Display for Pe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kind, rest) = self.0.split_at_checked(2).unwrap_or(("", &self.0));
        match kind {
            "f:" => write!(f, ".{rest}"),
            "k:" => {
                let Ok(Value::Object(keys)) = serde_json::from_str::<Value>(rest) else {
                    return write!(f, "[{rest}]");
                };
                let parts: Vec<String> = keys.iter().map(|(k, v)| format!("{k}={v}")).collect();
                write!(f, "[{}]", parts.join(","))
            }
            "v:" => write!(f, "[={rest}]"),
            "i:" => write!(f, "[{rest}]"),
            _ => write!(f, "{}", self.0),
        }
    }
}

/// A path from the object's root.
pub type Path = Vec<Pe>;

/// A path as kube prints it in a conflict (`.spec.containers[name="a"].image`).
pub fn path_string(path: &[Pe]) -> String {
    path.iter().map(ToString::to_string).collect()
}

/// A set of field paths, as a trie.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSet {
    members: BTreeSet<Pe>,
    children: BTreeMap<Pe, FieldSet>,
}

impl FieldSet {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.children.is_empty()
    }

    /// Adds `path` (the empty path, the object itself, is never a member).
    pub fn insert(&mut self, path: &[Pe]) {
        let Some((last, parents)) = path.split_last() else {
            return;
        };
        let mut node = self;
        for pe in parents {
            node = node.children.entry(pe.clone()).or_default();
        }
        node.members.insert(last.clone());
    }

    /// Whether `path` is a member.
    pub fn has(&self, path: &[Pe]) -> bool {
        let Some((last, parents)) = path.split_last() else {
            return false;
        };
        let mut node = self;
        for pe in parents {
            match node.children.get(pe) {
                Some(c) => node = c,
                None => return false,
            }
        }
        node.members.contains(last)
    }

    /// Whether `path` or anything below it is a member.
    pub fn has_at_or_under(&self, path: &[Pe]) -> bool {
        let Some((last, parents)) = path.split_last() else {
            return !self.is_empty();
        };
        let mut node = self;
        for pe in parents {
            match node.children.get(pe) {
                Some(c) => node = c,
                None => return false,
            }
        }
        node.members.contains(last) || node.children.get(last).is_some_and(|c| !c.is_empty())
    }

    /// The set below `pe`, if any.
    pub fn child(&self, pe: &Pe) -> Option<&FieldSet> {
        self.children.get(pe)
    }

    pub fn is_member(&self, pe: &Pe) -> bool {
        self.members.contains(pe)
    }

    /// The elements at this level that are members or have children.
    pub fn elements(&self) -> BTreeSet<&Pe> {
        self.members.iter().chain(self.children.keys()).collect()
    }

    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.members.extend(other.members.iter().cloned());
        for (pe, c) in &other.children {
            let merged = match out.children.get(pe) {
                Some(mine) => mine.union(c),
                None => c.clone(),
            };
            out.children.insert(pe.clone(), merged);
        }
        out
    }

    /// The members of `self` that are not members of `other` (not
    /// recursive: a member of `other` does not take what lies below it).
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            members: self.members.difference(&other.members).cloned().collect(),
            children: BTreeMap::new(),
        };
        for (pe, c) in &self.children {
            let rest = match other.children.get(pe) {
                Some(o) => c.difference(o),
                None => c.clone(),
            };
            if !rest.is_empty() {
                out.children.insert(pe.clone(), rest);
            }
        }
        out
    }

    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            members: self.members.intersection(&other.members).cloned().collect(),
            children: BTreeMap::new(),
        };
        for (pe, c) in &self.children {
            if let Some(o) = other.children.get(pe) {
                let both = c.intersection(o);
                if !both.is_empty() {
                    out.children.insert(pe.clone(), both);
                }
            }
        }
        out
    }

    /// `self` without the members of `other` and without everything
    /// below them (how ignored fields are taken out of a manager's set).
    pub fn recursive_difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            members: self.members.difference(&other.members).cloned().collect(),
            children: BTreeMap::new(),
        };
        for (pe, c) in &self.children {
            if other.members.contains(pe) {
                continue;
            }
            let rest = match other.children.get(pe) {
                Some(o) => c.recursive_difference(o),
                None => c.clone(),
            };
            if !rest.is_empty() {
                out.children.insert(pe.clone(), rest);
            }
        }
        out
    }

    /// Every member path, in order.
    pub fn paths(&self) -> Vec<Path> {
        let mut out = Vec::new();
        self.collect_paths(&mut Vec::new(), &mut out);
        out
    }

    fn collect_paths(&self, prefix: &mut Path, out: &mut Vec<Path>) {
        for pe in self.elements() {
            prefix.push(pe.clone());
            if self.members.contains(pe) {
                out.push(prefix.clone());
            }
            if let Some(c) = self.children.get(pe) {
                c.collect_paths(prefix, out);
            }
            prefix.pop();
        }
    }

    /// The `FieldsV1` object.
    pub fn to_fields_v1(&self) -> Value {
        let mut out = Map::new();
        for pe in self.elements() {
            let mut inner = match self.children.get(pe) {
                Some(c) => match c.to_fields_v1() {
                    Value::Object(m) => m,
                    _ => Map::new(),
                },
                None => Map::new(),
            };
            if self.members.contains(pe) && !inner.is_empty() {
                inner.insert(".".into(), Value::Object(Map::new()));
            }
            out.insert(pe.as_str().to_string(), Value::Object(inner));
        }
        Value::Object(out)
    }

    /// Reads a `FieldsV1` object; `None` when it is not one.
    pub fn from_fields_v1(v: &Value) -> Option<FieldSet> {
        let Value::Object(m) = v else {
            return None;
        };
        let mut set = FieldSet::new();
        for (k, inner) in m {
            if k == "." {
                continue;
            }
            let pe = Pe::parse(k)?;
            let Value::Object(im) = inner else {
                return None;
            };
            if im.is_empty() || im.contains_key(".") {
                set.members.insert(pe.clone());
            }
            let child = FieldSet::from_fields_v1(inner)?;
            if !child.is_empty() {
                set.children.insert(pe, child);
            }
        }
        Some(set)
    }
}
