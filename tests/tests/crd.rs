//! CustomResourceDefinitions on a 3-node in-process cluster: a definition
//! created through one node is served by every node, its objects written
//! through another and watched through the third; its versions,
//! subresources, printer columns, selectable fields and deprecation; its
//! names refused when taken; and its deletion, which deletes its objects
//! and stops its type being served everywhere.

use std::time::Duration;

use kubestore_tests::{ClusterOptions, TestCluster};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
const WIDGETS: &str = "/apis/example.com/v1/namespaces/default/widgets";

fn widget_definition() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"], "categories": ["all"]},
            "versions": [
                {"name": "v1", "served": true, "storage": true,
                 "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                 "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.size", "statusReplicasPath": ".status.size"}},
                 "additionalPrinterColumns": [
                     {"name": "Color", "type": "string", "jsonPath": ".spec.color"},
                     {"name": "Size", "type": "integer", "jsonPath": ".spec.size"}],
                 "selectableFields": [{"jsonPath": ".spec.color"}]},
                {"name": "v1beta1", "served": true, "storage": false, "deprecated": true,
                 "deprecationWarning": "example.com/v1beta1 Widget is going away",
                 "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}
            ]
        }
    })
}

fn widget(name: &str, color: &str, size: i64) -> Value {
    json!({
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"color": color, "size": size},
    })
}

