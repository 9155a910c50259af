//! Kube's typed decoding of a built-in object, as far as a JSON type
//! goes: a field the schema (`kube::types`) declares a string, number,
//! boolean, list, map or object must hold one (`null` is absent), an
//! int-or-string an integer or a string, a quantity a valid quantity, a
//! byte field base64. Anything else is the `400` kube's JSON decoding
//! answers: `Pod in version "v1" cannot be handled as a Pod: json: cannot
//! unmarshal string into Go struct field PodSpec.spec.containers of type
//! []v1.Container`, the Go type named from the schema (integers as
//! `int64`, which some of kube's are not). Fields the schema does not
//! declare are `fieldvalidation`'s; untyped fields are anything.

use base64::Engine as _;
use serde_json::{Map, Value};

use crate::kube::error::KubeError;
use crate::kube::resources::ResourceType;
use crate::kube::types::{Scalar, Schema, Shape, TypeDef};

/// `resource.ErrFormatWrong`.
const QUANTITY_FORMAT: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";
/// `resource.ErrSuffix`.
const QUANTITY_SUFFIX: &str = "unable to parse quantity's suffix";

/// Checks every declared field of `obj`, an object of the built-in type
/// `rt` (a type without a schema passes).
pub fn check_types(rt: &ResourceType, obj: &Map<String, Value>) -> Result<(), KubeError> {
    let schema = Schema::builtin();
    let Some(root) = schema.for_kind(rt.group, rt.version, rt.kind) else {
        return Ok(());
    };
    let walk = Walk { schema };
    walk.object(root, rt.kind, obj, "").map_err(|detail| {
        KubeError::BadRequest(format!(
            "{kind} in version \"{v}\" cannot be handled as a {kind}: {detail}",
            kind = rt.kind,
            v = rt.version
        ))
    })
}

struct Walk<'a> {
    schema: &'a Schema,
}

impl Walk<'_> {
    fn object(
        &self,
        def: &TypeDef,
        struct_name: &str,
        obj: &Map<String, Value>,
        path: &str,
    ) -> Result<(), String> {
        for (name, value) in obj {
            let Some(field) = def.field(name) else {
                continue;
            };
            let at = if path.is_empty() {
                name.clone()
            } else {
                format!("{path}.{name}")
            };
            self.value(&field.shape, struct_name, value, &at)?;
        }
        Ok(())
    }

    fn value(
        &self,
        shape: &Shape,
        struct_name: &str,
        value: &Value,
        at: &str,
    ) -> Result<(), String> {
        if value.is_null() {
            return Ok(());
        }
        let mismatch = || {
            format!(
                "json: cannot unmarshal {} into Go struct field {struct_name}.{at} of type {}",
                json_kind(value),
                go_type(shape)
            )
        };
        match shape {
            Shape::Untyped => Ok(()),
            Shape::Scalar(scalar) => {
                scalar_ok(*scalar, value).map_err(|e| e.unwrap_or_else(mismatch))
            }
            Shape::Object(name) => {
                let Value::Object(obj) = value else {
                    return Err(mismatch());
                };
                match self.schema.object(shape) {
                    Some(def) => self.object(def, short_name(name), obj, at),
                    None => Ok(()),
                }
            }
            Shape::List(item) => {
                let Value::Array(items) = value else {
                    return Err(mismatch());
                };
                items
                    .iter()
                    .try_for_each(|v| self.value(item, struct_name, v, at))
            }
            Shape::Map(item) => {
                let Value::Object(entries) = value else {
                    return Err(mismatch());
                };
                entries
                    .values()
                    .try_for_each(|v| self.value(item, struct_name, v, at))
            }
        }
    }
}

