//! Services: what kube's service strategy and REST storage prepare (the
//! cluster IPs as one list, the IP family policy, an empty load-balancer
//! status; an update's cleared cluster IP carried from the stored
//! object) and `ValidateService` / `ValidateServiceUpdate`: ports (unless
//! ExternalName or headless), their names, numbers, protocols and target
//! ports, the type and session affinity, the cluster IPs, which may not
//! change once set.
//!
//! kubestore allocates no cluster IP and no node port: a service created
//! without `clusterIP` has none (kube would allocate one from its service
//! CIDR); a headless (`None`) or chosen one is kept.

use std::collections::HashSet;

use serde_json::{json, Map, Value};

use super::pod::{enum_field, PORT_PROTOCOLS};
use super::{empty, has, list, obj, obj_entry, text, Path};
use crate::kube::error::{go_quote, BadValue, FieldCause};
use crate::kube::names;
use crate::kube::objectmeta;

/// `supportedServiceType`, sorted.
const SERVICE_TYPES: &[&str] = &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];
/// `supportedSessionAffinityType`, sorted.
const SESSION_AFFINITIES: &[&str] = &["ClientIP", "None"];
const IP_FAMILY_POLICIES: &[&str] = &["PreferDualStack", "RequireDualStack", "SingleStack"];
const IP_FAMILIES: &[&str] = &["IPv4", "IPv6"];
const INVALID_IP: &str = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)";

fn is_external_name(spec: &Map<String, Value>) -> bool {
    text(spec, "type") == "ExternalName"
}

fn cluster_ips(spec: &Map<String, Value>) -> Vec<&str> {
    list(spec, "clusterIPs")
        .iter()
        .map(|v| v.as_str().unwrap_or(""))
        .collect()
}

fn is_headless(spec: &Map<String, Value>) -> bool {
    cluster_ips(spec).first() == Some(&"None") || text(spec, "clusterIP") == "None"
}

/// A new service: `clusterIPs` from `clusterIP` (an old client's), the IP
/// family policy and families (single stack, the family of its cluster
/// IP, else IPv4), `status.loadBalancer: {}`.
pub fn prepare_create(svc: &mut Map<String, Value>) {
    if let Some(spec) = obj_entry(svc, "spec") {
        normalize_cluster_ips(spec);
        ip_families(spec);
    }
    svc.insert("status".into(), json!({"loadBalancer": {}}));
}

/// An update: a cluster IP the new object leaves out is the stored one's
/// (kube's `patchAllocatedValues`), and so are the IP family fields.
pub fn prepare_update(old: &Map<String, Value>, new: &mut Map<String, Value>) {
    let old_spec = obj(old, "spec").cloned().unwrap_or_default();
    let Some(spec) = obj_entry(new, "spec") else {
        return;
    };
    if !is_external_name(&old_spec) && !is_external_name(spec) {
        if text(spec, "clusterIP").is_empty() && list(spec, "clusterIPs").is_empty() {
            for key in ["clusterIP", "clusterIPs"] {
                if let Some(v) = old_spec.get(key) {
                    spec.insert(key.into(), v.clone());
                }
            }
        }
        for key in ["ipFamilyPolicy", "ipFamilies"] {
            if !has(spec, key) {
                if let Some(v) = old_spec.get(key) {
                    spec.insert(key.into(), v.clone());
                }
            }
        }
    }
    normalize_cluster_ips(spec);
    // A singular clusterIP changed by an old client, with the list as
    // stored: the list follows it (and validation refuses the change).
    let old_ip = text(&old_spec, "clusterIP");
    if !old_ip.is_empty()
        && text(spec, "clusterIP") != old_ip
        && list(spec, "clusterIPs") == list(&old_spec, "clusterIPs")
    {
        let ip = text(spec, "clusterIP").to_string();
        spec.insert("clusterIPs".into(), json!([ip]));
    }
    ip_families(spec);
}

fn normalize_cluster_ips(spec: &mut Map<String, Value>) {
    let ip = text(spec, "clusterIP").to_string();
    if !ip.is_empty() && list(spec, "clusterIPs").is_empty() {
        spec.insert("clusterIPs".into(), json!([ip]));
    }
}

fn ip_families(spec: &mut Map<String, Value>) {
    if is_external_name(spec) {
        return;
    }
    if !has(spec, "ipFamilyPolicy") {
        spec.insert("ipFamilyPolicy".into(), json!("SingleStack"));
    }
    if !has(spec, "ipFamilies") {
        let family = match cluster_ips(spec).first() {
            Some(ip) if ip.parse::<std::net::Ipv6Addr>().is_ok() => "IPv6",
            _ => "IPv4",
        };
        spec.insert("ipFamilies".into(), json!([family]));
    }
}

