//! [`Toolset`]: the tools one agent run is offered, and the one door to them.
//!
//! A call goes: arguments (JSON) → shape check → policy gate (is the tool
//! offered?) → the tool (which parses paths into [`WorkspacePath`]s and checks
//! path policy) → the sandbox → output shaping (secret redaction) → a
//! [`ToolOutput`]. A panic inside a tool becomes an `internal` error result;
//! the toolset keeps serving.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use serde_json::Value;

use std::sync::Mutex;

use crate::config::{Limits, WebSearchConfig};
use crate::error::{Error, ErrorKind, Result};
use crate::exec_policy::BeforeRun;
use crate::host_env::HostEnv;
use crate::output::{Redactor, Secret, ToolOutput};
use crate::policy::{COMMAND_TOOLS, Policy};
use crate::process::{CancelToken, ProcessTable, RETAINED_LOG_BYTES, Subscriber};
use crate::sandbox::{CommandEnv, Sandbox};
use crate::tools::{Baseline, Ctx, Describe, Entry, ExecSettings, REGISTRY, RunState, ToolSpec};
use crate::web::{Configured, Resolver, SearchBackend, SystemResolver, WebSettings};

/// Largest JSON argument document accepted, in bytes.
pub const MAX_ARGUMENT_BYTES: usize = 64 * 1024 * 1024;

/// The tools of one run, bound to a sandbox and a policy.
///
/// Cheap to clone; clones share the run (read tracker, baseline).
#[derive(Clone)]
pub struct Toolset {
    inner: Arc<Inner>,
}

struct Inner {
    sandbox: Arc<dyn Sandbox>,
    policy: Policy,
    redactor: Redactor,
    run: RunState,
    offered: Vec<&'static Entry>,
    exec: ExecSettings,
    web: WebSettings,
    subscribers: Arc<Mutex<Vec<Subscriber>>>,
    // Declared last: dropped after everything else, and its Drop kills
    // every process still running when the run ends.
    procs: ProcessTable,
}

impl std::fmt::Debug for Toolset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Toolset")
            .field("provider", &self.inner.sandbox.kind())
            .field("mode", &self.inner.policy.mode())
            .field("tools", &self.tool_names())
            .finish()
    }
}

impl Toolset {
    /// A builder for a toolset acting in `sandbox`.
    pub fn builder(sandbox: Arc<dyn Sandbox>) -> ToolsetBuilder {
        ToolsetBuilder {
            sandbox,
            policy: None,
            host: HostEnv::default(),
            secrets: Vec::new(),
            track_changes: true,
            before_run: None,
            shell: None,
            retained_log_bytes: RETAINED_LOG_BYTES,
            subscribers: Vec::new(),
            web_search: None,
            search_backend: None,
            resolver: None,
        }
    }

    /// Subscribes to the output of every command of this run: each chunk,
    /// redacted and ANSI-stripped, as it arrives.
    pub fn subscribe(&self, subscriber: Subscriber) {
        if let Ok(mut subs) = self.inner.subscribers.lock() {
            subs.push(subscriber);
        }
    }

    /// The processes of this run.
    pub fn processes(&self) -> &ProcessTable {
        &self.inner.procs
    }

    /// Ends the run's processes now (they also end when the last clone of
    /// the toolset is dropped).
    pub fn stop_processes(&self) {
        self.inner.procs.stop_all();
    }

