//! Helpers shared by the integration tests of the `cubby` crate: the
//! processes alive by marker, a resolver hook pinning test names, a
//! loopback HTTP server ([`http`]), the search backends' fakes
//! ([`search`]) and a far cubby for the `remote` provider ([`remote`]). Each test binary includes this module (`mod common;`, or
//! `#[path = "../common/mod.rs"] mod common;` from a test directory).

#![allow(dead_code)]

pub mod http;
pub mod remote;
pub mod search;

/// Other agents' and editors' project configs that start programs (MCP
/// servers, hooks, tasks, plugins), which the host's tools read when the
/// user opens the project (red-team finding N13): one name inside each
/// protected directory or the protected file itself, as `policy::DEFAULT_PROTECTED`
/// lists them.
pub const AGENT_CONFIGS: &[&str] = &[
    ".gemini/settings.json",
    ".gemini/commands/deploy.toml",
    ".cursor/mcp.json",
    ".cursor/environment.json",
    ".vscode/mcp.json",
    ".vscode/tasks.json",
    "opencode.json",
    "opencode.jsonc",
    ".opencode/plugin/x.js",
    ".kiro/settings/mcp.json",
    ".kiro/hooks/on-save.kiro.hook",
    ".kiro/agents/a.json",
    ".roo/mcp.json",
    ".amazonq/mcp.json",
    ".continue/mcpServers/s.yaml",
    ".windsurf/hooks.json",
    ".zed/settings.json",
    ".qwen/settings.json",
    ".aider.conf.yml",
    "crush.json",
    ".crush.json",
    ".clinerules/hooks/pre.sh",
    ".junie/mcp/mcp.json",
    // Red-team pass 5, F3: Factory, Kilo, OpenHands, Helix, Amp.
    ".factory/settings.json",
    ".factory/mcp.json",
    ".kilocode/mcp.json",
    ".kilo/kilo.jsonc",
    "kilo.json",
    "kilo.jsonc",
    ".openhands/setup.sh",
    ".helix/languages.toml",
    ".amp/settings.json",
    "rust-toolchain.toml",
    "rust-toolchain",
    ".cargo/config.toml",
    ".cargo/config",
    ".yarnrc",
    ".yarnrc.yml",
    ".mvn/jvm.config",
    ".jvmopts",
    ".sbtopts",
    ".bazeliskrc",
    "global.json",
];

/// Toolchain and tool configs their tools obey in every directory below the
/// root too (red-team pass 4, R4-3), as `policy::PROTECTED_AT_ANY_DEPTH`
/// lists them, each placed one crate down.
pub const NESTED_TOOL_CONFIGS: &[&str] = &[
    "crates/foo/rust-toolchain.toml",
    "crates/foo/rust-toolchain",
    "crates/foo/.cargo/config.toml",
    "crates/foo/.cargo/config",
    "web/.yarnrc",
    "web/.yarnrc.yml",
    "svc/.mvn/jvm.config",
    "svc/.jvmopts",
    "svc/.sbtopts",
    "a/b/.bazeliskrc",
    "src/App/global.json",
    "sub/.amp/settings.json",
];

/// Processes (`pid: command line`) whose command line contains `marker`.
/// Zombies have an empty command line, so anything found here is alive.
pub fn processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name().into_string().unwrap_or_default();
        if !name.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if text.contains(marker) {
            found.push(format!("{name}: {text}"));
        }
    }
    found
}

/// The first process whose command line holds `marker`, once one does
/// (within 30 s).
pub fn appeared(marker: &str) -> Option<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if let Some(first) = processes_with(marker).into_iter().next() {
            return Some(first);
        }
        if std::time::Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A resolver hook that pins test names to addresses (and records each
/// lookup); any other name does not resolve.
pub struct Pinned {
    pub names: std::collections::HashMap<&'static str, Vec<std::net::IpAddr>>,
    pub lookups: std::sync::Mutex<Vec<String>>,
}

impl Pinned {
    pub fn new(names: std::collections::HashMap<&'static str, Vec<std::net::IpAddr>>) -> Pinned {
        Pinned {
            names,
            lookups: std::sync::Mutex::new(Vec::new()),
        }
    }
}

impl cubby::web::Resolver for Pinned {
    fn resolve(&self, host: &str) -> std::io::Result<Vec<std::net::IpAddr>> {
        self.lookups.lock().unwrap().push(host.to_string());
        self.names
            .get(host.trim_end_matches('.'))
            .cloned()
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no such host"))
    }
}
