//! A `openAPIV3Schema` read into a tree of [`Node`]s, with every reason
//! kube's CRD validation refuses it: keywords CRDs do not support, a
//! schema that is not structural (a node without a type, value
//! validations that specify types, defaults or extensions, fields only
//! value validations define, metadata beyond name and generateName),
//! extensions used wrongly (list and map types, list-map keys, embedded
//! resources, int-or-string), patterns and CEL rules that do not
//! compile, and defaults that are not pruned or not valid.
//!
//! This file reads the tree (each keyword's type, what CRDs do not
//! support, the structural shape); `checks` holds the rules run on it.

use serde_json::{Map, Value};

use super::cel;
use super::child;
use super::{Additional, Node};

mod checks;
use crate::kube::error::{BadValue, FieldCause};

/// Where a structural node sits: kube words a missing type by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Root,
    Item,
    Field,
}

/// The types a CRD schema may name, sorted as kube lists them.
const TYPES: [&str; 6] = ["array", "boolean", "integer", "number", "object", "string"];

/// The string formats kube validates (go-openapi's names with `-`
/// removed); any other string format is ignored, as kube strips it.
const STRING_FORMATS: [&str; 24] = [
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
    "byte",
    "password",
    "date",
    "duration",
    "datetime",
];

fn key(path: &str, k: &str) -> String {
    format!("{path}[{k}]")
}

/// The parsed root, or every cause that refuses the schema, sorted by
/// their text as kube sorts them.
pub(super) fn parse_root(schema: &Value, base: &str) -> Result<Node, Vec<FieldCause>> {
    let mut p = Parser {
        causes: Vec::new(),
        uncorrelatable: None,
    };
    let root = p.structural(schema, base, Level::Root);
    if p.causes.is_empty() {
        p.completeness(&root, base);
        p.defaults(&root, base, true);
    }
    if p.causes.is_empty() {
        return Ok(root);
    }
    let mut causes = p.causes;
    causes.sort_by(|a, b| {
        format!("{}: {}", a.field, a.message).cmp(&format!("{}: {}", b.field, b.message))
    });
    causes.dedup();
    Err(causes)
}

struct Parser {
    causes: Vec<FieldCause>,
    /// The path of the outermost list above the node being parsed whose
    /// items have no old counterpart (any list but a `list-type: map`):
    /// `oldSelf` cannot be used below it.
    uncorrelatable: Option<String>,
}

