//! An object checked against a schema tree, in three passes as kube runs
//! them: kube-openapi's value validation ([`openapi`]: type, format,
//! enum, the string, number, list and object bounds, required fields,
//! `allOf`/`anyOf`/`oneOf`/`not`), apiextensions' list sets and maps
//! ([`list_sets_and_maps`]: duplicates), and embedded resources
//! ([`embedded_resources`]: `apiVersion`, `kind`, metadata).
//!
//! Causes are what apiextensions makes of kube-openapi's errors
//! (`kubeOpenAPIResultToFieldErrors`): a missing field is `Required
//! value`, an enum miss `Unsupported value`, `maxLength` `Too long`,
//! `maxItems`/`maxProperties` `Too many`, a type or format miss
//! `FieldValueTypeInvalid`, anything else `Invalid value: <value>:
//! <kube-openapi's message>`; composite errors (`anyOf` ...) and range
//! errors name no field (kube prints `<nil>`).

use serde_json::{Map, Value};

use super::{Additional, Node};
use crate::kube::error::{go_quote, BadValue, FieldCause};
use crate::kube::names;
use crate::kube::objectmeta;
use crate::kube::resources::NameRule;

/// kube-openapi's `in` of every message: the object is a request body.
const IN: &str = "body";

fn child(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

/// Where causes go: the field of an error named `name` (its
/// kube-openapi path) is `base.name`, or `name` with no base; an error
/// without a name (composite, range) is at `base`, or kube's `<nil>`.
struct Out<'a> {
    base: Option<&'a str>,
    causes: Vec<FieldCause>,
}

impl Out<'_> {
    fn field(&self, name: &str) -> String {
        let name = name.trim_start_matches('.');
        match (self.base, name.is_empty()) {
            (Some(b), true) => b.to_string(),
            (Some(b), false) => child(b, name),
            (None, true) => "<nil>".to_string(),
            (None, false) => name.to_string(),
        }
    }

    fn invalid(&mut self, name: &str, value: BadValue, msg: &str) {
        let f = self.field(name);
        self.causes.push(FieldCause::invalid_value(&f, value, msg));
    }

    fn type_invalid(&mut self, name: &str, value: BadValue, msg: &str) {
        let f = self.field(name);
        let mut c = FieldCause::invalid_value(&f, value, msg);
        c.reason = "FieldValueTypeInvalid";
        self.causes.push(c);
    }

    fn too_many(&mut self, name: &str, actual: usize, max: i64) {
        self.causes.push(FieldCause {
            reason: "FieldValueTooMany",
            field: self.field(name),
            message: format!("Too many: {actual}: must have at most {max} items"),
        });
    }

    /// An error kube-openapi does not attach to a field.
    fn unnamed(&mut self, msg: &str) {
        let f = self.field("");
        self.causes.push(FieldCause::invalid(&f, "", msg));
    }
}

/// kube-openapi's validation of `value` against `node`; `name` is the
/// value's path (`""` for the object itself), `base` where the causes'
/// fields start (`None` for an object: kube's fields are the paths).
///
/// `old` is the stored value on an update: kube's validation ratcheting
/// (GA in 1.33) leaves a value that equals its old counterpart
/// unchecked, so an object that became invalid under a newer schema can
/// still be updated elsewhere. Old values correlate through properties,
/// map keys, `list-type: map` keys and equal `set` items.
pub(super) fn openapi(
    node: &Node,
    value: &Value,
    old: Option<&Value>,
    name: &str,
    base: Option<&str>,
) -> Vec<FieldCause> {
    let mut out = Out {
        base,
        causes: Vec::new(),
    };
    check(node, value, old, name, &mut out);
    out.causes
}

/// The item of an old list that a new item correlates with: by the keys
/// of a `list-type: map`, by equality in a `set`; none in an atomic list.
pub(super) fn correlated_item<'a>(
    node: &Node,
    item: &Value,
    old: Option<&'a Value>,
) -> Option<&'a Value> {
    let olds = old?.as_array()?;
    match node.list_type.as_deref() {
        Some("map") => olds.iter().find(|o| {
            node.list_map_keys
                .iter()
                .all(|k| match (o.get(k), item.get(k)) {
                    (Some(a), Some(b)) => same(a, b),
                    (None, None) => true,
                    _ => false,
                })
        }),
        Some("set") => olds.iter().find(|o| same(o, item)),
        _ => None,
    }
}