/// `ValidateService`'s spec part.
pub fn validate(svc: &Map<String, Value>) -> Vec<FieldCause> {
    let spec = obj(svc, "spec").unwrap_or(empty());
    let path = Path::new("spec");
    let mut causes = Vec::new();
    let ports = list(spec, "ports");
    let service_type = text(spec, "type");
    if ports.is_empty() && !is_headless(spec) && service_type != "ExternalName" {
        causes.push(FieldCause::required(path.child("ports").as_str(), ""));
    }
    let ips = cluster_ips(spec);
    match service_type {
        "LoadBalancer" | "NodePort" if is_headless(spec) => {
            causes.push(FieldCause::invalid(
                path.child("clusterIPs").index(0).as_str(),
                "None",
                &format!("may not be set to 'None' for {service_type} services"),
            ));
        }
        "ExternalName" => {
            for key in ["clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
                let set = match spec.get(key) {
                    Some(Value::Array(a)) => !a.is_empty(),
                    Some(v) => !v.is_null(),
                    None => false,
                };
                if set {
                    causes.push(FieldCause::forbidden(
                        path.child(key).as_str(),
                        "may not be set for ExternalName services",
                    ));
                }
            }
            let cname = text(spec, "externalName");
            let cname = cname.strip_suffix('.').unwrap_or(cname);
            if cname.is_empty() {
                causes.push(FieldCause::required(
                    path.child("externalName").as_str(),
                    "",
                ));
            } else {
                for msg in names::dns1123_subdomain(cname) {
                    causes.push(FieldCause::invalid(
                        path.child("externalName").as_str(),
                        cname,
                        &msg,
                    ));
                }
            }
        }
        _ => {}
    }
    let mut port_names = HashSet::new();
    for (i, port) in ports.iter().enumerate() {
        let port = port.as_object().cloned().unwrap_or_default();
        causes.extend(service_port(
            &port,
            ports.len() > 1,
            &mut port_names,
            &path.child("ports").index(i),
        ));
    }
    if let Some(selector) = obj(spec, "selector") {
        causes.extend(objectmeta::validate_labels(
            selector,
            path.child("selector").as_str(),
        ));
    }
    causes.extend(enum_field(
        spec,
        "sessionAffinity",
        SESSION_AFFINITIES,
        &path,
    ));
    if text(spec, "sessionAffinity") == "None" && has(spec, "sessionAffinityConfig") {
        causes.push(FieldCause::forbidden(
            path.child("sessionAffinityConfig").as_str(),
            "must not be set when session affinity is None",
        ));
    }
    if service_type != "ExternalName" {
        causes.extend(cluster_ip_fields(spec, &ips, &path));
    }
    causes.extend(enum_field(spec, "type", SERVICE_TYPES, &path));
    if service_type == "ClusterIP" {
        for (i, port) in ports.iter().enumerate() {
            if port.get("nodePort").and_then(Value::as_i64).unwrap_or(0) != 0 {
                causes.push(FieldCause::forbidden(
                    path.child("ports").index(i).child("nodePort").as_str(),
                    "may not be used when `type` is 'ClusterIP'",
                ));
            }
        }
    }
    let mut seen = HashSet::new();
    for (i, port) in ports.iter().enumerate() {
        let protocol = port.get("protocol").and_then(Value::as_str).unwrap_or("");
        let number = port.get("port").and_then(Value::as_i64).unwrap_or(0);
        if !seen.insert((protocol.to_string(), number)) {
            causes.push(FieldCause::duplicate(
                path.child("ports").index(i).as_str(),
                BadValue::Go(format!(
                    "core.ServicePort{{Name:\"\", Protocol:{}, AppProtocol:(*string)(nil), Port:{number}, TargetPort:intstr.IntOrString{{Type:0, IntVal:0, StrVal:\"\"}}, NodePort:0}}",
                    go_quote(protocol)
                )),
            ));
        }
    }
    causes
}

