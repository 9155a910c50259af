//! Server-side apply and managed fields on the real built-in schemas:
//! FieldsV1 encoding, field sets, two managers, conflicts, force, field
//! removal, keyed list items owned one by one, atomic lists, and the
//! tracking of updates.

use serde_json::{json, Map, Value};

use super::fieldpath::{path_string, FieldSet, Pe};
use super::walk::{self, Ty};
use super::*;
use crate::kube::resources;

const T0: &str = "2026-01-01T00:00:00Z";
const T1: &str = "2026-01-01T00:00:01Z";

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

fn target(plural: &str) -> Target<'static> {
    let rt = resources::RESOURCES
        .iter()
        .find(|r| r.plural == plural)
        .unwrap_or_else(|| panic!("{plural}"));
    Target::of(rt)
}

fn mgr(name: &str, api_version: &str) -> Manager {
    Manager {
        name: name.into(),
        subresource: None,
        api_version: api_version.into(),
    }
}

/// The managers of `o` by name and operation, with their FieldsV1.
fn managers(o: &Map<String, Value>) -> Vec<(String, String, Value)> {
    o["metadata"]["managedFields"]
        .as_array()
        .map(|l| {
            l.iter()
                .map(|e| {
                    (
                        e["manager"].as_str().unwrap_or("").to_string(),
                        e["operation"].as_str().unwrap_or("").to_string(),
                        e["fieldsV1"].clone(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn deployment(replicas: u64, image: &str) -> Map<String, Value> {
    obj(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{
                    "name": "web", "image": image,
                    "ports": [{"containerPort": 80, "protocol": "TCP"}],
                    "args": ["a", "b"],
                }]},
            },
        },
    }))
}

#[test]
fn fields_v1_round_trips_with_members_children_and_dots() {
    let mut set = FieldSet::new();
    let containers = [
        Pe::field("spec"),
        Pe::field("containers"),
        Pe::key(&obj(json!({"name": "web"}))),
    ];
    set.insert(&containers);
    let mut image = containers.to_vec();
    image.push(Pe::field("image"));
    set.insert(&image);
    set.insert(&[
        Pe::field("metadata"),
        Pe::field("finalizers"),
        Pe::value(&json!("x")),
    ]);
    set.insert(&[Pe::field("data"), Pe::field("a.b/c")]);
    let encoded = set.to_fields_v1();
    assert_eq!(
        encoded,
        json!({
            "f:data": {"f:a.b/c": {}},
            "f:metadata": {"f:finalizers": {"v:\"x\"": {}}},
            "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {".": {}, "f:image": {}}}},
        })
    );
    assert_eq!(FieldSet::from_fields_v1(&encoded), Some(set.clone()));
    assert_eq!(
        set.paths()
            .iter()
            .map(|p| path_string(p))
            .collect::<Vec<_>>(),
        [
            ".data.a.b/c",
            ".metadata.finalizers[=\"x\"]",
            ".spec.containers[name=\"web\"]",
            ".spec.containers[name=\"web\"].image",
        ]
    );
    // Keys of several fields are sorted and rendered as kube renders them.
    let port = Pe::key(&obj(json!({"protocol": "TCP", "containerPort": 80})));
    assert_eq!(
        port.as_str(),
        "k:{\"containerPort\":80,\"protocol\":\"TCP\"}"
    );
    assert_eq!(port.to_string(), "[containerPort=80,protocol=\"TCP\"]");
    // What FieldsV1 does not define does not decode.
    assert_eq!(FieldSet::from_fields_v1(&json!({"x:y": {}})), None);
    assert_eq!(FieldSet::from_fields_v1(&json!({"k:notjson": {}})), None);
    assert_eq!(FieldSet::from_fields_v1(&json!({"f:a": 1})), None);
    assert_eq!(FieldSet::from_fields_v1(&json!([])), None);
}

#[test]
fn set_operations_are_member_wise() {
    let p = |s: &[&str]| s.iter().map(|f| Pe::field(f)).collect::<Vec<_>>();
    let mut a = FieldSet::new();
    a.insert(&p(&["a"]));
    a.insert(&p(&["a", "b"]));
    a.insert(&p(&["c"]));
    let mut b = FieldSet::new();
    b.insert(&p(&["a"]));
    // Difference takes the member, not what lies below it.
    let d = a.difference(&b);
    assert!(!d.has(&p(&["a"])) && d.has(&p(&["a", "b"])) && d.has(&p(&["c"])));
    // Recursive difference takes both.
    let r = a.recursive_difference(&b);
    assert!(!r.has(&p(&["a", "b"])) && r.has(&p(&["c"])));
    let i = a.intersection(&b);
    assert_eq!(i.paths(), vec![p(&["a"])]);
    assert!(a.has_at_or_under(&p(&["a"])) && !b.has_at_or_under(&p(&["c"])));
    assert_eq!(a.union(&b), a);
}

#[test]
fn a_field_set_owns_leaves_map_keys_and_keyed_items_but_not_structs() {
    let t = target("deployments");
    let set = walk::field_set(t.schema, t.ty, &Value::Object(deployment(2, "v1"))).expect("walks");
    assert_eq!(
        set.to_fields_v1(),
        json!({
            "f:apiVersion": {}, "f:kind": {},
            "f:metadata": {"f:labels": {"f:app": {}}, "f:name": {}, "f:namespace": {}},
            "f:spec": {
                "f:replicas": {},
                // A LabelSelector is atomic: owned whole.
                "f:selector": {},
                "f:template": {
                    "f:metadata": {"f:labels": {"f:app": {}}},
                    "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {
                        ".": {},
                        // args is atomic: owned whole, not item by item.
                        "f:args": {},
                        "f:image": {},
                        "f:name": {},
                        // Container ports are keyed by port and protocol.
                        "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {
                            ".": {}, "f:containerPort": {}, "f:protocol": {},
                        }},
                    }}},
                },
            },
        })
    );
    // An item of a keyed list without any of its keys cannot be owned.
    let bad = json!({"spec": {"template": {"spec": {"containers": [{"image": "x"}]}}}});
    let err = walk::field_set(t.schema, t.ty, &bad).expect_err("no key");
    assert!(
        err.to_string().contains(".spec.template.spec.containers"),
        "{err}"
    );
    // No schema: a granular map whose lists are atomic.
    let untyped =
        walk::field_set(t.schema, Ty::Untyped, &json!({"a": {"b": [1, 2]}})).expect("walks");
    assert_eq!(untyped.to_fields_v1(), json!({"f:a": {".": {}, "f:b": {}}}));
}