impl Parser {
    /// A schema that must be a JSON object.
    fn object<'a>(&mut self, v: &'a Value, path: &str) -> Option<&'a Map<String, Value>> {
        match v {
            Value::Object(m) => Some(m),
            other => {
                self.causes.push(FieldCause::invalid_value(
                    path,
                    BadValue::of_json(other),
                    "must be a JSON object",
                ));
                None
            }
        }
    }

    fn string(&mut self, m: &Map<String, Value>, k: &str, path: &str) -> Option<String> {
        match m.get(k)? {
            Value::String(s) => Some(s.clone()),
            other => {
                self.bad_type(other, &child(path, k), "a string");
                None
            }
        }
    }

    fn boolean(&mut self, m: &Map<String, Value>, k: &str, path: &str) -> Option<bool> {
        match m.get(k)? {
            Value::Bool(b) => Some(*b),
            other => {
                self.bad_type(other, &child(path, k), "a boolean");
                None
            }
        }
    }

    fn number(&mut self, m: &Map<String, Value>, k: &str, path: &str) -> Option<f64> {
        match m.get(k)? {
            Value::Number(n) => n.as_f64(),
            other => {
                self.bad_type(other, &child(path, k), "a number");
                None
            }
        }
    }

    fn integer(&mut self, m: &Map<String, Value>, k: &str, path: &str) -> Option<i64> {
        match m.get(k)? {
            Value::Number(n) if n.as_i64().is_some_and(|i| i >= 0) => n.as_i64(),
            other => {
                self.bad_type(other, &child(path, k), "a non-negative integer");
                None
            }
        }
    }

    fn strings(&mut self, m: &Map<String, Value>, k: &str, path: &str) -> Vec<String> {
        match m.get(k) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) if items.iter().all(Value::is_string) => items
                .iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect(),
            Some(other) => {
                self.bad_type(other, &child(path, k), "a list of strings");
                Vec::new()
            }
        }
    }

    fn bad_type(&mut self, v: &Value, path: &str, what: &str) {
        self.causes.push(FieldCause::invalid_value(
            path,
            BadValue::of_json(v),
            &format!("must be {what}"),
        ));
    }

    /// The parts every node has, structural or nested: the keywords CRDs
    /// refuse, the value validations with their nested schemas.
    fn common(&mut self, m: &Map<String, Value>, path: &str) -> Node {
        for (k, what) in [
            ("id", "id"),
            ("additionalItems", "additionalItems"),
            ("patternProperties", "patternProperties"),
            ("definitions", "definitions"),
            ("dependencies", "dependencies"),
            ("$ref", "$ref"),
            ("$schema", "$schema"),
        ] {
            if m.contains_key(k) {
                self.causes.push(FieldCause::forbidden(
                    &child(path, k),
                    &format!("{what} is not supported"),
                ));
            }
        }
        let mut node = Node::default();
        if let Some(ty) = self.string(m, "type", path) {
            if ty == "null" {
                self.causes.push(FieldCause::forbidden(
                    &child(path, "type"),
                    "type cannot be set to null, use nullable as an alternative",
                ));
            } else if !ty.is_empty() && !TYPES.contains(&ty.as_str()) {
                self.causes
                    .push(FieldCause::not_supported(&child(path, "type"), &ty, &TYPES));
            }
            node.ty = ty;
        }
        node.format = self
            .string(m, "format", path)
            .and_then(|f| supported_format(&node.ty, &f));
        let c = &mut node.checks;
        c.maximum = self.number(m, "maximum", path);
        c.exclusive_maximum = self.boolean(m, "exclusiveMaximum", path).unwrap_or(false);
        c.minimum = self.number(m, "minimum", path);
        c.exclusive_minimum = self.boolean(m, "exclusiveMinimum", path).unwrap_or(false);
        c.multiple_of = self.number(m, "multipleOf", path);
        if let Some(f) = c.multiple_of.filter(|f| *f <= 0.0) {
            self.causes.push(FieldCause::invalid_value(
                &child(path, "multipleOf"),
                BadValue::Float(f),
                "must be greater than zero",
            ));
        }
        c.max_length = self.integer(m, "maxLength", path);
        c.min_length = self.integer(m, "minLength", path);
        c.max_items = self.integer(m, "maxItems", path);
        c.min_items = self.integer(m, "minItems", path);
        c.max_properties = self.integer(m, "maxProperties", path);
        c.min_properties = self.integer(m, "minProperties", path);
        c.unique_items = self.boolean(m, "uniqueItems", path).unwrap_or(false);
        if c.unique_items {
            self.causes.push(FieldCause::forbidden(
                &child(path, "uniqueItems"),
                "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
            ));
        }
        c.required = self.strings(m, "required", path);
        match m.get("enum") {
            None | Some(Value::Null) => {}
            Some(Value::Array(values)) => c.enumeration = values.clone(),
            Some(other) => self.bad_type(other, &child(path, "enum"), "a list"),
        }
        if let Some(pattern) = self.string(m, "pattern", path) {
            match regex::Regex::new(&pattern) {
                Ok(re) => c.pattern = Some((pattern, re)),
                Err(e) => self.causes.push(FieldCause::invalid(
                    &child(path, "pattern"),
                    &pattern,
                    &format!(
                        "must be a valid regular expression, but isn't: {}",
                        last_line(&e.to_string())
                    ),
                )),
            }
        }
        // Nested value validations: anyOf's and oneOf's may not carry
        // CEL rules; allOf's may (kube's AllowNestedXValidations).
        // The int-or-string pattern `anyOf: [{type: integer}, {type:
        // string}]` may name types (kube allows it at a node and in its
        // first allOf, which is this same rule one level down).
        let int_or_string_any_of = is_int_or_string_any_of(m);
        for k in ["allOf", "anyOf", "oneOf"] {
            let list = match m.get(k) {
                None | Some(Value::Null) => continue,
                Some(Value::Array(list)) => list,
                Some(other) => {
                    self.bad_type(other, &child(path, k), "a list");
                    continue;
                }
            };
            let mut nodes = Vec::new();
            for (i, v) in list.iter().enumerate() {
                let at = format!("{}[{i}]", child(path, k));
                let checked = !(k == "anyOf" && int_or_string_any_of);
                nodes.push(self.nested(v, &at, checked, k == "allOf"));
            }
            match k {
                "allOf" => node.checks.all_of = nodes,
                "anyOf" => node.checks.any_of = nodes,
                _ => node.checks.one_of = nodes,
            }
        }
        if let Some(v) = m.get("not").filter(|v| !v.is_null()) {
            node.checks.not = Some(Box::new(self.nested(v, &child(path, "not"), true, false)));
        }
        node
    }

    /// A structural node: one with (or allowed to omit) a type, under
    /// `properties`, `items` or `additionalProperties`.
    fn structural(&mut self, v: &Value, path: &str, level: Level) -> Node {
        let Some(m) = self.object(v, path) else {
            return Node::default();
        };
        let mut node = self.common(m, path);
        node.nullable = self.boolean(m, "nullable", path).unwrap_or(false);
        node.default = m.get("default").filter(|d| !d.is_null()).cloned();
        match self.boolean(m, "x-kubernetes-preserve-unknown-fields", path) {
            Some(false) => self.causes.push(FieldCause::invalid_value(
                &child(path, "x-kubernetes-preserve-unknown-fields"),
                BadValue::Bool(false),
                "must be true or undefined",
            )),
            Some(true) => node.preserve_unknown = true,
            None => {}
        }
        node.embedded = self
            .boolean(m, "x-kubernetes-embedded-resource", path)
            .unwrap_or(false);
        node.int_or_string = self
            .boolean(m, "x-kubernetes-int-or-string", path)
            .unwrap_or(false);
        node.list_type = self.string(m, "x-kubernetes-list-type", path);
        node.list_map_keys = self.strings(m, "x-kubernetes-list-map-keys", path);
        node.map_type = self.string(m, "x-kubernetes-map-type", path);

        match m.get("properties") {
            None | Some(Value::Null) => {}
            Some(Value::Object(props)) => {
                for (k, pv) in props {
                    let at = key(&child(path, "properties"), k);
                    let p = self.structural(pv, &at, Level::Field);
                    node.properties.insert(k.clone(), p);
                }
            }
            Some(other) => self.bad_type(other, &child(path, "properties"), "a JSON object"),
        }
        match m.get("items") {
            None | Some(Value::Null) => {}
            Some(Value::Array(_)) => self.causes.push(FieldCause::forbidden(
                &child(path, "items"),
                "items must be a schema object and not an array",
            )),
            Some(iv) => {
                let outer = self.uncorrelatable.clone();
                let list_type = m.get("x-kubernetes-list-type").and_then(Value::as_str);
                if outer.is_none() && list_type != Some("map") {
                    self.uncorrelatable = Some(path.to_string());
                }
                node.items = Some(Box::new(self.structural(
                    iv,
                    &child(path, "items"),
                    Level::Item,
                )));
                self.uncorrelatable = outer;
            }
        }
        match m.get("additionalProperties") {
            None | Some(Value::Null) | Some(Value::Bool(false)) => {}
            Some(Value::Bool(true)) => node.additional = Some(Additional::Any),
            Some(av) => {
                let at = child(path, "additionalProperties");
                node.additional = Some(Additional::Schema(Box::new(self.structural(
                    av,
                    &at,
                    Level::Field,
                ))));
            }
        }
        if m.contains_key("additionalProperties") && !node.properties.is_empty() {
            let allows_any = matches!(m.get("additionalProperties"), Some(Value::Bool(true)));
            if !allows_any {
                self.causes.push(FieldCause::forbidden(
                    &child(path, "additionalProperties"),
                    "additionalProperties and properties are mutual exclusive",
                ));
            }
        }
        node.rules = cel::parse_rules(m, path, self.uncorrelatable.as_deref(), &mut self.causes);

        self.invariants(&node, m, path, level);
        self.extensions(&node, path);
        node
    }

    /// A value validation nested in `allOf`, `anyOf`, `oneOf` or `not`:
    /// what kube's structural schemas forbid there (`checked` is false
    /// for the int-or-string `anyOf` pattern, which may name types).
    fn nested(&mut self, v: &Value, path: &str, checked: bool, allow_rules: bool) -> Node {
        let Some(m) = self.object(v, path) else {
            return Node::default();
        };
        let mut node = self.common(m, path);
        if checked {
            let forbid = |k: &str| m.get(k).is_some_and(|v| !v.is_null());
            let truthy = |k: &str| m.get(k).is_some_and(|v| v == &Value::Bool(true));
            let rules = [
                (
                    !node.ty.is_empty(),
                    "type",
                    "must be empty to be structural",
                ),
                (
                    forbid("additionalProperties"),
                    "additionalProperties",
                    "must be undefined to be structural",
                ),
                (
                    forbid("default"),
                    "default",
                    "must be undefined to be structural",
                ),
                (
                    m.get("title")
                        .and_then(Value::as_str)
                        .is_some_and(|s| !s.is_empty()),
                    "title",
                    "must be empty to be structural",
                ),
                (
                    m.get("description")
                        .and_then(Value::as_str)
                        .is_some_and(|s| !s.is_empty()),
                    "description",
                    "must be empty to be structural",
                ),
                (
                    truthy("nullable"),
                    "nullable",
                    "must be false to be structural",
                ),
                (
                    truthy("x-kubernetes-preserve-unknown-fields"),
                    "x-kubernetes-preserve-unknown-fields",
                    "must be false to be structural",
                ),
                (
                    truthy("x-kubernetes-embedded-resource"),
                    "x-kubernetes-embedded-resource",
                    "must be false to be structural",
                ),
                (
                    truthy("x-kubernetes-int-or-string"),
                    "x-kubernetes-int-or-string",
                    "must be false to be structural",
                ),
                (
                    m.get("x-kubernetes-list-map-keys")
                        .and_then(Value::as_array)
                        .is_some_and(|a| !a.is_empty()),
                    "x-kubernetes-list-map-keys",
                    "must be empty to be structural",
                ),
                (
                    forbid("x-kubernetes-list-type"),
                    "x-kubernetes-list-type",
                    "must be undefined to be structural",
                ),
                (
                    forbid("x-kubernetes-map-type"),
                    "x-kubernetes-map-type",
                    "must be undefined to be structural",
                ),
                (
                    !allow_rules
                        && m.get("x-kubernetes-validations")
                            .and_then(Value::as_array)
                            .is_some_and(|a| !a.is_empty()),
                    "x-kubernetes-validations",
                    "must be empty to be structural",
                ),
            ];
            for (bad, k, msg) in rules {
                if bad {
                    self.causes
                        .push(FieldCause::forbidden(&child(path, k), msg));
                }
            }
        }
        if let Some(Value::Object(props)) = m.get("properties") {
            if props.contains_key("metadata") {
                self.causes.push(FieldCause::forbidden(
                    &key(&child(path, "properties"), "metadata"),
                    "must not be specified in a nested context",
                ));
            }
            for (k, pv) in props {
                let at = key(&child(path, "properties"), k);
                let p = self.nested(pv, &at, true, allow_rules);
                node.properties.insert(k.clone(), p);
            }
        }
        if let Some(iv) = m.get("items").filter(|v| v.is_object()) {
            node.items = Some(Box::new(self.nested(
                iv,
                &child(path, "items"),
                true,
                allow_rules,
            )));
        }
        if allow_rules {
            node.rules =
                cel::parse_rules(m, path, self.uncorrelatable.as_deref(), &mut self.causes);
        }
        node
    }
}

/// `anyOf: [{type: integer}, {type: string}]`, the int-or-string pattern
/// kube allows types in.
fn is_int_or_string_any_of(m: &Map<String, Value>) -> bool {
    let Some(Value::Array(any)) = m.get("anyOf") else {
        return false;
    };
    any.len() == 2
        && any[0] == serde_json::json!({"type": "integer"})
        && any[1] == serde_json::json!({"type": "string"})
}

/// The format kube validates for a type, `None` for one it strips.
fn supported_format(ty: &str, format: &str) -> Option<String> {
    let keep = match ty {
        "" | "string" => STRING_FORMATS.contains(&format.replace('-', "").as_str()),
        "integer" => format == "int32" || format == "int64",
        "number" => format == "float" || format == "double",
        _ => false,
    };
    keep.then(|| format.to_string())
}

fn last_line(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or(s)
        .to_string()
}
