//! Kube's protobuf wire form and YAML bodies, through a 3-node cluster.
//!
//! The messages are built and read with `k8s-pb` (kube-rs's prost types
//! generated from Kubernetes' own `.proto` files), independently of the
//! server's descriptor-driven transcoder: what a client-go typed client
//! sends, the server must store as kube's JSON, and what the server sends
//! back must decode into the same Go (here: Rust) types.

use std::time::Duration;

use futures::StreamExt;
use k8s_pb::api::apps::v1 as apps;
use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::api::resource::Quantity;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use kubestore_tests::TestCluster;
use prost::Message;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/default/deployments";

/// `k8s\0` and the `runtime.Unknown` envelope around a message.
fn envelope(api_version: &str, kind: &str, msg: &impl Message) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(msg.encode_to_vec()),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut body = b"k8s\0".to_vec();
    body.extend(unknown.encode_to_vec());
    body
}

/// The kind named in an envelope and its message.
fn open<M: Message + Default>(body: &[u8]) -> (String, M) {
    let inner = body.strip_prefix(b"k8s\0").expect("the protobuf magic");
    let unknown = Unknown::decode(inner).expect("an envelope");
    let kind = unknown.type_meta.and_then(|t| t.kind).unwrap_or_default();
    let msg = M::decode(unknown.raw.unwrap_or_default().as_slice()).expect("the kind's message");
    (kind, msg)
}

