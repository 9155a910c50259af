"""The official Kubernetes Python client against a kubestore node.

Usage: python3 python_client.py http://127.0.0.1:8080

Exercises what the Python client is strict about: typed list models (which
reject a missing `items`), `watch=True` booleans, watch event decoding,
ApiException codes, and its default patch (a strategic merge patch for a
dict body, a JSON patch for a list). Exits non-zero with a message on the first mismatch.
"""

import sys

from kubernetes import client, watch
from kubernetes.client.rest import ApiException


def main(url: str) -> None:
    config = client.Configuration()
    config.host = url
    api = client.CoreV1Api(client.ApiClient(config))

    names = [ns.metadata.name for ns in api.list_namespace().items]
    assert "default" in names, names

    empty = api.list_namespaced_secret("kube-public")
    assert empty.items == [], empty.items

    cm = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="py-cm"), data={"k": "v"})
    created = api.create_namespaced_config_map("default", cm)
    rv = created.metadata.resource_version
    assert int(rv) > 0, rv

    got = api.read_namespaced_config_map("py-cm", "default")
    assert got.data == {"k": "v"}, got.data

    try:
        api.create_namespaced_config_map("default", cm)
        raise AssertionError("a second create must fail")
    except ApiException as e:
        assert e.status == 409, e.status

    got.data["k"] = "v2"
    api.replace_namespaced_config_map("py-cm", "default", got)

    events = []
    w = watch.Watch()
    for event in w.stream(api.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=5):
        events.append((event["type"], event["object"].metadata.name, event["object"].data))
        if len(events) == 1:
            api.delete_namespaced_config_map("py-cm", "default")
        if len(events) == 2:
            w.stop()
    assert events[0] == ("MODIFIED", "py-cm", {"k": "v2"}), events
    assert events[1][0] == "DELETED", events

    try:
        api.read_namespaced_config_map("py-cm", "default")
        raise AssertionError("the configmap must be gone")
    except ApiException as e:
        assert e.status == 404, e.status
    # patch_* with a dict body sends a strategic merge patch (the client's
    # default), with a list body a JSON patch.
    api.create_namespaced_config_map(
        "default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="py-patch"), data={"a": "1"})
    )
    merged = api.patch_namespaced_config_map("py-patch", "default", {"data": {"b": "2"}})
    assert merged.data == {"a": "1", "b": "2"}, merged.data
    removed = api.patch_namespaced_config_map("py-patch", "default", {"data": {"a": None}})
    assert removed.data == {"b": "2"}, removed.data
    replaced = api.patch_namespaced_config_map(
        "py-patch", "default", [{"op": "replace", "path": "/data/b", "value": "3"}]
    )
    assert replaced.data == {"b": "3"}, replaced.data
    api.delete_namespaced_config_map("py-patch", "default")
    print("python client ok")


if __name__ == "__main__":
    main(sys.argv[1])