fn condition<'a>(def: &'a Value, kind: &str) -> &'a Value {
    def["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
        .unwrap_or(&Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_definition_made_on_one_node_is_served_written_and_watched_on_the_others() {
    let c = TestCluster::new(3).await.expect("cluster");
    let (n1, n2, n3) = (c.kube(1), c.kube(2), c.kube(3));

    let created = n1.post(CRDS, &widget_definition()).await.expect("create");
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let def = &created.body;
    assert_eq!(condition(def, "Established")["status"], "True", "{def}");
    assert_eq!(condition(def, "NamesAccepted")["reason"], "NoConflicts");
    assert_eq!(def["status"]["acceptedNames"]["kind"], "Widget");
    assert_eq!(def["status"]["storedVersions"], json!(["v1"]));
    assert_eq!(def["spec"]["names"]["singular"], "widget");
    assert_eq!(def["spec"]["names"]["listKind"], "WidgetList");
    assert_eq!(
        def["metadata"]["finalizers"],
        json!(["customresourcecleanup.apiextensions.k8s.io"])
    );
    let crd_rv = created.rv();

    // A watch through node 3 from the definition's revision on.
    let mut watch = n3
        .watch(&format!("{WIDGETS}?watch=1&resourceVersion={crd_rv}"))
        .await
        .expect("watch through node 3");
    // Objects written through node 2 straight away.
    let red = n2
        .post(WIDGETS, &widget("red", "red", 3))
        .await
        .expect("post");
    assert_eq!(red.status, StatusCode::CREATED, "{}", red.text);
    assert_eq!(red.body["metadata"]["generation"], 1);
    let blue = n2
        .post(WIDGETS, &widget("blue", "blue", 1))
        .await
        .expect("post");
    assert_eq!(blue.status, StatusCode::CREATED, "{}", blue.text);
    for name in ["red", "blue"] {
        let event = watch
            .next_event(Duration::from_secs(10))
            .await
            .expect("an event")
            .expect("the watch stays open");
        assert_eq!(event["type"], "ADDED");
        assert_eq!(event["object"]["metadata"]["name"], name);
        assert_eq!(event["object"]["apiVersion"], "example.com/v1");
    }

    // Discovery on every node: legacy and aggregated.
    for n in [&n1, &n2, &n3] {
        let groups = n.get("/apis").await.expect("groups");
        let group = groups.body["groups"]
            .as_array()
            .and_then(|gs| gs.iter().find(|g| g["name"] == "example.com"))
            .cloned()
            .unwrap_or_else(|| panic!("example.com in {}", groups.text));
        assert_eq!(group["preferredVersion"]["version"], "v1");
        assert_eq!(group["versions"].as_array().map(Vec::len), Some(2));
        let list = n.get("/apis/example.com/v1").await.expect("resources");
        let names: Vec<&str> = list.body["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .filter_map(|r| r["name"].as_str())
            .collect();
        assert_eq!(names, ["widgets", "widgets/status", "widgets/scale"]);
        assert_eq!(list.body["resources"][0]["shortNames"], json!(["wd"]));
    }

    // Every read mode through another version: only the apiVersion differs.
    let beta = n3
        .get("/apis/example.com/v1beta1/namespaces/default/widgets/red")
        .await
        .expect("get v1beta1");
    assert_eq!(beta.status, StatusCode::OK, "{}", beta.text);
    assert_eq!(beta.body["apiVersion"], "example.com/v1beta1");
    assert_eq!(beta.body["spec"]["color"], "red");
    assert_eq!(
        beta.headers.get("warning").and_then(|w| w.to_str().ok()),
        Some("299 - \"example.com/v1beta1 Widget is going away\"")
    );
    for rv in ["", "&resourceVersion=0"] {
        let list = n1
            .get(&format!("{WIDGETS}?limit=1{rv}"))
            .await
            .expect("list");
        assert_eq!(list.status, StatusCode::OK, "{}", list.text);
        assert_eq!(list.body["kind"], "WidgetList");
    }

    // Selectable fields, and the names every type has.
    let reds = n2
        .get(&format!("{WIDGETS}?fieldSelector=spec.color%3Dred"))
        .await
        .expect("select");
    assert_eq!(reds.names(), ["red"], "{}", reds.text);
    let unknown = n2
        .get(&format!("{WIDGETS}?fieldSelector=spec.size%3D1"))
        .await
        .expect("select");
    assert_eq!(unknown.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        unknown.body["message"],
        "\"spec.size\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\", \"spec.color\""
    );

    // Printer columns in a Table.
    let table: Value = reqwest::Client::new()
        .get(format!("{}{WIDGETS}", n3.base()))
        .header(
            "accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .send()
        .await
        .expect("table")
        .json()
        .await
        .expect("json");
    let columns: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .expect("columns")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(columns, ["Name", "Color", "Size"]);
    assert_eq!(table["rows"][0]["cells"], json!(["blue", "blue", 1]));

    // The status subresource: the object's update keeps the status, the
    // status update changes only the status.
    let mut with_status = red.body.clone();
    with_status["status"] = json!({"size": 3});
    with_status["spec"]["color"] = json!("crimson");
    let status = n1
        .put(&format!("{WIDGETS}/red/status"), &with_status)
        .await
        .expect("put status");
    assert_eq!(status.status, StatusCode::OK, "{}", status.text);
    assert_eq!(status.body["status"]["size"], 3);
    assert_eq!(status.body["spec"]["color"], "red");
    // The scale subresource reads and writes the definition's paths.
    let scale = n2
        .get(&format!("{WIDGETS}/red/scale"))
        .await
        .expect("scale");
    assert_eq!(scale.status, StatusCode::OK, "{}", scale.text);
    assert_eq!(scale.body["spec"]["replicas"], 3);
    assert_eq!(scale.body["status"]["replicas"], 3);
    let scaled = n2
        .request(
            Method::PATCH,
            &format!("{WIDGETS}/red/scale"),
            Some((
                br#"{"spec":{"replicas":5}}"#.to_vec(),
                "application/merge-patch+json",
            )),
        )
        .await
        .expect("patch scale");
    assert_eq!(scaled.status, StatusCode::OK, "{}", scaled.text);
    let red_now = n3.get(&format!("{WIDGETS}/red")).await.expect("get");
    assert_eq!(red_now.body["spec"]["size"], 5);
    assert_eq!(red_now.body["metadata"]["generation"], 2);

    // A strategic merge patch of a custom resource is kube's 415.
    let smp = n1
        .request(
            Method::PATCH,
            &format!("{WIDGETS}/red"),
            Some((
                br#"{"spec":{}}"#.to_vec(),
                "application/strategic-merge-patch+json",
            )),
        )
        .await
        .expect("patch");
    assert_eq!(
        smp.status,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "{}",
        smp.text
    );

    // A second definition claiming the kind is stored, not established.
    let mut gadgets = widget_definition();
    gadgets["metadata"]["name"] = json!("gadgets.example.com");
    gadgets["spec"]["names"] = json!({"plural": "gadgets", "kind": "Widget"});
    let clash = n3.post(CRDS, &gadgets).await.expect("create");
    assert_eq!(clash.status, StatusCode::CREATED, "{}", clash.text);
    assert_eq!(condition(&clash.body, "NamesAccepted")["status"], "False");
    assert_eq!(
        condition(&clash.body, "NamesAccepted")["message"],
        "\"Widget\" is already in use"
    );
    let none = n1
        .get("/apis/example.com/v1/namespaces/default/gadgets")
        .await
        .expect("get");
    assert_eq!(none.status, StatusCode::NOT_FOUND);

    // Deleting the definition deletes its objects, then the definition;
    // then no node serves the type.
    let defs_rv = n1.get(CRDS).await.expect("list").rv();
    let mut defs = n1
        .watch(&format!(
            "{CRDS}?watch=1&resourceVersion={defs_rv}&fieldSelector=metadata.name%3Dwidgets.example.com"
        ))
        .await
        .expect("watch definitions");
    let deleted = n2
        .delete(&format!("{CRDS}/widgets.example.com"))
        .await
        .expect("delete");
    assert_eq!(deleted.status, StatusCode::OK, "{}", deleted.text);
    loop {
        let event = defs
            .next_event(Duration::from_secs(20))
            .await
            .expect("the definition's events")
            .expect("open");
        if event["type"] == "DELETED" {
            break;
        }
        assert_eq!(event["type"], "MODIFIED", "{event}");
    }
    let mut deletes = Vec::new();
    while deletes.len() < 2 {
        let event = watch
            .next_event(Duration::from_secs(10))
            .await
            .expect("an event")
            .expect("open");
        if event["type"] == "DELETED" {
            deletes.push(
                event["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            );
        }
    }
    deletes.sort();
    assert_eq!(deletes, ["blue", "red"]);
    for n in [&n1, &n2, &n3] {
        // A quorum read first: the node has applied the deletion after it.
        let defs = n.get(CRDS).await.expect("list");
        assert!(!defs.names().contains(&"widgets.example.com".to_string()));
        let served = n.get(WIDGETS).await.expect("get");
        assert_eq!(served.status, StatusCode::NOT_FOUND, "{}", served.text);
        let groups = n.get("/apis").await.expect("groups");
        // gadgets (not established) keeps example.com out too.
        assert!(!groups.text.contains("\"example.com\""), "{}", groups.text);
    }
    c.shutdown().await;
}

/// Discovery's list of every group names a definition as soon as its
/// creation is acknowledged, also through a node that has not applied it
/// yet: the list is answered after a read barrier, as a resource's path
/// is. The follower applies every batch 1.5 s late here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_node_lists_the_group_of_an_acknowledged_definition() {
    let c = TestCluster::with_options(
        3,
        ClusterOptions {
            fault_injection: true,
            ..ClusterOptions::default()
        },
    )
    .await
    .expect("cluster");
    let (leader, follower) = (
        c.leader().await.expect("leader"),
        c.follower().await.expect("follower"),
    );
    c.inject_faults(follower, &json!({ "apply_delay_ms": 1500 }))
        .await
        .expect("set the apply delay");
    let aggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
    // One definition for the legacy list, one for the aggregated one: each
    // list is asked for while the follower is behind its definition.
    for (group, accept) in [
        ("legacy.example.com", "application/json"),
        ("aggregated.example.com", aggregated),
    ] {
        let definition = json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("gizmos.{group}")},
            "spec": {
                "group": group,
                "scope": "Namespaced",
                "names": {"plural": "gizmos", "kind": "Gizmo"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object",
                        "x-kubernetes-preserve-unknown-fields": true}}}]
            }
        });
        let created = c
            .kube(leader)
            .post(CRDS, &definition)
            .await
            .expect("create");
        assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
        let applied = c
            .status(follower)
            .await
            .and_then(|s| s["revision"].as_u64())
            .unwrap_or(0);
        assert!(
            applied < created.rv(),
            "the follower is behind the definition"
        );
        let groups = reqwest::Client::new()
            .get(format!("{}/apis", c.rest_url(follower)))
            .header("accept", accept)
            .send()
            .await
            .expect("groups");
        assert_eq!(groups.status(), StatusCode::OK);
        let content_type = groups.headers()["content-type"]
            .to_str()
            .unwrap_or("")
            .to_string();
        assert!(content_type.starts_with(accept), "{content_type}");
        let body: Value = groups.json().await.expect("a group list");
        let names: Vec<&str> = body["groups"]
            .as_array()
            .or_else(|| body["items"].as_array())
            .expect("groups or items")
            .iter()
            .filter_map(|g| {
                g["name"]
                    .as_str()
                    .or_else(|| g["metadata"]["name"].as_str())
            })
            .collect();
        assert!(names.contains(&group), "{group} in {names:?}");
    }
    c.shutdown().await;
}

