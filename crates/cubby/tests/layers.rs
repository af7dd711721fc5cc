//! The module stack (docs/ARCHITECTURE.md, "Layers"): every top-level module
//! of `crates/cubby/src` imports only modules below it, and the workspace's
//! crates import only crates below them.
//!
//! The check reads the sources: every `crate::X` path (including
//! `use crate::{X::…, …}` groups and the crate root's `pub use` re-exports,
//! so `crate::Config` counts as `config`) and every `super::` path that climbs
//! out of the file's top-level module. Comment lines are skipped (doc links
//! are not imports), and so are unit-test modules (`#[cfg(test)] mod tests`:
//! test code sits above every layer and may build a whole toolset).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The library's top-level modules, lowest first. A module may import only
/// modules earlier in this list.
const LAYERS: &[&str] = &[
    "sync",
    "error",
    "host_env",
    "mounts",
    "output",
    "path",
    "git",
    "config",
    "policy",
    "exec_policy",
    "net",
    "sandbox",
    "process",
    "artifact",
    "skills",
    "web",
    "upstream",
    "remote",
    "kubernetes",
    "config_file",
    "tools",
    "toolset",
    "workspace",
    "host",
];

/// The workspace's crates, lowest first, and where their manifests are
/// (relative to this crate's manifest directory).
const CRATES: &[(&str, &str)] = &[
    ("cubby", "."),
    ("cubby-mcp", "../cubby-mcp"),
    ("cubby-cli", "../cubby-cli"),
];

/// One import that leaves its file's top-level module.
#[derive(Debug, Clone)]
struct Edge {
    from: String,
    to: String,
    file: PathBuf,
    line: usize,
    text: String,
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// The identifier at the start of `s`.
fn ident(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// Names the crate root re-exports, mapped to the module they come from
/// (`pub use config::{Config, Limits}` maps `Config` and `Limits` to
/// `config`).
fn root_reexports(lib: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    let mut rest = lib;
    while let Some(at) = rest.find("\npub use ") {
        let stmt_start = at + "\npub use ".len();
        let end = rest[stmt_start..].find(';').expect("`pub use` ends") + stmt_start;
        let stmt = &rest[stmt_start..end];
        let module = ident(stmt).to_string();
        let names = match (stmt.find('{'), stmt.rfind('}')) {
            (Some(open), Some(close)) => stmt[open + 1..close].to_string(),
            _ => stmt.rsplit("::").next().unwrap_or("").to_string(),
        };
        for name in names.split(',') {
            let name = name.trim();
            let name = name.rsplit(" as ").next().unwrap_or(name).trim();
            let name = name.rsplit("::").next().unwrap_or(name).trim();
            if !name.is_empty() {
                map.insert(name.to_string(), module.clone());
            }
        }
        rest = &rest[end..];
    }
    map
}

/// The top-level modules named by the paths in a `{…}` group that starts at
/// `group` (just after the `{`).
fn group_heads(group: &str) -> Vec<String> {
    let mut heads = Vec::new();
    let mut depth = 0usize;
    let mut at_item = true;
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => at_item = true,
            c if at_item && depth == 0 && !c.is_whitespace() => {
                heads.push(ident(&group[i..]).to_string());
                at_item = false;
            }
            _ => {}
        }
    }
    heads
}

/// The imports of one file that leave its top-level module `top`. `depth` is
/// the number of `super::` steps that reach the crate root from the file
/// (1 for `src/x.rs` and `src/x/mod.rs`, 2 for `src/x/y.rs`, …).
fn file_edges(
    file: &Path,
    top: &str,
    depth: usize,
    modules: &[&str],
    reexports: &BTreeMap<String, String>,
) -> Vec<Edge> {
    let text = std::fs::read_to_string(file).expect("source is UTF-8");
    let mut edges = Vec::new();
    // A `use crate::{` group may span lines: join the statement first.
    let lines: Vec<&str> = text.lines().collect();
    let mut n = 0;
    while n < lines.len() {
        let line_no = n + 1;
        let mut line = lines[n].to_string();
        n += 1;
        if line.trim_start().starts_with("//") {
            continue;
        }
        // A unit-test module (`#[cfg(test)]` then `mod …` at the margin, as
        // rustfmt leaves it) sits above every layer: skip to its closing `}`.
        if line == "#[cfg(test)]" && lines.get(n).is_some_and(|l| l.starts_with("mod ")) {
            while n < lines.len() && lines[n] != "}" {
                n += 1;
            }
            continue;
        }
        if line.contains("crate::{") && !line.contains('}') {
            while n < lines.len() && !lines[n - 1].contains('}') {
                line.push_str(lines[n]);
                n += 1;
            }
        }
        let mut targets = Vec::new();
        let mut rest = line.as_str();
        while let Some(at) = rest.find("crate::") {
            // `$crate::` and `foo_crate::` are other paths.
            let before = rest[..at].chars().next_back();
            let after = &rest[at + "crate::".len()..];
            if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$') {
                if let Some(group) = after.strip_prefix('{') {
                    targets.extend(group_heads(group));
                } else {
                    targets.push(ident(after).to_string());
                }
            }
            rest = after;
        }
        let mut rest = line.as_str();
        while let Some(at) = rest.find("super::") {
            let before = rest[..at].chars().next_back();
            let mut after = &rest[at..];
            let mut steps = 0;
            while let Some(tail) = after.strip_prefix("super::") {
                steps += 1;
                after = tail;
            }
            if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') && steps >= depth {
                if let Some(group) = after.strip_prefix('{') {
                    targets.extend(group_heads(group));
                } else {
                    targets.push(ident(after).to_string());
                }
            }
            rest = after;
        }
        for target in targets {
            let module = if modules.contains(&target.as_str()) {
                Some(target.clone())
            } else {
                reexports.get(&target).cloned()
            };
            if let Some(module) = module
                && module != top
            {
                edges.push(Edge {
                    from: top.to_string(),
                    to: module,
                    file: file.to_path_buf(),
                    line: line_no,
                    text: lines[line_no - 1].trim().to_string(),
                });
            }
        }
    }
    edges
}

