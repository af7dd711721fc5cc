//! [`Workspace`]: a config and cubby's environment → one [`Policy`], the
//! sandbox opened from it, and a factory of toolsets under it.
//!
//! Every front assembles a workspace the same way, here: the CLI (`call`,
//! `tools`, `exec`, `doctor`), both MCP fronts (`cubby mcp`, `cubby serve`)
//! and the tests. A front parses its own flags into a [`Config`] (flags win
//! over the file: it overwrites the fields they name), takes one snapshot of
//! its environment ([`HostEnv::capture`], the only read of the process
//! environment in the library) and calls [`Workspace::from_config`]. The
//! policy is built once; the sandbox is opened from it and every toolset of
//! the factory is given the same one, so what commands are held to and what
//! the file and web tools enforce cannot drift apart (a toolset refuses a
//! sandbox that enforces another policy: [`crate::Sandbox::enforced`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::artifact::Store;
use crate::config::{Config, NetworkMode, ProviderKind};
use crate::error::{Error, ErrorKind, Result};
use crate::host_env::HostEnv;
use crate::policy::{CONFIG_FILE_NAME, Policy};
use crate::remote::{RemoteOptions, RemoteSandbox};
use crate::sandbox::{CommandEnv, LinuxSandbox, LocalSandbox, MemoryFs, Sandbox};
use crate::toolset::{ARTIFACTS_DIR, Toolset, ToolsetBuilder};

/// Builds a fresh toolset: one per run (an MCP session, a CLI call).
pub type ToolsetFactory = Arc<dyn Fn() -> Result<Toolset> + Send + Sync>;

/// Makes the sources of tools a run adds to the built-in ones (the
/// upstream MCP servers' client, which lives in `cubby-mcp`): called once
/// per run, with the workspace and the run's secrets' redaction.
pub type SourcesMaker =
    Arc<dyn Fn(&Workspace) -> Result<Vec<Arc<dyn crate::ToolSource>>> + Send + Sync>;

impl HostEnv {
    /// This process's environment, now. The one place in the library that
    /// reads it; everything else is handed this snapshot.
    pub fn capture() -> HostEnv {
        HostEnv::from_vars(std::env::vars_os())
    }
}

/// One workspace: its root, its config, the policy built from them, the
/// provider asked for and the environment snapshot everything reads.
#[derive(Clone, Debug)]
pub struct Workspace {
    root: PathBuf,
    config: Config,
    provider: ProviderKind,
    policy: Policy,
    host: HostEnv,
    /// The state directory (`state_dir`), when one is configured.
    state_dir: Option<PathBuf>,
    /// The artifact store every run of the workspace shares (made at the
    /// first publication): in `<state_dir>/artifacts`, or without a
    /// `state_dir` one of the workspace's own in the temporary directory,
    /// removed when the workspace and its runs are gone.
    store: Arc<Store>,
    /// The upstream servers' tools, by exposed name.
    routes: Arc<crate::upstream::Routes>,
    /// The upstream tools' first-seen definitions.
    pins: Arc<crate::upstream::Pins>,
}

impl Workspace {
    /// The config file cubby reads in `root` when none is named: its
    /// `cubby.toml`, when that is a file.
    pub fn default_config_path(root: &Path) -> Option<PathBuf> {
        let default = root.join(CONFIG_FILE_NAME);
        default.is_file().then_some(default)
    }

