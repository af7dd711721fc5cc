//! From flags and config file to a [`Workspace`]: flags win over the file.
//! Everything after the flags (the policy, the sandbox, the toolsets) is
//! the library's [`Workspace`].

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use cubby::sandbox::CommandEnv;
use cubby::{Config, HostEnv, Mode, ProviderKind, Toolset, ToolsetFactory, Workspace};

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

/// What a server keeps from every command it runs, on top of its config:
/// the file its token came from, and the directories of its hosted
/// sandboxes' workspaces (each command sees its own only).
#[derive(Debug, Default)]
pub struct Hidden {
    /// Masked (added to `host_deny_read`).
    pub deny_read: Vec<PathBuf>,
    /// Covered (added to `host_private_dirs`).
    pub private_dirs: Vec<PathBuf>,
    /// Where the served workspace keeps its private artifact store (with
    /// `--host`: beside the hosted sandboxes' stores, covered for all).
    pub stores: Option<PathBuf>,
}

impl Hidden {
    fn apply(&self, config: &mut Config) -> anyhow::Result<()> {
        let text = |p: &PathBuf| {
            std::path::absolute(p)
                .ok()
                .and_then(|p| p.to_str().map(str::to_string))
                .with_context(|| format!("`{}` is not a UTF-8 path; choose another", p.display()))
        };
        for p in &self.deny_read {
            config.host_deny_read.push(text(p)?);
        }
        for p in &self.private_dirs {
            config.host_private_dirs.push(text(p)?);
        }
        Ok(())
    }
}

/// Resolves the root and loads the config (flags win over the file) into a
/// [`Workspace`], whose environment is this process's.
pub fn resolve(common: &Common) -> anyhow::Result<Workspace> {
    resolve_hiding(common, &Hidden::default())
}

