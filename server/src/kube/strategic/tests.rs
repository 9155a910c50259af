//! Fixtures for strategic merge patch. Each expected result is derived by
//! hand from the rules in the module head (kube's documented semantics),
//! on the built-in types' real merge keys and strategies.

use serde_json::{json, Value};

use super::*;

/// Applies `patch` to `original`, an object of `apiVersion/kind`.
fn smp_kind(group: &str, kind: &str, original: Value, patch: Value) -> Result<Value, PatchError> {
    let schema = Schema::builtin();
    let root = schema.for_kind(group, "v1", kind).expect("a built-in kind");
    let (Value::Object(original), Value::Object(patch)) = (original, patch) else {
        panic!("objects");
    };
    apply(schema, root, original, patch).map(Value::Object)
}

fn smp(original: Value, patch: Value) -> Result<Value, PatchError> {
    smp_kind("apps", "Deployment", original, patch)
}

/// A deployment whose pod template has these containers.
fn deployment(containers: Value) -> Value {
    json!({
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
        "spec": {
            "replicas": 2,
            "template": {"spec": {"containers": containers}},
        },
    })
}

fn containers_of(v: &Value) -> &Value {
    &v["spec"]["template"]["spec"]["containers"]
}

fn patch_containers(containers: Value) -> Value {
    json!({"spec": {"template": {"spec": {"containers": containers}}}})
}

#[test]
fn containers_merge_by_name_and_the_others_stay() {
    let original = deployment(json!([
        {"name": "app", "image": "app:1", "ports": [{"containerPort": 80}]},
        {"name": "sidecar", "image": "proxy:1"},
    ]));
    let patched = smp(
        original,
        patch_containers(json!([{"name": "app", "image": "app:2"}])),
    )
    .expect("applies");
    assert_eq!(
        containers_of(&patched),
        &json!([
            {"name": "app", "image": "app:2", "ports": [{"containerPort": 80}]},
            {"name": "sidecar", "image": "proxy:1"},
        ])
    );
    // Untouched fields stay.
    assert_eq!(patched["spec"]["replicas"], 2);
    assert_eq!(patched["metadata"]["labels"], json!({"app": "web"}));
}

#[test]
fn a_new_item_without_an_order_comes_first_as_in_kube() {
    // The new item is not in the live list, so no live item is ordered
    // before it: it leads. kubectl sends `$setElementOrder` to avoid this.
    let original = deployment(json!([{"name": "app"}, {"name": "sidecar"}]));
    let patched = smp(
        original,
        patch_containers(json!([{"name": "extra", "image": "x"}])),
    )
    .expect("applies");
    assert_eq!(
        containers_of(&patched),
        &json!([{"name": "extra", "image": "x"}, {"name": "app"}, {"name": "sidecar"}])
    );
}

#[test]
fn env_merges_by_name_inside_a_merged_container() {
    let original = deployment(json!([{
        "name": "app",
        "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
    }]));
    let patched = smp(
        original,
        patch_containers(json!([{
            "name": "app",
            "env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}],
        }])),
    )
    .expect("applies");
    // A (live only) goes before B (both live, A first); C is new.
    assert_eq!(
        containers_of(&patched)[0]["env"],
        json!([
            {"name": "A", "value": "1"},
            {"name": "B", "value": "3"},
            {"name": "C", "value": "4"},
        ])
    );
}

#[test]
fn ports_merge_on_container_port() {
    let original = deployment(json!([{
        "name": "app",
        "ports": [{"containerPort": 80, "protocol": "TCP", "name": "http"}],
    }]));
    let patched = smp(
        original,
        patch_containers(json!([{
            "name": "app",
            "ports": [{"containerPort": 80, "name": "web"}],
        }])),
    )
    .expect("applies");
    assert_eq!(
        containers_of(&patched)[0]["ports"],
        json!([{"containerPort": 80, "protocol": "TCP", "name": "web"}])
    );
}

