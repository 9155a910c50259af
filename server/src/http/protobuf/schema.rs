//! Kubernetes' protobuf messages: the descriptor set the `proto` crate
//! compiles from `proto/proto/kube` (generated from `k8s-pb`), loaded once,
//! and what the transcoder needs to know of each message beyond its
//! descriptor: which message a group/version/kind is, and which fields
//! kube's JSON always carries.

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

use prost_reflect::{DescriptorPool, MessageDescriptor};

use crate::http::openapi::data::Data;

/// The loaded messages.
pub struct Schema {
    pool: DescriptorPool,
    /// JSON names of the fields each message's OpenAPI definition lists as
    /// required, by message full name.
    required: HashMap<String, HashSet<String>>,
}

/// The protobuf package of a message, from kube's OpenAPI definition name:
/// `io.k8s.api.core.v1.Pod` is `k8s.io.api.core.v1.Pod`, and
/// `io.k8s.apiextensions-apiserver.pkg...` is `k8s.io.apiextensions_apiserver.pkg...`.
fn message_name(definition: &str) -> Option<String> {
    let rest = definition.strip_prefix("io.k8s.")?;
    let (repo, rest) = rest.split_once('.')?;
    Some(format!("k8s.io.{}.{rest}", repo.replace('-', "_")))
}

/// The inverse of [`message_name`].
fn definition_name(message: &str) -> Option<String> {
    let rest = message.strip_prefix("k8s.io.")?;
    let (repo, rest) = rest.split_once('.')?;
    Some(format!("io.k8s.{}.{rest}", repo.replace('_', "-")))
}

impl Schema {
    /// The schema. The descriptor set is part of the build: one that does
    /// not load is a build defect (this module's tests load it).
    pub fn get() -> &'static Schema {
        static SCHEMA: LazyLock<Schema> = LazyLock::new(|| {
            let pool = DescriptorPool::decode(kubestore_proto::KUBE_DESCRIPTORS)
                .unwrap_or_else(|e| panic!("the kube descriptor set does not load: {e}"));
            let data = Data::get();
            let required = pool
                .all_messages()
                .filter_map(|m| {
                    let definition = data.definitions.get(&definition_name(m.full_name())?)?;
                    let names: HashSet<String> = definition["required"]
                        .as_array()?
                        .iter()
                        .filter_map(|n| n.as_str().map(str::to_string))
                        .collect();
                    Some((m.full_name().to_string(), names))
                })
                .collect();
            Schema { pool, required }
        });
        &SCHEMA
    }

    /// The message of a kind: `Pod` in `v1`, `Deployment` in `apps/v1`,
    /// `DeploymentList`, `Status`, `Scale`, ... (whatever kube's OpenAPI
    /// definitions give a group/version/kind).
    pub fn kind(&self, api_version: &str, kind: &str) -> Option<MessageDescriptor> {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let definition = Data::get().definition_of(group, version, kind)?;
        self.pool.get_message_by_name(&message_name(definition)?)
    }

    /// A message by its full protobuf name.
    pub fn message(&self, full_name: &str) -> Option<MessageDescriptor> {
        self.pool.get_message_by_name(full_name)
    }

    /// Whether kube's JSON always carries a field of a message, even at
    /// its zero value (its OpenAPI definition lists it as required).
    pub fn is_required(&self, message: &MessageDescriptor, json_name: &str) -> bool {
        self.required
            .get(message.full_name())
            .is_some_and(|r| r.contains(json_name))
    }
}

/// Full names of the messages kube's JSON spells differently from a plain
/// message (see `transcode`).
pub mod names {
    pub const TIME: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.Time";
    pub const MICRO_TIME: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime";
    pub const DURATION: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.Duration";
    pub const FIELDS_V1: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1";
    pub const QUANTITY: &str = "k8s.io.apimachinery.pkg.api.resource.Quantity";
    pub const INT_OR_STRING: &str = "k8s.io.apimachinery.pkg.util.intstr.IntOrString";
    pub const RAW_EXTENSION: &str = "k8s.io.apimachinery.pkg.runtime.RawExtension";
    pub const UNKNOWN: &str = "k8s.io.apimachinery.pkg.runtime.Unknown";
    pub const TYPE_META: &str = "k8s.io.apimachinery.pkg.runtime.TypeMeta";
    pub const WATCH_EVENT: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.WatchEvent";
    pub const DELETE_OPTIONS: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions";
    const APIEXTENSIONS: &str = "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.";

    /// `apiextensions.JSON` (any JSON value) in any version.
    pub fn is_json(name: &str) -> bool {
        name.strip_prefix(APIEXTENSIONS)
            .is_some_and(|rest| rest.ends_with(".JSON"))
    }

    /// The `JSONSchemaPropsOr...` unions in any version: `Array`, `Bool`
    /// or `StringArray`.
    pub fn schema_union(name: &str) -> Option<&str> {
        name.strip_prefix(APIEXTENSIONS)?
            .split_once(".JSONSchemaPropsOr")
            .map(|(_, which)| which)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_served_built_in_kind_and_its_list_has_a_message() {
        let schema = Schema::get();
        for rt in crate::kube::resources::RESOURCES.iter() {
            let api_version = rt.api_version();
            for kind in [rt.kind.to_string(), rt.list_kind()] {
                let kind: &str = &kind;
                assert!(
                    schema.kind(&api_version, kind).is_some(),
                    "{api_version} {kind} has no message"
                );
            }
        }
        for (api_version, kind) in [("v1", "Status"), ("autoscaling/v1", "Scale")] {
            assert!(schema.kind(api_version, kind).is_some(), "{kind}");
        }
    }

    #[test]
    fn names_map_both_ways_and_required_fields_come_from_the_definitions() {
        let crd =
            "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition";
        let message = message_name(crd).expect("a kube name");
        assert_eq!(
            message,
            "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition"
        );
        assert_eq!(definition_name(&message).as_deref(), Some(crd));
        let schema = Schema::get();
        let port = schema
            .message("k8s.io.api.core.v1.ContainerPort")
            .expect("ContainerPort");
        assert!(schema.is_required(&port, "containerPort"));
        assert!(!schema.is_required(&port, "hostPort"));
    }
}