/// Whether a scalar has its type: `Err(None)` a plain mismatch,
/// `Err(Some(message))` a value of the right JSON type kube still cannot
/// decode (a malformed quantity, bad base64).
fn scalar_ok(scalar: Scalar, value: &Value) -> Result<(), Option<String>> {
    let ok = match scalar {
        Scalar::String | Scalar::DateTime => value.is_string(),
        Scalar::Byte => match value.as_str() {
            Some(s) => {
                return base64::engine::general_purpose::STANDARD
                    .decode(s)
                    .map(drop)
                    .map_err(|e| Some(base64_error(&e, s.len())))
            }
            None => false,
        },
        Scalar::Integer => value.as_i64().is_some(),
        Scalar::Number => value.is_number(),
        Scalar::Boolean => value.is_boolean(),
        Scalar::IntOrString => value.is_string() || value.as_i64().is_some(),
        Scalar::Quantity => match value {
            Value::String(s) => return quantity_errors(s).map_err(Some),
            Value::Number(_) => true,
            _ => false,
        },
    };
    if ok {
        Ok(())
    } else {
        Err(None)
    }
}

/// Go's `base64.CorruptInputError`.
fn base64_error(e: &base64::DecodeError, len: usize) -> String {
    let at = match e {
        base64::DecodeError::InvalidByte(at, _) | base64::DecodeError::InvalidLastSymbol(at, _) => {
            *at
        }
        _ => len,
    };
    format!("illegal base64 data at input byte {at}")
}

/// Whether `s` parses as a `resource.Quantity`: a signed decimal number,
/// then a binary suffix (`Ki` .. `Ei`), a decimal one (`n u m k M G T P
/// E`) or an exponent (`e3`, `E-2`).
fn quantity_errors(s: &str) -> Result<(), String> {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let digits = body
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(body.len());
    let (number, suffix) = body.split_at(digits);
    if number.is_empty()
        || !number.bytes().any(|b| b.is_ascii_digit())
        || number.matches('.').count() > 1
    {
        return Err(QUANTITY_FORMAT.to_string());
    }
    let suffix_ok = matches!(
        suffix,
        "" | "Ki"
            | "Mi"
            | "Gi"
            | "Ti"
            | "Pi"
            | "Ei"
            | "n"
            | "u"
            | "m"
            | "k"
            | "M"
            | "G"
            | "T"
            | "P"
            | "E"
    ) || suffix
        .strip_prefix(['e', 'E'])
        .map(|exp| exp.strip_prefix(['+', '-']).unwrap_or(exp))
        .is_some_and(|exp| !exp.is_empty() && exp.bytes().all(|b| b.is_ascii_digit()));
    if suffix_ok {
        return Ok(());
    }
    let regex_ok = suffix
        .trim_start_matches(|c: char| "eEinumkKMGTP".contains(c))
        .trim_start_matches(['+', '-'])
        .bytes()
        .all(|b| b.is_ascii_digit());
    Err(if regex_ok {
        QUANTITY_SUFFIX
    } else {
        QUANTITY_FORMAT
    }
    .to_string())
}

/// How Go names a JSON value's kind in a type error.
fn json_kind(value: &Value) -> String {
    match value {
        Value::String(_) => "string".into(),
        Value::Bool(_) => "bool".into(),
        Value::Array(_) => "array".into(),
        Value::Object(_) => "object".into(),
        Value::Null => "null".into(),
        Value::Number(n) if n.is_i64() || n.is_u64() => "number".into(),
        Value::Number(n) => format!("number {n}"),
    }
}

/// `v1.Container` of `io.k8s.api.core.v1.Container`.
fn go_named(name: &str) -> String {
    let mut parts = name.rsplit('.');
    let ty = parts.next().unwrap_or(name);
    match parts.next() {
        Some(pkg) => format!("{pkg}.{ty}"),
        None => ty.to_string(),
    }
}

fn short_name(name: &str) -> &str {
    name.rsplit('.').next().unwrap_or(name)
}