    /// Assembles the workspace at `root` (an existing directory, canonical)
    /// under `config`, read from `config_path` (`None`: no file, the
    /// defaults). A config file inside the root is protected on top of the
    /// defaults. Nothing is opened yet.
    ///
    /// # Errors
    ///
    /// `invalid_input` for an unknown tool name or a path rule that is not
    /// relative to the root (the policy's own checks), a `state_dir` inside
    /// the root.
    pub fn from_config(
        root: &Path,
        config: &Config,
        config_path: Option<&Path>,
        host: &HostEnv,
    ) -> Result<Workspace> {
        let state_dir = match config.state_dir.as_deref() {
            Some(dir) => Some(match dir.strip_prefix("~/") {
                Some(rest) => host
                    .var_os("HOME")
                    .map(|home| PathBuf::from(home).join(rest))
                    .ok_or_else(|| {
                        Error::invalid_input(format!(
                            "state_dir `{dir}` starts with `~/` and HOME is not set; give an absolute path"
                        ))
                    })?,
                None => PathBuf::from(dir),
            }),
            None => None,
        };
        // Checked as the kernel will resolve them (R4-8: `/tmp/../x` passed
        // the `/tmp` check lexically, and a link in the way moved it).
        let state_dir = state_dir
            .map(|dir| resolve_dir(&dir, "state_dir"))
            .transpose()?;
        let store = match &state_dir {
            Some(dir) => Store::lazy(&dir.join(ARTIFACTS_DIR)),
            None => Store::private(&resolve_dir(
                &crate::artifact::temp_dir(host),
                "the temporary directory (TMPDIR)",
            )?),
        };
        // A private store's own directory (drawn now, made at its first
        // write), not the temporary directory it is in: hiding all of
        // `TMPDIR` from commands refused every workspace inside it as "in a
        // credential store" (review).
        let store_dir = store.own_dir().to_path_buf();
        if store_dir.starts_with(root) {
            let what = if state_dir.is_some() {
                "state_dir"
            } else {
                "the temporary directory (TMPDIR)"
            };
            return Err(Error::invalid_input(format!(
                "{what} {} is inside the workspace, where commands could rewrite the \
                 artifact store; choose a directory outside {}",
                state_dir
                    .as_deref()
                    .unwrap_or_else(|| store_dir.parent().unwrap_or(&store_dir))
                    .display(),
                root.display()
            )));
        }
        // Nor in a writable root, where a command renames a directory above
        // it and the next session masks the old name only (red-team pass
        // 15, S3).
        for w in &config.writable_roots {
            let w = root.join(w);
            let w = std::fs::canonicalize(&w).unwrap_or(w);
            if store_dir.starts_with(&w) {
                return Err(Error::invalid_input(format!(
                    "the artifact store {} is inside the writable root {}, where commands \
                     could move it out from under its mask; choose a state_dir (or TMPDIR) \
                     outside it",
                    store_dir.display(),
                    w.display()
                )));
            }
        }
        let mut policy = Policy::builder();
        // Commands never read the store (other runs' artifacts): under
        // `/tmp` the `linux` provider's private `/tmp` hides it already.
        let hidden = state_dir.clone().unwrap_or(store_dir);
        if !hidden.starts_with("/tmp") {
            policy.host_deny_read([hidden]);
        }
        policy
            .mode(config.mode.unwrap_or_default())
            .allow(config.allow.iter().cloned())
            .deny(config.deny.iter().cloned())
            .deny_read(config.deny_read.iter().cloned())
            .git_of(root, host)
            .writable_roots(config.writable_roots.iter().map(PathBuf::from))
            .host_deny_read(config.host_deny_read.iter().map(PathBuf::from))
            .host_private_dirs(config.host_private_dirs.iter().map(PathBuf::from))
            .read_scope(config.read_scope)
            .readable_roots(config.readable_roots.iter().map(PathBuf::from))
            .network(config.network.clone())
            .gateways(config.gateway.clone())
            .exec_rules(config.exec.rules.clone())
            .env(config.env.clone())
            .limits(config.limits.clone())
            .skills_dirs(config.skills.dirs.iter().cloned());
        if let Some(rel) = config_path.and_then(|p| relative_to(p, root)) {
            policy.protect(rel);
        }
        let routes = crate::upstream::Routes::new(&config.upstream, |name| {
            crate::tools::builtin_tools().any(|(builtin, _)| builtin == name)
        })?;
        let pins = crate::upstream::Pins::new(state_dir.as_deref());
        Ok(Workspace {
            routes: Arc::new(routes),
            pins,
            root: root.to_path_buf(),
            config: config.clone(),
            provider: config.provider.unwrap_or(ProviderKind::Linux),
            policy: policy.build()?,
            host: host.clone(),
            store: Arc::new(store),
            state_dir,
        })
    }

