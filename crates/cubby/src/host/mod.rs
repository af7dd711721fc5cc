//! `cubby serve` as a sandbox host (SPEC §7): many sandboxes in one
//! process, each with a workspace of its own, driven over the `/v1` API
//! ([`http`]; its wire format is the `remote` provider's,
//! `remote/wire.rs`).
//!
//! A [`Host`] holds the sandboxes by id. Each is opened from the host's one
//! config (provider, policy and limits are the server's, never the
//! caller's) over a directory of its own under [`HostOptions::dir`] (or an
//! existing one under [`HostOptions::adopt`], when the operator allows it;
//! or a new one the caller's tar is unpacked into, [`unpack`]),
//! with a toolset of the server's policy whose `changes` baseline is the
//! workspace at creation. An idle sandbox holds no thread and no process:
//! its provider starts lazily, and a command's reader thread lives as long
//! as the command.
//!
//! The host's directory and the adoptable one are `host_private_dirs` of
//! every sandbox it opens: a command sees its own workspace there, never
//! another sandbox's.
//!
//! Destroying a sandbox kills every command it runs (and waits until each
//! is reaped), ends its toolset's run and removes the directory it made.

pub mod http;
pub mod unpack;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::config::{Config, Mode};
use crate::error::{Error, ErrorKind, Result};
use crate::host_env::HostEnv;
use crate::path::WorkspacePath;
use crate::remote::wire;
use crate::sandbox::{DirEntry, ExecSpec, ExitStatus, Metadata, OpenFile, ProcessHandle, Sandbox};
use crate::sync::lock;
use crate::toolset::Toolset;
use crate::workspace::{ToolsetFactory, Workspace};

/// Default cap on the sandboxes one host holds at once.
pub const MAX_SANDBOXES: usize = 10_000;
/// Bytes read from a command's output at a time.
pub const OUTPUT_CHUNK_BYTES: usize = 64 * 1024;
/// Longest a stdin write waits for the command to read.
pub const STDIN_WAIT: Duration = Duration::from_secs(30);
/// Longest a destroy waits for the commands it killed to be reaped.
pub const DESTROY_WAIT: Duration = Duration::from_secs(10);
/// How often a destroy looks whether the tool calls under way ended.
const IN_FLIGHT_POLL: Duration = Duration::from_millis(5);
/// How long `cubby serve --host` keeps an idle sandbox by default (its
/// `--host-idle`), as long as an MCP session is kept idle.
pub const IDLE_EXPIRY: Duration = Duration::from_secs(3600);
/// The directory, in a host's [`HostOptions::dir`], that holds its
/// sandboxes' private artifact stores (no sandbox id starts with a dot).
pub const STORES_DIR: &str = ".stores";

/// What a host is made of.
#[derive(Clone, Debug)]
pub struct HostOptions {
    /// Where new workspaces are made (one directory per sandbox).
    pub dir: PathBuf,
    /// Existing directories under this one may be adopted as workspaces
    /// (`None`: callers may not name a directory).
    pub adopt: Option<PathBuf>,
    /// Most sandboxes held at once (default [`MAX_SANDBOXES`]).
    pub max_sandboxes: usize,
    /// The config every sandbox is opened under.
    pub config: Config,
    /// The environment snapshot.
    pub env: HostEnv,
    /// A sandbox with no command running and no request about it for this
    /// long is destroyed by [`Host::expire_idle`] (`None`: never). What a
    /// caller that died without its destroy leaves (a `remote` near side
    /// killed, a partition) goes then.
    pub idle: Option<Duration>,
}

/// The sandboxes of one server.
pub struct Host {
    options: HostOptions,
    sandboxes: Mutex<HashMap<String, Arc<Hosted>>>,
    next: AtomicU64,
    /// A per-process prefix of ids (random), so ids are not guessed.
    salt: u64,
    /// Told the id of each sandbox about to be destroyed ([`Host::on_destroy`]).
    on_destroy: Mutex<Vec<DestroyHook>>,
    /// Asked whether a sandbox is in use elsewhere ([`Host::on_busy`]).
    on_busy: Mutex<Vec<BusyHook>>,
    /// Adopted roots of sandboxes being destroyed (off the list, their
    /// commands not yet reaped): still nested with nothing new.
    dying: Mutex<Vec<PathBuf>>,
}

/// What [`Host::on_busy`] registers.
pub type BusyHook = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// What [`Host::on_destroy`] registers.
pub type DestroyHook = Arc<dyn Fn(&str) + Send + Sync>;

/// One hosted sandbox.
pub struct Hosted {
    root: PathBuf,
    adopted: bool,
    sandbox: Arc<dyn Sandbox>,
    /// Fresh runs on the sandbox (the MCP sessions bound to it).
    factory: ToolsetFactory,
    toolset: Toolset,
    commands: Mutex<HashMap<u64, Arc<Running>>>,
    reaped: Condvar,
    next_command: AtomicU64,
    destroyed: AtomicBool,
    /// When a request last named it, or its last command ended.
    last_used: Mutex<Instant>,
    /// Tool calls on its toolset running now (`/v1/.../tools/{name}`).
    in_flight: AtomicU64,
}

/// A command running in a hosted sandbox.
pub struct Running {
    handle: Box<dyn ProcessHandle>,
    stdin: Mutex<Option<Box<dyn Write + Send>>>,
    argv: Vec<String>,
    started: Instant,
    ended: AtomicBool,
}

impl Running {
    /// Kills the command's tree unless it has ended (a dropped client).
    pub fn kill_unless_ended(&self) {
        if !self.ended.load(Ordering::SeqCst) {
            self.handle.kill_tree();
        }
    }
}

/// A command just started: its number, its shown id, and what
/// [`Started::pump`] drains.
pub struct Started {
    /// Its number in the sandbox.
    pub command: u64,
    /// The id its provider shows (a pid).
    pub pid: u32,
    /// The command (for a kill when the client goes).
    pub running: Arc<Running>,
    output: Box<dyn Read + Send>,
    on_exit: Option<Box<dyn FnOnce() + Send>>,
    hosted: Arc<Hosted>,
}

