//! Label and field selectors, parsed as kube parses them and matched
//! against JSON objects.
//!
//! Hand-written: there is no maintained Rust crate for kube's selector
//! grammar, and the grammar is small (comma-separated requirements).

use serde_json::Value;

use crate::kube::error::KubeError;
use crate::kube::resources::ResourceType;

#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelReq {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
    Greater(String, i64),
    Less(String, i64),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldReq {
    path: String,
    value: String,
    equal: bool,
}

/// The selectors of one list, watch or deletecollection request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selectors {
    labels: Vec<LabelReq>,
    fields: Vec<FieldReq>,
}

impl Selectors {
    /// Parses `labelSelector` and `fieldSelector` for type `rt`; an unknown
    /// field or a syntax error is a `400`.
    pub fn parse(
        rt: &ResourceType,
        label: Option<&str>,
        field: Option<&str>,
    ) -> Result<Self, KubeError> {
        Ok(Self {
            labels: match label {
                Some(s) => parse_labels(s).map_err(|e| {
                    KubeError::BadRequest(format!("unable to parse requirement: {e}"))
                })?,
                None => Vec::new(),
            },
            fields: match field {
                Some(s) => parse_fields(rt, s)?,
                None => Vec::new(),
            },
        })
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }

    /// The `metadata.name=x` requirement, if the field selector has one.
    pub fn required_name(&self) -> Option<&str> {
        self.fields
            .iter()
            .find(|f| f.equal && f.path == "metadata.name")
            .map(|f| f.value.as_str())
    }

    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels").and_then(Value::as_object);
        let label = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        let labels_ok = self.labels.iter().all(|req| match req {
            LabelReq::Equals(k, v) => label(k) == Some(v.as_str()),
            LabelReq::NotEquals(k, v) => label(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => label(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            LabelReq::NotIn(k, vs) => label(k).is_none_or(|l| !vs.iter().any(|v| v == l)),
            LabelReq::Exists(k) => label(k).is_some(),
            LabelReq::NotExists(k) => label(k).is_none(),
            LabelReq::Greater(k, n) => label(k)
                .and_then(|l| l.parse::<i64>().ok())
                .is_some_and(|l| l > *n),
            LabelReq::Less(k, n) => label(k)
                .and_then(|l| l.parse::<i64>().ok())
                .is_some_and(|l| l < *n),
        });
        labels_ok
            && self.fields.iter().all(|f| {
                let pointer = format!("/{}", f.path.replace('.', "/"));
                let actual = obj.pointer(&pointer).and_then(Value::as_str).unwrap_or("");
                (actual == f.value) == f.equal
            })
    }
}

/// Fields every type can be selected by, plus the per-type extras.
fn supported_fields(rt: &ResourceType) -> &'static [&'static str] {
    match rt.plural {
        "pods" => &[
            "metadata.name",
            "metadata.namespace",
            "spec.nodeName",
            "status.phase",
        ],
        _ => &["metadata.name", "metadata.namespace"],
    }
}

