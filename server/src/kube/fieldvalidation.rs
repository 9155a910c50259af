//! Field validation (`fieldValidation=Ignore|Warn|Strict`, default
//! `Warn`): fields a written object sets that its type does not declare
//! (checked against the built-in types' schemas, [`crate::kube::types`])
//! and keys a JSON body repeats (found while the body is parsed, by
//! [`parse_json`], since a JSON map keeps only the last).
//!
//! As kube decodes a body into its typed object, unknown fields never
//! reach storage: they are dropped in every mode. `Ignore` says nothing,
//! `Warn` returns one warning per problem (`unknown field "spec.foo"`,
//! `duplicate field "metadata.name"`, for the `Warning` header), `Strict`
//! fails with all of them: a `400` for a create or an update (`<Kind> in
//! version "<v>" cannot be handled as a <Kind>: strict decoding error:
//! ...`), a `422` for a patch (`patch: Invalid value: "<patched object>":
//! strict decoding error: ...`), as kube-apiserver answers.
//!
//! Paths are kube's: fields joined by `.`, list items by `[i]`. A custom
//! resource's unknown fields are what its structural schema prunes
//! (`kube::structural`); a custom type without a schema is not checked,
//! and `RawExtension` and other untyped content never is.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::kube::error::{FieldCause, KubeError};
use crate::kube::resources::ResourceType;
use crate::kube::types::{Schema, Shape, TypeDef};

/// What to do with unknown and duplicate fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FieldValidation {
    Ignore,
    #[default]
    Warn,
    Strict,
}

/// The verb whose options carried `fieldValidation` (kube names the
/// options kind in its error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteVerb {
    Create,
    Update,
    Patch,
}

impl WriteVerb {
    /// The options kind of the verb (`CreateOptions`, ...).
    pub fn options_kind(self) -> &'static str {
        match self {
            WriteVerb::Create => "CreateOptions",
            WriteVerb::Update => "UpdateOptions",
            WriteVerb::Patch => "PatchOptions",
        }
    }
}

/// A problem with the options of a write: kube's `422` on the options
/// kind (`PatchOptions.meta.k8s.io "" is invalid: ...`).
pub fn invalid_options(verb: WriteVerb, causes: Vec<FieldCause>) -> KubeError {
    KubeError::Invalid {
        kind: format!("{}.meta.k8s.io", verb.options_kind()),
        group: "meta.k8s.io".into(),
        name: String::new(),
        causes,
    }
}

impl FieldValidation {
    /// The `fieldValidation` query parameter (absent or empty: `Warn`);
    /// any other value than the three is `422`, as kube validates it.
    pub fn parse(value: Option<&str>, verb: WriteVerb) -> Result<Self, KubeError> {
        match value.unwrap_or("") {
            "" | "Warn" => Ok(FieldValidation::Warn),
            "Ignore" => Ok(FieldValidation::Ignore),
            "Strict" => Ok(FieldValidation::Strict),
            other => Err(invalid_options(
                verb,
                vec![FieldCause::not_supported(
                    "fieldValidation",
                    other,
                    &["Ignore", "Strict", "Warn"],
                )],
            )),
        }
    }
}

/// Unknown and duplicate fields found in one write.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Problems {
    pub unknown: Vec<String>,
    pub duplicate: Vec<String>,
}

impl Problems {
    pub fn is_empty(&self) -> bool {
        self.unknown.is_empty() && self.duplicate.is_empty()
    }

    /// One message per problem, as kube words them.
    pub fn messages(&self) -> Vec<String> {
        self.unknown
            .iter()
            .map(|f| format!("unknown field {f:?}"))
            .chain(
                self.duplicate
                    .iter()
                    .map(|f| format!("duplicate field {f:?}")),
            )
            .collect()
    }

    /// What the write does about them under `validation`: the warnings to
    /// send (none under `Ignore`), or, under `Strict`, kube's error. For a
    /// patch, `patched` is the patched object, which kube quotes.
    pub fn outcome(
        &self,
        validation: FieldValidation,
        rt: &ResourceType,
        verb: WriteVerb,
        patched: Option<&Map<String, Value>>,
    ) -> Result<Vec<String>, KubeError> {
        match validation {
            _ if self.is_empty() => Ok(Vec::new()),
            FieldValidation::Ignore => Ok(Vec::new()),
            FieldValidation::Warn => Ok(self.messages()),
            FieldValidation::Strict => {
                let detail = format!("strict decoding error: {}", self.messages().join(", "));
                Err(match verb {
                    WriteVerb::Patch => {
                        let patched = patched
                            .map(|p| Value::Object(p.clone()).to_string())
                            .unwrap_or_default();
                        KubeError::Invalid {
                            kind: String::new(),
                            group: String::new(),
                            name: String::new(),
                            causes: vec![FieldCause::invalid("patch", &patched, &detail)],
                        }
                    }
                    WriteVerb::Create | WriteVerb::Update => KubeError::BadRequest(format!(
                        "{kind} in version \"{v}\" cannot be handled as a {kind}: {detail}",
                        kind = rt.kind,
                        v = rt.version
                    )),
                })
            }
        }
    }
}

