//! Configuration: the `cubby.toml` shape (SPEC §6) and per-tool [`Limits`].
//!
//! Unknown keys are an error that names the key. Every limit has one name,
//! shared by the constant that holds its default and the config key.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The environment variable the Brave key is read from by default.
pub const BRAVE_API_KEY_ENV: &str = "BRAVE_API_KEY";

/// The sandbox mode (SPEC §4). Its names are `policy.rs`'s (`Mode::as_str`)
/// and the tools it gives are the tools' own facts (`ToolFacts::modes`);
/// it sits here, below the policy, because the config names it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Reading tools only.
    ReadOnly,
    /// File tools and commands; commands write only in the workspace.
    #[default]
    WorkspaceWrite,
    /// Commands unconfined, network on.
    FullAccess,
}

/// Which provider a sandbox is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// In memory; no commands.
    Virtual,
    /// A host directory; commands run as the host user.
    Local,
    /// A host directory; commands in namespaces with Landlock and seccomp.
    Linux,
    /// Another cubby over HTTP.
    Remote,
    /// A cubby pod claimed from an agent-sandbox warm pool, then as `remote`.
    Kubernetes,
}

impl ProviderKind {
    /// The name used in config and flags.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Virtual => "virtual",
            ProviderKind::Local => "local",
            ProviderKind::Linux => "linux",
            ProviderKind::Remote => "remote",
            ProviderKind::Kubernetes => "kubernetes",
        }
    }
}

impl std::str::FromStr for ProviderKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<ProviderKind> {
        match s {
            "virtual" => Ok(ProviderKind::Virtual),
            "local" => Ok(ProviderKind::Local),
            "linux" => Ok(ProviderKind::Linux),
            "remote" => Ok(ProviderKind::Remote),
            "kubernetes" => Ok(ProviderKind::Kubernetes),
            other => Err(Error::invalid_input(format!(
                "unknown provider `{other}`; expected one of: virtual, local, linux, remote, \
                 kubernetes"
            ))),
        }
    }
}

/// Default lines per `read_file` call (also the maximum a model may ask for).
pub const READ_MAX_LINES: usize = 2_000;
/// Bytes of content per `read_file` call.
pub const READ_MAX_BYTES: usize = 50 * 1024;
/// Characters after which a line is cut in `read_file`.
pub const READ_MAX_LINE_CHARS: usize = 2_000;
/// Largest file `read_file` hashes and windows.
pub const READ_MAX_FILE_BYTES: u64 = 256 * 1024 * 1024;
/// Largest content `write_file` accepts.
pub const WRITE_MAX_BYTES: u64 = 32 * 1024 * 1024;
/// Largest file `edit_file` edits.
pub const EDIT_MAX_FILE_BYTES: u64 = 32 * 1024 * 1024;
/// Default cap on `glob` matches.
pub const GLOB_MAX_MATCHES: usize = 1_000;
/// Default cap on `list_files` entries.
pub const LIST_MAX_MATCHES: usize = 1_000;
/// Default cap on `search` matches.
pub const SEARCH_MAX_MATCHES: usize = 100;
/// Largest context a `search` may ask for, in lines.
pub const SEARCH_MAX_CONTEXT: usize = 10;
/// Default `run` timeout.
pub const RUN_TIMEOUT_MS: u64 = 30_000;
/// Clamp for a `run` timeout the model passes.
pub const RUN_MAX_TIMEOUT_MS: u64 = 120_000;
/// Default cap on command output shown to the model.
pub const RUN_MAX_OUTPUT_BYTES: usize = 16_384;
/// Smallest output cap a config may set.
pub const RUN_MIN_OUTPUT_BYTES: usize = 256;

/// `[limits.read_file]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReadLimits {
    /// Lines per call (default and clamp).
    pub max_lines: usize,
    /// Bytes of content per call.
    pub max_bytes: usize,
    /// Largest file read.
    pub max_file_bytes: u64,
}

impl Default for ReadLimits {
    fn default() -> ReadLimits {
        ReadLimits {
            max_lines: READ_MAX_LINES,
            max_bytes: READ_MAX_BYTES,
            max_file_bytes: READ_MAX_FILE_BYTES,
        }
    }
}

/// `[limits.write_file]` and `[limits.edit_file]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WriteLimits {
    /// Largest content (write) or file (edit), in bytes.
    pub max_bytes: u64,
}

impl Default for WriteLimits {
    fn default() -> WriteLimits {
        WriteLimits {
            max_bytes: WRITE_MAX_BYTES,
        }
    }
}

/// `[limits.glob]`, `[limits.list_files]`, `[limits.search]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatchLimits {
    /// Most matches or entries shown; the total is always counted.
    pub max_matches: usize,
}

