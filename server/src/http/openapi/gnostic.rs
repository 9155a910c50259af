//! Converts the swagger 2.0 JSON document into gnostic's protobuf
//! `openapi.v2.Document` (`kubestore_proto::openapi_v2`), the form
//! client-go's `OpenAPISchema()` asks for
//! (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`).
//!
//! Values gnostic keeps as `Any` (extensions, defaults, enums, examples)
//! are written as their JSON text in `Any.yaml` (JSON is YAML), which is
//! where kube-openapi reads them. Hand-written rather than through
//! gnostic's Go compiler: there is no maintained Rust port, and the
//! document uses a small part of the format.

use kubestore_proto::openapi_v2 as pb;
use prost::Message;
use serde_json::{Map, Value};

/// The protobuf encoding of a swagger 2.0 document.
pub fn encode(doc: &Value) -> Vec<u8> {
    document(doc).encode_to_vec()
}

pub fn document(doc: &Value) -> pb::Document {
    pb::Document {
        swagger: text(doc, "swagger"),
        info: doc.get("info").map(|i| pb::Info {
            title: text(i, "title"),
            version: text(i, "version"),
            description: text(i, "description"),
        }),
        paths: Some(pb::Paths {
            vendor_extension: Vec::new(),
            path: entries(doc, "paths")
                .map(|(name, item)| pb::NamedPathItem {
                    name: name.clone(),
                    value: Some(path_item(item)),
                })
                .collect(),
        }),
        definitions: Some(pb::Definitions {
            additional_properties: named_schemas(doc.get("definitions")),
        }),
        security: doc
            .get("security")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|req| pb::SecurityRequirement {
                additional_properties: req
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(name, scopes)| pb::NamedStringArray {
                        name: name.clone(),
                        value: Some(pb::StringArray {
                            value: strings(Some(scopes)),
                        }),
                    })
                    .collect(),
            })
            .collect(),
        security_definitions: Some(pb::SecurityDefinitions {
            additional_properties: entries(doc, "securityDefinitions")
                .map(|(name, d)| pb::NamedSecurityDefinitionsItem {
                    name: name.clone(),
                    value: Some(pb::SecurityDefinitionsItem {
                        oneof: Some(pb::security_definitions_item::Oneof::ApiKeySecurity(
                            pb::ApiKeySecurity {
                                r#type: text(d, "type"),
                                name: text(d, "name"),
                                r#in: text(d, "in"),
                                description: text(d, "description"),
                            },
                        )),
                    }),
                })
                .collect(),
        }),
        vendor_extension: extensions(doc),
        ..Default::default()
    }
}

fn text(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn flag(v: &Value, key: &str) -> bool {
    v.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn int(v: &Value, key: &str) -> i64 {
    v.get(key).and_then(Value::as_i64).unwrap_or(0)
}

fn float(v: &Value, key: &str) -> f64 {
    v.get(key).and_then(Value::as_f64).unwrap_or(0.0)
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

fn entries<'a>(v: &'a Value, key: &str) -> impl Iterator<Item = (&'a String, &'a Value)> {
    v.get(key).and_then(Value::as_object).into_iter().flatten()
}

fn any(v: &Value) -> pb::Any {
    pb::Any {
        yaml: v.to_string(),
    }
}

fn extensions(v: &Value) -> Vec<pb::NamedAny> {
    v.as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.starts_with("x-"))
        .map(|(k, x)| pb::NamedAny {
            name: k.clone(),
            value: Some(any(x)),
        })
        .collect()
}

fn named_schemas(v: Option<&Value>) -> Vec<pb::NamedSchema> {
    v.and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(name, s)| pb::NamedSchema {
            name: name.clone(),
            value: Some(schema(s)),
        })
        .collect()
}

pub fn schema(s: &Value) -> pb::Schema {
    let items = match s.get("items") {
        Some(Value::Array(list)) => Some(pb::ItemsItem {
            schema: list.iter().map(schema).collect(),
        }),
        Some(one @ Value::Object(_)) => Some(pb::ItemsItem {
            schema: vec![schema(one)],
        }),
        _ => None,
    };
    let additional_properties = match s.get("additionalProperties") {
        Some(Value::Bool(b)) => Some(pb::AdditionalPropertiesItem {
            oneof: Some(pb::additional_properties_item::Oneof::Boolean(*b)),
        }),
        Some(one @ Value::Object(_)) => Some(pb::AdditionalPropertiesItem {
            oneof: Some(pb::additional_properties_item::Oneof::Schema(Box::new(
                schema(one),
            ))),
        }),
        _ => None,
    };
    let r#type = match s.get("type") {
        Some(Value::String(t)) => Some(pb::TypeItem {
            value: vec![t.clone()],
        }),
        Some(list @ Value::Array(_)) => Some(pb::TypeItem {
            value: strings(Some(list)),
        }),
        _ => None,
    };
    pb::Schema {
        r#ref: text(s, "$ref"),
        format: text(s, "format"),
        title: text(s, "title"),
        description: text(s, "description"),
        default: s.get("default").map(any),
        multiple_of: float(s, "multipleOf"),
        maximum: float(s, "maximum"),
        exclusive_maximum: flag(s, "exclusiveMaximum"),
        minimum: float(s, "minimum"),
        exclusive_minimum: flag(s, "exclusiveMinimum"),
        max_length: int(s, "maxLength"),
        min_length: int(s, "minLength"),
        pattern: text(s, "pattern"),
        max_items: int(s, "maxItems"),
        min_items: int(s, "minItems"),
        unique_items: flag(s, "uniqueItems"),
        max_properties: int(s, "maxProperties"),
        min_properties: int(s, "minProperties"),
        required: strings(s.get("required")),
        r#enum: s
            .get("enum")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(any)
            .collect(),
        additional_properties: additional_properties.map(Box::new),
        r#type,
        items,
        all_of: s
            .get("allOf")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(schema)
            .collect(),
        properties: s.get("properties").map(|p| pb::Properties {
            additional_properties: named_schemas(Some(p)),
        }),
        discriminator: text(s, "discriminator"),
        read_only: flag(s, "readOnly"),
        example: s.get("example").map(any),
        vendor_extension: extensions(s),
    }
}

