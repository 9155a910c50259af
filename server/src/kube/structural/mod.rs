//! Structural schemas of CustomResourceDefinitions: one version's
//! `schema.openAPIV3Schema` parsed and checked as kube's CRD validation
//! checks it, and the four things the custom-resource serving does with
//! it: prune unknown fields, apply defaults, validate an object (with
//! kube-openapi's and apiextensions' wording), and describe it as the
//! typed-schema table server-side apply and field validation read.
//!
//! Pure: no I/O, no HTTP, no store. Semantics follow
//! `k8s.io/apiextensions-apiserver/pkg/apiserver/schema` (structural,
//! pruning, defaulting, listtype, objectmeta) and
//! `k8s.io/kube-openapi/pkg/validation/validate`, written anew.
//!
//! Layout: [`parse`] (the schema as a tree of [`Node`]s, and the causes
//! that make a schema not structural or invalid), [`validate`] (an object
//! against the tree: the OpenAPI value validations, with the string
//! [`formats`]), [`lists`] (list sets and maps), [`embedded`] (embedded
//! resources), [`prune`] (unknown fields dropped, defaults
//! applied), [`typeschema`] (the tree as a [`crate::kube::types::Schema`]),
//! [`cel`] (the `x-kubernetes-validations` rules).
//!
//! Where it differs from kube: patterns are compiled by the `regex`
//! crate (RE2 syntax, as Go's `regexp` that kube uses, so the same
//! patterns compile); CEL rules run on the `cel` crate, whose function
//! library is CEL's standard one plus what kube adds only where listed
//! in [`cel`]; no cost budget is enforced.

mod cel;
mod embedded;
mod formats;
mod lists;
mod parse;
mod prune;
mod typeschema;
mod validate;

#[cfg(test)]
mod tests;

use serde_json::Value;
use std::collections::BTreeMap;

use crate::kube::error::FieldCause;

/// `name` under `path`, as a field path (`path.name`, or `name` at the
/// root).
fn child(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

/// One CRD version's structural schema, parsed from its
/// `schema.openAPIV3Schema`.
#[derive(Debug)]
pub struct StructuralSchema {
    root: Node,
}

impl StructuralSchema {
    /// Parse and check that the schema is structural and valid, as kube's
    /// CRD validation does. The causes' field paths are under `base`
    /// (`spec.versions[0].schema.openAPIV3Schema`), sorted as kube sorts
    /// them (by their full text).
    pub fn new(schema: &Value, base: &str) -> Result<Self, Vec<FieldCause>> {
        parse::parse_root(schema, base).map(|root| StructuralSchema { root })
    }

    /// Remove the fields the schema does not know, as kube's pruning does:
    /// at the root and in embedded resources `apiVersion`, `kind` and
    /// `metadata` are kept, and `x-kubernetes-preserve-unknown-fields`
    /// keeps what it covers. Returns the removed fields' paths
    /// (`spec.foo`, `spec.items[0].bar`), sorted, which kube reports as
    /// `unknown field "spec.foo"` under `fieldValidation=Warn|Strict`.
    pub fn prune(&self, obj: &mut Value) -> Vec<String> {
        prune::prune(&self.root, obj)
    }

    /// Apply the schema's `default`s, as kube does after pruning: a
    /// non-nullable `null` without a default is dropped, an absent (or
    /// non-nullable `null`) field with a default gets it, and defaults
    /// nested in an object apply only where that object exists.
    pub fn apply_defaults(&self, obj: &mut Value) {
        prune::apply_defaults(&self.root, obj)
    }

    /// Validate an object: the OpenAPI value validations, list sets and
    /// maps, embedded resources' `apiVersion`, `kind` and metadata, and
    /// the CEL rules (transition rules, those using `oldSelf`, only where
    /// `old` has the value too). `old` is the stored object on an update,
    /// `None` on a create; as kube 1.33 ratchets, a value equal to its old
    /// counterpart is not held to the OpenAPI checks or the rules that do
    /// not use `oldSelf`. One cause per problem, worded as kube words
    /// them, in kube's order (the OpenAPI causes, then the list, metadata
    /// and CEL ones).
    pub fn validate(&self, obj: &Value, old: Option<&Value>) -> Vec<FieldCause> {
        let mut causes = validate::openapi(&self.root, obj, old, "", None);
        causes.extend(lists::list_sets_and_maps(&self.root, obj));
        causes.extend(embedded::embedded_resources(&self.root, obj, false));
        causes.extend(cel::validate(&self.root, obj, old));
        causes
    }

    /// This schema as the typed-schema table server-side apply and field
    /// validation read for built-in types: the kind's root type and one
    /// type per object node, with list types, list-map keys and map
    /// types; `metadata` is the built-in `ObjectMeta`.
    pub fn to_type_schema(
        &self,
        group: &str,
        version: &str,
        kind: &str,
    ) -> crate::kube::types::Schema {
        typeschema::build(&self.root, group, version, kind)
    }
}

/// One node of a schema: a structural node (with a `type`, in
/// `properties`, `items` or `additionalProperties`), or a value
/// validation nested in `allOf`, `anyOf`, `oneOf` or `not`, which has no
/// type of its own.
#[derive(Debug, Default)]
pub(crate) struct Node {
    /// `object`, `array`, `string`, `integer`, `number`, `boolean`, or
    /// empty.
    pub ty: String,
    /// The format kube checks (formats it does not know are dropped, as
    /// kube strips them).
    pub format: Option<String>,
    pub nullable: bool,
    pub properties: BTreeMap<String, Node>,
    pub additional: Option<Additional>,
    pub items: Option<Box<Node>>,
    pub default: Option<Value>,
    pub preserve_unknown: bool,
    pub embedded: bool,
    pub int_or_string: bool,
    pub list_type: Option<String>,
    pub list_map_keys: Vec<String>,
    pub map_type: Option<String>,
    pub checks: Checks,
    pub rules: Vec<cel::Rule>,
}

/// `additionalProperties`: a schema for every other key, or `true`
/// (any value, unpruned only under `x-kubernetes-preserve-unknown-fields`).
#[derive(Debug)]
pub(crate) enum Additional {
    Any,
    Schema(Box<Node>),
}

/// The value validations of a node.
#[derive(Debug, Default)]
pub(crate) struct Checks {
    pub maximum: Option<f64>,
    pub exclusive_maximum: bool,
    pub minimum: Option<f64>,
    pub exclusive_minimum: bool,
    pub multiple_of: Option<f64>,
    pub max_length: Option<i64>,
    pub min_length: Option<i64>,
    pub pattern: Option<(String, regex::Regex)>,
    pub max_items: Option<i64>,
    pub min_items: Option<i64>,
    pub unique_items: bool,
    pub max_properties: Option<i64>,
    pub min_properties: Option<i64>,
    pub required: Vec<String>,
    pub enumeration: Vec<Value>,
    pub all_of: Vec<Node>,
    pub any_of: Vec<Node>,
    pub one_of: Vec<Node>,
    pub not: Option<Box<Node>>,
}