/// Parses a JSON body, noting every key an object repeats (by its path;
/// the last value wins, as in any JSON map).
pub fn parse_json(body: &[u8]) -> Result<(Value, Vec<String>), serde_json::Error> {
    let mut dups = Vec::new();
    let mut de = serde_json::Deserializer::from_slice(body);
    let value = Seed {
        path: String::new(),
        dups: &mut dups,
    }
    .deserialize(&mut de)?;
    de.end()?;
    Ok((value, dups))
}

/// Deserializes one JSON value at `path`, recording repeated keys.
struct Seed<'a> {
    path: String,
    dups: &'a mut Vec<String>,
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(Seed {
            path: format!("{}[{}]", self.path, out.len()),
            dups: &mut *self.dups,
        })? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = join(&self.path, &key);
            let v = map.next_value_seed(Seed {
                path: path.clone(),
                dups: &mut *self.dups,
            })?;
            if out.insert(key, v).is_some() && !self.dups.contains(&path) {
                self.dups.push(path);
            }
        }
        Ok(Value::Object(out))
    }
}

/// The fields of `obj` (an object of the type `rt`) that its type does not
/// declare, by path; with `prune`, they are taken out. A type without a
/// schema has none.
pub fn unknown_fields(rt: &ResourceType, obj: &mut Map<String, Value>, prune: bool) -> Vec<String> {
    if let Some(custom) = rt.custom {
        // A custom resource: what its structural schema prunes.
        let Some(schema) = custom.structural.as_ref() else {
            return Vec::new();
        };
        let mut value = Value::Object(obj.clone());
        let found = schema.prune(&mut value);
        if let (true, Value::Object(pruned)) = (prune, value) {
            *obj = pruned;
        }
        return found;
    }
    let schema = Schema::builtin();
    let mut found = Vec::new();
    if let Some(root) = schema.for_kind(rt.group, rt.version, rt.kind) {
        check_struct(schema, root, obj, "", prune, &mut found);
    }
    found
}

fn check_struct(
    schema: &Schema,
    ty: &TypeDef,
    obj: &mut Map<String, Value>,
    path: &str,
    prune: bool,
    found: &mut Vec<String>,
) {
    let mut unknown = Vec::new();
    for (k, v) in obj.iter_mut() {
        let at = join(path, k);
        match ty.field(k) {
            Some(def) => check_value(schema, &def.shape, v, &at, prune, found),
            None => unknown.push((k.clone(), at)),
        }
    }
    for (k, at) in unknown {
        if prune {
            obj.remove(&k);
        }
        found.push(at);
    }
}

