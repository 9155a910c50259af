#!/usr/bin/env python3
"""Generates kubestore's table of the built-in Kubernetes types.

Reads an upstream Kubernetes OpenAPI v2 ("swagger") specification and
writes `server/src/kube/types/builtin.json`, which the server embeds
(`include_str!`) and parses once, lazily (`server/src/kube/types/mod.rs`).
The server never reads the specification itself.

Rerun it when moving to another Kubernetes version, from the repository
root (Python 3, standard library only):

    scripts/gen-kube-types.py path/to/k8s-openapi-v1.33-swagger.json

(the v1.33 specification is `api/openapi-spec/swagger.json` of
kubernetes/kubernetes at tag v1.33.x). `--out FILE` writes elsewhere,
`--check` exits 1 if the committed table differs from what it would write.
The output is reproducible: keys sorted, one type per line.

What the table holds:

- `kinds`: every group/version/kind the specification serves a PATCH for
  (`x-kubernetes-group-version-kind` of a `patch` operation: the kinds a
  client can write, `autoscaling/v1` `Scale` included), keyed
  `<apiVersion>/<kind>` (`v1/ConfigMap`, `apps/v1/Deployment`), each
  naming its root definition.
- `types`: every object definition reachable from those roots, keyed by
  its OpenAPI name. A type has `fields` (its properties), and, when the
  specification says so, `required` and `mapType` (a struct's
  `x-kubernetes-map-type`). A field has a `shape` and, when present,
  `patchStrategy` (the comma-separated strategies as a list),
  `mergeKey`, `listType`, `listMapKeys` and `mapType` (the
  `x-kubernetes-*` extensions, kept apart: a strategic merge patch merges
  container ports on `containerPort`, server-side apply keys them by
  `containerPort` and `protocol`).
- `resources`: every resource the specification serves a path for,
  keyed `<apiVersion>/<plural>` (`v1/pods`, `apps/v1/deployments`): its
  `kind`, whether it is `namespaced` (it has a
  `namespaces/{namespace}/<plural>` path), its `verbs` as discovery
  names them (`create`, `delete`, `deletecollection`, `get`, `list`,
  `patch`, `update`, `watch`; from each operation's
  `x-kubernetes-action`, a `connect` by its HTTP method) and its
  `subresources` (`.../{name}/<sub>`: `status`, `scale`, `finalize`,
  `log`, ...), each with the group, version and kind it reads and writes
  (a `scale` is `autoscaling/v1` `Scale`) and its verbs. What the
  specification does not say (etcd keys, short names, categories) is
  written by hand in `server/src/kube/resources.rs`.
- A shape is `{"scalar": S}` (S one of `string`, `byte`, `dateTime`,
  `integer`, `number`, `boolean`, `intOrString`, `quantity`),
  `{"object": NAME}` (a type of the table), `{"list": SHAPE}`,
  `{"map": SHAPE}` (`additionalProperties`), or `"untyped"` (any JSON:
  `RawExtension`, `FieldsV1`, apiextensions' `JSON` and the like).
  References to the scalar definitions (`Quantity`, `IntOrString`,
  `Time`, `MicroTime`) are resolved to scalars.

Descriptions and `x-kubernetes-unions` are left out. Anything in the
specification this script does not understand stops it with an error
rather than being dropped silently.
"""

import argparse
import json
import re
import sys

REF_PREFIX = "#/definitions/"

# Definitions without properties that hold arbitrary JSON.
UNTYPED = {
    "io.k8s.apimachinery.pkg.runtime.RawExtension",
    "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1",
    "io.k8s.apimachinery.pkg.apis.meta.v1.Patch",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrArray",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrBool",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrStringArray",
}

QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"

STRING_FORMATS = {
    None: "string",
    "": "string",
    "byte": "byte",
    "date-time": "dateTime",
    "int-or-string": "intOrString",
}

# Property keys this script reads, and those it knowingly ignores.
FIELD_KEYS = {
    "type",
    "format",
    "$ref",
    "items",
    "additionalProperties",
    "x-kubernetes-patch-strategy",
    "x-kubernetes-patch-merge-key",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
}
IGNORED_KEYS = {"description", "default"}

# Discovery's verb for each `x-kubernetes-action`; a `connect` is named by
# its HTTP method, as kube's discovery names it (`pods/exec`: create, get).
ACTION_VERBS = {
    "get": "get",
    "list": "list",
    "post": "create",
    "put": "update",
    "patch": "patch",
    "delete": "delete",
    "deletecollection": "deletecollection",
    "watch": "watch",
    "watchlist": "watch",
}
CONNECT_VERBS = {"get": "get", "post": "create", "put": "update", "patch": "patch", "delete": "delete"}
HTTP_METHODS = {"get", "put", "post", "delete", "patch", "head", "options"}
PATCH_STRATEGIES = {"merge", "retainKeys", "replace"}


class SpecError(Exception):
    pass