/// [`resolve`], with what `hidden` names kept from commands.
pub fn resolve_hiding(common: &Common, hidden: &Hidden) -> anyhow::Result<Workspace> {
    let root = match &common.root {
        Some(r) => r.clone(),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let root = std::fs::canonicalize(&root)
        .with_context(|| format!("workspace root `{}` does not exist", root.display()))?;
    if !root.is_dir() {
        bail!("workspace root `{}` is not a directory", root.display());
    }
    let (mut config, config_path) = load_config(common, &root)?;
    hidden.apply(&mut config)?;
    if let Some(m) = &common.mode {
        let mode = m
            .parse::<Mode>()
            .map_err(|e| anyhow::anyhow!("--mode: {}", e.message()))?;
        config.mode = Some(mode);
    }
    if let Some(p) = &common.provider {
        let provider = p
            .parse::<ProviderKind>()
            .map_err(|e| anyhow::anyhow!("--provider: {}", e.message()))?;
        config.provider = Some(provider);
    }
    let mut workspace =
        Workspace::from_config(&root, &config, config_path.as_deref(), &HostEnv::capture())
            .map_err(|e| anyhow::anyhow!("config: {}", e.message()))?;
    if let Some(stores) = &hidden.stores {
        workspace
            .keep_store_in(stores)
            .map_err(|e| anyhow::anyhow!("--host: {}", e.message()))?;
    }
    // `allow`/`deny` name built-in tools (the CLI adds no other source):
    // refused here, before any command or toolset, as a config error.
    let mut known: Vec<&str> = cubby::builtin_tools().map(|(name, _)| name).collect();
    known.extend(
        workspace
            .upstream_routes()
            .iter()
            .map(|r| r.exposed.as_str()),
    );
    workspace
        .policy()
        .check_tools(&known)
        .map_err(|e| anyhow::anyhow!("config: {}", e.message()))?;
    Ok(workspace)
}

/// Resolves the workspace and opens the sandbox once; returns a factory
/// that builds a fresh toolset (a new run) on each call.
pub fn factory(common: &Common, track_changes: bool) -> anyhow::Result<ToolsetFactory> {
    factory_of(&resolve(common)?, track_changes)
}

/// What the MCP fronts serve: the factory of [`factory`] (changes tracked)
/// and the config's `[mcp]` options.
pub fn served(common: &Common) -> anyhow::Result<(ToolsetFactory, cubby_mcp::McpOptions)> {
    served_hiding(common, &Hidden::default())
}

/// [`served`], with what `hidden` names kept from commands.
pub fn served_hiding(
    common: &Common,
    hidden: &Hidden,
) -> anyhow::Result<(ToolsetFactory, cubby_mcp::McpOptions)> {
    let workspace = resolve_hiding(common, hidden)?;
    let options = cubby_mcp::McpOptions::from_config(&workspace.config().mcp);
    Ok((factory_of(&workspace, true)?, options))
}

fn factory_of(workspace: &Workspace, track_changes: bool) -> anyhow::Result<ToolsetFactory> {
    let sandbox = workspace
        .open_sandbox()
        .map_err(|e| anyhow::anyhow!("{}", e.message()))?;
    workspace
        .factory_with(sandbox, track_changes, cubby_mcp::upstream_sources())
        .map_err(|e| anyhow::anyhow!("config: {}", e.message()))
}

/// How commands' environments are made under the workspace's config.
pub fn command_env(workspace: &Workspace) -> anyhow::Result<CommandEnv> {
    workspace
        .command_env()
        .map_err(|e| anyhow::anyhow!("config: {}", e.message()))
}

fn load_config(common: &Common, root: &Path) -> anyhow::Result<(Config, Option<PathBuf>)> {
    let path = match &common.config {
        Some(p) => Some(
            std::fs::canonicalize(p)
                .with_context(|| format!("config file `{}` does not exist", p.display()))?,
        ),
        None => Workspace::default_config_path(root),
    };
    match path {
        Some(p) => {
            let config = Config::load(&p).map_err(|e| anyhow::anyhow!("{}", e.message()))?;
            Ok((config, Some(p)))
        }
        None => Ok((Config::default(), None)),
    }
}

/// The bearer token in `file` (surrounding whitespace trimmed); the error
/// names the file, never its content.
pub fn read_token(file: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read the token file `{}`", file.display()))?;
    let token = text.trim();
    if token.is_empty() {
        bail!("the token file `{}` is empty", file.display());
    }
    Ok(token.to_string())
}

/// Where `serve --host` keeps what: the served root, the directory of the
/// hosted workspaces (made now: `--host-dir`, or one of its own in the
/// temporary directory), the adoptable directory, the token's file; all
/// canonical, and none inside another under any name the mounts give it
/// ([`cubby::mounts`]; red-team pass 7, G3: a token file
/// in the served root was the file tools' to read, a host directory in the
/// root or in the adoptable one put every hosted workspace in one model's
/// reach).
#[derive(Debug)]
pub struct HostLayout {
    /// The `/mcp` workspace's root.
    pub root: PathBuf,
    /// The hosted workspaces' directory.
    pub dir: PathBuf,
    /// The server made `dir` (removed at exit).
    made: bool,
    /// `--host-adopt`.
    pub adopt: Option<PathBuf>,
}

impl HostLayout {
    /// Removes the directory the server made, when it is still empty (a
    /// start that failed after the layout).
    pub fn discard(&self) {
        let _ = std::fs::remove_dir(self.stores());
        if self.made {
            let _ = std::fs::remove_dir(&self.dir);
        }
    }

    /// Where every artifact store of the server is kept (the served
    /// workspace's and the hosted sandboxes'): in `dir`, covered for every
    /// command.
    pub fn stores(&self) -> PathBuf {
        self.dir.join(cubby::host::STORES_DIR)
    }

    /// Resolves and checks the layout; makes the hosted workspaces'
    /// directory (mode 0700) when missing.
    pub fn new(
        common: &Common,
        dir: Option<PathBuf>,
        adopt: Option<PathBuf>,
        token_file: Option<&Path>,
    ) -> anyhow::Result<HostLayout> {
        use std::os::unix::fs::DirBuilderExt;
        let root = match &common.root {
            Some(r) => r.clone(),
            None => std::env::current_dir().context("cannot read the current directory")?,
        };
        let root = std::fs::canonicalize(&root)
            .with_context(|| format!("workspace root `{}` does not exist", root.display()))?;
        let (dir, made) = match dir {
            Some(dir) => (dir, false),
            None => (
                cubby::artifact::temp_dir(&HostEnv::capture()).join(format!(
                    "cubby-host-{}-{}",
                    std::process::id(),
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.subsec_nanos())
                )),
                true,
            ),
        };
        let existed = dir.exists();
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .with_context(|| format!("--host-dir: cannot make `{}`", dir.display()))?;
        let layout = (|| {
            let dir = std::fs::canonicalize(&dir)
                .with_context(|| format!("--host-dir: cannot resolve `{}`", dir.display()))?;
            let adopt = adopt
                .map(|a| {
                    std::fs::canonicalize(&a)
                        .with_context(|| format!("--host-adopt `{}` does not exist", a.display()))
                })
                .transpose()?;
            let token = token_file
                .map(|t| {
                    std::fs::canonicalize(t)
                        .with_context(|| format!("the token file `{}` does not exist", t.display()))
                })
                .transpose()?;
            // By every name the mounts give each (a bind of `--host-dir`
            // inside the root is the same directory; red-team pass 8, L2).
            let table = cubby::mounts::MountTable::read()
                .context("cannot read the mount table to check the directories")?;
            let overlap = |a: &Path, b: &Path| {
                let theirs = table.aliases(b);
                table
                    .aliases(a)
                    .iter()
                    .any(|a| theirs.iter().any(|b| a.starts_with(b) || b.starts_with(a)))
            };
            if overlap(&dir, &root) {
                bail!(
                    "--host-dir `{}` and the workspace root `{}` lie one inside the other (under \
                     their own names or those a mount gives them): the \
                     served workspace's tools would reach the hosted sandboxes' workspaces; \
                     choose directories apart",
                    dir.display(),
                    root.display()
                );
            }
            if let Some(adopt) = &adopt {
                for (what, path) in [("--host-dir", &dir), ("the workspace root", &root)] {
                    if overlap(path, adopt) {
                        bail!(
                            "{what} `{}` and --host-adopt `{}` lie one inside the other: a \
                             caller could adopt it; choose directories apart",
                            path.display(),
                            adopt.display()
                        );
                    }
                }
            }
            if let Some(token) = &token {
                let holders = [Some(&root), Some(&dir), adopt.as_ref()];
                let names = table.aliases(token);
                let within = |h: &&PathBuf| {
                    let holder = table.aliases(h);
                    names
                        .iter()
                        .any(|t| holder.iter().any(|h| t.starts_with(h)))
                };
                if let Some(holder) = holders.into_iter().flatten().find(within) {
                    bail!(
                        "the token file `{}` lies in `{}`, where a sandbox's tools reach it; \
                         keep it outside the workspace root, --host-dir and --host-adopt",
                        token.display(),
                        holder.display()
                    );
                }
            }
            let stores = dir.join(cubby::host::STORES_DIR);
            match std::fs::DirBuilder::new().mode(0o700).create(&stores) {
                Ok(()) => {}
                Err(e)
                    if e.kind() == std::io::ErrorKind::AlreadyExists
                        && !stores.is_symlink()
                        && stores.is_dir() => {}
                Err(e) => bail!("--host-dir: cannot make `{}`: {e}", stores.display()),
            }
            Ok(HostLayout {
                root: root.clone(),
                dir,
                made,
                adopt,
            })
        })();
        if layout.is_err() && !existed {
            let _ = std::fs::remove_dir(&dir);
        }
        layout
    }
}

