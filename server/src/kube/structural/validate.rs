//! An object checked against a schema tree by kube-openapi's value
//! validation ([`openapi`]: type, format, enum, the string, number, list
//! and object bounds, required fields, `allOf`/`anyOf`/`oneOf`/`not`),
//! the first of the three passes kube runs; the list-type and
//! embedded-resource passes are `lists` and `embedded`.
//!
//! Causes are what apiextensions makes of kube-openapi's errors
//! (`kubeOpenAPIResultToFieldErrors`): a missing field is `Required
//! value`, an enum miss `Unsupported value`, `maxLength` `Too long`,
//! `maxItems`/`maxProperties` `Too many`, a type or format miss
//! `FieldValueTypeInvalid`, anything else `Invalid value: <value>:
//! <kube-openapi's message>`; composite errors (`anyOf` ...) and range
//! errors name no field (kube prints `<nil>`).
use serde_json::{Map, Value};

use super::{child, formats};
use super::{Additional, Node};
use crate::kube::error::{go_quote, BadValue, FieldCause};

/// kube-openapi's `in` of every message: the object is a request body.
const IN: &str = "body";

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