/// A custom resource is pruned, defaulted and validated by its version's
/// schema, as kube's custom resource strategy does it; a definition whose
/// schema is not structural is refused with kube's causes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_resources_follow_their_schema() {
    let c = TestCluster::new(3).await.expect("cluster");
    let (n1, n2) = (c.kube(1), c.kube(2));
    let mut def = widget_definition();
    def["spec"]["versions"] = json!([{
        "name": "v1", "served": true, "storage": true,
        "schema": {"openAPIV3Schema": {"type": "object", "properties": {
            "spec": {"type": "object", "required": ["color"], "properties": {
                "color": {"type": "string", "enum": ["red", "blue"]},
                "size": {"type": "integer", "minimum": 0, "maximum": 10, "default": 1},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}}}},
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}
    }]);
    let created = n1.post(CRDS, &def).await.expect("create");
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);

    // Unknown fields are dropped with a warning (fieldValidation=Warn, the
    // default), and the defaults filled in.
    let mut body = json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w"}, "spec": {"color": "red", "extra": 1, "labels": {"a": "b"}}});
    let warned = n2.post(WIDGETS, &body).await.expect("create");
    assert_eq!(warned.status, StatusCode::CREATED, "{}", warned.text);
    assert_eq!(
        warned.headers.get("warning").and_then(|w| w.to_str().ok()),
        Some("299 - \"unknown field \\\"spec.extra\\\"\"")
    );
    assert_eq!(
        warned.body["spec"],
        json!({"color": "red", "size": 1, "labels": {"a": "b"}})
    );
    // ... and refused under Strict, as kube words it.
    body["metadata"]["name"] = json!("strict");
    let strict = n2
        .post(&format!("{WIDGETS}?fieldValidation=Strict"), &body)
        .await
        .expect("create");
    assert_eq!(strict.status, StatusCode::BAD_REQUEST, "{}", strict.text);
    assert_eq!(
        strict.body["message"],
        "Widget in version \"v1\" cannot be handled as a Widget: strict decoding error: unknown field \"spec.extra\""
    );
    // Values the schema refuses: one cause per field.
    let bad = json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "bad"}, "spec": {"color": "green", "size": 11}});
    let refused = n1.post(WIDGETS, &bad).await.expect("create");
    assert_eq!(
        refused.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        refused.text
    );
    assert_eq!(refused.body["reason"], "Invalid");
    let causes: Vec<(String, String)> = refused.body["details"]["causes"]
        .as_array()
        .expect("causes")
        .iter()
        .map(|c| {
            (
                c["field"].as_str().unwrap_or("").to_string(),
                c["reason"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert!(
        causes.contains(&("spec.color".into(), "FieldValueNotSupported".into())),
        "{causes:?}"
    );
    assert!(
        causes.contains(&("spec.size".into(), "FieldValueInvalid".into())),
        "{causes:?}"
    );
    // An update is held to the schema too.
    let mut update = warned.body.clone();
    update["spec"]["size"] = json!(-1);
    let refused = n1.put(&format!("{WIDGETS}/w"), &update).await.expect("put");
    assert_eq!(
        refused.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        refused.text
    );

    // A schema that is not structural is refused with the definition.
    let mut gadgets = widget_definition();
    gadgets["metadata"]["name"] = json!("gadgets.example.com");
    gadgets["spec"]["names"] = json!({"plural": "gadgets", "kind": "Gadget"});
    gadgets["spec"]["versions"] = json!([{"name": "v1", "served": true, "storage": true,
        "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"properties": {"a": {"type": "string"}}}}}}}]);
    let refused = n2.post(CRDS, &gadgets).await.expect("create");
    assert_eq!(
        refused.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        refused.text
    );
    assert!(
        refused
            .text
            .contains("spec.versions[0].schema.openAPIV3Schema.properties[spec].type"),
        "{}",
        refused.text
    );
    c.shutdown().await;
}

/// Deleting a namespace deletes its custom resources too (the namespace
/// controller empties every served namespaced type, custom ones included)
/// before the namespace goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_is_emptied_of_its_custom_resources() {
    let c = TestCluster::new(3).await.expect("cluster");
    let (n1, n2, n3) = (c.kube(1), c.kube(2), c.kube(3));
    let created = n1.post(CRDS, &widget_definition()).await.expect("create");
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let ns = n2
        .post(
            "/api/v1/namespaces",
            &json!({"metadata": {"name": "doomed"}}),
        )
        .await
        .expect("namespace");
    assert_eq!(ns.status, StatusCode::CREATED, "{}", ns.text);
    let in_ns = "/apis/example.com/v1/namespaces/doomed/widgets";
    for name in ["a", "b"] {
        let w = n3
            .post(in_ns, &widget(name, "red", 1))
            .await
            .expect("create");
        assert_eq!(w.status, StatusCode::CREATED, "{}", w.text);
    }
    let rv = n1.get("/api/v1/namespaces").await.expect("list").rv();
    let mut namespaces = n1
        .watch(&format!(
            "/api/v1/namespaces?watch=1&resourceVersion={rv}&fieldSelector=metadata.name%3Ddoomed"
        ))
        .await
        .expect("watch");
    let deleted = n2
        .delete("/api/v1/namespaces/doomed")
        .await
        .expect("delete");
    assert_eq!(deleted.status, StatusCode::OK, "{}", deleted.text);
    loop {
        let event = namespaces
            .next_event(Duration::from_secs(30))
            .await
            .expect("the namespace's events")
            .expect("open");
        if event["type"] == "DELETED" {
            break;
        }
    }
    let left = n3.get(in_ns).await.expect("list");
    assert_eq!(left.status, StatusCode::OK, "{}", left.text);
    assert!(left.names().is_empty(), "{}", left.text);
    c.shutdown().await;
}
