//! Exec rules: ordered prefix rules on the parsed command, and the library's
//! `before_run` callback.
//!
//! A command line is split into simple commands at unquoted control
//! operators (`;`, `&`, `|`, `&&`, `||`, newlines, parentheses); each simple
//! command is split into words as a POSIX shell would (quotes, backslashes),
//! leading `NAME=value` assignments skipped. For each simple command the
//! first rule whose `prefix` equals its first words decides:
//!
//! 1. `deny` in any simple command refuses the whole command line, naming
//!    the rule.
//! 2. `rewrite` replaces the matched prefix words by `replacement` in that
//!    simple command.
//! 3. `allow`, or no matching rule, leaves it as it is.
//!
//! Then the `before_run` callback, when set, sees the (rewritten) command
//! and may allow it, refuse it, or replace it.

use std::sync::Arc;

use crate::config::{ExecDecision, ExecRule};
use crate::error::{Error, Result};
use crate::output::truncate_for_message;
use crate::path::WorkspacePath;

/// What a `before_run` callback decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunDecision {
    /// Run the command as it is.
    Allow,
    /// Refuse it; the reason is shown to the model.
    Refuse(String),
    /// Run this command line instead.
    Replace(String),
}

/// A callback consulted before every command (`run` and `start_process`):
/// it receives the command line and its working directory.
pub type BeforeRun = Arc<dyn Fn(&str, &WorkspacePath) -> RunDecision + Send + Sync>;

/// One simple command of a command line: its byte range and words.
#[derive(Debug, PartialEq, Eq)]
struct Simple {
    range: std::ops::Range<usize>,
    words: Vec<String>,
}

/// Splits a command line at unquoted control operators.
fn simple_commands(line: &str) -> Vec<Simple> {
    let bytes = line.as_bytes();
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    let mut single = false;
    let mut double = false;
    while i < bytes.len() {
        let b = bytes[i];
        if single {
            single = b != b'\'';
        } else if b == b'\\' {
            i += 1;
        } else if double {
            double = b != b'"';
        } else if b == b'\'' {
            single = true;
        } else if b == b'"' {
            double = true;
        } else if matches!(b, b';' | b'&' | b'|' | b'\n' | b'(' | b')' | b'`') {
            push_simple(line, start..i, &mut out);
            start = i + 1;
        }
        i += 1;
    }
    push_simple(line, start..line.len(), &mut out);
    out
}

fn push_simple(line: &str, range: std::ops::Range<usize>, out: &mut Vec<Simple>) {
    let text = &line[range.clone()];
    let words =
        shlex::split(text).unwrap_or_else(|| text.split_whitespace().map(str::to_string).collect());
    let words: Vec<String> = words.into_iter().skip_while(|w| is_assignment(w)).collect();
    if !words.is_empty() {
        out.push(Simple { range, words });
    }
}

fn is_assignment(word: &str) -> bool {
    match word.split_once('=') {
        Some((name, _)) => {
            !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
        None => false,
    }
}

/// Applies `rules` to `command`: the command to run, or `denied`.
///
/// # Errors
///
/// `denied` naming the rule that refused.
pub fn apply_rules(rules: &[ExecRule], command: &str) -> Result<String> {
    if rules.is_empty() {
        return Ok(command.to_string());
    }
    let mut rewritten = String::new();
    let mut last = 0;
    for simple in simple_commands(command) {
        let Some((index, rule)) = rules
            .iter()
            .enumerate()
            .find(|(_, r)| simple.words.starts_with(&r.prefix))
        else {
            continue;
        };
        match rule.decision {
            ExecDecision::Allow => {}
            ExecDecision::Deny => {
                return Err(Error::denied(format!(
                    "`{}` is refused by exec rule {} (prefix {:?}, decision deny); run \
                     something else",
                    truncate_for_message(command),
                    index + 1,
                    rule.prefix
                )));
            }
            ExecDecision::Rewrite => {
                let replacement = rule.replacement.clone().unwrap_or_default();
                let words: Vec<&str> = replacement
                    .iter()
                    .map(String::as_str)
                    .chain(simple.words[rule.prefix.len()..].iter().map(String::as_str))
                    .collect();
                let joined = shlex::try_join(words).map_err(|e| {
                    Error::invalid_input(format!(
                        "exec rule {} cannot rewrite the command: {e}",
                        index + 1
                    ))
                })?;
                rewritten.push_str(&command[last..simple.range.start]);
                rewritten.push(' ');
                rewritten.push_str(&joined);
                rewritten.push(' ');
                last = simple.range.end;
            }
        }
    }
    rewritten.push_str(&command[last..]);
    Ok(if last == 0 {
        command.to_string()
    } else {
        rewritten.trim().to_string()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(prefix: &[&str], decision: ExecDecision, replacement: Option<&[&str]>) -> ExecRule {
        ExecRule {
            prefix: prefix.iter().map(|s| s.to_string()).collect(),
            decision,
            replacement: replacement.map(|r| r.iter().map(|s| s.to_string()).collect()),
        }
    }

    #[test]
    fn splits_at_operators_outside_quotes() {
        let s = simple_commands("A=1 git push origin && echo 'a;b' | wc -l; (cd x)");
        let words: Vec<Vec<String>> = s.into_iter().map(|s| s.words).collect();
        assert_eq!(
            words,
            vec![
                vec!["git", "push", "origin"],
                vec!["echo", "a;b"],
                vec!["wc", "-l"],
                vec!["cd", "x"]
            ]
        );
    }

    #[test]
    fn first_matching_rule_decides() {
        let rules = [
            rule(&["git", "push", "--dry-run"], ExecDecision::Allow, None),
            rule(&["git", "push"], ExecDecision::Deny, None),
        ];
        assert!(apply_rules(&rules, "git push --dry-run").is_ok());
        let err = apply_rules(&rules, "make && git push origin main").unwrap_err();
        assert!(err.message().contains("rule 2"), "{err}");
        assert!(apply_rules(&rules, "echo 'git push'").is_ok());
        assert!(apply_rules(&rules, "FOO=1 git push").is_err());
        assert!(apply_rules(&rules, "true;git push").is_err());
    }

    #[test]
    fn rewrite_replaces_the_prefix() {
        let rules = [rule(
            &["npm", "install"],
            ExecDecision::Rewrite,
            Some(&["npm", "ci"]),
        )];
        assert_eq!(
            apply_rules(&rules, "npm install --silent").unwrap(),
            "npm ci --silent"
        );
        assert_eq!(
            apply_rules(&rules, "cd app && npm install").unwrap(),
            "cd app && npm ci"
        );
        assert_eq!(apply_rules(&rules, "ls").unwrap(), "ls");
    }
}