def scalar(type_, fmt, where):
    if type_ == "string":
        if fmt not in STRING_FORMATS:
            raise SpecError(f"{where}: unknown string format {fmt!r}")
        return {"scalar": STRING_FORMATS[fmt]}
    if type_ == "integer":
        return {"scalar": "integer"}
    if type_ == "number":
        return {"scalar": "number"}
    if type_ == "boolean":
        return {"scalar": "boolean"}
    raise SpecError(f"{where}: unknown type {type_!r}")


class Generator:
    def __init__(self, spec):
        self.defs = spec["definitions"]
        self.spec = spec
        self.types = {}
        self.pending = []

    def ref_shape(self, ref, where):
        if not ref.startswith(REF_PREFIX):
            raise SpecError(f"{where}: unsupported $ref {ref!r}")
        name = ref[len(REF_PREFIX):]
        d = self.defs.get(name)
        if d is None:
            raise SpecError(f"{where}: dangling $ref {ref!r}")
        if "properties" not in d:
            if name in UNTYPED:
                return "untyped"
            if name == QUANTITY:
                return {"scalar": "quantity"}
            if d.get("type") == "string":
                return scalar("string", d.get("format"), name)
            if d.get("type") != "object":
                raise SpecError(f"{name}: a definition without properties of type {d.get('type')!r}")
            # An empty struct (no fields at all): a type with no fields.
        if name not in self.types and name not in self.pending:
            self.pending.append(name)
        return {"object": name}

    def shape(self, prop, where):
        if "$ref" in prop:
            return self.ref_shape(prop["$ref"], where)
        type_ = prop.get("type")
        if type_ == "array":
            if "items" not in prop:
                raise SpecError(f"{where}: an array without items")
            return {"list": self.shape(prop["items"], where + "[]")}
        if type_ == "object":
            if "properties" in prop:
                raise SpecError(f"{where}: an inline object with properties")
            if "additionalProperties" in prop:
                return {"map": self.shape(prop["additionalProperties"], where + "{}")}
            return "untyped"
        if type_ is None:
            raise SpecError(f"{where}: a property without type or $ref")
        return scalar(type_, prop.get("format"), where)

    def field(self, prop, where):
        unknown = set(prop) - FIELD_KEYS - IGNORED_KEYS
        if unknown:
            raise SpecError(f"{where}: unknown keys {sorted(unknown)}")
        out = {"shape": self.shape(prop, where)}
        strategy = prop.get("x-kubernetes-patch-strategy")
        if strategy is not None:
            parts = strategy.split(",")
            if not parts or set(parts) - PATCH_STRATEGIES:
                raise SpecError(f"{where}: unknown patch strategy {strategy!r}")
            out["patchStrategy"] = parts
        for key, name in [
            ("x-kubernetes-patch-merge-key", "mergeKey"),
            ("x-kubernetes-list-type", "listType"),
            ("x-kubernetes-list-map-keys", "listMapKeys"),
            ("x-kubernetes-map-type", "mapType"),
        ]:
            if key in prop:
                out[name] = prop[key]
        if out.get("listType") not in (None, "atomic", "set", "map"):
            raise SpecError(f"{where}: unknown list type {out['listType']!r}")
        if out.get("mapType") not in (None, "atomic", "granular"):
            raise SpecError(f"{where}: unknown map type {out['mapType']!r}")
        return out

    def type_def(self, name):
        d = self.defs[name]
        out = {
            "fields": {
                p: self.field(v, f"{name}.{p}") for p, v in d.get("properties", {}).items()
            }
        }
        if d.get("required"):
            out["required"] = sorted(d["required"])
        if "x-kubernetes-map-type" in d:
            out["mapType"] = d["x-kubernetes-map-type"]
        return out

    def kinds(self):
        """GVKs with a PATCH operation, mapped to their root definition."""
        roots = {}
        for name, d in self.defs.items():
            for gvk in d.get("x-kubernetes-group-version-kind", []):
                roots.setdefault((gvk["group"], gvk["version"], gvk["kind"]), []).append(name)
        kinds = {}
        for path, ops in self.spec["paths"].items():
            for method, op in ops.items():
                if not isinstance(op, dict) or op.get("x-kubernetes-action") != "patch":
                    continue
                gvk = op.get("x-kubernetes-group-version-kind")
                if gvk is None:
                    raise SpecError(f"{path} {method}: a patch without a kind")
                key = (gvk["group"], gvk["version"], gvk["kind"])
                names = roots.get(key, [])
                if len(names) != 1:
                    raise SpecError(f"{path}: kind {key} has definitions {names}")
                api_version = f"{key[0]}/{key[1]}" if key[0] else key[1]
                kinds[f"{api_version}/{key[2]}"] = names[0]
        return kinds

    def resources(self):
        """Every resource path: kind, scope, verbs and subresources."""
        out = {}

        def entry(api_version, plural):
            return out.setdefault(
                f"{api_version}/{plural}",
                {"kind": None, "namespaced": False, "verbs": set(), "subresources": {}},
            )

        for path, ops in self.spec["paths"].items():
            m = re.match(r"^/api/(v1)/(.*)$", path) or re.match(r"^/apis/([^/]+/[^/]+)/(.*)$", path)
            if m is None:
                continue
            api_version, rest = m.group(1), m.group(2).split("/")
            if rest[:1] == ["watch"]:
                rest = rest[1:]
            namespaced = rest[:2] == ["namespaces", "{namespace}"] and len(rest) > 2
            if namespaced:
                rest = rest[2:]
            if not rest or rest == [""] or "{path}" in rest:
                continue  # the group version's root, or a proxy's tail
            if len(rest) > 3 or (len(rest) > 1 and rest[1] != "{name}"):
                raise SpecError(f"{path}: a resource path this script does not understand")
            plural, sub = rest[0], rest[2] if len(rest) == 3 else None
            verbs = set()
            gvks = set()
            for method, op in ops.items():
                if method == "parameters":
                    continue
                if method not in HTTP_METHODS:
                    raise SpecError(f"{path}: unknown method {method!r}")
                action = op.get("x-kubernetes-action")
                if action == "connect":
                    verb = CONNECT_VERBS.get(method)
                else:
                    verb = ACTION_VERBS.get(action)
                    if verb is None:
                        raise SpecError(f"{path} {method}: unknown action {action!r}")
                if verb is not None:
                    verbs.add(verb)
                gvk = op.get("x-kubernetes-group-version-kind")
                if gvk is not None:
                    gvks.add((gvk["group"], gvk["version"], gvk["kind"]))
            if len(gvks) > 1:
                raise SpecError(f"{path}: operations of several kinds {sorted(gvks)}")
            e = entry(api_version, plural)
            e["namespaced"] = e["namespaced"] or namespaced
            if sub is None:
                e["verbs"] |= verbs
                for g, v, k in gvks:
                    if e["kind"] not in (None, k):
                        raise SpecError(f"{path}: kind {k} after {e['kind']}")
                    e["kind"] = k
            else:
                s = e["subresources"].setdefault(sub, {"verbs": set()})
                s["verbs"] |= verbs
                for g, v, k in gvks:
                    s.update({"group": g, "version": v, "kind": k})
        for key, e in list(out.items()):
            if e["kind"] is None:
                # Paths without a kind of their own (`/api/v1/namespaces/
                # {namespace}/bindings` has one; a bare watch path has not):
                # a resource needs one to be served.
                raise SpecError(f"{key}: a resource without a kind")
            e["verbs"] = sorted(e["verbs"])
            for name, sub in e["subresources"].items():
                if "kind" not in sub:
                    raise SpecError(f"{key}/{name}: a subresource without a kind")
                sub["verbs"] = sorted(sub["verbs"])
        return out

    def run(self):
        kinds = self.kinds()
        for root in sorted(set(kinds.values())):
            self.ref_shape(REF_PREFIX + root, root)
        while self.pending:
            name = self.pending.pop()
            self.types[name] = self.type_def(name)
        return {"kinds": kinds, "resources": self.resources(), "types": self.types}


