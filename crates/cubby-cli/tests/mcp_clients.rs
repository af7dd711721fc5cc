//! The clients agents run in, Codex CLI and Claude Code, drive cubby over
//! stdio (`cubby mcp`, the default `linux` provider) as a model scripted on
//! loopback tells them to (`common/fake_model.rs`: the Responses API for
//! Codex, the Messages API for Claude Code, both with server-sent events).
//!
//! Each session searches for a planted literal, edits a file before reading
//! it, reads it, edits it, runs a command and asks for the changes, then
//! answers. The tests check what the client handed the model for each tool
//! result: cubby's text (the `path:line:` hit, the `not_read` error, the
//! numbered lines, the diff, the `OK exit=0` verdict, `M path`), not the
//! `structuredContent` JSON; that the workspace changed as scripted and
//! nothing beside it did (the command also tries to write beside the
//! workspace and in `HOME`). Claude Code also views two PNGs: a small one
//! reaches the model as an image block as it is, one of 18 MB (within
//! the pixel bound, over the bytes bound) as an image block re-encoded within
//! 3.75 MB; and runs a command that leaves a PNG and a PDF in
//! `$CUBBY_OUTPUT_DIR`: the PNG reaches the model as an image block, the
//! PDF as its artifact line and link, never as an image.
//!
//! The clients are pinned npm packages (their native binaries come with
//! them), installed the first time into `target/mcp-clients` (a lock file
//! keeps parallel installs apart). Each runs in a private temporary `HOME`
//! (and `CODEX_HOME`, `TMPDIR`) with telemetry, update checks and
//! nonessential traffic off, in a process group that must be gone when it
//! exits.
//!
//! `ergonomics` (ignored; `scripts/bench/ergonomics.sh` runs it) measures
//! through the same fake model the bytes each client hands the model for
//! the same operations from cubby's text, from cubby with `[mcp]
//! structured_content = true`, and from the MCP reference filesystem server.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "common/fake_model.rs"]
mod fake_model;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use common::{GroupRun, repo_root};
use fake_model::{Call, FakeModel, Script, Seen, call};
use serde_json::{Value, json};

/// Codex CLI (its native binary comes in a platform package).
const CODEX: &str = "@openai/codex@0.171.0";
/// Claude Code (the same).
const CLAUDE_CODE: &str = "@anthropic-ai/claude-code@2.1.332";
/// The MCP reference filesystem server, for the ergonomics benchmark.
const SERVER_FILESYSTEM: &str = "@modelcontextprotocol/server-filesystem@2026.8.31";

/// Longest a client session may run, cubby included.
const CLIENT_DEADLINE: Duration = Duration::from_secs(240);
/// How long what a client started (cubby, its sandbox) may outlive it.
const EXIT_GRACE: Duration = Duration::from_secs(10);

/// The MCP server's name in the clients' configs.
const SERVER: &str = "cubby";
/// The literal the scripted search looks for.
const PLANTED: &str = "planted_literal_7c3e";
/// The file the session searches, edits and reads.
const NOTES: &str = "notes.txt";
/// Its content at the start, and after the scripted edit.
const NOTES_BEFORE: &str = "alpha\nplanted_literal_7c3e is here\ngamma\n";
const NOTES_AFTER: &str = "alpha\nplanted_literal_7c3e is here\ndelta\n";
/// What a sentinel file beside the workspace and one in `HOME` hold.
const SENTINEL: &str = "left alone\n";
/// The command the session runs: it writes a file in the workspace, tries
/// to write beside the workspace and in `HOME` (the sandbox refuses both;
/// their errors are dropped), and prints a line.
const COMMAND: &str = "printf 'ran\\n' > ran.txt; (printf x >> ../sentinel.txt; printf x > \"$HOME/from-run\") 2>/dev/null; echo ran-ok";
/// The image Claude Code views, in pixels (within every bound: passed on
/// as it is).
const PICTURE: (u32, u32) = (64, 48);
/// A picture of noise within the pixel bound whose PNG (RGBA, 16 bits a
/// channel: about 18 MB) is over the bytes bound: cubby re-encodes it to
/// fit. (Sent as it is, its 24 MB of base64 broke the MCP connection.)
const BIG_PICTURE: (u32, u32) = (1500, 1500);
/// The most bytes an image may have when it reaches the model (SPEC §5.1:
/// ≤ 3.75 MB after re-encoding; Anthropic's API takes at most 5 MB).
const MAX_IMAGE_BYTES: usize = 3_750_000;
/// The longest edge of an image that reaches the model (SPEC §3).
const MAX_IMAGE_EDGE_PX: u32 = 1568;
/// The command Claude Code runs that publishes: it copies a PNG and a PDF
/// of the workspace into `$CUBBY_OUTPUT_DIR`.
const PUBLISH_COMMAND: &str =
    "cp assets/chart.png assets/report.pdf \"$CUBBY_OUTPUT_DIR/\" && echo published";
