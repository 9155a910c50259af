#!/usr/bin/env python3
"""Generates the protobuf schema of every built-in Kubernetes kind.

kubestore answers and accepts `application/vnd.kubernetes.protobuf` for
the built-in kinds (`server/src/http/protobuf/`), transcoding between that
wire form and the JSON it stores. It needs every message's field numbers,
wire types and JSON names. They come from the `k8s-pb` crate (kube-rs's
prost bindings generated from Kubernetes' own `generated.proto` files; a
dev-dependency of `tests/`, so cargo has its source) and from kubestore's
OpenAPI data (`server/src/http/openapi/definitions.json`, for the JSON
names protobuf spells differently, such as `$ref` and
`x-kubernetes-preserve-unknown-fields`).

It writes one `.proto` file per Kubernetes protobuf package into
`proto/proto/kube/`. The `proto` crate compiles them (protox, at build
time) into a descriptor set the server loads; no Rust code is generated
for them. Rerun it when moving to another `k8s-pb`, from the repository
root (Python 3, standard library, and cargo to find the crate):

    scripts/gen-protobuf.py

`--k8s-pb DIR` reads a `k8s-pb` source tree instead of cargo's copy,
`--check` exits 1 if the committed files differ from what it would write.
The output is reproducible.
"""

import argparse
import json
import os
import re
import subprocess
from collections import Counter
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "proto", "proto", "kube")
DEFINITIONS = os.path.join(ROOT, "server", "src", "http", "openapi", "definitions.json")

# Packages of k8s-pb that are not part of the API any server serves.
SKIPPED_PACKAGES = ("apimachinery.pkg.apis.testapigroup",)

ANY_PROPERTY = {}
# The json_name of a field whose message's fields kube's JSON carries in
# the parent's object (Go's `json:",inline"`).
INLINE = ",inline"
# Every parsed message's fields, by lower-cased full name.
MESSAGES = {}
ATTR = re.compile(r"#\[prost\((?P<args>.*)\)\]")
FIELD = re.compile(r"pub (?P<name>(r#)?[a-z0-9_]+): (?P<ty>.+),$")
SCALARS = {"string", "bool", "int32", "int64", "double", "float", "uint32", "uint64"}


def locate_k8s_pb():
    meta = json.loads(
        subprocess.check_output(
            ["cargo", "metadata", "--format-version", "1"], cwd=ROOT, text=True
        )
    )
    for pkg in meta["packages"]:
        if pkg["name"] == "k8s-pb":
            return os.path.dirname(pkg["manifest_path"]), pkg["version"]
    sys.exit("k8s-pb is not in the workspace's dependency graph (tests/Cargo.toml)")


def norm(name):
    """A name with case and punctuation dropped: the key JSON and Rust
    spellings of one field share."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def camel(rust_name):
    """The protobuf field name of a prost field (`pod_i_ps` -> `podIPs`)."""
    parts = rust_name.removeprefix("r#").split("_")
    return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])


def resolve(module, path):
    """The full protobuf name of a Rust type path seen from `module`."""
    parts = path.split("::")
    here = list(module)
    while parts and parts[0] == "super":
        parts.pop(0)
        here.pop()
    if parts[0] == "crate":
        parts.pop(0)
        here = []
    return ".k8s.io." + ".".join(here + parts)


def unwrap(ty):
    """(container, inner) of a prost field's Rust type."""
    for prefix, container in (
        ("::core::option::Option<", "optional"),
        ("::prost::alloc::vec::Vec<", "repeated"),
        ("::prost::alloc::collections::BTreeMap<", "map"),
        ("::prost::alloc::boxed::Box<", "boxed"),
    ):
        if ty.startswith(prefix) and ty.endswith(">"):
            return container, ty[len(prefix) : -1]
    return None, ty


def message_type(module, ty):
    """The protobuf type of a message-typed field's Rust type."""
    while True:
        container, inner = unwrap(ty)
        if container is None:
            return resolve(module, ty)
        if container == "map":
            ty = inner.split(",", 1)[1].strip()
        else:
            ty = inner


