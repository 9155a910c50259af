//! `x-kubernetes-validations`: CEL rules of a schema, parsed when the
//! schema is and run on every value of their node, with kube's
//! (v1.33) wording: a rule that is false is `Invalid value: "<the
//! node's type>": <message, messageExpression's result, or "failed
//! rule: <rule>">` at the node's path (or its `fieldPath`), or the
//! `reason`'s error; a rule that fails to run is `<error> evaluating
//! rule: <rule>`. `self` is the value; `oldSelf` the stored object's
//! value at the same place (through properties, map keys and
//! `list-type: map` keys), and a rule that names `oldSelf` (a transition
//! rule) runs only where there is one.
//!
//! The `cel` crate (cel-rust, the maintained successor of
//! `cel-interpreter`) parses and evaluates; it has CEL's standard
//! macros and functions (`has`, `all`, `exists`, `exists_one`, `map`,
//! `filter`, `size`, `matches`, `contains`, `startsWith`, `endsWith`,
//! conversions). It has no type checker: a rule that parses but names
//! a field the schema lacks fails when it runs, not when the CRD is
//! written, and kube's extension libraries (`quantity`, `url`, `ip`,
//! `format`, list and regex extensions) are not there. No cost budget.

use std::fmt;
use std::sync::{Arc, LazyLock};

use serde_json::{Map, Value};

use super::{child, Additional, Node};
use crate::kube::error::{go_quote, BadValue, FieldCause};

/// CEL's standard functions and macros, built once: a context per rule
/// and value shares them (`Context::default` would build them anew).
static STDLIB: LazyLock<Arc<::cel::Env>> = LazyLock::new(|| Arc::new(::cel::Env::stdlib()));

/// The reasons a rule may give its errors, sorted as kube lists them.
const REASONS: [&str; 4] = [
    "FieldValueDuplicate",
    "FieldValueForbidden",
    "FieldValueInvalid",
    "FieldValueRequired",
];

/// One compiled rule.
pub(crate) struct Rule {
    rule: String,
    message: String,
    message_expression: Option<::cel::Program>,
    reason: Option<String>,
    /// `fieldPath` without its leading `.`.
    field_path: String,
    program: ::cel::Program,
    uses_old_self: bool,
}

impl fmt::Debug for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rule")
            .field("rule", &self.rule)
            .finish_non_exhaustive()
    }
}

/// The rule as kube shows it in a compile error (Go's `%#v` of
/// `apiextensions.ValidationRule`).
fn go_rule(m: &Map<String, Value>) -> BadValue {
    let text = |k: &str| go_quote(m.get(k).and_then(Value::as_str).unwrap_or(""));
    let reason = match m.get("reason").and_then(Value::as_str) {
        Some(r) => format!("(*apiextensions.FieldValueErrorReason)({})", go_quote(r)),
        None => "(*apiextensions.FieldValueErrorReason)(nil)".to_string(),
    };
    BadValue::Go(format!(
        "apiextensions.ValidationRule{{Rule:{}, Message:{}, MessageExpression:{}, Reason:{reason}, FieldPath:{}, OptionalOldSelf:(*bool)(nil)}}",
        text("rule"),
        text("message"),
        text("messageExpression"),
        text("fieldPath"),
    ))
}

