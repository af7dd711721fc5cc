//! A [`ToolSource`] besides the built-in tools goes through the toolset's
//! one door: the policy's gate (deny, allow, the modes its facts name), the
//! provider's capabilities, the output limit, redaction and the neutralising
//! of control characters; its names may not clash with another source's.
//!
//! The source is defined here, as a library user would write one (upstream
//! MCP servers and a remote cubby will be sources like it): its tools
//! return what a careless or hostile upstream might — a secret, a flood of
//! text, escape sequences, a panic.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use cubby::{
    Attachment, Cost, Describe, Family, ImageData, MAX_SOURCE_ATTACHMENT_BYTES,
    MAX_SOURCE_TEXT_BYTES, MemoryFs, Mode, Modes, Policy, SourceCall, ToolFacts, ToolOutput,
    ToolSource, ToolSpec, Toolset, ToolsetBuilder, virtual_sandbox,
};
use serde_json::{Value, json};

/// The secret the toolset redacts and the source leaks.
const SECRET: &str = "s3cr3t-upstream-token-6f1e";

/// Facts of a tool of this source: `modes` give it, it only reads.
fn facts(modes: Modes, family: Family) -> ToolFacts {
    ToolFacts {
        family,
        read_only: true,
        streaming: false,
        cost: Cost::Short,
        modes,
        snapshot: false,
        skills: false,
    }
}

/// A source of five tools, counting the calls that reach it.
struct Upstream {
    calls: AtomicUsize,
}

impl Upstream {
    fn new() -> Arc<Upstream> {
        Arc::new(Upstream {
            calls: AtomicUsize::new(0),
        })
    }
}

impl ToolSource for Upstream {
    fn list(&self) -> Vec<(String, ToolFacts)> {
        vec![
            ("leak".into(), facts(Modes::ALL, Family::Other)),
            ("flood".into(), facts(Modes::ALL, Family::Other)),
            ("deploy".into(), facts(Modes::WRITING, Family::Other)),
            ("shell".into(), facts(Modes::WRITING, Family::Commands)),
            ("panics".into(), facts(Modes::ALL, Family::Other)),
        ]
    }

    fn spec(&self, name: &str, describe: &Describe<'_>) -> Option<ToolSpec> {
        let (_, facts) = self.list().into_iter().find(|(n, _)| n == name)?;
        Some(ToolSpec {
            name: name.to_string(),
            description: format!(
                "Upstream {name}; use it to test sources{}.",
                describe.mention("read_file", |read| format!(" (then {read})"))
            ),
            input_schema: json!({"type": "object", "properties": {}, "additionalProperties": false}),
            output_schema: json!({"type": "object"}),
            annotations: cubby::Annotations {
                read_only: true,
                destructive: false,
                idempotent: true,
                open_world: true,
            },
            facts,
        })
    }

    fn call(
        &self,
        name: &str,
        arguments: Value,
        call: &SourceCall<'_>,
    ) -> cubby::Result<ToolOutput> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        assert!(call.limits().read_file.max_lines > 0);
        match name {
            "leak" => Ok(ToolOutput::ok(
                format!("token={SECRET}\x1b[31m red \x07"),
                json!({"token": SECRET, "nested": [format!("x{SECRET}y")], "args": arguments}),
            )
            .with_attachment(Attachment::Image(ImageData {
                media_type: "image/png".into(),
                bytes: vec![0x89, b'P', b'N', b'G'],
            }))),
            "flood" => Ok(ToolOutput::ok(
                format!("{}{SECRET}{}", "a".repeat(1 << 20), "z".repeat(1 << 20)),
                json!({"blob": "b".repeat(1 << 20)}),
            )
            .with_attachment(Attachment::Image(ImageData {
                media_type: "image/png".into(),
                bytes: vec![0; MAX_SOURCE_ATTACHMENT_BYTES / 2 + 1],
            }))
            .with_attachment(Attachment::Image(ImageData {
                media_type: "image/png".into(),
                bytes: vec![0; MAX_SOURCE_ATTACHMENT_BYTES / 2 + 1],
            }))),
            "deploy" | "shell" => Ok(ToolOutput::ok("done", json!({}))),
            "panics" => panic!("upstream fell over"),
            other => Err(cubby::Error::new(
                cubby::ErrorKind::InvalidInput,
                format!("no {other}"),
            )),
        }
    }
}

