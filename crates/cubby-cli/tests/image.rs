//! The OCI image (deploy/image/build.sh), run the way deploy/kubernetes
//! runs its pod: the image is built from this test's `cubby` binary and a
//! root file system made from Debian's packages by mmdebstrap (cached under
//! `target/image-cache`), written as an OCI layout by umoci, pulled into a
//! podman store of the test's own (removed at the end), and started with
//! runc as uid 65532 in a user namespace of its own (the pod's `hostUsers:
//! false`) with a read-only root file system, `/tmp` a tmpfs, all
//! capabilities dropped, no new privileges, `/proc` unmasked (the pod's
//! `procMount: Unmasked`), the pool key mounted and the deployment's
//! `cubby.toml` (the `linux` provider). The test talks MCP to it over the
//! published port: the health check, 401 without the token, initialize,
//! tools/list, a `write_file` seen on the host and a `run` in cubby's
//! sandbox inside the container, which cannot read the mounted key.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

/// The uid and gid the image runs as (deploy/image/build.sh).
const IMAGE_UID: u32 = 65532;
/// Where the container's user namespace starts among the host's ids (the
/// pod's `hostUsers: false`): the image's uid 65532 is this plus 65532 on
/// the host.
const HOST_ID_BASE: u32 = 200_000;
/// How many ids the container's user namespace maps.
const MAPPED_IDS: u32 = 65_536;
/// The port cubby listens on in the container.
const CONTAINER_PORT: u16 = 8765;
/// Longest wait for the container's cubby to say it listens.
const START_WAIT: Duration = Duration::from_secs(120);
/// Highest open-file and process limits asked of the container. Podman's
/// defaults (1048576 files) are above this machine's hard limits, which a
/// root without CAP_SYS_RESOURCE cannot raise, and runc refuses to start a
/// container whose limits it cannot set.
const MAX_NOFILE: u64 = 65536;
const MAX_NPROC: u64 = 8192;
/// The line cubby prints once it listens (its address follows).
const LISTENING: &str = "cubby: listening on http://";

/// Longest run root podman accepts (it refuses a longer one: the unix
/// socket paths under it must fit in `sun_path`).
const MAX_RUNROOT_LEN: usize = 50;

/// A podman with a store of its own under `dir` (vfs: no overlay mounts
/// to leave behind) and a run root of its own under `runroot`, runc as the
/// runtime: Debian's crun 1.8 refuses the hybrid cgroup hierarchy of
/// machines like this one.
struct Podman {
    dir: PathBuf,
    runroot: WorkDir,
}

impl Podman {
    fn cmd(&self) -> Command {
        let mut cmd = Command::new("podman");
        cmd.arg("--root")
            .arg(self.dir.join("storage"))
            .arg("--runroot")
            .arg(self.runroot.path())
            .args(["--storage-driver", "vfs", "--runtime", "runc"])
            .env("TMPDIR", &self.dir);
        cmd
    }