/// The rules of a schema node, or the causes that refuse them;
/// `uncorrelatable` is the list above the node whose items have no old
/// value, where a transition rule cannot run.
pub(super) fn parse_rules(
    m: &Map<String, Value>,
    path: &str,
    uncorrelatable: Option<&str>,
    causes: &mut Vec<FieldCause>,
) -> Vec<Rule> {
    let at = child(path, "x-kubernetes-validations");
    let list = match m.get("x-kubernetes-validations") {
        None | Some(Value::Null) => return Vec::new(),
        Some(Value::Array(list)) => list,
        Some(other) => {
            causes.push(FieldCause::invalid_value(
                &at,
                BadValue::of_json(other),
                "must be a list",
            ));
            return Vec::new();
        }
    };
    let mut rules = Vec::new();
    for (i, entry) in list.iter().enumerate() {
        let here = format!("{at}[{i}]");
        let Some(e) = entry.as_object() else {
            causes.push(FieldCause::invalid_value(
                &here,
                BadValue::of_json(entry),
                "must be a JSON object",
            ));
            continue;
        };
        let text = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let (rule, message, message_expression, field_path) = (
            text("rule"),
            text("message"),
            text("messageExpression"),
            text("fieldPath"),
        );
        let before = causes.len();
        if rule.trim().is_empty() {
            causes.push(FieldCause::required(
                &child(&here, "rule"),
                "rule is not specified",
            ));
        } else if !message.is_empty() && message.trim().is_empty() {
            causes.push(FieldCause::invalid(
                &child(&here, "message"),
                &message,
                "must be non-empty if specified",
            ));
        } else if message.trim().contains('\n') {
            causes.push(FieldCause::invalid(
                &child(&here, "message"),
                &message,
                "must not contain line breaks",
            ));
        } else if rule.trim().contains('\n') && message.trim().is_empty() {
            causes.push(FieldCause::required(
                &child(&here, "message"),
                "message must be specified if rule contains line breaks",
            ));
        }
        if !message_expression.is_empty() && message_expression.trim().is_empty() {
            causes.push(FieldCause::required(
                &child(&here, "messageExpression"),
                "messageExpression must be non-empty if specified",
            ));
        }
        let reason = e.get("reason").and_then(Value::as_str).map(String::from);
        if let Some(r) = reason.as_deref().filter(|r| !REASONS.contains(r)) {
            causes.push(FieldCause::not_supported(
                &child(&here, "reason"),
                r,
                &REASONS,
            ));
        }
        if !field_path.is_empty() && field_path.trim().is_empty() {
            causes.push(FieldCause::invalid(
                &child(&here, "fieldPath"),
                &field_path,
                "must be non-empty if specified",
            ));
        }
        if causes.len() > before {
            continue;
        }
        let program = match ::cel::Program::compile(rule.trim()) {
            Ok(p) => p,
            Err(err) => {
                causes.push(FieldCause::invalid_value(
                    &child(&here, "rule"),
                    go_rule(e),
                    &format!("compilation failed: ERROR: <input>: {err}"),
                ));
                continue;
            }
        };
        let message_expression = if message_expression.trim().is_empty() {
            None
        } else {
            match ::cel::Program::compile(message_expression.trim()) {
                Ok(p) => Some(p),
                Err(err) => {
                    causes.push(FieldCause::invalid_value(
                        &child(&here, "messageExpression"),
                        go_rule(e),
                        &format!("messageExpression compilation failed: ERROR: <input>: {err}"),
                    ));
                    continue;
                }
            }
        };
        let uses_old_self = program.references().has_variable("oldSelf");
        if let Some(list) = uncorrelatable.filter(|_| uses_old_self) {
            causes.push(FieldCause::invalid(
                &child(&here, "rule"),
                &rule,
                &format!("oldSelf cannot be used on the uncorrelatable portion of the schema within {list}"),
            ));
            continue;
        }
        rules.push(Rule {
            rule,
            message,
            message_expression,
            reason,
            field_path: field_path.trim().trim_start_matches('.').to_string(),
            program,
            uses_old_self,
        });
    }
    rules
}

/// Run every rule of the tree on the object (`old`: the stored object).
pub(super) fn validate(root: &Node, obj: &Value, old: Option<&Value>) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    walk(root, obj, old, "", &mut causes);
    causes
}

fn walk(node: &Node, value: &Value, old: Option<&Value>, path: &str, causes: &mut Vec<FieldCause>) {
    if !value.is_null() {
        run(node, &node.rules, value, old, path, causes);
        for nested in &node.checks.all_of {
            run(node, &nested.rules, value, old, path, causes);
        }
    }
    match value {
        Value::Object(map) => {
            let old_map = old.and_then(Value::as_object);
            for (k, v) in map {
                let old_v = old_map.and_then(|m| m.get(k));
                if let Some(p) = node.properties.get(k) {
                    walk(p, v, old_v, &child(path, k), causes);
                } else if let Some(Additional::Schema(a)) = &node.additional {
                    walk(a, v, old_v, &format!("{path}[{k}]"), causes);
                }
            }
        }
        Value::Array(items) => {
            let Some(schema) = node.items.as_deref() else {
                return;
            };
            for (i, item) in items.iter().enumerate() {
                // A list-type map's items correlate with the old list's by
                // their keys, a set's by equality; an atomic list's not.
                let old_item = super::validate::correlated_item(node, item, old);
                walk(schema, item, old_item, &format!("{path}[{i}]"), causes);
            }
        }
        _ => {}
    }
}

