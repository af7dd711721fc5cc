//! What commands get of the host's environment: API keys, `env.pass`,
//! `doctor`'s listing; network `allow` through the egress proxy.

use crate::*;

#[test]
fn host_side_keys_never_reach_commands() {
    let dir = tempfile::tempdir().unwrap();
    // A name commands get only when the config passes it on.
    std::fs::write(
        dir.path().join("cubby.toml"),
        "[env]\npass = [\"CUBBY_VISIBLE\"]\n",
    )
    .unwrap();
    for provider in ["linux", "local"] {
        // The subcommand, the common flags, then the rest (after `--` for exec).
        let run = |args: &[&str]| {
            Command::new(env!("CARGO_BIN_EXE_cubby"))
                .arg(args[0])
                .arg("--root")
                .arg(dir.path())
                .args(["--provider", provider])
                .args(&args[1..])
                .env_remove("RUST_LOG")
                .env("CUBBY_TOKEN", "token-value-4711")
                .env("BRAVE_API_KEY", "brave-value-4711")
                .env("CUBBY_VISIBLE", "visible-value-4711")
                .output()
                .unwrap()
        };
        let out = run(&["call", "run", r#"{"command": "env"}"#]);
        let text = stdout(&out);
        assert!(text.contains("visible-value-4711"), "{provider}: {text}");
        assert!(!text.contains("token-value-4711"), "{provider}: {text}");
        assert!(!text.contains("brave-value-4711"), "{provider}: {text}");
        if provider == "linux" {
            let out = run(&["exec", "--", "env"]);
            let text = stdout(&out);
            assert!(text.contains("visible-value-4711"), "exec: {text}");
            assert!(!text.contains("token-value-4711"), "exec: {text}");
            assert!(!text.contains("brave-value-4711"), "exec: {text}");
        }
    }
}

/// `[network] mode = "allow"` from the config file, with a secret bound to
/// `localhost` by `[[network.inject]]`: the command reaches a local server
/// through the egress proxy (the system resolver, `allowed_cidrs` listing
/// loopback; `--noproxy ''` because `NO_PROXY` keeps `localhost` inside the
/// sandbox otherwise), sees only a placeholder, and the server gets the real value;
/// the tool's output never shows it. `cubby exec --network allow` takes the
/// same route, and a name outside the list is refused.
#[test]
fn network_allow_from_the_config_goes_through_the_egress_proxy() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let server = {
        let seen = seen.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().take(2) {
                let mut conn = conn.unwrap();
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && conn.read(&mut byte).unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let auth = head
                    .lines()
                    .find_map(|l| l.strip_prefix("Authorization: "))
                    .unwrap_or("")
                    .to_string();
                let body = format!("auth={auth}\n");
                seen.lock().unwrap().push(auth);
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        })
    };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("cubby.toml");
    std::fs::write(
        &config,
        r#"
secrets = []
[network]
mode = "allow"
allowed_domains = ["localhost"]
allowed_cidrs = ["127.0.0.0/8", "::1/128"]
[[network.inject]]
secret = "CUBBY_TEST_TOKEN"
hosts = ["localhost"]
headers = ["Authorization"]
"#,
    )
    .unwrap();
    let real = "real-cli-token-90210";
    let command = format!(
        "printenv CUBBY_TEST_TOKEN; curl -sS -f --noproxy '' \
         -H \"Authorization: $CUBBY_TEST_TOKEN\" http://localhost:{port}/cli; \
         curl -sS -f http://example.com/; echo rc=$?"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_cubby"))
        .args(["call", "run", "--provider", "linux", "--root"])
        .arg(dir.path())
        .arg(serde_json::json!({ "command": command }).to_string())
        .env("CUBBY_TEST_TOKEN", real)
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(!text.contains(real), "{text}");
    assert!(
        text.contains("cubby-placeholder-CUBBY_TEST_TOKEN-"),
        "{text}"
    );
    // The proxy takes the real value back out of the bound host's answer
    // (the echo shows the placeholder, never the value).
    assert!(
        text.contains("auth=cubby-placeholder-CUBBY_TEST_TOKEN-"),
        "{text}"
    );
    assert!(text.contains("403") && !text.contains("rc=0"), "{text}");
    assert_eq!(seen.lock().unwrap()[0], real);

    let out = Command::new(env!("CARGO_BIN_EXE_cubby"))
        .args(["exec", "--network", "allow", "--root"])
        .arg(dir.path())
        .args(["--", "curl", "-sS", "-f", "--noproxy", ""])
        .arg(format!("http://localhost:{port}/exec"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(stdout(&out).contains("auth="), "{out:?}");
    server.join().unwrap();
}

/// What an agent client leaves in cubby's environment (issue 13, finding
/// 9), a name the config passes on, and a secret.
const HOST_KEYS: [(&str, &str); 6] = [
    ("OPENAI_API_KEY", "sk-openai-4711"),
    ("ANTHROPIC_API_KEY", "sk-ant-4711"),
    ("AWS_SECRET_ACCESS_KEY", "aws-secret-4711"),
    ("GITHUB_TOKEN", "ghp-github-4711"),
    ("CUBBY_TEST_PASSED", "passed-value-4711"),
    ("CUBBY_TEST_SECRET", "secret-value-4711"),
];

/// The config of the environment tests: a name passed, one set, a secret.
const ENV_CONFIG: &str = "secrets = [\"CUBBY_TEST_SECRET\"]\n\
    [env]\n\
    pass = [\"CUBBY_TEST_PASSED\"]\n\
    set = { CUBBY_TEST_SET = \"set-value\" }\n";

/// `cubby <args> --root <root> [rest]` with [`HOST_KEYS`] in its environment.
pub(crate) fn cubby_with_keys(root: &Path, args: &[&str], rest: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cubby"))
        .args(args)
        .arg("--root")
        .arg(root)
        .args(rest)
        .env_remove("RUST_LOG")
        .envs(HOST_KEYS)
        .output()
        .unwrap()
}

/// The finding's reproduction: `OPENAI_API_KEY=… ANTHROPIC_API_KEY=…
/// AWS_SECRET_ACCESS_KEY=… GITHUB_TOKEN=… cubby call run '{"command":"env"}'`
/// printed all four. Now none reaches a command, on `linux` and `local`,
/// through `run` and `cubby exec`; `env.pass`, `env.set` and `secrets` do
/// (a secret redacted in what `run` returns; `cubby exec` passes the
/// command's stdio through untouched). Control: a plain `env` started by
/// this test with the same variables prints them all.
#[test]
fn the_hosts_api_keys_never_reach_commands() {
    let control = Command::new("env").envs(HOST_KEYS).output().unwrap();
    let control = stdout(&control);
    for (name, value) in HOST_KEYS {
        assert!(
            control.contains(&format!("{name}={value}")),
            "control: {control}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cubby.toml"), ENV_CONFIG).unwrap();
    for provider in ["linux", "local"] {
        let common = ["--provider", provider];
        let run = cubby_with_keys(
            dir.path(),
            &["call", "run", r#"{"command":"env"}"#],
            &common,
        );
        let exec = cubby_with_keys(
            dir.path(),
            &["exec"],
            &[&common[..], &["--", "env"]].concat(),
        );
        for (what, out) in [("run", &run), ("exec", &exec)] {
            let text = stdout(out);
            assert_eq!(out.status.code(), Some(0), "{provider} {what}: {text}");
            for (name, value) in &HOST_KEYS[..4] {
                assert!(
                    !text.contains(value) && !text.contains(name),
                    "{provider} {what}: {name} reached the command:\n{text}"
                );
            }
            assert!(
                text.contains("CUBBY_TEST_PASSED=passed-value-4711"),
                "{provider} {what}: {text}"
            );
            assert!(
                text.contains("CUBBY_TEST_SET=set-value"),
                "{provider} {what}: {text}"
            );
            assert!(text.contains("\nPATH="), "{provider} {what}: {text}");
        }
        let text = stdout(&run);
        assert!(
            text.contains("CUBBY_TEST_SECRET=[REDACTED:CUBBY_TEST_SECRET]"),
            "{provider}: {text}"
        );
        assert!(!text.contains("secret-value-4711"), "{provider}: {text}");
        assert!(
            stdout(&exec).contains("CUBBY_TEST_SECRET=secret-value-4711"),
            "{provider} exec"
        );
    }
}

/// An `env.pass` name that looks like a credential is a config error that
/// names it and says to list it under `secrets`; `cubby doctor` says the
/// same and fails. Control: an innocent name in its place is accepted.
#[test]
fn a_credential_looking_env_pass_name_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("cubby.toml");
    for name in [
        "OPENAI_API_KEY",
        "npm_token",
        "DB_Password",
        "SESSION_COOKIE",
    ] {
        std::fs::write(&config, format!("[env]\npass = [\"{name}\"]\n")).unwrap();
        let out = cubby_with_keys(dir.path(), &["call", "run", r#"{"command":"true"}"#], &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{name}: {err}");
        assert!(
            err.contains(&format!("`{name}`")) && err.contains("`secrets`"),
            "{name}: {err}"
        );
        let out = cubby_with_keys(dir.path(), &["doctor"], &[]);
        assert_eq!(out.status.code(), Some(1), "doctor, {name}");
        assert!(
            stdout(&out).contains(&format!("`{name}`")),
            "doctor, {name}: {}",
            stdout(&out)
        );
    }
    std::fs::write(&config, "[env]\npass = [\"CARGO_HOME\"]\n").unwrap();
    let out = cubby_with_keys(dir.path(), &["call", "run", r#"{"command":"true"}"#], &[]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Unknown keys of `[env]` are named; `env.set` cannot change what `run` fixes.
    for (text, want) in [
        ("[env]\npasss = []\n", "passs"),
        ("[env]\nset = { CI = \"0\" }\n", "`CI`"),
    ] {
        std::fs::write(&config, text).unwrap();
        let out = cubby_with_keys(dir.path(), &["call", "run", r#"{"command":"true"}"#], &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{text}");
        assert!(err.contains(want), "{text}: {err}");
    }
}

/// `cubby doctor` lists what commands get and what they do not, by name
/// only: never a value.
#[test]
fn doctor_lists_the_environment_of_commands_by_name() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cubby.toml"), ENV_CONFIG).unwrap();
    let out = cubby_with_keys(dir.path(), &["doctor"], &[]);
    let text = stdout(&out);
    let line = |prefix: &str| -> String {
        text.lines()
            .find(|l| l.trim_start().starts_with(prefix))
            .unwrap_or_else(|| panic!("no `{prefix}` line:\n{text}"))
            .to_string()
    };
    assert!(line("inherited:").contains("PATH"), "{text}");
    assert!(line("env.pass:").contains("CUBBY_TEST_PASSED"), "{text}");
    assert!(line("env.set:").contains("CUBBY_TEST_SET"), "{text}");
    assert!(line("secrets:").contains("CUBBY_TEST_SECRET"), "{text}");
    assert!(line("run fixes:").contains("GIT_TERMINAL_PROMPT"), "{text}");
    let not_given = line("not given:");
    for (name, _) in &HOST_KEYS[..4] {
        assert!(not_given.contains(name), "{name}: {text}");
    }
    for (_, value) in HOST_KEYS {
        assert!(!text.contains(value), "a value in doctor's output: {text}");
    }
    assert!(!text.contains("set-value"), "{text}");
}

/// A sandbox with a gateway: `cubby exec`'s command gets a live token as
/// `run`'s does (the gateway checks the token before the route, so a call
/// to an unlisted path with it is `403`, without it `401`: the upstream
/// is never reached), and `cubby doctor` lists the gateway, its routes
/// and its credential's variable by name, never its value.
#[test]
fn exec_gets_a_gateway_token_and_doctor_lists_the_gateways() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cubby.toml"),
        "[gateway.tracker]\n\
         base_url = \"https://tracker.invalid\"\n\
         credential = { secret = \"CUBBY_TEST_GW_CRED\", header = \"Authorization\", format = \"Bearer {}\" }\n\
         routes = [\"GET /items/:id\"]\n",
    )
    .unwrap();
    let call = |header: &str| {
        let script = format!(
            "curl -s -o /dev/null -w '%{{http_code}}' {header} \"$CUBBY_GATEWAY_TRACKER_URL/other\""
        );
        let out = Command::new(env!("CARGO_BIN_EXE_cubby"))
            .args(["exec", "--root"])
            .arg(dir.path())
            .args(["--", "sh", "-c", &script])
            .env_remove("RUST_LOG")
            .env("CUBBY_TEST_GW_CRED", "gw-credential-4711")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        stdout(&out)
    };
    // Control: no token, refused before the route is looked at.
    assert_eq!(call(""), "401");
    assert_eq!(
        call("-H \"Authorization: Bearer $CUBBY_GATEWAY_TOKEN\""),
        "403"
    );

    let out = Command::new(env!("CARGO_BIN_EXE_cubby"))
        .args(["doctor", "--root"])
        .arg(dir.path())
        .env_remove("RUST_LOG")
        .env("CUBBY_TEST_GW_CRED", "gw-credential-4711")
        .output()
        .unwrap();
    let text = stdout(&out);
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("tracker:"))
        .unwrap_or_else(|| panic!("no gateway line:\n{text}"));
    assert!(line.contains("https://tracker.invalid"), "{text}");
    assert!(line.contains("GET /items/:id"), "{text}");
    assert!(line.contains("$CUBBY_TEST_GW_CRED"), "{text}");
    assert!(!line.contains("NOT SET"), "{text}");
    assert!(!text.contains("gw-credential-4711"), "{text}");
}