/// Every import in the crate whose sources are in `src` (root `root_file`)
/// that leaves its file's top-level module. With `layers`, every top-level
/// module must be in it; without, the modules are the crate's own files and
/// directories.
fn crate_edges(src: &Path, root_file: &str, layers: Option<&[&str]>) -> Vec<Edge> {
    let root = std::fs::read_to_string(src.join(root_file)).expect("crate root");
    let reexports = root_reexports(&root);
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let tops: Vec<String> = files
        .iter()
        .map(|f| {
            let rel = f.strip_prefix(src).expect("under src");
            let first = rel.iter().next().expect("a component");
            first.to_string_lossy().trim_end_matches(".rs").to_string()
        })
        .filter(|t| *t != root_file.trim_end_matches(".rs"))
        .collect();
    let own: Vec<&str> = tops.iter().map(String::as_str).collect();
    let modules = layers.unwrap_or(&own);
    let mut edges = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(src).expect("under src");
        let parts: Vec<String> = rel
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        if parts == [root_file] {
            continue; // The root: it declares and re-exports, above every layer.
        }
        let top = parts[0].trim_end_matches(".rs").to_string();
        assert!(
            modules.contains(&top.as_str()),
            "{}: top-level module `{top}` is not in the layer table of tests/layers.rs \
             (add it where it belongs, and to docs/ARCHITECTURE.md)",
            file.display()
        );
        let depth = if parts.last().is_some_and(|p| p == "mod.rs") {
            parts.len() - 1
        } else {
            parts.len()
        };
        edges.extend(file_edges(file, &top, depth, modules, &reexports));
    }
    edges
}

/// Every import in the library that leaves its file's top-level module.
fn library_edges() -> Vec<Edge> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    crate_edges(&src, "lib.rs", Some(LAYERS))
}

/// The cycle report for `edges`, naming a file and line per step.
fn cycle_report(edges: &[Edge]) -> Option<String> {
    let cycle = find_cycle(edges)?;
    let sites: Vec<String> = cycle
        .windows(2)
        .map(|pair| {
            let e = edges
                .iter()
                .find(|e| e.from == pair[0] && e.to == pair[1])
                .expect("an edge of the cycle");
            format!(
                "  {} → {} at {}:{}: {}",
                pair[0],
                pair[1],
                e.file.display(),
                e.line,
                e.text
            )
        })
        .collect();
    Some(format!(
        "import cycle {}:\n{}",
        cycle.join(" → "),
        sites.join("\n")
    ))
}

/// A cycle among `edges`' modules, as a path that returns to its start.
fn find_cycle(edges: &[Edge]) -> Option<Vec<String>> {
    let mut graph: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for e in edges {
        graph.entry(&e.from).or_default().insert(&e.to);
    }
    fn visit<'a>(
        node: &'a str,
        graph: &BTreeMap<&'a str, BTreeSet<&'a str>>,
        stack: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|n| *n == node) {
            let mut cycle: Vec<String> = stack[at..].iter().map(|s| s.to_string()).collect();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node);
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, stack, done) {
                return Some(cycle);
            }
        }
        stack.pop();
        done.insert(node);
        None
    }
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        if let Some(cycle) = visit(node, &graph, &mut Vec::new(), &mut done) {
            return Some(cycle);
        }
    }
    None
}