fn builder(source: Arc<Upstream>) -> ToolsetBuilder {
    Toolset::builder(virtual_sandbox(MemoryFs::new()))
        .secret("UPSTREAM_TOKEN", SECRET)
        .source(source)
}

fn with_policy(source: Arc<Upstream>, policy: &mut cubby::PolicyBuilder) -> Toolset {
    builder(source)
        .policy(policy.build().unwrap())
        .build()
        .unwrap()
}

#[test]
fn a_source_s_tools_are_offered_after_the_built_in_ones_and_described_for_the_toolset() {
    let t = builder(Upstream::new()).build().unwrap();
    let names = t.tool_names();
    let first = names.iter().position(|n| *n == "leak").unwrap();
    assert!(names[..first].contains(&"read_file"));
    // `shell` is a command tool and the virtual provider runs none.
    assert_eq!(&names[first..], ["leak", "flood", "deploy", "panics"]);
    let specs = t.tools();
    let leak = specs.iter().find(|s| s.name == "leak").unwrap();
    assert_eq!(
        leak.description,
        "Upstream leak; use it to test sources (then read_file)."
    );
    assert_eq!(leak.facts.family, Family::Other);
    // The catalog knows every tool, offered or not, with its facts.
    assert_eq!(t.catalog().facts("shell").unwrap().family, Family::Commands);
    assert!(!t.catalog().is_bounded("leak", &json!({})));
}

#[test]
fn a_source_s_results_are_redacted_and_neutralised() {
    let source = Upstream::new();
    let t = builder(source.clone()).build().unwrap();
    let out = t.call("leak", json!({"echo": SECRET}));
    assert!(!out.is_error, "{}", out.text);
    assert_eq!(source.calls.load(Ordering::SeqCst), 1);
    let all = format!("{} {}", out.text, out.structured);
    assert!(!all.contains(SECRET), "{all}");
    assert!(
        out.text.contains("[REDACTED:UPSTREAM_TOKEN]"),
        "{}",
        out.text
    );
    assert_eq!(out.structured["token"], "[REDACTED:UPSTREAM_TOKEN]");
    assert_eq!(out.structured["nested"][0], "x[REDACTED:UPSTREAM_TOKEN]y");
    assert_eq!(out.structured["args"]["echo"], "[REDACTED:UPSTREAM_TOKEN]");
    assert!(
        !out.text.contains('\x1b') && !out.text.contains('\x07'),
        "{:?}",
        out.text
    );
    assert_eq!(out.images().len(), 1);
    assert_eq!(out.images()[0].media_type, "image/png");
}

#[test]
fn a_source_s_results_are_held_to_the_output_limit() {
    let t = builder(Upstream::new()).build().unwrap();
    let out = t.call("flood", json!({}));
    assert!(!out.is_error, "{}", &out.text[..200]);
    assert!(
        out.text.len() <= MAX_SOURCE_TEXT_BYTES + 200,
        "{} bytes of text",
        out.text.len()
    );
    assert!(
        out.text.starts_with("aaaa")
            && out
                .text
                .ends_with("zzzz\n[1 attachment(s) dropped: over the limit of 8388608 bytes]"),
        "{}",
        &out.text[out.text.len() - 200..]
    );
    assert!(
        out.text
            .contains("bytes cut: the result is over the limit of 65536 bytes]")
    );
    assert!(!out.text.contains(SECRET));
    assert_eq!(out.structured["cut"], true);
    assert_eq!(out.attachments.len(), 1);
}