/// Default open-file limit for sandboxed commands.
pub const SANDBOX_OPEN_FILES: u64 = 4_096;
/// Default process limit for sandboxed commands (per sandbox user).
pub const SANDBOX_PROCESSES: u64 = 1_024;
/// Default largest file a sandboxed command may write, in MiB.
pub const SANDBOX_FILE_SIZE_MB: u64 = 4_096;
/// Default address-space limit per sandboxed process, in MiB.
pub const SANDBOX_ADDRESS_SPACE_MB: u64 = 16_384;
/// Default CPU-time limit per sandboxed process, in seconds.
pub const SANDBOX_CPU_SECONDS: u64 = 3_600;
/// Default size of a sandbox's private `/tmp` and of its `/dev/shm` (each),
/// in MiB.
pub const SANDBOX_TMP_MB: u64 = 1_024;

/// `[limits.sandbox]`: bounds of commands on the `linux` provider. For the
/// rlimits, `0` means "leave the inherited limit".
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxLimits {
    /// `RLIMIT_NOFILE`.
    pub open_files: u64,
    /// Processes of the whole sandbox, root or not: the `pid_max` of the
    /// sandbox's pid namespace (Linux 6.14+) or `pids.max` of its pids
    /// cgroup, and `RLIMIT_NPROC` (which the kernel counts per sandbox for
    /// a user other than root). `0` sets no bound.
    pub processes: u64,
    /// `RLIMIT_FSIZE`, in MiB.
    pub file_size_mb: u64,
    /// `RLIMIT_AS`, in MiB.
    pub address_space_mb: u64,
    /// `RLIMIT_CPU`, in seconds.
    pub cpu_seconds: u64,
    /// Size of the private `/tmp` and of `/dev/shm` (each), in MiB; at
    /// least 1 (the provider caps it at a quarter of the host's memory).
    pub tmp_mb: u64,
}

impl Default for SandboxLimits {
    fn default() -> SandboxLimits {
        SandboxLimits {
            open_files: SANDBOX_OPEN_FILES,
            processes: SANDBOX_PROCESSES,
            file_size_mb: SANDBOX_FILE_SIZE_MB,
            address_space_mb: SANDBOX_ADDRESS_SPACE_MB,
            cpu_seconds: SANDBOX_CPU_SECONDS,
            tmp_mb: SANDBOX_TMP_MB,
        }
    }
}

/// `[limits.run]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunLimits {
    /// Timeout when the model passes none.
    pub timeout_ms: u64,
    /// Clamp for what the model passes.
    pub max_timeout_ms: u64,
    /// Output cap (head + tail).
    pub max_output_bytes: usize,
}

impl Default for RunLimits {
    fn default() -> RunLimits {
        RunLimits {
            timeout_ms: RUN_TIMEOUT_MS,
            max_timeout_ms: RUN_MAX_TIMEOUT_MS,
            max_output_bytes: RUN_MAX_OUTPUT_BYTES,
        }
    }
}

/// Default `web_fetch` time limit: the whole call, every redirect hop and
/// the body included.
pub const WEB_FETCH_TIMEOUT_MS: u64 = 20_000;
/// Default cap on the text `web_fetch` returns, in chars.
pub const WEB_FETCH_MAX_OUTPUT_CHARS: usize = 10_000;
/// Default cap on the response body `web_fetch` downloads (after
/// decompression), in bytes; the rest is never read.
pub const WEB_FETCH_MAX_BODY_BYTES: usize = 5 * 1024 * 1024;
/// Redirects `web_fetch` follows (each hop checked again); not configurable.
pub const WEB_FETCH_MAX_REDIRECTS: usize = 5;
/// Default `web_search` time limit.
pub const WEB_SEARCH_TIMEOUT_MS: u64 = 20_000;
/// Default number of results `web_search` shows.
pub const WEB_SEARCH_MAX_RESULTS: usize = 5;
/// Default cap on one `web_search` result (title, URL and snippet), in chars.
pub const WEB_SEARCH_MAX_RESULT_CHARS: usize = 2_000;
/// Default cap on the whole text `web_search` returns, in chars.
pub const WEB_SEARCH_MAX_OUTPUT_CHARS: usize = 10_000;
/// Smallest output cap a config may set for `web_fetch` and `web_search`
/// (and for one search result).
pub const WEB_MIN_OUTPUT_CHARS: usize = 1_000;

/// `[limits.web_fetch]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebFetchLimits {
    /// Time limit of one call, in milliseconds.
    pub timeout_ms: u64,
    /// Chars of text returned (header, content and the cut note).
    pub max_output_chars: usize,
    /// Bytes of body downloaded.
    pub max_body_bytes: usize,
}

impl Default for WebFetchLimits {
    fn default() -> WebFetchLimits {
        WebFetchLimits {
            timeout_ms: WEB_FETCH_TIMEOUT_MS,
            max_output_chars: WEB_FETCH_MAX_OUTPUT_CHARS,
            max_body_bytes: WEB_FETCH_MAX_BODY_BYTES,
        }
    }
}

/// `[limits.web_search]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebSearchLimits {
    /// Time limit of one call, in milliseconds.
    pub timeout_ms: u64,
    /// Results shown.
    pub max_results: usize,
    /// Chars of one result.
    pub max_result_chars: usize,
    /// Chars of the whole text returned.
    pub max_output_chars: usize,
}