#[test]
fn apply_creates_then_a_second_manager_conflicts_and_force_takes_the_field() {
    let t = target("deployments");
    let kubectl = mgr("kubectl", "apps/v1");
    let created = apply(&t, &kubectl, None, deployment(2, "v1"), false, T0).expect("creates");
    assert_eq!(created["spec"]["replicas"], 2);
    let m = managers(&created);
    assert_eq!(m.len(), 1);
    assert_eq!((m[0].0.as_str(), m[0].1.as_str()), ("kubectl", "Apply"));
    // Fields the server owns are nobody's.
    assert!(m[0].2.get("f:apiVersion").is_none());
    assert!(m[0].2["f:metadata"].get("f:name").is_none());
    assert_eq!(m[0].2["f:spec"]["f:replicas"], json!({}));
    let entry = &created["metadata"]["managedFields"][0];
    assert_eq!(entry["apiVersion"], "apps/v1");
    assert_eq!(entry["fieldsType"], "FieldsV1");
    assert_eq!(entry["time"], T0);
    assert!(entry.get("subresource").is_none());

    // Another applier setting replicas to another value conflicts.
    let other = mgr("other", "apps/v1");
    let config = obj(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"replicas": 5, "template": {"spec": {"containers": [{"name": "web", "image": "v2"}]}}},
    }));
    let err = apply(&t, &other, Some(&created), config.clone(), false, T1).expect_err("conflicts");
    assert_eq!(
        err,
        ApplyError::Conflicts(vec![
            ("\"kubectl\"".into(), ".spec.replicas".into()),
            (
                "\"kubectl\"".into(),
                ".spec.template.spec.containers[name=\"web\"].image".into()
            ),
        ])
    );
    assert_eq!(
        err.to_string(),
        "Apply failed with 2 conflicts: conflicts with \"kubectl\":\n- .spec.replicas\n\
         - .spec.template.spec.containers[name=\"web\"].image"
    );
    match KubeError::from(err) {
        KubeError::ApplyConflict { causes, .. } => {
            assert_eq!(causes.len(), 2);
            assert_eq!(causes[0].reason, "FieldManagerConflict");
            assert_eq!(causes[0].message, "conflict with \"kubectl\"");
            assert_eq!(causes[0].field, ".spec.replicas");
        }
        other => panic!("{other:?}"),
    }

    // Setting the same value shares the field: no conflict.
    let same = obj(json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"}, "spec": {"replicas": 2}}));
    let shared = apply(&t, &other, Some(&created), same, false, T1).expect("shares");
    let m = managers(&shared);
    assert_eq!(m.len(), 2);
    assert!(m
        .iter()
        .all(|(_, _, f)| f["f:spec"]["f:replicas"] == json!({})));

    // Forced, the fields move to the new applier.
    let forced = apply(&t, &other, Some(&created), config, true, T1).expect("forced");
    assert_eq!(forced["spec"]["replicas"], 5);
    let c = &forced["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["image"], "v2");
    // Fields of the item the new applier did not set stay.
    assert_eq!(c["args"], json!(["a", "b"]));
    let m = managers(&forced);
    let kubectl_fields = &m.iter().find(|e| e.0 == "kubectl").expect("kubectl").2;
    assert!(kubectl_fields["f:spec"].get("f:replicas").is_none());
    let other_fields = &m.iter().find(|e| e.0 == "other").expect("other").2;
    assert_eq!(other_fields["f:spec"]["f:replicas"], json!({}));

    // A conflict with an updater names the apiVersion it used.
    let mut scaled = forced.clone();
    scaled["spec"]["replicas"] = json!(7);
    track_update(
        &t,
        &mgr("kube-controller", "apps/v1"),
        Some(&forced),
        &mut scaled,
        T1,
    )
    .expect("tracks");
    let err = apply(
        &t,
        &other,
        Some(&scaled),
        obj(json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"}, "spec": {"replicas": 5}})),
        false,
        T1,
    )
    .expect_err("conflicts");
    assert_eq!(
        err.to_string(),
        "Apply failed with 1 conflict: conflict with \"kube-controller\" using apps/v1: .spec.replicas"
    );
}

#[test]
fn a_field_dropped_from_the_config_goes_unless_another_manager_owns_it() {
    let t = target("configmaps");
    let a = mgr("a", "v1");
    let b = mgr("b", "v1");
    let cm = |data: Value| {
        obj(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": data}),
        )
    };
    let v1 = apply(
        &t,
        &a,
        None,
        cm(json!({"x": "1", "y": "2", "z": "3"})),
        false,
        T0,
    )
    .expect("v1");
    // b shares y by applying the same value.
    let shared = apply(&t, &b, Some(&v1), cm(json!({"y": "2"})), false, T0).expect("b");
    // a drops y and z: z goes, y stays (b owns it).
    let v2 = apply(&t, &a, Some(&shared), cm(json!({"x": "1"})), false, T1).expect("v2");
    assert_eq!(v2["data"], json!({"x": "1", "y": "2"}));
    let m = managers(&v2);
    assert_eq!(
        m.iter().find(|e| e.0 == "a").expect("a").2,
        json!({"f:data": {"f:x": {}}})
    );
    assert_eq!(
        m.iter().find(|e| e.0 == "b").expect("b").2,
        json!({"f:data": {"f:y": {}}})
    );
    // A field set by an update is not the applier's to remove.
    let mut edited = v2.clone();
    edited["data"]["w"] = json!("9");
    track_update(&t, &mgr("kubectl-edit", "v1"), Some(&v2), &mut edited, T1).expect("tracks");
    let nothing = obj(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}));
    let v3 = apply(&t, &a, Some(&edited), nothing, false, T1).expect("v3");
    assert_eq!(v3["data"], json!({"y": "2", "w": "9"}));
    assert!(
        managers(&v3).iter().all(|e| e.0 != "a"),
        "a owns nothing: {:?}",
        managers(&v3)
    );
}

