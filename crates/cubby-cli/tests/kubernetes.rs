//! The Kubernetes manifests (deploy/kubernetes): rendered by `kubectl
//! kustomize` (kustomize v4 or later), then checked by
//! deploy/kubernetes/check.py (jsonschema and PyYAML from PyPI, in a venv
//! under target/) against the vendored agent-sandbox v0.5.6 CRDs' schemas
//! and cubby's rules for its pods. The checker is attacked too: manifests
//! with an unknown field, a wrong type, a value outside an enum, a
//! privilege let back in or a dangling reference must be refused.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Command;

/// The checker's Python packages, pinned.
const JSONSCHEMA: &str = "jsonschema==4.26.0";
const PYYAML: &str = "pyyaml==6.0.3";
/// The vendored CRDs (their README says where they come from).
const CRDS: &str = "deploy/kubernetes/vendor/agent-sandbox-v0.5.6";

/// `kubectl kustomize DIR`: the rendered manifests.
fn kustomize(dir: &Path) -> String {
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(dir)
        .output()
        .unwrap_or_else(|e| {
            panic!("kubectl (1.21 or later, for kustomize v4+) is needed to render deploy/kubernetes: {e}")
        });
    assert!(
        out.status.success(),
        "kubectl kustomize {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs check.py on `manifests`: (passed, what it printed).
fn check(manifests: &str) -> (bool, String) {
    let python = common::python_venv("k8s-check-venv", &[JSONSCHEMA, PYYAML]);
    let repo = common::repo_root();
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), manifests).unwrap();
    let out = Command::new(python)
        .arg(repo.join("deploy/kubernetes/check.py"))
        .arg(repo.join(CRDS))
        .arg(file.path())
        .output()
        .unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), printed)
}