    /// Runs podman with `args`; its stdout, or a panic with what it said.
    fn run(&self, args: &[&str]) -> String {
        let out = self
            .cmd()
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("podman is needed (apt-get install podman runc): {e}"));
        assert!(
            out.status.success(),
            "podman {args:?}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// A running container; removed (with its processes) when dropped.
struct Container<'a> {
    podman: &'a Podman,
    name: String,
    child: Child,
}

impl Drop for Container<'_> {
    fn drop(&mut self) {
        let _ = self
            .podman
            .cmd()
            .args(["rm", "--force", "--time", "0", &self.name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The test's directory under `target/`, removed when dropped. Its name is
/// lower case: podman names an image pulled from an OCI layout after the
/// layout's path, and refuses upper case (a tempfile suffix has some).
struct WorkDir(PathBuf);

impl WorkDir {
    fn new(path: PathBuf) -> WorkDir {
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir(&path).unwrap();
        WorkDir(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A directory path for this process named after `prefix`, in `$TMPDIR`
/// when that is short enough for podman's run root, else in `/tmp`.
fn short_temp_dir(prefix: &str) -> PathBuf {
    let name = format!("{prefix}-{}", std::process::id());
    let tmp = std::env::temp_dir();
    // Room for the name, a slash and podman's own file names under it.
    if tmp.as_os_str().len() + name.len() < MAX_RUNROOT_LEN - 20 {
        tmp.join(name)
    } else {
        Path::new("/tmp").join(name)
    }
}

/// The hard limit of `resource` for this process, at most `cap`.
fn hard_limit(resource: rustix::process::Resource, cap: u64) -> u64 {
    rustix::process::getrlimit(resource)
        .maximum
        .map_or(cap, |m| m.min(cap))
}

/// A token nobody guesses.
fn random_token() -> String {
    let mut bytes = [0u8; 24];
    std::io::Read::read_exact(
        &mut std::fs::File::open("/dev/urandom").unwrap(),
        &mut bytes,
    )
    .unwrap();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn chown(path: &Path, uid: u32) {
    let status = Command::new("chown")
        .arg(format!("{uid}:{uid}"))
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success(), "chown {}", path.display());
}

#[test]
fn the_image_serves_mcp_as_non_root_with_the_linux_sandbox() {
    assert!(
        rustix::process::geteuid().is_root(),
        "the image test runs podman as root (CI runs as root)"
    );
    let repo = common::repo_root();
    let target = repo.join("target");
    std::fs::create_dir_all(&target).unwrap();
    let work = WorkDir::new(target.join(format!("image-test-{}", std::process::id())));

    // Build the image from this test's binary.
    let layout = work.path().join("oci");
    let built = Command::new("bash")
        .arg(repo.join("deploy/image/build.sh"))
        .arg("--binary")
        .arg(env!("CARGO_BIN_EXE_cubby"))
        .arg("--out")
        .arg(&layout)
        .arg("--cache")
        .arg(target.join("image-cache"))
        .env("TMPDIR", work.path())
        .output()
        .unwrap();
    let built_out = String::from_utf8_lossy(&built.stdout);
    assert!(
        built.status.success(),
        "build.sh: {}\n{built_out}\n{}",
        built.status,
        String::from_utf8_lossy(&built.stderr)
    );
    assert!(built_out.contains("built "), "{built_out}");
    assert!(layout.join("oci-layout").is_file());

    // The run root lives in a short directory of its own: under a clone
    // at a long path, `target/...` is past podman's limit.
    let runroot = WorkDir::new(short_temp_dir("cubby-podman"));
    assert!(
        runroot.path().as_os_str().len() <= MAX_RUNROOT_LEN,
        "{}",
        runroot.path().display()
    );
    let podman = Podman {
        dir: work.path().join("podman"),
        runroot,
    };
    std::fs::create_dir_all(&podman.dir).unwrap();
    let image = podman
        .run(&[
            "pull",
            "--quiet",
            &format!("oci:{}:cubby", layout.display()),
        ])
        .trim()
        .to_string();
    assert!(!image.is_empty());
    let config: Value = serde_json::from_str(&podman.run(&["image", "inspect", &image])).unwrap();
    assert_eq!(
        config[0]["Config"]["User"],
        json!(format!("{IMAGE_UID}:{IMAGE_UID}")),
        "{config}"
    );

    // Without a token the image's own command refuses to listen off
    // loopback (fail closed).
    let refused = podman
        .cmd()
        .args(["run", "--rm", "--network", "none"])
        .args(limits())
        .arg(&image)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{said}");
    assert!(said.contains("without a bearer token"), "{said}");

    // What the pod mounts: the workspace, the pool key, the config.
    let workspace = work.path().join("workspace");
    std::fs::create_dir(&workspace).unwrap();
    let host_uid = HOST_ID_BASE + IMAGE_UID;
    chown(&workspace, host_uid);
    let token = random_token();
    let key_dir = work.path().join("pool-key");
    std::fs::create_dir(&key_dir).unwrap();
    let key = key_dir.join("key");
    std::fs::write(&key, &token).unwrap();
    chown(&key, host_uid);
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o400)).unwrap();
    let config_file = repo.join("deploy/kubernetes/base/cubby.toml");

    let name = format!("cubby-image-test-{}", std::process::id());
    let mut child = podman
        .cmd()
        .args(["run", "--rm", "--name", &name])
        .args(["--user", &format!("{IMAGE_UID}:{IMAGE_UID}")])
        .args(["--uidmap", &format!("0:{HOST_ID_BASE}:{MAPPED_IDS}")])
        .args(["--gidmap", &format!("0:{HOST_ID_BASE}:{MAPPED_IDS}")])
        .args(["--read-only", "--read-only-tmpfs=false"])
        .args(["--tmpfs", "/tmp:rw,mode=1777,size=256m"])
        .args(["--cap-drop", "ALL", "--security-opt", "no-new-privileges"])
        .args(["--security-opt", "unmask=/proc/*"])
        .args(limits())
        .args(["--publish", &format!("127.0.0.1::{CONTAINER_PORT}")])
        .args(["--env", &format!("CUBBY_TOKEN={token}")])
        .arg("--volume")
        .arg(format!("{}:/workspace", workspace.display()))
        .arg("--volume")
        .arg(format!("{}:/var/run/secrets/cubby:ro", key_dir.display()))
        .arg("--volume")
        .arg(format!(
            "{}:/etc/cubby/cubby.toml:ro",
            config_file.display()
        ))
        .arg(&image)
        .args(["serve", "--listen", &format!("0.0.0.0:{CONTAINER_PORT}")])
        .args(["--root", "/workspace", "--config", "/etc/cubby/cubby.toml"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let container = Container {
        podman: &podman,
        name: name.clone(),
        child,
    };
    // Its stderr, read to the end on a thread of its own; the listening
    // line goes back to the test.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if line.starts_with(LISTENING)
                && let Some(tx) = tx.take()
            {
                let _ = tx.send(line.clone());
            }
            eprintln!("[container] {line}");
        }
    });
    let listening = rx
        .recv_timeout(START_WAIT)
        .expect("the container's cubby did not say it listens");
    assert_eq!(
        listening,
        format!("{LISTENING}0.0.0.0:{CONTAINER_PORT}/mcp")
    );
    let published = podman.run(&["port", &name, &format!("{CONTAINER_PORT}/tcp")]);
    let port: u16 = published
        .trim()
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or_else(|| panic!("podman port said {published:?}"));

    // The health check needs no token; MCP does.
    let (status, head, body) = common::request_to(port, "GET", "/healthz", b"", &[]);
    assert_eq!((status, body.as_str()), (200, "ok\n"), "{head}");
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "image-test", "version": "1"}}})
    .to_string();
    let (status, head, _) = common::request(port, "POST", init.as_bytes(), &[]);
    assert_eq!(status, 401, "{head}");