impl Default for WebSearchLimits {
    fn default() -> WebSearchLimits {
        WebSearchLimits {
            timeout_ms: WEB_SEARCH_TIMEOUT_MS,
            max_results: WEB_SEARCH_MAX_RESULTS,
            max_result_chars: WEB_SEARCH_MAX_RESULT_CHARS,
            max_output_chars: WEB_SEARCH_MAX_OUTPUT_CHARS,
        }
    }
}

/// Per-tool limits (`[limits.<tool>]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// `read_file`.
    pub read_file: ReadLimits,
    /// `write_file`.
    pub write_file: WriteLimits,
    /// `edit_file`.
    pub edit_file: WriteLimits,
    /// `glob`.
    pub glob: MatchLimits,
    /// `list_files`.
    pub list_files: MatchLimits,
    /// `search`.
    pub search: MatchLimits,
    /// `run` (and the logs of background processes).
    pub run: RunLimits,
    /// Resource limits of sandboxed commands.
    pub sandbox: SandboxLimits,
    /// `web_fetch`.
    pub web_fetch: WebFetchLimits,
    /// `web_search`.
    pub web_search: WebSearchLimits,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            read_file: ReadLimits::default(),
            write_file: WriteLimits::default(),
            edit_file: WriteLimits {
                max_bytes: EDIT_MAX_FILE_BYTES,
            },
            glob: MatchLimits {
                max_matches: GLOB_MAX_MATCHES,
            },
            list_files: MatchLimits {
                max_matches: LIST_MAX_MATCHES,
            },
            search: MatchLimits {
                max_matches: SEARCH_MAX_MATCHES,
            },
            run: RunLimits::default(),
            sandbox: SandboxLimits::default(),
            web_fetch: WebFetchLimits::default(),
            web_search: WebSearchLimits::default(),
        }
    }
}

impl Limits {
    /// Reconciles contradictory settings in one place.
    ///
    /// # Errors
    ///
    /// `invalid_input` naming the key whose value cannot work.
    pub fn validate(&self) -> Result<()> {
        let zero = [
            (
                "limits.read_file.max_lines",
                self.read_file.max_lines as u64,
            ),
            (
                "limits.read_file.max_bytes",
                self.read_file.max_bytes as u64,
            ),
            ("limits.glob.max_matches", self.glob.max_matches as u64),
            (
                "limits.list_files.max_matches",
                self.list_files.max_matches as u64,
            ),
            ("limits.search.max_matches", self.search.max_matches as u64),
            ("limits.run.max_timeout_ms", self.run.max_timeout_ms),
            ("limits.sandbox.tmp_mb", self.sandbox.tmp_mb),
            ("limits.web_fetch.timeout_ms", self.web_fetch.timeout_ms),
            (
                "limits.web_fetch.max_body_bytes",
                self.web_fetch.max_body_bytes as u64,
            ),
            ("limits.web_search.timeout_ms", self.web_search.timeout_ms),
            (
                "limits.web_search.max_results",
                self.web_search.max_results as u64,
            ),
        ];
        for (key, value) in zero {
            if value == 0 {
                return Err(Error::invalid_input(format!("`{key}` must be at least 1")));
            }
        }
        if self.run.max_output_bytes < RUN_MIN_OUTPUT_BYTES {
            return Err(Error::invalid_input(format!(
                "`limits.run.max_output_bytes` is {}, the minimum is {RUN_MIN_OUTPUT_BYTES}",
                self.run.max_output_bytes
            )));
        }
        let chars = [
            (
                "limits.web_fetch.max_output_chars",
                self.web_fetch.max_output_chars,
            ),
            (
                "limits.web_search.max_result_chars",
                self.web_search.max_result_chars,
            ),
            (
                "limits.web_search.max_output_chars",
                self.web_search.max_output_chars,
            ),
        ];
        for (key, value) in chars {
            if value < WEB_MIN_OUTPUT_CHARS {
                return Err(Error::invalid_input(format!(
                    "`{key}` is {value}, the minimum is {WEB_MIN_OUTPUT_CHARS}"
                )));
            }
        }
        if self.run.timeout_ms > self.run.max_timeout_ms {
            return Err(Error::invalid_input(format!(
                "`limits.run.timeout_ms` ({}) is above `limits.run.max_timeout_ms` ({})",
                self.run.timeout_ms, self.run.max_timeout_ms
            )));
        }
        Ok(())
    }
}

/// `[network]` (used by command providers and the web tools).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetworkConfig {
    /// `off` (default), `on` or `allow`.
    pub mode: NetworkMode,
    /// Domains reachable (an entry covers its subdomains); empty allows all
    /// not denied.
    pub allowed_domains: Vec<String>,
    /// Domains never reachable; denial wins.
    pub denied_domains: Vec<String>,
    /// Address ranges (`10.0.0.0/8`, `fd00::/8`, or one address) the web
    /// tools and proxy may reach although they are private, loopback,
    /// link-local or otherwise non-public.
    pub allowed_cidrs: Vec<String>,
    /// Secrets the egress proxy injects (`mode = "allow"`, `linux`
    /// provider): commands see a placeholder, and the proxy swaps the real
    /// value in only for requests to the bound hosts.
    pub inject: Vec<InjectConfig>,
}