/// The JSON type kube-openapi infers for a value.
fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn types_of(node: &Node) -> Vec<&str> {
    if node.int_or_string {
        vec!["integer", "string"]
    } else if node.ty.is_empty() {
        Vec::new()
    } else {
        vec![node.ty.as_str()]
    }
}

fn type_message(name: &str, ty: &str, got: &str) -> String {
    format!("{name} in {IN} must be of type {ty}: {}", go_quote(got))
}

fn check(node: &Node, value: &Value, old: Option<&Value>, name: &str, out: &mut Out) {
    if old.is_some_and(|o| same(o, value)) {
        return;
    }
    let types = types_of(node);
    if value.is_null() {
        if !types.is_empty() && !node.nullable {
            let ty = types.join(",");
            out.type_invalid(
                name,
                BadValue::from("null"),
                &type_message(name, &ty, "null"),
            );
        }
        enumeration(node, value, name, out);
        return;
    }
    type_check(node, &types, value, name, out);
    composites(node, value, name, out);
    match value {
        Value::String(s) => {
            string(node, s, name, out);
            format(node, s, name, out);
        }
        Value::Number(_) => number(node, value, name, out),
        Value::Array(items) => list(node, items, old, name, out),
        _ => {}
    }
    enumeration(node, value, name, out);
    if let Value::Object(map) = value {
        object(node, map, old.and_then(Value::as_object), name, out);
    }
}

/// `typeValidator`: the value's JSON type against the schema's (an
/// integral number passes as an integer; an integer as a number).
fn type_check(node: &Node, types: &[&str], value: &Value, name: &str, out: &mut Out) {
    if types.is_empty() {
        return;
    }
    let got = json_type(value);
    let float_int = got == "number"
        && value.as_f64().is_some_and(|f| f.fract() == 0.0)
        && types.contains(&"integer");
    let int_float = got == "integer" && types.contains(&"number");
    let scalar_or_object = !matches!(value, Value::String(_) | Value::Array(_));
    if let Some(format) = node.format.as_deref() {
        let value_format = match got {
            "integer" => "int64",
            "number" => "double",
            _ => "",
        };
        let lower = (format == "int64" && value_format == "int32")
            || (format == "double" && value_format == "float");
        if scalar_or_object
            && !(types.contains(&got) || value_format == format || float_int || int_float || lower)
        {
            out.type_invalid(
                name,
                BadValue::from(value_format),
                &type_message(name, format, value_format),
            );
            return;
        }
        let numeric = types.contains(&"number") || types.contains(&"integer");
        if !numeric && matches!(value, Value::String(_) | Value::Array(_)) {
            return;
        }
    }
    if !(types.contains(&got) || float_int || int_float) {
        out.type_invalid(
            name,
            BadValue::from(got),
            &type_message(name, &types.join(","), got),
        );
    }
}

/// `schemaPropsValidator`: `anyOf`, `oneOf`, `allOf`, `not`. Of failed
/// alternatives the one with the fewest problems is reported (kube picks
/// the one with the most passed checks; both name the closest one).
fn composites(node: &Node, value: &Value, name: &str, out: &mut Out) {
    let c = &node.checks;
    let run = |n: &Node, out: &Out| {
        let mut inner = Out {
            base: out.base,
            causes: Vec::new(),
        };
        check(n, value, None, name, &mut inner);
        inner.causes
    };
    let fewest = |results: Vec<Vec<FieldCause>>| results.into_iter().min_by_key(Vec::len);
    if !c.any_of.is_empty() {
        let results: Vec<_> = c.any_of.iter().map(|n| run(n, out)).collect();
        if !results.iter().any(Vec::is_empty) {
            out.unnamed(&format!(
                "{} must validate at least one schema (anyOf)",
                go_quote(name)
            ));
            out.causes.extend(fewest(results).unwrap_or_default());
        }
    }
    if !c.one_of.is_empty() {
        let results: Vec<_> = c.one_of.iter().map(|n| run(n, out)).collect();
        let valid = results.iter().filter(|r| r.is_empty()).count();
        if valid != 1 {
            let more = if valid == 0 {
                "Found none valid".to_string()
            } else {
                format!("Found {valid} valid alternatives")
            };
            out.unnamed(&format!(
                "{} must validate one and only one schema (oneOf). {more}",
                go_quote(name)
            ));
            if valid == 0 {
                out.causes.extend(fewest(results).unwrap_or_default());
            }
        }
    }
    if !c.all_of.is_empty() {
        let mut valid = 0;
        for n in &c.all_of {
            let r = run(n, out);
            if r.is_empty() {
                valid += 1;
            }
            out.causes.extend(r);
        }
        if valid != c.all_of.len() {
            let more = if valid == 0 { ". None validated" } else { "" };
            out.unnamed(&format!(
                "{} must validate all the schemas (allOf){more}",
                go_quote(name)
            ));
        }
    }
    if let Some(not) = &c.not {
        if run(not, out).is_empty() {
            out.unnamed(&format!(
                "{} must not validate the schema (not)",
                go_quote(name)
            ));
        }
    }
}