def parse_module(path, module):
    """The messages of one prost module: [(name, [field])]."""
    messages = []
    current = None
    attr = None
    attributes = 0
    for line in logical_lines(path):
        if True:
            m = re.match(r"pub struct (\w+) \{\}$", line)
            if m:
                messages.append((m.group(1), []))
                continue
            m = re.match(r"pub struct (\w+) \{$", line)
            if m:
                current = (m.group(1), [])
                messages.append(current)
                continue
            if current is None:
                continue
            if line == "}":
                current = None
                continue
            m = ATTR.match(line)
            if m:
                attr = m.group("args")
                attributes += 1
                continue
            m = FIELD.match(line)
            if m and attr is not None:
                current[1].append(field(module, attr, m.group("name"), m.group("ty")))
                attr = None
    parsed = sum(len(fields) for _, fields in messages)
    if parsed != attributes:
        sys.exit(f"{path}: {attributes} prost fields but {parsed} parsed")
    return messages


def logical_lines(path):
    """The file's lines, stripped, with a declaration rustfmt broke over
    several lines (`pub labels: BTreeMap<\n String,\n String,\n >,`,
    `#[prost(\n ...\n )]`) joined into one."""
    pending = ""
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = raw.strip()
            if line.startswith("//"):
                continue
            pending += (" " if pending.endswith(":") else "") + line
            depth = sum(pending.count(c) for c in "<([") - sum(pending.count(c) for c in ">)]")
            # `->` is not a closing bracket.
            depth += pending.count("->")
            if depth > 0 or pending.endswith(":"):
                continue
            yield re.sub(r",\s*([>)])", r"\1", pending)
            pending = ""


def field(module, attr, rust_name, ty):
    args = [a.strip() for a in re.findall(r'(?:[^,"]|"[^"]*")+', attr)]
    tag = int(next(a for a in args if a.startswith("tag")).split('"')[1])
    kind = args[0]
    label = "repeated" if "repeated" in args else "optional"
    if kind.startswith(("btree_map", "map")):
        key, value = [t.strip() for t in kind.split('"')[1].split(",")]
        value = message_type(module, ty) if value == "message" else value
        return {"name": rust_name, "tag": tag, "type": f"map<{key}, {value}>", "label": None}
    if kind.startswith("bytes"):
        kind = "bytes"
    elif kind == "message":
        kind = message_type(module, ty)
    elif kind not in SCALARS:
        sys.exit(f"{module}: unexpected prost field kind {kind!r}")
    return {"name": rust_name, "tag": tag, "type": kind, "label": label}


def openapi_name(package, message):
    """kube's OpenAPI definition name of a protobuf message."""
    parts = package.split(".")[2:]  # drop "k8s", "io"
    parts = [p.replace("_", "-") for p in parts]
    return "io.k8s." + ".".join(parts + [message])


def kube_spelling(proto_type, definitions):
    """A `.k8s.io.<package>.<Message>` reference in kube's spelling."""
    package, message = proto_type[1:].rsplit(".", 1)
    definition = definitions.get(norm(openapi_name(package, message)))
    if definition is not None:
        message = definition[0].rsplit(".", 1)[1]
    return f".{package}.{message}"