/// A deployment as client-go's typed client encodes one: Go's non-pointer
/// strings are sent even when empty.
fn deployment(name: &str, replicas: i32) -> apps::Deployment {
    let labels = [("app".to_string(), name.to_string())].into();
    apps::Deployment {
        metadata: Some(meta::ObjectMeta {
            name: Some(name.into()),
            generate_name: Some(String::new()),
            namespace: Some(String::new()),
            resource_version: Some(String::new()),
            labels: [("app".to_string(), name.to_string())].into(),
            ..Default::default()
        }),
        spec: Some(apps::DeploymentSpec {
            replicas: Some(replicas),
            selector: Some(meta::LabelSelector {
                match_labels: labels,
                ..Default::default()
            }),
            template: Some(core::PodTemplateSpec {
                metadata: Some(meta::ObjectMeta {
                    labels: [("app".to_string(), name.to_string())].into(),
                    ..Default::default()
                }),
                spec: Some(core::PodSpec {
                    containers: vec![core::Container {
                        name: Some("web".into()),
                        image: Some("nginx:1.27".into()),
                        image_pull_policy: Some(String::new()),
                        ports: vec![core::ContainerPort {
                            container_port: Some(8080),
                            protocol: Some("TCP".into()),
                            ..Default::default()
                        }],
                        resources: Some(core::ResourceRequirements {
                            limits: [(
                                "memory".to_string(),
                                Quantity {
                                    string: Some("128Mi".into()),
                                },
                            )]
                            .into(),
                            ..Default::default()
                        }),
                        liveness_probe: Some(core::Probe {
                            handler: Some(core::ProbeHandler {
                                http_get: Some(core::HttpGetAction {
                                    path: Some("/healthz".into()),
                                    port: Some(IntOrString {
                                        r#type: Some(0),
                                        int_val: Some(8080),
                                        str_val: Some(String::new()),
                                    }),
                                    ..Default::default()
                                }),
                                ..Default::default()
                            }),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }],
                    volumes: vec![core::Volume {
                        name: Some("config".into()),
                        volume_source: Some(core::VolumeSource {
                            config_map: Some(core::ConfigMapVolumeSource {
                                local_object_reference: Some(core::LocalObjectReference {
                                    name: Some("web-config".into()),
                                }),
                                ..Default::default()
                            }),
                            ..Default::default()
                        }),
                    }],
                    ..Default::default()
                }),
            }),
            ..Default::default()
        }),
        status: None,
    }
}

struct Raw {
    status: StatusCode,
    content_type: String,
    body: Vec<u8>,
}

async fn send(
    http: &reqwest::Client,
    method: Method,
    url: String,
    accept: &str,
    body: Option<(Vec<u8>, &str)>,
) -> Raw {
    let mut req = http.request(method, url).header("accept", accept);
    if let Some((bytes, content_type)) = body {
        req = req.header("content-type", content_type).body(bytes);
    }
    let resp = req.send().await.expect("a response");
    let status = resp.status();
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body = resp.bytes().await.expect("a body").to_vec();
    Raw {
        status,
        content_type,
        body,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_built_in_kind_is_created_read_listed_watched_and_deleted_as_protobuf() {
    let c = TestCluster::new(3).await.expect("cluster");
    let http = reqwest::Client::new();
    let url = |node: u64, path: &str| format!("{}{path}", c.rest_url(node));

    // Created through node 1 from protobuf, answered as protobuf.
    let body = envelope("apps/v1", "Deployment", &deployment("web", 2));
    let created = send(
        &http,
        Method::POST,
        url(1, DEPLOYMENTS),
        &format!("{PROTOBUF}, application/json"),
        Some((body, PROTOBUF)),
    )
    .await;
    assert_eq!(
        created.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&created.body)
    );
    assert_eq!(created.content_type, PROTOBUF);
    let (kind, d): (String, apps::Deployment) = open(&created.body);
    assert_eq!(kind, "Deployment");
    let m = d.metadata.clone().expect("metadata");
    assert_eq!(m.namespace.as_deref(), Some("default"));
    assert!(m.uid.as_deref().is_some_and(|u| u.len() == 36));
    let rv: u64 = m
        .resource_version
        .as_deref()
        .and_then(|r| r.parse().ok())
        .expect("a resourceVersion");
    assert!(m
        .creation_timestamp
        .as_ref()
        .and_then(|t| t.seconds)
        .is_some_and(|s| s > 1_600_000_000));
    assert_eq!(d.spec.as_ref().and_then(|s| s.replicas), Some(2));

    // Stored as kube's JSON: read through node 2 as JSON, with the
    // inlined volume source and probe handler, the quantity and the
    // int-or-string in their JSON forms, and no empty strings.
    let got = c
        .kube(2)
        .get(&format!("{DEPLOYMENTS}/web"))
        .await
        .expect("get");
    assert_eq!(got.status, StatusCode::OK, "{}", got.text);
    let pod = &got.body["spec"]["template"]["spec"];
    assert_eq!(
        pod["volumes"][0],
        json!({"name": "config", "configMap": {"name": "web-config", "defaultMode": 420}})
    );
    let container = &pod["containers"][0];
    assert_eq!(
        container["livenessProbe"]["httpGet"],
        json!({"path": "/healthz", "port": 8080, "scheme": "HTTP"})
    );
    assert_eq!(container["resources"]["limits"]["memory"], "128Mi");
    // Empty strings are absent; the server's defaults then fill them in.
    assert!(got.body["metadata"].get("generateName").is_none());
    assert_ne!(container["imagePullPolicy"], "");
    let mut object = got.body.clone();
    // (The managed fields' manager is the client's user agent: none here.)
    object["metadata"]["managedFields"].take();
    let text = object.to_string();
    assert!(!text.contains("\"\""), "an empty string was stored: {text}");

    // Listed through node 3 as protobuf.
    let listed = send(&http, Method::GET, url(3, DEPLOYMENTS), PROTOBUF, None).await;
    assert_eq!(listed.status, StatusCode::OK);
    let (kind, list): (String, apps::DeploymentList) = open(&listed.body);
    assert_eq!(kind, "DeploymentList");
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0], {
        let mut d = d.clone();
        d.status = list.items[0].status.clone();
        d
    });
    assert!(list
        .metadata
        .and_then(|m| m.resource_version)
        .and_then(|r| r.parse::<u64>().ok())
        .is_some_and(|r| r >= rv));

    // Watched through node 2 as protobuf from the created revision: an
    // update through node 1 arrives as one length-prefixed WatchEvent.
    let watch = http
        .get(url(
            2,
            &format!("{DEPLOYMENTS}?watch=1&resourceVersion={rv}"),
        ))
        .header("accept", PROTOBUF)
        .send()
        .await
        .expect("watch");
    assert_eq!(watch.status(), StatusCode::OK);
    assert_eq!(
        watch.headers()["content-type"],
        "application/vnd.kubernetes.protobuf;stream=watch"
    );
    let mut update = got.body.clone();
    update["spec"]["replicas"] = json!(0);
    let put = c
        .kube(1)
        .put(&format!("{DEPLOYMENTS}/web"), &update)
        .await
        .expect("put");
    assert_eq!(put.status, StatusCode::OK, "{}", put.text);
    let mut stream = watch.bytes_stream();
    let mut buf = Vec::new();
    let frame = loop {
        if buf.len() >= 4 {
            let len = u32::from_be_bytes(buf[..4].try_into().expect("4 bytes")) as usize;
            if buf.len() >= 4 + len {
                break buf[4..4 + len].to_vec();
            }
        }
        let chunk = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("an event within 10 s")
            .expect("the stream goes on")
            .expect("a chunk");
        buf.extend_from_slice(&chunk);
    };
    let event = meta::WatchEvent::decode(frame.as_slice()).expect("a WatchEvent");
    assert_eq!(event.r#type.as_deref(), Some("MODIFIED"));
    let raw = event.object.and_then(|o| o.raw).expect("an object");
    let (kind, modified): (String, apps::Deployment) = open(&raw);
    assert_eq!(kind, "Deployment");
    // A pointer set to zero stays zero: it is not a Go zero value to drop.
    assert_eq!(modified.spec.and_then(|s| s.replicas), Some(0));

    // Deleted through node 3 with protobuf DeleteOptions: a wrong uid
    // precondition is a conflict, the right one deletes.
    let options = |uid: &str| {
        envelope(
            "meta.k8s.io/v1",
            "DeleteOptions",
            &meta::DeleteOptions {
                preconditions: Some(meta::Preconditions {
                    uid: Some(uid.into()),
                    resource_version: None,
                }),
                ..Default::default()
            },
        )
    };
    let wrong = send(
        &http,
        Method::DELETE,
        url(3, &format!("{DEPLOYMENTS}/web")),
        "application/json",
        Some((options("not-the-uid"), PROTOBUF)),
    )
    .await;
    assert_eq!(wrong.status, StatusCode::CONFLICT);
    let deleted = send(
        &http,
        Method::DELETE,
        url(3, &format!("{DEPLOYMENTS}/web")),
        PROTOBUF,
        Some((options(m.uid.as_deref().unwrap_or_default()), PROTOBUF)),
    )
    .await;
    assert_eq!(deleted.status, StatusCode::OK);
    let (kind, _): (String, apps::Deployment) = open(&deleted.body);
    assert_eq!(kind, "Deployment");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn yaml_bodies_are_read_and_written_and_custom_resources_answer_json() {
    let c = TestCluster::new(3).await.expect("cluster");
    let http = reqwest::Client::new();
    let url = |node: u64, path: &str| format!("{}{path}", c.rest_url(node));
    let configmaps = "/api/v1/namespaces/default/configmaps";

    let yaml =
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-yaml\ndata:\n  greeting: hello\n";
    let created = send(
        &http,
        Method::POST,
        url(1, configmaps),
        "application/yaml",
        Some((yaml.as_bytes().to_vec(), "application/yaml")),
    )
    .await;
    assert_eq!(created.status, StatusCode::CREATED);
    assert_eq!(created.content_type, "application/yaml");
    let text = String::from_utf8(created.body).expect("utf-8");
    assert!(text.contains("greeting: hello"), "{text}");
    assert!(text.contains("name: from-yaml"), "{text}");
    let listed = send(
        &http,
        Method::GET,
        url(2, configmaps),
        "application/yaml",
        None,
    )
    .await;
    let text = String::from_utf8(listed.body).expect("utf-8");
    assert!(
        text.starts_with("kind: ConfigMapList") || text.contains("\nkind: ConfigMapList"),
        "{text}"
    );
    let bad = send(
        &http,
        Method::POST,
        url(1, configmaps),
        "application/json",
        Some((b"metadata: [unclosed".to_vec(), "application/yaml")),
    )
    .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    // A watch has no YAML form.
    let watch = send(
        &http,
        Method::GET,
        url(3, &format!("{configmaps}?watch=1")),
        "application/yaml",
        None,
    )
    .await;
    assert_eq!(watch.status, StatusCode::NOT_ACCEPTABLE);

    // A custom resource: JSON when the client also takes JSON, 406 when it
    // takes only protobuf, 415 for a protobuf body.
    let definition = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}]}
    });
    let crd = c
        .kube(1)
        .post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            &definition,
        )
        .await
        .expect("crd");
    assert_eq!(crd.status, StatusCode::CREATED, "{}", crd.text);
    let gadgets = "/apis/example.com/v1/namespaces/default/gadgets";
    let either = send(
        &http,
        Method::GET,
        url(2, gadgets),
        &format!("{PROTOBUF}, application/json"),
        None,
    )
    .await;
    assert_eq!(either.status, StatusCode::OK);
    assert_eq!(either.content_type, "application/json");
    let only = send(&http, Method::GET, url(2, gadgets), PROTOBUF, None).await;
    assert_eq!(only.status, StatusCode::NOT_ACCEPTABLE);
    let body = envelope("example.com/v1", "Gadget", &meta::Status::default());
    let refused = send(
        &http,
        Method::POST,
        url(3, gadgets),
        "application/json",
        Some((body, PROTOBUF)),
    )
    .await;
    assert_eq!(refused.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let status: Value = serde_json::from_slice(&refused.body).expect("a Status");
    assert_eq!(status["kind"], "Status");
    c.shutdown().await;
}
