//! A workload's selector (`ValidateLabelSelector`), what it matches
//! (`LabelSelectorAsSelector`) and the template's labels it must match;
//! shared by every workload kind.

use serde_json::{Map, Value};

use super::super::{empty, list, obj, text, Path};
use crate::kube::error::{BadValue, FieldCause};
use crate::kube::names;
use crate::kube::objectmeta::{self, FIELD_IMMUTABLE};

const SELECTOR_MISMATCH: &str = "`selector` does not match template `labels`";

pub(super) fn immutable_selector(
    old_spec: &Map<String, Value>,
    new_spec: &Map<String, Value>,
    path: &Path,
) -> Vec<FieldCause> {
    let (before, after) = (selector_value(old_spec), selector_value(new_spec));
    if before == after {
        return Vec::new();
    }
    vec![FieldCause::invalid_value(
        path.child("selector").as_str(),
        BadValue::label_selector(after),
        FIELD_IMMUTABLE,
    )]
}

pub(super) fn selector_value(spec: &Map<String, Value>) -> Option<&Value> {
    spec.get("selector").filter(|v| !v.is_null())
}

/// `ValidateLabelSelector`: matchLabels as labels, each expression's
/// operator, key and values.
pub(super) fn label_selector(sel: &Map<String, Value>, path: &Path) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    if let Some(labels) = obj(sel, "matchLabels") {
        causes.extend(objectmeta::validate_labels(
            labels,
            path.child("matchLabels").as_str(),
        ));
    }
    for (i, req) in list(sel, "matchExpressions").iter().enumerate() {
        let req = req.as_object().unwrap_or(empty());
        let at = path.child("matchExpressions").index(i);
        let values = list(req, "values");
        match text(req, "operator") {
            "In" | "NotIn" if values.is_empty() => causes.push(FieldCause::required(
                at.child("values").as_str(),
                "must be specified when `operator` is 'In' or 'NotIn'",
            )),
            "Exists" | "DoesNotExist" if !values.is_empty() => causes.push(FieldCause::forbidden(
                at.child("values").as_str(),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => causes.push(FieldCause::invalid(
                at.child("operator").as_str(),
                other,
                "not a valid selector operator",
            )),
        }
        let key = text(req, "key");
        for msg in names::qualified_name(key) {
            causes.push(FieldCause::invalid(at.child("key").as_str(), key, &msg));
        }
        for (j, v) in values.iter().enumerate() {
            let v = v.as_str().unwrap_or("");
            for msg in names::label_value(v) {
                causes.push(FieldCause::invalid(
                    at.child("values").index(j).as_str(),
                    v,
                    &msg,
                ));
            }
        }
    }
    causes
}

/// A selector as kube's `LabelSelectorAsSelector` makes it.
enum Selector<'a> {
    /// No selector: matches nothing.
    Nothing,
    /// An empty one: matches everything.
    Everything,
    Some(&'a Map<String, Value>),
}

impl Selector<'_> {
    fn of(spec: &Map<String, Value>) -> Selector<'_> {
        match obj(spec, "selector") {
            None => Selector::Nothing,
            Some(sel)
                if obj(sel, "matchLabels").is_none_or(Map::is_empty)
                    && list(sel, "matchExpressions").is_empty() =>
            {
                Selector::Everything
            }
            Some(sel) => Selector::Some(sel),
        }
    }

    fn is_empty(&self) -> bool {
        matches!(self, Selector::Everything)
    }

    fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        let sel = match self {
            Selector::Nothing => return false,
            Selector::Everything => return true,
            Selector::Some(sel) => sel,
        };
        let label = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        let labels_ok =
            obj(sel, "matchLabels").is_none_or(|m| m.iter().all(|(k, v)| label(k) == v.as_str()));
        labels_ok
            && list(sel, "matchExpressions").iter().all(|req| {
                let key = req.get("key").and_then(Value::as_str).unwrap_or("");
                let values: Vec<&str> = req
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|vs| vs.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                match req.get("operator").and_then(Value::as_str).unwrap_or("") {
                    "In" => label(key).is_some_and(|l| values.contains(&l)),
                    "NotIn" => label(key).is_none_or(|l| !values.contains(&l)),
                    "Exists" => label(key).is_some(),
                    "DoesNotExist" => label(key).is_none(),
                    _ => false,
                }
            })
    }
}

pub(super) fn template_labels(spec: &Map<String, Value>) -> Option<&Map<String, Value>> {
    obj(spec, "template")
        .and_then(|t| obj(t, "metadata"))
        .and_then(|m| obj(m, "labels"))
}

/// The selector's own checks: required (or not), valid, not empty.
/// Returns its causes and whether it converts to a selector.
pub(super) fn selector_checks(
    spec: &Map<String, Value>,
    path: &Path,
    word: &str,
    required: bool,
) -> (Vec<FieldCause>, bool) {
    let mut causes = Vec::new();
    let at = path.child("selector");
    let Some(sel) = obj(spec, "selector") else {
        if required {
            causes.push(FieldCause::required(at.as_str(), ""));
        }
        return (causes, true);
    };
    let errors = label_selector(sel, &at);
    let converts = errors.is_empty();
    causes.extend(errors);
    if obj(sel, "matchLabels").is_none_or(Map::is_empty) && list(sel, "matchExpressions").is_empty()
    {
        causes.push(FieldCause::invalid_value(
            at.as_str(),
            BadValue::label_selector(selector_value(spec)),
            &format!("empty selector is invalid for {word}"),
        ));
    }
    (causes, converts)
}

pub(super) fn selector_match(
    spec: &Map<String, Value>,
    path: &Path,
    check_empty: bool,
) -> Option<FieldCause> {
    let selector = Selector::of(spec);
    if check_empty && selector.is_empty() {
        return None;
    }
    let labels = template_labels(spec);
    (!selector.matches(labels)).then(|| {
        FieldCause::invalid_value(
            path.at(&["template", "metadata", "labels"]).as_str(),
            BadValue::string_map(labels),
            SELECTOR_MISMATCH,
        )
    })
}