/// `stringValidator`: lengths in runes, then the pattern; the first
/// problem only.
fn string(node: &Node, s: &str, name: &str, out: &mut Out) {
    let c = &node.checks;
    let runes = s.chars().count() as i64;
    if let Some(max) = c.max_length.filter(|m| runes > *m) {
        let f = out.field(name);
        out.causes.push(FieldCause::too_long(&f, max as usize));
        return;
    }
    if let Some(min) = c.min_length.filter(|m| runes < *m) {
        out.invalid(
            name,
            BadValue::from(s),
            &format!("{name} in {IN} should be at least {min} chars long"),
        );
        return;
    }
    if let Some((pattern, re)) = &c.pattern {
        if !re.is_match(s) {
            out.invalid(
                name,
                BadValue::from(s),
                &format!("{name} in {IN} should match '{pattern}'"),
            );
        }
    }
}

/// `formatValidator`: a string in the formats kube checks.
fn format(node: &Node, s: &str, name: &str, out: &mut Out) {
    let Some(format) = node.format.as_deref() else {
        return;
    };
    if matches!(format, "int32" | "int64" | "float" | "double") {
        return;
    }
    if !formats::valid(&format.replace('-', ""), s) {
        out.type_invalid(name, BadValue::from(s), &type_message(name, format, s));
    }
}

/// Go's `%v` of a float64 bound: integral values without a fraction.
fn go_float(f: f64) -> String {
    if f.fract() == 0.0 && f.abs() < 1e21 {
        format!("{}", f as i128)
    } else {
        format!("{f}")
    }
}

/// `numberValidator`: the format's range, `multipleOf`, `minimum`,
/// `maximum` (in kube's order: multiple, minimum, maximum).
fn number(node: &Node, value: &Value, name: &str, out: &mut Out) {
    let c = &node.checks;
    let Some(x) = value.as_f64() else { return };
    let int = value.as_i64();
    let shown = BadValue::of_json(value);
    // `IsValueValidAgainstRange`: the value fits the type's format.
    let (ty, format) = (node.ty.as_str(), node.format.as_deref());
    // Go formats the value and parses it back: an integral float (`3.0`
    // prints as `3`) fits an integer.
    let integral = int.or_else(|| (x.fract() == 0.0 && x.abs() < 9.2e18).then_some(x as i64));
    let fits = match (ty, format) {
        ("integer", Some("int32")) => integral.is_some_and(|i| i32::try_from(i).is_ok()),
        ("integer", _) => integral.is_some(),
        (_, Some("float")) => x.abs() <= f64::from(f32::MAX),
        _ => true,
    };
    if !fits {
        let msg = match format {
            Some(f) => format!("Checked value must be of type {ty} with format {f} in {name}"),
            None => format!("Checked value must be of type {ty} (default format) in {name}"),
        };
        out.unnamed(&msg);
    }
    if let Some(factor) = c.multiple_of {
        let ok = match int {
            Some(i) if factor.fract() == 0.0 => i % (factor as i64) == 0,
            _ => (x / factor).fract() == 0.0,
        };
        if !ok {
            out.invalid(
                name,
                shown.clone(),
                &format!(
                    "{name} in {IN} should be a multiple of {}",
                    go_float(factor)
                ),
            );
        }
    }
    if let Some(min) = c.minimum {
        let bad = if c.exclusive_minimum {
            x <= min
        } else {
            x < min
        };
        if bad {
            let how = if c.exclusive_minimum {
                "greater than"
            } else {
                "greater than or equal to"
            };
            out.invalid(
                name,
                shown.clone(),
                &format!("{name} in {IN} should be {how} {}", go_float(min)),
            );
        }
    }
    if let Some(max) = c.maximum {
        let bad = if c.exclusive_maximum {
            x >= max
        } else {
            x > max
        };
        if bad {
            let how = if c.exclusive_maximum {
                "less than"
            } else {
                "less than or equal to"
            };
            out.invalid(
                name,
                shown,
                &format!("{name} in {IN} should be {how} {}", go_float(max)),
            );
        }
    }
}

