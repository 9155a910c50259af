#!/usr/bin/env python3
"""Generates the data kubestore's OpenAPI documents are built from.

Reads an upstream Kubernetes OpenAPI v2 ("swagger") specification and
writes `server/src/http/openapi/definitions.json`, which the server embeds
(`include_str!`) and parses once, lazily (`server/src/http/openapi/data.rs`).
The server never reads the specification itself.

Rerun it when moving to another Kubernetes version, from the repository
root (Python 3, standard library only):

    scripts/gen-openapi.py path/to/k8s-openapi-v1.33-swagger.json

(the v1.33 specification is `api/openapi-spec/swagger.json` of
kubernetes/kubernetes at tag v1.33.x). `--out FILE` writes elsewhere,
`--check` exits 1 if the committed file differs from what it would write.
The output is reproducible: keys sorted, one definition per line.

What the file holds:

- `definitions`: every definition reachable from any resource path of the
  specification (the kinds, their lists, and the meta types the
  operations name: `Status`, `DeleteOptions`, `WatchEvent`, `Patch`,
  `APIResourceList`, ...), exactly as the specification has them:
  descriptions, kube's definition names (`io.k8s.api.apps.v1.Deployment`),
  `x-kubernetes-group-version-kind` and every other `x-kubernetes-*`
  extension, `#/definitions/...` references. Which of them a node serves
  is decided at run time from the served-type table
  (`kube::resources`): this file holds a superset and names no served
  type itself.
- `parameters`: the query parameters of each operation kube has, by
  `x-kubernetes-action` (`list`, `post`, `deletecollection`, `get`, `put`,
  `patch`, `delete`), and `path` (those every path carries: `pretty`),
  taken from `apps/v1` deployments (a namespaced type with every verb)
  with `$ref`s resolved; body and path parameters are left out, as the
  server writes those per type. The paths themselves are built by the
  server from the served-type table.

Plain JSON (about 1 MB), not gzipped: it compresses well in git, and
`include_str!` of text keeps the build free of a decompression step.
"""

import argparse
import json
import sys

REF_PREFIX = "#/definitions/"
PARAM_PREFIX = "#/parameters/"

# The template resource whose operations give each action's parameters.
TEMPLATE_COLLECTION = "/apis/apps/v1/namespaces/{namespace}/deployments"
TEMPLATE_OBJECT = "/apis/apps/v1/namespaces/{namespace}/deployments/{name}"

# Definitions every document carries though no non-deprecated path names
# them: the watch paths (left out) are where kube's specification names
# the watch event.
EXTRA_ROOTS = ["io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent"]

# Path keys of a resource path (`/api/v1/...`, `/apis/<g>/<v>/...`) that
# are not deprecated `watch/` paths.
METHODS = ("get", "put", "post", "delete", "patch", "head", "options")


def refs(value, out):
    """Every `#/definitions/` name referenced anywhere inside `value`."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k == "$ref" and isinstance(v, str):
                if v.startswith(REF_PREFIX):
                    out.add(v[len(REF_PREFIX):])
                elif not v.startswith(PARAM_PREFIX):
                    sys.exit(f"unexpected reference {v}")
            else:
                refs(v, out)
    elif isinstance(value, list):
        for v in value:
            refs(v, out)


def closure(spec, roots):
    defs = spec["definitions"]
    seen = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        if name not in defs:
            sys.exit(f"reference to a missing definition {name}")
        seen.add(name)
        found = set()
        refs(defs[name], found)
        todo.extend(found - seen)
    return seen


def resource_roots(spec):
    """Definitions the resource paths' operations (parameters, responses)
    name, deprecated `watch/` paths left out."""
    roots = set()
    for path, item in spec["paths"].items():
        parts = path.strip("/").split("/")
        if len(parts) < 3 or "watch" in parts:
            continue
        for method in METHODS:
            op = item.get(method)
            if op is None:
                continue
            refs(op, roots)
            for p in op.get("parameters", []):
                ref = p.get("$ref", "")
                if ref.startswith(PARAM_PREFIX):
                    refs(spec["parameters"][ref[len(PARAM_PREFIX):]], roots)
    return roots


def resolve_param(spec, p):
    ref = p.get("$ref")
    if ref is None:
        return p
    if not ref.startswith(PARAM_PREFIX):
        sys.exit(f"unexpected parameter reference {ref}")
    return spec["parameters"][ref[len(PARAM_PREFIX):]]


def parameters(spec):
    """Each action's query parameters, from the template resource."""
    out = {}
    collection = spec["paths"][TEMPLATE_COLLECTION]
    obj = spec["paths"][TEMPLATE_OBJECT]
    ops = [
        (collection, "get", "list"),
        (collection, "post", "post"),
        (collection, "delete", "deletecollection"),
        (obj, "get", "get"),
        (obj, "put", "put"),
        (obj, "patch", "patch"),
        (obj, "delete", "delete"),
    ]
    for item, method, action in ops:
        op = item[method]
        if op.get("x-kubernetes-action") != action:
            sys.exit(f"{method} of the template is {op.get('x-kubernetes-action')}, not {action}")
        params = [resolve_param(spec, p) for p in op.get("parameters", [])]
        out[action] = [p for p in params if p["in"] == "query"]
    out["path"] = [
        p
        for p in (resolve_param(spec, p) for p in obj.get("parameters", []))
        if p["in"] == "query"
    ]
    for action in ("patch", "put", "post"):
        if not any(p["name"] == "fieldValidation" for p in out[action]):
            sys.exit(f"{action} of the template has no fieldValidation parameter")
    return out


def render(table):
    def dump(v):
        return json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    lines = ["{", '"definitions":{']
    defs = sorted(table["definitions"].items())
    for i, (k, v) in enumerate(defs):
        lines.append(f"{dump(k)}:{dump(v)}" + ("," if i + 1 < len(defs) else ""))
    lines.append("},")
    lines.append('"parameters":{')
    params = sorted(table["parameters"].items())
    for i, (k, v) in enumerate(params):
        lines.append(f"{dump(k)}:{dump(v)}" + ("," if i + 1 < len(params) else ""))
    lines.append("}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", help="the upstream swagger.json")
    parser.add_argument("--out", default="server/src/http/openapi/definitions.json")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    with open(args.spec, encoding="utf-8") as f:
        spec = json.load(f)
    if spec.get("swagger") != "2.0":
        sys.exit("not a swagger 2.0 specification")
    names = closure(spec, resource_roots(spec) | set(EXTRA_ROOTS))
    table = {
        "definitions": {n: spec["definitions"][n] for n in names},
        "parameters": parameters(spec),
    }
    text = render(table)
    if args.check:
        with open(args.out, encoding="utf-8") as f:
            if f.read() != text:
                print(f"{args.out} is out of date; rerun {sys.argv[0]}", file=sys.stderr)
                sys.exit(1)
        return
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {args.out}: {len(names)} definitions", file=sys.stderr)


if __name__ == "__main__":
    main()
