//! A far cubby for the `remote` provider's variants of the suites: the
//! sandbox host API (`cubby::host`) served on a loopback listener of port 0
//! in this process, with the same handler `cubby serve --host` mounts at
//! `/v1`. Its workspaces are the tests' own directories (adopted: the host
//! lets callers name directories under the temporary directory; its own
//! directory of workspaces is elsewhere), so a
//! fixture sets up and inspects them as it does for `local`.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use cubby::host::http::{HostApi, Served, serve};
use cubby::host::{Host, HostOptions};
use cubby::remote::{RemoteOptions, RemoteSandbox};
use cubby::{Config, HostEnv, NetworkMode, Sandbox};

/// A far cubby and how to reach it.
pub struct Far {
    served: Served,
    token: String,
}

impl Far {
    /// A far cubby holding sandboxes under `config`.
    pub fn start(config: Config) -> Far {
        let token = format!("test-token-{}-{:x}", std::process::id(), rand_u64());
        let tmp = std::env::temp_dir().canonicalize().unwrap();
        // The host's own directory lies outside the adoptable one (the host
        // refuses to adopt a directory holding its own workspaces), in the
        // build's scratch space rather than the temporary directory: the
        // far cubby is never dropped, so nothing would remove it there.
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("far-host");
        let host = Host::new(HostOptions {
            dir,
            adopt: Some(tmp),
            max_sandboxes: 0,
            config,
            env: HostEnv::capture(),
            idle: None,
        })
        .unwrap();
        let api = HostApi::new(Arc::new(host), &token).unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        Far {
            served: serve(listener, api).unwrap(),
            token,
        }
    }

    /// Its base URL.
    pub fn url(&self) -> String {
        self.served.url()
    }

    /// Its token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// A remote sandbox whose workspace is `dir` on the far side.
    pub fn sandbox(&self, dir: &Path) -> Arc<dyn Sandbox> {
        Arc::new(
            RemoteSandbox::open(&RemoteOptions {
                url: self.url(),
                token: self.token.clone(),
                root: Some(dir.canonicalize().unwrap()),
                upload: None,
            })
            .unwrap(),
        )
    }
}

fn rand_u64() -> u64 {
    use std::io::Read;
    let mut b = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut b)
        .unwrap();
    u64::from_le_bytes(b)
}

/// The far cubby of the process whose sandboxes are `linux` ones.
pub fn far_linux() -> &'static Far {
    static FAR: OnceLock<Far> = OnceLock::new();
    FAR.get_or_init(|| Far::start(Config::default()))
}

/// The far cubby whose `linux` sandboxes' commands reach the host's network.
pub fn far_linux_networked() -> &'static Far {
    static FAR: OnceLock<Far> = OnceLock::new();
    FAR.get_or_init(|| {
        let mut config = Config::default();
        config.network.mode = NetworkMode::On;
        Far::start(config)
    })
}