def is_inlined(proto_type, props):
    """Whether a message-typed field is one Go embeds with `json:",inline"`:
    the parent's JSON has no property of the field's name but has one for
    (nearly: the data may be a version older than k8s-pb) every field of
    the field's type, itself perhaps inlined (`Volume.volumeSource`,
    `Probe.handler`, `NamedRuleWithOperations.ruleWithOperations.rule`)."""
    inner = MESSAGES.get(proto_type.lstrip(".").lower())
    if not inner:
        return False
    names = {norm(p) for p in props}
    found = sum(
        1 for f in inner if norm(camel(f["name"])) in names or is_inlined(f["type"], props)
    )
    return found >= max(1, len(inner) * 4 // 5)


def render(package, messages, definitions, k8s_pb_version):
    """One package's `.proto` text. Messages and fields take kube's
    spelling where the OpenAPI data has it (prost changed `CSIDriver` to
    `CsiDriver` and `volumeID` to `volume_id`)."""
    imports = set()
    body = []
    for name, fields in messages:
        definition = definitions.get(norm(openapi_name(package, name)))
        if definition is not None:
            name = definition[0].rsplit(".", 1)[1]
        props = definition[1].get("properties", {}) if definition else {}
        by_norm = {norm(p): p for p in props}
        body.append(f"message {name} {{")
        for f in sorted(fields, key=lambda f: f["tag"]):
            proto_name = camel(f["name"])
            json_name = by_norm.get(norm(proto_name))
            if json_name is None and props and is_inlined(f["type"], props):
                json_name = INLINE
            if json_name is None:
                json_name = ANY_PROPERTY.get(norm(proto_name), proto_name)
            f["type"] = re.sub(
                r"\.k8s\.io\.[\w.]+", lambda m: kube_spelling(m.group(0), definitions), f["type"]
            )
            for t in re.findall(r"\.k8s\.io\.[\w.]+", f["type"]):
                dep = t[1:].rsplit(".", 1)[0]
                if dep != package:
                    imports.add(dep)
            option = f' [json_name = "{json_name}"]' if json_name != proto_name else ""
            label = f"{f['label']} " if f["label"] else ""
            body.append(f"  {label}{f['type']} {proto_name} = {f['tag']}{option};")
        body.append("}")
        body.append("")
    head = [
        f"// Generated by scripts/gen-protobuf.py from k8s-pb {k8s_pb_version} (Kubernetes' own",
        "// generated.proto files, Apache-2.0) and kubestore's OpenAPI data. Do not edit.",
        "// Field numbers and types are kube's; json_name is the field's name in kube's JSON",
        '// (",inline": the field\'s own fields are in the parent\'s JSON object, as Go\'s',
        '// `json:",inline"` embeds them).',
        'syntax = "proto2";',
        "",
        f"package {package};",
        "",
    ]
    head += [f'import "kube/{dep}.proto";' for dep in sorted(imports)]
    if imports:
        head.append("")
    return "\n".join(head + body)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--k8s-pb", help="a k8s-pb source tree (default: cargo's copy)")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    if args.k8s_pb:
        src, version = args.k8s_pb, "(local)"
    else:
        src, version = locate_k8s_pb()
    with open(DEFINITIONS, encoding="utf-8") as f:
        definitions = {norm(k): (k, v) for k, v in json.load(f)["definitions"].items()}
    # A field of a message the data has no definition for (an older
    # version) is spelled as most definitions spell it.
    spellings = Counter(
        p for _, definition in definitions.values() for p in definition.get("properties", {})
    )
    for p, _ in sorted(spellings.items(), key=lambda s: (s[1], s[0])):
        ANY_PROPERTY[norm(p)] = p
    files = {}
    parsed = {}
    src_root = os.path.join(src, "src")
    for dirpath, _, filenames in sorted(os.walk(src_root)):
        if "mod.rs" not in filenames:
            continue
        module = os.path.relpath(dirpath, src_root).split(os.sep)
        package = "k8s.io." + ".".join(module)
        if module == ["."] or any(s in package for s in SKIPPED_PACKAGES):
            continue
        messages = parse_module(os.path.join(dirpath, "mod.rs"), module)
        for name, fields in messages:
            MESSAGES[f"{package}.{name}".lower()] = fields
        if messages:
            parsed[package] = messages
    for package, messages in parsed.items():
        files[f"{package}.proto"] = render(package, messages, definitions, version)
    if args.check:
        stale = [
            name
            for name, text in files.items()
            if not os.path.exists(os.path.join(OUT, name))
            or open(os.path.join(OUT, name), encoding="utf-8").read() != text
        ]
        extra = set(os.listdir(OUT)) - set(files) if os.path.isdir(OUT) else set()
        if stale or extra:
            print("stale:", *sorted(stale), *sorted(extra), file=sys.stderr)
            sys.exit(1)
        return
    os.makedirs(OUT, exist_ok=True)
    for name in os.listdir(OUT):
        if name not in files:
            os.remove(os.path.join(OUT, name))
    for name, text in files.items():
        with open(os.path.join(OUT, name), "w", encoding="utf-8") as f:
            f.write(text)
    print(f"wrote {len(files)} files to {os.path.relpath(OUT, ROOT)}")


if __name__ == "__main__":
    main()
