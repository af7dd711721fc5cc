//! What commands of the `linux` provider may read (SPEC §4 "What commands
//! read"): the host's credential stores they never see, and, with
//! `read_scope = "system"`, the directories they see at all.
//!
//! **Credential stores.** A built-in list ([`HOME_STORES`] in every home
//! directory, [`SYSTEM_STORES`] in `/etc` and `/var/lib`) plus `host_deny_read` is masked
//! in the sandbox's mount namespace, as `deny_read` paths are. A store can
//! appear at any time (`aws configure`, `gh auth login`, an atomic rewrite
//! of `~/.claude.json`), so the list of what exists is taken again before
//! every command, cheaply: each watched directory is `stat`ed, and read
//! again only when its change time moved (or was too recent to trust:
//! file-system timestamps come from a coarse clock, so a change within the
//! same tick as a scan keeps the time the scan saw). The command's init
//! then masks every name the holder did not (it tells a mask by its device).
//! The list and what the looks found are shared by the sandboxes of this
//! process that watch the same homes and `host_deny_read` entries: each
//! open looks the homes up, but builds no list of its own.
//!
//! **The store layer** ([`HostStores::layer`]): a mask is a mount on a
//! name, and the name can be taken from under it — the host saves a store
//! by renaming a new file over it (an atomic rewrite of `~/.claude.json`),
//! and the kernel detaches the mask in every namespace — or a store is made
//! while a command runs, and has no mask until the next command. So each
//! command also restricts itself with a Landlock layer that grants reads by
//! what exists, not by name: every directory on the way to a store (`/`,
//! `/home`, each home, `~/.config`, `/etc`, …: the *ancestors*) may be
//! listed only, and each entry of one that is neither a store nor an
//! ancestor may be read and executed, beneath it too. Landlock ties a rule
//! to the inode it was made on: a file made in an ancestor after the layer
//! was built — a store rewritten, or made, while a command runs — has no
//! rule, so the command cannot read it. The layer is built once and again
//! only when an ancestor's change time moved (its listing changed) or was
//! too recent to trust, so a file the host made there is readable from the
//! next command on.
//!
//! **Homes**: every home directory in `/etc/passwd`, `/root`, each
//! directory in `/home`, and `$HOME`; not `/` nor those beneath the
//! system's own directories ([`NOT_HOMES`]: system accounts' homes such as
//! `/usr/sbin` or `/bin`; a home named there is skipped as named, one that
//! leads there through a link once resolved), nor, when the sandbox's
//! `/tmp` is private, beneath `/tmp`. Each name is looked at once, and a
//! watched directory that is not in its parent's listing is not looked at.
//!
//! **System scope**: the system directories ([`SYSTEM_DIRS`]), each
//! directory on `PATH` or its toolchain's install root
//! ([`HostStores::toolchain_root`]: never a home, a directory above one,
//! one that gathers many tools' files ([`CONFIG_ROOTS`]: `~/.config`,
//! `~/.local/share`, …), one that holds a credential store's directory, nor
//! anything in a store), rustup's and cargo's homes, the user's git
//! configuration, the workspace, the writable roots and the
//! `readable_roots`.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use super::landlock::{StoreGrant, StoreLayerBuilder};
use crate::error::Result;
use crate::host_env::HostEnv;
use crate::sync::lock;

/// Credential stores in every home directory: a directory (relative to the
/// home) and the names in it. A `*` matches any run of characters.
pub(crate) const HOME_STORES: &[(&str, &[&str])] = &[
    (
        "",
        &[
            ".ssh",
            ".gnupg",
            ".aws",
            ".azure",
            ".kube",
            ".docker",
            ".netrc",
            ".git-credentials",
            ".npmrc",
            ".yarnrc*",
            ".pypirc",
            ".vault-token",
            ".claude.json",
            ".pgpass",
            ".my.cnf",
            ".password-store",
            ".s3cfg",
            ".boto",
            ".oci",
            ".huggingface",
            ".databrickscfg",
            // Browser profiles: cookies, saved passwords, session tokens.
            ".mozilla",
        ],
    ),
    (
        ".config",
        &[
            "gcloud",
            "gh",
            "hub",
            "anthropic",
            "openai",
            "google-chrome*",
            "chromium",
            "BraveSoftware",
            "microsoft-edge*",
            "vivaldi*",
            "opera*",
            "glab-cli",
            "rclone",
            // GitHub Copilot's OAuth tokens (`apps.json`, `hosts.json`).
            "github-copilot",
            // Cloud and platform CLIs whose config holds their token.
            "doctl",
            "hcloud",
            "scw",
            "stripe",
            "ngrok",
        ],
    ),
    (".config/configstore", &["firebase-tools.json"]),
    (".config/git", &["credentials"]),
    (".config/containers", &["auth.json"]),
    (".cache/huggingface", &["token"]),
    // git's credential cache: its daemon's socket hands out the cached
    // passwords to whoever connects (a mask stops `connect` by path).
    (".cache/git", &["credential"]),
    (".gem", &["credentials"]),
    (".cargo", &["credentials*"]),
    (".terraform.d", &["credentials*"]),
    (".codex", &["auth.json"]),
    (".claude", &[".credentials.json"]),
    // Gemini CLI and its fork Qwen Code: the tokens and keys, not the
    // settings (`settings.json`, `GEMINI.md`), which their runs read.
    (
        ".gemini",
        &["oauth_creds.json", ".env", "mcp-oauth-tokens.json"],
    ),
    (".qwen", &["oauth_creds.json", ".env"]),
    (".local/share", &["keyrings", "com.vercel.cli"]),
    (".local/share/opencode", &["auth.json"]),
    (".pulumi", &["credentials.json"]),
    (".fly", &["config.yml"]),
    (".ollama", &["id_ed25519"]),
    ("snap", &["firefox", "chromium"]),
];

/// The host's own secrets.
pub(crate) const SYSTEM_STORES: &[(&str, &[&str])] = &[
    (
        "/etc",
        &[
            "shadow*",
            "gshadow*",
            "sudoers*",
            "master.passwd",
            "krb5.keytab",
            "ipsec.secrets",
            "wireguard",
            "letsencrypt",
            // VPN keys, Wi-Fi passphrases (wpa_supplicant's and netplan's),
            // SSSD's bind passwords.
            "openvpn",
            "wpa_supplicant",
            "netplan",
            "sssd",
        ],
    ),
    // PPP's CHAP/PAP passwords.
    ("/etc/ppp", &["*-secrets"]),
    // Postfix's relay credentials (and their hashed maps).
    ("/etc/postfix", &["sasl_passwd*"]),
    // cloud-init's user data: passwords and tokens the instance was
    // given at its launch.
    ("/var/lib/cloud/instance", &["user-data.txt*"]),
    ("/etc/NetworkManager", &["system-connections"]),
    (
        "/etc/ssh",
        &[
            "ssh_host_*key",
            "ssh_host_rsa_key",
            "ssh_host_ecdsa_key",
            "ssh_host_ed25519_key",
            "ssh_host_dsa_key",
        ],
    ),
    ("/etc/ssl", &["private"]),
    ("/etc/pki/tls", &["private"]),
    ("/etc/security", &["opasswd"]),
    // Cluster credentials: kubeadm's kubeconfigs (`admin.conf`,
    // `super-admin.conf`, `kubelet.conf`, …) and keys; k3s's and rke2's
    // admin kubeconfigs and k3s's join token and keys.
    ("/etc/kubernetes", &["*.conf", "pki"]),
    ("/etc/rancher/k3s", &["k3s.yaml"]),
    ("/etc/rancher/rke2", &["rke2.yaml"]),
    (
        "/var/lib/rancher/k3s/server",
        &["token", "node-token", "cred", "tls"],
    ),
    // tailscaled's node keys; the kubelet's keys and the pods' projected
    // service-account tokens.
    ("/var/lib", &["tailscale", "kubelet"]),
    // The password of Debian's MySQL maintenance account.
    ("/etc/mysql", &["debian.cnf"]),
];