/// One `[[network.inject]]` entry: a secret commands use only through the
/// egress proxy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InjectConfig {
    /// The environment variable (of cubby's) holding the real value;
    /// commands see a placeholder under the same name. Redacted like a
    /// secret.
    pub secret: String,
    /// The hosts the real value may go to (an entry covers its
    /// subdomains). Required.
    pub hosts: Vec<String>,
    /// The request headers the proxy swaps the placeholder in
    /// (case-insensitive); empty: every header.
    pub headers: Vec<String>,
}

/// `[web_search]`: the backend `web_search` asks. It runs host-side: its
/// key is read from cubby's own environment and never passed to commands
/// by the web tools.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebSearchConfig {
    /// `brave` or `searxng`; unset: `web_search` answers `unsupported`.
    pub backend: Option<SearchBackendKind>,
    /// Brave: the API endpoint (default
    /// `https://api.search.brave.com/res/v1/web/search`). SearXNG: the
    /// instance's base URL (required), e.g. `http://127.0.0.1:8888`.
    pub url: Option<String>,
    /// Brave: the environment variable holding the API key (default
    /// `BRAVE_API_KEY`). Its value is redacted like a secret.
    pub api_key_env: Option<String>,
}

/// A search service `web_search` can use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SearchBackendKind {
    /// The Brave Search API (needs an API key).
    Brave,
    /// A SearXNG instance with the JSON format enabled.
    Searxng,
}

/// Network mode for commands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetworkMode {
    /// Loopback only.
    #[default]
    Off,
    /// Full network.
    On,
    /// Through the host-side proxy, domain lists enforced.
    Allow,
}

/// What of the host's file system commands read (SPEC §4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReadScope {
    /// Everything but the credential stores (built-in and `host_deny_read`).
    #[default]
    Host,
    /// Only the system directories, the directories on `PATH` and their
    /// toolchain roots, the workspace, the writable roots and the
    /// `readable_roots` (the credential stores masked there too).
    System,
}

/// One `[[exec.rules]]` entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecRule {
    /// The command prefix the rule matches (argv words).
    pub prefix: Vec<String>,
    /// `allow`, `deny` or `rewrite`.
    pub decision: ExecDecision,
    /// The replacement argv prefix for `rewrite`.
    #[serde(default)]
    pub replacement: Option<Vec<String>>,
}

/// What an exec rule decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExecDecision {
    /// Run it.
    Allow,
    /// Refuse it.
    Deny,
    /// Run the replacement instead.
    Rewrite,
}

/// `[exec]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExecConfig {
    /// Ordered prefix rules; the first that matches decides.
    pub rules: Vec<ExecRule>,
}

/// `[env]`: what commands get of cubby's environment besides the names
/// SPEC §4 lists (see [`crate::sandbox::env`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EnvConfig {
    /// Names of cubby's environment passed to commands; a name that looks
    /// like a credential is refused (list it under `secrets`).
    pub pass: Vec<String>,
    /// Variables set for commands, with their values. They may not name a
    /// secret nor a variable `run` fixes (`CI`, `TERM`, …).
    pub set: std::collections::BTreeMap<String, String>,
}

/// `[mcp]`: what the MCP fronts send besides the model-facing text, and
/// how the stdio front answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct McpConfig {
    /// Send each result's `structuredContent` and each tool's
    /// `outputSchema` (for programs). Off by default: Codex CLI 0.171 and
    /// Claude Code 2.1.332 hand the model `structuredContent` as JSON
    /// instead of the text whenever it is present (SPEC §2).
    pub structured_content: bool,
    /// Let the stdio front answer plain `read_file` and `list_files` calls
    /// itself, past rmcp's dispatch (the same answers, faster). On by
    /// default; off sends every call through rmcp.
    pub fast_path: bool,
}

impl Default for McpConfig {
    fn default() -> McpConfig {
        McpConfig {
            structured_content: false,
            fast_path: true,
        }
    }
}

/// The skills directory a workspace has when the config names none.
pub const DEFAULT_SKILLS_DIR: &str = "skills";

/// `[skills]`: where the skills are (SPEC §5.3).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SkillsConfig {
    /// Directories of skills (`<dir>/<name>/SKILL.md`), relative to the
    /// root; protected (read-only for the tools and commands). Default:
    /// `["skills"]`; `[]` turns skills off.
    pub dirs: Vec<String>,
}

impl Default for SkillsConfig {
    fn default() -> SkillsConfig {
        SkillsConfig {
            dirs: vec![DEFAULT_SKILLS_DIR.to_string()],
        }
    }
}