fn rank(module: &str) -> usize {
    LAYERS
        .iter()
        .position(|m| *m == module)
        .unwrap_or_else(|| panic!("module `{module}` is not in the layer table"))
}

#[test]
fn library_modules_import_only_downward() {
    let edges = library_edges();
    assert!(
        edges.len() > 50,
        "the scan found only {} cross-module imports: the parser is broken",
        edges.len()
    );
    let upward: Vec<String> = edges
        .iter()
        .filter(|e| rank(&e.to) > rank(&e.from))
        .map(|e| {
            format!(
                "{}:{}: `{}` imports `{}`, a layer above it: {}",
                e.file.display(),
                e.line,
                e.from,
                e.to,
                e.text
            )
        })
        .collect();
    assert!(
        upward.is_empty(),
        "upward imports (layer order, lowest first: {}):\n{}",
        LAYERS.join(" → "),
        upward.join("\n")
    );
}

#[test]
fn library_modules_have_no_cycle() {
    if let Some(report) = cycle_report(&library_edges()) {
        panic!("{report}");
    }
}

#[test]
fn the_other_crates_modules_have_no_cycle() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut seen = 0;
    for (name, root_file) in [("cubby-mcp", "lib.rs"), ("cubby-cli", "main.rs")] {
        let dir = CRATES.iter().find(|(c, _)| *c == name).expect("listed").1;
        let edges = crate_edges(&here.join(dir).join("src"), root_file, None);
        seen += edges.len();
        if let Some(report) = cycle_report(&edges) {
            panic!("{name}: {report}");
        }
    }
    assert!(
        seen > 0,
        "no module imports found in the other crates: the parser is broken"
    );
}

#[test]
fn the_scanner_sees_each_kind_of_path() {
    let reexports = root_reexports("\npub use config::{Config, Limits};\npub use tools::schema;\n");
    assert_eq!(reexports.get("Config").map(String::as_str), Some("config"));
    assert_eq!(reexports.get("schema").map(String::as_str), Some("tools"));
    let dir = std::env::temp_dir().join(format!("cubby-layers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("probe.rs");
    std::fs::write(
        &file,
        "use crate::{\n    error::Error,\n    web::Egress,\n};\n\
         // crate::toolset in a comment\n\
         fn f() { crate::Config::default(); super::super::tools::x(); super::y(); }\n\
         #[cfg(test)]\nmod tests {\n    use crate::toolset::Toolset;\n}\n\
         fn g() { crate::sandbox::x(); }\n",
    )
    .expect("write probe");
    let edges = file_edges(&file, "path", 2, LAYERS, &reexports);
    std::fs::remove_dir_all(&dir).expect("remove temp dir");
    let seen: Vec<(String, usize)> = edges.iter().map(|e| (e.to.clone(), e.line)).collect();
    assert_eq!(
        seen,
        [
            ("error".to_string(), 1),
            ("web".to_string(), 1),
            ("config".to_string(), 6),
            ("tools".to_string(), 6),
            ("sandbox".to_string(), 11),
        ]
    );
    let cycle = find_cycle(&[
        Edge {
            from: "a".into(),
            to: "b".into(),
            file: file.clone(),
            line: 1,
            text: String::new(),
        },
        Edge {
            from: "b".into(),
            to: "a".into(),
            file,
            line: 2,
            text: String::new(),
        },
    ]);
    assert_eq!(cycle, Some(vec!["a".into(), "b".into(), "a".into()]));
}

/// The `cubby*` crates a manifest's `[dependencies]` and
/// `[dev-dependencies]` name.
fn crate_deps(manifest: &str) -> Vec<(usize, String)> {
    let mut deps = Vec::new();
    let mut in_deps = false;
    for (i, line) in manifest.lines().enumerate() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line.ends_with("dependencies]");
            continue;
        }
        if in_deps {
            let name = line
                .split(['=', '.', ' '])
                .next()
                .unwrap_or("")
                .trim_matches('"');
            if CRATES.iter().any(|(c, _)| *c == name) {
                deps.push((i + 1, name.to_string()));
            }
        }
    }
    deps
}

#[test]
fn crates_depend_only_downward() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut bad = Vec::new();
    let mut seen = 0;
    for (rank, (name, dir)) in CRATES.iter().enumerate() {
        let path = here.join(dir).join("Cargo.toml");
        let manifest = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        for (line, dep) in crate_deps(&manifest) {
            seen += 1;
            let dep_rank = CRATES.iter().position(|(c, _)| *c == dep).expect("known");
            if dep_rank >= rank {
                bad.push(format!(
                    "{}:{line}: crate `{name}` depends on `{dep}`, which is not below it",
                    path.display()
                ));
            }
        }
    }
    assert!(
        seen >= 3,
        "found only {seen} cubby dependencies: the parser is broken"
    );
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