/// With `read_scope = "system"`: the system directories commands read.
pub(crate) const SYSTEM_DIRS: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/sys",
    // `/etc/resolv.conf` leads there on systemd hosts.
    "/run/systemd/resolve",
];

/// Directories of a home that gather many tools' configuration, data and
/// caches, credential stores among them: never granted whole to a
/// toolchain on `PATH` (`~/.config/composer/vendor/bin` is not all of
/// `~/.config`).
const CONFIG_ROOTS: &[&str] = &[
    ".config",
    ".local",
    ".local/share",
    ".local/state",
    ".cache",
];

/// The last names of a `PATH` entry whose parent is the toolchain's install
/// root (`~/.cargo/bin` → `~/.cargo`, `~/.pyenv/shims` → `~/.pyenv`, whose
/// shims run `pyenv` from there).
const BIN_DIRS: &[&str] = &["bin", "shims"];

/// Where no home is watched: the sandbox has its own `/dev` and `/proc`;
/// the rest are the system's own directories, which system accounts name
/// as their homes (`daemon`'s `/usr/sbin`, `bin`'s `/bin`; `/` itself is
/// skipped too): large directories to read, where no user keeps
/// credentials.
const NOT_HOMES: &[&str] = &[
    "/proc", "/sys", "/dev", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
    "/etc", "/run",
];

/// A change time this close to a scan is not trusted to move at the next
/// change (timestamps come from the kernel's coarse clock, a tick of at
/// most 10 ms).
const RACY_WINDOW: Duration = Duration::from_millis(50);

/// Most names one watched directory contributes (a directory with more
/// matches than this is masked in part; see [`HostStores::current`]).
const MAX_MATCHES_PER_DIR: usize = 64;

/// Room for the names of homes looked at by [`homes`] (more grow it).
const HOMES_LOOKED: usize = 32;

/// Room for `/proc/self/fd/<fd>`.
const PROC_FD_NAME_BYTES: usize = 32;

/// What a resolved directory's name is given at first (a longer one grows
/// it).
const PATH_GUESS_BYTES: usize = 128;

/// A directory's identity and change time, as `stat` gives them.
type DirKey = (u64, u64, i64, i64);

/// Commands one store layer serves before it is built again: each adds a
/// rule for its own `/proc` to it (`landlock::restrict_store_layer`), which
/// stays there until then.
pub(crate) const MAX_LAYER_USES: usize = 256;

/// One directory whose entries are matched against credential names.
#[derive(Debug)]
struct Watched {
    dir: PathBuf,
    names: &'static [&'static str],
    /// The nearest watched directory above this one and the name in it
    /// that leads here: while that directory's listing (current: unchanged
    /// since a trusted scan, or read just now) has no such name, this one
    /// is missing, and no `stat` is spent on it.
    parent: Option<(usize, &'static str)>,
    /// The names in this directory that lead to watched directories below
    /// (whose presence its scan records).
    children: Vec<&'static str>,
}

#[derive(Debug, Default, Clone)]
struct WatchState {
    key: Option<DirKey>,
    /// Whether `key` was old enough at the scan to move at the next change.
    trusted: bool,
    matches: Vec<PathBuf>,
    /// Which of [`Watched::children`] the last scan listed.
    present: Vec<&'static str>,
}

/// The credential stores of this host (built-in and `host_deny_read`), and
/// what of them exists, kept up to date cheaply (see the module doc).
#[derive(Debug)]
pub(crate) struct HostStores {
    /// What is watched and what was found, shared with every sandbox of
    /// this process that watches the same homes and `host_deny_read`
    /// entries (see [`shared_watch`]).
    watch: Arc<Watch>,
    /// The store layer as last built (see the module doc).
    layer: Mutex<Option<BuiltLayer>>,
}