#[test]
fn keyed_list_items_are_owned_one_by_one_and_atomic_lists_whole() {
    let t = target("deployments");
    let a = mgr("a", "apps/v1");
    let b = mgr("b", "apps/v1");
    let with = |containers: Value| {
        obj(
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"template": {"spec": {"containers": containers}}}}),
        )
    };
    let v1 = apply(
        &t,
        &a,
        None,
        with(json!([{"name": "app", "image": "app:1", "args": ["x"]}])),
        false,
        T0,
    )
    .expect("a");
    // b adds its own container: both stay, each owned by its applier.
    let v2 = apply(
        &t,
        &b,
        Some(&v1),
        with(json!([{"name": "sidecar", "image": "proxy"}])),
        false,
        T0,
    )
    .expect("b");
    let names: Vec<&str> = v2["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, ["app", "sidecar"]);
    // b changing a's atomic args conflicts on the list as a whole.
    let err = apply(
        &t,
        &b,
        Some(&v2),
        with(json!([{"name": "sidecar", "image": "proxy"},
        {"name": "app", "args": ["y"]}])),
        false,
        T1,
    )
    .expect_err("conflict");
    assert_eq!(
        err.to_string(),
        "Apply failed with 1 conflict: conflict with \"a\": .spec.template.spec.containers[name=\"app\"].args"
    );
    // a dropping its container removes it; b's stays.
    let v3 = apply(&t, &a, Some(&v2), with(json!([])), false, T1).expect("a again");
    assert_eq!(
        v3["spec"]["template"]["spec"]["containers"],
        json!([{"name": "sidecar", "image": "proxy"}])
    );
}