def render(table):
    """One JSON document, keys sorted, one kind and one type per line."""

    def dump(v):
        return json.dumps(v, sort_keys=True, separators=(",", ":"))

    lines = ["{", '"kinds":{']
    kinds = sorted(table["kinds"].items())
    for i, (k, v) in enumerate(kinds):
        lines.append(f"{dump(k)}:{dump(v)}" + ("," if i + 1 < len(kinds) else ""))
    lines.append("},")
    lines.append('"resources":{')
    resources = sorted(table["resources"].items())
    for i, (k, v) in enumerate(resources):
        lines.append(f"{dump(k)}:{dump(v)}" + ("," if i + 1 < len(resources) else ""))
    lines.append("},")
    lines.append('"types":{')
    types = sorted(table["types"].items())
    for i, (k, v) in enumerate(types):
        lines.append(f"{dump(k)}:{dump(v)}" + ("," if i + 1 < len(types) else ""))
    lines.append("}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("spec", help="the upstream OpenAPI v2 specification (swagger.json)")
    ap.add_argument("--out", default="server/src/kube/types/builtin.json")
    ap.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    args = ap.parse_args()
    with open(args.spec, encoding="utf-8") as f:
        spec = json.load(f)
    try:
        text = render(Generator(spec).run())
    except SpecError as e:
        sys.exit(f"gen-kube-types: {e}")
    if args.check:
        try:
            with open(args.out, encoding="utf-8") as f:
                same = f.read() == text
        except FileNotFoundError:
            same = False
        if not same:
            sys.exit(f"gen-kube-types: {args.out} is not what the specification gives; rerun without --check")
        return
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(text)


if __name__ == "__main__":
    main()
