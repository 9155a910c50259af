//! The structural schema engine, table by table: value validation with
//! kube's exact causes for every keyword, CEL rules, schemas refused with
//! their causes, pruning, defaulting, and the typed-schema table.

use serde_json::{json, Value};

use super::StructuralSchema;
use crate::kube::error::FieldCause;
use crate::kube::types::{ListType, MapType, Scalar, Shape};

const BASE: &str = "spec.versions[0].schema.openAPIV3Schema";

/// A root schema whose `spec` has these properties.
fn with_spec(props: Value) -> Value {
    json!({"type": "object", "properties": {"spec": {"type": "object", "properties": props}}})
}

fn parse(schema: &Value) -> StructuralSchema {
    StructuralSchema::new(schema, BASE).unwrap_or_else(|c| panic!("schema refused: {c:#?}"))
}

fn triples(causes: &[FieldCause]) -> Vec<(String, String, String)> {
    causes
        .iter()
        .map(|c| (c.field.clone(), c.reason.to_string(), c.message.clone()))
        .collect()
}

fn expect(list: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
    list.iter()
        .map(|(f, r, m)| (f.to_string(), r.to_string(), m.to_string()))
        .collect()
}

/// A table row: its name, the root schema (or `spec`'s properties), the
/// value and the causes expected as (field, reason, message).
type Row = (
    &'static str,
    Value,
    Value,
    Vec<(&'static str, &'static str, &'static str)>,
);

/// A refused schema: its name, the schema and the causes expected.
type Refusal = (
    &'static str,
    Value,
    Vec<(String, &'static str, &'static str)>,
);

const INVALID: &str = "FieldValueInvalid";
const TYPE: &str = "FieldValueTypeInvalid";
const REQUIRED: &str = "FieldValueRequired";
const FORBIDDEN: &str = "FieldValueForbidden";

#[test]
fn every_value_validation_is_worded_as_kube_words_it() {
    let s = |v: Value| with_spec(v);
    // (name, schema, spec, expected causes)
    let table: Vec<Row> = vec![
        (
            "type",
            s(json!({"replicas": {"type": "integer"}})),
            json!({"replicas": "3"}),
            vec![(
                "spec.replicas",
                TYPE,
                r#"Invalid value: "string": spec.replicas in body must be of type integer: "string""#,
            )],
        ),
        (
            "an integral float is an integer",
            s(json!({"replicas": {"type": "integer"}})),
            json!({"replicas": 3.0}),
            vec![],
        ),
        (
            "an integer is a number",
            s(json!({"ratio": {"type": "number"}})),
            json!({"ratio": 3}),
            vec![],
        ),
        (
            "object for a string",
            s(json!({"name": {"type": "string"}})),
            json!({"name": {"a": 1}}),
            vec![(
                "spec.name",
                TYPE,
                r#"Invalid value: "object": spec.name in body must be of type string: "object""#,
            )],
        ),
        (
            "enum",
            s(json!({"size": {"type": "string", "enum": ["s", "m"]}})),
            json!({"size": "xl"}),
            vec![(
                "spec.size",
                "FieldValueNotSupported",
                r#"Unsupported value: "xl": supported values: "s", "m""#,
            )],
        ),
        (
            "enum of numbers",
            s(json!({"n": {"type": "integer", "enum": [1, 2]}})),
            json!({"n": 3}),
            vec![(
                "spec.n",
                "FieldValueNotSupported",
                r#"Unsupported value: 3: supported values: "1", "2""#,
            )],
        ),
        (
            "enum by value",
            s(json!({"n": {"type": "number", "enum": [1.0, 2.5]}})),
            json!({"n": 1}),
            vec![],
        ),
        (
            "required",
            json!({"type": "object", "properties": {"spec": {"type": "object", "required": ["name", "size"],
                "properties": {"name": {"type": "string"}, "size": {"type": "string"}}}}}),
            json!({"size": "s"}),
            vec![("spec.name", REQUIRED, "Required value")],
        ),
        (
            "maximum",
            s(json!({"count": {"type": "integer", "maximum": 10}})),
            json!({"count": 11}),
            vec![(
                "spec.count",
                INVALID,
                "Invalid value: 11: spec.count in body should be less than or equal to 10",
            )],
        ),
        (
            "exclusive maximum",
            s(json!({"count": {"type": "integer", "maximum": 10, "exclusiveMaximum": true}})),
            json!({"count": 10}),
            vec![(
                "spec.count",
                INVALID,
                "Invalid value: 10: spec.count in body should be less than 10",
            )],
        ),
        (
            "minimum",
            s(json!({"count": {"type": "integer", "minimum": 1}})),
            json!({"count": 0}),
            vec![(
                "spec.count",
                INVALID,
                "Invalid value: 0: spec.count in body should be greater than or equal to 1",
            )],
        ),
        (
            "exclusive minimum of a number",
            s(json!({"ratio": {"type": "number", "minimum": 0.5, "exclusiveMinimum": true}})),
            json!({"ratio": 0.5}),
            vec![(
                "spec.ratio",
                INVALID,
                "Invalid value: 0.5: spec.ratio in body should be greater than 0.5",
            )],
        ),
        (
            "multipleOf",
            s(json!({"n": {"type": "integer", "multipleOf": 5}})),
            json!({"n": 7}),
            vec![(
                "spec.n",
                INVALID,
                "Invalid value: 7: spec.n in body should be a multiple of 5",
            )],
        ),
        (
            "multipleOf, then minimum, then maximum",
            s(json!({"n": {"type": "integer", "multipleOf": 2, "minimum": 4, "maximum": 2}})),
            json!({"n": 3}),
            vec![
                (
                    "spec.n",
                    INVALID,
                    "Invalid value: 3: spec.n in body should be a multiple of 2",
                ),
                (
                    "spec.n",
                    INVALID,
                    "Invalid value: 3: spec.n in body should be greater than or equal to 4",
                ),
                (
                    "spec.n",
                    INVALID,
                    "Invalid value: 3: spec.n in body should be less than or equal to 2",
                ),
            ],
        ),
        (
            "maxLength",
            s(json!({"name": {"type": "string", "maxLength": 3}})),
            json!({"name": "abcd"}),
            vec![(
                "spec.name",
                "FieldValueTooLong",
                "Too long: may not be more than 3 bytes",
            )],
        ),
        (
            "maxLength counts runes",
            s(json!({"name": {"type": "string", "maxLength": 3}})),
            json!({"name": "héé"}),
            vec![],
        ),
        (
            "minLength",
            s(json!({"name": {"type": "string", "minLength": 2}})),
            json!({"name": "a"}),
            vec![(
                "spec.name",
                INVALID,
                r#"Invalid value: "a": spec.name in body should be at least 2 chars long"#,
            )],
        ),
        (
            "pattern",
            s(json!({"name": {"type": "string", "pattern": "^[a-z]+$"}})),
            json!({"name": "ABC"}),
            vec![(
                "spec.name",
                INVALID,
                r#"Invalid value: "ABC": spec.name in body should match '^[a-z]+$'"#,
            )],
        ),
        (
            "only the first string problem",
            s(json!({"name": {"type": "string", "minLength": 5, "pattern": "^[a-z]+$"}})),
            json!({"name": "AB"}),
            vec![(
                "spec.name",
                INVALID,
                r#"Invalid value: "AB": spec.name in body should be at least 5 chars long"#,
            )],
        ),
        (
            "maxItems",
            s(json!({"l": {"type": "array", "items": {"type": "integer"}, "maxItems": 2}})),
            json!({"l": [1, 2, 3]}),
            vec![(
                "spec.l",
                "FieldValueTooMany",
                "Too many: 3: must have at most 2 items",
            )],
        ),
        (
            "minItems",
            s(json!({"l": {"type": "array", "items": {"type": "integer"}, "minItems": 2}})),
            json!({"l": [1]}),
            vec![(
                "spec.l",
                INVALID,
                "Invalid value: 1: spec.l in body should have at least 2 items",
            )],
        ),
        (
            "items",
            s(json!({"l": {"type": "array", "items": {"type": "integer"}}})),
            json!({"l": [1, "x"]}),
            vec![(
                "spec.l[1]",
                TYPE,
                r#"Invalid value: "string": spec.l[1] in body must be of type integer: "string""#,
            )],
        ),
        (
            "maxProperties",
            s(
                json!({"m": {"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": 1}}),
            ),
            json!({"m": {"a": "x", "b": "y"}}),
            vec![(
                "spec.m",
                "FieldValueTooMany",
                "Too many: 2: must have at most 1 items",
            )],
        ),
        (
            "minProperties",
            s(
                json!({"m": {"type": "object", "additionalProperties": {"type": "string"}, "minProperties": 2}}),
            ),
            json!({"m": {"a": "x"}}),
            vec![(
                "spec.m",
                INVALID,
                "Invalid value: 1: spec.m in body should have at least 2 properties",
            )],
        ),
        (
            "additionalProperties",
            s(json!({"m": {"type": "object", "additionalProperties": {"type": "integer"}}})),
            json!({"m": {"a": "x", "b": 2}}),
            vec![(
                "spec.m.a",
                TYPE,
                r#"Invalid value: "string": spec.m.a in body must be of type integer: "string""#,
            )],
        ),
        (
            "nullable",
            s(json!({"x": {"type": "string", "nullable": true}})),
            json!({"x": null}),
            vec![],
        ),
        (
            "null where not nullable",
            s(json!({"x": {"type": "string"}})),
            json!({"x": null}),
            vec![(
                "spec.x",
                TYPE,
                r#"Invalid value: "null": spec.x in body must be of type string: "null""#,
            )],
        ),
        (
            "int-or-string: int",
            s(json!({"port": {"x-kubernetes-int-or-string": true}})),
            json!({"port": 80}),
            vec![],
        ),
        (
            "int-or-string: string",
            s(json!({"port": {"x-kubernetes-int-or-string": true}})),
            json!({"port": "http"}),
            vec![],
        ),
        (
            "int-or-string: neither",
            s(json!({"port": {"x-kubernetes-int-or-string": true}})),
            json!({"port": true}),
            vec![(
                "spec.port",
                TYPE,
                r#"Invalid value: "boolean": spec.port in body must be of type integer,string: "boolean""#,
            )],
        ),
        (
            "format int32",
            s(json!({"n": {"type": "integer", "format": "int32"}})),
            json!({"n": 3_000_000_000_i64}),
            vec![(
                "<nil>",
                INVALID,
                r#"Invalid value: "": Checked value must be of type integer with format int32 in spec.n"#,
            )],
        ),
        (
            "format int64",
            s(json!({"n": {"type": "integer", "format": "int64"}})),
            json!({"n": 3_000_000_000_i64}),
            vec![],
        ),
        (
            "format float",
            s(json!({"n": {"type": "number", "format": "float"}})),
            json!({"n": 1e300}),
            vec![(
                "<nil>",
                INVALID,
                r#"Invalid value: "": Checked value must be of type number with format float in spec.n"#,
            )],
        ),
        (
            "format date-time",
            s(json!({"when": {"type": "string", "format": "date-time"}})),
            json!({"when": "yesterday"}),
            vec![(
                "spec.when",
                TYPE,
                r#"Invalid value: "yesterday": spec.when in body must be of type date-time: "yesterday""#,
            )],
        ),
        (
            "a date-time",
            s(json!({"when": {"type": "string", "format": "date-time"}})),
            json!({"when": "2024-01-02T03:04:05Z"}),
            vec![],
        ),
        (
            "format date",
            s(json!({"day": {"type": "string", "format": "date"}})),
            json!({"day": "2024-13-01"}),
            vec![(
                "spec.day",
                TYPE,
                r#"Invalid value: "2024-13-01": spec.day in body must be of type date: "2024-13-01""#,
            )],
        ),
        (
            "format byte",
            s(json!({"b": {"type": "string", "format": "byte"}})),
            json!({"b": "not base64!"}),
            vec![(
                "spec.b",
                TYPE,
                r#"Invalid value: "not base64!": spec.b in body must be of type byte: "not base64!""#,
            )],
        ),
        (
            "format uuid",
            s(json!({"u": {"type": "string", "format": "uuid"}})),
            json!({"u": "0b1f4c2e-6b1b-4f7e-9f3e-0e6a1c2b3d4e"}),
            vec![],
        ),
        (
            "format ipv4",
            s(json!({"ip": {"type": "string", "format": "ipv4"}})),
            json!({"ip": "10.0.0.1"}),
            vec![],
        ),
        (
            "an unknown format is ignored",
            s(json!({"x": {"type": "string", "format": "k8s-name"}})),
            json!({"x": "A B"}),
            vec![],
        ),
        (
            "anyOf",
            s(json!({"x": {"type": "integer", "anyOf": [{"minimum": 10}, {"maximum": 2}]}})),
            json!({"x": 5}),
            vec![
                (
                    "<nil>",
                    INVALID,
                    r#"Invalid value: "": "spec.x" must validate at least one schema (anyOf)"#,
                ),
                (
                    "spec.x",
                    INVALID,
                    "Invalid value: 5: spec.x in body should be greater than or equal to 10",
                ),
            ],
        ),
        (
            "anyOf: one is enough",
            s(json!({"x": {"type": "integer", "anyOf": [{"minimum": 10}, {"maximum": 6}]}})),
            json!({"x": 5}),
            vec![],
        ),
        (
            "oneOf: two valid",
            s(json!({"x": {"type": "integer", "oneOf": [{"minimum": 1}, {"maximum": 10}]}})),
            json!({"x": 5}),
            vec![(
                "<nil>",
                INVALID,
                r#"Invalid value: "": "spec.x" must validate one and only one schema (oneOf). Found 2 valid alternatives"#,
            )],
        ),
        (
            "oneOf: none valid",
            s(json!({"x": {"type": "integer", "oneOf": [{"minimum": 10}, {"maximum": 1}]}})),
            json!({"x": 5}),
            vec![
                (
                    "<nil>",
                    INVALID,
                    r#"Invalid value: "": "spec.x" must validate one and only one schema (oneOf). Found none valid"#,
                ),
                (
                    "spec.x",
                    INVALID,
                    "Invalid value: 5: spec.x in body should be greater than or equal to 10",
                ),
            ],
        ),
        (
            "allOf",
            s(json!({"x": {"type": "integer", "allOf": [{"minimum": 10}, {"maximum": 10}]}})),
            json!({"x": 5}),
            vec![
                (
                    "spec.x",
                    INVALID,
                    "Invalid value: 5: spec.x in body should be greater than or equal to 10",
                ),
                (
                    "<nil>",
                    INVALID,
                    r#"Invalid value: "": "spec.x" must validate all the schemas (allOf)"#,
                ),
            ],
        ),
        (
            "not",
            s(json!({"x": {"type": "string", "not": {"enum": ["forbidden"]}}})),
            json!({"x": "forbidden"}),
            vec![(
                "<nil>",
                INVALID,
                r#"Invalid value: "": "spec.x" must not validate the schema (not)"#,
            )],
        ),
        (
            "value validations reach properties",
            s(
                json!({"a": {"type": "string"}, "b": {"type": "string"}, "x": {"type": "object",
                "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
                "anyOf": [{"required": ["a"]}, {"required": ["b"]}]}}),
            ),
            json!({"x": {}}),
            vec![
                (
                    "<nil>",
                    INVALID,
                    r#"Invalid value: "": "spec.x" must validate at least one schema (anyOf)"#,
                ),
                ("spec.x.a", REQUIRED, "Required value"),
            ],
        ),
        (
            "list-type set",
            s(
                json!({"tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}}),
            ),
            json!({"tags": ["a", "b", "a", "a"]}),
            vec![
                (
                    "spec.tags[2]",
                    "FieldValueDuplicate",
                    r#"Duplicate value: "a""#,
                ),
                (
                    "spec.tags[3]",
                    "FieldValueDuplicate",
                    r#"Duplicate value: "a""#,
                ),
            ],
        ),
        (
            "list-type map, one key",
            s(
                json!({"ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}}}}),
            ),
            json!({"ports": [{"name": "http", "port": 80}, {"name": "http", "port": 81}]}),
            vec![(
                "spec.ports[1]",
                "FieldValueDuplicate",
                r#"Duplicate value: map[string]interface {}{"name":"http"}"#,
            )],
        ),
        (
            "list-type map, two keys",
            s(
                json!({"ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["port", "protocol"],
                "items": {"type": "object", "required": ["port", "protocol"],
                    "properties": {"port": {"type": "integer"}, "protocol": {"type": "string"}}}}}),
            ),
            json!({"ports": [{"port": 80, "protocol": "TCP"}, {"port": 80, "protocol": "UDP"}, {"port": 80, "protocol": "TCP"}]}),
            vec![(
                "spec.ports[2]",
                "FieldValueDuplicate",
                r#"Duplicate value: map[string]interface {}{"port":80, "protocol":"TCP"}"#,
            )],
        ),
        (
            "embedded resource",
            s(
                json!({"template": {"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true}}),
            ),
            json!({"template": {"metadata": {"name": "a/b", "labels": {"bad key!": "x"}}}}),
            vec![
                ("spec.template.apiVersion", REQUIRED, "Required value"),
                ("spec.template.kind", REQUIRED, "Required value"),
                (
                    "spec.template.metadata.name",
                    INVALID,
                    r#"Invalid value: "a/b": may not contain '/'"#,
                ),
                (
                    "spec.template.metadata.labels",
                    INVALID,
                    r#"Invalid value: "bad key!": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"#,
                ),
            ],
        ),
        (
            "embedded resource's kind and apiVersion",
            s(
                json!({"template": {"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true}}),
            ),
            json!({"template": {"apiVersion": "a/b/c", "kind": "Bad_Kind"}}),
            vec![
                (
                    "spec.template.apiVersion",
                    INVALID,
                    r#"Invalid value: "a/b/c": unexpected GroupVersion string: a/b/c"#,
                ),
                (
                    "spec.template.kind",
                    INVALID,
                    r#"Invalid value: "Bad_Kind": may have mixed case, but should otherwise match: a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"#,
                ),
            ],
        ),
    ];
    let mut failures = Vec::new();
    for (name, schema, spec, want) in table {
        let schema = parse(&schema);
        let got = triples(&schema.validate(
            &json!({"apiVersion": "example.com/v1", "kind": "Widget", "spec": spec}),
            None,
        ));
        if got != expect(&want) {
            failures.push(format!(
                "{name}:\n  got  {got:#?}\n  want {:#?}",
                expect(&want)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn unique_items_is_checked_though_crds_refuse_it() {
    // CRDs refuse `uniqueItems: true` (quadratic), so only a tree built
    // by hand reaches the check kube-openapi would make.
    let mut node = super::Node {
        ty: "array".into(),
        items: Some(Box::new(super::Node {
            ty: "integer".into(),
            ..Default::default()
        })),
        ..Default::default()
    };
    node.checks.unique_items = true;
    let got = super::validate::openapi(&node, &json!([1, 2, 1]), None, "spec.l", None);
    assert_eq!(
        triples(&got),
        expect(&[(
            "spec.l",
            INVALID,
            r#"Invalid value: "": spec.l in body shouldn't contain duplicates"#
        )])
    );
    assert!(super::validate::openapi(&node, &json!([1, 2]), None, "spec.l", None).is_empty());
}

#[test]
fn cel_rules_run_with_kube_wording() {
    let schema = parse(&json!({"type": "object", "properties": {"spec": {
        "type": "object",
        "x-kubernetes-validations": [
            {"rule": "self.replicas <= self.maxReplicas", "message": "replicas must not exceed maxReplicas"},
            {"rule": "self.replicas >= 0"},
            {"rule": "has(self.name) || has(self.generateName)", "reason": "FieldValueRequired", "fieldPath": ".name", "message": "name or generateName"},
            {"rule": "self.name != 'admin'", "messageExpression": "'name ' + self.name + ' is reserved'", "reason": "FieldValueForbidden", "fieldPath": ".name"},
        ],
        "properties": {
            "replicas": {"type": "integer"},
            "maxReplicas": {"type": "integer"},
            "name": {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "name is immutable"}]},
            "generateName": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-validations": [{"rule": "self.all(t, t.matches('^[a-z]+$'))", "message": "tags are lower case"}]},
        },
    }}}));
    let obj = |spec: Value| json!({"apiVersion": "example.com/v1", "kind": "Widget", "spec": spec});

    let ok = obj(json!({"replicas": 1, "maxReplicas": 3, "name": "a", "tags": ["x"]}));
    assert_eq!(triples(&schema.validate(&ok, None)), expect(&[]));

    let bad = obj(json!({"replicas": -5, "maxReplicas": -9, "tags": ["X"]}));
    assert_eq!(
        triples(&schema.validate(&bad, None)),
        expect(&[
            (
                "spec",
                INVALID,
                r#"Invalid value: "object": replicas must not exceed maxReplicas"#
            ),
            (
                "spec",
                INVALID,
                r#"Invalid value: "object": failed rule: self.replicas >= 0"#
            ),
            (
                "spec.name",
                REQUIRED,
                "Required value: name or generateName"
            ),
            // `self.name` of an object without one: an evaluation error.
            (
                "spec",
                INVALID,
                r#"Invalid value: "object": No such key: name evaluating rule: self.name != 'admin'"#
            ),
            (
                "spec.tags",
                INVALID,
                r#"Invalid value: "array": tags are lower case"#
            ),
        ])
    );

    let admin = obj(json!({"replicas": 1, "maxReplicas": 3, "name": "admin"}));
    assert_eq!(
        triples(&schema.validate(&admin, None)),
        expect(&[("spec.name", FORBIDDEN, "Forbidden: name admin is reserved")])
    );

    // A transition rule runs only on an update where the old value exists.
    let renamed = obj(json!({"replicas": 1, "maxReplicas": 3, "name": "b"}));
    assert!(
        schema.validate(&renamed, None).is_empty(),
        "no oldSelf on create"
    );
    assert_eq!(
        triples(&schema.validate(&renamed, Some(&ok))),
        expect(&[(
            "spec.name",
            INVALID,
            r#"Invalid value: "string": name is immutable"#
        )])
    );
    let unnamed_before = obj(json!({"replicas": 1, "maxReplicas": 3, "generateName": "g"}));
    assert!(
        schema.validate(&renamed, Some(&unnamed_before)).is_empty(),
        "no old name: the rule does not run"
    );
}

#[test]
fn a_rule_at_the_root_names_no_field() {
    let schema = parse(
        &json!({"type": "object", "x-kubernetes-validations": [{"rule": "self.metadata.name.startsWith('w-')"}],
        "properties": {"spec": {"type": "object"}}}),
    );
    let causes = schema.validate(&json!({"metadata": {"name": "x"}}), None);
    assert_eq!(
        triples(&causes),
        expect(&[(
            "<nil>",
            INVALID,
            r#"Invalid value: "object": failed rule: self.metadata.name.startsWith('w-')"#
        )])
    );
}

#[test]
fn schemas_that_are_not_structural_or_valid_are_refused_with_kube_causes() {
    let p = |s: &str| format!("{BASE}.{s}");
    let table: Vec<Refusal> = vec![
        (
            "a property without a type",
            with_spec(json!({"x": {"description": "?"}})),
            vec![(p("properties[spec].properties[x].type"), REQUIRED, "Required value: must not be empty for specified object fields")],
        ),
        (
            "items without a type",
            with_spec(json!({"l": {"type": "array", "items": {}}})),
            vec![(p("properties[spec].properties[l].items.type"), REQUIRED, "Required value: must not be empty for specified array items")],
        ),
        (
            "an array without items",
            with_spec(json!({"l": {"type": "array"}})),
            vec![(p("properties[spec].properties[l].items"), REQUIRED, "Required value: must be specified")],
        ),
        (
            "a root without a type",
            json!({"properties": {"spec": {"type": "object"}}}),
            vec![(p("type"), REQUIRED, "Required value: must not be empty at the root")],
        ),
        (
            "a root that is not an object",
            json!({"type": "string"}),
            vec![(p("type"), INVALID, r#"Invalid value: "string": must be object at the root"#)],
        ),
        (
            "additionalProperties at the root",
            json!({"type": "object", "additionalProperties": {"type": "string"}}),
            vec![(p("additionalProperties"), FORBIDDEN, "Forbidden: must not be used at the root")],
        ),
        (
            "a type in anyOf",
            with_spec(json!({"x": {"type": "string", "anyOf": [{"type": "string"}]}})),
            vec![(p("properties[spec].properties[x].anyOf[0].type"), FORBIDDEN, "Forbidden: must be empty to be structural")],
        ),
        (
            "a default in allOf",
            with_spec(json!({"x": {"type": "string", "allOf": [{"default": "a"}]}})),
            vec![(p("properties[spec].properties[x].allOf[0].default"), FORBIDDEN, "Forbidden: must be undefined to be structural")],
        ),
        (
            "a field only a value validation specifies",
            with_spec(json!({"x": {"type": "object", "anyOf": [{"properties": {"y": {"minLength": 1}}}]}})),
            vec![(
                p("properties[spec].properties[x].properties[y]"),
                REQUIRED,
                "Required value: because it is defined in spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[x].anyOf[0].properties[y]",
            )],
        ),
        (
            "metadata beyond name and generateName",
            json!({"type": "object", "properties": {"metadata": {"type": "object", "properties": {"labels": {"type": "object"}}}}}),
            vec![(
                p("properties[metadata]"),
                FORBIDDEN,
                "Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified",
            )],
        ),
        (
            "an unknown type",
            with_spec(json!({"x": {"type": "strin"}})),
            vec![(
                p("properties[spec].properties[x].type"),
                "FieldValueNotSupported",
                r#"Unsupported value: "strin": supported values: "array", "boolean", "integer", "number", "object", "string""#,
            )],
        ),
        (
            "uniqueItems",
            with_spec(json!({"l": {"type": "array", "items": {"type": "string"}, "uniqueItems": true}})),
            vec![(p("properties[spec].properties[l].uniqueItems"), FORBIDDEN, "Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic")],
        ),
        (
            "$ref",
            with_spec(json!({"x": {"$ref": "#/definitions/x"}})),
            vec![
                (p("properties[spec].properties[x].$ref"), FORBIDDEN, "Forbidden: $ref is not supported"),
                (p("properties[spec].properties[x].type"), REQUIRED, "Required value: must not be empty for specified object fields"),
            ],
        ),
        (
            "properties and additionalProperties",
            with_spec(json!({"m": {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "string"}}})),
            vec![(p("properties[spec].properties[m].additionalProperties"), FORBIDDEN, "Forbidden: additionalProperties and properties are mutual exclusive")],
        ),
        (
            "a list map without keys",
            with_spec(json!({"l": {"type": "array", "x-kubernetes-list-type": "map", "items": {"type": "object", "properties": {"a": {"type": "string"}}}}})),
            vec![(p("properties[spec].properties[l].x-kubernetes-list-map-keys"), REQUIRED, "Required value: must not be empty if x-kubernetes-list-type is map")],
        ),
        (
            "a list-map key neither required nor defaulted",
            with_spec(json!({"l": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["a"],
                "items": {"type": "object", "properties": {"a": {"type": "string"}}}}})),
            vec![(
                p("properties[spec].properties[l].items.properties[a].default"),
                REQUIRED,
                "Required value: this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property",
            )],
        ),
        (
            "an unknown list type",
            with_spec(json!({"l": {"type": "array", "x-kubernetes-list-type": "bag", "items": {"type": "string"}}})),
            vec![(p("properties[spec].properties[l].x-kubernetes-list-type"), "FieldValueNotSupported", r#"Unsupported value: "bag": supported values: "atomic", "set", "map""#)],
        ),
        (
            "a pattern that does not compile",
            with_spec(json!({"x": {"type": "string", "pattern": "(["}})),
            vec![],
        ),
        (
            "an embedded resource without properties",
            with_spec(json!({"t": {"type": "object", "x-kubernetes-embedded-resource": true}})),
            vec![(
                p("properties[spec].properties[t].properties"),
                REQUIRED,
                "Required value: must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
            )],
        ),
        (
            "int-or-string with preserve-unknown-fields",
            with_spec(json!({"p": {"x-kubernetes-int-or-string": true, "x-kubernetes-preserve-unknown-fields": true}})),
            vec![(p("properties[spec].properties[p].x-kubernetes-preserve-unknown-fields"), INVALID, "Invalid value: true: must be false if x-kubernetes-int-or-string is true")],
        ),
        (
            "a default of the wrong type",
            with_spec(json!({"n": {"type": "integer", "default": "x"}})),
            vec![(p("properties[spec].properties[n].default"), TYPE, r#"Invalid value: "string":  in body must be of type integer: "string""#)],
        ),
        (
            "a default with unknown fields",
            with_spec(json!({"o": {"type": "object", "properties": {"a": {"type": "string"}}, "default": {"a": "x", "b": "y"}}})),
            vec![(p("properties[spec].properties[o].default"), INVALID, r#"Invalid value: {"a":"x","b":"y"}: must not have unknown fields"#)],
        ),
        (
            "a transition rule where nothing correlates",
            with_spec(json!({"l": {"type": "array", "items": {"type": "string",
                "x-kubernetes-validations": [{"rule": "self == oldSelf"}]}}})),
            vec![(
                p("properties[spec].properties[l].items.x-kubernetes-validations[0].rule"),
                INVALID,
                r#"Invalid value: "self == oldSelf": oldSelf cannot be used on the uncorrelatable portion of the schema within spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[l]"#,
            )],
        ),
        (
            "an empty rule",
            with_spec(json!({"x": {"type": "string", "x-kubernetes-validations": [{"rule": " "}]}})),
            vec![(p("properties[spec].properties[x].x-kubernetes-validations[0].rule"), REQUIRED, "Required value: rule is not specified")],
        ),
        (
            "an unknown reason",
            with_spec(json!({"x": {"type": "string", "x-kubernetes-validations": [{"rule": "true", "reason": "Nope"}]}})),
            vec![(
                p("properties[spec].properties[x].x-kubernetes-validations[0].reason"),
                "FieldValueNotSupported",
                r#"Unsupported value: "Nope": supported values: "FieldValueDuplicate", "FieldValueForbidden", "FieldValueInvalid", "FieldValueRequired""#,
            )],
        ),
    ];
    let mut failures = Vec::new();
    for (name, schema, want) in table {
        let got = match StructuralSchema::new(&schema, BASE) {
            Ok(_) => Vec::new(),
            Err(causes) => triples(&causes),
        };
        let want: Vec<_> = want
            .into_iter()
            .map(|(f, r, m)| (f, r.to_string(), m.to_string()))
            .collect();
        if name == "a pattern that does not compile" {
            let ok = got.len() == 1
                && got[0].0 == p("properties[spec].properties[x].pattern")
                && got[0].2.starts_with(
                    r#"Invalid value: "([": must be a valid regular expression, but isn't: "#,
                );
            if !ok {
                failures.push(format!("{name}: got {got:#?}"));
            }
        } else if got != want {
            failures.push(format!("{name}:\n  got  {got:#?}\n  want {want:#?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_rule_that_does_not_compile_is_a_schema_error() {
    let schema = with_spec(
        json!({"x": {"type": "string", "x-kubernetes-validations": [{"rule": "self >"}]}}),
    );
    let causes = StructuralSchema::new(&schema, BASE).expect_err("refused");
    assert_eq!(causes.len(), 1, "{causes:#?}");
    assert_eq!(
        causes[0].field,
        format!("{BASE}.properties[spec].properties[x].x-kubernetes-validations[0].rule")
    );
    assert_eq!(causes[0].reason, INVALID);
    assert!(
        causes[0].message.starts_with(
            r#"Invalid value: apiextensions.ValidationRule{Rule:"self >", Message:"", MessageExpression:"", Reason:(*apiextensions.FieldValueErrorReason)(nil), FieldPath:"", OptionalOldSelf:(*bool)(nil)}: compilation failed: "#
        ),
        "{}",
        causes[0].message
    );
}

#[test]
fn kube_patterns_are_accepted() {
    // What CRDs in the wild use: int-or-string through anyOf, metadata
    // naming name only, nested preserve-unknown-fields, a list map.
    let schema = json!({"type": "object", "properties": {
        "metadata": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}}},
        "spec": {"type": "object", "properties": {
            "port": {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": true},
            "size": {"allOf": [{"anyOf": [{"type": "integer"}, {"type": "string"}]}, {"pattern": "^[0-9]+$"}], "x-kubernetes-int-or-string": true},
            "raw": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "any": {"x-kubernetes-preserve-unknown-fields": true},
            "items": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}},
        }},
        "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}},
    }});
    let s = parse(&schema);
    let obj = json!({"apiVersion": "v1", "kind": "W", "metadata": {"name": "w"}, "spec": {"port": "http", "size": "10", "raw": {"x": 1}, "any": [1]}});
    assert!(s.validate(&obj, None).is_empty());
}

#[test]
fn pruning_removes_what_the_schema_does_not_know() {
    let schema = parse(&json!({"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
            "a": {"type": "integer"},
            "inner": {"type": "object", "properties": {"b": {"type": "string"}}},
            "list": {"type": "array", "items": {"type": "object", "properties": {"c": {"type": "string"}}}},
            "labels": {"type": "object", "additionalProperties": {"type": "object", "properties": {"v": {"type": "string"}}}},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {"known": {"type": "object", "properties": {"k": {"type": "string"}}}}},
            "template": {"type": "object", "x-kubernetes-embedded-resource": true, "properties": {"spec": {"type": "object", "properties": {"s": {"type": "string"}}}}},
        }},
    }}));
    let mut obj = json!({
        "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "labels": {"x": "y"}},
        "spec": {
            "a": 1, "zz": 2,
            "inner": {"b": "x", "q": 3},
            "list": [{"c": "x", "d": 1}, {"c": "y"}],
            "labels": {"one": {"v": "1", "w": "2"}},
            "free": {"anything": {"deep": true}, "known": {"k": "x", "unknown": 1}},
            "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"s": "x", "t": "y"}, "extra": 1},
        },
        "status": {"ready": true},
    });
    let removed = schema.prune(&mut obj);
    assert_eq!(
        removed,
        [
            "spec.free.known.unknown",
            "spec.inner.q",
            "spec.labels.one.w",
            "spec.list[0].d",
            "spec.template.extra",
            "spec.template.spec.t",
            "spec.zz",
            "status",
        ]
    );
    assert_eq!(
        obj,
        json!({
            "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "labels": {"x": "y"}},
            "spec": {
                "a": 1,
                "inner": {"b": "x"},
                "list": [{"c": "x"}, {"c": "y"}],
                "labels": {"one": {"v": "1"}},
                "free": {"anything": {"deep": true}, "known": {"k": "x"}},
                "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"s": "x"}},
            },
        })
    );
    // Nothing left to prune the second time.
    assert!(schema.prune(&mut obj).is_empty());
}

#[test]
fn preserve_unknown_fields_at_the_root_keeps_everything_unknown() {
    let schema = parse(
        &json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true,
        "properties": {"spec": {"type": "object", "properties": {"a": {"type": "string"}}}}}),
    );
    let mut obj = json!({"kind": "W", "other": {"x": 1}, "spec": {"a": "x", "b": 1}});
    assert_eq!(schema.prune(&mut obj), ["spec.b"]);
    assert_eq!(
        obj,
        json!({"kind": "W", "other": {"x": 1}, "spec": {"a": "x"}})
    );
}

#[test]
fn defaults_apply_only_under_existing_parents() {
    let schema = parse(
        &json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "replicas": {"type": "integer", "default": 1},
            "inner": {"type": "object", "properties": {"b": {"type": "string", "default": "bee"}}},
            "made": {"type": "object", "default": {}, "properties": {"c": {"type": "integer", "default": 3}}},
            "list": {"type": "array", "items": {"type": "object", "properties": {"d": {"type": "boolean", "default": true}}}},
            "maybe": {"type": "string", "nullable": true},
            "dropped": {"type": "string"},
            "nulled": {"type": "string", "default": "was null"},
            "map": {"type": "object", "additionalProperties": {"type": "object", "properties": {"e": {"type": "string", "default": "e"}}}},
        }}}}),
    );

    let mut obj = json!({"spec": {}});
    schema.apply_defaults(&mut obj);
    assert_eq!(
        obj,
        json!({"spec": {"replicas": 1, "made": {"c": 3}, "nulled": "was null"}}),
        "inner is absent, so its b is not defaulted; made is defaulted to {{}} and then filled"
    );

    let mut obj = json!({"spec": {"replicas": 5, "inner": {}, "list": [{}, {"d": false}],
        "maybe": null, "dropped": null, "nulled": null, "map": {"k": {}}}});
    schema.apply_defaults(&mut obj);
    assert_eq!(
        obj,
        json!({"spec": {"replicas": 5, "inner": {"b": "bee"}, "made": {"c": 3}, "list": [{"d": true}, {"d": false}],
            "maybe": null, "nulled": "was null", "map": {"k": {"e": "e"}}}})
    );

    // No spec: nothing under it is defaulted.
    let mut obj = json!({"kind": "W"});
    schema.apply_defaults(&mut obj);
    assert_eq!(obj, json!({"kind": "W"}));
}

#[test]
fn defaults_then_validation() {
    let schema = parse(
        &json!({"type": "object", "properties": {"spec": {"type": "object", "required": ["size"],
        "properties": {"size": {"type": "string", "enum": ["s", "m"], "default": "s"}}}}}),
    );
    let mut obj = json!({"spec": {"unknown": 1}});
    assert_eq!(schema.prune(&mut obj), ["spec.unknown"]);
    assert_eq!(
        triples(&schema.validate(&obj, None)),
        expect(&[("spec.size", REQUIRED, "Required value")]),
        "before defaulting the field is missing"
    );
    schema.apply_defaults(&mut obj);
    assert!(schema.validate(&obj, None).is_empty());
    assert_eq!(obj, json!({"spec": {"size": "s"}}));
}

#[test]
fn the_type_schema_carries_list_types_map_keys_and_object_meta() {
    let schema = parse(
        &json!({"type": "object", "properties": {"spec": {"type": "object", "required": ["ports"], "properties": {
            "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name", "protocol"],
                "items": {"type": "object", "required": ["name", "protocol"], "properties": {
                    "name": {"type": "string"}, "protocol": {"type": "string"}, "port": {"x-kubernetes-int-or-string": true}}}},
            "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            "selector": {"type": "object", "x-kubernetes-map-type": "atomic", "additionalProperties": {"type": "string"}},
            "data": {"type": "string", "format": "byte"},
            "raw": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        }}}}),
    );
    let table = schema.to_type_schema("example.com", "v1", "Widget");
    let root = table
        .for_kind("example.com", "v1", "Widget")
        .expect("root type");
    assert_eq!(
        root.field("metadata").map(|f| &f.shape),
        Some(&Shape::Object(
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta".into()
        ))
    );
    let meta = table
        .object(&root.field("metadata").expect("metadata").shape)
        .expect("ObjectMeta is in the table");
    let managed = meta.field("managedFields").expect("managedFields");
    assert!(
        table
            .object(
                managed
                    .shape
                    .object_name()
                    .map(|n| Shape::Object(n.into()))
                    .as_ref()
                    .expect("an object list")
            )
            .is_some(),
        "ObjectMeta's own types come along"
    );
    assert_eq!(
        root.field("apiVersion").map(|f| &f.shape),
        Some(&Shape::Scalar(Scalar::String))
    );

    let spec = table
        .object(&root.field("spec").expect("spec").shape)
        .expect("spec type");
    assert_eq!(spec.required(), ["ports"]);
    let ports = spec.field("ports").expect("ports");
    assert_eq!(ports.list_type, Some(ListType::Map));
    assert_eq!(ports.list_map_keys, ["name", "protocol"]);
    let Shape::List(item) = &ports.shape else {
        panic!("ports is a list: {:?}", ports.shape)
    };
    let port = table.object(item).expect("port item type");
    assert_eq!(port.required(), ["name", "protocol"]);
    assert_eq!(
        port.field("port").map(|f| &f.shape),
        Some(&Shape::Scalar(Scalar::IntOrString))
    );

    let tags = spec.field("tags").expect("tags");
    assert_eq!(tags.list_type, Some(ListType::Set));
    assert_eq!(
        tags.shape,
        Shape::List(Box::new(Shape::Scalar(Scalar::String)))
    );
    let selector = spec.field("selector").expect("selector");
    assert_eq!(selector.map_type, Some(MapType::Atomic));
    assert_eq!(
        selector.shape,
        Shape::Map(Box::new(Shape::Scalar(Scalar::String)))
    );
    assert_eq!(
        spec.field("data").map(|f| &f.shape),
        Some(&Shape::Scalar(Scalar::Byte))
    );
    assert_eq!(spec.field("raw").map(|f| &f.shape), Some(&Shape::Untyped));
    // The built-in table does not know the custom kind.
    assert!(crate::kube::types::Schema::builtin()
        .for_kind("example.com", "v1", "Widget")
        .is_none());
}

#[test]
fn an_update_ratchets_what_it_does_not_change() {
    let schema = parse(
        &json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "size": {"type": "string", "enum": ["s", "m"]},
            "count": {"type": "integer", "maximum": 10, "x-kubernetes-validations": [{"rule": "self % 2 == 0", "message": "even"}]},
            "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "required": ["name"], "properties": {
                    "name": {"type": "string"}, "port": {"type": "integer", "minimum": 1}}}},
        }}}}),
    );
    // Stored before the schema tightened: every field is invalid now.
    let old = json!({"spec": {"size": "xl", "count": 11, "ports": [{"name": "a", "port": 0}, {"name": "b", "port": 0}]}});
    assert_eq!(schema.validate(&old, None).len(), 5, "invalid on create");
    assert!(
        schema.validate(&old, Some(&old)).is_empty(),
        "an unchanged object passes"
    );

    // Port `b` moved to another index and kept its value; port `a` changed.
    let new = json!({"spec": {"size": "xl", "count": 13, "ports": [{"name": "b", "port": 0}, {"name": "a", "port": -1}]}});
    assert_eq!(
        triples(&schema.validate(&new, Some(&old))),
        expect(&[
            ("spec.count", INVALID, "Invalid value: 13: spec.count in body should be less than or equal to 10"),
            ("spec.ports[1].port", INVALID, "Invalid value: -1: spec.ports[1].port in body should be greater than or equal to 1"),
            ("spec.count", INVALID, r#"Invalid value: "integer": even"#),
        ])
    );
}

#[test]
fn a_schema_can_be_shared_across_tasks() {
    // The CRD registry keeps parsed schemas behind an `Arc` that every
    // request handler reads.
    fn shared<T: Send + Sync + 'static>() {}
    shared::<StructuralSchema>();
}