impl Started {
    /// Reads the output to its end, handing each chunk to `sink` (false:
    /// nobody listens any more, the tree is killed and the rest drained),
    /// then waits for the command, releases it and returns its status.
    pub fn pump(mut self, mut sink: impl FnMut(&[u8]) -> bool) -> ExitStatus {
        let mut buf = vec![0u8; OUTPUT_CHUNK_BYTES];
        let mut listening = true;
        loop {
            match self.output.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if listening && !sink(&buf[..n]) {
                        listening = false;
                        self.running.handle.kill_tree();
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let status = self.running.handle.wait();
        self.running.ended.store(true, Ordering::SeqCst);
        *lock(&self.running.stdin) = None;
        if let Some(release) = self.on_exit.take() {
            release();
        }
        // Used until now: noted before it leaves the commands, so an expiry
        // never sees it gone with the old time (red-team pass 9, I3).
        *lock(&self.hosted.last_used) = Instant::now();
        lock(&self.hosted.commands).remove(&self.command);
        self.hosted.reaped.notify_all();
        status
    }
}

fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .is_err()
    {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        bytes = ((t as u64) ^ u64::from(std::process::id()).rotate_left(32)).to_le_bytes();
    }
    u64::from_le_bytes(bytes)
}

fn not_found(id: &str) -> Error {
    Error::new(
        ErrorKind::NotFound,
        format!(
            "no sandbox `{}` on this host (destroyed, expired after being idle, or never made); \
             create one with POST /v1/sandboxes",
            crate::path::escape_name(id.as_bytes())
        ),
    )
}

impl Host {
    /// A host making workspaces under `options.dir` (made if missing,
    /// private to the user).
    ///
    /// # Errors
    ///
    /// `invalid_input` when the directories cannot be made or resolved.
    pub fn new(mut options: HostOptions) -> Result<Host> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&options.dir)
            .map_err(|e| {
                Error::invalid_input(format!(
                    "cannot make the sandboxes' directory {}: {e}",
                    options.dir.display()
                ))
            })?;
        options.dir = options.dir.canonicalize().map_err(|e| {
            Error::invalid_input(format!("cannot resolve {}: {e}", options.dir.display()))
        })?;
        let stores = options.dir.join(STORES_DIR);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&stores)
            .or_else(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists if stores.is_dir() && !stores.is_symlink() => {
                    Ok(())
                }
                _ => Err(e),
            })
            .map_err(|e| {
                Error::invalid_input(format!(
                    "cannot make the artifact stores' directory {}: {e}",
                    stores.display()
                ))
            })?;
        if let Some(adopt) = &options.adopt {
            options.adopt = Some(adopt.canonicalize().map_err(|e| {
                Error::invalid_input(format!(
                    "cannot resolve the adoptable directory {}: {e}",
                    adopt.display()
                ))
            })?);
        }
        if options.max_sandboxes == 0 {
            options.max_sandboxes = MAX_SANDBOXES;
        }
        // A command sees its own workspace of these, never the others'.
        for dir in std::iter::once(&options.dir).chain(options.adopt.as_ref()) {
            let text = dir.to_str().ok_or_else(|| {
                Error::invalid_input(format!(
                    "the sandboxes' directory {} is not UTF-8; choose another",
                    dir.display()
                ))
            })?;
            options.config.host_private_dirs.push(text.to_string());
        }
        Ok(Host {
            options,
            sandboxes: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            salt: random_u64(),
            on_destroy: Mutex::new(Vec::new()),
            on_busy: Mutex::new(Vec::new()),
            dying: Mutex::new(Vec::new()),
        })
    }

    /// Where the sandboxes' private artifact stores are kept: in the
    /// host's directory, which every sandbox's commands have covered, so
    /// none reads another's (nor its own) published files.
    pub fn stores_dir(&self) -> PathBuf {
        self.options.dir.join(STORES_DIR)
    }

    /// The sandboxes held now.
    pub fn len(&self) -> usize {
        lock(&self.sandboxes).len()
    }

    /// True when no sandbox is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The ids of the sandboxes held, sorted.
    pub fn ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = lock(&self.sandboxes).keys().cloned().collect();
        ids.sort();
        ids
    }

    fn get(&self, id: &str) -> Result<Arc<Hosted>> {
        let hosted = lock(&self.sandboxes)
            .get(id)
            .cloned()
            .ok_or_else(|| not_found(id))?;
        *lock(&hosted.last_used) = Instant::now();
        Ok(hosted)
    }

    /// Notes a use of sandbox `id` now (a request of an MCP session bound
    /// to it), which keeps it from [`Host::expire_idle`]; an unknown id is
    /// ignored.
    pub fn touch(&self, id: &str) {
        let _ = self.get(id);
    }

    /// Destroys every sandbox idle at `now` for [`HostOptions::idle`] or
    /// longer (no command running, no request since), as
    /// [`Host::destroy`] does; returns their ids. Nothing without `idle`.
    pub fn expire_idle(&self, now: Instant) -> Vec<String> {
        let Some(idle) = self.options.idle else {
            return Vec::new();
        };
        let quiet = |h: &Hosted| {
            h.in_flight.load(Ordering::SeqCst) == 0
                && lock(&h.commands).is_empty()
                && now.saturating_duration_since(*lock(&h.last_used)) >= idle
                && !h
                    .toolset
                    .processes()
                    .list()
                    .iter()
                    .any(|p| p.ended().is_none())
        };
        let candidates: Vec<String> = lock(&self.sandboxes)
            .iter()
            .filter(|(_, h)| quiet(h))
            .map(|(id, _)| id.clone())
            .collect();
        // Asked outside the list's lock: a hook takes locks of its own that
        // are held while the host is called.
        let hooks: Vec<BusyHook> = lock(&self.on_busy).clone();
        let unused: Vec<String> = candidates
            .into_iter()
            .filter(|id| !hooks.iter().any(|busy| busy(id)))
            .collect();
        let expired: Vec<(String, Arc<Hosted>)> = {
            let mut sandboxes = lock(&self.sandboxes);
            let mut expired = Vec::new();
            for id in unused {
                // Looked at again: a request may have come meanwhile.
                if sandboxes.get(&id).is_some_and(|h| quiet(h))
                    && let Some(hosted) = sandboxes.remove(&id)
                {
                    self.dying_from(&hosted);
                    expired.push((id, hosted));
                }
            }
            expired
        };
        for (id, hosted) in &expired {
            tracing::info!("sandbox {id} expired after {idle:?} idle");
            self.finish(id, hosted);
        }
        expired.into_iter().map(|(id, _)| id).collect()
    }

    /// [`HostOptions::idle`].
    pub fn idle(&self) -> Option<Duration> {
        self.options.idle
    }

    /// The directory `requested` names, when the operator lets callers
    /// adopt directories under [`HostOptions::adopt`].
    fn adoptable(&self, requested: &str) -> Result<(PathBuf, (u64, u64))> {
        let Some(allowed) = &self.options.adopt else {
            return Err(Error::new(
                ErrorKind::Denied,
                "this host makes every workspace itself; create the sandbox without `root` \
                 (the operator allows adopting directories with `serve --host-adopt DIR`)",
            ));
        };
        let path = Path::new(requested);
        if !path.is_absolute() {
            return Err(Error::invalid_input(format!(
                "root `{}` must be an absolute path",
                crate::path::escape_name(requested.as_bytes())
            )));
        }
        // One answer for every refusal, and nothing looked at outside the
        // adoptable directory: whether a host path exists, or is a
        // directory, is not the caller's to learn (red-team pass 6, F4).
        let refused = || {
            Error::new(
                ErrorKind::Denied,
                format!(
                    "root `{}` is not a directory this host lets callers adopt; name one the \
                     operator offers (serve --host-adopt), or create the sandbox without `root`",
                    crate::path::escape_name(requested.as_bytes())
                ),
            )
        };
        // Resolved beneath the adoptable directory only (`openat2` with
        // `RESOLVE_BENEATH`): a `..` or a link that leads out fails before
        // anything outside is looked at (`canonicalize` walked a detour such
        // as `DIR/../../etc/../DIR/a` on the host's tree, and answered
        // whether `/etc` exists: red-team pass 7, G4).
        let Ok(rel) = path.strip_prefix(allowed) else {
            return Err(refused());
        };
        if rel.as_os_str().is_empty()
            || rel
                .components()
                .any(|c| !matches!(c, std::path::Component::Normal(_)))
        {
            return Err(refused());
        }
        use rustix::fs::{Mode, OFlags, ResolveFlags};
        let base = rustix::fs::open(
            allowed.as_path(),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|_| refused())?;
        let dir = rustix::fs::openat2(
            &base,
            rel,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
        )
        .map_err(|_| refused())?;
        let resolved = std::fs::read_link(format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&dir)
        ))
        .map_err(|_| refused())?;
        let identity = rustix::fs::fstat(&dir)
            .map(|st| (st.st_dev, st.st_ino))
            .map_err(|_| refused())?;
        // Never the host's own directory of workspaces, nor one holding it
        // (another sandbox's workspace, or all of them).
        let made = &self.options.dir;
        if resolved == *allowed
            || !resolved.starts_with(allowed)
            || resolved.starts_with(made)
            || made.starts_with(&resolved)
            || self.nests_with_a_live_one(&lock(&self.sandboxes), &resolved)
        {
            return Err(refused());
        }
        Ok((resolved, identity))
    }

    /// Whether `root` lies strictly inside a live sandbox's adopted
    /// workspace, or holds one. Such a root is refused: the outer
    /// sandbox's commands write the inner one's workspace, and can swap
    /// a directory on the way to it for a link between the check and the
    /// open (red-team pass 8, H1). A sandbox being destroyed counts until
    /// its commands are reaped (pass 9, L1). The same directory adopted
    /// twice is one workspace, and is allowed.
    fn nests_with_a_live_one(&self, sandboxes: &HashMap<String, Arc<Hosted>>, root: &Path) -> bool {
        let nests =
            |other: &Path| other != root && (root.starts_with(other) || other.starts_with(root));
        sandboxes.values().any(|h| h.adopted && nests(&h.root))
            || lock(&self.dying).iter().any(|r| nests(r))
    }

    /// Creates a sandbox: a new empty workspace, or the adopted `root`
    /// (see also [`Host::create_from_tar`]).
    ///
    /// # Errors
    ///
    /// `limit` at [`HostOptions::max_sandboxes`]; `denied` for a root that
    /// may not be adopted; the provider's own errors.
    pub fn create(&self, request: &wire::CreateRequest) -> Result<wire::Created> {
        self.create_with(request, None)
    }

    /// Creates a sandbox whose new workspace holds `archive` (a tar,
    /// optionally gzipped), unpacked under [`unpack`]'s rules before the
    /// sandbox opens (so its `changes` baseline is the unpacked tree).
    /// Files are capped at the server's `write_file` limit (as a `PUT` of
    /// one), the archive at [`unpack::Caps`]' defaults.
    ///
    /// # Errors
    ///
    /// As [`Host::create`]; `invalid_input`, `path_escape`, `denied` or
    /// `too_large` for an archive the rules refuse (the whole create
    /// fails, the workspace is removed).
    pub fn create_from_tar(&self, mut archive: impl std::io::Read) -> Result<wire::Created> {
        self.create_with(&wire::CreateRequest::default(), Some(&mut archive))
    }

    fn create_with(
        &self,
        request: &wire::CreateRequest,
        archive: Option<&mut dyn std::io::Read>,
    ) -> Result<wire::Created> {
        if archive.is_some() && request.root.is_some() {
            return Err(Error::invalid_input(
                "a sandbox is made from a tar or over an adopted `root`, not both",
            ));
        }
        if self.len() >= self.options.max_sandboxes {
            return Err(Error::new(
                ErrorKind::Limit,
                format!(
                    "this host holds {} sandboxes, its limit; destroy one first",
                    self.options.max_sandboxes
                ),
            ));
        }
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let id = format!("{n}-{:016x}", self.salt ^ random_u64());
        let (root, adopted, identity) = match &request.root {
            Some(requested) => {
                let (root, identity) = self.adoptable(requested)?;
                (root, true, Some(identity))
            }
            None => {
                let root = self.options.dir.join(&id);
                use std::os::unix::fs::DirBuilderExt;
                std::fs::DirBuilder::new()
                    .mode(0o700)
                    .create(&root)
                    .map_err(|e| Error::internal(format!("cannot make a workspace: {e}")))?;
                (root, false, None)
            }
        };
        let made = (|| {
            let mut workspace =
                Workspace::from_config(&root, &self.options.config, None, &self.options.env)?;
            workspace.keep_store_in(&self.stores_dir())?;
            if let Some(archive) = archive {
                let limits = workspace.policy().limits();
                let caps = unpack::Caps::with_file_limit(
                    limits.write_file.max_bytes.max(limits.edit_file.max_bytes),
                );
                unpack::unpack(archive, &root, workspace.policy(), &caps)?;
            }
            let sandbox = workspace.open_sandbox()?;
            // The directory opened is the one checked: a path is resolved
            // again by the open, and a link swapped in meanwhile would move
            // it (red-team pass 8, H1).
            if let Some(checked) = identity {
                if sandbox.fs().root_identity() != Some(checked) {
                    return Err(Error::new(
                        ErrorKind::Denied,
                        format!(
                            "root `{}` changed while the sandbox was being made; try again",
                            root.display()
                        ),
                    ));
                }
            }
            let factory = workspace.factory_over(sandbox.clone(), true)?;
            let toolset = factory()?;
            Ok::<_, Error>((sandbox, factory, toolset))
        })();
        let (sandbox, factory, toolset) = match made {
            Ok(made) => made,
            Err(e) => {
                if !adopted {
                    let _ = std::fs::remove_dir_all(&root);
                }
                return Err(e);
            }
        };
        let commands = sandbox.supports_commands();
        let ws_root = WorkspacePath::root();
        let created = wire::Created {
            id: id.clone(),
            provider: sandbox.kind().as_str().to_string(),
            commands,
            command_root: sandbox
                .command_path(&ws_root)
                .map(|p| wire::encode_os(p.as_os_str())),
            shown_root: sandbox.show_cwd(&ws_root),
            idle_secs: self.options.idle.map(|d| d.as_secs().max(1)),
        };
        let hosted = Arc::new(Hosted {
            root,
            adopted,
            sandbox,
            factory,
            toolset,
            commands: Mutex::new(HashMap::new()),
            reaped: Condvar::new(),
            next_command: AtomicU64::new(1),
            destroyed: AtomicBool::new(false),
            last_used: Mutex::new(Instant::now()),
            in_flight: AtomicU64::new(0),
        });
        let mut sandboxes = lock(&self.sandboxes);
        // Adopted roots nest with no live one's: checked again where it
        // counts, against creates running side by side.
        if adopted && self.nests_with_a_live_one(&sandboxes, &hosted.root) {
            drop(sandboxes);
            hosted.destroy();
            return Err(Error::new(
                ErrorKind::Denied,
                format!(
                    "root `{}` lies inside another sandbox's workspace, or holds one; adopt \
                     directories apart",
                    hosted.root.display()
                ),
            ));
        }
        // Checked again where it counts: creates running side by side
        // never hold more than the cap.
        if sandboxes.len() >= self.options.max_sandboxes {
            drop(sandboxes);
            hosted.destroy();
            return Err(Error::new(
                ErrorKind::Limit,
                format!(
                    "this host holds {} sandboxes, its limit; destroy one first",
                    self.options.max_sandboxes
                ),
            ));
        }
        sandboxes.insert(id, hosted);
        Ok(created)
    }

    /// Destroys a sandbox: every command killed and reaped, its run ended,
    /// the workspace it made removed.
    ///
    /// # Errors
    ///
    /// `not_found` for an unknown id.
    pub fn destroy(&self, id: &str) -> Result<()> {
        let hosted = {
            let mut sandboxes = lock(&self.sandboxes);
            let hosted = sandboxes.remove(id).ok_or_else(|| not_found(id))?;
            self.dying_from(&hosted);
            hosted
        };
        self.finish(id, &hosted);
        Ok(())
    }

    /// Notes an adopted root as dying, under the list's lock (the caller
    /// holds it, having just taken the sandbox off): a root nested with it
    /// is refused until its commands are reaped (red-team pass 9, L1).
    fn dying_from(&self, hosted: &Hosted) {
        if hosted.adopted {
            lock(&self.dying).push(hosted.root.clone());
        }
    }

    /// Ends a sandbox taken off the list: refuses new runs from now on,
    /// ends those bound to it, kills and reaps its commands, removes what
    /// it made; then its root is no longer dying.
    fn finish(&self, id: &str, hosted: &Hosted) {
        hosted.destroyed.store(true, Ordering::SeqCst);
        self.tell_destroyed(id);
        hosted.destroy();
        // A tool call under way when the destroy came ends now (its run is
        // over: a command it was starting is killed as it arrives); the
        // root stays dying until it has (red-team pass 10, N1).
        let deadline = Instant::now() + DESTROY_WAIT;
        while hosted.in_flight.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            std::thread::sleep(IN_FLIGHT_POLL);
        }
        if hosted.adopted {
            let mut dying = lock(&self.dying);
            if let Some(i) = dying.iter().position(|r| *r == hosted.root) {
                dying.swap_remove(i);
            }
        }
    }

    /// Destroys every sandbox (the server is ending).
    pub fn destroy_all(&self) {
        let all: Vec<(String, Arc<Hosted>)> = {
            let mut sandboxes = lock(&self.sandboxes);
            let all: Vec<(String, Arc<Hosted>)> = sandboxes.drain().collect();
            for (_, hosted) in &all {
                self.dying_from(hosted);
            }
            all
        };
        for (id, hosted) in all {
            self.finish(&id, &hosted);
        }
    }

    /// Calls `hook` with a sandbox's id when [`Host::expire_idle`] is about
    /// to expire it: true keeps it (what holds runs of its own on it, MCP
    /// sessions bound to it, says whether one is open).
    pub fn on_busy(&self, hook: BusyHook) {
        lock(&self.on_busy).push(hook);
    }

    /// Calls `hook` with the id of every sandbox about to be destroyed
    /// (before its commands are killed and its workspace removed): what
    /// holds runs of its own on it (MCP sessions bound to it) ends them.
    pub fn on_destroy(&self, hook: DestroyHook) {
        lock(&self.on_destroy).push(hook);
    }

    fn tell_destroyed(&self, id: &str) {
        let hooks: Vec<DestroyHook> = lock(&self.on_destroy).clone();
        for hook in hooks {
            hook(id);
        }
    }

    /// A factory of fresh runs (toolsets) on sandbox `id`, under the
    /// host's policy, for an MCP session bound to it; once the sandbox is
    /// destroyed, it answers `not_found`.
    ///
    /// # Errors
    ///
    /// `not_found` for an unknown id.
    pub fn factory(&self, id: &str) -> Result<ToolsetFactory> {
        let hosted = Arc::downgrade(&self.get(id)?);
        let id = id.to_string();
        Ok(Arc::new(move || match hosted.upgrade() {
            Some(h) if !h.destroyed.load(Ordering::SeqCst) => (h.factory)(),
            _ => Err(not_found(&id)),
        }))
    }

    /// Starts a command in sandbox `id`.
    ///
    /// # Errors
    ///
    /// `not_found`; `invalid_input` for a malformed request; the
    /// provider's errors.
    pub fn exec(&self, id: &str, request: wire::ExecRequest) -> Result<Started> {
        let hosted = self.get(id)?;
        if request.argv.is_empty() {
            return Err(Error::invalid_input("argv is empty; name a program"));
        }
        let env = request
            .env
            .iter()
            .map(|(k, v)| {
                Ok((
                    wire::decode_os(k, "an env name")?,
                    wire::decode_os(v, "an env value")?,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let spec = ExecSpec {
            argv: request.argv,
            cwd: wire::decode_path(&request.cwd)?,
            env,
            stdin: request.stdin,
            output_dir: request
                .output_dir
                .as_deref()
                .map(wire::decode_path)
                .transpose()?,
        };
        // Registered before the start, so that a destroy racing with it
        // either refuses the start or kills what started.
        let mut commands = lock(&hosted.commands);
        if hosted.destroyed.load(Ordering::SeqCst) {
            return Err(not_found(id));
        }
        let spawned = hosted.sandbox.exec(&spec)?;
        let command = hosted.next_command.fetch_add(1, Ordering::Relaxed);
        let pid = spawned.handle.id();
        let running = Arc::new(Running {
            handle: spawned.handle,
            stdin: Mutex::new(spawned.stdin),
            argv: spec.argv,
            started: Instant::now(),
            ended: AtomicBool::new(false),
        });
        commands.insert(command, running.clone());
        drop(commands);
        Ok(Started {
            command,
            pid,
            running,
            output: spawned.output,
            on_exit: spawned.on_exit,
            hosted,
        })
    }

    fn running(&self, id: &str, command: u64) -> Result<Arc<Running>> {
        self.get(id)?
            .commands
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&command)
            .cloned()
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::NotFound,
                    format!("no running command {command} in sandbox `{id}`; it has ended"),
                )
            })
    }

    /// Stops (`SIGTERM`) or kills (the whole tree) a command.
    ///
    /// # Errors
    ///
    /// `not_found` for an unknown sandbox or an ended command.
    pub fn signal(&self, id: &str, command: u64, kill: bool) -> Result<()> {
        let running = self.running(id, command)?;
        if kill {
            running.handle.kill_tree();
        } else {
            running.handle.stop();
        }
        Ok(())
    }

    /// Writes `input` to a command's stdin, waiting up to [`STDIN_WAIT`]
    /// for it to read; the bytes written.
    ///
    /// # Errors
    ///
    /// `not_found`; `invalid_input` for a command without stdin or one
    /// that no longer reads.
    pub fn write_stdin(&self, id: &str, command: u64, input: &[u8]) -> Result<usize> {
        let running = self.running(id, command)?;
        let deadline = Instant::now() + STDIN_WAIT;
        let mut written = 0;
        while written < input.len() {
            let mut sink = lock(&running.stdin);
            let Some(stdin) = sink.as_mut() else {
                return Err(Error::invalid_input(format!(
                    "command {command} has no stdin (started without it, or closed)"
                )));
            };
            match stdin.write(&input[written..]) {
                Ok(0) => {}
                Ok(n) => written += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => {
                    return Err(Error::invalid_input(format!(
                        "command {command} no longer reads its stdin: {e}"
                    )));
                }
            }
            drop(sink);
            if written < input.len() {
                if Instant::now() >= deadline {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        Ok(written)
    }

    /// Ends a command's input.
    ///
    /// # Errors
    ///
    /// `not_found`.
    pub fn close_stdin(&self, id: &str, command: u64) -> Result<()> {
        *lock(&self.running(id, command)?.stdin) = None;
        Ok(())
    }

    /// The live commands of a sandbox, by number.
    ///
    /// # Errors
    ///
    /// `not_found`.
    pub fn commands(&self, id: &str) -> Result<Vec<wire::CommandInfo>> {
        let hosted = self.get(id)?;
        let mut list: Vec<wire::CommandInfo> = lock(&hosted.commands)
            .iter()
            .map(|(n, r)| wire::CommandInfo {
                id: *n,
                pid: r.handle.id(),
                argv: r.argv.clone(),
                seconds: r.started.elapsed().as_secs_f64(),
            })
            .collect();
        list.sort_by_key(|c| c.id);
        Ok(list)
    }

    /// Metadata of a path of sandbox `id`.
    ///
    /// # Errors
    ///
    /// `not_found`, and the file system's.
    pub fn metadata(&self, id: &str, path: &WorkspacePath) -> Result<Metadata> {
        self.get(id)?.sandbox.fs().metadata(path)
    }

    /// Opens a regular file of sandbox `id`.
    ///
    /// # Errors
    ///
    /// `denied` for a path the server's `deny_read` covers; as
    /// [`crate::FileSystem::open`].
    pub fn open(&self, id: &str, path: &WorkspacePath) -> Result<OpenFile> {
        let hosted = self.get(id)?;
        hosted.toolset.policy().check_read(path)?;
        hosted.sandbox.fs().open(path)
    }

    /// At most `max` entries of a directory of sandbox `id`.
    ///
    /// # Errors
    ///
    /// As [`crate::FileSystem::read_dir_bounded`].
    pub fn read_dir(
        &self,
        id: &str,
        path: &WorkspacePath,
        max: usize,
    ) -> Result<(Vec<DirEntry>, bool)> {
        self.get(id)?.sandbox.fs().read_dir_bounded(path, max)
    }

    /// Sandbox `id`, when the server's policy lets a caller change `path`
    /// in it: not in mode `read-only`, not git's executable surface, a
    /// protected path or a `deny_read` one (as the file tools).
    fn writable(&self, id: &str, path: &WorkspacePath) -> Result<Arc<Hosted>> {
        let hosted = self.get(id)?;
        let policy = hosted.toolset.policy();
        if policy.mode() == Mode::ReadOnly {
            return Err(Error::denied(format!(
                "changing `{path}` is not allowed: this host serves its sandboxes read-only \
                 (mode read-only); read instead, or use a host that allows writes"
            )));
        }
        policy.check_write(path)?;
        Ok(hosted)
    }

    /// Writes a file of sandbox `id` atomically.
    ///
    /// # Errors
    ///
    /// `denied` where the server's policy refuses it ([`Host::writable`]);
    /// `too_large` past the server's `write_file`/`edit_file` limits (the
    /// larger: the near side's `edit_file` writes a whole file); as
    /// [`crate::FileSystem::write_atomic`].
    pub fn write(&self, id: &str, path: &WorkspacePath, content: &[u8]) -> Result<()> {
        let hosted = self.writable(id, path)?;
        let max = Host::file_limit(&hosted);
        if content.len() as u64 > max {
            return Err(Error::new(
                ErrorKind::TooLarge,
                format!(
                    "{} bytes for `{path}` is over this host's limit of {max} bytes a file \
                     (limits.write_file.max_bytes); write less",
                    content.len()
                ),
            ));
        }
        hosted.sandbox.fs().write_atomic(path, content)
    }

    /// The largest file [`Host::write`] takes in sandbox `id`, in bytes.
    ///
    /// # Errors
    ///
    /// `not_found`.
    pub fn write_limit(&self, id: &str) -> Result<u64> {
        Ok(Host::file_limit(&*self.get(id)?))
    }

    /// The larger of a sandbox's `write_file` and `edit_file` limits (the
    /// near side's `edit_file` writes a whole file).
    fn file_limit(hosted: &Hosted) -> u64 {
        let limits = hosted.toolset.policy().limits();
        limits.write_file.max_bytes.max(limits.edit_file.max_bytes)
    }

    /// Makes a directory (and its parents) in sandbox `id`.
    ///
    /// # Errors
    ///
    /// `denied` where the server's policy refuses it; as
    /// [`crate::FileSystem::create_dir_all`].
    pub fn mkdir(&self, id: &str, path: &WorkspacePath) -> Result<()> {
        self.writable(id, path)?.sandbox.fs().create_dir_all(path)
    }

    /// Removes an empty directory of sandbox `id`.
    ///
    /// # Errors
    ///
    /// `denied` where the server's policy refuses it; as
    /// [`crate::FileSystem::remove_empty_dir`].
    pub fn rmdir(&self, id: &str, path: &WorkspacePath) -> Result<bool> {
        self.writable(id, path)?.sandbox.fs().remove_empty_dir(path)
    }

    /// Calls tool `name` of sandbox `id`'s toolset (the server's policy):
    /// `{"text", "structured", "is_error"}`.
    ///
    /// # Errors
    ///
    /// `not_found` for an unknown sandbox.
    pub fn call_tool(&self, id: &str, name: &str, arguments: Value) -> Result<Value> {
        let hosted = self.get(id)?;
        hosted.in_flight.fetch_add(1, Ordering::SeqCst);
        // Counted first, then checked: a destroy either sees this call in
        // flight (and waits for it) or this call sees the destroy.
        if hosted.destroyed.load(Ordering::SeqCst) {
            hosted.in_flight.fetch_sub(1, Ordering::SeqCst);
            return Err(not_found(id));
        }
        let out = hosted.toolset.call(name, arguments);
        *lock(&hosted.last_used) = Instant::now();
        hosted.in_flight.fetch_sub(1, Ordering::SeqCst);
        Ok(serde_json::json!({
            "text": out.text,
            "structured": out.structured,
            "is_error": out.is_error,
        }))
    }
}

impl Hosted {
    fn destroy(&self) {
        let mut commands = lock(&self.commands);
        self.destroyed.store(true, Ordering::SeqCst);
        for running in commands.values() {
            running.handle.kill_tree();
        }
        let deadline = Instant::now() + DESTROY_WAIT;
        while !commands.is_empty() {
            let now = Instant::now();
            if now >= deadline {
                tracing::warn!(
                    "{} commands of a destroyed sandbox were not reaped within {:?}",
                    commands.len(),
                    DESTROY_WAIT
                );
                break;
            }
            for running in commands.values() {
                running.handle.kill_tree();
            }
            commands = self
                .reaped
                .wait_timeout(commands, (deadline - now).min(Duration::from_millis(100)))
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        drop(commands);
        let _ = self.toolset.end();
        if !self.adopted {
            if let Err(e) = std::fs::remove_dir_all(&self.root) {
                tracing::warn!("cannot remove the workspace {}: {e}", self.root.display());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host of default sandboxes in `dir` that lets callers adopt
    /// directories under `adopt`.
    fn adopting_host(dir: PathBuf, adopt: &Path) -> Host {
        Host::new(HostOptions {
            dir,
            adopt: Some(adopt.to_path_buf()),
            max_sandboxes: 0,
            config: Config::default(),
            env: HostEnv::default(),
            idle: None,
        })
        .unwrap()
    }

    /// Red-team pass 6, F4: `root` told whether a host path exists (404
    /// for a missing one, 403 for one outside). Every refusal is now the
    /// same `denied`, whatever is there.
    #[test]
    fn every_refused_root_gets_the_same_answer() {
        let dir = tempfile::tempdir().unwrap();
        let adopt = dir.path().join("adopt");
        std::fs::create_dir_all(adopt.join("a")).unwrap();
        std::fs::write(adopt.join("file"), "").unwrap();
        // Links planted in the adoptable directory that lead out and back
        // in, through a directory that exists and one that does not.
        let canonical = adopt.canonicalize().unwrap();
        std::os::unix::fs::symlink(
            format!("/etc/..{}", canonical.display()),
            adopt.join("escape"),
        )
        .unwrap();
        std::os::unix::fs::symlink(
            format!("/nonexistent/..{}", canonical.display()),
            adopt.join("gone"),
        )
        .unwrap();
        let host = adopting_host(dir.path().join("sandboxes"), &adopt);
        let adopt = adopt.canonicalize().unwrap();
        let answers: Vec<(ErrorKind, String)> = [
            "/nonexistent-cubby-path".to_string(),
            "/etc".to_string(),
            "/etc/passwd".to_string(),
            format!("{}/../../etc", adopt.display()),
            format!("{}/missing", adopt.display()),
            format!("{}/file", adopt.display()),
            adopt.display().to_string(),
            // Detours that come back in (red-team pass 7, G4): one through
            // a directory that exists, one through one that does not.
            format!(
                "{}/../../../../etc/..{}/a",
                adopt.display(),
                adopt.display()
            ),
            format!(
                "{}/../../../../nonexistent/..{}/a",
                adopt.display(),
                adopt.display()
            ),
            format!("{}/a/../a", adopt.display()),
            format!("{}/escape/a", adopt.display()),
            format!("{}/gone/a", adopt.display()),
        ]
        .iter()
        .map(|root| {
            let err = host
                .create(&wire::CreateRequest {
                    root: Some(root.clone()),
                })
                .expect_err("refused");
            let message = err.message().replace(root.as_str(), "ROOT");
            (err.kind(), message)
        })
        .collect();
        for answer in &answers {
            assert_eq!(answer, &answers[0], "{answers:#?}");
        }
        assert_eq!(answers[0].0, ErrorKind::Denied);
        assert!(
            !answers[0].1.contains(&adopt.display().to_string()),
            "{answers:?}"
        );
        assert!(host.is_empty());
    }

    /// The host's own directory of workspaces, inside the adoptable one,
    /// is never adopted, nor a directory holding it (red-team pass 7, G3:
    /// a sandbox adopting it read and wrote every other's workspace).
    #[test]
    fn the_hosts_own_directory_is_never_adopted() {
        let dir = tempfile::tempdir().unwrap();
        let adopt = dir.path().join("adopt");
        std::fs::create_dir_all(adopt.join("a")).unwrap();
        let host = adopting_host(adopt.join("a/hd"), &adopt);
        std::fs::create_dir_all(adopt.join("a/hd/1-x")).unwrap();
        let adopt = adopt.canonicalize().unwrap();
        for root in ["a/hd", "a/hd/1-x", "a"] {
            let err = host
                .create(&wire::CreateRequest {
                    root: Some(format!("{}/{root}", adopt.display())),
                })
                .expect_err("refused");
            assert_eq!(err.kind(), ErrorKind::Denied, "{root}: {}", err.message());
        }
        assert!(host.is_empty());
    }

    /// Red-team pass 8, H1: a sandbox whose workspace was adopted could
    /// swap a directory in it for a link while a nested one was adopted,
    /// and the open followed the link (another sandbox's workspace, the
    /// token's directory). A root inside a live adopted workspace, or
    /// holding one, is refused; apart, or once the other is destroyed, it
    /// is taken.
    #[test]
    fn a_root_nested_with_a_live_adopted_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let adopt = dir.path().join("adopt");
        for d in ["a/r", "b", "c/d"] {
            std::fs::create_dir_all(adopt.join(d)).unwrap();
        }
        let host = adopting_host(dir.path().join("hd"), &adopt);
        let adopt = adopt.canonicalize().unwrap();
        let create = |root: &str| {
            host.create(&wire::CreateRequest {
                root: Some(format!("{}/{root}", adopt.display())),
            })
        };
        let outer = create("a").unwrap();
        let err = create("a/r").expect_err("inside a live one");
        assert_eq!(err.kind(), ErrorKind::Denied, "{}", err.message());
        create("c/d").unwrap();
        let err = create("c").expect_err("holding a live one");
        assert_eq!(err.kind(), ErrorKind::Denied, "{}", err.message());
        // Apart, and the same directory again (one workspace), are taken.
        create("b").unwrap();
        create("a").unwrap();
        host.destroy(&outer.id).unwrap();
        // Another sandbox over `a` is still there.
        assert_eq!(create("a/r").unwrap_err().kind(), ErrorKind::Denied);
        host.destroy_all();
        create("a/r").unwrap();
        host.destroy_all();
    }

    /// The open is checked against the directory the check resolved: a
    /// root whose path names another directory by the time the sandbox is
    /// opened is refused (the identity the file system reports).
    #[test]
    fn a_local_root_reports_the_identity_of_the_directory_it_opened() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("one")).unwrap();
        let fs = crate::sandbox::LocalFs::open(&dir.path().join("one")).unwrap();
        let st = rustix::fs::stat(dir.path().join("one")).unwrap();
        assert_eq!(
            crate::sandbox::FileSystem::root_identity(&fs),
            Some((st.st_dev, st.st_ino))
        );
        std::fs::rename(dir.path().join("one"), dir.path().join("two")).unwrap();
        std::fs::create_dir(dir.path().join("one")).unwrap();
        let now = rustix::fs::stat(dir.path().join("one")).unwrap();
        assert_ne!(
            crate::sandbox::FileSystem::root_identity(&fs),
            Some((now.st_dev, now.st_ino))
        );
    }

    /// A host of `local` sandboxes in `dir/hd` that expire after `idle`.
    fn local_host(dir: &Path, idle: Duration) -> Host {
        Host::new(HostOptions {
            dir: dir.join("hd"),
            adopt: None,
            max_sandboxes: 0,
            config: Config {
                provider: Some(crate::ProviderKind::Local),
                ..Config::default()
            },
            env: HostEnv::capture(),
            idle: Some(idle),
        })
        .unwrap()
    }

    /// A sandbox nobody uses goes after [`HostOptions::idle`] (a caller
    /// that died without its destroy left it); one with a command running,
    /// or named by a request since, stays.
    #[test]
    fn idle_sandboxes_expire_and_busy_ones_stay() {
        let dir = tempfile::tempdir().unwrap();
        let idle = Duration::from_secs(60);
        let host = local_host(dir.path(), idle);
        let make = || host.create(&wire::CreateRequest { root: None }).unwrap().id;
        let (quiet, busy, used) = (make(), make(), make());
        let started = host
            .exec(
                &busy,
                wire::ExecRequest {
                    argv: vec!["/bin/sleep".into(), "30".into()],
                    cwd: String::new(),
                    env: Vec::new(),
                    stdin: false,
                    output_dir: None,
                },
            )
            .unwrap();
        let later = Instant::now() + idle;
        assert!(host.expire_idle(Instant::now()).is_empty());
        host.touch(&used);
        let quiet_root = dir.path().join("hd").canonicalize().unwrap().join(&quiet);
        assert!(quiet_root.is_dir());
        let expired = host.expire_idle(later - Duration::from_millis(1));
        assert_eq!(expired, vec![quiet.clone()]);
        assert!(!quiet_root.exists(), "its workspace is removed");
        assert_eq!(
            host.destroy(&quiet).unwrap_err().kind(),
            ErrorKind::NotFound
        );
        // The busy one stays while its command runs.
        let mut later_still = host.expire_idle(later + idle);
        later_still.sort();
        assert_eq!(later_still, vec![used.clone()]);
        assert_eq!(host.ids(), vec![busy.clone()]);
        started.running.kill_unless_ended();
        started.pump(|_| true);
        assert!(host.expire_idle(Instant::now() + idle * 3).contains(&busy));
        assert!(host.is_empty());
    }

    /// Red-team pass 9, M1: commands the host did not start through `exec`
    /// (a tool call on the sandbox's toolset, a background process it
    /// started) counted for nothing, and the sandbox expired under them.
    #[test]
    fn a_sandbox_with_a_tool_call_or_a_process_running_does_not_expire() {
        let dir = tempfile::tempdir().unwrap();
        let idle = Duration::from_secs(60);
        let host = local_host(dir.path(), idle);
        let id = host.create(&wire::CreateRequest { root: None }).unwrap().id;
        let out = host
            .call_tool(
                &id,
                "start_process",
                serde_json::json!({"name": "slow", "command": "sleep 30"}),
            )
            .unwrap();
        assert_eq!(out["is_error"], serde_json::json!(false), "{out}");
        let later = Instant::now() + idle * 2;
        assert!(host.expire_idle(later).is_empty(), "a process runs");
        // A tool call in flight counts too.
        host.get(&id)
            .unwrap()
            .in_flight
            .fetch_add(1, Ordering::SeqCst);
        host.get(&id).unwrap().toolset.stop_processes();
        assert!(host.expire_idle(later).is_empty(), "a call is in flight");
        host.get(&id)
            .unwrap()
            .in_flight
            .fetch_sub(1, Ordering::SeqCst);
        // A hook that says it is in use (a bound MCP session) keeps it.
        let busy = Arc::new(AtomicBool::new(true));
        let flag = Arc::clone(&busy);
        host.on_busy(Arc::new(move |_| flag.load(Ordering::SeqCst)));
        assert!(
            host.expire_idle(later + idle).is_empty(),
            "a session is open"
        );
        busy.store(false, Ordering::SeqCst);
        assert_eq!(host.expire_idle(Instant::now() + idle * 3), vec![id]);
    }

    /// Red-team pass 9, L1: a sandbox being destroyed left the list before
    /// its commands were reaped, and a root nested with its adopted one was
    /// taken meanwhile (its commands could still swap a link in).
    #[test]
    fn a_root_nested_with_a_dying_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let adopt = dir.path().join("adopt");
        std::fs::create_dir_all(adopt.join("a/r")).unwrap();
        let host = adopting_host(dir.path().join("hd"), &adopt);
        let adopt = adopt.canonicalize().unwrap();
        let create = |root: &str| {
            host.create(&wire::CreateRequest {
                root: Some(format!("{}/{root}", adopt.display())),
            })
        };
        let outer = create("a").unwrap().id;
        // Taken off the list as a destroy does, its commands not reaped.
        let hosted = {
            let mut sandboxes = lock(&host.sandboxes);
            let hosted = sandboxes.remove(&outer).unwrap();
            host.dying_from(&hosted);
            hosted
        };
        assert_eq!(create("a/r").unwrap_err().kind(), ErrorKind::Denied);
        host.finish(&outer, &hosted);
        create("a/r").unwrap();
        host.destroy_all();
    }
}