    /// Names of the offered tools, in order.
    pub fn tool_names(&self) -> Vec<&'static str> {
        self.inner.offered.iter().map(|e| e.name).collect()
    }

    /// Definitions of the offered tools; their descriptions quote the
    /// limits of this toolset and name only tools it offers.
    pub fn tools(&self) -> Vec<ToolSpec> {
        let names = self.tool_names();
        let describe = Describe::new(self.inner.policy.limits(), &names);
        self.inner
            .offered
            .iter()
            .map(|e| (e.spec)(&describe))
            .collect()
    }

    /// The limits in force (the policy's).
    pub fn limits(&self) -> &Limits {
        self.inner.policy.limits()
    }

    /// The policy in force.
    pub fn policy(&self) -> &Policy {
        &self.inner.policy
    }

    /// The sandbox the tools act in.
    pub fn sandbox(&self) -> &Arc<dyn Sandbox> {
        &self.inner.sandbox
    }

    /// Calls a tool with JSON text arguments (what a front receives).
    /// Malformed or oversized JSON is an `invalid_input` result.
    pub fn call_json(&self, name: &str, arguments: &[u8]) -> ToolOutput {
        if arguments.len() > MAX_ARGUMENT_BYTES {
            return self.finish(Err(Error::new(
                ErrorKind::TooLarge,
                format!(
                    "the arguments are {} bytes, the limit is {MAX_ARGUMENT_BYTES}; send less",
                    arguments.len()
                ),
            )));
        }
        let trimmed = arguments.trim_ascii();
        if trimmed.is_empty() {
            return self.call(name, Value::Null);
        }
        match serde_json::from_slice::<Value>(trimmed) {
            Ok(v) => self.call(name, v),
            Err(e) => self.finish(Err(Error::invalid_input(format!(
                "the arguments are not valid JSON ({e}); pass one JSON object"
            )))),
        }
    }

    /// Calls a tool. Never panics: every failure is an error result.
    pub fn call(&self, name: &str, arguments: Value) -> ToolOutput {
        self.call_cancellable(name, arguments, None)
    }

    /// Calls a tool that `cancel` can interrupt: a `run` waiting on it kills
    /// its command's whole tree when the token fires.
    pub fn call_cancellable(
        &self,
        name: &str,
        arguments: Value,
        cancel: Option<&CancelToken>,
    ) -> ToolOutput {
        let options = CallOptions {
            cancel: cancel.cloned(),
            on_output: None,
        };
        self.call_with(name, arguments, &options)
    }

    /// Calls a tool with per-call options: cancellation, and a subscriber
    /// that receives this call's command output as it arrives (for progress
    /// notifications).
    pub fn call_with(&self, name: &str, arguments: Value, options: &CallOptions) -> ToolOutput {
        let result = catch_unwind(AssertUnwindSafe(|| {
            // Every cut made while the result is built redacts first.
            let _scope = crate::output::CallScope::enter(&self.inner.redactor);
            self.dispatch(name, arguments, options)
        }))
        .unwrap_or_else(|_| {
            Err(Error::internal(format!(
                "{name} failed unexpectedly; the server is still running, try again or \
                     use another approach"
            )))
        });
        self.finish(result)
    }

    fn finish(&self, result: Result<ToolOutput>) -> ToolOutput {
        let mut out = match result {
            Ok(out) => out,
            Err(e) => ToolOutput::error(&e),
        };
        self.inner.redactor.redact_output(&mut out);
        // Last: no escape sequence from a file, a name or a command leaves.
        crate::output::neutralize_output(&mut out);
        out
    }

    fn dispatch(&self, name: &str, arguments: Value, options: &CallOptions) -> Result<ToolOutput> {
        let arguments = match arguments {
            Value::Null => Value::Object(Default::default()),
            v @ Value::Object(_) => v,
            other => {
                return Err(Error::invalid_input(format!(
                    "the arguments must be a JSON object, got {}",
                    json_type(&other)
                )));
            }
        };
        if COMMAND_TOOLS.contains(&name) && !self.inner.sandbox.supports_commands() {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "{name} is not available: the {} provider runs no commands",
                    self.inner.sandbox.kind().as_str()
                ),
            ));
        }
        let Some(entry) = REGISTRY.iter().find(|e| e.name == name) else {
            if crate::policy::is_known_tool(name) {
                let decision = self.inner.policy.tool_decision(name);
                if !decision.allowed {
                    return Err(Error::denied(format!(
                        "{name} is not offered in this session: {}",
                        decision.rule
                    )));
                }
                return Err(Error::new(
                    ErrorKind::Unsupported,
                    format!("{name} is not available in this build of cubby"),
                ));
            }
            return Err(Error::invalid_input(format!(
                "there is no tool named `{}`; available tools: {}",
                crate::output::truncate_for_message(name),
                self.tool_names().join(", ")
            )));
        };
        if !self.inner.offered.iter().any(|e| e.name == name) {
            let decision = self.inner.policy.tool_decision(name);
            return Err(Error::denied(format!(
                "{name} is not offered in this session: {}",
                decision.rule
            )));
        }
        let ctx = Ctx {
            fs: self.inner.sandbox.fs(),
            redactor: &self.inner.redactor,
            sandbox: self.inner.sandbox.as_ref(),
            policy: &self.inner.policy,
            limits: self.inner.policy.limits(),
            run: &self.inner.run,
            procs: &self.inner.procs,
            exec: &self.inner.exec,
            cancel: options.cancel.as_ref(),
            on_output: options.on_output.as_ref(),
            web: &self.inner.web,
        };
        (entry.call)(&ctx, arguments)
    }
}

