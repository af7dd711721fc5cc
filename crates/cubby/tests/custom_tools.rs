//! Custom tools (SPEC §5.2): a tool written in Rust with
//! `ToolsetBuilder::tool`, its schema derived from its `Params`, its handler
//! run host-side with a [`ToolContext`] (call id, cancellation, the run's
//! metadata, a logger into the run's events, the artifact publisher), its
//! result shaped and redacted like a built-in tool's, its name checked and
//! the built-in names reserved, the policy's allow/deny applied.
//!
//! The tools are defined here as a library user writes them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cubby::process::{CancelToken, OutputEvent, Subscriber};
use cubby::{
    Annotations, CallOptions, CustomTool, Mode, Policy, ToolContext, ToolResult, Toolset,
    ToolsetBuilder, builtin_tools, virtual_sandbox,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// The secret the toolset redacts and the tools leak.
const SECRET: &str = "s3cr3t-custom-token-91ad";

/// How long the cancellable handler waits when nothing cancels it.
const FALLBACK: Duration = Duration::from_secs(30);

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReportParams {
    /// How many rows the report has.
    rows: u32,
    /// The report's title.
    #[serde(default)]
    title: Option<String>,
}

/// Echoes what its context says, leaks the secret in text and JSON, counts
/// its calls.
struct Report {
    calls: Arc<AtomicUsize>,
}

impl CustomTool for Report {
    type Params = ReportParams;

    fn name(&self) -> &str {
        "make_report"
    }

    fn description(&self) -> String {
        "Makes a report of `rows` rows; use it when asked for a report.".into()
    }

    fn annotations(&self) -> Annotations {
        Annotations {
            read_only: true,
            destructive: false,
            idempotent: true,
            open_world: false,
        }
    }

    fn call(&self, params: ReportParams, ctx: &ToolContext<'_>) -> cubby::Result<ToolResult> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        ctx.log(&format!("making {} rows with {SECRET}\x1b[2J", params.rows));
        ToolResult::json(
            format!(
                "report {} of {} rows, token={SECRET}\x1b[31m, call {} of {} in {}/{}",
                params.title.as_deref().unwrap_or("untitled"),
                params.rows,
                ctx.call_id(),
                ctx.tool_name(),
                ctx.provider().as_str(),
                ctx.mode().as_str(),
            ),
            &json!({"rows": params.rows, "token": SECRET, "nested": [format!("x{SECRET}y")]}),
        )
    }
}

#[derive(Deserialize, JsonSchema)]
struct NoParams {}

/// Waits for its call's cancellation (at most [`FALLBACK`]) and says how it
/// ended.
struct Waits;

impl CustomTool for Waits {
    type Params = NoParams;
    fn name(&self) -> &str {
        "waits"
    }
    fn description(&self) -> String {
        "Waits until cancelled; use it to test cancellation.".into()
    }
    fn call(&self, _: NoParams, ctx: &ToolContext<'_>) -> cubby::Result<ToolResult> {
        let start = Instant::now();
        while !ctx.cancelled() {
            if start.elapsed() > FALLBACK {
                return Ok(ToolResult::text("not cancelled"));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(ToolResult::text("cancelled"))
    }
}

/// Panics.
struct Panics;

impl CustomTool for Panics {
    type Params = NoParams;
    fn name(&self) -> &str {
        "falls_over"
    }
    fn description(&self) -> String {
        "Panics; use it to test the toolset.".into()
    }
    fn call(&self, _: NoParams, _: &ToolContext<'_>) -> cubby::Result<ToolResult> {
        panic!("the handler fell over")
    }
}

/// A tool of any name (for the name checks).
struct Named(&'static str);

impl CustomTool for Named {
    type Params = NoParams;
    fn name(&self) -> &str {
        self.0
    }
    fn description(&self) -> String {
        "A tool; use it to test names.".into()
    }
    fn call(&self, _: NoParams, _: &ToolContext<'_>) -> cubby::Result<ToolResult> {
        Ok(ToolResult::text(self.0))
    }
}

fn report() -> (Report, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    (
        Report {
            calls: calls.clone(),
        },
        calls,
    )
}

fn builder() -> ToolsetBuilder {
    Toolset::builder(virtual_sandbox(cubby::MemoryFs::new())).secret("CUSTOM_TOKEN", SECRET)
}

#[test]
fn a_custom_tool_is_offered_with_its_derived_schema_and_annotations() {
    let (tool, _) = report();
    let t = builder().tool(tool).build().unwrap();
    let names = t.tool_names();
    assert_eq!(names.last(), Some(&"make_report"), "{names:?}");
    let spec = t
        .tools()
        .into_iter()
        .find(|s| s.name == "make_report")
        .unwrap();
    assert_eq!(
        spec.description,
        "Makes a report of `rows` rows; use it when asked for a report."
    );
    // The same draft and shape the built-in tools' schemas have: inline,
    // no `$schema`, closed objects, doc comments as descriptions.
    assert_eq!(spec.input_schema["type"], "object");
    assert_eq!(spec.input_schema["additionalProperties"], false);
    assert_eq!(spec.input_schema["required"], json!(["rows"]));
    assert_eq!(
        spec.input_schema["properties"]["rows"]["description"],
        "How many rows the report has."
    );
    assert_eq!(spec.input_schema["properties"]["rows"]["minimum"], 0);
    assert!(spec.input_schema.get("$schema").is_none());
    assert!(!spec.input_schema.to_string().contains("\"format\""));
    let read = t
        .tools()
        .into_iter()
        .find(|s| s.name == "read_file")
        .unwrap();
    assert_eq!(
        read.input_schema.get("$schema"),
        spec.input_schema.get("$schema")
    );
    assert!(spec.annotations.read_only && !spec.annotations.open_world);
    assert!(spec.facts.read_only);
    assert_eq!(spec.facts.family, cubby::Family::Other);
    // A long call for the fronts: a thread of its own, awaited on cancel.
    assert_eq!(spec.facts.cost, cubby::Cost::Long);
    assert_eq!(t.catalog().facts("make_report"), Some(spec.facts));
}

#[test]
fn the_handler_sees_its_call_the_run_and_logs_into_the_run_s_events() {
    let (tool, calls) = report();
    let seen: Arc<Mutex<Vec<OutputEvent>>> = Arc::default();
    let run_events = seen.clone();
    let call_events: Arc<Mutex<Vec<OutputEvent>>> = Arc::default();
    let per_call = call_events.clone();
    let t = builder()
        .subscribe(Arc::new(move |e: &OutputEvent| {
            run_events.lock().unwrap().push(e.clone());
        }))
        .tool(tool)
        .build()
        .unwrap();
    let options = CallOptions {
        call_id: Some("req-7".into()),
        on_output: Some(Arc::new(move |e: &OutputEvent| {
            per_call.lock().unwrap().push(e.clone());
        }) as Subscriber),
        ..CallOptions::default()
    };
    let out = t.call_with("make_report", json!({"rows": 3}), &options);
    assert!(!out.is_error, "{}", out.text);
    assert!(
        out.text
            .contains("of 3 rows, token=[REDACTED:CUSTOM_TOKEN]␛[31m, call req-7 of make_report in virtual/workspace-write"),
        "{}",
        out.text
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    // The log line, redacted and neutralised, to the run's subscribers and
    // the call's.
    let expected = OutputEvent {
        process: "tool:make_report".into(),
        chunk: "making 3 rows with [REDACTED:CUSTOM_TOKEN]␛[2J\n".into(),
    };
    assert_eq!(*seen.lock().unwrap(), std::slice::from_ref(&expected));
    assert_eq!(*call_events.lock().unwrap(), [expected]);
    // Without a call id from the front, the toolset numbers its calls.
    let first = t.call("make_report", json!({"rows": 1}));
    let second = t.call("make_report", json!({"rows": 1}));
    let id = |text: &str| {
        text.split("call ")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .to_string()
    };
    assert!(id(&first.text).starts_with("call-"), "{}", first.text);
    assert_ne!(id(&first.text), id(&second.text));
}

#[test]
fn a_custom_tool_s_text_and_json_are_redacted_and_neutralised() {
    let (tool, _) = report();
    let t = builder().tool(tool).build().unwrap();
    let out = t.call("make_report", json!({"rows": 2, "title": SECRET}));
    assert!(!out.is_error, "{}", out.text);
    let all = format!("{} {}", out.text, out.structured);
    assert!(!all.contains(SECRET), "{all}");
    assert!(!out.text.contains('\x1b'), "{:?}", out.text);
    assert!(
        out.text
            .starts_with("report [REDACTED:CUSTOM_TOKEN] of 2 rows"),
        "{}",
        out.text
    );
    assert_eq!(out.structured["rows"], 2);
    assert_eq!(out.structured["token"], "[REDACTED:CUSTOM_TOKEN]");
    assert_eq!(out.structured["nested"][0], "x[REDACTED:CUSTOM_TOKEN]y");
}

#[test]
fn a_custom_tool_s_result_is_held_to_the_output_limit() {
    struct Floods;
    impl CustomTool for Floods {
        type Params = NoParams;
        fn name(&self) -> &str {
            "floods"
        }
        fn description(&self) -> String {
            "Floods; use it to test limits.".into()
        }
        fn call(&self, _: NoParams, _: &ToolContext<'_>) -> cubby::Result<ToolResult> {
            ToolResult::json(
                format!("{}{SECRET}{}", "a".repeat(1 << 20), "z".repeat(1 << 20)),
                &json!({"blob": "b".repeat(1 << 20)}),
            )
        }
    }
    let t = builder().tool(Floods).build().unwrap();
    let out = t.call("floods", json!({}));
    assert!(!out.is_error);
    assert!(out.text.len() <= cubby::MAX_SOURCE_TEXT_BYTES + 200);
    assert!(out.text.starts_with("aaaa") && out.text.ends_with("zzzz"));
    assert!(!out.text.contains(SECRET));
    assert_eq!(out.structured["cut"], true);
}

#[test]
fn bad_params_are_invalid_input_naming_the_field_and_never_reach_the_handler() {
    let (tool, calls) = report();
    let t = builder().tool(tool).build().unwrap();
    let cases = [
        (json!({"rows": "three"}), "`rows`"),
        (json!({}), "missing field `rows`"),
        (
            json!({"rows": 1, "colour": "red"}),
            "unknown field `colour`",
        ),
        (json!({"rows": 1, "title": 5}), "`title`"),
        (json!({"rows": -1}), "`rows`"),
    ];
    for (args, names) in cases {
        let out = t.call("make_report", args.clone());
        assert!(
            out.text
                .starts_with("ERROR invalid_input: arguments for make_report do not fit"),
            "{args}: {}",
            out.text
        );
        assert!(out.text.contains(names), "{args}: {}", out.text);
        assert_eq!(out.structured["error"]["kind"], "invalid_input");
    }
    let out = t.call("make_report", json!([1]));
    assert!(out.text.starts_with("ERROR invalid_input:"), "{}", out.text);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "no call reached the handler"
    );
}

#[test]
fn cancellation_reaches_the_handler_promptly() {
    let t = builder().tool(Waits).build().unwrap();
    let cancel = CancelToken::new();
    let options = CallOptions {
        cancel: Some(cancel.clone()),
        ..CallOptions::default()
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let caller = {
        let t = t.clone();
        std::thread::spawn(move || {
            let out = t.call_with("waits", json!({}), &options);
            tx.send(Instant::now()).unwrap();
            out
        })
    };
    // Give the call time to start; whether it has does not matter to what
    // is asserted (the handler sees the token either way).
    std::thread::sleep(Duration::from_millis(50));
    let cancelled_at = Instant::now();
    cancel.cancel();
    let returned_at = rx.recv_timeout(FALLBACK / 2).expect("the handler returned");
    let out = caller.join().unwrap();
    assert_eq!(out.text, "cancelled");
    // Well before its own fallback (a generous bound on a busy machine).
    assert!(
        returned_at.duration_since(cancelled_at) < Duration::from_secs(5),
        "{:?}",
        returned_at.duration_since(cancelled_at)
    );
    // Without a token the handler still has one, never fired.
    struct Peeks;
    impl CustomTool for Peeks {
        type Params = NoParams;
        fn name(&self) -> &str {
            "peeks"
        }
        fn description(&self) -> String {
            "Peeks; use it to test tokens.".into()
        }
        fn call(&self, _: NoParams, ctx: &ToolContext<'_>) -> cubby::Result<ToolResult> {
            Ok(ToolResult::text(format!(
                "cancelled: {}",
                ctx.cancel_token().is_cancelled()
            )))
        }
    }
    let t = builder().tool(Peeks).build().unwrap();
    assert_eq!(t.call("peeks", json!({})).text, "cancelled: false");
}

#[test]
fn a_panicking_handler_is_an_internal_error_and_the_toolset_keeps_serving() {
    let (tool, calls) = report();
    let t = builder().tool(Panics).tool(tool).build().unwrap();
    let out = t.call("falls_over", json!({}));
    assert!(out.is_error);
    assert!(
        out.text
            .starts_with("ERROR internal: falls_over failed unexpectedly"),
        "{}",
        out.text
    );
    let out = t.call("make_report", json!({"rows": 1}));
    assert!(!out.is_error, "{}", out.text);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[test]
fn every_built_in_name_is_reserved_and_a_clash_is_a_build_error_naming_it() {
    let names: Vec<&str> = builtin_tools().map(|(n, _)| n).collect();
    assert!(names.contains(&"skill") && names.contains(&"view_file"));
    for name in names {
        let leaked: &'static str = Box::leak(name.to_string().into_boxed_str());
        let err = builder().tool(Named(leaked)).build().unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "ERROR invalid_input: custom tool `{name}`: the name is reserved for a \
                 built-in tool; rename the custom tool"
            ),
        );
    }
}

#[test]
fn names_are_checked_when_the_toolset_is_built() {
    let sixty_four = "a".repeat(64);
    let ok: &'static str = Box::leak(sixty_four.clone().into_boxed_str());
    assert!(builder().tool(Named(ok)).build().is_ok());
    assert!(builder().tool(Named("A-b_9")).build().is_ok());
    let too_long: &'static str = Box::leak(format!("{sixty_four}a").into_boxed_str());
    for bad in ["", "two words", "dotted.name", "naïve", "a/b", too_long] {
        let err = builder().tool(Named(bad)).build().unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "ERROR invalid_input: custom tool `{bad}`: a custom tool's name is 1 to 64 \
                 ASCII letters, digits, `_` or `-`; rename it"
            ),
        );
    }
    let err = builder()
        .tool(Named("twice"))
        .tool(Named("twice"))
        .build()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "ERROR invalid_input: custom tool `twice`: two custom tools have this name; rename one"
    );
}

#[test]
fn the_policy_gates_custom_tools() {
    // `.tool` offers a read-only tool in every mode, deny wins.
    let (tool, calls) = report();
    let t = builder()
        .policy(Policy::builder().mode(Mode::ReadOnly).build().unwrap())
        .tool(tool)
        .build()
        .unwrap();
    assert!(t.tool_names().contains(&"make_report"));
    let (tool, _) = report();
    let t = builder()
        .policy(Policy::builder().deny(["make_report"]).build().unwrap())
        .tool(tool)
        .build()
        .unwrap();
    assert!(!t.tool_names().contains(&"make_report"));
    assert_eq!(
        t.call("make_report", json!({"rows": 1})).text,
        "ERROR denied: make_report is not offered in this session: `deny` names make_report"
    );
    // A tool that is not read-only: the writing modes give it.
    let t = builder()
        .policy(Policy::builder().mode(Mode::ReadOnly).build().unwrap())
        .tool(Named("writes"))
        .build()
        .unwrap();
    assert!(!t.tool_names().contains(&"writes"));
    assert!(
        t.call("writes", json!({}))
            .text
            .starts_with("ERROR denied: writes is not offered in this session: mode read-only")
    );
    // `.tool_offered(t, false)`: only `allow` offers it.
    let t = builder()
        .tool_offered(Named("gated"), false)
        .build()
        .unwrap();
    assert!(!t.tool_names().contains(&"gated"));
    assert!(
        t.call("gated", json!({}))
            .text
            .starts_with("ERROR denied: gated is not offered"),
    );
    let t = builder()
        .policy(Policy::builder().allow(["gated"]).build().unwrap())
        .tool_offered(Named("gated"), false)
        .build()
        .unwrap();
    assert_eq!(t.call("gated", json!({})).text, "gated");
    // allow/deny naming a custom tool that is not there is a build error.
    let err = builder()
        .policy(Policy::builder().allow(["gated"]).build().unwrap())
        .build()
        .unwrap_err();
    assert!(err.message().contains("unknown tool `gated`"), "{err}");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CsvParams {
    /// The artifact's name.
    name: String,
}

/// Publishes a small CSV under the name it is given.
struct Csv;

impl CustomTool for Csv {
    type Params = CsvParams;
    fn name(&self) -> &str {
        "csv"
    }
    fn description(&self) -> String {
        "Publishes a CSV; use it to test artifacts.".into()
    }
    fn call(&self, p: CsvParams, ctx: &ToolContext<'_>) -> cubby::Result<ToolResult> {
        let file = ctx.publish(&p.name, Some("text/csv"), b"n,square\n1,1\n2,4\n")?;
        ToolResult::json("made a table", &json!({"sha256": file.sha256}))
    }
}

#[test]
fn a_custom_tool_publishes_artifacts_into_the_run() {
    let state = tempfile::tempdir().unwrap();
    let store = Arc::new(cubby::artifact::Store::open(state.path()).unwrap());
    let t = builder().artifact_store(store).tool(Csv).build().unwrap();
    let out = t.call("csv", json!({"name": "squares.csv"}));
    assert!(!out.is_error, "{}", out.text);
    let listed = t.artifacts().list();
    assert_eq!(listed.len(), 1);
    let file = &listed[0];
    assert_eq!(
        (file.name.as_str(), file.media_type.as_str(), file.size),
        ("squares.csv", "text/csv", 17)
    );
    // The line every tool's artifact gets, and its link.
    assert_eq!(
        out.text,
        format!(
            "made a table\nartifact squares.csv — text/csv, 17 B, sha256:{}…, {}",
            &file.sha256[..12],
            file.uri
        )
    );
    assert_eq!(out.artifacts(), [file]);
    assert_eq!(out.structured["sha256"], file.sha256);
    assert_eq!(
        t.artifacts().read(file, 1024).unwrap(),
        b"n,square\n1,1\n2,4\n"
    );
    // A bad name is the publisher's error, through the handler's `?`.
    let out = t.call("csv", json!({"name": "../x.csv"}));
    assert!(out.text.starts_with("ERROR invalid_input:"), "{}", out.text);
    // An artifact leaves unredacted: a secret in its name (or bytes) is
    // not published.
    let out = t.call("csv", json!({"name": format!("{SECRET}.csv")}));
    assert_eq!(
        out.text,
        "ERROR denied: csv would publish a secret's value (in the name of an artifact); \
         artifacts leave unredacted, so it is not published"
    );
    assert_eq!(t.artifacts().list().len(), 1);
}

#[test]
fn one_instance_in_an_arc_serves_the_toolsets_of_every_run() {
    let (tool, calls) = report();
    let tool = Arc::new(tool);
    let factory = move || builder().tool(tool.clone()).build().unwrap();
    let (first, second) = (factory(), factory());
    assert!(!first.call("make_report", json!({"rows": 1})).is_error);
    assert!(!second.call("make_report", json!({"rows": 2})).is_error);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}