/// The watched directories of one set of homes and `host_deny_read`
/// entries, and what their last looks found. Immutable but for `state`, a
/// cache of the host's tree that every look checks against the directories'
/// change times: sharing it between sandboxes changes nothing of what each
/// command sees, and spares each open the building of the list (about 290
/// allocations, 23 KB, written into heap pages the holders already forked
/// share with the server) and each start the listing of every directory.
#[derive(Debug)]
struct Watch {
    watched: Vec<Watched>,
    state: Mutex<Vec<WatchState>>,
    /// `host_deny_read` entries: always passed on (the init checks them).
    exact: Vec<PathBuf>,
    /// The homes whose stores are watched (canonical).
    homes: Vec<PathBuf>,
    /// The XDG base directories watched besides ([`xdg_bases`]).
    xdg: Vec<(PathBuf, &'static str)>,
}

/// Most distinct watches this process keeps for sharing (one per set of
/// homes and `host_deny_read` entries; a front has one or a few).
const MAX_SHARED_WATCHES: usize = 8;

/// The watches kept for sharing, the most recently made last.
static SHARED_WATCHES: Mutex<Vec<Arc<Watch>>> = Mutex::new(Vec::new());

/// The watch of `homes` (with the system's stores) and `extra`: the one
/// kept for the same inputs, else a new one, kept.
fn shared_watch(
    homes: &[PathBuf],
    extra: &[PathBuf],
    xdg: &[(PathBuf, &'static str)],
) -> Arc<Watch> {
    let mut shared = lock(&SHARED_WATCHES);
    if let Some(watch) = shared
        .iter()
        .find(|w| w.homes == homes && w.exact == extra && w.xdg == xdg)
    {
        return watch.clone();
    }
    let mut watched = system_watched();
    watched.extend(xdg_watched(xdg));
    let mut watch = Watch::new(watched, homes, extra);
    watch.xdg = xdg.to_vec();
    let watch = Arc::new(watch);
    if shared.len() >= MAX_SHARED_WATCHES {
        shared.remove(0);
    }
    shared.push(watch.clone());
    watch
}

/// The store layer's ruleset and what it was built from.
#[derive(Debug)]
struct BuiltLayer {
    fd: Arc<OwnedFd>,
    /// Each ancestor listed, with its identity and change time before the
    /// listing (`None`: not a directory then).
    listed: Vec<(PathBuf, Option<DirKey>)>,
    /// For each of `listed`, the watched directory of the same name, if
    /// any: a look ([`HostStores::current_looked`]) has just `stat`ed it.
    watched_as: Vec<Option<usize>>,
    /// What the look the layer was planned from `stat`ed: a later look
    /// that finds any watched directory otherwise (made, removed, changed
    /// between that look and the listing, where the listed change times
    /// cannot show it) builds it again.
    planned_from: Looked,
    /// Whether every change time was old enough to move at the next change.
    trusted: bool,
    /// Commands that restricted themselves with it.
    uses: usize,
}

/// What one look `stat`ed: for each watched directory, its identity and
/// change time then (`None`: not looked at, its parent's listing lacks it).
#[derive(Debug, Default)]
pub(crate) struct Looked(Vec<Option<Option<DirKey>>>);

/// A store layer listed and granted but not finished: made on a thread of
/// its own while a new holder starts (see [`HostStores::draft_layer`]).
pub(crate) struct LayerDraft {
    builder: StoreLayerBuilder,
    listed: Vec<(PathBuf, Option<DirKey>)>,
    trusted: bool,
    /// The look the layer was planned from.
    looked: Looked,
}

/// What the store layer is built from (see [`HostStores::layer_plan`]).
#[derive(Debug, Default)]
struct LayerPlan {
    /// Listed only; their other entries granted.
    ancestors: BTreeSet<PathBuf>,
    /// Stores: no rule, wherever their names are and where they lead.
    excluded: HashSet<PathBuf>,
    /// The store names of each watched directory (canonical).
    names: HashMap<PathBuf, Vec<&'static str>>,
    /// What the look it was planned from `stat`ed.
    looked: Option<Looked>,
}

/// A directory's identity and change time, following links.
fn dir_key(path: &Path) -> Option<DirKey> {
    #[cfg(test)]
    tests::KEYS.with(|n| n.set(n.get() + 1));
    std::fs::metadata(path)
        .ok()
        .filter(std::fs::Metadata::is_dir)
        .map(|m| (m.dev(), m.ino(), m.ctime(), m.ctime_nsec()))
}

/// Whether a change time is old enough, at `now`, to move at the next
/// change (see [`RACY_WINDOW`]).
fn settled(key: Option<DirKey>, now: SystemTime) -> bool {
    key.is_none_or(|(_, _, secs, nsecs)| {
        let changed = SystemTime::UNIX_EPOCH
            + Duration::new(secs.max(0) as u64, nsecs.clamp(0, 999_999_999) as u32);
        now.duration_since(changed)
            .is_ok_and(|age| age > RACY_WINDOW)
    })
}

/// `path` and every directory above it, into `set`.
fn with_ancestors(set: &mut BTreeSet<PathBuf>, path: &Path) {
    for p in path.ancestors() {
        if !set.insert(p.to_path_buf()) {
            break;
        }
    }
}

/// An `O_PATH` fd of `path` (of a link itself with `nofollow`).
fn open_path(path: &Path, nofollow: bool) -> std::io::Result<OwnedFd> {
    use rustix::fs::OFlags;
    let mut flags = OFlags::PATH | OFlags::CLOEXEC;
    if nofollow {
        flags |= OFlags::NOFOLLOW;
    }
    Ok(rustix::fs::open(path, flags, rustix::fs::Mode::empty())?)
}

impl HostStores {
    /// The stores of every home (see the module doc) and `extra` (absolute
    /// paths); homes beneath `/tmp` only when `host_tmp` (the sandbox sees
    /// the host's `/tmp`); `$HOME` from `host`.
    /// The list is shared with the other sandboxes of this process that
    /// watch the same homes and entries ([`shared_watch`]); the store
    /// layer is this sandbox's own.
    pub(crate) fn new(extra: &[PathBuf], host_tmp: bool, host: &HostEnv) -> HostStores {
        let homes = homes(host_tmp, host);
        let xdg = xdg_bases(host, &homes);
        HostStores::with_watch(shared_watch(&homes, extra, &xdg))
    }

    fn with_watch(watch: Arc<Watch>) -> HostStores {
        HostStores {
            watch,
            layer: Mutex::new(None),
        }
    }

    /// `watched` and the [`HOME_STORES`] of each of `homes`, not shared.
    #[cfg(test)]
    fn watching(watched: Vec<Watched>, homes: &[PathBuf], extra: &[PathBuf]) -> HostStores {
        HostStores::with_watch(Arc::new(Watch::new(watched, homes, extra)))
    }
}

impl Watch {
    /// `watched` and the [`HOME_STORES`] of each of `homes`.
    fn new(mut watched: Vec<Watched>, homes: &[PathBuf], extra: &[PathBuf]) -> Watch {
        for home in homes {
            let at = watched.len();
            for (i, (sub, names)) in HOME_STORES.iter().enumerate() {
                // The nearest store directory above (the home at least),
                // among those listed before this one.
                let parent = (!sub.is_empty()).then(|| {
                    let (j, above) = HOME_STORES[..i]
                        .iter()
                        .enumerate()
                        .map(|(j, (above, _))| (j, *above))
                        .filter(|(_, above)| {
                            above.is_empty()
                                || sub
                                    .strip_prefix(above)
                                    .is_some_and(|rest| rest.starts_with('/'))
                        })
                        .max_by_key(|(_, above)| above.len())
                        .unwrap_or((0, ""));
                    let rest = sub[above.len()..].trim_start_matches('/');
                    let via = rest.split('/').next().unwrap_or(rest);
                    (at + j, via)
                });
                if let Some((p, via)) = parent {
                    let up: &mut Watched = &mut watched[p];
                    if !up.children.contains(&via) {
                        up.children.push(via);
                    }
                }
                watched.push(Watched {
                    dir: if sub.is_empty() {
                        home.clone()
                    } else {
                        home.join(sub)
                    },
                    names,
                    parent,
                    children: Vec::new(),
                });
            }
        }
        let state = Mutex::new(vec![WatchState::default(); watched.len()]);
        Watch {
            watched,
            state,
            exact: extra.to_vec(),
            homes: homes.to_vec(),
            xdg: Vec::new(),
        }
    }
}

impl HostStores {
    /// The store layer (see the module doc) as the Landlock ruleset fd each
    /// command restricts itself with: `draft` finished when given (made
    /// while the holder set up), else the one built before if no
    /// ancestor's listing changed since and it served fewer than
    /// [`MAX_LAYER_USES`] commands, else a new one. `roots` (the workspace,
    /// the writable and readable roots, canonical) are readable in it
    /// whatever holds them; `holder_dirs` are the sandbox's own mounts it
    /// grants (`landlock::StoreLayerBuilder::finish`).
    ///
    /// # Errors
    ///
    /// Landlock's, as `unsupported`.
    /// `looked`: the look this command's masks were taken from, whose
    /// `stat`s of the watched directories are used again here.
    pub(crate) fn layer(
        &self,
        draft: Option<LayerDraft>,
        roots: &[PathBuf],
        holder_dirs: &[OwnedFd],
        looked: Option<&Looked>,
    ) -> Result<Arc<OwnedFd>> {
        let mut built = lock(&self.layer);
        if draft.is_none()
            && let Some(b) = built.as_mut()
            && b.trusted
            && b.uses < MAX_LAYER_USES
            && looked.is_none_or(|l| l.0 == b.planned_from.0)
            && b.listed.iter().zip(&b.watched_as).all(|((dir, key), at)| {
                let now = at.and_then(|i| looked.and_then(|l| l.0[i]));
                now.unwrap_or_else(|| dir_key(dir)) == *key
            })
        {
            b.uses += 1;
            return Ok(b.fd.clone());
        }
        let draft = match draft {
            Some(draft) => draft,
            None => self.draft_layer(roots)?,
        };
        let fd = Arc::new(draft.builder.finish(holder_dirs)?);
        let watched_as = draft
            .listed
            .iter()
            .map(|(dir, _)| self.watch.watched.iter().position(|w| w.dir == *dir))
            .collect();
        *built = Some(BuiltLayer {
            fd: fd.clone(),
            listed: draft.listed,
            watched_as,
            planned_from: draft.looked,
            trusted: draft.trusted,
            uses: 1,
        });
        Ok(fd)
    }

    /// The store layer listed and granted from the host's tree now (`roots`
    /// as for [`HostStores::layer`]), to be finished there.
    ///
    /// # Errors
    ///
    /// Landlock's, as `unsupported`.
    pub(crate) fn draft_layer(&self, roots: &[PathBuf]) -> Result<LayerDraft> {
        use rustix::fs::OFlags;
        use std::os::fd::AsFd;
        use std::os::unix::ffi::OsStrExt;
        let plan = self.layer_plan();
        let started = SystemTime::now();
        let mut builder = StoreLayerBuilder::new()?;
        let mut listed = Vec::with_capacity(plan.ancestors.len());
        let mut trusted = true;
        for dir in &plan.ancestors {
            // One fd for the look, the listing and the rules: its change
            // time before its listing (a change during the listing moves
            // it, and the next command builds again).
            let opened = rustix::fs::open(
                dir,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            );
            let Ok(dir_fd) = opened else {
                // Not a directory, or not one this process may list: no
                // rule (nothing in it readable); its change time watched
                // all the same.
                let key = dir_key(dir);
                trusted &= settled(key, started);
                listed.push((dir.clone(), key));
                continue;
            };
            let key = rustix::fs::fstat(&dir_fd)
                .ok()
                .filter(|st| rustix::fs::FileType::from_raw_mode(st.st_mode).is_dir())
                .map(|st| (st.st_dev, st.st_ino, st.st_ctime, st.st_ctime_nsec as i64));
            trusted &= settled(key, started);
            listed.push((dir.clone(), key));
            if key.is_none() {
                continue;
            }
            builder.grant(dir_fd.as_fd(), StoreGrant::List)?;
            let names = plan.names.get(dir);
            let Ok(mut entries) = rustix::fs::Dir::new(dir_fd) else {
                continue;
            };
            while let Some(Ok(entry)) = entries.next() {
                let Ok(dir_fd) = entries.fd() else {
                    break;
                };
                let name = std::ffi::OsStr::from_bytes(entry.file_name().to_bytes());
                if name == "." || name == ".." {
                    continue;
                }
                let path = dir.join(name);
                if plan.ancestors.contains(&path) || plan.excluded.contains(&path) {
                    continue;
                }
                if let (Some(names), Some(text)) = (names, name.to_str())
                    && names.iter().any(|n| matches(n, text))
                {
                    continue;
                }
                let Ok(fd) = rustix::fs::openat(
                    dir_fd,
                    name,
                    OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    rustix::fs::Mode::empty(),
                ) else {
                    continue;
                };
                // The entry's type as the listing gives it (a file system
                // that does not tell: the opened entry's).
                let kind = match entry.file_type() {
                    rustix::fs::FileType::Unknown => match rustix::fs::fstat(&fd) {
                        Ok(st) => rustix::fs::FileType::from_raw_mode(st.st_mode),
                        Err(_) => continue,
                    },
                    kind => kind,
                };
                // A link gets no rule: what it leads to is granted at its
                // own place in the tree (and a link into a store grants
                // nothing).
                let grant = match kind {
                    rustix::fs::FileType::Directory => StoreGrant::ReadDir,
                    rustix::fs::FileType::RegularFile
                    | rustix::fs::FileType::CharacterDevice
                    | rustix::fs::FileType::BlockDevice
                    | rustix::fs::FileType::Fifo
                    | rustix::fs::FileType::Socket => StoreGrant::ReadFile,
                    _ => continue,
                };
                builder.grant(fd.as_fd(), grant)?;
            }
        }
        for root in roots {
            let Ok(fd) = open_path(root, false) else {
                continue;
            };
            let grant = if root.is_dir() {
                StoreGrant::ReadDir
            } else {
                StoreGrant::ReadFile
            };
            builder.grant(fd.as_fd(), grant)?;
        }
        Ok(LayerDraft {
            builder,
            listed,
            trusted,
            looked: plan.looked.unwrap_or_else(|| Looked(Vec::new())),
        })
    }

    /// What the store layer lists and leaves out: the ancestors (every
    /// watched directory that exists and every directory above one or
    /// above a store, canonical; for a missing one, the nearest directory
    /// above it that exists), the stores themselves (where their names are
    /// and where they lead), and the store names of each watched directory.
    /// What exists is taken from [`HostStores::current`]'s look, so that a
    /// watched directory its parent's listing lacks costs nothing here.
    fn layer_plan(&self) -> LayerPlan {
        let mut plan = LayerPlan::default();
        plan.ancestors.insert(PathBuf::from("/"));
        // The stores and the state of the same look (the state is shared:
        // another sandbox's look may change it as soon as it is unlocked).
        let mut state = lock(&self.watch.state);
        let mut looked = Looked(vec![None; self.watch.watched.len()]);
        let stores = self.look(&mut state, Some(&mut looked));
        plan.looked = Some(looked);
        let state = &*state;
        // Each directory resolved once: the missing watched directories
        // and the stores lead to the same few (`/etc`, each home).
        let mut memo: Vec<(PathBuf, Option<PathBuf>)> = Vec::new();
        let mut resolve = |dir: &Path| -> Option<PathBuf> {
            if let Some((_, done)) = memo.iter().find(|(d, _)| d == dir) {
                return done.clone();
            }
            let done = resolved_dir(dir);
            memo.push((dir.to_path_buf(), done.clone()));
            done
        };
        // Each existing watched directory, resolved.
        let mut resolved: HashMap<&Path, PathBuf> = HashMap::new();
        for (i, w) in self.watch.watched.iter().enumerate() {
            if state[i].key.is_some() {
                if let Some(dir) = resolve(&w.dir) {
                    with_ancestors(&mut plan.ancestors, &dir);
                    plan.names.entry(dir.clone()).or_default().extend(w.names);
                    resolved.insert(&w.dir, dir);
                }
                continue;
            }
            // Missing. Not in its parent's listing: the parent (or the
            // nearest directory above it) is listed for that already.
            // Otherwise, made while a command runs, it would be a new entry
            // of the nearest directory that exists, which must be listed
            // only for that.
            let lacked = w
                .parent
                .is_some_and(|(p, via)| state[p].key.is_some() && !state[p].present.contains(&via));
            let parent_missing = w.parent.is_some_and(|(p, _)| state[p].key.is_none());
            if lacked || parent_missing {
                continue;
            }
            if let Some(dir) = w.dir.ancestors().skip(1).find_map(&mut resolve) {
                with_ancestors(&mut plan.ancestors, &dir);
            }
        }
        for store in stores {
            let (Some(parent), Some(name)) = (store.parent(), store.file_name()) else {
                continue;
            };
            // Where the name is (its directory resolved)…
            let dir = resolved.get(parent).cloned().or_else(|| resolve(parent));
            match &dir {
                Some(dir) => {
                    plan.excluded.insert(dir.join(name));
                    with_ancestors(&mut plan.ancestors, dir);
                }
                None => {
                    // Its directory is missing: it would be a new entry of
                    // the nearest one that exists, which has no rule then.
                    if let Some(dir) = parent.ancestors().skip(1).find_map(&mut resolve) {
                        with_ancestors(&mut plan.ancestors, &dir);
                    }
                }
            }
            // … and where it leads, when it is a link.
            let link = std::fs::symlink_metadata(&store).is_ok_and(|m| m.file_type().is_symlink());
            if link && let Ok(target) = std::fs::canonicalize(&store) {
                if let Some(dir) = target.parent() {
                    with_ancestors(&mut plan.ancestors, dir);
                }
                plan.excluded.insert(target);
            }
        }
        // Nothing in or beneath a store is listed.
        let excluded = &plan.excluded;
        plan.ancestors
            .retain(|a| !excluded.iter().any(|x| a.starts_with(x)));
        plan
    }

    /// The names to mask now: every credential store that exists (a name
    /// that exists but leads nowhere, a dangling link, is included: the
    /// init checks what it leads to when it masks), and each
    /// `host_deny_read` entry.
    pub(crate) fn current(&self) -> Vec<PathBuf> {
        self.look(&mut lock(&self.watch.state), None)
    }

    /// [`HostStores::current`], and what its look `stat`ed (for
    /// [`HostStores::layer`]).
    pub(crate) fn current_looked(&self) -> (Vec<PathBuf>, Looked) {
        let mut looked = Looked(vec![None; self.watch.watched.len()]);
        let stores = self.look(&mut lock(&self.watch.state), Some(&mut looked));
        (stores, looked)
    }

    /// [`HostStores::current`] with `state` locked; what it `stat`s into
    /// `looked`.
    fn look(&self, state: &mut [WatchState], mut looked: Option<&mut Looked>) -> Vec<PathBuf> {
        let mut out = self.watch.exact.clone();
        // Whether each watch's listing is current: unchanged since a
        // trusted scan, or read now.
        let mut known = vec![false; self.watch.watched.len()];
        for (i, w) in self.watch.watched.iter().enumerate() {
            if let Some((p, via)) = w.parent
                && known[p]
                && !state[p].present.contains(&via)
            {
                // Not in its parent's listing: missing, and so is all it
                // would hold. Written only when it was not so already: the
                // state is shared, and a page of it rewritten after a
                // holder was forked becomes a copy of that holder's own.
                let st = &mut state[i];
                if st.key.is_some()
                    || !st.trusted
                    || !st.matches.is_empty()
                    || !st.present.is_empty()
                {
                    *st = WatchState {
                        trusted: true,
                        ..WatchState::default()
                    };
                }
                known[i] = true;
                continue;
            }
            let st = &mut state[i];
            #[cfg(test)]
            tests::LOOKS.with(|n| n.set(n.get() + 1));
            let key = std::fs::metadata(&w.dir)
                .ok()
                .filter(std::fs::Metadata::is_dir)
                .map(|m| (m.dev(), m.ino(), m.ctime(), m.ctime_nsec()));
            if let Some(looked) = looked.as_deref_mut() {
                looked.0[i] = Some(key);
            }
            if key.is_some() && key == st.key && st.trusted {
                known[i] = true;
                out.extend(st.matches.iter().cloned());
                continue;
            }
            let scanned_at = SystemTime::now();
            (st.matches, st.present) = match key {
                Some(_) => scan(&w.dir, w.names, &w.children),
                None => (Vec::new(), Vec::new()),
            };
            st.trusted = key.is_none_or(|(_, _, secs, nsecs)| {
                let changed = SystemTime::UNIX_EPOCH
                    + Duration::new(secs.max(0) as u64, nsecs.clamp(0, 999_999_999) as u32);
                scanned_at
                    .duration_since(changed)
                    .is_ok_and(|age| age > RACY_WINDOW)
            });
            st.key = key;
            known[i] = true;
            out.extend(st.matches.iter().cloned());
        }
        out
    }

    /// A directory whose entries are matched against credential names
    /// (a home, `~/.config`, `~/.cache/git`, `/etc`, …) that lies in `dir`
    /// or is `dir`, if any. Within a writable root such a directory is the
    /// commands': renamed (or made) there, the stores in it escape the next
    /// session's masks, which go by name, and the store layer, which grants
    /// the writable roots whole, does not catch one made while a command
    /// runs.
    /// By name and by where the name leads (as far as it exists): a
    /// `~/.cache` that is a link to `/scratch/cache` puts its stores in
    /// `/scratch` (red-team pass 16).
    pub(crate) fn watched_within(&self, dir: &Path) -> Option<PathBuf> {
        self.watch.watched.iter().find_map(|w| {
            if w.dir.starts_with(dir) {
                return Some(w.dir.clone());
            }
            let real = crate::git::canonical(&w.dir);
            real.starts_with(dir).then_some(real)
        })
    }

    /// The credential store that `path` (canonical, existing) lies in (or
    /// is), if any: a `host_deny_read` entry above it, or a name of a
    /// watched directory's list on its way there. By name, with no look at
    /// the file system (what lies above an existing path exists).
    pub(crate) fn covering(&self, path: &Path) -> Option<PathBuf> {
        if let Some(exact) = self.watch.exact.iter().find(|e| path.starts_with(e)) {
            return Some(exact.clone());
        }
        self.watch.watched.iter().find_map(|w| {
            let rest = path.strip_prefix(&w.dir).ok()?;
            let Some(Component::Normal(name)) = rest.components().next() else {
                return None;
            };
            let text = name.to_str()?;
            w.names
                .iter()
                .any(|p| matches(p, text))
                .then(|| w.dir.join(name))
        })
    }
}

/// The XDG base directories, each with the directory of a home it stands
/// for.
const XDG_BASES: [(&str, &str); 3] = [
    ("XDG_CONFIG_HOME", ".config"),
    ("XDG_CACHE_HOME", ".cache"),
    ("XDG_DATA_HOME", ".local/share"),
];

/// The XDG base directories cubby's environment puts elsewhere than in a
/// home (absolute, resolved as far as they exist), each with the home's
/// directory it stands for: tools keep their tokens there instead
/// (`$XDG_CONFIG_HOME/gh/hosts.yml`; red-team pass 16, 11).
fn xdg_bases(host: &HostEnv, homes: &[PathBuf]) -> Vec<(PathBuf, &'static str)> {
    XDG_BASES
        .iter()
        .filter_map(|(var, sub)| {
            let base = PathBuf::from(host.var_os(var)?);
            if !base.is_absolute() {
                return None;
            }
            let base = crate::git::canonical(&base);
            (!homes.iter().any(|h| h.join(sub) == base)).then_some((base, *sub))
        })
        .collect()
}

/// The watched directories of [`HOME_STORES`] beneath `.config`, `.cache`
/// and `.local/share`, in the XDG base directories `bases` names instead.
fn xdg_watched(bases: &[(PathBuf, &'static str)]) -> Vec<Watched> {
    let mut out = Vec::new();
    for (base, sub) in bases {
        for (dir, names) in HOME_STORES {
            let rest = if dir == sub {
                Some("")
            } else {
                dir.strip_prefix(sub).and_then(|r| r.strip_prefix('/'))
            };
            if let Some(rest) = rest {
                out.push(Watched {
                    dir: if rest.is_empty() {
                        base.clone()
                    } else {
                        base.join(rest)
                    },
                    names,
                    parent: None,
                    children: Vec::new(),
                });
            }
        }
    }
    out
}

/// The watched directories of [`SYSTEM_STORES`].
fn system_watched() -> Vec<Watched> {
    SYSTEM_STORES
        .iter()
        .map(|(dir, names)| Watched {
            dir: PathBuf::from(dir),
            names,
            parent: None,
            children: Vec::new(),
        })
        .collect()
}

/// The names in `dir` that match one of `names`, and which of `children`
/// it holds. When `dir` cannot be listed but can be searched, the names
/// without a `*` are tried (a command of the same user could open them as
/// well), and every child counts as present.
fn scan(
    dir: &Path,
    names: &[&str],
    children: &[&'static str],
) -> (Vec<PathBuf>, Vec<&'static str>) {
    let mut out = Vec::new();
    let mut present = Vec::new();
    match std::fs::read_dir(dir) {
        Ok(entries) => {
            for entry in entries.flatten() {
                let name = entry.file_name();
                let Some(name) = name.to_str() else { continue };
                if let Some(child) = children.iter().find(|c| **c == name) {
                    present.push(*child);
                }
                if out.len() < MAX_MATCHES_PER_DIR && names.iter().any(|p| matches(p, name)) {
                    out.push(dir.join(name));
                }
            }
        }
        Err(_) => {
            present = children.to_vec();
            for name in names {
                let literal = name.trim_end_matches('*');
                if !literal.contains('*') {
                    let path = dir.join(literal);
                    if std::fs::symlink_metadata(&path).is_ok() {
                        out.push(path);
                    }
                }
            }
        }
    }
    (out, present)
}

/// Whether `name` matches `pattern` (at most one `*`, any run).
fn matches(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((prefix, suffix)) => {
            name.len() >= prefix.len() + suffix.len()
                && name.starts_with(prefix)
                && name.ends_with(suffix)
        }
    }
}

/// Every home directory (see the module doc), each once, canonical. Each
/// name is looked at once (`/etc/passwd` names `/nonexistent` or `/bin`
/// for several accounts); a missing one costs one failed `open`. Frugal
/// with the heap (every open of a sandbox runs this, and what it writes
/// there after a holder was forked becomes that holder's own copy): the
/// names are borrowed from `/etc/passwd` as read, and only those resolved
/// are allocated.
fn homes(host_tmp: bool, host: &HostEnv) -> Vec<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let passwd = std::fs::read("/etc/passwd").unwrap_or_default();
    let in_home: Vec<PathBuf> = std::fs::read_dir("/home")
        .map(|entries| entries.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    let named = passwd
        .split(|b| *b == b'\n')
        .filter_map(|line| line.split(|b| *b == b':').nth(5))
        .filter(|home| home.starts_with(b"/"))
        .map(|home| Path::new(std::ffi::OsStr::from_bytes(home)));
    let env_home = host.var_os("HOME").filter(|h| !h.is_empty()).map(Path::new);
    let mut looked: Vec<&Path> = Vec::with_capacity(HOMES_LOOKED);
    let mut out: Vec<PathBuf> = Vec::new();
    let found = named
        .chain([Path::new("/root")])
        .chain(in_home.iter().map(PathBuf::as_path))
        .chain(env_home);
    for home in found {
        // A name beneath the system's directories is a system account's
        // home (`/usr/sbin`, `/bin`): skipped without a look.
        if looked.contains(&home) || excluded_lexically(home) {
            continue;
        }
        looked.push(home);
        let Some(canonical) = resolved_dir(home) else {
            continue;
        };
        let excluded = canonical == Path::new("/")
            || NOT_HOMES.iter().any(|n| canonical.starts_with(n))
            || (!host_tmp && canonical.starts_with("/tmp"));
        if !excluded && !out.contains(&canonical) {
            out.push(canonical);
        }
    }
    out
}

/// Whether `home`, as written, is `/` or lies beneath [`NOT_HOMES`] (no
/// `..` taken off: such a name is resolved and checked again).
fn excluded_lexically(home: &Path) -> bool {
    let plain = home
        .components()
        .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    plain && (home == Path::new("/") || NOT_HOMES.iter().any(|n| home.starts_with(n)))
}

/// The canonical path of the directory `path` leads to, when it is one:
/// resolved by the kernel (an `O_PATH` open, then its `/proc/self/fd`
/// link), where `realpath` reads a link per component and `is_dir` stats
/// again.
fn resolved_dir(path: &Path) -> Option<PathBuf> {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let fd = rustix::fs::open(
        path,
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ok()?;
    // The link's name and its target, with one allocation (the target).
    let mut name = [0u8; PROC_FD_NAME_BYTES];
    let mut cursor = std::io::Cursor::new(&mut name[..]);
    write!(cursor, "/proc/self/fd/{}", fd.as_raw_fd()).ok()?;
    let len = cursor.position() as usize;
    let name = std::ffi::OsStr::from_bytes(&name[..len]);
    match rustix::fs::readlink(name, Vec::with_capacity(PATH_GUESS_BYTES)) {
        Ok(link) => {
            let p = PathBuf::from(std::ffi::OsString::from_vec(link.into_bytes()));
            p.is_absolute().then_some(p)
        }
        // No `/proc`: the long way.
        Err(_) => std::fs::canonicalize(path).ok(),
    }
}

/// The user's home (`$HOME`), for `~/` in config paths.
pub(crate) fn home_dir(host: &HostEnv) -> Option<PathBuf> {
    host.var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

/// `~/x` against `$HOME`; other paths as they are.
pub(crate) fn expand_home(path: &Path, host: &HostEnv) -> PathBuf {
    match (path.strip_prefix("~"), home_dir(host)) {
        (Ok(rest), Some(home)) => home.join(rest),
        _ => path.to_path_buf(),
    }
}

impl HostStores {
    /// What a `PATH` entry (absolute) grants with `read_scope = "system"`:
    /// its toolchain's install root when that is the parent of a trailing
    /// `bin` or `shims` ([`BIN_DIRS`]: `~/.cargo/bin` → `~/.cargo`,
    /// `~/.nvm/versions/node/v22/bin` → `~/.nvm/versions/node/v22`,
    /// `~/.config/composer/vendor/bin` → `~/.config/composer/vendor`,
    /// `/snap/bin` → `/snap`), else the entry itself; `~/.local/bin` is
    /// itself with `~/.local/lib` (where `pip --user` installs). Each only
    /// when [`HostStores::grantable`]: else the entry alone, or nothing.
    pub(crate) fn toolchain_root(&self, entry: &Path) -> Vec<PathBuf> {
        if let Some(home) = self
            .watch
            .homes
            .iter()
            .find(|h| *entry == h.join(".local/bin"))
        {
            return [home.join(".local/bin"), home.join(".local/lib")]
                .into_iter()
                .filter(|p| self.grantable(p))
                .collect();
        }
        let install_root = match (entry.file_name(), entry.parent()) {
            (Some(name), Some(parent)) if BIN_DIRS.iter().any(|b| name == *b) => Some(parent),
            _ => None,
        };
        install_root
            .into_iter()
            .chain([entry])
            .find(|p| self.grantable(p))
            .map(|p| vec![p.to_path_buf()])
            .unwrap_or_default()
    }

    /// Whether the system scope may grant `dir` whole for a toolchain: not
    /// `/`, a home or a directory above one, nor one of a home's
    /// [`CONFIG_ROOTS`]; nothing in or beneath a credential store; no
    /// watched store directory beneath it (`~/.config/gh`, `/etc/ssh`, …)
    /// nor a `host_deny_read` entry. (Stores named in `dir` itself —
    /// `~/.cargo/credentials.toml` — are masked and out of the store layer
    /// like every other.) By name, with no look at the file system.
    fn grantable(&self, dir: &Path) -> bool {
        let plain = dir.is_absolute()
            && dir
                .components()
                .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
        plain
            && dir != Path::new("/")
            && !self.watch.homes.iter().any(|h| h.starts_with(dir))
            && !self
                .watch
                .homes
                .iter()
                .any(|h| CONFIG_ROOTS.iter().any(|c| dir == h.join(c)))
            && self.covering(dir).is_none()
            && !self
                .watch
                .watched
                .iter()
                .any(|w| w.dir != dir && w.dir.starts_with(dir))
            && !self.watch.exact.iter().any(|e| e.starts_with(dir))
    }

    /// What commands read with `read_scope = "system"`, besides the
    /// workspace and the writable and readable roots: [`SYSTEM_DIRS`], what
    /// each `PATH` directory grants ([`HostStores::toolchain_root`]; `PATH`,
    /// `HOME`, `CARGO_HOME` and `RUSTUP_HOME` from `host`), cargo's and
    /// rustup's homes (`$CARGO_HOME`; `$RUSTUP_HOME` or `~/.rustup` when
    /// cargo's is there) when [`HostStores::grantable`], and the user's git
    /// configuration (`~/.gitconfig`, `~/.config/git`: `git commit` needs
    /// the user's name). Only what exists, canonical, each once.
    pub(crate) fn system_scope(&self, host: &HostEnv) -> Vec<PathBuf> {
        let path_var = host.var_os("PATH");
        let home = home_dir(host).and_then(|h| std::fs::canonicalize(h).ok());
        let mut wanted: Vec<PathBuf> = SYSTEM_DIRS.iter().map(PathBuf::from).collect();
        let mut cargo = false;
        for entry in path_var.map(std::env::split_paths).into_iter().flatten() {
            if !entry.is_absolute() {
                continue;
            }
            for candidate in [Some(entry.clone()), std::fs::canonicalize(&entry).ok()]
                .into_iter()
                .flatten()
            {
                // Held to the same rules once resolved: an entry spelled
                // through a link (`$HOME` itself one) must not grant a home.
                for root in self.toolchain_root(&candidate) {
                    let Ok(root) = std::fs::canonicalize(&root) else {
                        continue;
                    };
                    if self.grantable(&root) {
                        cargo |= root.join("bin/cargo").exists();
                        wanted.push(root);
                    }
                }
            }
        }
        let mut homes = Vec::new();
        if let Some(dir) = host.var_os("CARGO_HOME") {
            homes.push(PathBuf::from(dir));
        }
        if cargo || host.var_os("CARGO_HOME").is_some() {
            match host.var_os("RUSTUP_HOME") {
                Some(dir) => homes.push(PathBuf::from(dir)),
                None => homes.extend(home.iter().map(|h| h.join(".rustup"))),
            }
        }
        wanted.extend(
            homes
                .into_iter()
                .filter_map(|p| std::fs::canonicalize(p).ok())
                .filter(|p| self.grantable(p)),
        );
        if let Some(home) = &home {
            wanted.push(home.join(".gitconfig"));
            wanted.push(home.join(".config/git"));
        }
        let mut seen = HashSet::new();
        wanted
            .into_iter()
            .filter_map(|p| std::fs::canonicalize(p).ok())
            .filter(|p| seen.insert(p.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// Watched directories `stat`ed by [`HostStores::current`] on this
        /// thread.
        pub(super) static LOOKS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
        /// Directories `stat`ed by `dir_key` on this thread.
        pub(super) static KEYS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    fn looks_of(stores: &HostStores) -> (usize, Vec<PathBuf>) {
        LOOKS.with(|n| n.set(0));
        let found = stores.current();
        (LOOKS.with(std::cell::Cell::get), found)
    }

    #[test]
    fn a_path_inside_a_store_is_told_by_name() {
        let home = PathBuf::from("/nowhere/home/u");
        let stores = HostStores::watching(
            Vec::new(),
            std::slice::from_ref(&home),
            &[PathBuf::from("/nowhere/vault")],
        );
        LOOKS.with(|n| n.set(0));
        let covering = |p: &str| stores.covering(Path::new(p));
        assert_eq!(
            covering("/nowhere/home/u/.ssh/keys"),
            Some(home.join(".ssh"))
        );
        assert_eq!(
            covering("/nowhere/home/u/.config/gh/work"),
            Some(home.join(".config/gh"))
        );
        assert_eq!(
            covering("/nowhere/home/u/.yarnrc.d"),
            Some(home.join(".yarnrc.d"))
        );
        assert_eq!(
            covering("/nowhere/vault/x"),
            Some(PathBuf::from("/nowhere/vault"))
        );
        assert_eq!(covering("/nowhere/home/u/projects/app"), None);
        assert_eq!(covering("/nowhere/home/u"), None);
        assert_eq!(covering("/nowhere/home/u/.config/other"), None);
        assert_eq!(LOOKS.with(std::cell::Cell::get), 0);
    }

    #[test]
    fn a_home_without_store_directories_costs_one_look() {
        let dir = tempfile::tempdir().unwrap();
        let home = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::write(home.join("notes"), "n").unwrap();
        let stores = HostStores::watching(Vec::new(), std::slice::from_ref(&home), &[]);
        // None of `.config`, `.cargo`, `.cache`, `.local`, … is in the
        // home's listing: only the home itself is looked at, every time.
        for _ in 0..2 {
            let (looks, found) = looks_of(&stores);
            assert_eq!(looks, 1, "{found:?}");
            assert!(found.is_empty(), "{found:?}");
        }
        // A store directory made later, two levels down, is found at the
        // next look (the home changed, its listing is read again).
        std::fs::create_dir_all(home.join(".config/gh")).unwrap();
        std::fs::create_dir_all(home.join(".local/share/keyrings")).unwrap();
        let (looks, found) = looks_of(&stores);
        assert!(found.contains(&home.join(".config/gh")), "{found:?}");
        assert!(
            found.contains(&home.join(".local/share/keyrings")),
            "{found:?}"
        );
        // The home, `.config` and `.local/share` (`.config/git` and
        // `.config/containers` are not in `.config`'s listing): three.
        assert_eq!(looks, 3, "{found:?}");
    }

    #[test]
    fn sandboxes_of_the_same_homes_share_one_watch_and_see_later_stores() {
        let dir = tempfile::tempdir().unwrap();
        let home = std::fs::canonicalize(dir.path()).unwrap();
        let homes = std::slice::from_ref(&home);
        let first = HostStores::with_watch(shared_watch(homes, &[], &[]));
        let second = HostStores::with_watch(shared_watch(homes, &[], &[]));
        assert!(Arc::ptr_eq(&first.watch, &second.watch));
        // Other inputs, another watch.
        let vault = [PathBuf::from("/nowhere/vault")];
        let other = HostStores::with_watch(shared_watch(homes, &vault, &[]));
        assert!(!Arc::ptr_eq(&first.watch, &other.watch));
        assert!(other.current().contains(&vault[0]));
        assert!(!first.current().contains(&vault[0]));
        // A store made after one sandbox's look is found by the other's,
        // and by the first's next look.
        assert!(!first.current().contains(&home.join(".npmrc")));
        std::fs::write(home.join(".npmrc"), "t").unwrap();
        assert!(second.current().contains(&home.join(".npmrc")));
        assert!(first.current().contains(&home.join(".npmrc")));
        // And one made two levels down, right after those looks.
        std::fs::create_dir_all(home.join(".config/gh")).unwrap();
        assert!(first.current().contains(&home.join(".config/gh")));
        assert!(second.current().contains(&home.join(".config/gh")));
    }

    #[test]
    fn a_layer_check_uses_the_looks_stats_of_watched_directories() {
        let dir = tempfile::tempdir().unwrap();
        let home = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(home.join(".config/gh")).unwrap();
        std::fs::create_dir_all(home.join(".cargo")).unwrap();
        std::fs::create_dir_all(home.join("other")).unwrap();
        let stores = HostStores::watching(Vec::new(), std::slice::from_ref(&home), &[]);
        // A layer built on three watched directories and one other (the
        // directories above the home left out: the machine's neighbours
        // write to `/tmp`).
        let listed: Vec<(PathBuf, Option<DirKey>)> = [
            home.clone(),
            home.join(".config"),
            home.join(".cargo"),
            home.join("other"),
        ]
        .into_iter()
        .map(|d| {
            let key = dir_key(&d);
            (d, key)
        })
        .collect();
        let fd = Arc::new(open_path(&home, false).unwrap());
        let (_, planned_from) = stores.current_looked();
        built_by_hand(&stores, &fd, listed, planned_from);
        let (_, looked) = stores.current_looked();
        KEYS.with(|n| n.set(0));
        let reused = stores.layer(None, &[], &[], Some(&looked)).unwrap();
        assert!(Arc::ptr_eq(&fd, &reused));
        // Only `other` is `stat`ed again.
        assert_eq!(KEYS.with(std::cell::Cell::get), 1);
        // A store made in a watched directory moves its change time: the
        // look sees it, and the layer is built again.
        std::fs::write(home.join(".npmrc"), "t").unwrap();
        let (found, looked) = stores.current_looked();
        assert!(found.contains(&home.join(".npmrc")));
        let rebuilt = stores.layer(None, &[], &[], Some(&looked)).unwrap();
        assert!(!Arc::ptr_eq(&fd, &rebuilt));
    }

    /// `stores`' layer as if built on `listed` from the look
    /// `planned_from`, trusted, its ruleset `fd`.
    fn built_by_hand(
        stores: &HostStores,
        fd: &Arc<OwnedFd>,
        listed: Vec<(PathBuf, Option<DirKey>)>,
        planned_from: Looked,
    ) {
        let watched_as = listed
            .iter()
            .map(|(d, _)| stores.watch.watched.iter().position(|w| w.dir == *d))
            .collect();
        *lock(&stores.layer) = Some(BuiltLayer {
            fd: fd.clone(),
            listed,
            watched_as,
            planned_from,
            trusted: true,
            uses: 1,
        });
    }

    #[test]
    fn a_watched_directory_made_between_the_look_and_the_listing_builds_again() {
        let dir = tempfile::tempdir().unwrap();
        let home = std::fs::canonicalize(dir.path()).unwrap();
        let stores = HostStores::watching(Vec::new(), std::slice::from_ref(&home), &[]);
        // The layer's look finds no `.config`; the host makes it before
        // the home is listed, so the home's listed change time is the one
        // after it, and `.config` got a rule (readable whole).
        let (_, planned_from) = stores.current_looked();
        std::fs::create_dir(home.join(".config")).unwrap();
        let listed = vec![(home.clone(), dir_key(&home))];
        let fd = Arc::new(open_path(&home, false).unwrap());
        built_by_hand(&stores, &fd, listed, planned_from);
        // The next command's look finds `.config`: not the layer's, which
        // is built again (`~/.config/gh` made later must have no rule).
        let (_, looked) = stores.current_looked();
        let layer = stores.layer(None, &[], &[], Some(&looked)).unwrap();
        assert!(!Arc::ptr_eq(&fd, &layer));
    }

    #[test]
    fn patterns_match_one_run() {
        assert!(matches(".yarnrc*", ".yarnrc"));
        assert!(matches(".yarnrc*", ".yarnrc.yml"));
        assert!(matches("ssh_host_*key", "ssh_host_ed25519_key"));
        assert!(!matches("ssh_host_*key", "ssh_host_ed25519_key.pub"));
        assert!(!matches(".npmrc", ".npmrc.bak"));
        assert!(!matches("shadow*", "gshadow"));
    }

    #[test]
    fn toolchain_roots() {
        let stores = HostStores::watching(
            system_watched(),
            &[PathBuf::from("/home/u"), PathBuf::from("/home/v")],
            &[PathBuf::from("/opt/vault")],
        );
        let root = |p: &str| stores.toolchain_root(Path::new(p));
        let one = |p: &str| vec![PathBuf::from(p)];
        // Known layouts: the install root above `bin` or `shims`.
        assert_eq!(root("/home/u/.cargo/bin"), one("/home/u/.cargo"));
        assert_eq!(
            root("/home/u/.nvm/versions/node/v22/bin"),
            one("/home/u/.nvm/versions/node/v22")
        );
        assert_eq!(root("/home/u/.pyenv/shims"), one("/home/u/.pyenv"));
        assert_eq!(root("/home/u/go/bin"), one("/home/u/go"));
        assert_eq!(
            root("/home/u/.local/bin"),
            [
                PathBuf::from("/home/u/.local/bin"),
                PathBuf::from("/home/u/.local/lib")
            ]
        );
        // Never all of a config root (N4), a home, or what holds a store.
        assert_eq!(
            root("/home/u/.config/composer/vendor/bin"),
            one("/home/u/.config/composer/vendor")
        );
        assert_eq!(root("/home/u/.config/bin"), one("/home/u/.config/bin"));
        assert_eq!(
            root("/home/u/.local/share/pnpm"),
            one("/home/u/.local/share/pnpm")
        );
        assert_eq!(root("/home/u/.cache/bin"), one("/home/u/.cache/bin"));
        assert_eq!(root("/home/u/bin"), one("/home/u/bin"));
        assert_eq!(root("/home/v/bin"), one("/home/v/bin"));
        assert!(root("/home/u").is_empty());
        assert!(root("/home/u/.config").is_empty());
        assert!(root("/home/u/.local/share").is_empty());
        assert!(root("/home").is_empty());
        // In a store, or above one: nothing of it.
        assert!(root("/home/u/.ssh/bin").is_empty());
        assert!(root("/home/u/.config/gh/bin").is_empty());
        assert_eq!(root("/opt/bin"), one("/opt/bin"));
        assert!(root("/opt/vault/bin").is_empty());
        // Outside the homes.
        assert_eq!(root("/snap/bin"), one("/snap"));
        assert_eq!(root("/usr/bin"), one("/usr"));
        assert_eq!(root("/bin"), one("/bin"));
        assert_eq!(root("/opt/tool/libexec"), one("/opt/tool/libexec"));
        assert_eq!(root("/etc/bin"), one("/etc/bin"));
        // A directory the list names stores in is granted with them masked
        // and out of the store layer (cargo needs the rest of `~/.cargo`).
        assert_eq!(root("/home/u/.gem/bin"), one("/home/u/.gem"));
        assert_eq!(root("/etc/tool/bin"), one("/etc/tool"));
    }

    #[test]
    fn a_store_made_later_is_found_at_the_next_look() {
        let dir = tempfile::tempdir().unwrap();
        let stores = HostStores::watching(
            vec![Watched {
                dir: dir.path().to_path_buf(),
                names: &[".npmrc", ".yarnrc*"],
                parent: None,
                children: Vec::new(),
            }],
            &[],
            &[PathBuf::from("/nowhere/listed")],
        );
        assert_eq!(stores.current(), [PathBuf::from("/nowhere/listed")]);
        std::fs::write(dir.path().join(".npmrc"), "t").unwrap();
        std::fs::write(dir.path().join("notes"), "n").unwrap();
        let now = stores.current();
        assert!(now.contains(&dir.path().join(".npmrc")), "{now:?}");
        assert_eq!(now.len(), 2, "{now:?}");
        // Right after a scan the change time is too fresh to trust: a
        // second file made in the same tick is still found.
        std::fs::write(dir.path().join(".yarnrc.yml"), "t").unwrap();
        assert!(stores.current().contains(&dir.path().join(".yarnrc.yml")));
    }
}