#[test]
fn the_deny_list_and_the_modes_gate_a_source_s_tools() {
    let source = Upstream::new();
    let t = with_policy(source.clone(), Policy::builder().deny(["leak"]));
    assert!(!t.tool_names().contains(&"leak"));
    let out = t.call("leak", json!({}));
    assert_eq!(
        out.text,
        "ERROR denied: leak is not offered in this session: `deny` names leak"
    );
    // Read-only gives what its facts say every mode gives, not `deploy`.
    let t = with_policy(source.clone(), Policy::builder().mode(Mode::ReadOnly));
    assert!(t.tool_names().contains(&"flood"));
    let out = t.call("deploy", json!({}));
    assert!(
        out.text.starts_with("ERROR denied: deploy is not offered"),
        "{}",
        out.text
    );
    // `allow` may name a source's tool, and then read-only offers it.
    let t = with_policy(
        source.clone(),
        Policy::builder().mode(Mode::ReadOnly).allow(["deploy"]),
    );
    assert_eq!(t.call("deploy", json!({})).text, "done");
    // A command tool where no commands run.
    let out = t.call("shell", json!({}));
    assert_eq!(
        out.text,
        "ERROR unsupported: shell is not available: the virtual provider runs no commands"
    );
    // Arguments that are not an object never reach the source.
    let out = t.call("flood", json!([1]));
    assert!(out.text.starts_with("ERROR invalid_input:"), "{}", out.text);
    assert_eq!(
        source.calls.load(Ordering::SeqCst),
        1,
        "only `deploy` got through"
    );
}

#[test]
fn a_panicking_source_is_an_internal_error_and_the_toolset_keeps_serving() {
    let t = builder(Upstream::new()).build().unwrap();
    let out = t.call("panics", json!({}));
    assert!(out.is_error);
    assert!(
        out.text
            .starts_with("ERROR internal: panics failed unexpectedly"),
        "{}",
        out.text
    );
    assert!(!t.call("leak", json!({})).is_error);
}

#[test]
fn names_are_checked_when_the_toolset_is_built() {
    /// A source with one tool of this name.
    struct One(&'static str);
    impl ToolSource for One {
        fn list(&self) -> Vec<(String, ToolFacts)> {
            vec![(self.0.to_string(), facts(Modes::ALL, Family::Other))]
        }
        fn spec(&self, _: &str, _: &Describe<'_>) -> Option<ToolSpec> {
            None
        }
        fn call(&self, _: &str, _: Value, _: &SourceCall<'_>) -> cubby::Result<ToolOutput> {
            Ok(ToolOutput::ok("one", json!({})))
        }
    }
    let err = Toolset::builder(virtual_sandbox(MemoryFs::new()))
        .source(Arc::new(One("read_file")))
        .build()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "ERROR invalid_input: source 1 has a tool named `read_file`, the name of a built-in \
         tool; rename one of them"
    );
    let err = builder(Upstream::new())
        .source(Arc::new(One("flood")))
        .build()
        .unwrap_err();
    assert!(
        err.message().contains("the name of a tool of source 1"),
        "{err}"
    );
    let err = Toolset::builder(virtual_sandbox(MemoryFs::new()))
        .source(Arc::new(One("two words")))
        .build()
        .unwrap_err();
    assert!(err.message().contains("a tool name is 1 to 64"), "{err}");
    // allow/deny may name any tool of any source, and nothing else.
    let err = builder(Upstream::new())
        .policy(Policy::builder().deny(["floood"]).build().unwrap())
        .build()
        .unwrap_err();
    assert!(
        err.message()
            .starts_with("unknown tool `floood` in allow/deny; known tools: read_file,")
            && err
                .message()
                .ends_with("web_search, leak, flood, deploy, shell, panics"),
        "{err}"
    );
}