/// Request bodies a gateway forwards, by default (SPEC §5.5): 1 MB.
pub const GATEWAY_MAX_BODY_BYTES: u64 = 1_000_000;
/// Response bodies a gateway relays, by default: 10 MB.
pub const GATEWAY_MAX_RESPONSE_BYTES: u64 = 10_000_000;

/// A byte count in the config: an integer, or a string such as `"1MB"`,
/// `"512 KiB"` or `"2000000"` (`KB`/`MB`/`GB` are powers of 1,000,
/// `KiB`/`MiB`/`GiB` of 1,024).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "SizeText", into = "u64")]
pub struct ByteSize(pub u64);

/// What a [`ByteSize`] is written as.
#[derive(Deserialize)]
#[serde(untagged)]
enum SizeText {
    Number(u64),
    Text(String),
}

impl From<ByteSize> for u64 {
    fn from(size: ByteSize) -> u64 {
        size.0
    }
}

impl TryFrom<SizeText> for ByteSize {
    type Error = String;
    fn try_from(text: SizeText) -> std::result::Result<ByteSize, String> {
        match text {
            SizeText::Number(n) => Ok(ByteSize(n)),
            SizeText::Text(t) => ByteSize::parse(&t),
        }
    }
}

impl ByteSize {
    /// Parses `"1MB"`, `"512 KiB"`, `"100"` (bytes).
    ///
    /// # Errors
    ///
    /// A message naming the text and the accepted units.
    pub fn parse(text: &str) -> std::result::Result<ByteSize, String> {
        let t = text.trim();
        let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (digits, unit) = t.split_at(split);
        let unit = unit.trim();
        let scale: u64 = match unit.to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "kb" => 1_000,
            "mb" => 1_000_000,
            "gb" => 1_000_000_000,
            "kib" => 1 << 10,
            "mib" => 1 << 20,
            "gib" => 1 << 30,
            _ => {
                return Err(format!(
                    "`{text}` is not a size: write bytes (`1000000`) or a number with \
                     KB, MB, GB, KiB, MiB or GiB (`\"1MB\"`)"
                ));
            }
        };
        digits
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(scale))
            .map(ByteSize)
            .ok_or_else(|| format!("`{text}` is not a size: it needs a number before the unit"))
    }
}

/// `credential` of a `[gateway.<name>]`: the header the gateway adds to
/// every request it forwards, built from a secret of cubby's environment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewayCredential {
    /// The environment variable (of cubby's) holding the value. Commands
    /// never get it; it is redacted from everything.
    pub secret: String,
    /// The request header it goes in (`Authorization`).
    pub header: String,
    /// The header's value, with `{}` where the secret goes (`"Bearer
    /// {}"`). Default `"{}"`.
    #[serde(default = "default_credential_format")]
    pub format: String,
}

fn default_credential_format() -> String {
    "{}".to_string()
}

/// One entry of a gateway's `routes`: `"METHOD /path/:param"`, or a table
/// with its own body cap.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum GatewayRoute {
    /// `"GET /repos/:owner/:repo/issues"`.
    Plain(String),
    /// `{ route = "POST /uploads", max_body = "10MB" }`.
    Limited {
        /// As [`GatewayRoute::Plain`].
        route: String,
        /// This route's request body cap.
        max_body: ByteSize,
    },
}

impl GatewayRoute {
    /// The `"METHOD /path"` text.
    pub fn text(&self) -> &str {
        match self {
            GatewayRoute::Plain(t) | GatewayRoute::Limited { route: t, .. } => t,
        }
    }
}

/// `[gateway.<name>]` (SPEC §5.5): a scoped HTTP API for commands. They
/// call a plain-HTTP listener inside the sandbox (`CUBBY_GATEWAY_URL`);
/// cubby checks the request against `routes` and calls `base_url` over
/// HTTPS with the credential added.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewayConfig {
    /// `https://host[:port][/prefix]`: where requests go (the checked
    /// path is appended to the prefix).
    pub base_url: String,
    /// The header cubby adds. Default: none.
    #[serde(default)]
    pub credential: Option<GatewayCredential>,
    /// `"METHOD /a/:param/b"`: what commands may call; anything else is
    /// 403. Required.
    #[serde(default)]
    pub routes: Vec<GatewayRoute>,
    /// Request body cap (default [`GATEWAY_MAX_BODY_BYTES`]).
    #[serde(default)]
    pub max_body: Option<ByteSize>,
    /// Response body cap (default [`GATEWAY_MAX_RESPONSE_BYTES`]).
    #[serde(default)]
    pub max_response: Option<ByteSize>,
    /// A PEM file of CA certificates the upstream's certificate must chain
    /// to, instead of the system's roots.
    #[serde(default)]
    pub ca_file: Option<String>,
}

/// Default of `[upstream.<label>] call_timeout`, in seconds.
pub const UPSTREAM_CALL_TIMEOUT_SECS: u64 = 60;
/// Default of `[upstream.<label>] startup_timeout`, in seconds: how long
/// starting a server and its `initialize` answer may take.
pub const UPSTREAM_STARTUP_TIMEOUT_SECS: u64 = 30;
/// Longest `call_timeout` / `startup_timeout`, in seconds.
pub const UPSTREAM_MAX_TIMEOUT_SECS: u64 = 3_600;