/// The PDF it publishes (a signature, one empty page).
const REPORT_PDF: &[u8] = b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n\
    2 0 obj<</Type/Pages/Kids[3 0 R]/Count 1>>endobj\n\
    3 0 obj<</Type/Page/Parent 2 0 R/MediaBox[0 0 72 72]>>endobj\ntrailer<</Root 1 0 R>>\n%%EOF\n";
/// The model's final answer.
const ANSWER: &str = "The scripted session is over.";

/// The installed clients.
struct Clients {
    dir: PathBuf,
}

impl Clients {
    fn codex_js(&self) -> PathBuf {
        self.dir.join("node_modules/@openai/codex/bin/codex.js")
    }

    fn claude(&self) -> PathBuf {
        self.dir
            .join("node_modules/@anthropic-ai/claude-code/bin/claude.exe")
    }

    fn server_filesystem_js(&self) -> PathBuf {
        self.dir
            .join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js")
    }
}

/// Installs the pinned packages into `target/mcp-clients` the first time
/// (and again when the list changes), one install at a time across
/// threads and processes; checks the clients' versions.
fn clients() -> Clients {
    static LOCK: Mutex<()> = Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let packages = [CODEX, CLAUDE_CODE, SERVER_FILESYSTEM];
    let dir = repo_root().join("target/mcp-clients");
    std::fs::create_dir_all(&dir).unwrap();
    let lock = std::fs::File::create(repo_root().join("target/mcp-clients.lock")).unwrap();
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).unwrap();
    let clients = Clients { dir: dir.clone() };
    // Scripts on: Claude Code's postinstall puts its native binary in place.
    common::npm_install(&dir, &packages, || {
        clients.claude().exists() && clients.codex_js().exists()
    });
    let version = |cmd: &mut Command| {
        let out = cmd.arg("--version").output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let codex = version(Command::new("node").arg(clients.codex_js()));
    assert_eq!(codex, format!("codex-cli {}", pinned(CODEX)));
    let claude = version(&mut Command::new(clients.claude()));
    assert!(
        claude.starts_with(&format!("{} ", pinned(CLAUDE_CODE))),
        "{claude}"
    );
    clients
}

/// The version of a pinned `name@version`.
fn pinned(package: &str) -> &str {
    package.rsplit_once('@').unwrap().1
}

/// A session's directories: the workspace, a sentinel file beside it, the
/// client's `HOME` (with a file of its own) and `TMPDIR`; all removed on
/// drop.
struct Lab {
    root: tempfile::TempDir,
}

impl Lab {
    fn new() -> Lab {
        let root = tempfile::tempdir().unwrap();
        for dir in ["ws", "home/.codex", "tmp"] {
            std::fs::create_dir_all(root.path().join(dir)).unwrap();
        }
        std::fs::write(root.path().join("sentinel.txt"), SENTINEL).unwrap();
        std::fs::write(root.path().join("home/keep.txt"), SENTINEL).unwrap();
        Lab { root }
    }

