//! What a namespace's `/finalize` subresource may write: kube's check of
//! the `spec.finalizers` it replaces (`ValidateNamespaceFinalizeUpdate`'s
//! `validateFinalizerName`): each a qualified name (an optional DNS
//! subdomain prefix and `/`, then a name of at most 63 characters), and a
//! name without a prefix one of kube's standard finalizers. How the
//! update is prepared is `kube::admission`'s (`UpdateScope::Finalize`);
//! what it does to a terminating namespace, `kube::deletion`'s.

use serde_json::{Map, Value};

use crate::kube::deletion::{FINALIZER_FOREGROUND, FINALIZER_NAMESPACE, FINALIZER_ORPHAN};
use crate::kube::error::FieldCause;

/// The finalizers kube accepts without a prefix (`IsStandardFinalizerName`).
const STANDARD_FINALIZERS: [&str; 3] =
    [FINALIZER_NAMESPACE, FINALIZER_ORPHAN, FINALIZER_FOREGROUND];

const QUALIFIED_NAME_MAX_LEN: usize = 63;
const SUBDOMAIN_MAX_LEN: usize = 253;
const QUALIFIED_NAME_MESSAGE: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const SUBDOMAIN_MESSAGE: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

/// The `422` causes of the `spec.finalizers` a `/finalize` body carries
/// (none: they may be written).
pub fn finalizer_causes(namespace: &Map<String, Value>) -> Vec<FieldCause> {
    let listed = namespace
        .get("spec")
        .and_then(|s| s.get("finalizers"))
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut causes = Vec::new();
    for (i, finalizer) in listed.iter().enumerate() {
        let field = format!("spec.finalizers[{i}]");
        let Some(name) = finalizer.as_str() else {
            causes.push(FieldCause::invalid(
                &field,
                &finalizer.to_string(),
                "must be a string",
            ));
            continue;
        };
        for problem in qualified_name_problems(name) {
            causes.push(FieldCause::invalid(&field, name, &problem));
        }
        if !name.contains('/') && !STANDARD_FINALIZERS.contains(&name) {
            causes.push(FieldCause::invalid(
                &field,
                name,
                "name is neither a standard finalizer name nor is it fully qualified",
            ));
        }
    }
    causes
}

/// kube's `IsQualifiedName`, its messages word for word.
fn qualified_name_problems(value: &str) -> Vec<String> {
    let parts: Vec<&str> = value.split('/').collect();
    let mut problems = Vec::new();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                problems.push("prefix part must be non-empty".to_string());
            } else {
                if prefix.len() > SUBDOMAIN_MAX_LEN {
                    problems.push(format!(
                        "prefix part must be no more than {SUBDOMAIN_MAX_LEN} characters"
                    ));
                }
                if !is_subdomain(prefix) {
                    problems.push(format!("prefix part {SUBDOMAIN_MESSAGE}"));
                }
            }
            *name
        }
        _ => {
            return vec![format!(
                "a qualified name {QUALIFIED_NAME_MESSAGE} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            )]
        }
    };
    if name.is_empty() {
        problems.push("name part must be non-empty".to_string());
    } else if name.len() > QUALIFIED_NAME_MAX_LEN {
        problems.push(format!(
            "name part must be no more than {QUALIFIED_NAME_MAX_LEN} characters"
        ));
    }
    let bytes = name.as_bytes();
    let valid = !bytes.is_empty()
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !valid {
        problems.push(format!("name part {QUALIFIED_NAME_MESSAGE}"));
    }
    problems
}

/// An RFC 1123 subdomain's characters: dot-separated lower-case labels.
fn is_subdomain(s: &str) -> bool {
    s.split('.').all(|label| {
        let b = label.as_bytes();
        !b.is_empty()
            && b.len() <= 63
            && b.iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            && b[0] != b'-'
            && b[b.len() - 1] != b'-'
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn causes(finalizers: Value) -> Vec<String> {
        let ns = match json!({"metadata": {"name": "n"}, "spec": {"finalizers": finalizers}}) {
            Value::Object(m) => m,
            _ => unreachable!("an object"),
        };
        finalizer_causes(&ns)
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn standard_and_qualified_finalizers_may_be_written() {
        assert!(causes(json!([])).is_empty());
        assert!(causes(json!(["kubernetes", "example.com/cleanup", "orphan"])).is_empty());
        assert!(finalizer_causes(&Map::new()).is_empty(), "no spec: none");
    }

    #[test]
    fn other_finalizers_are_refused_with_kubes_words() {
        assert_eq!(
            causes(json!(["kubernetes", "cleanup"])),
            ["spec.finalizers[1]: Invalid value: \"cleanup\": name is neither a standard finalizer name nor is it fully qualified"]
        );
        assert_eq!(
            causes(json!(["Example.com/x"])),
            [format!("spec.finalizers[0]: Invalid value: \"Example.com/x\": prefix part {SUBDOMAIN_MESSAGE}")]
        );
        let problems = causes(json!(["a/b/c", "example.com/-x", 7]));
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems[0].contains("a qualified name must consist of"));
        assert!(problems[1].contains("name part must consist of"));
        assert_eq!(
            problems[2],
            "spec.finalizers[2]: Invalid value: \"7\": must be a string"
        );
    }
}