/// What an upstream server's own process gets of cubby's environment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamEnv {
    /// Names passed from cubby's environment (credential-looking names
    /// refused: list them under `secrets`).
    pub pass: Vec<String>,
    /// Names whose values the server gets and that are redacted everywhere.
    pub secrets: Vec<String>,
}

/// An upstream MCP server (`[upstream.<label>]`, SPEC §5.4): its tools
/// named in `tools` are offered as `<label>__<tool>`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// The server's argv (no shell), run over stdio in a sandbox of its
    /// own. Exactly one of `command` and `url`.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// `http(s)://…`: a streamable-HTTP server, reached under the
    /// `[network]` rules.
    #[serde(default)]
    pub url: Option<String>,
    /// What the stdio server's process gets of cubby's environment.
    #[serde(default)]
    pub env: UpstreamEnv,
    /// The allow-list: the upstream's tools offered. Missing or empty: none.
    #[serde(default)]
    pub tools: Vec<String>,
    /// Seconds a call may take (default [`UPSTREAM_CALL_TIMEOUT_SECS`]).
    #[serde(default)]
    pub call_timeout: Option<u64>,
    /// Seconds starting the server and its `initialize` may take (default
    /// [`UPSTREAM_STARTUP_TIMEOUT_SECS`]).
    #[serde(default)]
    pub startup_timeout: Option<u64>,
    /// The stdio server's sandbox network (default `off`); `allow` uses
    /// the `[network]` domain lists.
    #[serde(default)]
    pub network: Option<NetworkMode>,
    /// Which MCP protocol generation to speak (default `auto`).
    #[serde(default)]
    pub protocol: UpstreamProtocol,
    /// Whether the stdio server's sandbox is the workspace (`true`) or a
    /// private empty directory, with the workspace and the writable roots
    /// unreadable to it (`false`). Default: the workspace only when the
    /// server holds no `env.secrets` and its `network` is `off` — a server
    /// that acts on the workspace runs code the model wrote there (a
    /// nested repository's `core.fsmonitor`, a `Makefile`), and that code
    /// would run with the server's secrets and network (red-team pass 12,
    /// P1). See [`UpstreamConfig::sees_workspace`].
    #[serde(default)]
    pub workspace: Option<bool>,
}

impl UpstreamConfig {
    /// Whether the stdio server works in the workspace: `workspace` when
    /// given, else only a server without `env.secrets` whose network is
    /// `off`.
    pub fn sees_workspace(&self) -> bool {
        self.workspace.unwrap_or(
            self.env.secrets.is_empty() && matches!(self.network, None | Some(NetworkMode::Off)),
        )
    }
}

/// How cubby starts its session with an upstream MCP server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum UpstreamProtocol {
    /// `server/discover` (2026-07-28) first; the `initialize` handshake
    /// (2025-11-25) when the server says it does not know it.
    #[default]
    #[serde(rename = "auto")]
    Auto,
    /// The `initialize` handshake only (revisions up to 2025-11-25).
    #[serde(rename = "2025-11-25")]
    Handshake,
    /// `server/discover` and per-request metadata only (2026-07-28).
    #[serde(rename = "2026-07-28")]
    Discover,
}

/// The whole config file (SPEC §6).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Sandbox mode.
    pub mode: Option<Mode>,
    /// Provider.
    pub provider: Option<ProviderKind>,
    /// Tools added to what the mode gives.
    pub allow: Vec<String>,
    /// Tools removed; deny wins.
    pub deny: Vec<String>,
    /// Env var names whose values commands get and that are redacted
    /// everywhere.
    pub secrets: Vec<String>,
    /// What commands get of cubby's environment.
    pub env: EnvConfig,
    /// Extra writable directories for commands.
    pub writable_roots: Vec<String>,
    /// Paths unreadable for tools and commands.
    pub deny_read: Vec<String>,
    /// Host paths (absolute, or `~/` for the user's home) commands may not
    /// read, on top of the built-in list of credential stores.
    pub host_deny_read: Vec<String>,
    /// Host directories (absolute, or `~/`) whose content commands never
    /// see but for the sandbox's own roots beneath them (a directory of
    /// many sandboxes' workspaces; see
    /// [`PolicyBuilder::host_private_dirs`](crate::PolicyBuilder::host_private_dirs)).
    pub host_private_dirs: Vec<String>,
    /// What of the host commands read: `host` (all but the credential
    /// stores) or `system` (see [`ReadScope`]).
    pub read_scope: ReadScope,
    /// With `read_scope = "system"`: more directories commands read
    /// (absolute, `~/`, or relative to the root).
    pub readable_roots: Vec<String>,
    /// How `run` invokes a command.
    pub shell: Option<Vec<String>>,
    /// Per-tool limits.
    pub limits: Limits,
    /// Network settings.
    pub network: NetworkConfig,
    /// Exec rules.
    pub exec: ExecConfig,
    /// The `web_search` backend.
    pub web_search: WebSearchConfig,
    /// The MCP fronts' options.
    pub mcp: McpConfig,
    /// Where the skills are.
    pub skills: SkillsConfig,
    /// Where cubby keeps what outlives a call (the artifact store,
    /// `<state_dir>/artifacts`): absolute or `~/`; default: none — each
    /// workspace keeps a private store in `$TMPDIR`, removed with it.
    pub state_dir: Option<String>,
    /// Scoped HTTP APIs for commands, by name (`[gateway.<name>]`).
    pub gateway: std::collections::BTreeMap<String, GatewayConfig>,
    /// Upstream MCP servers, by label (`[upstream.<label>]`).
    pub upstream: std::collections::BTreeMap<String, UpstreamConfig>,
    /// Where the `remote` provider's sandbox lives (`[remote]`).
    pub remote: Option<RemoteConfig>,
    /// Where the `kubernetes` provider claims its pod (`[kubernetes]`).
    pub kubernetes: Option<KubernetesConfig>,
}