fn parse_fields(rt: &ResourceType, s: &str) -> Result<Vec<FieldReq>, KubeError> {
    let mut out = Vec::new();
    for part in split_unescaped(s, ',') {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let (path, value, equal) = if let Some(i) = part.find("!=") {
            (&part[..i], &part[i + 2..], false)
        } else if let Some(i) = part.find("==") {
            (&part[..i], &part[i + 2..], true)
        } else if let Some(i) = part.find('=') {
            (&part[..i], &part[i + 1..], true)
        } else {
            return Err(KubeError::BadRequest(format!(
                "invalid field selector: {part:?}: no operator"
            )));
        };
        let path = path.trim();
        if !supported_fields(rt).contains(&path) {
            let message = if rt.plural == "pods" {
                format!("field label not supported: {path}")
            } else {
                format!("\"{path}\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"")
            };
            return Err(KubeError::BadRequest(message));
        }
        out.push(FieldReq {
            path: path.to_string(),
            value: unescape(value.trim()),
            equal,
        });
    }
    Ok(out)
}

fn split_unescaped(s: &str, sep: char) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut escaped = false;
    for c in s.chars() {
        if escaped {
            if let Some(p) = parts.last_mut() {
                p.push('\\');
                p.push(c);
            }
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == sep {
            parts.push(String::new());
        } else if let Some(p) = parts.last_mut() {
            p.push(c);
        }
    }
    parts
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}

// kube's label formats, shared with metadata validation.
fn valid_label_key(k: &str) -> bool {
    crate::kube::names::qualified_name(k).is_empty()
}

fn valid_label_value(v: &str) -> bool {
    crate::kube::names::label_value(v).is_empty()
}

/// Splits on commas that are not inside a `( ... )` set.
fn split_requirements(s: &str) -> Result<Vec<&str>, String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err("unbalanced ')'".into());
                }
            }
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unbalanced '('".into());
    }
    out.push(&s[start..]);
    Ok(out)
}