#[test]
fn a_list_map_key_left_out_takes_its_default_as_kube_keys_it() {
    // helm's chart ports name no protocol; the stored object has kube's
    // default (`TCP`), and a re-apply of the same chart is the same port.
    let t = target("deployments");
    let helm = mgr("helm", "apps/v1");
    let config = || {
        obj(
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"template": {"spec": {"containers": [
                {"name": "app", "image": "app:1", "ports": [{"containerPort": 80}]}]}}}}),
        )
    };
    let mut v1 = apply(&t, &helm, None, config(), false, T0).expect("first apply");
    // What admission's defaults store.
    v1["spec"]["template"]["spec"]["containers"][0]["ports"][0]["protocol"] = json!("TCP");
    let v2 = apply(&t, &helm, Some(&v1), config(), false, T1).expect("second apply");
    assert_eq!(
        v2["spec"]["template"]["spec"]["containers"][0]["ports"],
        json!([{"containerPort": 80, "protocol": "TCP"}])
    );
    // Another manager's port 80/UDP stays its own item.
    let other = mgr("other", "apps/v1");
    let mut udp = config();
    udp["spec"]["template"]["spec"]["containers"][0]["ports"] =
        json!([{"containerPort": 80, "protocol": "UDP"}]);
    let v3 = apply(&t, &other, Some(&v2), udp, false, T1).expect("udp");
    assert_eq!(
        v3["spec"]["template"]["spec"]["containers"][0]["ports"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );
}

