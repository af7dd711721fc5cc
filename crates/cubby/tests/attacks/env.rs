//! Attacks on environment and credentials. What commands read: credential
//! stores, host secrets, read scopes.
//!
//! [`ATTACKS`] is this section's table of the escape suite: commands on the
//! `linux` provider, a row per attack (what it tries, what the host must show
//! afterwards, the control it makes, if any), run by `escape_suite_as_*` in
//! `main.rs`.

use crate::Attack;
use crate::lab::*;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The escape suite's attacks on environment and credentials.
pub const ATTACKS: &[Attack] = &[
    Attack {
        name: "read the credential stores of a home, made before and after the start",
        expect: "no store read",
        control: Some("the same user reads each store outside the sandbox"),
        run: credential_stores_in_a_home,
    },
    Attack {
        name: "read a credential store rewritten on the host",
        expect: "the new content unseen",
        control: Some("the same user reads the store outside the sandbox"),
        run: credential_store_replaced_on_the_host,
    },
    Attack {
        name: "read credential stores the host renames, rewrites and makes while a command runs",
        expect: "no store read, by that command or the next",
        control: Some("a host shell that waits the same way reads each store"),
        run: credential_stores_moved_while_a_command_runs,
    },
    Attack {
        name: "read /etc/shadow, sudoers, SSH host keys and ~/ stores",
        expect: "no digest of a readable secret in the output",
        control: Some("as root, the host reads /etc/shadow"),
        run: host_secrets,
    },
    Attack {
        name: "read deny_read files the host made after the start",
        expect: "the late secrets unseen and in place",
        control: None,
        run: deny_read_created_after_start,
    },
    Attack {
        name: "read the home with read_scope = system",
        expect: "the home file unseen; workspace, readable roots and toolchains still read",
        control: Some("the default read scope reads the same file"),
        run: read_scope_system,
    },
    Attack {
        name: "read the neighbours of the workspace in a host_private_dirs directory",
        expect: "only the workspace's own name listed there, the neighbour unread; the workspace works",
        control: Some("the default policy lists and reads the neighbour"),
        run: private_dir_neighbours,
    },
    Attack {
        name: "read cluster, VPN and database credentials in /etc and /var/lib",
        expect: "no planted secret read; made before and after the start",
        control: Some("as root, the host reads each planted file"),
        run: system_stores,
    },
    Attack {
        name: "pass a credential through the LC_* and *_CA_BUNDLE wildcards of the environment",
        expect: "LC_GITHUB_TOKEN and X_AUTH_CA_BUNDLE absent from the command's environment",
        control: Some("LC_CTYPE and CURL_CA_BUNDLE of the same environment reach the command"),
        run: credential_through_env_wildcards,
    },
    Attack {
        name: "connect to a host daemon's socket under /run and to git's credential cache",
        expect: "no connection accepted, no answer read",
        control: Some("the same client on the host connects to both and reads the answer"),
        run: host_unix_sockets,
    },
    Attack {
        name: "read cubby's command line at /proc/1/cmdline",
        expect: "the init shows a neutral name, none of the server's arguments",
        control: Some("the server's own /proc/self/cmdline holds them"),
        run: the_servers_command_line,
    },
    Attack {
        name: "read ~/.config through a toolchain beneath it on PATH (read_scope = system)",
        expect: "~/.config/doctl and another tool's file unseen; the toolchain still runs",
        control: Some("the host reads both files"),
        run: read_scope_system_config_root,
    },
    Attack {
        name: "chmod and write a credential store's mask",
        expect: "no write shows, the masks' modes and mount options unchanged",
        control: Some("outside, the same user chmods and writes such a file"),
        run: credential_masks_made_writable,
    },
];

/// The credential stores SPEC §4 names in every home directory (a concrete
/// name for each pattern) and browser profiles: (path in the home, whether
/// it is a directory, a file inside a directory).
const HOME_STORES: &[(&str, Option<&str>)] = &[
    (".ssh", Some("id_ed25519")),
    (".gnupg", Some("private-keys-v1.d")),
    (".aws", Some("credentials")),
    (".azure", Some("msal_token_cache.json")),
    (".config/gcloud", Some("credentials.db")),
    (".kube", Some("config")),
    (".docker", Some("config.json")),
    (".netrc", None),
    (".git-credentials", None),
    (".npmrc", None),
    (".yarnrc.yml", None),
    (".pypirc", None),
    (".cargo/credentials.toml", None),
    (".config/gh", Some("hosts.yml")),
    (".config/hub", Some("token")),
    (".terraform.d/credentials.tfrc.json", None),
    (".vault-token", None),
    (".codex/auth.json", None),
    (".claude/.credentials.json", None),
    (".claude.json", None),
    (".config/anthropic", Some("api_key")),
    (".config/openai", Some("auth.json")),
    (".mozilla", Some("firefox/profile/cookies.sqlite")),
    (".config/google-chrome", Some("Default/Cookies")),
    (".config/chromium", Some("Default/Login Data")),
    (".gemini/oauth_creds.json", None),
    (".gemini/.env", None),
    (".gemini/mcp-oauth-tokens.json", None),
    (".qwen/oauth_creds.json", None),
    (".config/github-copilot", Some("apps.json")),
    (".local/share/opencode/auth.json", None),
    (".config/doctl", Some("config.yaml")),
    (".pulumi/credentials.json", None),
    (".config/hcloud", Some("cli.toml")),
    (".config/scw", Some("config.yaml")),
    (".config/stripe", Some("config.toml")),
    (".config/ngrok", Some("ngrok.yml")),
    (".config/configstore/firebase-tools.json", None),
    (".local/share/com.vercel.cli", Some("auth.json")),
    (".fly/config.yml", None),
    (".ollama/id_ed25519", None),
    (".databrickscfg", None),
];