    fn ws(&self) -> PathBuf {
        self.root.path().join("ws")
    }

    fn home(&self) -> PathBuf {
        self.root.path().join("home")
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.path().join(rel)
    }
}

/// An MCP server over stdio, as the clients' configs name it.
struct Server {
    name: &'static str,
    command: PathBuf,
    args: Vec<String>,
}

/// `cubby mcp --root WS` (with `--config FILE` when given).
fn cubby(ws: &Path, config: Option<&Path>) -> Server {
    let mut args = vec!["mcp".to_string(), "--root".into(), path_str(ws)];
    if let Some(config) = config {
        args.extend(["--config".into(), path_str(config)]);
    }
    Server {
        name: SERVER,
        command: PathBuf::from(env!("CARGO_BIN_EXE_cubby")),
        args,
    }
}

fn path_str(p: &Path) -> String {
    p.to_str().expect("a UTF-8 temporary path").to_string()
}

/// A TOML basic string (JSON's escapes are TOML's).
fn toml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

#[derive(Clone, Copy, Debug)]
enum Client {
    Codex,
    ClaudeCode,
}

impl Client {
    fn name(self) -> &'static str {
        match self {
            Client::Codex => "Codex CLI",
            Client::ClaudeCode => "Claude Code",
        }
    }
}

/// What the user types.
const PROMPT: &str = "Work in the cubby workspace as planned.";

/// The client's environment: nothing of the test's but `PATH`; a private
/// `HOME` and `TMPDIR`; telemetry, update checks and nonessential traffic
/// off.
fn client_command(program: &Path, lab: &Lab) -> Command {
    let mut cmd = Command::new(program);
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", lab.home())
        .env("TMPDIR", lab.path("tmp"))
        .env("LANG", "C.UTF-8")
        .env("NO_COLOR", "1")
        .current_dir(lab.ws());
    cmd
}

/// Runs one client session against `model` with `server` configured.
fn run_client(
    client: Client,
    clients: &Clients,
    lab: &Lab,
    server: &Server,
    model: &FakeModel,
) -> GroupRun {
    let cmd = match client {
        Client::Codex => {
            let codex_home = lab.home().join(".codex");
            let mut config = String::new();
            writeln!(
                config,
                "model = \"fake-model\"\nmodel_provider = \"fake\"\n\
                 approval_policy = \"never\"\nsandbox_mode = \"read-only\"\n\
                 check_for_update_on_startup = false\n\n\
                 [analytics]\nenabled = false\n\n[feedback]\nenabled = false\n\n\
                 [otel]\nexporter = \"none\"\n\n\
                 [model_providers.fake]\nname = \"fake\"\nbase_url = {}\n\
                 wire_api = \"responses\"\nrequest_max_retries = 0\nstream_max_retries = 0\n\n\
                 [mcp_servers.{}]\ncommand = {}\nargs = [{}]\n\
                 default_tools_approval_mode = \"approve\"",
                toml_str(&format!("{}/v1", model.base_url())),
                server.name,
                toml_str(&path_str(&server.command)),
                server
                    .args
                    .iter()
                    .map(|a| toml_str(a))
                    .collect::<Vec<_>>()
                    .join(", "),
            )
            .unwrap();
            std::fs::write(codex_home.join("config.toml"), config).unwrap();
            let mut cmd = client_command(Path::new("node"), lab);
            cmd.env("CODEX_HOME", &codex_home)
                .arg(clients.codex_js())
                .args(["exec", "--skip-git-repo-check", "--color", "never", PROMPT]);
            cmd
        }
        Client::ClaudeCode => {
            let config = lab.path("mcp.json");
            let servers = json!({"mcpServers": {server.name: {
                "type": "stdio", "command": server.command, "args": server.args}}});
            std::fs::write(&config, servers.to_string()).unwrap();
            let mut cmd = client_command(&clients.claude(), lab);
            cmd.env("ANTHROPIC_BASE_URL", model.base_url())
                .env("ANTHROPIC_API_KEY", "sk-ant-fake-key")
                .env("DISABLE_TELEMETRY", "1")
                .env("DISABLE_AUTOUPDATER", "1")
                .env("DISABLE_ERROR_REPORTING", "1")
                .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
                .args(["-p", PROMPT, "--mcp-config"])
                .arg(&config)
                .arg("--strict-mcp-config")
                .args(["--allowedTools", &format!("mcp__{}__*", server.name)]);
            cmd
        }
    };
    common::run_in_group(cmd, CLIENT_DEADLINE, EXIT_GRACE)
}