    let bearer = format!("Bearer {token}");
    let (status, head, body) = common::request(
        port,
        "POST",
        init.as_bytes(),
        &[("Authorization", bearer.as_str())],
    );
    assert_eq!(status, 200, "{head}\n{body}");
    let answer = common::mcp_message(&head, &body);
    assert_eq!(
        answer["result"]["serverInfo"]["name"],
        json!("cubby"),
        "{answer}"
    );
    let session = common::header(&head, "mcp-session-id")
        .expect("a session id")
        .to_string();
    let headers = [
        ("Authorization", bearer.as_str()),
        ("Mcp-Session-Id", session.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    let post = |value: Value| {
        let (status, head, body) =
            common::request(port, "POST", value.to_string().as_bytes(), &headers);
        assert!(status == 200 || status == 202, "{status} {head}\n{body}");
        (head, body)
    };
    post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let (head, body) = post(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    let tools = common::mcp_message(&head, &body);
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{tools}"))
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for tool in ["read_file", "write_file", "run", "start_process"] {
        assert!(names.contains(&tool), "{tool} missing from {names:?}");
    }

    // A file written through MCP lands in the mounted workspace.
    let call = |id: u32, name: &str, arguments: Value| {
        let (head, body) = post(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}}));
        let answer = common::mcp_message(&head, &body);
        let text = answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{answer}"))
            .to_string();
        (answer["result"]["isError"] == json!(true), text)
    };
    let (failed, text) = call(
        3,
        "write_file",
        json!({"path": "hello.txt", "content": "written in the container\n"}),
    );
    assert!(!failed, "{text}");
    let written = workspace.join("hello.txt");
    assert_eq!(
        std::fs::read_to_string(&written).unwrap(),
        "written in the container\n"
    );
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&written).unwrap()),
        host_uid,
        "written as the image's user, mapped"
    );

    // A command in cubby's `linux` sandbox inside the container: it runs
    // (the provider started: user, pid, mount and network namespaces,
    // Landlock, seccomp, as non-root in a container), sees the workspace,
    // and cannot read the pool key (host_deny_read in the config).
    let (failed, text) = call(
        4,
        "run",
        json!({"command": "cat hello.txt; cat /var/run/secrets/cubby/key || echo KEY-REFUSED; \
                ls /var/run/secrets/cubby 2>&1 | head -3"}),
    );
    assert!(!failed, "{text}");
    assert!(text.starts_with("OK exit=0"), "{text}");
    assert!(text.contains("written in the container"), "{text}");
    assert!(text.contains("KEY-REFUSED"), "{text}");
    assert!(
        !text.contains(&token),
        "the pool key reached a command: {text}"
    );

    drop(container);
    let _ = podman.cmd().args(["rmi", "--force", &image]).output();
}

/// The `--ulimit` flags within this machine's hard limits.
fn limits() -> Vec<String> {
    let nofile = hard_limit(rustix::process::Resource::Nofile, MAX_NOFILE);
    let nproc = hard_limit(rustix::process::Resource::Nproc, MAX_NPROC);
    vec![
        "--ulimit".to_string(),
        format!("nofile={nofile}:{nofile}"),
        "--ulimit".to_string(),
        format!("nproc={nproc}:{nproc}"),
    ]
}
