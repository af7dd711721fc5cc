//! What each provider needs of this machine, found before it is opened
//! (`cubby doctor`): facts to show, what is missing, how its commands run.

use super::{Capabilities, ProviderKind};

/// Where the running kernel's release is read.
const KERNEL_RELEASE: &str = "/proc/sys/kernel/osrelease";

/// What a provider finds on this machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    /// The provider probed.
    pub kind: ProviderKind,
    /// Facts about this machine, in order: (label, value).
    pub facts: Vec<(String, String)>,
    /// What the provider needs and this machine lacks; empty when it can
    /// start.
    pub missing: Vec<String>,
    /// How its commands run (completing "runs commands (provider, mode)
    /// …"); `None` for a provider without commands.
    pub commands: Option<String>,
    /// What to do instead when something is missing.
    pub instead: String,
}

impl Probe {
    /// True when the provider can start here.
    pub fn ready(&self) -> bool {
        self.missing.is_empty()
    }
}

/// Probes this machine for the provider `kind` (the `linux` provider forks
/// one short-lived child).
pub fn probe(kind: ProviderKind) -> Probe {
    match kind {
        ProviderKind::Linux => linux(),
        ProviderKind::Local => Probe {
            kind,
            facts: vec![kernel()],
            missing: Vec::new(),
            commands: Some(
                "as host processes with your user's rights (not an OS boundary); \
                 the file tools are confined to the workspace"
                    .to_string(),
            ),
            instead: String::new(),
        },
        ProviderKind::Virtual => Probe {
            kind,
            facts: Vec::new(),
            missing: Vec::new(),
            commands: None,
            instead: String::new(),
        },
        ProviderKind::Remote => Probe {
            kind,
            facts: Vec::new(),
            missing: Vec::new(),
            commands: Some(
                "on the far cubby named in [remote] (`cubby serve --host`), under its \
                 provider and policy; this machine needs nothing of its own"
                    .to_string(),
            ),
            instead: String::new(),
        },
        ProviderKind::Kubernetes => Probe {
            kind,
            facts: Vec::new(),
            missing: Vec::new(),
            commands: Some(
                "in a cubby pod claimed from the warm pool named in [kubernetes] \
                 (agent-sandbox), under that pod's provider and policy; this machine needs \
                 only a way to the API server and the pods"
                    .to_string(),
            ),
            instead: String::new(),
        },
    }
}

/// The running kernel's release.
fn kernel() -> (String, String) {
    let release = std::fs::read_to_string(KERNEL_RELEASE).unwrap_or_default();
    ("kernel".to_string(), release.trim().to_string())
}

/// The `linux` provider's probe: the kernel features it needs and the
/// bounds it can set.
fn linux() -> Probe {
    let caps = Capabilities::probe();
    let yes_no = |r: &Result<(), String>| match r {
        Ok(()) => "yes".to_string(),
        Err(e) => format!("no ({e})"),
    };
    let mut facts = vec![kernel()];
    let mut fact = |label: &str, value: String| facts.push((label.to_string(), value));
    fact(
        "landlock",
        match caps.landlock_abi {
            Some(v) => format!("yes, ABI {v}"),
            None => "no".to_string(),
        },
    );
    fact("user namespaces", yes_no(&caps.user_namespaces));
    fact("seccomp filters", yes_no(&caps.seccomp));
    fact(
        "pid_max per ns",
        if caps.namespaced_pid_max {
            "yes (the sandbox's pid namespace, where each command's nests, gets pid_max for \
             limits.sandbox.processes)"
                .to_string()
        } else {
            "no (kernel before 6.14)".to_string()
        },
    );
    fact(
        "pids cgroup",
        match &caps.pids_cgroup {
            Some(dir) => format!(
                "yes, {}{}",
                dir.display(),
                if caps.namespaced_pid_max {
                    " (not needed: pid_max is per namespace)"
                } else {
                    " (each sandbox gets pids.max)"
                }
            ),
            None => "no".to_string(),
        },
    );
    fact(
        "running as root",
        if !caps.root {
            "no (RLIMIT_NPROC also bounds processes)"
        } else if caps.namespaced_pid_max || caps.pids_cgroup.is_some() {
            "yes (RLIMIT_NPROC does not bind root; the above bounds a fork bomb)"
        } else {
            "yes (RLIMIT_NPROC does not bind root and nothing else bounds a fork bomb here)"
        }
        .to_string(),
    );
    Probe {
        kind: ProviderKind::Linux,
        facts,
        missing: caps.missing(),
        commands: Some(
            "in user, mount, pid, IPC, UTS and network namespaces, under Landlock, seccomp \
             and rlimits"
                .to_string(),
        ),
        instead: "`--provider local` runs commands without OS isolation.".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_provider_says_whether_it_runs_commands() {
        assert!(probe(ProviderKind::Virtual).commands.is_none());
        assert!(probe(ProviderKind::Virtual).ready());
        let local = probe(ProviderKind::Local);
        assert!(local.ready() && local.commands.is_some());
        assert_eq!(local.facts[0].0, "kernel");
        let remote = probe(ProviderKind::Remote);
        assert!(remote.ready() && remote.commands.is_some());
        let linux = probe(ProviderKind::Linux);
        let labels: Vec<&str> = linux.facts.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(
            labels,
            [
                "kernel",
                "landlock",
                "user namespaces",
                "seccomp filters",
                "pid_max per ns",
                "pids cgroup",
                "running as root"
            ]
        );
        assert_eq!(linux.missing, Capabilities::probe().missing());
    }
}