#[test]
fn patch_delete_removes_a_list_item_by_its_key() {
    let original = deployment(json!([{"name": "app"}, {"name": "sidecar"}]));
    let patched = smp(
        original,
        patch_containers(json!([{"name": "sidecar", "$patch": "delete"}])),
    )
    .expect("applies");
    assert_eq!(containers_of(&patched), &json!([{"name": "app"}]));
}

#[test]
fn patch_replace_replaces_a_merged_list() {
    let original = deployment(json!([{"name": "app", "image": "a"}, {"name": "sidecar"}]));
    let patched = smp(
        original,
        patch_containers(json!([{"name": "only", "image": "o"}, {"$patch": "replace"}])),
    )
    .expect("applies");
    assert_eq!(
        containers_of(&patched),
        &json!([{"name": "only", "image": "o"}])
    );

    // A replace with nothing else empties the list.
    let original = deployment(json!([{"name": "app"}]));
    let patched = smp(original, patch_containers(json!([{"$patch": "replace"}]))).expect("applies");
    assert_eq!(containers_of(&patched), &json!([]));
}

#[test]
fn patch_replace_and_delete_of_a_map() {
    let original = json!({"metadata": {"name": "web", "labels": {"a": "1", "b": "2"}}});
    let patched = smp(
        original.clone(),
        json!({"metadata": {"labels": {"$patch": "replace", "c": "3"}}}),
    )
    .expect("applies");
    assert_eq!(patched["metadata"]["labels"], json!({"c": "3"}));

    let patched = smp(
        original,
        json!({"metadata": {"labels": {"$patch": "delete"}}}),
    )
    .expect("applies");
    assert_eq!(patched["metadata"]["labels"], json!({}));
    assert_eq!(patched["metadata"]["name"], "web");
}

#[test]
fn set_element_order_orders_the_merged_list() {
    let original = deployment(json!([{"name": "app", "image": "v1"}, {"name": "sidecar"}]));
    let patch = json!({"spec": {"template": {"spec": {
        "$setElementOrder/containers": [{"name": "sidecar"}, {"name": "app"}],
        "containers": [{"name": "app", "image": "v2"}],
    }}}});
    let patched = smp(original, patch).expect("applies");
    assert_eq!(
        containers_of(&patched),
        &json!([{"name": "sidecar"}, {"name": "app", "image": "v2"}])
    );

    // kubectl's shape for an added item: it lands where the order says.
    let original = deployment(json!([{"name": "a"}, {"name": "c"}]));
    let patch = json!({"spec": {"template": {"spec": {
        "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}, {"name": "c"}],
        "containers": [{"name": "b", "image": "b"}],
    }}}});
    let patched = smp(original, patch).expect("applies");
    assert_eq!(
        containers_of(&patched),
        &json!([{"name": "a"}, {"name": "b", "image": "b"}, {"name": "c"}])
    );
}

#[test]
fn a_patch_list_out_of_the_set_element_order_is_refused() {
    let original = deployment(json!([{"name": "a"}, {"name": "b"}]));
    let patch = json!({"spec": {"template": {"spec": {
        "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
        "containers": [{"name": "b"}, {"name": "a"}],
    }}}});
    let err = smp(original, patch).expect_err("out of order");
    assert!(matches!(err, PatchError::OrderMismatch { .. }), "{err:?}");
}

