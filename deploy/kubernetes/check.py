#!/usr/bin/env python3
"""Checks rendered manifests (`kubectl kustomize deploy/kubernetes`) against
the vendored agent-sandbox CRDs, and cubby's own rules for its sandbox pods.

    python3 check.py CRD_DIR MANIFESTS.yaml

Needs jsonschema and PyYAML (pip). Prints one line per problem and exits 1
when there is any; prints "N documents checked, 0 problems" otherwise.

What it checks:
- every custom resource against the openAPIV3Schema of its CRD version,
  closed the way `kubectl apply` (strict field validation) closes it: an
  unknown field is an error, except where the schema preserves unknown
  fields;
- every document is of a kind this script knows (the CRDs' kinds and the
  built-in kinds the manifests use), with a name;
- references resolve: a warm pool's template, a claim's warm pool, a
  template's ConfigMaps, a RoleBinding's Role and ServiceAccount; Secrets are the one exception
  (the pool key is made by each installation, README "On Kubernetes");
- the rules for a pod that runs `cubby serve`: no service account token,
  non-root, no privilege escalation, read-only root file system with every
  writable mount an emptyDir, all capabilities dropped, HTTP probes on
  /healthz, requests and limits set.
"""

import copy
import pathlib
import re
import sys

import jsonschema
import yaml

# libyaml's parser when PyYAML has it: the CRDs are 800 KB of YAML.
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# Built-in kinds the manifests may use, and the fields each may carry at the
# top level (a typo there would be dropped by a lenient apply).
BUILTIN = {
    ("v1", "Namespace"): {"apiVersion", "kind", "metadata", "spec"},
    ("v1", "ServiceAccount"): {
        "apiVersion",
        "kind",
        "metadata",
        "automountServiceAccountToken",
        "imagePullSecrets",
        "secrets",
    },
    ("v1", "ConfigMap"): {"apiVersion", "kind", "metadata", "data", "binaryData", "immutable"},
    ("rbac.authorization.k8s.io/v1", "Role"): {"apiVersion", "kind", "metadata", "rules"},
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): {
        "apiVersion",
        "kind",
        "metadata",
        "roleRef",
        "subjects",
    },
}

# ObjectMeta fields a manifest may set.
META_FIELDS = {"name", "generateName", "namespace", "labels", "annotations"}
# RFC 1123 subdomain: Kubernetes object names.
NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# The path the probes of cubby's pods must ask (crates/cubby-mcp/src/http.rs).
HEALTH_PATH = "/healthz"


def closed(schema):
    """The schema with every object that lists its properties closed to
    others (additionalProperties: false), unless it preserves unknown
    fields or already says what other properties may be."""
    schema = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, dict):
            if (
                "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return schema


def load_crds(directory):
    """(apiVersion, kind) -> closed JSON schema, for every served version."""
    schemas = {}
    files = sorted(pathlib.Path(directory).glob("*.yaml"))
    if not files:
        raise SystemExit(f"no CRD files in {directory}")
    for path in files:
        for doc in yaml.load_all(path.read_text(), Loader=LOADER):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            group = doc["spec"]["group"]
            kind = doc["spec"]["names"]["kind"]
            for version in doc["spec"]["versions"]:
                if not version.get("served", False):
                    continue
                schema = version["schema"]["openAPIV3Schema"]
                schemas[(f"{group}/{version['name']}", kind)] = closed(schema)
    return schemas


def where(error):
    return "/".join(str(p) for p in error.absolute_path) or "(top)"


def check_document(doc, crds, problems):
    api, kind = doc.get("apiVersion"), doc.get("kind")
    meta = doc.get("metadata") or {}
    name = meta.get("name", "")
    label = f"{kind}/{name or meta.get('generateName', '?')}"
    if "generateName" in meta and "name" not in meta:
        # A prefix: valid once the server appends its letters.
        if not NAME.match(meta["generateName"] + "x"):
            problems.append(f"{label}: metadata.generateName is not a valid prefix")
    elif not NAME.match(name or ""):
        problems.append(f"{label}: metadata.name `{name}` is not a valid name")
    for field in meta:
        if field not in META_FIELDS:
            problems.append(f"{label}: metadata.{field} is not a field a manifest sets")
    if (api, kind) in crds:
        validator = jsonschema.Draft7Validator(crds[(api, kind)])
        for error in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path)):
            problems.append(f"{label}: {where(error)}: {error.message}")
    elif (api, kind) in BUILTIN:
        for field in doc:
            if field not in BUILTIN[(api, kind)]:
                problems.append(f"{label}: unknown field `{field}` for {api} {kind}")
    else:
        problems.append(f"{label}: no schema for {api} {kind}")
    return label


