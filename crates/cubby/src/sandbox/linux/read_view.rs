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
//! directory on `PATH` and its toolchain root ([`toolchain_root`]), rustup's
//! and cargo's homes, the user's git configuration, the workspace, the
//! writable roots and the `readable_roots`.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

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
        ],
    ),
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
    // tailscaled's node keys.
    ("/var/lib", &["tailscale"]),
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

/// A directory's identity and change time, as `stat` gives them.
type DirKey = (u64, u64, i64, i64);

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
    watched: Vec<Watched>,
    state: Mutex<Vec<WatchState>>,
    /// `host_deny_read` entries: always passed on (the init checks them).
    exact: Vec<PathBuf>,
}

impl HostStores {
    /// The stores of every home (see the module doc) and `extra` (absolute
    /// paths); homes beneath `/tmp` only when `host_tmp` (the sandbox sees
    /// the host's `/tmp`); `$HOME` from `host`.
    pub(crate) fn new(extra: &[PathBuf], host_tmp: bool, host: &HostEnv) -> HostStores {
        let mut watched = Vec::new();
        for (dir, names) in SYSTEM_STORES {
            watched.push(Watched {
                dir: PathBuf::from(dir),
                names,
                parent: None,
                children: Vec::new(),
            });
        }
        HostStores::watching(watched, &homes(host_tmp, host), extra)
    }

    /// `watched` and the [`HOME_STORES`] of each of `homes`.
    fn watching(mut watched: Vec<Watched>, homes: &[PathBuf], extra: &[PathBuf]) -> HostStores {
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
        HostStores {
            watched,
            state,
            exact: extra.to_vec(),
        }
    }