fn parameter(p: &Value) -> pb::ParametersItem {
    use pb::parameters_item::Oneof as Item;
    if let Some(r) = p.get("$ref").and_then(Value::as_str) {
        return pb::ParametersItem {
            oneof: Some(Item::JsonReference(pb::JsonReference {
                r#ref: r.to_string(),
                description: text(p, "description"),
            })),
        };
    }
    let inner = match p.get("in").and_then(Value::as_str) {
        Some("body") => pb::parameter::Oneof::BodyParameter(pb::BodyParameter {
            description: text(p, "description"),
            name: text(p, "name"),
            r#in: "body".into(),
            required: flag(p, "required"),
            schema: p.get("schema").map(schema),
        }),
        Some("path") => pb::parameter::Oneof::NonBodyParameter(pb::NonBodyParameter {
            oneof: Some(pb::non_body_parameter::Oneof::PathParameterSubSchema(
                pb::PathParameterSubSchema {
                    required: flag(p, "required"),
                    r#in: "path".into(),
                    description: text(p, "description"),
                    name: text(p, "name"),
                    r#type: text(p, "type"),
                    format: text(p, "format"),
                    unique_items: flag(p, "uniqueItems"),
                    vendor_extension: extensions(p),
                },
            )),
        }),
        _ => pb::parameter::Oneof::NonBodyParameter(pb::NonBodyParameter {
            oneof: Some(pb::non_body_parameter::Oneof::QueryParameterSubSchema(
                pb::QueryParameterSubSchema {
                    required: flag(p, "required"),
                    r#in: "query".into(),
                    description: text(p, "description"),
                    name: text(p, "name"),
                    allow_empty_value: flag(p, "allowEmptyValue"),
                    r#type: text(p, "type"),
                    format: text(p, "format"),
                    default: p.get("default").map(any),
                    unique_items: flag(p, "uniqueItems"),
                    r#enum: p
                        .get("enum")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .map(any)
                        .collect(),
                    vendor_extension: extensions(p),
                },
            )),
        }),
    };
    pb::ParametersItem {
        oneof: Some(Item::Parameter(pb::Parameter { oneof: Some(inner) })),
    }
}

fn parameters(v: &Value) -> Vec<pb::ParametersItem> {
    v.get("parameters")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(parameter)
        .collect()
}

fn operation(op: &Value) -> pb::Operation {
    let empty = Map::new();
    let responses = op
        .get("responses")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    pb::Operation {
        tags: strings(op.get("tags")),
        summary: text(op, "summary"),
        description: text(op, "description"),
        operation_id: text(op, "operationId"),
        produces: strings(op.get("produces")),
        consumes: strings(op.get("consumes")),
        parameters: parameters(op),
        responses: Some(pb::Responses {
            response_code: responses
                .iter()
                .filter(|(k, _)| !k.starts_with("x-"))
                .map(|(code, r)| pb::NamedResponseValue {
                    name: code.clone(),
                    value: Some(pb::ResponseValue {
                        oneof: Some(pb::response_value::Oneof::Response(pb::Response {
                            description: text(r, "description"),
                            schema: r.get("schema").map(|s| pb::SchemaItem {
                                oneof: Some(pb::schema_item::Oneof::Schema(schema(s))),
                            }),
                            vendor_extension: extensions(r),
                        })),
                    }),
                })
                .collect(),
            vendor_extension: Vec::new(),
        }),
        schemes: strings(op.get("schemes")),
        deprecated: flag(op, "deprecated"),
        vendor_extension: extensions(op),
    }
}

fn path_item(item: &Value) -> pb::PathItem {
    let op = |m: &str| item.get(m).map(operation);
    pb::PathItem {
        r#ref: text(item, "$ref"),
        get: op("get"),
        put: op("put"),
        post: op("post"),
        delete: op("delete"),
        options: op("options"),
        head: op("head"),
        patch: op("patch"),
        parameters: parameters(item),
        vendor_extension: extensions(item),
    }
}
