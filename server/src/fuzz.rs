//! Input generators for the property tests of the request parsers (test
//! builds only).
//!
//! Every parser that reads what a client sends (paths, query parameters,
//! selectors, continue tokens, bodies, patches, etcd requests) has a
//! property test next to it that feeds it these inputs and checks that it
//! neither panics nor answers a server error (`5xx`, or gRPC
//! `Internal`/`Unknown`) for a client's mistake. The generators mix the
//! values a parser is written for (known segment names, query keys, kinds,
//! field paths) with edge cases (empty strings, `0x00`, `..`, the extreme
//! integers, numbers no JSON parser holds, deep nesting) and arbitrary
//! text, so most cases get past the first check and reach the later ones.

use std::collections::HashMap;

use proptest::prelude::*;
use serde_json::{Map, Value};

/// How many cases each property test runs: enough to reach the edge cases
/// of every generator in a unit-test run (each case is microseconds).
pub const CASES: u32 = 512;

/// The proptest configuration of the parsers' property tests: [`CASES`]
/// cases, or as many as `PROPTEST_CASES` asks for (a longer run).
pub fn config() -> ProptestConfig {
    let default = ProptestConfig::default();
    ProptestConfig {
        cases: if std::env::var_os("PROPTEST_CASES").is_some() {
            default.cases
        } else {
            CASES
        },
        ..default
    }
}

/// Integers a parser may trip on, and some ordinary ones.
pub fn edge_i64() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(i64::MIN),
        Just(i64::MAX),
        Just(-1i64),
        Just(0i64),
        Just(1i64),
        -5i64..100,
        any::<i64>(),
    ]
}

/// Unsigned integers a parser may trip on, and some ordinary ones.
pub fn edge_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(u64::MAX),
        Just(u64::MAX / 2 + 1),
        Just(0u64),
        Just(1u64),
        0u64..100,
        any::<u64>(),
    ]
}

/// Short text: empty, names, separators, control characters, non-ASCII.
pub fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("\u{0}".to_string()),
        Just("..".to_string()),
        Just("/".to_string()),
        Just("%2F".to_string()),
        "[a-z0-9.-]{1,12}",
        "[ -~]{0,16}",
        any::<String>().prop_map(|s| s.chars().take(24).collect()),
    ]
}

/// A value of a query parameter: numbers (in and out of range, signed,
/// floating), booleans, the enum values kube knows, and anything else.
pub fn query_value() -> impl Strategy<Value = String> {
    prop_oneof![
        edge_i64().prop_map(|n| n.to_string()),
        edge_u64().prop_map(|n| n.to_string()),
        Just("18446744073709551616".to_string()),
        Just("1e3".to_string()),
        Just(" 1".to_string()),
        Just("+1".to_string()),
        Just("-0".to_string()),
        Just("true".to_string()),
        Just("False".to_string()),
        Just("Exact".to_string()),
        Just("NotOlderThan".to_string()),
        Just("metadata.name=a".to_string()),
        Just("app in (a,b),!x".to_string()),
        text(),
    ]
}

/// The query parameters the list, get and watch handlers read.
pub const QUERY_KEYS: &[&str] = &[
    "resourceVersion",
    "resourceVersionMatch",
    "limit",
    "continue",
    "timeoutSeconds",
    "watch",
    "allowWatchBookmarks",
    "sendInitialEvents",
    "labelSelector",
    "fieldSelector",
    "includeObject",
    "dryRun",
];

/// A query: a few of the known parameters (and sometimes an unknown one)
/// with values from [`query_value`].
pub fn query() -> impl Strategy<Value = HashMap<String, String>> {
    let key = prop_oneof![
        9 => proptest::sample::select(QUERY_KEYS).prop_map(str::to_string),
        1 => text(),
    ];
    proptest::collection::hash_map(key, query_value(), 0..6)
}

/// Keys of JSON objects: the fields the server reads, and others.
fn json_key() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::sample::select(
            &[
                "metadata",
                "name",
                "namespace",
                "generateName",
                "resourceVersion",
                "uid",
                "generation",
                "labels",
                "kind",
                "apiVersion",
                "spec",
                "status",
                "data",
                "preconditions",
                "finalizers",
                "creationTimestamp",
            ][..]
        )
        .prop_map(str::to_string),
        text(),
    ]
}