    /// The names to mask now: every credential store that exists (a name
    /// that exists but leads nowhere, a dangling link, is included: the
    /// init checks what it leads to when it masks), and each
    /// `host_deny_read` entry.
    pub(crate) fn current(&self) -> Vec<PathBuf> {
        let mut out = self.exact.clone();
        let mut state = lock(&self.state);
        // Whether each watch's listing is current: unchanged since a
        // trusted scan, or read now.
        let mut known = vec![false; self.watched.len()];
        for (i, w) in self.watched.iter().enumerate() {
            if let Some((p, via)) = w.parent
                && known[p]
                && !state[p].present.contains(&via)
            {
                // Not in its parent's listing: missing, and so is all it
                // would hold.
                state[i] = WatchState {
                    trusted: true,
                    ..WatchState::default()
                };
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

    /// The credential store that `path` (canonical, existing) lies in (or
    /// is), if any: a `host_deny_read` entry above it, or a name of a
    /// watched directory's list on its way there. By name, with no look at
    /// the file system (what lies above an existing path exists).
    pub(crate) fn covering(&self, path: &Path) -> Option<PathBuf> {
        if let Some(exact) = self.exact.iter().find(|e| path.starts_with(e)) {
            return Some(exact.clone());
        }
        self.watched.iter().find_map(|w| {
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
/// for several accounts); a missing one costs one failed `open`.
fn homes(host_tmp: bool, host: &HostEnv) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = Vec::new();
    if let Ok(passwd) = std::fs::read_to_string("/etc/passwd") {
        for line in passwd.lines() {
            if let Some(home) = line.split(':').nth(5)
                && home.starts_with('/')
            {
                found.push(PathBuf::from(home));
            }
        }
    }
    found.push(PathBuf::from("/root"));
    if let Ok(entries) = std::fs::read_dir("/home") {
        found.extend(entries.flatten().map(|e| e.path()));
    }
    if let Some(home) = host.var_os("HOME").filter(|h| !h.is_empty()) {
        found.push(PathBuf::from(home));
    }
    let mut looked = HashSet::new();
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for home in found {
        // A name beneath the system's directories is a system account's
        // home (`/usr/sbin`, `/bin`): skipped without a look.
        if !looked.insert(home.clone()) || excluded_lexically(&home) {
            continue;
        }
        let Some(canonical) = resolved_dir(&home) else {
            continue;
        };
        let excluded = canonical == Path::new("/")
            || NOT_HOMES.iter().any(|n| canonical.starts_with(n))
            || (!host_tmp && canonical.starts_with("/tmp"));
        if !excluded && seen.insert(canonical.clone()) {
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
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStringExt;
    let fd = rustix::fs::open(
        path,
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ok()?;
    match rustix::fs::readlink(format!("/proc/self/fd/{}", fd.as_raw_fd()), Vec::new()) {
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

/// The directory a `PATH` entry's toolchain lives in: beneath a home, the
/// home's top-level entry that holds it (`~/.cargo/bin` → `~/.cargo`,
/// `~/.nvm/versions/node/v22/bin` → `~/.nvm`, `~/.pyenv/shims` →
/// `~/.pyenv`), but for `~/.local/bin`, which is itself (with `~/.local/lib`,
/// where `pip --user` installs), and a home on `PATH` itself, which gives
/// nothing; elsewhere the parent of a trailing `bin` (`/snap/bin` → `/snap`)
/// or the entry itself.
pub(crate) fn toolchain_root(entry: &Path, homes: &[PathBuf]) -> Vec<PathBuf> {
    for home in homes {
        if let Ok(rest) = entry.strip_prefix(home) {
            let mut parts = rest.components();
            return match parts.next() {
                None => Vec::new(),
                Some(Component::Normal(top)) if top == ".local" => {
                    vec![home.join(".local/bin"), home.join(".local/lib")]
                }
                Some(Component::Normal(top)) => vec![home.join(top)],
                Some(_) => Vec::new(),
            };
        }
    }
    match (entry.file_name(), entry.parent()) {
        (Some(name), Some(parent)) if name == "bin" && parent != Path::new("/") => {
            vec![parent.to_path_buf()]
        }
        _ => vec![entry.to_path_buf()],
    }
}

/// What commands read with `read_scope = "system"`, besides the workspace
/// and the writable and readable roots: [`SYSTEM_DIRS`], each `PATH`
/// directory's toolchain root (`PATH`, `HOME`, `CARGO_HOME` and
/// `RUSTUP_HOME` from `host`), rustup's home (`$RUSTUP_HOME` or
/// `~/.rustup`) when cargo's is there, and the user's git configuration
/// (`~/.gitconfig`, `~/.config/git`: `git commit` needs the user's name).
/// Only what exists, canonical, each once.
pub(crate) fn system_scope(host: &HostEnv) -> Vec<PathBuf> {
    let path_var = host.var_os("PATH");
    let home = home_dir(host).and_then(|h| std::fs::canonicalize(h).ok());
    let homes: Vec<PathBuf> = home.iter().cloned().collect();
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
            for root in toolchain_root(&candidate, &homes) {
                cargo |= root.join("bin/cargo").exists();
                wanted.push(root);
            }
        }
    }
    if let Some(dir) = host.var_os("CARGO_HOME") {
        wanted.push(PathBuf::from(dir));
    }
    if cargo || host.var_os("CARGO_HOME").is_some() {
        match host.var_os("RUSTUP_HOME") {
            Some(dir) => wanted.push(PathBuf::from(dir)),
            None => wanted.extend(home.iter().map(|h| h.join(".rustup"))),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// Watched directories `stat`ed by [`HostStores::current`] on this
        /// thread.
        pub(super) static LOOKS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
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
        let homes = [PathBuf::from("/home/u")];
        let root = |p: &str| toolchain_root(Path::new(p), &homes);
        assert_eq!(
            root("/home/u/.cargo/bin"),
            [PathBuf::from("/home/u/.cargo")]
        );
        assert_eq!(
            root("/home/u/.nvm/versions/node/v22/bin"),
            [PathBuf::from("/home/u/.nvm")]
        );
        assert_eq!(
            root("/home/u/.local/bin"),
            [
                PathBuf::from("/home/u/.local/bin"),
                PathBuf::from("/home/u/.local/lib")
            ]
        );
        assert!(root("/home/u").is_empty());
        assert_eq!(root("/snap/bin"), [PathBuf::from("/snap")]);
        assert_eq!(root("/usr/bin"), [PathBuf::from("/usr")]);
        assert_eq!(root("/bin"), [PathBuf::from("/bin")]);
        assert_eq!(
            root("/opt/tool/libexec"),
            [PathBuf::from("/opt/tool/libexec")]
        );
    }

    #[test]
    fn a_store_made_later_is_found_at_the_next_look() {
        let dir = tempfile::tempdir().unwrap();
        let stores = HostStores {
            watched: vec![Watched {
                dir: dir.path().to_path_buf(),
                names: &[".npmrc", ".yarnrc*"],
                parent: None,
                children: Vec::new(),
            }],
            state: Mutex::new(vec![WatchState::default()]),
            exact: vec![PathBuf::from("/nowhere/listed")],
        };
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