#[test]
fn updates_take_what_they_change_and_keep_the_managers_sorted() {
    let t = target("configmaps");
    let cm = |data: Value| {
        obj(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "uid": "u", "resourceVersion": "5"}, "data": data}))
    };
    // A create by an updater owns what it set, maps with their dot.
    let mut created = cm(json!({"a": "1"}));
    track_update(&t, &mgr("kubectl-create", "v1"), None, &mut created, T0).expect("create");
    assert_eq!(
        managers(&created),
        vec![(
            "kubectl-create".into(),
            "Update".into(),
            json!({"f:data": {".": {}, "f:a": {}}})
        )]
    );
    // An applier, then another updater changing the applier's field.
    let applied = apply(&t, &mgr("ssa", "v1"), Some(&created),
        obj(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"b": "2"}})),
        false, T1).expect("apply");
    let mut edited = applied.clone();
    edited["data"]["b"] = json!("3");
    edited["data"].as_object_mut().expect("data").remove("a");
    track_update(
        &t,
        &mgr("kubectl-edit", "v1"),
        Some(&applied),
        &mut edited,
        T1,
    )
    .expect("edit");
    let m = managers(&edited);
    // kubectl-create lost a (removed) but still owns the map it made;
    // ssa lost b, all it had, so it is gone.
    let names: Vec<(&str, &str)> = m.iter().map(|e| (e.0.as_str(), e.1.as_str())).collect();
    assert_eq!(
        names,
        [("kubectl-create", "Update"), ("kubectl-edit", "Update")]
    );
    assert_eq!(m[0].2, json!({"f:data": {}}));
    assert_eq!(m[1].2, json!({"f:data": {"f:b": {}}}));

    // `managedFields: []` resets; a write without them keeps the stored.
    let mut reset = edited.clone();
    reset["metadata"]["managedFields"] = json!([]);
    reset["data"]["c"] = json!("4");
    track_update(&t, &mgr("x", "v1"), Some(&edited), &mut reset, T1).expect("reset");
    assert_eq!(
        managers(&reset),
        vec![("x".into(), "Update".into(), json!({"f:data": {"f:c": {}}}))]
    );
    let mut kept = edited.clone();
    crate::kube::object::metadata_mut(&mut kept).remove("managedFields");
    kept["data"]["c"] = json!("4");
    track_update(&t, &mgr("x", "v1"), Some(&edited), &mut kept, T1).expect("keep");
    assert_eq!(managers(&kept).len(), 3);

    // A status write is recorded with its subresource and owns only status.
    let pods = target("pods");
    let pod = obj(
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "i"}]}}),
    );
    let mut with_status = pod.clone();
    with_status.insert("status".into(), json!({"phase": "Running"}));
    let kubelet = Manager {
        name: "kubelet".into(),
        subresource: Some("status".into()),
        api_version: "v1".into(),
    };
    track_update(&pods, &kubelet, Some(&pod), &mut with_status, T0).expect("status");
    let entry = &with_status["metadata"]["managedFields"][0];
    assert_eq!(entry["subresource"], "status");
    assert_eq!(entry["fieldsV1"], json!({"f:status": {"f:phase": {}}}));
}

#[test]
fn at_most_ten_update_managers_are_kept() {
    let t = target("configmaps");
    let mut o = obj(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {}}),
    );
    for i in 0..12 {
        let mut next = o.clone();
        next["data"][format!("k{i}")] = json!("v");
        let time = format!("2026-01-01T00:00:{i:02}Z");
        track_update(&t, &mgr(&format!("m{i}"), "v1"), Some(&o), &mut next, &time).expect("tracks");
        o = next;
    }
    let m = managers(&o);
    assert_eq!(m.len(), MAX_UPDATE_MANAGERS);
    let ancient = m
        .iter()
        .find(|e| e.0 == ANCIENT_CHANGES)
        .expect("ancient-changes");
    assert_eq!(
        ancient.2,
        json!({"f:data": {"f:k0": {}, "f:k1": {}, "f:k2": {}}})
    );
}

/// Property: any configuration applied by two managers over any stored
/// object, forced or not, gives an object whose managers decode, or an
/// apply error; never a panic.
mod proptests {
    use proptest::prelude::*;