/// The sandbox host of `cubby serve --host`, and the directory of its
/// workspaces when the server made it (removed when this drops, after
/// every sandbox is destroyed).
pub struct Hosting {
    /// What the HTTP front serves at `/v1`.
    pub api: cubby::host::http::HostApi,
    made_dir: Option<PathBuf>,
}

impl Drop for Hosting {
    fn drop(&mut self) {
        self.api.host().destroy_all();
        let _ = std::fs::remove_dir(self.api.host().stores_dir());
        if let Some(dir) = &self.made_dir {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// A sandbox host under the served workspace's config (provider, policy,
/// limits: the server's, never a caller's).
pub fn host(
    common: &Common,
    hidden: &Hidden,
    layout: HostLayout,
    max: usize,
    idle_secs: u64,
    token: &str,
) -> anyhow::Result<Hosting> {
    let workspace = match resolve_hiding(common, hidden) {
        Ok(workspace) => workspace,
        Err(e) => {
            layout.discard();
            return Err(e);
        }
    };
    let env = HostEnv::capture();
    let made_dir = layout.made.then(|| layout.dir.clone());
    let host = cubby::host::Host::new(cubby::host::HostOptions {
        dir: layout.dir,
        adopt: layout.adopt,
        max_sandboxes: max,
        config: workspace.config().clone(),
        env,
        idle: (idle_secs > 0).then(|| std::time::Duration::from_secs(idle_secs)),
    })
    .map_err(|e| anyhow::anyhow!("--host: {}", e.message()))?;
    let api = cubby::host::http::HostApi::new(std::sync::Arc::new(host), token)
        .map_err(|e| anyhow::anyhow!("--host: {}", e.message()))?;
    Ok(Hosting { api, made_dir })
}