/// Fails unless the client exited 0 with the final answer, left nothing
/// running, and the model saw every turn go as scripted.
fn check_run(client: Client, run: &GroupRun, model: &FakeModel, answer: &str) {
    let (stdout, stderr) = (&run.stdout, &run.stderr);
    let what = client.name();
    let Some(status) = run.status else {
        panic!(
            "{what} did not finish in {}s:\n{stdout}\n{stderr}",
            CLIENT_DEADLINE.as_secs()
        );
    };
    assert!(
        status.success(),
        "{what} failed ({status}):\n{stdout}\n{stderr}"
    );
    assert!(
        !run.lingered,
        "processes {what} started were still running {}s after it exited",
        EXIT_GRACE.as_secs()
    );
    assert_eq!(
        model.problems(),
        Vec::<String>::new(),
        "{what}:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains(answer),
        "{what} did not print the answer:\n{stdout}\n{stderr}"
    );
    println!(
        "{what}: {:.1}s, {} model requests",
        run.elapsed.as_secs_f64(),
        model.requests().len()
    );
}

/// Whether `body` is a JSON object or array (structuredContent serialized)
/// rather than text.
fn is_json(body: &str) -> bool {
    serde_json::from_str::<Value>(body.trim()).is_ok_and(|v| v.is_object() || v.is_array())
}

/// The scripted session of the functional tests.
fn session_script(view_picture: bool) -> Script {
    let mut calls = vec![
        call("search", json!({"query": PLANTED})),
        call(
            "edit_file",
            json!({"path": NOTES, "find": "gamma", "replace": "delta"}),
        ),
        call("read_file", json!({"path": NOTES})),
        call(
            "edit_file",
            json!({"path": NOTES, "find": "gamma", "replace": "delta"}),
        ),
        call("run", json!({"command": COMMAND})),
        call("changes", json!({})),
    ];
    if view_picture {
        calls.push(call("view_file", json!({"path": "picture.png"})));
        calls.push(call("view_file", json!({"path": "big.png"})));
        calls.push(call("run", json!({"command": PUBLISH_COMMAND})));
    }
    Script {
        server: SERVER.into(),
        calls,
        answer: ANSWER.into(),
    }
}

/// The PNG Claude Code views.
fn picture() -> image::RgbImage {
    image::RgbImage::from_fn(PICTURE.0, PICTURE.1, |x, y| {
        image::Rgb([(x * 4) as u8, (y * 5) as u8, 200])
    })
}

fn png(img: &image::DynamicImage) -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png).unwrap();
    out.into_inner()
}

/// [`BIG_PICTURE`]: noise (xorshift), which PNG cannot compress, 16 bits a
/// channel with alpha.
fn big_picture() -> image::DynamicImage {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    image::DynamicImage::ImageRgba16(image::ImageBuffer::from_fn(
        BIG_PICTURE.0,
        BIG_PICTURE.1,
        |_, _| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let [a, b, c, d, e, f, g, h] = state.to_le_bytes();
            image::Rgba([
                u16::from_le_bytes([a, b]),
                u16::from_le_bytes([c, d]),
                u16::from_le_bytes([e, f]),
                u16::from_le_bytes([g, h]),
            ])
        },
    ))
}

