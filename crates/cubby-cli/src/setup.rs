//! From flags and config file to a [`Toolset`]: flags win over the file.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use cubby::sandbox::CommandEnv;
use cubby::{
    Config, LinuxOptions, LinuxSandbox, Mode, NetworkMode, Policy, ProviderKind, Sandbox, Toolset,
    web::Injection,
};

use crate::Common;

/// Logs to stderr, filtered by `RUST_LOG` (default `warn`).
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// Resolves the root, loads the config and builds the toolset.
pub fn toolset(common: &Common, track_changes: bool) -> anyhow::Result<Toolset> {
    let factory = factory(common, track_changes)?;
    factory().map_err(|e| anyhow::anyhow!("{}", e.message()))
}

/// Root, config and policy resolved from flags and the config file.
pub struct Setup {
    /// The canonical workspace root.
    pub root: PathBuf,
    /// The config file's contents (defaults when there is none).
    pub config: Config,
    /// The provider asked for.
    pub provider: ProviderKind,
    /// The policy.
    pub policy: Policy,
}

/// Resolves the root, loads the config and builds the policy.
pub fn resolve(common: &Common) -> anyhow::Result<Setup> {
    let root = match &common.root {
        Some(r) => r.clone(),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let root = std::fs::canonicalize(&root)
        .with_context(|| format!("workspace root `{}` does not exist", root.display()))?;
    if !root.is_dir() {
        bail!("workspace root `{}` is not a directory", root.display());
    }
    let (config, config_path) = load_config(common, &root)?;
    let mode = match &common.mode {
        Some(m) => m
            .parse::<Mode>()
            .map_err(|e| anyhow::anyhow!("--mode: {}", e.message()))?,
        None => config.mode.unwrap_or_default(),
    };
    let provider = match &common.provider {
        Some(p) => p
            .parse::<ProviderKind>()
            .map_err(|e| anyhow::anyhow!("--provider: {}", e.message()))?,
        None => config.provider.unwrap_or(ProviderKind::Linux),
    };
    let mut policy = Policy::builder();
    policy
        .mode(mode)
        .allow(config.allow.iter().cloned())
        .deny(config.deny.iter().cloned())
        .deny_read(config.deny_read.iter().cloned())
        .git_of(&root);
    if let Some(rel) = config_path.as_deref().and_then(|p| relative_to(p, &root)) {
        policy.protect(rel);
    }
    let policy = policy
        .build()
        .map_err(|e| anyhow::anyhow!("config: {}", e.message()))?;
    // `allow`/`deny` name built-in tools (the CLI adds no other source):
    // refused here, before any command or toolset, as a config error.
    let known: Vec<&str> = cubby::builtin_tools().map(|(name, _)| name).collect();
    policy
        .check_tools(&known)
        .map_err(|e| anyhow::anyhow!("config: {}", e.message()))?;
    Ok(Setup {
        root,
        config,
        provider,
        policy,
    })
}

/// Resolves the root, loads the config and opens the sandbox once; returns
/// a factory that builds a fresh toolset (a new run) on each call.
pub fn factory(common: &Common, track_changes: bool) -> anyhow::Result<cubby_mcp::ToolsetFactory> {
    factory_of(resolve(common)?, track_changes)
}

/// What the MCP fronts serve: the factory of [`factory`] (changes tracked)
/// and the config's `[mcp]` options.
pub fn served(
    common: &Common,
) -> anyhow::Result<(cubby_mcp::ToolsetFactory, cubby_mcp::McpOptions)> {
    let setup = resolve(common)?;
    let options = cubby_mcp::McpOptions::from_config(&setup.config.mcp);
    Ok((factory_of(setup, true)?, options))
}

fn factory_of(setup: Setup, track_changes: bool) -> anyhow::Result<cubby_mcp::ToolsetFactory> {
    let Setup {
        root,
        config,
        provider,
        policy,
    } = setup;
    let sandbox = sandbox(provider, &root, &policy, &config, None)?;
    let env = command_env(&config)?;
    let mut secrets = Vec::new();
    for name in &config.secrets {
        match std::env::var(name) {
            Ok(value) if !value.is_empty() => secrets.push((name.clone(), value)),
            _ => tracing::warn!("secret `{name}` is not set in the environment; nothing to redact"),
        }
    }
    Ok(Arc::new(move || {
        let mut builder = Toolset::builder(sandbox.clone())
            .policy(policy.clone())
            .limits(config.limits.clone())
            .exec_rules(config.exec.rules.clone())
            .network(config.network.clone())
            .web_search(config.web_search.clone())
            .command_env(env.clone())
            .track_changes(track_changes);
        if let Some(shell) = &config.shell {
            builder = builder.shell(shell.clone());
        }
        for (name, value) in &secrets {
            builder = builder.secret(name.clone(), value.clone());
        }
        builder.build()
    }))
}

/// How commands' environments are made under `config` (SPEC §4): its
/// `[env]`, its `secrets` with their values from this process's
/// environment, cubby's own variables withheld.
pub fn command_env(config: &Config) -> anyhow::Result<CommandEnv> {
    CommandEnv::from_config(config, |name| std::env::var(name).ok())
        .map_err(|e| anyhow::anyhow!("config: {}", e.message()))
}

/// The `linux` provider's options from the policy and config; `network`
/// overrides the config's `[network] mode`.
pub fn linux_options(
    policy: &Policy,
    config: &Config,
    network: Option<NetworkMode>,
) -> LinuxOptions {
    let mut options = LinuxOptions::from_policy(policy);
    options.network = match (network, policy.mode()) {
        (Some(n), _) => n,
        (None, Mode::FullAccess) => NetworkMode::On,
        (None, _) => config.network.mode,
    };
    options.writable_roots = config.writable_roots.iter().map(PathBuf::from).collect();
    options.host_deny_read = config.host_deny_read.iter().map(PathBuf::from).collect();
    options.read_scope = config.read_scope;
    options.readable_roots = config.readable_roots.iter().map(PathBuf::from).collect();
    options.limits = config.limits.sandbox.clone();
    options.egress.rules = config.network.clone();
    for entry in &config.network.inject {
        match std::env::var(&entry.secret) {
            Ok(value) if !value.is_empty() => options.egress.inject.push(Injection {
                name: entry.secret.clone(),
                value,
                hosts: entry.hosts.clone(),
                headers: entry.headers.clone(),
            }),
            _ => tracing::warn!(
                "network.inject: `{}` is not set in the environment; commands get no placeholder",
                entry.secret
            ),
        }
    }
    options
}

fn load_config(common: &Common, root: &Path) -> anyhow::Result<(Config, Option<PathBuf>)> {
    let path = match &common.config {
        Some(p) => Some(
            std::fs::canonicalize(p)
                .with_context(|| format!("config file `{}` does not exist", p.display()))?,
        ),
        None => {
            let default = root.join(cubby::policy::CONFIG_FILE_NAME);
            default.is_file().then_some(default)
        }
    };
    match path {
        Some(p) => {
            let config = Config::load(&p).map_err(|e| anyhow::anyhow!("{}", e.message()))?;
            Ok((config, Some(p)))
        }
        None => Ok((Config::default(), None)),
    }
}

/// `path` relative to `root`, when it lies inside (for protecting it).
fn relative_to(path: &Path, root: &Path) -> Option<String> {
    let rel = path.strip_prefix(root).ok()?;
    let rel = rel.to_str()?;
    (!rel.is_empty()).then(|| rel.to_string())
}

/// Opens the sandbox of `provider` at `root`.
pub fn sandbox(
    provider: ProviderKind,
    root: &Path,
    policy: &Policy,
    config: &Config,
    network: Option<NetworkMode>,
) -> anyhow::Result<Arc<dyn Sandbox>> {
    match provider {
        ProviderKind::Virtual => {
            let fs =
                cubby::MemoryFs::from_dir(root).map_err(|e| anyhow::anyhow!("{}", e.message()))?;
            Ok(cubby::virtual_sandbox(fs))
        }
        ProviderKind::Local => {
            tracing::warn!(
                "provider `local`: commands run as host processes with your user's rights; \
                 only the file tools are confined to the workspace"
            );
            let sandbox = cubby::sandbox::LocalSandbox::open(root)
                .map_err(|e| anyhow::anyhow!("{}", e.message()))?;
            Ok(Arc::new(sandbox))
        }
        ProviderKind::Linux => {
            let options = linux_options(policy, config, network);
            let sandbox = LinuxSandbox::open(root, options)
                .map_err(|e| anyhow::anyhow!("{}", e.message()))?;
            Ok(Arc::new(sandbox))
        }
        ProviderKind::Remote => bail!(
            "the remote provider is not available in this build; use --provider linux, local or virtual"
        ),
    }
}