#[test]
fn finalizers_merge_as_a_set_and_delete_from_primitive_list() {
    let original = json!({"metadata": {"name": "web", "finalizers": ["a", "b", "c"]}});
    let patched = smp(
        original.clone(),
        json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["b"]}}),
    )
    .expect("applies");
    assert_eq!(patched["metadata"]["finalizers"], json!(["a", "c"]));

    // A union, without duplicates: the patch's items in its order, the
    // live-only ones interleaved by the live order ("d" is new, so first).
    let patched = smp(
        original.clone(),
        json!({"metadata": {"finalizers": ["d", "a"]}}),
    )
    .expect("applies");
    assert_eq!(
        patched["metadata"]["finalizers"],
        json!(["d", "a", "b", "c"])
    );

    // What kubectl sends when a manifest drops "b" and adds "d".
    let patched = smp(
        original,
        json!({"metadata": {
            "$setElementOrder/finalizers": ["a", "c", "d"],
            "$deleteFromPrimitiveList/finalizers": ["b"],
            "finalizers": ["d"],
        }}),
    )
    .expect("applies");
    assert_eq!(patched["metadata"]["finalizers"], json!(["a", "c", "d"]));
}

#[test]
fn retain_keys_drops_the_unnamed_keys() {
    let original = json!({"metadata": {"name": "web"}, "spec": {"strategy": {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }}});
    let patched = smp(
        original.clone(),
        json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
    )
    .expect("applies");
    assert_eq!(patched["spec"]["strategy"], json!({"type": "Recreate"}));

    // Every key the patch sets must be named.
    let err = smp(
        original,
        json!({"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": {"maxSurge": 2}}}}),
    )
    .expect_err("unnamed key");
    assert_eq!(err, PatchError::RetainKeysFormat);
    assert!(err.is_bad_request());
}

#[test]
fn retain_keys_in_a_merged_list_item_switches_a_volume_source() {
    let original = json!({"metadata": {"name": "web"}, "spec": {"template": {"spec": {
        "containers": [{"name": "app"}],
        "volumes": [{"name": "data", "emptyDir": {}}, {"name": "other", "emptyDir": {}}],
    }}}});
    let patch = json!({"spec": {"template": {"spec": {"volumes": [{
        "name": "data",
        "$retainKeys": ["configMap", "name"],
        "configMap": {"name": "cfg"},
    }]}}}});
    let patched = smp(original, patch).expect("applies");
    assert_eq!(
        patched["spec"]["template"]["spec"]["volumes"],
        json!([{"name": "data", "configMap": {"name": "cfg"}}, {"name": "other", "emptyDir": {}}])
    );
}

#[test]
fn null_deletes_a_field() {
    let original = json!({"metadata": {"name": "web", "labels": {"a": "1", "b": "2"}}, "spec": {"replicas": 3}});
    let patched = smp(
        original,
        json!({"metadata": {"labels": {"a": null, "c": null}}, "spec": {"replicas": null}}),
    )
    .expect("applies");
    assert_eq!(patched["metadata"]["labels"], json!({"b": "2"}));
    assert_eq!(patched["spec"], json!({}));
}

#[test]
fn nested_maps_merge_deep_inside_merged_items() {
    let original = deployment(json!([{
        "name": "app",
        "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
    }]));
    let patched = smp(
        original,
        patch_containers(json!([{"name": "app", "resources": {"limits": {"cpu": "2"}}}])),
    )
    .expect("applies");
    assert_eq!(
        containers_of(&patched)[0]["resources"],
        json!({"limits": {"cpu": "2", "memory": "1Gi"}})
    );
}

#[test]
fn atomic_lists_are_replaced() {
    let original = json!({"metadata": {"name": "web"}, "spec": {"template": {"spec": {
        "containers": [{"name": "app", "args": ["a", "b"]}],
        "tolerations": [{"key": "a", "operator": "Exists"}],
    }}}});
    let patch = json!({"spec": {"template": {"spec": {
        "containers": [{"name": "app", "args": ["c"]}],
        "tolerations": [{"key": "b", "operator": "Exists"}],
    }}}});
    let patched = smp(original, patch).expect("applies");
    let pod = &patched["spec"]["template"]["spec"];
    assert_eq!(pod["containers"][0]["args"], json!(["c"]));
    assert_eq!(
        pod["tolerations"],
        json!([{"key": "b", "operator": "Exists"}])
    );
}

