"""The official Kubernetes Python client's scale calls against a kubestore node.

Usage: python3 python_scale.py http://127.0.0.1:8080

Creates a deployment, reads its Scale (`read_namespaced_deployment_scale`,
a typed V1Scale the client validates), patches it
(`patch_namespaced_deployment_scale`: a strategic merge patch of the
Scale) and replaces it, then reads the deployment back: its replicas and
generation moved, nothing else. Exits non-zero on the first mismatch.
"""

import sys

from kubernetes import client
from kubernetes.client.rest import ApiException


def main(url: str) -> None:
    config = client.Configuration()
    config.host = url
    apps = client.AppsV1Api(client.ApiClient(config))

    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "py-web", "labels": {"app": "py-web"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "py-web"}},
            "template": {
                "metadata": {"labels": {"app": "py-web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
            },
        },
    }
    created = apps.create_namespaced_deployment("default", deployment)
    assert created.metadata.generation == 1, created.metadata.generation

    scale = apps.read_namespaced_deployment_scale("py-web", "default")
    assert isinstance(scale, client.V1Scale), type(scale)
    assert scale.spec.replicas == 1, scale.spec
    assert scale.status.replicas == 0, scale.status
    assert scale.status.selector == "app=py-web", scale.status
    assert scale.metadata.uid == created.metadata.uid, scale.metadata

    patched = apps.patch_namespaced_deployment_scale("py-web", "default", {"spec": {"replicas": 4}})
    assert patched.spec.replicas == 4, patched.spec
    got = apps.read_namespaced_deployment("py-web", "default")
    assert got.spec.replicas == 4, got.spec.replicas
    assert got.metadata.generation == 2, got.metadata.generation
    assert got.spec.template.spec.containers[0].image == "nginx:1.27"

    # A replace carrying the scale's resourceVersion: the precondition.
    current = apps.read_namespaced_deployment_scale("py-web", "default")
    current.spec.replicas = 2
    replaced = apps.replace_namespaced_deployment_scale("py-web", "default", current)
    assert replaced.spec.replicas == 2, replaced.spec
    try:
        current.spec.replicas = 7
        apps.replace_namespaced_deployment_scale("py-web", "default", current)
        raise AssertionError("a stale resourceVersion must conflict")
    except ApiException as e:
        assert e.status == 409, e.status

    try:
        apps.patch_namespaced_deployment_scale("py-web", "default", {"spec": {"replicas": -1}})
        raise AssertionError("negative replicas must be refused")
    except ApiException as e:
        assert e.status == 422, e.status

    try:
        apps.read_namespaced_deployment_scale("missing", "default")
        raise AssertionError("a missing deployment has no scale")
    except ApiException as e:
        assert e.status == 404, e.status

    assert apps.read_namespaced_deployment("py-web", "default").spec.replicas == 2
    print("python scale ok")


if __name__ == "__main__":
    main(sys.argv[1])