    use super::*;
    use crate::fuzz;

    proptest! {
        #![proptest_config(fuzz::config())]

        #[test]
        fn any_apply_over_any_object_is_applied_or_refused(
            stored in fuzz::object_value(),
            first in fuzz::object_value(),
            second in fuzz::object_value(),
            force in any::<bool>(),
            plural in proptest::sample::select(&["configmaps", "deployments", "pods"][..]),
        ) {
            let t = target(plural);
            let Value::Object(stored) = stored else { return Ok(()) };
            let (Value::Object(first), Value::Object(second)) = (first, second) else { return Ok(()) };
            let Ok(live) = apply(&t, &mgr("a", "v1"), Some(&stored), first, force, T0) else {
                return Ok(());
            };
            if let Ok(out) = apply(&t, &mgr("b", "v1"), Some(&live), second, force, T1) {
                let recorded = out.get("metadata").and_then(|m| m.get("managedFields"));
                prop_assert!(recorded.is_none() || decode(&out).is_some(), "{recorded:?}");
                let mut next = out.clone();
                crate::kube::object::metadata_mut(&mut next).insert("touched".into(), json!(1));
                prop_assert!(track_update(&t, &mgr("c", "v1"), Some(&out), &mut next, T1).is_ok());
            }
        }
    }
}

#[test]
fn kubectl_moves_from_client_side_apply_without_conflicts() {
    let t = target("configmaps");
    let last = r#"{"apiVersion":"v1","data":{"a":"1","b":"2"},"kind":"ConfigMap","metadata":{"annotations":{},"name":"c"}}"#;
    let mut live = obj(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "annotations": {LAST_APPLIED: last}},
        "data": {"a": "1", "b": "2"}}));
    track_update(
        &t,
        &mgr("kubectl-client-side-apply", "v1"),
        None,
        &mut live,
        T0,
    )
    .expect("csa");
    let config = obj(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c"}, "data": {"a": "1", "b": "3"}}));
    // Another manager conflicts with client-side apply's fields...
    let err = apply(
        &t,
        &mgr("other", "v1"),
        Some(&live),
        config.clone(),
        false,
        T1,
    )
    .expect_err("conflict");
    assert_eq!(
        err.to_string(),
        "Apply failed with 1 conflict: conflict with \"kubectl-client-side-apply\" using v1: .data.b"
    );
    // ... kubectl's server-side apply takes what its last-applied set.
    let upgraded = apply(&t, &mgr(KUBECTL, "v1"), Some(&live), config, false, T1).expect("upgrade");
    assert_eq!(upgraded["data"]["b"], "3");
    let m = managers(&upgraded);
    assert_eq!(m[0].0, "kubectl");
    let csa = &m
        .iter()
        .find(|e| e.0 == "kubectl-client-side-apply")
        .expect("csa")
        .2;
    assert!(csa["f:data"].get("f:b").is_none(), "{csa}");
    // The annotation now records the server-side applied configuration.
    let annotation: Value = serde_json::from_str(
        upgraded["metadata"]["annotations"][LAST_APPLIED]
            .as_str()
            .expect("annotation"),
    )
    .expect("json");
    assert_eq!(annotation["data"], json!({"a": "1", "b": "3"}));
    // Fields outside the last-applied configuration still conflict.
    let mut edited = upgraded.clone();
    edited["data"]["z"] = json!("1");
    track_update(
        &t,
        &mgr("kubectl-edit", "v1"),
        Some(&upgraded),
        &mut edited,
        T1,
    )
    .expect("edit");
    let config = obj(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c"}, "data": {"a": "1", "b": "3", "z": "2"}}));
    let err =
        apply(&t, &mgr(KUBECTL, "v1"), Some(&edited), config, false, T1).expect_err("conflict");
    assert!(
        err.to_string()
            .contains("\"kubectl-edit\" using v1: .data.z"),
        "{err}"
    );
}