#[test]
fn owner_references_merge_by_uid() {
    let original = json!({"metadata": {"name": "web", "ownerReferences": [
        {"uid": "1", "kind": "A", "name": "a"},
        {"uid": "2", "kind": "B", "name": "b"},
    ]}});
    let patched = smp(
        original,
        json!({"metadata": {"ownerReferences": [{"uid": "2", "controller": true}]}}),
    )
    .expect("applies");
    assert_eq!(
        patched["metadata"]["ownerReferences"],
        json!([
            {"uid": "1", "kind": "A", "name": "a"},
            {"uid": "2", "kind": "B", "name": "b", "controller": true},
        ])
    );
}

#[test]
fn a_replace_strategy_field_is_replaced_whole() {
    // PodDisruptionBudgetSpec.selector has patch strategy `replace`.
    let schema = Schema::builtin();
    let root = schema
        .for_kind("policy", "v1", "PodDisruptionBudget")
        .expect("pdb");
    let original = json!({"spec": {"selector": {"matchLabels": {"a": "1"}}, "minAvailable": 1}});
    let patch = json!({"spec": {"selector": {"matchLabels": {"b": "2"}}}});
    let (Value::Object(o), Value::Object(p)) = (original, patch) else {
        unreachable!()
    };
    let patched = apply(schema, root, o, p).expect("applies");
    assert_eq!(
        Value::Object(patched)["spec"],
        json!({"selector": {"matchLabels": {"b": "2"}}, "minAvailable": 1})
    );
}

#[test]
fn added_values_carry_no_nulls_or_directives() {
    let original = deployment(json!([{"name": "app"}]));
    let patch = json!({"spec": {"template": {"spec": {
        "securityContext": {"runAsUser": 1, "fsGroup": null},
        "volumes": [{"name": "v", "emptyDir": {}}, {"name": "gone", "$patch": "delete"}],
    }}}});
    let patched = smp(original, patch).expect("applies");
    let pod = &patched["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"], json!({"runAsUser": 1}));
    assert_eq!(pod["volumes"], json!([{"name": "v", "emptyDir": {}}]));
}

#[test]
fn configmap_data_merges_by_key() {
    let original = json!({"metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}});
    let patched = smp_kind(
        "",
        "ConfigMap",
        original,
        json!({"data": {"b": "3", "a": null}}),
    )
    .expect("applies");
    assert_eq!(patched["data"], json!({"b": "3"}));
}

#[test]
fn a_value_of_another_type_replaces_the_old_one() {
    let original = json!({"metadata": {"name": "c"}, "data": {"a": "1"}});
    let patched = smp_kind("", "ConfigMap", original, json!({"data": "x"})).expect("applies");
    assert_eq!(patched["data"], "x");
}

#[test]
fn malformed_patches_are_refused_as_kube_refuses_them() {
    let mut original = deployment(json!([{"name": "app"}]));
    original["metadata"]["finalizers"] = json!(["x"]);
    original["spec"]["strategy"] = json!({"type": "Recreate"});
    let cases = [
        (
            patch_containers(json!([{"image": "no-name"}])),
            "does not contain declared merge key: name",
            false,
        ),
        (
            patch_containers(json!([{"name": "app", "$patch": "merge"}])),
            "merging lists cannot yet be specified in the patch",
            false,
        ),
        (
            json!({"metadata": {"labels": {"$patch": "nope"}}}),
            "unknown patch type: nope",
            false,
        ),
        (
            json!({"spec": {"$bogus": 1}}),
            "unknown directive or field \"$bogus\"",
            false,
        ),
        (
            json!({"metadata": {"$deleteFromPrimitiveListfinalizers": ["a"]}}),
            "invalid patch format of primitive list",
            true,
        ),
        (
            json!({"metadata": {"$setElementOrder/finalizers": "a"}}),
            "invalid patch format of setElementOrder list",
            true,
        ),
        (
            json!({"spec": {"strategy": {"$retainKeys": "type"}}}),
            "invalid patch format of retainKeys",
            true,
        ),
        (
            json!({"metadata": {"finalizers": [["a"]]}}),
            "lists of lists are not supported",
            false,
        ),
        (
            json!({"metadata": {"finalizers": ["a", 1]}}),
            "list element types are not identical",
            false,
        ),
    ];
    let rt = crate::kube::resources::find("apps", "v1", "deployments").expect("deployments");
    for (patch, message, bad_request) in cases {
        let err = smp(original.clone(), patch.clone()).expect_err(&patch.to_string());
        assert!(err.to_string().contains(message), "{patch}: {err}");
        assert_eq!(err.is_bad_request(), bad_request, "{patch}: {err}");
        match err.into_kube(rt, "web") {
            KubeError::BadRequest(m) => assert!(bad_request && m.contains(message), "{m}"),
            KubeError::Invalid { causes, .. } => {
                assert!(!bad_request, "{patch}");
                assert_eq!(causes[0].field, "patch");
                assert!(causes[0].message.contains(message), "{causes:?}");
            }
            other => panic!("{patch}: {other:?}"),
        }
    }
}

#[test]
fn dollar_fields_of_a_type_are_fields_not_directives() {
    // CRD schemas have real `$ref` and `$schema` fields.
    let original = json!({"metadata": {"name": "w.example.com"}, "spec": {"versions": []}});
    let patch = json!({"spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": {"$ref": "#/x"}}}]}});
    let patched = smp_kind(
        "apiextensions.k8s.io",
        "CustomResourceDefinition",
        original,
        patch,
    )
    .expect("applies");
    assert_eq!(
        patched["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["$ref"],
        "#/x"
    );
}