/// Per-call options for [`Toolset::call_with`].
#[derive(Clone, Default)]
pub struct CallOptions {
    /// Cancels the call (a waiting `run` kills its whole tree).
    pub cancel: Option<CancelToken>,
    /// Receives this call's command output, shaped, as it arrives.
    pub on_output: Option<Subscriber>,
}

impl std::fmt::Debug for CallOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallOptions")
            .field("cancel", &self.cancel)
            .field("on_output", &self.on_output.is_some())
            .finish()
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Builds a [`Toolset`].
pub struct ToolsetBuilder {
    sandbox: Arc<dyn Sandbox>,
    policy: Option<Policy>,
    host: HostEnv,
    secrets: Vec<Secret>,
    track_changes: bool,
    before_run: Option<BeforeRun>,
    shell: Option<Vec<String>>,
    retained_log_bytes: usize,
    subscribers: Vec<Subscriber>,
    web_search: Option<WebSearchConfig>,
    search_backend: Option<Arc<dyn SearchBackend>>,
    resolver: Option<Arc<dyn Resolver>>,
}

impl ToolsetBuilder {
    /// cubby's environment ([`HostEnv::capture`] in a front): what commands
    /// inherit of it (SPEC §4, `env.pass`), the search backend's key, the
    /// values of `[[network.inject]]` secrets (redacted), `bash` found on
    /// its `PATH`. Default: empty — commands inherit nothing, no key is
    /// found and `run` wraps commands in `sh -c`.
    pub fn host_env(mut self, host: HostEnv) -> ToolsetBuilder {
        self.host = host;
        self
    }

    /// The `[web_search]` section: which backend `web_search` asks. Its API
    /// key is read from the [`host_env`](Self::host_env) at
    /// [`build`](Self::build) and redacted like a secret. Default: none (`web_search` answers
    /// `unsupported`). [`search_backend`](Self::search_backend) wins.
    pub fn web_search(mut self, config: WebSearchConfig) -> ToolsetBuilder {
        self.web_search = Some(config);
        self
    }

    /// A search backend for `web_search` (e.g. a [`crate::web::BraveSearch`]
    /// built with a key from a vault). Default: none; wins over
    /// [`web_search`](Self::web_search).
    pub fn search_backend(mut self, backend: Arc<dyn SearchBackend>) -> ToolsetBuilder {
        self.search_backend = Some(backend);
        self
    }

    /// How `web_fetch` resolves host names. Default:
    /// [`SystemResolver`]. Whatever it answers is still checked against the
    /// refused ranges and `allowed_cidrs` before anything connects.
    pub fn resolver(mut self, resolver: Arc<dyn Resolver>) -> ToolsetBuilder {
        self.resolver = Some(resolver);
        self
    }

    /// A callback consulted before every command, after the exec rules.
    /// Default: none.
    pub fn before_run(mut self, hook: BeforeRun) -> ToolsetBuilder {
        self.before_run = Some(hook);
        self
    }

    /// How `run` wraps a command line. Default: `["bash", "-c"]`, or
    /// `["sh", "-c"]` where there is no bash.
    pub fn shell(mut self, shell: Vec<String>) -> ToolsetBuilder {
        self.shell = Some(shell);
        self
    }

    /// Bytes of output kept per process for `process_logs`. Default: 1 MiB.
    pub fn retained_log_bytes(mut self, bytes: usize) -> ToolsetBuilder {
        self.retained_log_bytes = bytes.max(1);
        self
    }

    /// Subscribes to command output from the start (see [`Toolset::subscribe`]).
    pub fn subscribe(mut self, subscriber: Subscriber) -> ToolsetBuilder {
        self.subscribers.push(subscriber);
        self
    }

    /// The policy: the tools offered, the paths, exec rules, `[network]`,
    /// `[env]` and limits. Default: [`Policy::default`]
    /// (`workspace-write`). A sandbox that confines commands must have been
    /// opened with the same policy (see [`build`](Self::build)).
    pub fn policy(mut self, policy: Policy) -> ToolsetBuilder {
        self.policy = Some(policy);
        self
    }

    /// Adds a secret to redact from every output; commands get it with this
    /// value. Default: none.
    pub fn secret(mut self, name: impl Into<String>, value: impl Into<String>) -> ToolsetBuilder {
        self.secrets.push(Secret {
            name: name.into(),
            value: value.into(),
        });
        self
    }

    /// Whether to snapshot the workspace for `changes` (on a background
    /// thread, at build). Default: true. When false, `changes` is not offered.
    pub fn track_changes(mut self, yes: bool) -> ToolsetBuilder {
        self.track_changes = yes;
        self
    }