/// Default of `[kubernetes] ready_timeout`, in seconds.
pub const KUBERNETES_READY_TIMEOUT_SECS: u64 = 60;
/// Default of `[kubernetes] shutdown_after`, in seconds: the claim's
/// `shutdownTime` is this far ahead, so a claim a crashed cubby never
/// deleted ends by itself.
pub const KUBERNETES_SHUTDOWN_AFTER_SECS: u64 = 3_600;
/// Longest `ready_timeout`, in seconds.
pub const KUBERNETES_MAX_READY_TIMEOUT_SECS: u64 = 3_600;
/// Longest `shutdown_after`, in seconds (a week).
pub const KUBERNETES_MAX_SHUTDOWN_AFTER_SECS: u64 = 7 * 24 * 3_600;
/// Default of `[kubernetes] port`: where the template's `cubby serve` listens.
pub const KUBERNETES_POD_PORT: u16 = 8765;

/// `[kubernetes]`: the warm pool of `provider = "kubernetes"` (SPEC §7).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesConfig {
    /// The namespace of the warm pool and the claims.
    #[serde(default = "KubernetesConfig::default_namespace")]
    pub namespace: String,
    /// The SandboxWarmPool claims come from.
    #[serde(default = "KubernetesConfig::default_warm_pool")]
    pub warm_pool: String,
    /// A file holding the pool key (the pods' `cubby serve` token, exchanged
    /// once per claim for a token of its own): absolute or `~/`.
    pub pool_key_file: String,
    /// The API server's URL; default: in the cluster
    /// (`KUBERNETES_SERVICE_HOST`), else `http://127.0.0.1:8001` (`kubectl
    /// proxy`, which brings the kubeconfig's credentials).
    #[serde(default)]
    pub api_server: Option<String>,
    /// A file holding a bearer token for the API server; default in the
    /// cluster: the service account's.
    #[serde(default)]
    pub token_file: Option<String>,
    /// The API server's CA bundle (PEM); default in the cluster: the
    /// service account's, else the platform's roots.
    #[serde(default)]
    pub ca_file: Option<String>,
    /// The port the pods' `cubby serve` listens on.
    #[serde(default = "KubernetesConfig::default_port")]
    pub port: u16,
    /// Seconds to wait for the claim to be Ready (default
    /// [`KUBERNETES_READY_TIMEOUT_SECS`]).
    #[serde(default)]
    pub ready_timeout: Option<u64>,
    /// Seconds after which the cluster ends the claim by itself
    /// (`shutdownTime`; default [`KUBERNETES_SHUTDOWN_AFTER_SECS`]).
    #[serde(default)]
    pub shutdown_after: Option<u64>,
    /// A directory on this side (absolute, `~/`, or relative to the
    /// workspace root) whose tree the claimed pod's new workspace starts
    /// with, sent as a tar at create (as `[remote] upload`); default: none.
    #[serde(default)]
    pub upload: Option<String>,
}

impl KubernetesConfig {
    fn default_namespace() -> String {
        "cubby".to_string()
    }
    fn default_warm_pool() -> String {
        "cubby".to_string()
    }
    fn default_port() -> u16 {
        KUBERNETES_POD_PORT
    }