    /// Keeps the private artifact store in `parent` rather than the
    /// temporary directory (no effect with `state_dir`, whose store is the
    /// user's). A server holding many sandboxes puts every store in one
    /// directory that all of them have covered (`host_private_dirs`): each
    /// hides only its own store, and with `TMPDIR` outside `/tmp` the
    /// others' were readable (red-team pass 8, M1).
    ///
    /// # Errors
    ///
    /// `invalid_input` for a `parent` that does not resolve, or lies in the
    /// workspace.
    pub fn keep_store_in(&mut self, parent: &Path) -> Result<()> {
        if self.state_dir.is_some() {
            return Ok(());
        }
        let parent = resolve_dir(parent, "the artifact stores' directory")?;
        if parent.starts_with(&self.root) {
            return Err(Error::invalid_input(format!(
                "the artifact stores' directory {} is inside the workspace {}; choose one \
                 outside it",
                parent.display(),
                self.root.display()
            )));
        }
        self.store = Arc::new(Store::private(&parent));
        Ok(())
    }

    /// Commands get `network` whatever the mode and the config say
    /// (`cubby exec --network`).
    pub fn set_command_network(&mut self, network: NetworkMode) {
        self.policy = self.policy.clone().with_command_network(network);
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The config.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The provider asked for (default `linux`).
    pub fn provider(&self) -> ProviderKind {
        self.provider
    }

    /// The one policy: the sandbox is opened from it, every toolset gets it.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The state directory (`state_dir`), when one is configured; without
    /// one, the runs share a store of the workspace's own in the temporary
    /// directory, removed when the workspace and its runs are dropped.
    pub fn state_dir(&self) -> Option<&Path> {
        self.state_dir.as_deref()
    }

    /// The artifact store every run of the workspace shares.
    pub fn artifact_store(&self) -> &Arc<Store> {
        &self.store
    }

    /// The environment snapshot.
    pub fn host_env(&self) -> &HostEnv {
        &self.host
    }

    /// The upstream servers' tools, by exposed name (`<label>__<tool>`).
    pub fn upstream_routes(&self) -> &Arc<crate::upstream::Routes> {
        &self.routes
    }

    /// The upstream tools' first-seen definitions (in
    /// `<state_dir>/upstream/`, or this process's memory).
    pub fn upstream_pins(&self) -> &Arc<crate::upstream::Pins> {
        &self.pins
    }

    /// Opens the sandbox of its own a stdio upstream server `label` runs
    /// in: the provider asked for, the workspace's policy (files,
    /// protected paths, `deny_read`, the host's credential stores, limits)
    /// with the server's own network (`[upstream.<label>] network`,
    /// default `off`). Its commands are the server's process tree, killed
    /// with the run.
    ///
    /// A server that does not get the workspace
    /// ([`crate::UpstreamConfig::sees_workspace`]) is rooted in a private
    /// empty directory of the temporary directory instead (removed when
    /// the sandbox is dropped), and the workspace and writable roots are
    /// unreadable to it ([`Policy::secluded_from`]).
    ///
    /// # Errors
    ///
    /// `not_found` for an unknown label; `unsupported` on a provider
    /// without commands (`virtual`), or when the temporary directory lies
    /// in the workspace and the server does not get it; the provider's own.
    pub fn upstream_sandbox(&self, label: &str) -> Result<Arc<dyn Sandbox>> {
        let config = self.config.upstream.get(label).ok_or_else(|| {
            Error::new(
                ErrorKind::NotFound,
                format!("no `[upstream.{label}]` in the config"),
            )
        })?;
        let policy = self
            .policy
            .clone()
            .with_command_network(config.network.unwrap_or(NetworkMode::Off));
        if !matches!(self.provider, ProviderKind::Linux | ProviderKind::Local) {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "upstream `{label}` is a stdio server, and the {} provider runs no \
                     commands; use the linux provider (or a `url` upstream)",
                    self.provider.as_str()
                ),
            ));
        }
        if config.sees_workspace() {
            return self.upstream_sandbox_at(&self.root, &policy);
        }
        let parent = crate::artifact::temp_dir(&self.host);
        let parent = std::fs::canonicalize(&parent).unwrap_or(parent);
        let hidden = std::iter::once(self.root.clone()).chain(
            self.policy
                .writable_roots()
                .iter()
                .map(|w| self.root.join(w))
                .map(|w| std::fs::canonicalize(&w).unwrap_or(w)),
        );
        for place in hidden {
            if parent.starts_with(&place) {
                return Err(Error::new(
                    ErrorKind::Unsupported,
                    format!(
                        "upstream `{label}` does not get the workspace or the writable roots, \
                         and its private directory would be in one of them (the temporary \
                         directory `{}` is inside `{}`); point TMPDIR elsewhere",
                        parent.display(),
                        place.display()
                    ),
                ));
            }
        }
        let dir = tempfile::Builder::new()
            .prefix("cubby-upstream-")
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .tempdir_in(&parent)
            .map_err(|e| {
                Error::new(
                    ErrorKind::Internal,
                    format!(
                        "upstream `{label}`: cannot make its private directory in `{}`: {e}",
                        parent.display()
                    ),
                )
            })?;
        let policy = policy.secluded_from(&self.root);
        let sandbox = self.upstream_sandbox_at(dir.path(), &policy)?;
        Ok(Arc::new(Secluded { sandbox, _dir: dir }))
    }

    fn upstream_sandbox_at(&self, root: &Path, policy: &Policy) -> Result<Arc<dyn Sandbox>> {
        Ok(match self.provider {
            ProviderKind::Linux => Arc::new(LinuxSandbox::open(root, policy, &self.host)?),
            _ => Arc::new(LocalSandbox::open(root)?),
        })
    }

    /// A factory like [`Workspace::factory_over`] whose runs also get the
    /// sources `extra` makes for each (the upstream servers' tools).
    ///
    /// # Errors
    ///
    /// `invalid_input` for a bad `[env]` (as [`Workspace::command_env`]);
    /// a run fails as `extra` does for it.
    pub fn factory_with(
        &self,
        sandbox: Arc<dyn Sandbox>,
        track_changes: bool,
        extra: SourcesMaker,
    ) -> Result<ToolsetFactory> {
        self.command_env()?;
        let secrets = self.secrets();
        let this = self.clone();
        Ok(Arc::new(move || {
            let mut builder = this
                .toolset_builder(sandbox.clone())
                .track_changes(track_changes);
            for (name, value) in &secrets {
                builder = builder.secret(name.clone(), value.clone());
            }
            for label in this.config.upstream.values() {
                for name in &label.env.secrets {
                    if let Some(value) = this.host.non_empty(name) {
                        builder = builder.redact(name.clone(), value);
                    }
                }
            }
            for source in extra(&this)? {
                builder = builder.source(source);
            }
            builder.build()
        }))
    }

    /// How commands' environments are made (SPEC §4): the config's `[env]`,
    /// its `secrets` with their values from the snapshot, cubby's own
    /// variables withheld.
    ///
    /// # Errors
    ///
    /// `invalid_input` as [`CommandEnv::from_config`].
    pub fn command_env(&self) -> Result<CommandEnv> {
        CommandEnv::from_config(&self.config, |name| self.host.var(name))
    }

    /// Opens the sandbox of the provider asked for, from the policy.
    ///
    /// # Errors
    ///
    /// The provider's own (`unsupported` naming what this machine lacks,
    /// `not_found` for a missing root; for `remote`, as
    /// [`Workspace::open_remote`]).
    pub fn open_sandbox(&self) -> Result<Arc<dyn Sandbox>> {
        match self.provider {
            ProviderKind::Virtual => Ok(crate::sandbox::virtual_sandbox(MemoryFs::from_dir(
                &self.root,
            )?)),
            ProviderKind::Local => {
                tracing::warn!(
                    "provider `local`: commands run as host processes with your user's rights; \
                     only the file tools are confined to the workspace"
                );
                Ok(Arc::new(LocalSandbox::open(&self.root)?))
            }
            ProviderKind::Linux => Ok(Arc::new(self.open_linux()?)),
            ProviderKind::Remote => Ok(Arc::new(self.open_remote()?)),
            ProviderKind::Kubernetes => Ok(Arc::new(self.open_kubernetes()?)),
        }
    }

    /// Opens the `remote` provider's sandbox on the far cubby `[remote]`
    /// names (its token read from `token_file` now).
    ///
    /// # Errors
    ///
    /// `invalid_input` without a `[remote]` section or with an unreadable
    /// token file (the message names the file, never its content); then as
    /// [`RemoteSandbox::open`].
    pub fn open_remote(&self) -> Result<RemoteSandbox> {
        let Some(remote) = &self.config.remote else {
            return Err(Error::invalid_input(
                "provider `remote` needs a [remote] section with `url` and `token_file`",
            ));
        };
        let token = self.secret_file("[remote] token_file", &remote.token_file)?;
        let upload = remote
            .upload
            .as_deref()
            .map(|dir| self.upload_dir("[remote] upload", dir))
            .transpose()?;
        RemoteSandbox::open(&RemoteOptions {
            url: remote.url.clone(),
            token,
            root: remote.root.as_ref().map(PathBuf::from),
            upload,
        })
    }

    /// The directory `key` names to upload at create: absolute, `~/`, or
    /// relative to the workspace root.
    fn upload_dir(&self, key: &str, dir: &str) -> Result<PathBuf> {
        match dir.strip_prefix("~/") {
            Some(rest) => self
                .host
                .var_os("HOME")
                .map(|home| PathBuf::from(home).join(rest))
                .ok_or_else(|| {
                    Error::invalid_input(format!(
                        "{key} starts with `~/` and HOME is not set; give an absolute path"
                    ))
                }),
            None => Ok(self.root.join(dir)),
        }
    }

    /// The trimmed content of `file` (absolute or `~/`), which holds a
    /// secret: errors name `key` and the file, never the content.
    fn secret_file(&self, key: &str, file: &str) -> Result<String> {
        let file = match file.strip_prefix("~/") {
            Some(rest) => self
                .host
                .var_os("HOME")
                .map(|home| PathBuf::from(home).join(rest))
                .ok_or_else(|| {
                    Error::invalid_input(format!("{key} starts with `~/` and HOME is not set"))
                })?,
            None => PathBuf::from(file),
        };
        let text = std::fs::read_to_string(&file).map_err(|e| {
            Error::invalid_input(format!(
                "cannot read the {key} {}: {e}; give a readable file holding it",
                file.display()
            ))
        })?;
        let text = text.trim();
        if text.is_empty() {
            return Err(Error::invalid_input(format!(
                "the {key} {} is empty",
                file.display()
            )));
        }
        Ok(text.to_string())
    }

    /// Claims a pod from the warm pool `[kubernetes]` names and opens a
    /// sandbox there (see [`crate::kubernetes`]). Without `api_server`: in
    /// a cluster (`KUBERNETES_SERVICE_HOST`) its API with the service
    /// account's token and CA, else `kubectl proxy`'s default address.
    ///
    /// # Errors
    ///
    /// `invalid_input` without a `[kubernetes]` section or with an
    /// unreadable key or token file (naming the key); then as
    /// [`crate::kubernetes::open`].
    pub fn open_kubernetes(&self) -> Result<RemoteSandbox> {
        const SERVICE_ACCOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
        const KUBECTL_PROXY: &str = "http://127.0.0.1:8001";
        let Some(k) = &self.config.kubernetes else {
            return Err(Error::invalid_input(
                "provider `kubernetes` needs a [kubernetes] section with at least `pool_key_file`",
            ));
        };
        let pool_key = self.secret_file("[kubernetes] pool_key_file", &k.pool_key_file)?;
        let in_cluster = self.host.non_empty("KUBERNETES_SERVICE_HOST").map(|host| {
            let port = self
                .host
                .non_empty("KUBERNETES_SERVICE_PORT")
                .unwrap_or_else(|| "443".to_string());
            let host = if host.contains(':') {
                format!("[{host}]")
            } else {
                host
            };
            format!("https://{host}:{port}")
        });
        let (api_server, token_file, ca_file) = match (&k.api_server, in_cluster) {
            (Some(url), _) => (url.clone(), k.token_file.clone(), k.ca_file.clone()),
            (None, Some(url)) => (
                url,
                Some(
                    k.token_file
                        .clone()
                        .unwrap_or(format!("{SERVICE_ACCOUNT}/token")),
                ),
                Some(
                    k.ca_file
                        .clone()
                        .unwrap_or(format!("{SERVICE_ACCOUNT}/ca.crt")),
                ),
            ),
            (None, None) => (
                KUBECTL_PROXY.to_string(),
                k.token_file.clone(),
                k.ca_file.clone(),
            ),
        };
        let api_token = token_file
            .map(|f| self.secret_file("[kubernetes] token_file", &f))
            .transpose()?;
        crate::kubernetes::open(&crate::kubernetes::ClaimOptions {
            api_server,
            api_token,
            ca_file,
            namespace: k.namespace.clone(),
            warm_pool: k.warm_pool.clone(),
            pool_key,
            port: k.port,
            ready_timeout: std::time::Duration::from_secs(k.ready_timeout_secs()),
            shutdown_after: std::time::Duration::from_secs(k.shutdown_after_secs()),
            upload: k
                .upload
                .as_deref()
                .map(|dir| self.upload_dir("[kubernetes] upload", dir))
                .transpose()?,
        })
    }

    /// Opens a `linux` sandbox from the policy, whatever the provider asked
    /// for (`cubby exec`).
    ///
    /// # Errors
    ///
    /// As [`LinuxSandbox::open`].
    pub fn open_linux(&self) -> Result<LinuxSandbox> {
        LinuxSandbox::open(&self.root, &self.policy, &self.host)
    }

    /// The config's secrets with their values from the snapshot (unset or
    /// empty ones left out, with a warning).
    fn secrets(&self) -> Vec<(String, String)> {
        let mut secrets = Vec::new();
        for name in &self.config.secrets {
            match self.host.non_empty(name) {
                Some(value) => secrets.push((name.clone(), value)),
                None => tracing::warn!(
                    "secret `{name}` is not set in the environment; nothing to redact"
                ),
            }
        }
        secrets
    }

    /// A toolset builder over `sandbox` with everything the workspace
    /// states: the policy, the environment, `shell`, `[web_search]`.
    pub fn toolset_builder(&self, sandbox: Arc<dyn Sandbox>) -> ToolsetBuilder {
        let mut builder = Toolset::builder(sandbox)
            .policy(self.policy.clone())
            .host_env(self.host.clone())
            .web_search(self.config.web_search.clone())
            .artifact_store(self.store.clone());
        if let Some(shell) = &self.config.shell {
            builder = builder.shell(shell.clone());
        }
        builder
    }

    /// Opens the sandbox once and returns a factory that builds a fresh
    /// toolset (a new run) over it on each call.
    ///
    /// # Errors
    ///
    /// As [`Workspace::open_sandbox`], then as [`Workspace::factory_over`].
    pub fn factory(&self, track_changes: bool) -> Result<ToolsetFactory> {
        let sandbox = self.open_sandbox()?;
        self.factory_over(sandbox, track_changes)
    }

    /// A factory of toolsets over `sandbox` (opened from this workspace's
    /// policy: a toolset refuses one that enforces another), each a new run
    /// with the config's secrets (their values from the snapshot) and the
    /// upstream servers' `env.secrets` redacted.
    ///
    /// # Errors
    ///
    /// `invalid_input` for a bad `[env]` (as [`Workspace::command_env`]).
    pub fn factory_over(
        &self,
        sandbox: Arc<dyn Sandbox>,
        track_changes: bool,
    ) -> Result<ToolsetFactory> {
        self.factory_with(sandbox, track_changes, Arc::new(|_| Ok(Vec::new())))
    }
}