fn check_value(
    schema: &Schema,
    shape: &Shape,
    v: &mut Value,
    path: &str,
    prune: bool,
    found: &mut Vec<String>,
) {
    match (shape, v) {
        (Shape::Object(name), Value::Object(m)) => {
            if let Some(t) = schema.type_def(name) {
                check_struct(schema, t, m, path, prune, found);
            }
        }
        (Shape::Map(values), Value::Object(m)) => {
            for (k, v) in m.iter_mut() {
                check_value(schema, values, v, &join(path, k), prune, found);
            }
        }
        (Shape::List(item), Value::Array(l)) => {
            for (i, v) in l.iter_mut().enumerate() {
                check_value(schema, item, v, &format!("{path}[{i}]"), prune, found);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::kube::resources;

    fn deployments() -> &'static ResourceType {
        resources::find("apps", "v1", "deployments").expect("deployments")
    }

    #[test]
    fn repeated_keys_are_found_by_path_and_the_last_wins() {
        let body = br#"{"metadata":{"name":"a","name":"b","labels":{"x":"1"}},
            "spec":{"template":{"spec":{"containers":[{"name":"c","image":"i","image":"j"}]}}},
            "kind":"Deployment"}"#;
        let (v, dups) = parse_json(body).expect("parses");
        assert_eq!(
            dups,
            ["metadata.name", "spec.template.spec.containers[0].image"]
        );
        assert_eq!(v["metadata"]["name"], "b");
        assert_eq!(v["spec"]["template"]["spec"]["containers"][0]["image"], "j");
        let (_, none) = parse_json(br#"{"a":{"a":1},"b":[{"a":1},{"a":2}]}"#).expect("parses");
        assert!(none.is_empty());
        assert!(parse_json(b"{\"a\":1} x").is_err());
        assert!(parse_json(b"{\"a\":").is_err());
    }

    #[test]
    fn unknown_fields_are_found_against_the_schema_and_pruned() {
        let mut obj = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"any": "key"}, "bogus": 1},
            "spec": {
                "replicaz": 3,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"spec": {"containers": [
                    {"name": "a", "image": "x"},
                    {"name": "b", "imagex": "y", "env": [{"name": "E", "valu": "1"}]},
                ]}},
            },
            "status": {"whatever": true},
        });
        let Value::Object(m) = &mut obj else { panic!() };
        let found = unknown_fields(deployments(), m, true);
        assert_eq!(
            found,
            [
                "metadata.bogus",
                "spec.template.spec.containers[1].env[0].valu",
                "spec.template.spec.containers[1].imagex",
                "spec.replicaz",
                "status.whatever",
            ]
        );
        assert!(obj["metadata"].get("bogus").is_none());
        assert!(obj["spec"].get("replicaz").is_none());
        assert_eq!(obj["metadata"]["labels"]["any"], "key");
        assert_eq!(
            obj["spec"]["template"]["spec"]["containers"][1],
            json!({"name": "b", "env": [{"name": "E"}]})
        );
        let Value::Object(m) = &mut obj else { panic!() };
        assert!(unknown_fields(deployments(), m, false).is_empty());
    }

    #[test]
    fn each_mode_warns_refuses_or_ignores_as_kube_does() {
        let rt = deployments();
        let p = Problems {
            unknown: vec!["spec.foo".into()],
            duplicate: vec!["metadata.name".into()],
        };
        assert_eq!(
            p.outcome(FieldValidation::Warn, rt, WriteVerb::Create, None)
                .expect("warn"),
            [
                "unknown field \"spec.foo\"",
                "duplicate field \"metadata.name\""
            ]
        );
        assert!(p
            .outcome(FieldValidation::Ignore, rt, WriteVerb::Create, None)
            .expect("ignore")
            .is_empty());
        let e = p
            .outcome(FieldValidation::Strict, rt, WriteVerb::Update, None)
            .expect_err("strict");
        assert_eq!(
            e.to_string(),
            "Deployment in version \"v1\" cannot be handled as a Deployment: strict decoding error: \
             unknown field \"spec.foo\", duplicate field \"metadata.name\""
        );
        let patched = Map::new();
        match p.outcome(
            FieldValidation::Strict,
            rt,
            WriteVerb::Patch,
            Some(&patched),
        ) {
            Err(KubeError::Invalid { kind, causes, .. }) => {
                assert_eq!(kind, "");
                assert_eq!(causes[0].field, "patch");
                assert_eq!(
                    causes[0].message,
                    "Invalid value: \"{}\": strict decoding error: unknown field \"spec.foo\", \
                     duplicate field \"metadata.name\""
                );
            }
            other => panic!("expected 422, got {other:?}"),
        }
        assert!(Problems::default()
            .outcome(FieldValidation::Strict, rt, WriteVerb::Patch, None)
            .expect("nothing to report")
            .is_empty());
    }

    #[test]
    fn only_the_three_modes_are_accepted() {
        assert_eq!(
            FieldValidation::parse(None, WriteVerb::Create).ok(),
            Some(FieldValidation::Warn)
        );
        assert_eq!(
            FieldValidation::parse(Some("Strict"), WriteVerb::Patch).ok(),
            Some(FieldValidation::Strict)
        );
        match FieldValidation::parse(Some("strict"), WriteVerb::Create) {
            Err(KubeError::Invalid { kind, causes, .. }) => {
                assert_eq!(kind, "CreateOptions.meta.k8s.io");
                assert_eq!(
                    causes[0].message,
                    "Unsupported value: \"strict\": supported values: \"Ignore\", \"Strict\", \"Warn\""
                );
            }
            other => panic!("expected 422, got {other:?}"),
        }
    }
}
