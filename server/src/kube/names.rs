//! The string formats Kubernetes checks everywhere, written as
//! apimachinery's `util/validation` writes them: each check returns kube's
//! messages (none when the value is valid), so every caller words its
//! errors as kube does. Object names (`admission`), label and annotation
//! keys and label values (`objectmeta`, label selectors in `selectors`),
//! the built-in types' fields (`builtin`) and config keys all use these,
//! and nothing else checks those formats. Each type's rule for its
//! objects' names ([`NameRule`], [`name_errors`]) is here too.

/// `qualifiedNameFmt`: what a label key's name part, an annotation key's
/// and a finalizer's must match.
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_ERR: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const QUALIFIED_NAME_MAX: usize = 63;
const LABEL_VALUE_ERR: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_MAX: usize = 63;
const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_ERR: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
/// A DNS (RFC 1123) label's longest length.
pub const DNS1123_LABEL_MAX: usize = 63;
const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
/// A DNS (RFC 1123) subdomain's longest length.
pub const DNS1123_SUBDOMAIN_MAX: usize = 253;
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const DNS1035_LABEL_ERR: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character";
const CONFIG_KEY_FMT: &str = "[-._a-zA-Z0-9]+";
const CONFIG_KEY_ERR: &str =
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.'";

fn dns1123_subdomain_fmt() -> String {
    format!("{DNS1123_LABEL_FMT}(\\.{DNS1123_LABEL_FMT})*")
}

/// `MaxLenError`.
pub fn max_len_error(length: usize) -> String {
    format!("must be no more than {length} characters")
}

/// `RegexError`: the message, its examples and the regex.
pub fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let mut out = format!("{msg} (e.g. ");
    for (i, example) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push_str(&format!("'{example}', "));
    }
    out.push_str(&format!("regex used for validation is '{fmt}')"));
    out
}

/// `InclusiveRangeError`.
pub fn inclusive_range_error(lo: i64, hi: i64) -> String {
    format!("must be between {lo} and {hi}, inclusive")
}

fn is_alnum(b: u8) -> bool {
    b.is_ascii_alphanumeric()
}

/// `^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`.
fn matches_qualified_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && is_alnum(b[0])
        && is_alnum(b[b.len() - 1])
        && b.iter()
            .all(|&c| is_alnum(c) || c == b'-' || c == b'_' || c == b'.')
}

/// `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`, or with `first_alpha` the RFC 1035
/// form `^[a-z]([-a-z0-9]*[a-z0-9])?$`.
fn matches_dns_label(s: &str, first_alpha: bool) -> bool {
    let b = s.as_bytes();
    let lower_alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && (if first_alpha {
            b[0].is_ascii_lowercase()
        } else {
            lower_alnum(b[0])
        })
        && lower_alnum(b[b.len() - 1])
        && b.iter().all(|&c| lower_alnum(c) || c == b'-')
}

fn matches_dns1123_subdomain(s: &str) -> bool {
    s.split('.').all(|label| matches_dns_label(label, false))
}