/// `path` relative to `root`, when it lies inside (for protecting it).
fn relative_to(path: &Path, root: &Path) -> Option<String> {
    let rel = path.strip_prefix(root).ok()?;
    let rel = rel.to_str()?;
    (!rel.is_empty()).then(|| rel.to_string())
}

/// `dir` (`what`: `state_dir`, or the temporary directory) as the kernel
/// resolves it: refused when it holds `..`; its deepest existing ancestor
/// canonicalized (links resolved), the rest appended (made later, by the
/// store, without following links).
///
/// # Errors
///
/// `invalid_input` for a `..` or a relative path; `invalid_input` naming
/// the path when an existing ancestor cannot be resolved.
fn resolve_dir(dir: &Path, what: &str) -> Result<PathBuf> {
    if !dir.is_absolute()
        || dir
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
    {
        return Err(Error::invalid_input(format!(
            "{what} {} must be an absolute path without `..`; give the directory itself",
            dir.display()
        )));
    }
    let mut existing = dir.to_path_buf();
    let mut rest = Vec::new();
    while std::fs::symlink_metadata(&existing).is_err() {
        let Some(name) = existing.file_name().map(std::ffi::OsStr::to_os_string) else {
            break;
        };
        rest.push(name);
        existing.pop();
    }
    let mut resolved = existing.canonicalize().map_err(|e| {
        Error::invalid_input(format!(
            "{what} {}: cannot resolve {}: {e}; give a directory that can be reached",
            dir.display(),
            existing.display()
        ))
    })?;
    resolved.extend(rest.iter().rev());
    Ok(resolved)
}