/// Files beside credential stores that stay readable (the tools that keep
/// them read them on every run): the settings of the AI CLIs whose tokens
/// are masked.
const HOME_SETTINGS: &[&str] = &[".gemini/settings.json", ".qwen/settings.json"];

/// The host's credential stores outside the homes, as files to plant
/// (SPEC §4): cluster admin kubeconfigs and keys, a VPN's node keys, a
/// database's maintenance password, a key in RHEL's private directory.
const SYSTEM_STORE_FILES: &[&str] = &[
    "/etc/kubernetes/admin.conf",
    "/etc/kubernetes/super-admin.conf",
    "/etc/kubernetes/pki/ca.key",
    "/etc/rancher/k3s/k3s.yaml",
    "/etc/rancher/rke2/rke2.yaml",
    "/var/lib/rancher/k3s/server/token",
    "/var/lib/tailscale/tailscaled.state",
    "/etc/mysql/debian.cnf",
    "/etc/pki/tls/private/server.key",
    // Red-team pass 5, F1: VPN, Wi-Fi, PPP, SSSD and relay credentials,
    // cloud-init's user data, the kubelet's keys, a pod's service-account
    // token and podman's primary login file (the last two under /run).
    "/etc/openvpn/client/work.key",
    "/etc/wpa_supplicant/wpa_supplicant.conf",
    "/etc/netplan/60-wifi.yaml",
    "/etc/ppp/chap-secrets",
    "/etc/sssd/sssd.conf",
    "/etc/postfix/sasl_passwd",
    "/var/lib/cloud/instance/user-data.txt",
    "/var/lib/kubelet/pki/kubelet.key",
    "/var/run/secrets/kubernetes.io/serviceaccount/token",
    "/run/containers/0/auth.json",
];

/// A home directory for the read attacks: a fresh one beneath `/home` as
/// root (covered as "every directory in /home"), the one the parent made
/// for `cubby-escape` (its `$HOME`), or, for another unprivileged invoking
/// user, its own `$HOME` (only what is missing there is made, and removed
/// after).
struct Home {
    path: PathBuf,
    made: Vec<PathBuf>,
    fresh: bool,
}