/// Property tests: any patch, directives and all, on any deployment-like
/// object is applied or refused with a [`PatchError`], never a panic; and
/// what it gives carries no directive key.
mod proptests {
    use proptest::prelude::*;
    use serde_json::{json, Map, Value};

    use super::smp;
    use crate::fuzz;

    /// Keys that matter to a deployment's merge: fields with merge keys,
    /// directives (valid and not), and anything.
    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => proptest::sample::select(
                &[
                    "metadata", "spec", "template", "containers", "name", "image",
                    "env", "ports", "containerPort", "finalizers", "labels", "volumes",
                    "tolerations", "strategy", "type", "value", "$patch", "$retainKeys",
                    "$setElementOrder/containers", "$setElementOrder/finalizers",
                    "$deleteFromPrimitiveList/finalizers", "$deleteFromPrimitiveList",
                    "$setElementOrder", "$other",
                ][..]
            )
            .prop_map(str::to_string),
            1 => fuzz::text(),
        ]
    }

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (0..4i64).prop_map(Value::from),
            proptest::sample::select(&["app", "a", "b", "delete", "replace", "merge", "x"][..])
                .prop_map(Value::from),
        ];
        leaf.prop_recursive(6, 64, 5, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::vec((key(), inner), 0..5)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
            ]
        })
    }

    fn object() -> impl Strategy<Value = Value> {
        value().prop_map(|v| match v {
            Value::Object(m) => Value::Object(m),
            other => json!({ "spec": other }),
        })
    }

    fn has_directive(v: &Value) -> bool {
        match v {
            Value::Object(m) => m.iter().any(|(k, v)| {
                k == "$patch"
                    || k == "$retainKeys"
                    || k.starts_with("$setElementOrder")
                    || k.starts_with("$deleteFromPrimitiveList")
                    || has_directive(v)
            }),
            Value::Array(l) => l.iter().any(has_directive),
            _ => false,
        }
    }

    proptest! {
        #![proptest_config(fuzz::config())]

        #[test]
        fn any_patch_is_applied_or_refused(original in object(), patch in object()) {
            let clean_original = !has_directive(&original);
            if let Ok(patched) = smp(original, patch) {
                if clean_original {
                    prop_assert!(!has_directive(&patched), "{patched}");
                }
            }
        }
    }
}