/// A JSON value as kube hands it to CEL: a JSON integer is an `int`
/// (serde would make a positive one a `uint`, which CEL does not mix
/// with `int` literals), other numbers `double`.
fn to_cel(v: &Value) -> ::cel::Value {
    match v {
        Value::Null => ::cel::Value::Null,
        Value::Bool(b) => ::cel::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => ::cel::Value::Int(i),
            (None, Some(u)) => ::cel::Value::UInt(u),
            _ => ::cel::Value::Float(n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => ::cel::Value::String(s.clone().into()),
        Value::Array(items) => {
            ::cel::Value::List(items.iter().map(to_cel).collect::<Vec<_>>().into())
        }
        Value::Object(m) => ::cel::Value::Map(
            m.iter()
                .map(|(k, v)| (k.clone(), to_cel(v)))
                .collect::<std::collections::HashMap<String, ::cel::Value>>()
                .into(),
        ),
    }
}

fn bind(ctx: &mut ::cel::Context, name: &str, v: &Value) -> Result<(), ::cel::ExecutionError> {
    let val: Box<dyn ::cel::common::value::Val> = to_cel(v).try_into()?;
    ctx.add_variable_as_val(name, val);
    Ok(())
}

fn run(
    node: &Node,
    rules: &[Rule],
    value: &Value,
    old: Option<&Value>,
    path: &str,
    causes: &mut Vec<FieldCause>,
) {
    let base = if path.is_empty() { "<nil>" } else { path };
    let ty = BadValue::Str(node.ty.clone());
    // Ratcheting: a value unchanged since the stored object is not held
    // to the rules that do not compare it with that object.
    let unchanged = old.is_some_and(|o| super::validate::same(o, value));
    for rule in rules {
        if rule.uses_old_self && old.is_none() || !rule.uses_old_self && unchanged {
            continue;
        }
        let mut ctx = ::cel::Context::with_env(Arc::clone(&STDLIB));
        // Bound as values, converted here so a value CEL cannot hold is
        // an error of the rule, never a panic (JSON makes none).
        let bound = bind(&mut ctx, "self", value).and_then(|()| match old {
            Some(o) => bind(&mut ctx, "oldSelf", o),
            None => Ok(()),
        });
        let shown = if rule.message.trim().is_empty() {
            rule.rule.trim().to_string()
        } else {
            rule.message.trim().to_string()
        };
        if let Err(err) = bound {
            causes.push(FieldCause::invalid_value(
                base,
                ty.clone(),
                &format!("{err} evaluating rule: {shown}"),
            ));
            continue;
        }
        match rule.program.execute(&ctx) {
            Ok(::cel::Value::Bool(true)) => {}
            Ok(::cel::Value::Bool(false)) => {
                let field = if rule.field_path.is_empty() {
                    base.to_string()
                } else if path.is_empty() {
                    rule.field_path.clone()
                } else {
                    child(path, &rule.field_path)
                };
                let detail = rule
                    .message_expression
                    .as_ref()
                    .and_then(|p| match p.execute(&ctx) {
                        Ok(::cel::Value::String(s))
                            if !s.trim().is_empty() && !s.contains('\n') =>
                        {
                            Some(s.trim().to_string())
                        }
                        _ => None,
                    })
                    .unwrap_or_else(|| {
                        if rule.message.trim().is_empty() {
                            format!("failed rule: {shown}")
                        } else {
                            shown.clone()
                        }
                    });
                causes.push(match rule.reason.as_deref() {
                    Some("FieldValueForbidden") => FieldCause::forbidden(&field, &detail),
                    Some("FieldValueRequired") => FieldCause::required(&field, &detail),
                    Some("FieldValueDuplicate") => FieldCause::duplicate(&field, ty.clone()),
                    _ => FieldCause::invalid_value(&field, ty.clone(), &detail),
                });
            }
            Ok(other) => causes.push(FieldCause::invalid_value(
                base,
                ty.clone(),
                &format!(
                    "rule did not evaluate to a bool but to {:?} evaluating rule: {shown}",
                    other.type_of()
                ),
            )),
            Err(err) => causes.push(FieldCause::invalid_value(
                base,
                ty.clone(),
                &format!("{err} evaluating rule: {shown}"),
            )),
        }
    }
}