impl Home {
    fn new(tag: &str) -> Home {
        if is_root() {
            let path = PathBuf::from(format!("/home/cubby-escape-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&path);
            std::fs::create_dir(&path).unwrap();
            return Home {
                path,
                made: Vec::new(),
                fresh: true,
            };
        }
        let path = PathBuf::from(std::env::var_os("HOME").expect("HOME"));
        Home {
            fresh: std::env::var_os(CHILD_ENV).is_some(),
            path,
            made: Vec::new(),
        }
    }

    /// Writes `body` at `rel` unless something is there (then `None`).
    fn plant(&mut self, rel: &str, body: &str) -> Option<PathBuf> {
        let path = self.path.join(rel);
        if std::fs::symlink_metadata(&path).is_ok() {
            return None;
        }
        let mut top = self.path.clone();
        for part in Path::new(rel)
            .parent()
            .into_iter()
            .flat_map(Path::components)
        {
            top.push(part);
            if std::fs::symlink_metadata(&top).is_err() {
                std::fs::create_dir(&top).unwrap();
                self.made.push(top.clone());
            }
        }
        std::fs::write(&path, body).unwrap();
        self.made.push(path.clone());
        Some(path)
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        if self.fresh && is_root() {
            let _ = std::fs::remove_dir_all(&self.path);
            return;
        }
        for path in self.made.iter().rev() {
            let _ = std::fs::remove_file(path).or_else(|_| std::fs::remove_dir(path));
        }
    }
}

/// Plants each store of [`HOME_STORES`] (`which` picks them) with a marker
/// of its own; returns (file, marker) for each, read back on the host (the
/// control: the same user reads it outside the sandbox).
fn plant_stores(home: &mut Home, which: impl Fn(usize) -> bool) -> Vec<(PathBuf, String)> {
    let mut planted = Vec::new();
    for (i, (rel, inside)) in HOME_STORES.iter().enumerate() {
        if !which(i) {
            continue;
        }
        let m = marker(&format!("store{i}x"));
        let file = match inside {
            Some(name) => format!("{rel}/{name}"),
            None => rel.to_string(),
        };
        if let Some(path) = home.plant(&file, &m) {
            assert_eq!(
                std::fs::read_to_string(&path).unwrap(),
                m,
                "control: the host cannot read {}",
                path.display()
            );
            planted.push((path, m));
        }
    }
    planted
}

/// Reads each planted file (and lists its directory) from a command; any
/// marker shown is an escape.
fn read_planted(l: &Lab, planted: &[(PathBuf, String)]) -> Verdict {
    let mut script = String::new();
    for (path, _) in planted {
        let p = path.display();
        script.push_str(&format!("cat '{p}'; ls -la \"$(dirname '{p}')\"; "));
    }
    script.push_str("true");
    let out = l.sh(&script);
    for (path, m) in planted {
        not_in(&out, m).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

fn credential_stores_in_a_home(l: &Lab) -> Verdict {
    let _ = l;
    let mut home = Home::new("stores");
    // Half exist when the sandbox starts; the rest are made after its
    // first command (`aws configure` while the agent works).
    let early = plant_stores(&mut home, |i| i % 2 == 0);
    let lab = lab();
    lab.sh("true");
    let late = plant_stores(&mut home, |i| i % 2 == 1);
    if home.fresh && early.len() + late.len() != HOME_STORES.len() {
        return Err(format!("only {} stores planted", early.len() + late.len()));
    }
    read_planted(&lab, &early)?;
    read_planted(&lab, &late)?;
    // Beside the tokens, the same tools' settings stay readable.
    let mut settings = Vec::new();
    for rel in HOME_SETTINGS {
        let m = marker("settings");
        if let Some(path) = home.plant(rel, &m) {
            settings.push((path, m));
        }
    }
    let listed: Vec<String> = settings
        .iter()
        .map(|(p, _)| format!("'{}'", p.display()))
        .collect();
    let out = lab.sh(&format!("cat {}; true", listed.join(" ")));
    for (path, m) in &settings {
        if !out.text.contains(m.as_str()) {
            return Err(format!(
                "{} (settings) unreadable: {}",
                path.display(),
                out.text
            ));
        }
    }
    Ok(())
}

/// Files and directories made by a test outside its lab, removed (the
/// last made first) when dropped.
struct Planted(Vec<PathBuf>);

impl Planted {
    /// Writes `body` at `path` (mode 0600), making the directories above
    /// it, unless something is there already (then `false`).
    fn plant(&mut self, path: &Path, body: &str) -> bool {
        if std::fs::symlink_metadata(path).is_ok() {
            return false;
        }
        let mut missing = Vec::new();
        let mut up = path.parent();
        while let Some(dir) = up {
            if std::fs::symlink_metadata(dir).is_ok() {
                break;
            }
            missing.push(dir.to_path_buf());
            up = dir.parent();
        }
        for dir in missing.into_iter().rev() {
            if std::fs::create_dir(&dir).is_err() {
                return false;
            }
            self.0.push(dir);
        }
        if std::fs::write(path, body).is_err() {
            return false;
        }
        self.0.push(path.to_path_buf());
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
        true
    }
}

impl Drop for Planted {
    fn drop(&mut self) {
        for path in self.0.iter().rev() {
            let _ = std::fs::remove_file(path).or_else(|_| std::fs::remove_dir(path));
        }
    }
}

fn system_stores(l: &Lab) -> Verdict {
    let _ = l;
    // As root, each file that is missing is planted with a marker (half
    // before the sandbox starts, half after its first command); as
    // another user, the ones the host already holds that it can read.
    let mut planted = Planted(Vec::new());
    let mut early = Vec::new();
    let mut later = Vec::new();
    let mut existing = Vec::new();
    let mut failed = Vec::new();
    for (i, file) in SYSTEM_STORE_FILES.iter().enumerate() {
        let path = PathBuf::from(file);
        if std::fs::symlink_metadata(&path).is_ok() {
            if let Ok(body) = std::fs::read_to_string(&path)
                && body.len() >= 8
            {
                existing.push((path, body));
            }
        } else if !is_root() {
        } else if i % 2 == 1 {
            later.push(path);
        } else {
            let m = marker(&format!("sys{i}x"));
            match planted.plant(&path, &m) {
                true => early.push((path, m)),
                false => failed.push(path),
            }
        }
    }
    let lab = lab();
    lab.sh("true");
    let mut late = Vec::new();
    for (i, path) in later.into_iter().enumerate() {
        let m = marker(&format!("syslate{i}x"));
        match planted.plant(&path, &m) {
            true => late.push((path, m)),
            false => failed.push(path),
        }
    }
    if !failed.is_empty() {
        return Err(format!("control: could not plant {failed:?}"));
    }
    // Control: the host reads what was planted.
    for (path, m) in early.iter().chain(&late) {
        if std::fs::read_to_string(path).ok().as_deref() != Some(m.as_str()) {
            return Err(format!("control: the host cannot read {}", path.display()));
        }
    }
    read_planted(&lab, &early)?;
    read_planted(&lab, &late)?;
    // The same with `read_scope = "system"`, where /etc is granted whole.
    let sys = lab_with(|p, _, _| {
        p.read_scope(cubby::ReadScope::System);
    });
    read_planted(&sys, &early)?;
    read_planted(&sys, &late)?;
    // What the host held already: compared by digest, as above.
    let mut script = String::new();
    for (path, _) in &existing {
        script.push_str(&format!("sha256sum < '{}'; ", path.display()));
    }
    script.push_str("true");
    let out = lab.sh(&script);
    for (path, body) in &existing {
        let digest = sha256_hex(body.as_bytes());
        not_in(&out, &digest).map_err(|_| format!("{} was read", path.display()))?;
    }
    Ok(())
}

fn credential_through_env_wildcards(l: &Lab) -> Verdict {
    let _ = l;
    let (token, ca_token) = (marker("lctoken"), marker("catoken"));
    let (locale, bundle) = (marker("lcctype"), marker("cabundle"));
    let host = cubby::HostEnv::capture()
        .with("LC_GITHUB_TOKEN", &token)
        .with("X_AUTH_CA_BUNDLE", &ca_token)
        .with("LC_CTYPE", &locale)
        .with("CURL_CA_BUNDLE", &bundle);
    let lab = lab_in(host, |_, _, _| {});
    let out = lab.sh("env");
    // Control: the wildcards carry the plain names of the same environment.
    for m in [&locale, &bundle] {
        if !out.text.contains(m.as_str()) {
            return Err(format!("control: {m} not passed: {}", out.text));
        }
    }
    not_in(&out, &token)?;
    not_in(&out, &ca_token)
}

/// A unix socket server the test runs on the host at `path` (mode 0600):
/// each connection is answered with `answer` and counted.
struct SocketServer {
    path: PathBuf,
    accepted: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SocketServer {
    fn start(path: &Path, answer: &str) -> SocketServer {
        use std::io::Write;
        use std::sync::atomic::Ordering::SeqCst;
        let listener = std::os::unix::net::UnixListener::bind(path).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (count, done, answer) = (accepted.clone(), stop.clone(), answer.to_string());
        let thread = std::thread::spawn(move || {
            while !done.load(SeqCst) {
                match listener.accept() {
                    Ok((mut conn, _)) => {
                        count.fetch_add(1, SeqCst);
                        let _ = conn.set_nonblocking(false);
                        let _ = conn.write_all(answer.as_bytes());
                    }
                    Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
                }
            }
        });
        SocketServer {
            path: path.to_path_buf(),
            accepted,
            stop,
            thread: Some(thread),
        }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for SocketServer {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A python client that connects to `path` and prints what it reads.
fn socket_client(path: &Path) -> String {
    format!(
        "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect(\"{}\")\nprint(s.recv(200).decode())",
        path.display()
    )
}

fn host_unix_sockets(l: &Lab) -> Verdict {
    let _ = l;
    // git's credential cache, in a home: `~/.cache/git/credential/socket`.
    let mut home = Home::new("sockets");
    home.plant(".cache/git/credential/keep", "")
        .ok_or("control: could not make the cache directory")?;
    let cache_dir = home.path.join(".cache/git/credential");
    std::fs::set_permissions(&cache_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let cache_answer = marker("gitcache");
    let cache = SocketServer::start(&cache_dir.join("socket"), &cache_answer);
    let mut servers = vec![(cache, cache_answer)];
    // As root: a root-only daemon socket under /run (podman's, docker's,
    // systemd's private bus are mode 0600 there too).
    let run_dir = PathBuf::from(format!("/run/cubby-escape-{}", std::process::id()));
    let _run_dir = if is_root() {
        std::fs::create_dir(&run_dir).unwrap();
        let answer = marker("rundaemon");
        servers.push((
            SocketServer::start(&run_dir.join("api.sock"), &answer),
            answer,
        ));
        Some(RemoveDir(run_dir.clone()))
    } else {
        None
    };
    // Control: the same client, on the host, connects and reads each.
    for (server, answer) in &servers {
        let got = host_py(&socket_client(&server.path));
        if !got.contains(answer.as_str()) || server.accepted() != 1 {
            return Err(format!(
                "control: the host could not use {}: {got:?}",
                server.path.display()
            ));
        }
    }
    let host = cubby::HostEnv::capture().with("HOME", &home.path);
    let lab = lab_in(host, |_, _, _| {});
    for (server, answer) in &servers {
        let out = lab.sh(&py(&socket_client(&server.path).replace('\'', "")));
        not_in(&out, answer).map_err(|e| format!("{}: {e}", server.path.display()))?;
        if server.accepted() != 1 {
            return Err(format!(
                "{} accepted a command's connection",
                server.path.display()
            ));
        }
    }
    Ok(())
}

/// A directory removed (with what is left in it) when dropped.
struct RemoveDir(PathBuf);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The hex SHA-256 of `bytes`, by the host's `sha256sum`.
fn sha256_hex(bytes: &[u8]) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// What the sandbox's init shows as its command line and name (`holder.rs`).
const NEUTRAL_NAME: &str = "cubby-sandbox";

fn the_servers_command_line(l: &Lab) -> Verdict {
    // Control: the server's (this test's) command line, which the
    // sandbox's processes copy: its program and arguments.
    let own = std::fs::read("/proc/self/cmdline").unwrap();
    let args: Vec<String> = own
        .split(|&b| b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .filter(|a| a.len() >= 6 && !NEUTRAL_NAME.contains(a.as_str()))
        .collect();
    if args.is_empty() {
        return Err(format!("control: /proc/self/cmdline holds {own:?}"));
    }
    let out = l.sh(
        "printf 'CMDLINE<'; tr '\\0' ' ' < /proc/1/cmdline; printf '>COMM<'; cat /proc/1/comm; printf '>'",
    );
    let between = |open: &str| {
        out.text
            .split(open)
            .nth(1)
            .and_then(|t| t.split('>').next())
            .unwrap_or_default()
            .trim()
    };
    let (shown, comm) = (between("CMDLINE<"), between("COMM<"));
    for arg in &args {
        if shown.contains(arg.as_str()) || comm.contains(arg.as_str()) {
            return Err(format!("/proc/1 shows {arg:?}: {}", out.text));
        }
    }
    if shown != NEUTRAL_NAME || comm != NEUTRAL_NAME {
        return Err(format!("/proc/1 of a command: {}", out.text));
    }
    Ok(())
}

/// The mount options of the mount at `point` in a command's
/// `/proc/self/mountinfo` (the last one there: the one on top).
fn mount_options<'a>(mountinfo: &'a str, point: &Path) -> Option<&'a str> {
    let point = point.to_str()?;
    mountinfo.lines().rev().find_map(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        (fields.get(4) == Some(&point)).then(|| fields.get(5).copied())?
    })
}

fn credential_masks_made_writable(l: &Lab) -> Verdict {
    // Each mask is an object on one small tmpfs, owned by the sandbox's
    // user: on a writable mount a command could `chmod` it and write
    // there (seen through every mask, and in every later command). Masks
    // made by the holder (early stores) and by a command's init (late).
    let _ = l;
    let mut home = Home::new("maskwrite");
    let chosen = |i: usize| matches!(HOME_STORES[i].0, ".npmrc" | ".aws" | ".netrc" | ".kube");
    let early = plant_stores(&mut home, |i| chosen(i) && i % 2 == 0);
    let lab = lab();
    lab.sh("true");
    let late = plant_stores(&mut home, |i| chosen(i) && i % 2 == 1);
    let masked: Vec<PathBuf> = HOME_STORES
        .iter()
        .enumerate()
        .filter(|(i, _)| chosen(*i))
        .map(|(_, (rel, _))| home.path.join(rel))
        .filter(|p| {
            early
                .iter()
                .chain(&late)
                .any(|(planted, _)| planted.starts_with(p))
        })
        .collect();
    if home.fresh && masked.len() != 4 {
        return Err(format!("only {} stores planted", masked.len()));
    }
    // Control: outside, the same user changes the mode of such a file and
    // writes it (as a command could in the workspace).
    let twin = l.outside.join("twin-store");
    std::fs::write(&twin, "t").unwrap();
    std::fs::set_permissions(&twin, std::fs::Permissions::from_mode(0o000)).unwrap();
    std::fs::set_permissions(&twin, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(&twin, "written").unwrap();
    let m = marker("maskwrite");
    let mut script = String::new();
    for p in &masked {
        let p = p.display();
        script.push_str(&format!(
            "grep -F ' {p} ' /proc/self/mountinfo; chmod 0700 '{p}'; printf {m} > '{p}'; \
             printf {m} > '{p}/f{m}'; "
        ));
    }
    script.push_str("true");
    let out = lab.sh(&script);
    // A later command, and the masks again: nothing written shows, and
    // their mode is still none (Landlock refuses the writes; the mode,
    // owner and times are the mount's to refuse).
    let mut look = String::new();
    for p in &masked {
        let p = p.display();
        look.push_str(&format!(
            "cat '{p}' '{p}'/*; ls -la '{p}'; stat -c 'mode %a' '{p}'; "
        ));
    }
    look.push_str("true");
    let seen = lab.sh(&look);
    not_in(&seen, &m)?;
    if seen.text.matches("mode 0\n").count() != masked.len() {
        return Err(format!("a mask's mode changed: {}", seen.text));
    }
    for p in &masked {
        let options = mount_options(&out.text, p)
            .ok_or_else(|| format!("{}: no mount there: {}", p.display(), out.text))?;
        for want in ["ro", "nosuid", "nodev", "noexec"] {
            if !options.split(',').any(|o| o == want) {
                return Err(format!("{}: mounted {options}, not {want}", p.display()));
            }
        }
    }
    Ok(())
}

fn credential_store_replaced_on_the_host(l: &Lab) -> Verdict {
    // A store masked when the sandbox started is rewritten the way tools
    // save (a new file renamed over it): the mask leaves with the old name.
    let _ = l;
    let mut home = Home::new("replaced");
    let planted = plant_stores(&mut home, |i| HOME_STORES[i].0 == ".claude.json");
    let lab = lab();
    read_planted(&lab, &planted)?;
    let mut renewed = Vec::new();
    for (path, _) in &planted {
        let m = marker("renewed");
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, &m).unwrap();
        std::fs::rename(&tmp, path).unwrap();
        renewed.push((path.clone(), m));
    }
    read_planted(&lab, &renewed)
}

fn host_secrets(l: &Lab) -> Verdict {
    // The host's own secrets, where this user can read them outside (as
    // root: all of them): not from a command.
    let mut files: Vec<PathBuf> = [
        "/etc/shadow",
        "/etc/gshadow",
        "/etc/shadow-",
        "/etc/gshadow-",
        "/etc/sudoers",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    for entry in std::fs::read_dir("/etc/ssh")
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("ssh_host_") && name.ends_with("_key") {
            files.push(entry.path());
        }
    }
    let home = PathBuf::from(std::env::var_os("HOME").unwrap_or_default());
    for (rel, inside) in HOME_STORES {
        if inside.is_none() {
            files.push(home.join(rel));
        }
    }
    let readable: Vec<(PathBuf, String)> = files
        .into_iter()
        .filter_map(|f| {
            let bytes = std::fs::read(&f).ok().filter(|b| b.len() >= 8)?;
            // Compared by digest: the secret itself never reaches the logs.
            let digest = std::process::Command::new("sha256sum")
                .arg(&f)
                .output()
                .ok()?;
            let _ = bytes;
            let digest = String::from_utf8_lossy(&digest.stdout)
                .split_whitespace()
                .next()?
                .to_string();
            Some((f, digest))
        })
        .collect();
    if is_root() && !readable.iter().any(|(f, _)| f == Path::new("/etc/shadow")) {
        return Err("control: root cannot read /etc/shadow on the host".into());
    }
    let mut script = String::new();
    for (f, _) in &readable {
        script.push_str(&format!("sha256sum < '{}'; ", f.display()));
    }
    script.push_str("true");
    let out = l.sh(&script);
    for (f, digest) in &readable {
        not_in(&out, digest).map_err(|_| format!("{} was read", f.display()))?;
    }
    Ok(())
}

fn deny_read_created_after_start(l: &Lab) -> Verdict {
    // The host makes deny_read paths after the sandbox started (a `.env`
    // written by the user's tooling), and rewrites one by renaming a new
    // file over it.
    l.sh("true");
    let m = marker("lateenv");
    std::fs::write(l.ws.join(".env"), &m).unwrap();
    let secrets = l.ws.join(NESTED_SECRET_DIR);
    std::fs::create_dir_all(&secrets).unwrap();
    std::fs::write(secrets.join("key.txt"), &m).unwrap();
    let out = l.sh(
        "cat .env; cp .env e2; cat e2; mv nested moved; cat moved/deep/secrets/key.txt \
         nested/deep/secrets/key.txt",
    );
    not_in(&out, &m)?;
    unchanged(&secrets.join("key.txt"), &m)?;
    absent(&l.ws.join("moved"))?;
    let m2 = marker("renewedenv");
    std::fs::write(l.ws.join(".env.new"), &m2).unwrap();
    std::fs::rename(l.ws.join(".env.new"), l.ws.join(".env")).unwrap();
    let out = l.sh("cat .env");
    not_in(&out, &m2)?;
    unchanged(&l.ws.join(".env"), &m2)
}

fn private_dir_neighbours(l: &Lab) -> Verdict {
    // The lab's base holds the workspace and a neighbour (`ws-outside`),
    // as a sandbox host's directory holds many sandboxes' workspaces.
    let base = l.base.path().canonicalize().map_err(|e| e.to_string())?;
    let m = marker("neighbour");
    std::fs::write(l.outside.join("neighbour.txt"), &m).unwrap();
    let script = format!(
        "cat '{}'; echo \"LISTED:$(ls -a '{}' | tr '\\n' ,)\"; echo mine > own.txt; cat own.txt",
        l.outside.join("neighbour.txt").display(),
        base.display()
    );
    let control = l.sh(&script);
    if !control.text.contains(&m) || !control.text.contains("ws-outside") {
        return Err(format!(
            "control: the default policy does not read it: {}",
            control.text
        ));
    }
    let private = lab_with(|p, _, ws| {
        p.host_private_dirs([ws.parent().unwrap().to_path_buf()]);
    });
    let base = private
        .base
        .path()
        .canonicalize()
        .map_err(|e| e.to_string())?;
    std::fs::write(private.outside.join("neighbour.txt"), &m).unwrap();
    let script = format!(
        "cat '{}'; echo \"LISTED:$(ls -a '{}' | tr '\\n' ,)\"; echo mine > own.txt; cat own.txt",
        private.outside.join("neighbour.txt").display(),
        base.display()
    );
    let out = private.sh(&script);
    not_in(&out, &m)?;
    let listed = out
        .text
        .split("LISTED:")
        .nth(1)
        .and_then(|r| r.lines().next());
    if listed != Some(".,..,ws,") {
        return Err(format!(
            "the private directory shows more than the workspace: {}",
            out.text
        ));
    }
    if !out.text.contains("mine") || !private.ws.join("own.txt").is_file() {
        return Err(format!(
            "the workspace does not work beneath it: {}",
            out.text
        ));
    }
    Ok(())
}

fn read_scope_system(l: &Lab) -> Verdict {
    // With `read_scope = "system"` a file in the user's home (not on PATH)
    // is out of reach; the workspace, a readable root and the toolchains on
    // PATH are not. Control: the default scope reads the same file.
    let mut home = Home::new("scope");
    let m = marker("notes");
    let notes = home
        .plant(&format!("notes-{}.txt", std::process::id()), &m)
        .expect("a fresh notes file");
    let cat = format!("cat '{}'", notes.display());
    let control = l.sh(&cat);
    if !control.text.contains(&m) {
        return Err(format!(
            "control: read_scope host cannot read it: {}",
            control.text
        ));
    }
    let sys = lab_with(|p, _, ws| {
        p.read_scope(cubby::ReadScope::System)
            .readable_roots([ws.with_file_name("ws-outside")]);
    });
    std::fs::write(sys.ws.join("inside.txt"), "in the workspace\n").unwrap();
    std::fs::write(sys.outside.join("target.txt"), "readable root\n").unwrap();
    let out = sys.sh(&format!("{cat}; ls '{}'", home.path.display()));
    not_in(&out, &m)?;
    let mut tools = vec![
        ("git --version", "git version"),
        ("python3 -c 'print(6*7)'", "42"),
    ];
    let has = |tool: &str| {
        std::process::Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if has("cargo") {
        tools.push(("cargo --version", "cargo "));
    }
    let mut script = format!(
        "cat inside.txt '{}'; ",
        sys.outside.join("target.txt").display()
    );
    for (command, _) in &tools {
        script.push_str(command);
        script.push_str("; ");
    }
    let out = sys.sh(&script);
    for expected in ["in the workspace", "readable root"]
        .into_iter()
        .chain(tools.iter().map(|(_, e)| *e))
    {
        if !out.text.contains(expected) {
            return Err(format!(
                "{expected:?} missing (read_scope = system): {}",
                out.text
            ));
        }
    }
    Ok(())
}

/// Runs `script` through `run` (prefixed with a wait) while the host calls
/// `host`: the script first blocks reading a fifo in `dir`; a host thread
/// opens the fifo's other end (which blocks until the script has opened
/// its end, so the script has started), calls `host`, and writes the line
/// the script waits for. Returns what `run` returned.
fn while_it_waits<T>(
    dir: &Path,
    script: &str,
    run: impl FnOnce(&str) -> T,
    host: impl FnOnce() + Send,
) -> T {
    use std::io::Write;
    let fifo = dir.join("go.fifo");
    let _ = std::fs::remove_file(&fifo);
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o666),
        0,
    )
    .unwrap();
    // Readable by the unprivileged user's commands too.
    std::fs::set_permissions(&fifo, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = std::thread::scope(|s| {
        let opener = s.spawn(|| {
            let mut end = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
            host();
            end.write_all(b"go\n").unwrap();
        });
        let out = run(&format!("read _ < '{}'; {script}", fifo.display()));
        // Had the script never opened the fifo, this open lets the host
        // thread's go on.
        let _unblock = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
            .open(&fifo)
            .unwrap();
        opener.join().unwrap();
        out
    });
    let _ = std::fs::remove_file(&fifo);
    out
}

/// The host's moves on a home's stores while a command runs: `~/.aws`
/// renamed, `~/.claude.json` saved anew (a file renamed over it),
/// `~/.pypirc` made; the script that then reads each, and the markers the
/// host wrote.
struct StoreMoves {
    aws: PathBuf,
    moved: PathBuf,
    claude: PathBuf,
    pypirc: PathBuf,
}

impl StoreMoves {
    fn new(home: &Path) -> StoreMoves {
        StoreMoves {
            aws: home.join(".aws"),
            moved: home.join(format!(".aws-moved-{}", std::process::id())),
            claude: home.join(".claude.json"),
            pypirc: home.join(".pypirc"),
        }
    }

    /// The host's side; the markers it leaves.
    fn host(&self, tag: &str) -> Vec<String> {
        let renewed = marker(&format!("{tag}renewed"));
        let made = marker(&format!("{tag}made"));
        std::fs::rename(&self.aws, &self.moved).unwrap();
        let tmp = self.claude.with_extension("tmp");
        std::fs::write(&tmp, &renewed).unwrap();
        std::fs::rename(&tmp, &self.claude).unwrap();
        std::fs::write(&self.pypirc, &made).unwrap();
        vec![renewed, made]
    }

    fn script(&self) -> String {
        format!(
            "cat '{}/credentials' '{}' '{}'; ls -la '{}'; true",
            self.moved.display(),
            self.claude.display(),
            self.pypirc.display(),
            self.moved.display()
        )
    }

    /// Back as before the host's moves.
    fn undo(&self) {
        std::fs::rename(&self.moved, &self.aws).unwrap();
        let _ = std::fs::remove_file(&self.pypirc);
    }
}

fn credential_stores_moved_while_a_command_runs(l: &Lab) -> Verdict {
    // The masks are mounts on names. While a command runs, the host
    // renames `~/.aws`, saves `~/.claude.json` by renaming a new file over
    // it (the kernel drops the mask on the old one in every namespace) and
    // makes `~/.pypirc` (no mask until the next command). The command waits
    // on a fifo until the host is done, then reads all three.
    let _ = l;
    let mut home = Home::new("moved");
    let planted = plant_stores(&mut home, |i| {
        matches!(HOME_STORES[i].0, ".aws" | ".claude.json")
    });
    let moves = StoreMoves::new(&home.path);
    if planted.len() != 2 || moves.pypirc.exists() || moves.moved.exists() {
        if !home.fresh {
            eprintln!(
                "note: {} holds these stores already; not moved",
                home.path.display()
            );
            return Ok(());
        }
        return Err(format!(
            "cannot plant the stores in {}",
            home.path.display()
        ));
    }
    let lab = lab();
    read_planted(&lab, &planted)?;
    // Control: the same moves around a host shell that waits the same way
    // let it read all of them.
    let mut control = Vec::new();
    let seen = while_it_waits(
        &lab.outside,
        &moves.script(),
        |script| {
            let out = std::process::Command::new("bash")
                .arg("-c")
                .arg(script)
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        },
        || control = moves.host("control"),
    );
    moves.undo();
    if let Some(m) = control.iter().find(|m| !seen.contains(m.as_str())) {
        return Err(format!("control: the host shell did not read {m}: {seen}"));
    }
    let mut markers = Vec::new();
    let out = while_it_waits(
        &lab.ws,
        &moves.script(),
        |script| lab.sh(script),
        || markers = moves.host("attack"),
    );
    moves.undo();
    if markers.is_empty() {
        return Err(format!("the host never moved the stores: {}", out.text));
    }
    for m in markers.iter().chain(planted.iter().map(|(_, m)| m)) {
        not_in(&out, m)?;
    }
    // The next command, too.
    let out = lab.sh(&format!(
        "cat '{}' '{}'",
        moves.claude.display(),
        planted[0].0.display()
    ));
    for m in &markers {
        not_in(&out, m)?;
    }
    Ok(())
}

fn read_scope_system_config_root(l: &Lab) -> Verdict {
    // With `read_scope = "system"` each `PATH` entry grants its toolchain.
    // Composer's global bin (`~/.config/composer/vendor/bin`) on `PATH`
    // granted all of `~/.config` (red-team pass, N4): `doctl`'s token and
    // every other tool's files there. The toolchain must still run.
    let _ = l;
    let mut home = Home::new("configroot");
    let pid = std::process::id();
    let token = marker("doctl");
    let notes = marker("cfgnotes");
    let ran = marker("composer");
    let planted = [
        home.plant(
            ".config/doctl/config.yaml",
            &format!("access-token: {token}\n"),
        ),
        home.plant(&format!(".config/cubby-notes-{pid}/token"), &notes),
        home.plant(
            &format!(".config/composer/vendor/bin/cubby-tool-{pid}"),
            &format!("#!/bin/sh\necho {ran}\n"),
        ),
    ];
    let [Some(doctl), Some(other), Some(tool)] = planted else {
        if !home.fresh {
            eprintln!(
                "note: {} holds ~/.config/doctl or composer already; not planted",
                home.path.display()
            );
            return Ok(());
        }
        return Err(format!("cannot plant in {}", home.path.display()));
    };
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    // Control: the host reads both.
    for (file, m) in [(&doctl, &token), (&other, &notes)] {
        if !std::fs::read_to_string(file).unwrap().contains(m.as_str()) {
            return Err(format!("control: the host cannot read {}", file.display()));
        }
    }
    let bin = tool.parent().unwrap();
    let host = cubby::HostEnv::capture()
        .with(
            "PATH",
            format!("/usr/local/bin:/usr/bin:/bin:{}", bin.display()),
        )
        .with("HOME", &home.path);
    let sys = lab_in(host, |p, _, _| {
        p.read_scope(cubby::ReadScope::System);
    });
    let out = sys.sh(&format!(
        "cat '{}' '{}'; ls '{}'; '{}'",
        doctl.display(),
        other.display(),
        home.path.join(".config").display(),
        tool.display()
    ));
    not_in(&out, &token)?;
    not_in(&out, &notes)?;
    if !out.text.contains(&ran) {
        return Err(format!(
            "the toolchain on PATH no longer runs: {}",
            out.text
        ));
    }
    Ok(())
}