/// `schemaSliceValidator`: every item, then `minItems`, `maxItems`,
/// `uniqueItems`.
fn list(node: &Node, items: &[Value], old: Option<&Value>, name: &str, out: &mut Out) {
    if let Some(schema) = &node.items {
        for (i, item) in items.iter().enumerate() {
            let old_item = correlated_item(node, item, old);
            check(schema, item, old_item, &format!("{name}[{i}]"), out);
        }
    }
    let c = &node.checks;
    if let Some(min) = c.min_items.filter(|m| (items.len() as i64) < *m) {
        out.invalid(
            name,
            BadValue::Int(items.len() as i64),
            &format!("{name} in {IN} should have at least {min} items"),
        );
    }
    if let Some(max) = c.max_items.filter(|m| items.len() as i64 > *m) {
        out.too_many(name, items.len(), max);
    }
    if c.unique_items {
        let dup = items
            .iter()
            .enumerate()
            .any(|(i, a)| items[..i].iter().any(|b| same(a, b)));
        if dup {
            out.invalid(
                name,
                BadValue::from(""),
                &format!("{name} in {IN} shouldn't contain duplicates"),
            );
        }
    }
}

/// JSON equality with numbers compared by value (Go converts an integer
/// to an enum's float before comparing).
pub(super) fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(i), Some(j)) => i == j,
            _ => x.as_f64() == y.as_f64(),
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// `basicCommonValidator`: `enum`, as `Unsupported value` with kube's
/// list (strings as they are, other values as JSON).
fn enumeration(node: &Node, value: &Value, name: &str, out: &mut Out) {
    let allowed = &node.checks.enumeration;
    if allowed.is_empty() || allowed.iter().any(|a| same(a, value)) {
        return;
    }
    let list: Vec<String> = allowed
        .iter()
        .map(|a| match a {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect();
    let refs: Vec<&str> = list.iter().map(String::as_str).collect();
    let f = out.field(name);
    out.causes.push(FieldCause::not_supported_value(
        &f,
        BadValue::of_json(value),
        &refs,
    ));
}

/// `objectValidator`: property counts, `additionalProperties`, the
/// properties, then `required`.
fn object(
    node: &Node,
    map: &Map<String, Value>,
    old: Option<&Map<String, Value>>,
    name: &str,
    out: &mut Out,
) {
    let old_of = |k: &str| old.and_then(|m| m.get(k));
    let c = &node.checks;
    let n = map.len();
    if let Some(min) = c.min_properties.filter(|m| (n as i64) < *m) {
        out.invalid(
            name,
            BadValue::Int(n as i64),
            &format!("{name} in {IN} should have at least {min} properties"),
        );
    }
    if let Some(max) = c.max_properties.filter(|m| n as i64 > *m) {
        out.too_many(name, n, max);
    }
    if let Some(Additional::Schema(schema)) = &node.additional {
        for (k, v) in map {
            if !node.properties.contains_key(k) {
                check(schema, v, old_of(k), &format!("{name}.{k}"), out);
            }
        }
    }
    for (k, schema) in &node.properties {
        if let Some(v) = map.get(k) {
            check(schema, v, old_of(k), &child(name, k), out);
        }
    }
    for k in &c.required {
        if !map.contains_key(k) {
            let f = out.field(&format!("{name}.{k}"));
            out.causes.push(FieldCause::required(&f, ""));
        }
    }
}

/// Go's `%#v` of a value decoded from JSON (what kube's `Duplicate
/// value` shows): `"a"`, `80`, `map[string]interface {}{"name":"a"}`.
pub(super) fn go_value(v: &Value) -> String {
    match v {
        Value::Null => "interface {}(nil)".to_string(),
        Value::String(s) => go_quote(s),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match n.as_i64() {
            Some(i) => i.to_string(),
            None => go_float(n.as_f64().unwrap_or_default()),
        },
        Value::Array(items) => format!(
            "[]interface {{}}{{{}}}",
            items.iter().map(go_value).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(m) => format!(
            "map[string]interface {{}}{{{}}}",
            m.iter()
                .map(|(k, v)| format!("{}:{}", go_quote(k), go_value(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

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
        for msg in objectmeta::name_errors(NameRule::PathSegment, generate_name, true) {
            causes.push(FieldCause::invalid(
                &child(at, "generateName"),
                generate_name,
                &msg,
            ));
        }
    }
    let name = text("name");
    if !name.is_empty() {
        for msg in objectmeta::name_errors(NameRule::PathSegment, name, false) {
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

/// The string formats kube-openapi's default registry checks, as its
/// `strfmt` validates them (go-openapi's regular expressions and
/// parsers).
mod formats {
    use std::sync::LazyLock;

    use regex::Regex;

    fn re(pattern: &str) -> Regex {
        // The patterns below are constants of this file, covered by its
        // tests: one that does not compile is a build defect.
        Regex::new(pattern).expect("a valid format pattern")
    }

    static HOSTNAME: LazyLock<Regex> = LazyLock::new(|| {
        re(
            r"^([a-zA-Z0-9\p{S}\p{L}]((-?[a-zA-Z0-9\p{S}\p{L}]{0,62})?)|([a-zA-Z0-9\p{S}\p{L}](([a-zA-Z0-9-\p{S}\p{L}]{0,61}[a-zA-Z0-9\p{S}\p{L}])?)(\.)){1,}([a-zA-Z\p{L}]){2,63})$",
        )
    });
    static EMAIL: LazyLock<Regex> = LazyLock::new(|| re(r"^[^@\s]+@[^@\s]+$"));
    static UUID: LazyLock<Regex> = LazyLock::new(|| {
        re(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$")
    });
    static UUID3: LazyLock<Regex> = LazyLock::new(|| {
        re(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$")
    });
    static UUID4: LazyLock<Regex> = LazyLock::new(|| {
        re(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$")
    });
    static UUID5: LazyLock<Regex> = LazyLock::new(|| {
        re(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$")
    });
    static ISBN10: LazyLock<Regex> = LazyLock::new(|| re(r"^(?:[0-9]{9}X|[0-9]{10})$"));
    static ISBN13: LazyLock<Regex> = LazyLock::new(|| re(r"^(?:[0-9]{13})$"));
    static CREDIT: LazyLock<Regex> = LazyLock::new(|| {
        re(
            r"^(?:4[0-9]{12}(?:[0-9]{3})?|5[1-5][0-9]{14}|6(?:011|5[0-9][0-9])[0-9]{12}|3[47][0-9]{13}|3(?:0[0-5]|[68][0-9])[0-9]{11}|(?:2131|1800|35\d{3})\d{11})$",
        )
    });
    static SSN: LazyLock<Regex> = LazyLock::new(|| re(r"^\d{3}[- ]?\d{2}[- ]?\d{4}$"));
    static HEXCOLOR: LazyLock<Regex> = LazyLock::new(|| re(r"^#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$"));
    static RGBCOLOR: LazyLock<Regex> = LazyLock::new(|| {
        re(
            r"^rgb\(\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*,\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*,\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*\)$",
        )
    });
    static DURATION: LazyLock<Regex> = LazyLock::new(|| {
        re(
            r"^[-+]?([0-9]*(\.[0-9]*)?[a-z]+)+$|^(\d+)\s*(ns|us|µs|ms|s|m|h|d|w)$|^(\d+)\s*(nanoseconds?|microseconds?|milliseconds?|seconds?|minutes?|hours?|days?|weeks?)$",
        )
    });
    static BSON: LazyLock<Regex> = LazyLock::new(|| re(r"^[0-9a-fA-F]{24}$"));
    static DATETIME: LazyLock<Regex> = LazyLock::new(|| {
        re(r"^\d{4}-\d{2}-\d{2}([Tt ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?([Zz]|[+-]\d{2}:?\d{2})?)?$")
    });

    /// Whether `s` is valid in the (normalised, `-`-less) format.
    pub(super) fn valid(format: &str, s: &str) -> bool {
        use base64::Engine as _;
        match format {
            "bsonobjectid" => BSON.is_match(s),
            "uri" => url::Url::parse(s).is_ok(),
            "email" => EMAIL.is_match(s),
            "hostname" => s.len() <= 255 && HOSTNAME.is_match(s),
            "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
            "ipv6" => s.contains(':') && s.parse::<std::net::Ipv6Addr>().is_ok(),
            "cidr" => cidr(s),
            "mac" => mac(s),
            "uuid" => UUID.is_match(s),
            "uuid3" => UUID3.is_match(s),
            "uuid4" => UUID4.is_match(s),
            "uuid5" => UUID5.is_match(s),
            "isbn" => {
                ISBN10.is_match(&s.replace(['-', ' '], ""))
                    || ISBN13.is_match(&s.replace(['-', ' '], ""))
            }
            "isbn10" => ISBN10.is_match(&s.replace(['-', ' '], "")),
            "isbn13" => ISBN13.is_match(&s.replace(['-', ' '], "")),
            "creditcard" => {
                CREDIT.is_match(&s.chars().filter(char::is_ascii_digit).collect::<String>())
            }
            "ssn" => SSN.is_match(s),
            "hexcolor" => HEXCOLOR.is_match(s),
            "rgbcolor" => RGBCOLOR.is_match(s),
            "byte" => base64::engine::general_purpose::STANDARD.decode(s).is_ok(),
            "date" => chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").is_ok() && s.len() == 10,
            "datetime" => DATETIME.is_match(s) && datetime(s),
            "duration" => DURATION.is_match(s),
            _ => true,
        }
    }

    /// strfmt's `ParseDateTime`: RFC 3339 with or without fractional
    /// seconds, `T`, `t` or a space between date and time.
    fn datetime(s: &str) -> bool {
        let normal = s
            .replacen(' ', "T", 1)
            .replacen('t', "T", 1)
            .replacen('z', "Z", 1);
        chrono::DateTime::parse_from_rfc3339(&normal).is_ok()
            || chrono::NaiveDateTime::parse_from_str(&normal, "%Y-%m-%dT%H:%M:%S%.f").is_ok()
            || chrono::NaiveDateTime::parse_from_str(&normal, "%Y-%m-%dT%H:%M").is_ok()
            || chrono::NaiveDate::parse_from_str(&normal, "%Y-%m-%d").is_ok()
            || chrono::DateTime::parse_from_str(&normal, "%Y-%m-%dT%H:%M:%S%.f%z").is_ok()
    }

    fn cidr(s: &str) -> bool {
        let Some((ip, bits)) = s.split_once('/') else {
            return false;
        };
        let Ok(bits) = bits.parse::<u8>() else {
            return false;
        };
        match ip.parse::<std::net::IpAddr>() {
            Ok(std::net::IpAddr::V4(_)) => bits <= 32,
            Ok(std::net::IpAddr::V6(_)) => bits <= 128,
            Err(_) => false,
        }
    }

    /// Go's `net.ParseMAC`: 6, 8 or 20 octets, `:`- or `-`-separated
    /// pairs or `.`-separated quads.
    fn mac(s: &str) -> bool {
        let hex = |p: &str, n: usize| p.len() == n && p.chars().all(|c| c.is_ascii_hexdigit());
        let ok_len = |n: usize| n == 6 || n == 8 || n == 20;
        for sep in [':', '-'] {
            let parts: Vec<&str> = s.split(sep).collect();
            if parts.len() > 1 && ok_len(parts.len()) && parts.iter().all(|p| hex(p, 2)) {
                return true;
            }
        }
        let quads: Vec<&str> = s.split('.').collect();
        quads.len() > 1 && ok_len(quads.len() * 2) && quads.iter().all(|p| hex(p, 4))
    }
}