/// The one image of a result, decoded from base64: (media type, bytes).
fn image_of(what: &str, step: &str, s: &Seen) -> (String, Vec<u8>) {
    let [(media_type, data)] = s.images.as_slice() else {
        let raw = s.raw.to_string();
        panic!(
            "{what}: {step} reached the model without one image block: {}",
            &raw[..raw.len().min(2_000)]
        );
    };
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .unwrap();
    (media_type.clone(), bytes)
}

/// Every entry under `dir` with its content (`None` for a directory),
/// relative paths, sorted.
fn tree(dir: &Path) -> Vec<(String, Option<Vec<u8>>)> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<(String, Option<Vec<u8>>)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let rel = path
                .strip_prefix(base)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if entry.file_type().unwrap().is_dir() {
                out.push((rel, None));
                walk(base, &path, out);
            } else {
                out.push((rel, Some(std::fs::read(&path).unwrap())));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// One scripted session through `client`, with every check.
fn scripted_session(client: Client) {
    let clients = clients();
    let lab = Lab::new();
    let view_picture = matches!(client, Client::ClaudeCode);
    std::fs::write(lab.ws().join(NOTES), NOTES_BEFORE).unwrap();
    let (small_png, big_png) = if view_picture {
        (png(&picture().into()), png(&big_picture()))
    } else {
        (Vec::new(), Vec::new())
    };
    if view_picture {
        assert!(big_png.len() > MAX_IMAGE_BYTES, "{}", big_png.len());
        std::fs::write(lab.ws().join("picture.png"), &small_png).unwrap();
        std::fs::write(lab.ws().join("big.png"), &big_png).unwrap();
        std::fs::create_dir(lab.ws().join("assets")).unwrap();
        std::fs::write(lab.ws().join("assets/chart.png"), &small_png).unwrap();
        std::fs::write(lab.ws().join("assets/report.pdf"), REPORT_PDF).unwrap();
    }
    let model = FakeModel::start(session_script(view_picture));
    let run = run_client(client, &clients, &lab, &cubby(&lab.ws(), None), &model);
    check_run(client, &run, &model, ANSWER);

    let what = client.name();
    let results = model.results();
    let seen = |i: usize, step: &str| -> Seen {
        results[i]
            .clone()
            .unwrap_or_else(|| panic!("{what}: the {step} result never reached the model"))
    };
    // Each success result is cubby's text, not structuredContent as JSON.
    let text_of = |i: usize, step: &str, wants: &[&str]| {
        let s = seen(i, step);
        let body = s.body();
        assert!(
            !is_json(&body) && wants.iter().all(|w| body.contains(w)),
            "{what}: the model got for {step}\n{body}\n(raw {})\nnot cubby's text with {wants:?}",
            s.raw
        );
        s
    };
    text_of(0, "search", &[&format!("{NOTES}:2: {PLANTED} is here")]);
    let not_read = text_of(
        1,
        "the edit before reading",
        &[&format!("ERROR not_read: `{NOTES}`")],
    );
    if matches!(client, Client::ClaudeCode) {
        assert!(
            not_read.is_error,
            "{what}: the error result lost isError: {}",
            not_read.raw
        );
    }
    text_of(
        2,
        "read_file",
        &[
            "     1\talpha\n",
            "     2\tplanted_literal_7c3e is here\n",
            "     3\tgamma",
        ],
    );
    text_of(
        3,
        "edit_file",
        &[
            &format!("Edited `{NOTES}`: 1 replacement."),
            "\n-gamma\n+delta\n",
        ],
    );
    text_of(4, "run", &["OK exit=0 ", "\noutput:\nran-ok\n"]);
    text_of(5, "changes", &[&format!("M {NOTES}"), "A ran.txt"]);
    if view_picture {
        // A small PNG reaches the model as it is.
        let (media_type, bytes) = image_of(what, "view_file", &seen(6, "view_file"));
        assert_eq!(media_type, "image/png");
        let shown = image::load_from_memory(&bytes).unwrap().to_rgb8();
        assert_eq!(
            shown,
            picture(),
            "{what}: the image the model got is not the picture"
        );
        // One over the bytes bound reaches it re-encoded, within the bounds.
        let step = "view_file of an 18 MB PNG";
        let (media_type, bytes) = image_of(what, step, &seen(7, step));
        assert!(
            bytes.len() <= MAX_IMAGE_BYTES,
            "{what}: {step} reached the model as {} bytes",
            bytes.len()
        );
        let format = image::guess_format(&bytes).unwrap();

        assert_eq!(
            format.to_mime_type(),
            media_type,
            "{what}: {step}: the media type is not the bytes'"
        );
        let shown = image::load_from_memory(&bytes).unwrap();
        assert!(
            shown.width().max(shown.height()) <= MAX_IMAGE_EDGE_PX,
            "{what}: {step}: {}x{}",
            shown.width(),
            shown.height()
        );
        // A command's PNG and PDF in $CUBBY_OUTPUT_DIR: the PNG reaches
        // the model as an image block, the PDF as its line (with its
        // cubby:// link), never as an image.
        let step = "the run that leaves a PNG and a PDF";
        let published = text_of(
            8,
            step,
            &[
                "OK exit=0 ",
                "published",
                "artifact chart.png — image/png, ",
                "artifact report.pdf — application/pdf, ",
                "cubby://artifacts/",
            ],
        );
        let (media_type, bytes) = image_of(what, step, &published);
        assert_eq!(media_type, "image/png", "{what}: {step}");
        assert_eq!(
            image::load_from_memory(&bytes).unwrap().to_rgb8(),
            picture(),
            "{what}: {step}: the image the model got is not the chart"
        );
        let body = published.body();
        let pdf_line = body
            .lines()
            .find(|l| l.starts_with("artifact report.pdf"))
            .unwrap();
        assert!(
            pdf_line.contains("/report.pdf") && pdf_line.contains("cubby://artifacts/"),
            "{what}: {step}: {pdf_line}"
        );
    }

    // The workspace changed as scripted; nothing beside it did.
    let mut want = vec![
        (NOTES.to_string(), Some(NOTES_AFTER.as_bytes().to_vec())),
        ("ran.txt".to_string(), Some(b"ran\n".to_vec())),
    ];
    if view_picture {
        want.push(("picture.png".to_string(), Some(small_png.clone())));
        want.push(("big.png".to_string(), Some(big_png)));
        want.push(("assets".to_string(), None));
        want.push(("assets/chart.png".to_string(), Some(small_png.clone())));
        want.push(("assets/report.pdf".to_string(), Some(REPORT_PDF.to_vec())));
        // The run's output directory keeps what the command left there.
        let outputs: Vec<PathBuf> = std::fs::read_dir(lab.ws().join(".cubby/output"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        let [output] = outputs.as_slice() else {
            panic!("{what}: output directories {outputs:?}");
        };
        let run = output.file_name().unwrap().to_str().unwrap();
        for dir in [
            ".cubby".to_string(),
            ".cubby/output".into(),
            format!(".cubby/output/{run}"),
        ] {
            want.push((dir, None));
        }
        want.push((format!(".cubby/output/{run}/chart.png"), Some(small_png)));
        want.push((
            format!(".cubby/output/{run}/report.pdf"),
            Some(REPORT_PDF.to_vec()),
        ));
    }
    want.sort();
    let got = tree(&lab.ws());
    assert!(
        got == want,
        "{what}: the workspace holds {:?}",
        got.iter()
            .map(|(p, c)| (
                p,
                c.as_ref().map(|c| String::from_utf8_lossy(c).into_owned())
            ))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        std::fs::read_to_string(lab.path("sentinel.txt")).unwrap(),
        SENTINEL
    );
    assert_eq!(
        std::fs::read_to_string(lab.home().join("keep.txt")).unwrap(),
        SENTINEL
    );
    assert!(
        !lab.home().join("from-run").exists(),
        "{what}: the command wrote in HOME"
    );
}

#[test]
fn codex_cli_hands_the_model_cubbys_text() {
    scripted_session(Client::Codex);
}

#[test]
fn claude_code_hands_the_model_cubbys_text_and_the_image() {
    scripted_session(Client::ClaudeCode);
}

// ---- the ergonomics benchmark ----

/// Lines of the file the benchmark reads.
const BENCH_LINES: usize = 200;
/// Of those, the lines the benchmark's search matches (every 20th).
const BENCH_MATCHES: usize = 10;
/// Files in the directory the benchmark lists.
const BENCH_ENTRIES: usize = 50;
/// Lines of 80 bytes the benchmark's command prints: 10 KiB.
const BENCH_OUTPUT_LINES: usize = 128;

/// The benchmark's operations, in the order the sessions call them.
const OPERATIONS: [&str; 5] = [
    "read a 200-line file",
    "search, 10 matches",
    "list a directory of 50 entries",
    "a failed edit",
    "a command printing 10 KB",
];

/// The file the benchmark reads, searches and fails to edit.
const BENCH_FILE: &str = "src/lines.rs";
/// The `find` of the failed edit: like line 7, with one word changed.
const BENCH_MISSING: &str = "pub fn item_007() -> u32 { 8 }";

/// The benchmark's workspace: `src/lines.rs` (200 lines, 10 holding
/// `needle`) and `dir/` (50 files).
fn bench_workspace(ws: &Path) {
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::create_dir_all(ws.join("dir")).unwrap();
    let mut lines = String::new();
    for i in 1..=BENCH_LINES {
        if i % (BENCH_LINES / BENCH_MATCHES) == 0 {
            writeln!(lines, "pub fn item_{i:03}() -> u32 {{ {i} }} // needle").unwrap();
        } else {
            writeln!(lines, "pub fn item_{i:03}() -> u32 {{ {i} }}").unwrap();
        }
    }
    std::fs::write(ws.join(BENCH_FILE), lines).unwrap();
    for i in 1..=BENCH_ENTRIES {
        std::fs::write(ws.join(format!("dir/file_{i:02}.txt")), "x\n").unwrap();
    }
}

/// A command that prints [`BENCH_OUTPUT_LINES`] lines of 80 bytes.
fn bench_command() -> String {
    format!("for i in $(seq 1 {BENCH_OUTPUT_LINES}); do printf 'line %03d %070d\\n' $i 0; done")
}

/// The servers the benchmark compares.
#[derive(Clone, Copy, Debug)]
enum Flavour {
    /// cubby as configured by default: the text only.
    CubbyText,
    /// cubby with `[mcp] structured_content = true`.
    CubbyStructured,
    /// `@modelcontextprotocol/server-filesystem`.
    Filesystem,
}

impl Flavour {
    fn name(self) -> &'static str {
        match self {
            Flavour::CubbyText => "cubby (text, default)",
            Flavour::CubbyStructured => "cubby (structured_content = true)",
            Flavour::Filesystem => "server-filesystem",
        }
    }

    /// The server, and the session's calls, one for each of [`OPERATIONS`]
    /// (`None` where the server has no equivalent).
    fn session(self, clients: &Clients, lab: &Lab) -> (Server, Vec<Option<Call>>) {
        let ws = lab.ws();
        match self {
            Flavour::CubbyText | Flavour::CubbyStructured => {
                let config = lab.path("cubby.toml");
                let server = if matches!(self, Flavour::CubbyStructured) {
                    std::fs::write(&config, "[mcp]\nstructured_content = true\n").unwrap();
                    cubby(&ws, Some(&config))
                } else {
                    cubby(&ws, None)
                };
                let calls = vec![
                    Some(call("read_file", json!({"path": BENCH_FILE}))),
                    Some(call("search", json!({"query": "needle"}))),
                    Some(call("list_files", json!({"path": "dir"}))),
                    Some(call(
                        "edit_file",
                        json!({"path": BENCH_FILE, "find": BENCH_MISSING, "replace": "x"}),
                    )),
                    Some(call("run", json!({"command": bench_command()}))),
                ];
                (server, calls)
            }
            Flavour::Filesystem => {
                let server = Server {
                    name: "filesystem",
                    command: PathBuf::from("node"),
                    args: vec![path_str(&clients.server_filesystem_js()), path_str(&ws)],
                };
                let file = path_str(&ws.join(BENCH_FILE));
                let calls = vec![
                    Some(call("read_text_file", json!({"path": file}))),
                    // search_files matches names, not contents.
                    None,
                    Some(call(
                        "list_directory",
                        json!({"path": path_str(&ws.join("dir"))}),
                    )),
                    Some(call(
                        "edit_file",
                        json!({"path": file, "edits": [{"oldText": BENCH_MISSING, "newText": "x"}]}),
                    )),
                    // No command tool.
                    None,
                ];
                (server, calls)
            }
        }
    }
}

/// Runs one benchmark session; the bytes the model got for each operation.
fn bench_session(
    clients: &Clients,
    client: Client,
    flavour: Flavour,
    out: &Path,
) -> Vec<Option<usize>> {
    let lab = Lab::new();
    bench_workspace(&lab.ws());
    let (server, calls) = flavour.session(clients, &lab);
    let model = FakeModel::start(Script {
        server: server.name.into(),
        calls: calls.iter().flatten().cloned().collect(),
        answer: ANSWER.into(),
    });
    let run = run_client(client, clients, &lab, &server, &model);
    check_run(client, &run, &model, ANSWER);
    let mut results = model.results().into_iter();
    let mut bytes = Vec::new();
    for (op, call) in OPERATIONS.iter().zip(&calls) {
        let Some(_) = call else {
            bytes.push(None);
            continue;
        };
        let seen = results
            .next()
            .flatten()
            .unwrap_or_else(|| panic!("{}, {}: no result for {op}", client.name(), flavour.name()));
        let file = format!("{:?}-{:?}-{}.txt", client, flavour, op.replace(' ', "-"));
        std::fs::write(out.join(file), seen.text()).unwrap();
        bytes.push(Some(seen.bytes()));
    }
    bytes
}

/// The ergonomics benchmark (`scripts/bench/ergonomics.sh`): for each
/// client and server, the bytes the model receives for each operation,
/// as a Markdown table on stdout; each result's text goes to
/// `target/ergonomics/`.
#[test]
#[ignore = "a benchmark: scripts/bench/ergonomics.sh runs it"]
fn ergonomics() {
    let clients = clients();
    let out = repo_root().join("target/ergonomics");
    std::fs::create_dir_all(&out).unwrap();
    let flavours = [
        Flavour::CubbyText,
        Flavour::CubbyStructured,
        Flavour::Filesystem,
    ];
    let mut table = String::from("| client | operation |");
    for flavour in flavours {
        write!(table, " {} |", flavour.name()).unwrap();
    }
    table.push_str(" text / structured |\n|---|---|");
    table.push_str(&"---:|".repeat(flavours.len() + 1));
    for client in [Client::Codex, Client::ClaudeCode] {
        let columns: Vec<Vec<Option<usize>>> = flavours
            .iter()
            .map(|f| bench_session(&clients, client, *f, &out))
            .collect();
        for (i, op) in OPERATIONS.iter().enumerate() {
            write!(table, "\n| {} | {op} |", client.name()).unwrap();
            for column in &columns {
                match column[i] {
                    Some(n) => write!(table, " {n} |").unwrap(),
                    None => table.push_str(" n/a |"),
                }
            }
            match (columns[0][i], columns[1][i]) {
                (Some(text), Some(structured)) => {
                    write!(table, " {:.2} |", text as f64 / structured as f64).unwrap()
                }
                _ => table.push_str(" |"),
            }
        }
    }
    println!("{table}");
}