/// `manifests` with the first line that is `from` (after its indentation)
/// replaced by `to` lines, each at that indentation.
fn edit(manifests: &str, from: &str, to: &[&str]) -> String {
    let mut done = false;
    let mut out = String::new();
    for line in manifests.lines() {
        let indent = &line[..line.len() - line.trim_start().len()];
        if !done && line.trim_start() == from {
            for new in to {
                out.push_str(&format!("{indent}{new}\n"));
            }
            done = true;
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    assert!(done, "no line `{from}` in the manifests");
    out
}

#[test]
fn the_manifests_validate_against_the_agent_sandbox_crds() {
    let repo = common::repo_root();
    for dir in ["deploy/kubernetes", "deploy/kubernetes/overlays/gvisor"] {
        let rendered = kustomize(&repo.join(dir));
        let (passed, printed) = check(&rendered);
        assert!(passed, "{dir}:\n{printed}");
        assert!(printed.contains("0 problems"), "{dir}: {printed}");
        for kind in [
            "kind: SandboxTemplate",
            "kind: SandboxWarmPool",
            "kind: Role",
            "kind: RoleBinding",
            "kind: ServiceAccount",
        ] {
            assert!(rendered.contains(kind), "{dir}: no {kind}");
        }
    }
    // The gVisor overlay: the runtime class, and cubby's `local` provider
    // (gVisor has no Landlock); the base keeps the `linux` provider.
    let gvisor = kustomize(&repo.join("deploy/kubernetes/overlays/gvisor"));
    assert!(gvisor.contains("runtimeClassName: gvisor"), "{gvisor}");
    assert!(gvisor.contains("provider = \"local\""), "{gvisor}");
    let base = kustomize(&repo.join("deploy/kubernetes"));
    assert!(!base.contains("runtimeClassName"), "{base}");
    assert!(base.contains("provider = \"linux\""), "{base}");
    // The example claim claims from the pool the manifests make.
    let claim =
        std::fs::read_to_string(repo.join("deploy/kubernetes/examples/claim.yaml")).unwrap();
    let (passed, printed) = check(&format!("{base}---\n{claim}"));
    assert!(passed, "{printed}");
    let (passed, printed) = check(&format!(
        "{base}---\n{}",
        claim.replace("name: cubby\n", "name: kubby\n")
    ));
    assert!(!passed, "{printed}");
    assert!(
        printed.contains("names no SandboxWarmPool `kubby`"),
        "{printed}"
    );
}

/// The configuration kustomize is taught (base/kustomizeconfig.yaml): the
/// image a user sets reaches the template's container, and the config's
/// ConfigMap, whose name carries its content's hash, is the one the
/// template mounts.
#[test]
fn the_image_and_config_names_reach_the_template() {
    let repo = common::repo_root();
    // kustomize takes a base by a relative path only: a user's overlay
    // beside the repository's, two levels down.
    let target = repo.join("target");
    std::fs::create_dir_all(&target).unwrap();
    let dir = tempfile::Builder::new()
        .prefix("k8s-overlay.")
        .tempdir_in(&target)
        .unwrap();
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        "resources:\n- ../../deploy/kubernetes/base\nimages:\n- name: cubby\n  newName: registry.example/team/cubby\n  newTag: v9\n",
    )
    .unwrap();
    let rendered = kustomize(dir.path());
    assert!(
        rendered.contains("image: registry.example/team/cubby:v9"),
        "{rendered}"
    );
    let config_name = rendered
        .lines()
        .find_map(|l| l.trim().strip_prefix("name: cubby-config-"))
        .expect("a hashed ConfigMap name");
    assert_eq!(
        rendered
            .matches(&format!("name: cubby-config-{config_name}"))
            .count(),
        2,
        "the ConfigMap and the template's volume: {rendered}"
    );
    let (passed, printed) = check(&rendered);
    assert!(passed, "{printed}");
}

#[test]
fn the_check_refuses_what_the_crds_or_cubbys_rules_refuse() {
    let repo = common::repo_root();
    let good = kustomize(&repo.join("deploy/kubernetes"));
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "an unknown field in the pod's container",
            edit(
                &good,
                "allowPrivilegeEscalation: false",
                &[
                    "allowPrivilegeEscalation: false",
                    "allowPrivilegeEscalaton: true",
                ],
            ),
            "'allowPrivilegeEscalaton' was unexpected",
        ),
        (
            "an unknown field in the template's spec",
            edit(
                &good,
                "envVarsInjectionPolicy: Disallowed",
                &["envVarsInjectionPolicy: Disallowed", "warmPool: cubby"],
            ),
            "'warmPool' was unexpected",
        ),
        (
            "a string where the pool wants a number",
            edit(&good, "replicas: 2", &["replicas: two"]),
            "'two' is not of type 'integer'",
        ),
        (
            "a value outside the enum",
            edit(
                &good,
                "networkPolicyManagement: Managed",
                &["networkPolicyManagement: Manual"],
            ),
            "'Manual' is not one of",
        ),
        (
            "privilege escalation let back in",
            edit(
                &good,
                "allowPrivilegeEscalation: false",
                &["allowPrivilegeEscalation: true"],
            ),
            "allowPrivilegeEscalation must be false",
        ),
        (
            "a writable root file system",
            edit(
                &good,
                "readOnlyRootFilesystem: true",
                &["readOnlyRootFilesystem: false"],
            ),
            "readOnlyRootFilesystem must be true",
        ),
        (
            "the service account token mounted",
            edit(
                &good,
                "automountServiceAccountToken: false",
                &["automountServiceAccountToken: true"],
            ),
            "automountServiceAccountToken must be false",
        ),
        (
            "root",
            edit(&good, "runAsNonRoot: true", &["runAsNonRoot: false"]),
            "runAsNonRoot must be true",
        ),
        (
            "a probe on another path",
            edit(&good, "path: /healthz", &["path: /mcp"]),
            "must be an httpGet of /healthz",
        ),
        (
            "a pool of a template that is not there",
            {
                let from = "  sandboxTemplateRef:\n    name: cubby\n";
                assert!(good.contains(from), "{good}");
                good.replace(from, "  sandboxTemplateRef:\n    name: kubby\n")
            },
            "names no SandboxTemplate `kubby`",
        ),
        (
            "a kind without a schema",
            format!(
                "{good}---\napiVersion: agents.x-k8s.io/v1\nkind: Sandbox\nmetadata:\n  name: s\n"
            ),
            "no schema for agents.x-k8s.io/v1 Sandbox",
        ),
    ];
    for (what, manifests, expected) in cases {
        let (passed, printed) = check(&manifests);
        assert!(!passed, "{what}: accepted\n{printed}");
        assert!(printed.contains(expected), "{what}: {printed}");
    }
}