    /// Checks the section's values.
    ///
    /// # Errors
    ///
    /// `invalid_input` naming `origin` and the key.
    pub(crate) fn check(&self, origin: &str) -> Result<()> {
        for (key, value) in [
            ("namespace", &self.namespace),
            ("warm_pool", &self.warm_pool),
        ] {
            if !is_dns_label(value) {
                return Err(Error::invalid_input(format!(
                    "config `{origin}`: [kubernetes] {key} `{value}` is not a Kubernetes name \
                     (lowercase letters, digits and `-`, at most 63, starting and ending with \
                     a letter or digit)"
                )));
            }
        }
        if self.pool_key_file.is_empty() {
            return Err(Error::invalid_input(format!(
                "config `{origin}`: [kubernetes] pool_key_file is empty; name the file holding \
                 the pool key"
            )));
        }
        if self.port == 0 {
            return Err(Error::invalid_input(format!(
                "config `{origin}`: [kubernetes] port must not be 0"
            )));
        }
        for (key, value, max) in [
            (
                "ready_timeout",
                self.ready_timeout,
                KUBERNETES_MAX_READY_TIMEOUT_SECS,
            ),
            (
                "shutdown_after",
                self.shutdown_after,
                KUBERNETES_MAX_SHUTDOWN_AFTER_SECS,
            ),
        ] {
            if let Some(v) = value
                && !(1..=max).contains(&v)
            {
                return Err(Error::invalid_input(format!(
                    "config `{origin}`: [kubernetes] {key} = {v} is out of range; give 1 to \
                     {max} seconds"
                )));
            }
        }
        if let Some(url) = &self.api_server
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(Error::invalid_input(format!(
                "config `{origin}`: [kubernetes] api_server `{url}` must start with http:// or \
                 https://"
            )));
        }
        Ok(())
    }

    /// Seconds to wait for Ready.
    pub fn ready_timeout_secs(&self) -> u64 {
        self.ready_timeout.unwrap_or(KUBERNETES_READY_TIMEOUT_SECS)
    }

    /// Seconds until the claim's `shutdownTime`.
    pub fn shutdown_after_secs(&self) -> u64 {
        self.shutdown_after
            .unwrap_or(KUBERNETES_SHUTDOWN_AFTER_SECS)
    }
}

/// A DNS-1123 label (what Kubernetes accepts as a namespace or a name).
fn is_dns_label(s: &str) -> bool {
    const MAX_LABEL: usize = 63;
    !s.is_empty()
        && s.len() <= MAX_LABEL
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// `[remote]`: the far cubby of `provider = "remote"` (SPEC §7).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteConfig {
    /// The far cubby's base URL, e.g. `http://10.0.0.2:8765`.
    pub url: String,
    /// A file holding its bearer token (absolute or `~/`); read when the
    /// sandbox opens, never logged.
    pub token_file: String,
    /// An existing directory on the far side to use as the workspace (the
    /// far cubby must allow it, `serve --host-adopt`); default: a new one.
    #[serde(default)]
    pub root: Option<String>,
    /// A directory on this side (absolute, `~/`, or relative to the
    /// workspace root) whose tree the new far workspace starts with, sent
    /// as a tar at create; default: none (an empty workspace).
    #[serde(default)]
    pub upload: Option<String>,
}

impl Config {
    /// Checks what the config's own sections must agree on (after the
    /// sections' own checks, see `Config::from_toml`): `host_deny_read`
    /// entries, `readable_roots` against `read_scope`, the exec rules.
    ///
    /// # Errors
    ///
    /// `invalid_input` naming `origin`, the key and what to do instead.
    pub(crate) fn check_consistency(&self, origin: &str) -> Result<()> {
        if let Some(kubernetes) = &self.kubernetes {
            kubernetes.check(origin)?;
        }
        if self.provider == Some(ProviderKind::Kubernetes) && self.kubernetes.is_none() {
            return Err(Error::invalid_input(format!(
                "config `{origin}`: provider = \"kubernetes\" needs a [kubernetes] section with \
                 at least `pool_key_file`"
            )));
        }
        for entry in &self.host_deny_read {
            if !(entry.starts_with('/') || entry.starts_with("~/")) {
                return Err(Error::invalid_input(format!(
                    "config `{origin}`: host_deny_read entry `{entry}` must be an absolute path \
                     or start with `~/` (paths in the workspace go in `deny_read`)"
                )));
            }
        }
        for entry in &self.host_private_dirs {
            if !(entry.starts_with('/') || entry.starts_with("~/")) {
                return Err(Error::invalid_input(format!(
                    "config `{origin}`: host_private_dirs entry `{entry}` must be an absolute \
                     path or start with `~/`"
                )));
            }
        }
        if let Some(dir) = &self.state_dir
            && !(dir.starts_with('/') || dir.starts_with("~/"))
        {
            return Err(Error::invalid_input(format!(
                "config `{origin}`: state_dir `{dir}` must be an absolute path or start with `~/`"
            )));
        }
        if !self.readable_roots.is_empty() && self.read_scope != ReadScope::System {
            return Err(Error::invalid_input(format!(
                "config `{origin}`: readable_roots is for read_scope = \"system\" (with \
                 \"host\", commands read everything but the credential stores already)"
            )));
        }
        for rule in &self.exec.rules {
            if rule.prefix.is_empty() {
                return Err(Error::invalid_input(format!(
                    "config `{origin}`: an exec rule has an empty `prefix`"
                )));
            }
            if (rule.decision == ExecDecision::Rewrite) != rule.replacement.is_some() {
                return Err(Error::invalid_input(format!(
                    "config `{origin}`: exec rule {:?}: `replacement` goes with decision \
                     \"rewrite\" and only with it",
                    rule.prefix
                )));
            }
        }
        Ok(())
    }
}
