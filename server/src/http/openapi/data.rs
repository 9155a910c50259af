//! The generated OpenAPI data: the upstream specification's definitions
//! and each action's query parameters (`definitions.json` beside this
//! file, written by `scripts/gen-openapi.py`, whose head says how to rerun
//! it), embedded in the binary and parsed once, on first use.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use serde::Deserialize;
use serde_json::Value;

/// The generated file (see the module head).
const DEFINITIONS: &str = include_str!("definitions.json");

/// The definitions of the meta types every group version's document
/// carries (the operations name them, or clients read them).
pub const STATUS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";
pub const DELETE_OPTIONS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions";
pub const PATCH: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";
pub const WATCH_EVENT: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent";
pub const API_RESOURCE_LIST: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.APIResourceList";

/// The generated table.
#[derive(Debug, Deserialize)]
pub struct Data {
    /// Swagger 2.0 definitions by kube's name, with `#/definitions/` refs.
    pub definitions: BTreeMap<String, Value>,
    /// Query parameters (swagger 2.0 parameter objects) by
    /// `x-kubernetes-action`, and `path` for those on every path.
    pub parameters: BTreeMap<String, Vec<Value>>,
    /// `group/version/Kind` to the definition carrying that
    /// `x-kubernetes-group-version-kind` (filled in after parsing).
    #[serde(skip)]
    gvks: BTreeMap<String, String>,
}

impl Data {
    /// The parsed table. The file is part of the build: a file that does
    /// not parse is a build defect (this module's tests parse it).
    pub fn get() -> &'static Data {
        static DATA: LazyLock<Data> = LazyLock::new(|| {
            let mut data: Data = serde_json::from_str(DEFINITIONS)
                .unwrap_or_else(|e| panic!("definitions.json does not parse: {e}"));
            let mut gvks = BTreeMap::new();
            for (name, def) in &data.definitions {
                for gvk in def["x-kubernetes-group-version-kind"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    let key = gvk_key(
                        gvk["group"].as_str().unwrap_or_default(),
                        gvk["version"].as_str().unwrap_or_default(),
                        gvk["kind"].as_str().unwrap_or_default(),
                    );
                    gvks.entry(key).or_insert_with(|| name.clone());
                }
            }
            data.gvks = gvks;
            data
        });
        &DATA
    }

    /// The definition of a group/version/kind.
    pub fn definition_of(&self, group: &str, version: &str, kind: &str) -> Option<&str> {
        self.gvks
            .get(&gvk_key(group, version, kind))
            .map(String::as_str)
    }

    /// The query parameters of an action (`list`, `post`, `put`, `patch`,
    /// `get`, `delete`, `deletecollection`, or `path`).
    pub fn parameters(&self, action: &str) -> &[Value] {
        self.parameters.get(action).map_or(&[], Vec::as_slice)
    }
}

fn gvk_key(group: &str, version: &str, kind: &str) -> String {
    format!("{group}/{version}/{kind}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_parses_and_indexes_kinds_and_meta_types() {
        let data = Data::get();
        assert_eq!(
            data.definition_of("apps", "v1", "Deployment"),
            Some("io.k8s.api.apps.v1.Deployment")
        );
        assert_eq!(
            data.definition_of("autoscaling", "v1", "Scale"),
            Some("io.k8s.api.autoscaling.v1.Scale")
        );
        for meta in [
            STATUS,
            DELETE_OPTIONS,
            PATCH,
            WATCH_EVENT,
            API_RESOURCE_LIST,
        ] {
            assert!(data.definitions.contains_key(meta), "{meta}");
        }
        let replicas = &data.definitions["io.k8s.api.apps.v1.DeploymentSpec"]["properties"]
            ["replicas"]["description"];
        assert!(replicas
            .as_str()
            .is_some_and(|d| d.starts_with("Number of desired pods")));
        assert!(data
            .parameters("patch")
            .iter()
            .any(|p| p["name"] == "fieldValidation"));
    }
}