/// A secluded upstream server's sandbox and the private directory it is
/// rooted in, which goes with it.
struct Secluded {
    sandbox: Arc<dyn Sandbox>,
    _dir: tempfile::TempDir,
}

impl Sandbox for Secluded {
    fn kind(&self) -> ProviderKind {
        self.sandbox.kind()
    }

    fn fs(&self) -> &dyn crate::sandbox::FileSystem {
        self.sandbox.fs()
    }

    fn supports_commands(&self) -> bool {
        self.sandbox.supports_commands()
    }

    fn enforced(&self) -> Option<&crate::policy::PolicyDigest> {
        self.sandbox.enforced()
    }

    fn exec(&self, spec: &crate::sandbox::ExecSpec) -> Result<crate::sandbox::Spawned> {
        self.sandbox.exec(spec)
    }

    fn exec_attached(
        &self,
        spec: &crate::sandbox::ExecSpec,
    ) -> Result<Box<dyn crate::sandbox::ProcessHandle>> {
        self.sandbox.exec_attached(spec)
    }

    fn command_path(&self, path: &crate::path::WorkspacePath) -> Option<PathBuf> {
        self.sandbox.command_path(path)
    }

    fn show_cwd(&self, cwd: &crate::path::WorkspacePath) -> String {
        self.sandbox.show_cwd(cwd)
    }

    fn gateway_run(&self) -> Result<Option<crate::net::GatewayRun>> {
        self.sandbox.gateway_run()
    }

    fn gateway_events(&self) -> Vec<crate::net::GatewayEvent> {
        self.sandbox.gateway_events()
    }
}