def check_cubby_pod(label, pod, problems):
    """cubby's rules for the pod of a SandboxTemplate."""
    spec = pod.get("spec") or {}
    if spec.get("automountServiceAccountToken") is not False:
        problems.append(f"{label}: automountServiceAccountToken must be false")
    pod_security = spec.get("securityContext") or {}
    if pod_security.get("runAsNonRoot") is not True:
        problems.append(f"{label}: securityContext.runAsNonRoot must be true")
    if not isinstance(pod_security.get("runAsUser"), int) or pod_security["runAsUser"] == 0:
        problems.append(f"{label}: securityContext.runAsUser must be a non-zero uid")
    volumes = {v.get("name"): v for v in spec.get("volumes") or []}
    containers = spec.get("containers") or []
    if not containers:
        problems.append(f"{label}: no containers")
    for container in containers:
        cname = f"{label} container {container.get('name')}"
        security = container.get("securityContext") or {}
        if security.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{cname}: allowPrivilegeEscalation must be false")
        if security.get("readOnlyRootFilesystem") is not True:
            problems.append(f"{cname}: readOnlyRootFilesystem must be true")
        if security.get("runAsNonRoot") is False or security.get("runAsUser") == 0:
            problems.append(f"{cname}: runAsNonRoot must be true (or unset, as the pod's)")
        if security.get("privileged"):
            problems.append(f"{cname}: must not be privileged")
        if "ALL" not in ((security.get("capabilities") or {}).get("drop") or []):
            problems.append(f"{cname}: capabilities.drop must hold ALL")
        if (security.get("capabilities") or {}).get("add"):
            problems.append(f"{cname}: must add no capabilities")
        if "serve" not in (container.get("args") or []) + (container.get("command") or []):
            problems.append(f"{cname}: does not run `cubby serve`")
        for probe in ("readinessProbe", "livenessProbe"):
            path = ((container.get(probe) or {}).get("httpGet") or {}).get("path")
            if path != HEALTH_PATH:
                problems.append(f"{cname}: {probe} must be an httpGet of {HEALTH_PATH}")
        resources = container.get("resources") or {}
        for bound in ("requests", "limits"):
            for what in ("cpu", "memory"):
                if what not in (resources.get(bound) or {}):
                    problems.append(f"{cname}: resources.{bound}.{what} is not set")
        for mount in container.get("volumeMounts") or []:
            volume = volumes.get(mount.get("name"))
            if volume is None:
                problems.append(f"{cname}: mount {mount.get('name')} names no volume")
            elif "emptyDir" not in volume and not mount.get("readOnly"):
                problems.append(
                    f"{cname}: mount {mount.get('name')} is writable but not an emptyDir"
                )


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    crds = load_crds(sys.argv[1])
    docs = [d for d in yaml.load_all(pathlib.Path(sys.argv[2]).read_text(), Loader=LOADER) if d]
    problems = []
    names = set()
    for doc in docs:
        label = check_document(doc, crds, problems)
        meta = doc.get("metadata") or {}
        names.add((doc.get("kind"), meta.get("namespace"), meta.get("name")))
        if doc.get("kind") == "SandboxTemplate":
            check_cubby_pod(label, (doc.get("spec") or {}).get("podTemplate") or {}, problems)
    # References.
    for doc in docs:
        kind = doc.get("kind")
        meta = doc.get("metadata") or {}
        ns = meta.get("namespace")
        label = f"{kind}/{meta.get('name') or meta.get('generateName')}"
        spec = doc.get("spec") or {}
        if kind == "SandboxWarmPool":
            ref = (spec.get("sandboxTemplateRef") or {}).get("name")
            if ("SandboxTemplate", ns, ref) not in names:
                problems.append(f"{label}: sandboxTemplateRef names no SandboxTemplate `{ref}`")
        if kind == "SandboxClaim":
            ref = (spec.get("warmPoolRef") or {}).get("name")
            # A claim without a namespace is created in the pool's (`-n`).
            if not any(
                k == "SandboxWarmPool" and n == ref and (ns is None or ns == pns)
                for (k, pns, n) in names
            ):
                problems.append(f"{label}: warmPoolRef names no SandboxWarmPool `{ref}`")
        if kind == "SandboxTemplate":
            pod_spec = (spec.get("podTemplate") or {}).get("spec") or {}
            for volume in pod_spec.get("volumes") or []:
                if "configMap" in volume:
                    ref = volume["configMap"].get("name")
                    if ("ConfigMap", ns, ref) not in names:
                        problems.append(f"{label}: volume {volume.get('name')} names no ConfigMap `{ref}`")
        if kind == "RoleBinding":
            ref = (doc.get("roleRef") or {}).get("name")
            if ("Role", ns, ref) not in names:
                problems.append(f"{label}: roleRef names no Role `{ref}`")
            for subject in doc.get("subjects") or []:
                key = (subject.get("kind"), subject.get("namespace"), subject.get("name"))
                if key not in names:
                    problems.append(f"{label}: subject {key} is not in the manifests")
    if not any(d.get("kind") == "SandboxTemplate" for d in docs):
        problems.append("no SandboxTemplate in the manifests")
    for problem in problems:
        print(problem)
    print(f"{len(docs)} documents checked, {len(problems)} problems")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