/// JSON numbers at the edges: the extreme integers and floats.
fn json_number() -> impl Strategy<Value = Value> {
    prop_oneof![
        edge_i64().prop_map(Value::from),
        edge_u64().prop_map(Value::from),
        Just(Value::from(f64::MAX)),
        Just(Value::from(-f64::MAX)),
        Just(Value::from(f64::MIN_POSITIVE)),
        any::<f64>().prop_map(Value::from),
    ]
}

/// A JSON value of any shape, up to four levels deep.
pub fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        json_number(),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec((json_key(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A JSON object shaped like a Kubernetes object often enough to pass the
/// first checks: `metadata` (of any shape, usually an object with a name),
/// maybe `kind` and `apiVersion` (right or wrong), and other fields.
pub fn object_value() -> impl Strategy<Value = Value> {
    let name = prop_oneof![
        2 => Just(Value::String("a".into())),
        2 => "[a-z][a-z0-9-]{0,10}".prop_map(Value::String),
        1 => json_value(),
    ];
    let namespace = prop_oneof![
        2 => Just(Value::String("default".into())),
        2 => text().prop_map(Value::String),
        1 => json_value(),
    ];
    let number = prop_oneof![
        2 => edge_i64().prop_map(Value::from),
        1 => json_value(),
    ];
    let meta = (
        proptest::option::of(name),
        proptest::option::of(namespace),
        proptest::option::of(json_value()),
        proptest::option::of(number),
        proptest::collection::vec((json_key(), json_value()), 0..3),
    )
        .prop_map(|(name, namespace, rv, generation, extra)| {
            let mut m: Map<String, Value> = extra.into_iter().collect();
            if let Some(n) = name {
                m.insert("name".into(), n);
            }
            if let Some(ns) = namespace {
                m.insert("namespace".into(), ns);
            }
            if let Some(rv) = rv {
                m.insert("resourceVersion".into(), rv);
            }
            if let Some(g) = generation {
                m.insert("generation".into(), g);
            }
            Value::Object(m)
        });
    let meta = prop_oneof![4 => meta, 1 => json_value()];
    (
        proptest::option::weighted(0.9, meta),
        proptest::option::of(json_value()),
        proptest::option::of(json_value()),
        proptest::option::of(json_value()),
        proptest::collection::vec((json_key(), json_value()), 0..4),
    )
        .prop_map(|(meta, kind, api_version, spec, extra)| {
            let mut m: Map<String, Value> = extra.into_iter().collect();
            if let Some(spec) = spec {
                m.insert("spec".into(), spec);
            }
            if let Some(meta) = meta {
                m.insert("metadata".into(), meta);
            }
            if let Some(k) = kind {
                m.insert("kind".into(), k);
            }
            if let Some(v) = api_version {
                m.insert("apiVersion".into(), v);
            }
            Value::Object(m)
        })
}

/// A request body: JSON of any shape, an object-like one, numbers no JSON
/// parser holds, or bytes that are not JSON at all.
pub fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => object_value().prop_map(|v| v.to_string().into_bytes()),
        2 => json_value().prop_map(|v| v.to_string().into_bytes()),
        1 => proptest::sample::select(&[
            "1e400",
            "-1e400",
            "123456789012345678901234567890",
            "18446744073709551616",
            "NaN",
            "0x10",
        ][..])
        .prop_map(|n| format!(r#"{{"metadata":{{"name":"a","generation":{n}}},"data":{{"v":{n}}}}}"#).into_bytes()),
        1 => Just(format!("{}1{}", "[".repeat(200), "]".repeat(200)).into_bytes()),
        1 => proptest::collection::vec(any::<u8>(), 0..64),
    ]
}

/// Checks an error of the REST front end as it goes on the wire (a domain
/// error through `http::status`'s mapping): a client's input is never
/// answered with a `5xx`.
pub fn assert_client_error(
    e: &(impl Clone + Into<crate::http::status::ApiError>),
) -> Result<(), TestCaseError> {
    let e: crate::http::status::ApiError = e.clone().into();
    prop_assert!(
        !e.code().is_server_error(),
        "a client's input answered {}: {e}",
        e.code()
    );
    Ok(())
}
