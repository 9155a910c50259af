use serde_json::{json, Map, Value};

use super::admission::{accept_names, prepare_create, validate, validate_update};
use super::*;
use crate::kube::resources;

fn widgets() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com", "uid": "u-1"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"], "categories": ["all"]},
            "versions": [
                {"name": "v1", "served": true, "storage": true,
                 "schema": {"openAPIV3Schema": {"type": "object"}},
                 "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.size", "statusReplicasPath": ".status.size"}},
                 "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}],
                 "selectableFields": [{"jsonPath": ".spec.color"}]},
                {"name": "v1beta1", "served": true, "storage": false, "deprecated": true,
                 "schema": {"openAPIV3Schema": {"type": "object"}}},
                {"name": "v1alpha1", "served": false, "storage": false,
                 "schema": {"openAPIV3Schema": {"type": "object"}}}
            ]
        }
    })
}

fn as_map(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => panic!("not an object"),
    }
}

/// A definition as admission leaves it, established against the built-ins.
fn admitted(def: Value) -> Value {
    let mut obj = as_map(def);
    prepare_create(&mut obj);
    accept_names(&mut obj, &TypeSet::builtin());
    Value::Object(obj)
}

#[test]
fn an_established_definition_serves_each_served_version_under_one_prefix() {
    let def = admitted(widgets());
    let set = type_set([&def]);
    let v1 = set.find("example.com", "v1", "widgets").expect("v1 served");
    let beta = set
        .find("example.com", "v1beta1", "widgets")
        .expect("v1beta1 served");
    assert!(
        set.find("example.com", "v1alpha1", "widgets").is_none(),
        "not served"
    );
    assert_eq!(v1.kind, "Widget");
    assert_eq!(v1.singular, "widget");
    assert!(v1.namespaced);
    assert_eq!(v1.short_names, ["wd"]);
    assert_eq!(v1.etcd_prefix, "/registry/example.com/widgets");
    assert_eq!(beta.etcd_prefix, v1.etcd_prefix);
    assert!(v1.has_status_subresource() && v1.has_scale_subresource());
    assert!(!beta.has_status_subresource());
    let custom = v1.custom.expect("custom");
    assert!(custom.storage);
    assert_eq!(custom.selectable_fields, ["spec.color"]);
    assert_eq!(custom.printer_columns[0].json_path, ".spec.size");
    assert_eq!(
        custom.scale.as_ref().map(|s| s.spec_replicas.as_str()),
        Some(".spec.size")
    );
    assert_eq!(
        beta.custom.and_then(|c| c.deprecation_warning.as_deref()),
        Some("example.com/v1beta1 Widget is deprecated")
    );
    // Interned: the same definition gives the same types.
    let again = type_set([&def]);
    assert!(std::ptr::eq(
        v1,
        again.find("example.com", "v1", "widgets").expect("v1")
    ));
    assert_eq!(
        set.groups().last(),
        Some(&("example.com", vec!["v1", "v1beta1"]))
    );
}

#[test]
fn a_definition_not_established_or_naming_a_served_type_serves_nothing() {
    assert!(
        type_set([&widgets()]).custom().next().is_none(),
        "no status yet"
    );
    let mut taken = admitted(widgets());
    taken["spec"]["group"] = json!("apps");
    taken["spec"]["names"]["plural"] = json!("deployments");
    assert!(type_set([&taken])
        .find("apps", "v1", "deployments")
        .is_some_and(|rt| rt.custom.is_none()));
    // Two definitions claiming one name: the first by name is served.
    let mut second = admitted(widgets());
    second["metadata"]["name"] = json!("zz.example.com");
    second["spec"]["names"]["kind"] = json!("Gadget");
    let set = type_set([&second, &admitted(widgets())]);
    let served = set
        .find("example.com", "v1", "widgets")
        .expect("one served");
    assert_eq!(
        served.custom.map(|c| c.definition.as_str()),
        Some("widgets.example.com")
    );
}

#[test]
fn names_in_use_are_not_accepted_as_kube_words_it() {
    let served = type_set([&admitted(widgets())]);
    let mut clash = as_map(widgets());
    clash["metadata"]["name"] = json!("other.example.com");
    prepare_create(&mut clash);
    accept_names(&mut clash, &served);
    let conditions = clash["status"]["conditions"]
        .as_array()
        .expect("conditions")
        .clone();
    assert_eq!(conditions[0]["type"], "NamesAccepted");
    assert_eq!(conditions[0]["status"], "False");
    assert_eq!(conditions[0]["reason"], "PluralConflict");
    assert_eq!(conditions[0]["message"], "\"widgets\" is already in use");
    assert_eq!(conditions[1]["type"], "Established");
    assert_eq!(conditions[1]["status"], "False");
    // Its own types do not conflict with it (an update of the definition).
    let mut own = as_map(admitted(widgets()));
    accept_names(&mut own, &served);
    assert!(condition_true(&Value::Object(own.clone()), "Established"));
    assert_eq!(own["status"]["acceptedNames"]["kind"], "Widget");
    assert_eq!(own["status"]["storedVersions"], json!(["v1"]));
    assert!(own["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| f.contains(&json!(CLEANUP_FINALIZER))));
}

#[test]
fn definitions_are_validated_as_kube_validates_them() {
    let causes = |def: Value| -> Vec<(String, String)> {
        let mut obj = as_map(def);
        prepare_create(&mut obj);
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        validate(&obj, &name)
            .into_iter()
            .map(|c| (c.field, c.message))
            .collect()
    };
    assert_eq!(causes(widgets()), Vec::<(String, String)>::new());
    let mut bad = widgets();
    bad["metadata"]["name"] = json!("gadgets.example.com");
    bad["spec"]["scope"] = json!("Galaxy");
    bad["spec"]["versions"][0]["storage"] = json!(false);
    bad["spec"]["names"]["plural"] = json!("Widgets");
    let found = causes(bad);
    let fields: Vec<&str> = found.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(
        fields,
        [
            "metadata.name",
            "spec.scope",
            "spec.names.plural",
            "spec.versions"
        ],
        "{found:?}"
    );
    assert!(found[0]
        .1
        .contains("must be spec.names.plural+\".\"+spec.group"));
    assert_eq!(
        found[1].1,
        "Unsupported value: \"Galaxy\": supported values: \"Cluster\", \"Namespaced\""
    );
    assert!(found[3]
        .1
        .ends_with("must have exactly one version marked as storage version"));
    let mut dotless = widgets();
    dotless["metadata"]["name"] = json!("widgets.example");
    dotless["spec"]["group"] = json!("example");
    assert_eq!(
        causes(dotless),
        [(
            "spec.group".to_string(),
            "Invalid value: \"example\": should be a domain with at least one dot".to_string()
        )]
    );
    let old = as_map(widgets());
    let mut new = old.clone();
    new["spec"]["scope"] = json!("Cluster");
    let changed = validate_update(&old, &new);
    assert_eq!(changed.len(), 1);
    assert_eq!(changed[0].field, "spec.scope");
    assert_eq!(
        changed[0].message,
        "Invalid value: \"Cluster\": field is immutable"
    );
}

#[test]
fn versions_are_preferred_as_kube_orders_them() {
    let mut vs = vec![
        "v1alpha1", "foo", "v2beta1", "v1", "v10", "v2", "v1beta2", "bar",
    ];
    vs.sort_by_key(|v| std::cmp::Reverse(resources::version_priority(v)));
    assert_eq!(
        vs,
        ["v10", "v2", "v1", "v2beta1", "v1beta2", "v1alpha1", "bar", "foo"]
    );
}