/// `validateServicePort`.
fn service_port(
    port: &Map<String, Value>,
    require_name: bool,
    names_seen: &mut HashSet<String>,
    path: &Path,
) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    let name = text(port, "name");
    if require_name && name.is_empty() {
        causes.push(FieldCause::required(path.child("name").as_str(), ""));
    } else if !name.is_empty() {
        for msg in names::dns1123_label(name) {
            causes.push(FieldCause::invalid(path.child("name").as_str(), name, &msg));
        }
        if !names_seen.insert(name.to_string()) {
            causes.push(FieldCause::duplicate(
                path.child("name").as_str(),
                BadValue::from(name),
            ));
        }
    }
    let number = port.get("port").and_then(Value::as_i64).unwrap_or(0);
    for msg in names::port_number(number) {
        causes.push(FieldCause::invalid_value(
            path.child("port").as_str(),
            BadValue::Int(number),
            &msg,
        ));
    }
    causes.extend(enum_field(port, "protocol", PORT_PROTOCOLS, path));
    let target = path.child("targetPort");
    match port.get("targetPort") {
        Some(Value::String(s)) => {
            for msg in names::port_name(s) {
                causes.push(FieldCause::invalid(target.as_str(), s, &msg));
            }
        }
        Some(v) => {
            let n = v.as_i64().unwrap_or(0);
            for msg in names::port_number(n) {
                causes.push(FieldCause::invalid_value(
                    target.as_str(),
                    BadValue::Int(n),
                    &msg,
                ));
            }
        }
        None => {}
    }
    if let Some(app) = port.get("appProtocol").and_then(Value::as_str) {
        for msg in names::qualified_name(app) {
            causes.push(FieldCause::invalid(
                path.child("appProtocol").as_str(),
                app,
                &msg,
            ));
        }
    }
    causes
}

/// `ValidateServiceClusterIPsRelatedFields`, the parts without a
/// cluster's configuration: `clusterIPs` starts with `clusterIP`, each a
/// valid IP (`None` only alone), the families and policy known.
fn cluster_ip_fields(spec: &Map<String, Value>, ips: &[&str], path: &Path) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    let ips_path = path.child("clusterIPs");
    let shown = || {
        BadValue::Go(format!(
            "[]string{{{}}}",
            ips.iter()
                .map(|ip| go_quote(ip))
                .collect::<Vec<_>>()
                .join(", ")
        ))
    };
    let ip = text(spec, "clusterIP");
    if !ip.is_empty() {
        match ips.first() {
            None => causes.push(FieldCause::required(ips_path.as_str(), "")),
            Some(first) if *first != ip => causes.push(FieldCause::invalid_value(
                ips_path.as_str(),
                shown(),
                "first value must match `clusterIP`",
            )),
            Some(_) => {}
        }
    } else if !ips.is_empty() {
        causes.push(FieldCause::invalid_value(
            ips_path.as_str(),
            shown(),
            "must be empty when `clusterIP` is not specified",
        ));
    }
    let mut families = HashSet::new();
    for (i, family) in list(spec, "ipFamilies").iter().enumerate() {
        let family = family.as_str().unwrap_or("");
        let at = path.child("ipFamilies").index(i);
        if !IP_FAMILIES.contains(&family) {
            causes.push(FieldCause::not_supported(at.as_str(), family, IP_FAMILIES));
        }
        if !families.insert(family) {
            causes.push(FieldCause::duplicate(at.as_str(), BadValue::from(family)));
        }
    }
    let policy = text(spec, "ipFamilyPolicy");
    if has(spec, "ipFamilyPolicy") && !IP_FAMILY_POLICIES.contains(&policy) {
        causes.push(FieldCause::not_supported(
            path.child("ipFamilyPolicy").as_str(),
            policy,
            IP_FAMILY_POLICIES,
        ));
    }
    for (i, ip) in ips.iter().enumerate() {
        if i == 0 && *ip == "None" {
            if ips.len() > 1 {
                causes.push(FieldCause::invalid_value(
                    ips_path.as_str(),
                    shown(),
                    "'None' must be the first and only value",
                ));
            }
            continue;
        }
        if ip.parse::<std::net::IpAddr>().is_err() {
            causes.push(FieldCause::invalid(
                ips_path.index(i).as_str(),
                ip,
                INVALID_IP,
            ));
        }
    }
    causes
}

/// `ValidateServiceUpdate`: the new service as on a create, and cluster
/// IPs that do not change once set (unless either side is an
/// ExternalName service): the first never, the second only by removing
/// it.
pub fn validate_update(old: &Map<String, Value>, new: &Map<String, Value>) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    let old_spec = obj(old, "spec").unwrap_or(empty());
    let new_spec = obj(new, "spec").unwrap_or(empty());
    if !is_external_name(old_spec) && !is_external_name(new_spec) {
        let (before, after) = (cluster_ips(old_spec), cluster_ips(new_spec));
        let path = Path::new("spec").child("clusterIPs");
        if !before.is_empty() && !after.is_empty() {
            if before[0] != after[0] {
                causes.push(FieldCause::invalid(
                    path.index(0).as_str(),
                    &after.join(","),
                    "may not change once set",
                ));
            }
            if before.len() > 1 && after.len() > 1 && before[1] != after[1] {
                causes.push(FieldCause::invalid(
                    path.index(1).as_str(),
                    &after.join(","),
                    "may change only by removing it",
                ));
            }
        }
    }
    causes.extend(validate(new));
    causes
}