/// `IsQualifiedName`: a label or annotation key, a finalizer: a name
/// part (at most 63 characters) with an optional DNS-subdomain prefix and
/// `/`.
pub fn qualified_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(
                    dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    QUALIFIED_NAME_ERR,
                    QUALIFIED_NAME_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > QUALIFIED_NAME_MAX {
        errs.push(format!("name part {}", max_len_error(QUALIFIED_NAME_MAX)));
    }
    if !matches_qualified_name(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_ERR,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// `IsValidLabelValue`: empty, or a qualified name's name part (at most
/// 63 characters).
pub fn label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > LABEL_VALUE_MAX {
        errs.push(max_len_error(LABEL_VALUE_MAX));
    }
    if !value.is_empty() && !matches_qualified_name(value) {
        errs.push(regex_error(
            LABEL_VALUE_ERR,
            &format!("({QUALIFIED_NAME_FMT})?"),
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// `IsDNS1123Label`: most names of things inside an object (containers,
/// ports), namespaces.
pub fn dns1123_label(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_LABEL_MAX {
        errs.push(max_len_error(DNS1123_LABEL_MAX));
    }
    if !matches_dns_label(value, false) {
        if matches_dns1123_subdomain(value) {
            // A valid subdomain of the right length: it has dots.
            errs.push("must not contain dots".to_string());
        } else {
            errs.push(regex_error(
                DNS1123_LABEL_ERR,
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

/// `IsDNS1123Subdomain`: most objects' names.
pub fn dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX));
    }
    if !matches_dns1123_subdomain(value) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_ERR,
            &dns1123_subdomain_fmt(),
            &["example.com"],
        ));
    }
    errs
}

/// `IsDNS1035Label`: services' names.
pub fn dns1035_label(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_LABEL_MAX {
        errs.push(max_len_error(DNS1123_LABEL_MAX));
    }
    if !matches_dns_label(value, true) {
        errs.push(regex_error(
            DNS1035_LABEL_ERR,
            DNS1035_LABEL_FMT,
            &["my-name", "abc-123"],
        ));
    }
    errs
}

/// `IsConfigMapKey`: the keys of a config map's or a secret's data.
pub fn config_map_key(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX));
    }
    let chars_ok = !value.is_empty()
        && value
            .bytes()
            .all(|c| is_alnum(c) || c == b'-' || c == b'_' || c == b'.');
    if !chars_ok {
        errs.push(regex_error(
            CONFIG_KEY_ERR,
            CONFIG_KEY_FMT,
            &["key.name", "KEY_NAME", "key-name"],
        ));
    }
    if value == "." {
        errs.push("must not be '.'".to_string());
    } else if value == ".." {
        errs.push("must not be '..'".to_string());
    } else if value.starts_with("..") {
        errs.push("must not start with '..'".to_string());
    }
    errs
}

/// `IsValidPortNum`: 1 to 65535.
pub fn port_number(port: i64) -> Vec<String> {
    if (1..=65535).contains(&port) {
        Vec::new()
    } else {
        vec![inclusive_range_error(1, 65535)]
    }
}

/// `IsValidPortName`: an IANA service name (at most 15 characters).
pub fn port_name(port: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if port.len() > 15 {
        errs.push(max_len_error(15));
    }
    if !port
        .bytes()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        || port.is_empty()
    {
        errs.push(
            "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".to_string(),
        );
    }
    if !port.bytes().any(|c| c.is_ascii_lowercase()) {
        errs.push("must contain at least one letter (a-z)".to_string());
    }
    if port.contains("--") {
        errs.push("must not contain consecutive hyphens".to_string());
    }
    if port.starts_with('-') || port.ends_with('-') {
        errs.push("must not begin or end with a hyphen".to_string());
    }
    errs
}

/// How names of a type are validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// RFC 1123 subdomain: most types.
    Subdomain,
    /// RFC 1123 label: namespaces.
    Label,
    /// RFC 1035 label: services.
    Rfc1035Label,
    /// Any name that is a valid path segment (kube's RBAC types, whose
    /// names carry colons: `system:controller:...`).
    PathSegment,
}

/// The messages of a name (`prefix`: a `generateName`, whose trailing `-`
/// stands for the suffix to come) under `rule`.
pub fn name_errors(rule: NameRule, name: &str, prefix: bool) -> Vec<String> {
    let masked;
    let name = if prefix && name.ends_with('-') {
        // kube's maskTrailingDash: the generated suffix will end it.
        masked = format!("{}a", &name[..name.len() - 1]);
        masked.as_str()
    } else {
        name
    };
    match rule {
        NameRule::Subdomain => dns1123_subdomain(name),
        NameRule::Label => dns1123_label(name),
        NameRule::Rfc1035Label => dns1035_label(name),
        NameRule::PathSegment => path_segment_errors(name),
    }
}