    /// Validates and builds.
    ///
    /// # Errors
    ///
    /// `invalid_input` for contradictory limits, a sandbox that enforces
    /// another policy on commands than this one (its
    /// [`Sandbox::enforced`] digest is not the policy's
    /// [`Policy::sandbox_digest`]), bad `[network]` entries, a bad `[env]`,
    /// a `[web_search]` section that cannot work or a secret that
    /// `env.set` also sets; `limit` when the secrets cannot be compiled.
    pub fn build(self) -> Result<Toolset> {
        let policy = self.policy.unwrap_or_default();
        policy.limits().validate()?;
        if let Some(enforced) = self.sandbox.enforced() {
            let given = policy.sandbox_digest();
            if *enforced != given {
                return Err(Error::invalid_input(format!(
                    "the {} sandbox holds commands to another policy (digest {enforced}) than \
                     the one given to the toolset ({given}): the file tools and commands would \
                     obey different rules; open the sandbox with the toolset's policy (e.g. \
                     through `cubby::Workspace`)",
                    self.sandbox.kind().as_str()
                )));
            }
        }
        let host = self.host;
        let user_secrets = self.secrets.clone();
        let mut secrets = self.secrets;
        let network = policy.network();
        let rules = network.map(crate::web::NetRules::from_config).transpose()?;
        let search = match (self.search_backend, &self.web_search) {
            (Some(backend), _) => Ok(backend),
            (None, config) => {
                let config = config.clone().unwrap_or_default();
                match crate::web::backend_from_config(&config, &|name| host.var(name))? {
                    Configured::Ready(backend, secret) => {
                        secrets.extend(secret);
                        Ok(backend)
                    }
                    Configured::None(why) => Err(why),
                }
            }
        };
        for entry in network.iter().flat_map(|n| n.inject.iter()) {
            if let Some(value) = host.non_empty(&entry.secret) {
                secrets.push(Secret {
                    name: entry.secret.clone(),
                    value,
                });
            }
        }
        let redactor = Redactor::new(&secrets)?;
        let commands = self.sandbox.supports_commands();
        let offered: Vec<&'static Entry> = REGISTRY
            .iter()
            .filter(|e| policy.tool_decision(e.name).allowed)
            .filter(|e| commands || !COMMAND_TOOLS.contains(&e.name))
            .filter(|e| self.track_changes || e.name != "changes")
            .collect();
        let baseline = (self.track_changes && offered.iter().any(|e| e.name == "changes"))
            .then(|| Baseline::start(self.sandbox.clone(), policy.clone()));
        let shell = match self.shell {
            Some(s) if s.is_empty() => {
                return Err(Error::invalid_input(
                    "`shell` must name a program, e.g. [\"bash\", \"-c\"]",
                ));
            }
            Some(s) => s,
            None => default_shell(&host),
        };
        let subscribers = Arc::new(Mutex::new(self.subscribers));
        let procs = ProcessTable::new(redactor.clone(), subscribers.clone());
        // Variables only cubby itself may use: never in a command's env.
        let mut env = CommandEnv::new(&policy.env().pass, &policy.env().set)?;
        for secret in &user_secrets {
            env.secret(secret.name.clone(), secret.value.clone())?;
        }
        for name in crate::sandbox::HOST_ONLY_ENV {
            env.withhold(name);
        }
        if let Some(var) = self.web_search.as_ref().and_then(|w| w.api_key_env.clone()) {
            env.withhold(var);
        }
        // Secrets the egress proxy injects: commands see placeholders (the
        // linux provider sets them), never the values.
        for entry in network.iter().flat_map(|n| n.inject.iter()) {
            env.withhold(entry.secret.clone());
        }
        let exec_rules = policy.exec_rules().to_vec();
        Ok(Toolset {
            inner: Arc::new(Inner {
                sandbox: self.sandbox,
                policy,
                redactor,
                run: RunState::new(baseline),
                offered,
                exec: ExecSettings {
                    rules: exec_rules,
                    before_run: self.before_run,
                    shell,
                    retained_log_bytes: self.retained_log_bytes,
                    env,
                    host,
                },
                web: WebSettings {
                    rules,
                    resolver: self.resolver.unwrap_or_else(|| Arc::new(SystemResolver)),
                    search,
                },
                subscribers,
                procs,
            }),
        })
    }
}

/// `bash -c`, or `sh -c` when no bash is on `host`'s `PATH`.
fn default_shell(host: &HostEnv) -> Vec<String> {
    let has_bash = host
        .var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(paths).any(|dir| dir.join("bash").is_file()));
    let shell = if has_bash { "bash" } else { "sh" };
    vec![shell.to_string(), "-c".to_string()]
}