/// The Go type of a shape, as kube's decoding error names it.
fn go_type(shape: &Shape) -> String {
    match shape {
        Shape::Scalar(s) => match s {
            Scalar::String => "string",
            Scalar::Byte => "[]uint8",
            Scalar::DateTime => "v1.Time",
            Scalar::Integer => "int64",
            Scalar::Number => "float64",
            Scalar::Boolean => "bool",
            Scalar::IntOrString => "intstr.IntOrString",
            Scalar::Quantity => "resource.Quantity",
        }
        .to_string(),
        Shape::Object(name) => go_named(name),
        Shape::List(item) => format!("[]{}", go_type(item)),
        Shape::Map(item) => format!("map[string]{}", go_type(item)),
        Shape::Untyped => "interface {}".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::kube::resources;

    fn check(plural: &str, group: &str, v: Value) -> Result<(), String> {
        let rt = resources::find(group, "v1", plural).expect("a served type");
        let Value::Object(obj) = v else {
            unreachable!("an object literal")
        };
        check_types(rt, &obj).map_err(|e| e.to_string())
    }

    #[test]
    fn a_field_of_the_wrong_type_is_kubes_decoding_error() {
        assert_eq!(
            check("pods", "", json!({"spec": {"containers": "nginx"}})),
            Err("Pod in version \"v1\" cannot be handled as a Pod: json: cannot unmarshal string into Go struct field PodSpec.spec.containers of type []v1.Container".into())
        );
        assert_eq!(
            check("pods", "", json!({"spec": {"containers": [{"name": 1}]}})),
            Err("Pod in version \"v1\" cannot be handled as a Pod: json: cannot unmarshal number into Go struct field Container.spec.containers.name of type string".into())
        );
        assert_eq!(
            check("deployments", "apps", json!({"spec": {"replicas": 1.5}})),
            Err("Deployment in version \"v1\" cannot be handled as a Deployment: json: cannot unmarshal number 1.5 into Go struct field DeploymentSpec.spec.replicas of type int64".into())
        );
        assert!(check("configmaps", "", json!({"metadata": {"labels": {"a": 1}}})).is_err());
    }

    #[test]
    fn nulls_untyped_and_unknown_fields_pass() {
        assert!(check("pods", "", json!({"spec": {"containers": null, "x": 1}, "metadata": {"managedFields": [{"fieldsV1": {"f:a": {}}}]}})).is_ok());
        assert!(check(
            "services",
            "",
            json!({"spec": {"ports": [{"port": 80, "targetPort": "http"}]}})
        )
        .is_ok());
        assert!(check(
            "services",
            "",
            json!({"spec": {"ports": [{"targetPort": true}]}})
        )
        .is_err());
    }

    #[test]
    fn quantities_and_bytes_are_parsed() {
        for ok in ["100m", "1Gi", "0.5", "1e3", "+2", "12E-2", "3"] {
            assert!(quantity_errors(ok).is_ok(), "{ok}");
        }
        assert_eq!(quantity_errors("1Gk"), Err(QUANTITY_SUFFIX.to_string()));
        assert_eq!(quantity_errors("1Gb"), Err(QUANTITY_FORMAT.to_string()));
        assert_eq!(quantity_errors("abc"), Err(QUANTITY_FORMAT.to_string()));
        assert_eq!(quantity_errors(""), Err(QUANTITY_FORMAT.to_string()));
        let bad = check(
            "pods",
            "",
            json!({"spec": {"containers": [{"name": "a", "resources": {"limits": {"cpu": "lots"}}}]}}),
        );
        assert_eq!(
            bad,
            Err(format!(
                "Pod in version \"v1\" cannot be handled as a Pod: {QUANTITY_FORMAT}"
            ))
        );
        assert!(check("secrets", "", json!({"data": {"a": "YWJj"}})).is_ok());
        assert_eq!(
            check("secrets", "", json!({"data": {"a": "not base64!"}})),
            Err("Secret in version \"v1\" cannot be handled as a Secret: illegal base64 data at input byte 3".into())
        );
    }
}