/// `IsValidPathSegmentName`.
fn path_segment_errors(name: &str) -> Vec<String> {
    if name == "." || name == ".." {
        return vec![format!("may not be '{name}'")];
    }
    ["/", "%"]
        .into_iter()
        .filter(|c| name.contains(c))
        .map(|c| format!("may not contain '{c}'"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names_have_an_optional_subdomain_prefix() {
        assert!(qualified_name("app").is_empty());
        assert!(qualified_name("example.com/My_Name.1").is_empty());
        assert!(qualified_name("kubernetes.io/metadata.name").is_empty());
        assert_eq!(
            qualified_name("/a"),
            ["prefix part must be non-empty".to_string()]
        );
        let empty_name = qualified_name("a/");
        assert_eq!(empty_name.len(), 2);
        assert_eq!(empty_name[0], "name part must be non-empty");
        let upper_prefix = qualified_name("Example.com/a");
        assert_eq!(upper_prefix.len(), 1);
        assert!(upper_prefix[0].starts_with("prefix part a lowercase RFC 1123 subdomain"));
        let too_long = qualified_name(&"a".repeat(64));
        assert_eq!(too_long, ["name part must be no more than 63 characters"]);
        let nested = qualified_name("a/b/c");
        assert_eq!(nested.len(), 1);
        assert!(nested[0].starts_with("a qualified name must consist of"));
        assert_eq!(
            qualified_name("-a")[0],
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
        );
    }

    #[test]
    fn label_values_may_be_empty_and_are_short() {
        assert!(label_value("").is_empty());
        assert!(label_value("v1.2_x-Y").is_empty());
        assert_eq!(
            label_value("bad value"),
            ["a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"]
        );
        assert_eq!(
            label_value(&"a".repeat(64)),
            ["must be no more than 63 characters"]
        );
    }

    #[test]
    fn the_regex_error_lists_its_examples_as_kube_does() {
        // kube's double space before each further example, kept.
        assert_eq!(
            regex_error("m", "f", &["a", "b"]),
            "m (e.g. 'a',  or 'b', regex used for validation is 'f')"
        );
        assert_eq!(
            regex_error("m", "f", &[]),
            "m (regex used for validation is 'f')"
        );
    }

    #[test]
    fn dns_names() {
        assert!(dns1123_label("123-abc").is_empty());
        assert_eq!(dns1123_label("a.b"), ["must not contain dots"]);
        assert!(dns1123_label("A")[0].starts_with("a lowercase RFC 1123 label"));
        assert!(dns1123_subdomain("a.b-c.d").is_empty());
        assert_eq!(dns1123_subdomain(&"a".repeat(254)).len(), 1);
        assert_eq!(dns1123_subdomain(&"-".repeat(254)).len(), 2);
        assert!(dns1035_label("abc-1").is_empty());
        assert!(dns1035_label("1abc")[0].starts_with("a DNS-1035 label"));
    }

    #[test]
    fn config_keys() {
        assert!(config_map_key("key.name").is_empty());
        assert!(config_map_key("KEY_NAME-1").is_empty());
        assert_eq!(config_map_key(".."), ["must not be '..'"]);
        assert_eq!(config_map_key("..a"), ["must not start with '..'"]);
        let bad = config_map_key("a/b");
        assert_eq!(bad.len(), 1);
        assert!(bad[0].starts_with("a valid config key must consist of"));
        assert_eq!(config_map_key("").len(), 1);
    }

    #[test]
    fn ports() {
        assert!(port_number(80).is_empty());
        assert_eq!(port_number(0), ["must be between 1 and 65535, inclusive"]);
        assert!(port_name("http").is_empty());
        assert_eq!(port_name("80"), ["must contain at least one letter (a-z)"]);
        assert_eq!(
            port_name("-a--"),
            [
                "must not contain consecutive hyphens",
                "must not begin or end with a hyphen"
            ]
        );
    }
}