fn parse_labels(s: &str) -> Result<Vec<LabelReq>, String> {
    let mut out = Vec::new();
    if s.trim().is_empty() {
        return Ok(out);
    }
    for raw in split_requirements(s)? {
        let req = raw.trim();
        if req.is_empty() {
            return Err(format!("found '', expected: identifier in {s:?}"));
        }
        let key_ok = |k: &str| -> Result<String, String> {
            let k = k.trim();
            if valid_label_key(k) {
                Ok(k.to_string())
            } else {
                Err(format!("invalid label key {k:?}"))
            }
        };
        let val_ok = |v: &str| -> Result<String, String> {
            let v = v.trim();
            if valid_label_value(v) {
                Ok(v.to_string())
            } else {
                Err(format!("invalid label value: {v:?}"))
            }
        };
        let set = |rest: &str| -> Result<Vec<String>, String> {
            let rest = rest.trim();
            let inner = rest
                .strip_prefix('(')
                .and_then(|r| r.strip_suffix(')'))
                .ok_or_else(|| format!("expected a '(...)' set in {req:?}"))?;
            inner.split(',').map(val_ok).collect()
        };
        if let Some(k) = req.strip_prefix('!') {
            out.push(LabelReq::NotExists(key_ok(k)?));
        } else if let Some(i) = req.find("!=") {
            out.push(LabelReq::NotEquals(
                key_ok(&req[..i])?,
                val_ok(&req[i + 2..])?,
            ));
        } else if let Some(i) = req.find("==") {
            out.push(LabelReq::Equals(key_ok(&req[..i])?, val_ok(&req[i + 2..])?));
        } else if let Some(i) = req.find('=') {
            out.push(LabelReq::Equals(key_ok(&req[..i])?, val_ok(&req[i + 1..])?));
        } else if let Some(i) = req.find(" notin ") {
            out.push(LabelReq::NotIn(key_ok(&req[..i])?, set(&req[i + 7..])?));
        } else if let Some(i) = req.find(" in ") {
            out.push(LabelReq::In(key_ok(&req[..i])?, set(&req[i + 4..])?));
        } else if let Some(i) = req.find('>') {
            let n = req[i + 1..]
                .trim()
                .parse()
                .map_err(|_| format!("invalid integer in {req:?}"))?;
            out.push(LabelReq::Greater(key_ok(&req[..i])?, n));
        } else if let Some(i) = req.find('<') {
            let n = req[i + 1..]
                .trim()
                .parse()
                .map_err(|_| format!("invalid integer in {req:?}"))?;
            out.push(LabelReq::Less(key_ok(&req[..i])?, n));
        } else {
            out.push(LabelReq::Exists(key_ok(req)?));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::resources;
    use serde_json::json;

    fn sel(label: &str, field: &str) -> Selectors {
        let pods = resources::find("", "v1", "pods").expect("pods");
        Selectors::parse(
            pods,
            Some(label).filter(|s| !s.is_empty()),
            Some(field).filter(|s| !s.is_empty()),
        )
        .expect("parse")
    }

    #[test]
    fn label_operators_match_as_kube_defines_them() {
        let obj =
            json!({"metadata": {"name": "a", "labels": {"app": "web", "tier": "fe", "n": "5"}}});
        for (s, want) in [
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("missing!=x", true),
            ("app in (web,db)", true),
            ("app notin (web)", false),
            ("missing notin (x)", true),
            ("app", true),
            ("!app", false),
            ("!missing", true),
            ("n>4,n<6", true),
            ("app=web,tier=be", false),
        ] {
            assert_eq!(sel(s, "").matches(&obj), want, "{s}");
        }
    }

    #[test]
    fn field_selectors_and_their_errors() {
        let obj =
            json!({"metadata": {"name": "a", "namespace": "d"}, "status": {"phase": "Running"}});
        assert!(sel("", "metadata.name=a,status.phase=Running").matches(&obj));
        assert!(!sel("", "metadata.namespace!=d").matches(&obj));
        let cm = resources::find("", "v1", "configmaps").expect("cm");
        match Selectors::parse(cm, None, Some("spec.x=1")) {
            Err(KubeError::BadRequest(m)) => {
                assert!(m.contains("is not a known field selector"), "{m}")
            }
            other => panic!("{other:?}"),
        }
        assert!(Selectors::parse(cm, Some("a in (b"), None).is_err());
        assert!(Selectors::parse(cm, Some("Bad Key=1"), None).is_err());
    }
}

/// Property tests: any selector string parses or is a `400`, and a parsed
/// selector matches any object without panicking.
#[cfg(test)]
mod proptests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::fuzz;
    use crate::kube::resources;

    /// Selector text built from the grammar's tokens, and arbitrary text.
    fn selector() -> impl Strategy<Value = String> {
        let token = proptest::sample::select(
            &[
                "app",
                "tier",
                "example.com/app",
                "metadata.name",
                "metadata.namespace",
                "spec.nodeName",
                "status.phase",
                "=",
                "==",
                "!=",
                "!",
                " in ",
                " notin ",
                "(",
                ")",
                ",",
                ">",
                "<",
                "5",
                "-1",
                "99999999999999999999",
                "web",
                "\\",
                "\\,",
                " ",
                "\u{0}",
                "é",
            ][..],
        );
        prop_oneof![
            3 => proptest::collection::vec(token, 0..10).prop_map(|t| t.concat()),
            1 => fuzz::text(),
        ]
    }

    proptest! {
        #![proptest_config(fuzz::config())]

        #[test]
        fn any_selector_parses_or_is_a_bad_request(
            label in proptest::option::of(selector()),
            field in proptest::option::of(selector()),
            obj in fuzz::object_value(),
        ) {
            for rt in resources::RESOURCES {
                match Selectors::parse(rt, label.as_deref(), field.as_deref()) {
                    Ok(s) => {
                        let _ = s.matches(&obj);
                        let _ = s.required_name();
                    }
                    Err(e) => prop_assert!(matches!(e, KubeError::BadRequest(_)), "{e:?}"),
                }
            }
        }

        #[test]
        fn an_equality_selector_matches_exactly_the_objects_with_that_label(
            key in "[a-z][a-z0-9]{0,8}",
            value in "[a-z0-9]{1,8}",
            other in "[a-z0-9]{1,8}",
        ) {
            let cm = resources::find("", "v1", "configmaps").expect("configmaps");
            let s = Selectors::parse(cm, Some(&format!("{key}={value}")), None).expect("valid");
            let with = |v: &str| json!({"metadata": {"labels": {key.clone(): v}}});
            prop_assert!(s.matches(&with(&value)));
            prop_assert_eq!(s.matches(&with(&other)), other == value);
            let unlabelled = json!({"metadata": {}});
            prop_assert!(!s.matches(&unlabelled));
        }
    }
}
