//! Git's executable surface in a workspace (SPEC §4): the files through
//! which the host's next `git status` or `git commit` would run something,
//! or read a configuration the workspace did not have.
//!
//! What counts, for each git directory that lies inside the root (`.git`,
//! the directory a `.git` gitfile names, the common directory its
//! `commondir` names, and those of `.git/modules/**` and
//! `.git/worktrees/*`): its [`SURFACE_NAMES`] — configs, pointers, hooks,
//! and the state of a rebase, `am`, cherry-pick or revert in progress, whose
//! todo list the host's `git rebase --continue` would run. On top of them: the
//! directory `core.hooksPath` names, and every git config file git reads
//! that lies inside the root (an `include.path` into the tree, a `HOME`
//! inside it).
//!
//! `core.hooksPath` is not read from one file: git takes the last value of
//! the system, global, repository and worktree configs and of what they
//! include (also conditionally). [`surface`] reads all of them itself (no
//! git process is started) and protects *every* value it finds, so that a
//! setting it would misjudge as overridden still stays protected (fail
//! closed). Each `linux` command start reads them again; the file tools'
//! policy reads them when it is built ([`crate::policy::PolicyBuilder::git_of`]).
//!
//! Once per command start: the steps of one start share one reading
//! ([`SurfaceRead`]) — for `cubby exec`, the policy, the sandbox's open and
//! its one command — as long as it is at most [`SHARE_WINDOW`] old; a
//! command that comes later reads the files again.

use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use crate::host_env::HostEnv;
use crate::path::WorkspacePath;

/// The name of git's directory (or gitfile) in a worktree.
pub const GIT_DIR_NAME: &str = ".git";

/// What a git directory holds that makes git run or read something else:
/// its configs, the pointers to other git directories, its hooks, and the
/// sequencer's state — `rebase-merge/` (its `git-rebase-todo` holds `exec`
/// lines, run by `git rebase --continue`), `rebase-apply/` (`git am`, the
/// apply backend), `sequencer/` (`cherry-pick`/`revert` of several
/// commits). Present or missing: a state planted while missing runs when
/// the user continues it on the host.
pub const SURFACE_NAMES: [&str; 8] = [
    "config",
    "config.worktree",
    "commondir",
    "gitdir",
    "hooks",
    "rebase-merge",
    "rebase-apply",
    "sequencer",
];

/// What makes a directory below `.git/modules` a git directory: its `HEAD`,
/// or one of the protected names a git directory holds. `HEAD` alone would
/// not do: it is not protected (git writes it), so a command could move it
/// away and the next session would find no git directory there and leave
/// its config writable (red-team pass 3); the config, bound read-only while
/// a command runs, cannot be moved.
const GIT_DIR_MARKS: [&str; 4] = ["HEAD", "config", "commondir", "gitdir"];

/// Directories of a git directory that hold no submodule's: not looked
/// into for nested names below `.git/modules`.
const GIT_OWN_DIRS: [&str; 6] = ["objects", "refs", "logs", "info", "hooks", "lfs"];

/// At most this many bytes are read of a gitfile, `commondir` or config
/// file (git's own files are far smaller; a larger one is not followed).
const MAX_FILE_BYTES: u64 = 1024 * 1024;
/// Git follows includes this deep (its own limit).
const MAX_INCLUDE_DEPTH: usize = 10;
/// Directories looked into below `.git/modules` (a submodule's name may
/// hold slashes; nested submodules sit in `modules/<a>/modules/<b>`).
const MAX_MODULE_DEPTH: usize = 8;
/// Git directories inside one workspace cubby protects at most; beyond it
/// commands do not start (see [`Surface::overflow`]).
pub const MAX_GIT_DIRS: usize = 128;

/// Git's executable surface of one workspace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Surface {
    /// Git directories inside the root, relative to it (`.git` first when
    /// it is a directory).
    pub git_dirs: Vec<WorkspacePath>,
    /// Other paths to protect (hooks directories, config files inside the
    /// root), relative to the root.
    pub extra: Vec<WorkspacePath>,
    /// True when more than [`MAX_GIT_DIRS`] git directories were found (the
    /// rest are not listed).
    pub overflow: bool,
    /// What of the surface lies outside the root (absolute, resolved):
    /// the git directory and common directory a gitfile or a linked `.git`
    /// names, every `.git` git would find above a root that has none of
    /// its own (missing ones too: one made there is found), every config
    /// file git reads or would read, `core.hooksPath` directories, and the
    /// programs config names by path (`core.fsmonitor`, `core.pager`,
    /// `credential.helper`, filters, …). Nothing of these may be within a
    /// command's reach: the sandbox refuses a writable root that holds one
    /// or lies in one ([`Surface::reached_by`]).
    pub outside: Vec<PathBuf>,
    /// Config values naming a place cubby cannot resolve (`%(prefix)/…`, a
    /// `~user/` of no known user): the sandbox refuses every writable root
    /// while there is one (it cannot tell whether a root holds it).
    pub unresolved: Vec<String>,
}

impl Surface {
    /// Records `place` (outside the root) once.
    fn add_outside(&mut self, place: PathBuf) {
        if !self.outside.contains(&place) {
            self.outside.push(place);
        }
    }

    /// Every path to protect: each git directory's [`SURFACE_NAMES`], then
    /// [`Surface::extra`].
    pub fn paths(&self) -> Vec<WorkspacePath> {
        let mut out = Vec::new();
        for dir in &self.git_dirs {
            for name in SURFACE_NAMES {
                out.push(dir.join_name(std::ffi::OsStr::new(name)));
            }
        }
        for p in &self.extra {
            if !out.contains(p) {
                out.push(p.clone());
            }
        }
        out
    }

    /// The piece of [`Surface::outside`] that commands writing beneath
    /// `dir` (a canonical writable root) could change: one lying within
    /// `dir`, or one `dir` lies in. Nothing of a git directory is spared: a
    /// link a command plants in its `logs`, `objects` or `refs` is followed
    /// by the host's git when it writes there (red-team pass 16).
    pub fn reached_by(&self, dir: &Path) -> Option<&Path> {
        self.outside
            .iter()
            .find(|place| place.starts_with(dir) || dir.starts_with(place))
            .map(PathBuf::as_path)
    }
}

/// How long one reading of the surface serves the later steps of the same
/// command start (the policy, the sandbox's open, its first command): a
/// step that comes later than this reads the files again.
pub const SHARE_WINDOW: Duration = Duration::from_secs(1);

/// Git's executable surface of one workspace as read at one moment, to be
/// shared by the steps of one command start (see [`SHARE_WINDOW`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SurfaceRead {
    root: PathBuf,
    surface: Surface,
    at: Instant,
}

impl SurfaceRead {
    /// Reads the surface of the workspace at `root` (a canonical path) now,
    /// git's own config found through `host` (see [`surface`]).
    pub fn now(root: &Path, host: &HostEnv) -> SurfaceRead {
        SurfaceRead {
            root: root.to_path_buf(),
            surface: surface(root, host),
            at: Instant::now(),
        }
    }

    /// The surface read.
    pub fn surface(&self) -> &Surface {
        &self.surface
    }

    /// The workspace it was read for.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The surface read, owned.
    pub fn into_surface(self) -> Surface {
        self.surface
    }

    /// The surface, when it was read for `root` less than [`SHARE_WINDOW`]
    /// ago.
    pub fn fresh_for(&self, root: &Path) -> Option<&Surface> {
        self.fresh_at(root, Instant::now())
    }

    fn fresh_at(&self, root: &Path, now: Instant) -> Option<&Surface> {
        (self.root == root && now.saturating_duration_since(self.at) < SHARE_WINDOW)
            .then_some(&self.surface)
    }
}

/// Places outside any workspace whose programs and config the host runs
/// whatever the repository: each directory on `PATH` (resolved; a program
/// planted there runs in place of the host's), and the `etc/gitconfig`
/// beside each `git` found on it (a git built with its own prefix reads
/// its system config there, not in `/etc`).
pub fn host_program_places(host: &HostEnv) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let Some(path) = host.var_os("PATH") else {
        return out;
    };
    let mut add = |p: PathBuf| {
        if !out.contains(&p) {
            out.push(p);
        }
    };
    for dir in std::env::split_paths(path) {
        if !dir.is_absolute() {
            continue;
        }
        for place in names_on_the_way(&dir) {
            add(place);
        }
        let git = dir.join("git");
        if git.is_file() {
            // `git` itself (a link into another directory, as package
            // managers make) and the system config of the prefix it
            // lives in, as named and where it leads.
            let ways = names_on_the_way(&git);
            for place in &ways {
                if let Some(prefix) = place.parent().and_then(Path::parent) {
                    for config in names_on_the_way(&prefix.join("etc/gitconfig")) {
                        add(config);
                    }
                }
            }
            for place in ways {
                add(place);
            }
        }
    }
    out
}

/// Git's executable surface of the workspace at `root` (a canonical path),
/// as the host's git would find it now; `host` is the environment git
/// would run in (`HOME`, `XDG_CONFIG_HOME`, `GIT_CONFIG_SYSTEM`,
/// `GIT_CONFIG_GLOBAL` locate its config files, besides their default
/// places, which are always read).
pub fn surface(root: &Path, host: &HostEnv) -> Surface {
    let mut s = Surface::default();
    let (git_dir, top) = locate(root);
    let common = git_dir
        .as_deref()
        .map(|g| common_dir(g).unwrap_or_else(|| g.to_path_buf()));
    let add_dir = |s: &mut Surface, dir: &Path| match inside(root, dir) {
        Some(rel) if !s.git_dirs.contains(&rel) => {
            if s.git_dirs.len() >= MAX_GIT_DIRS {
                s.overflow = true;
            } else {
                s.git_dirs.push(rel);
            }
        }
        Some(_) => {}
        None => s.add_outside(dir.to_path_buf()),
    };
    if let Some(g) = &git_dir {
        add_dir(&mut s, g);
    }
    // Git run in the root goes on to the first `.git` above it when the
    // root has none it takes — and commands can make the root's own one
    // invalid (a `HEAD` of garbage), so whatever the root holds now, each
    // place on the way up (to the repository it lies in, or `/`) is one a
    // `.git` made later would be found at (red-team passes 16 and 17).
    for dir in root.ancestors().skip(1) {
        s.add_outside(dir.join(GIT_DIR_NAME));
        if dir == top && top != root {
            break;
        }
    }
    if let Some(c) = &common {
        add_dir(&mut s, c);
        // Submodules' and linked worktrees' git directories.
        if inside(root, c).is_some() {
            let mut found = Vec::new();
            modules(&c.join("modules"), 0, &mut found);
            if let Ok(entries) = std::fs::read_dir(c.join("worktrees")) {
                for e in entries.flatten() {
                    if e.file_type().is_ok_and(|t| t.is_dir()) {
                        found.push(e.path());
                    }
                }
            }
            found.sort();
            for dir in found {
                add_dir(&mut s, &dir);
            }
        }
    }
    // Every config file git reads, and what they include.
    let configs = config_list(host, &top, git_dir.as_deref(), common.as_deref());
    let mut found = Found::default();
    for file in &configs {
        read_config(file, 0, host, &mut found);
    }
    for file in &found.files {
        match inside(root, file) {
            Some(rel) if !s.extra.contains(&rel) => s.extra.push(rel),
            Some(_) => {}
            None => s.add_outside(file.clone()),
        }
    }
    s.unresolved.append(&mut found.unresolved);
    for place in &found.places {
        if inside(root, place).is_none() && place.as_path() != root {
            s.add_outside(place.clone());
        }
    }
    for value in &found.programs {
        // The program's first word; a bare name is looked up on `PATH`,
        // whose directories the sandbox checks on their own.
        let Some(first) = path_words(value).into_iter().next() else {
            continue;
        };
        match expand_word(&first, host) {
            Some(p) => {
                let p = canonical(&p);
                match inside(root, &p) {
                    Some(rel) if !s.extra.contains(&rel) => s.extra.push(rel),
                    Some(_) => {}
                    None => s.add_outside(p),
                }
            }
            None => s.unresolved.push(value.clone()),
        }
    }
    for value in &found.hooks_paths {
        let dir = match expand_home(value, host) {
            Some(p) if p.is_absolute() => p,
            Some(p) => top.join(p),
            None => {
                s.unresolved.push(value.clone());
                continue;
            }
        };
        for place in names_on_the_way(&dir) {
            if inside(root, &place).is_none() {
                s.add_outside(place);
            }
        }
        let dir = canonical(&dir);
        if let Some(rel) = inside(root, &dir) {
            if !s.extra.contains(&rel) {
                s.extra.push(rel.clone());
            }
            // husky ≥ 9 sets `core.hooksPath = .husky/_`, whose stubs run
            // the hooks in `.husky/` itself.
            if rel.file_name().is_some_and(|n| n == "_") {
                let parent = rel.parent();
                if !parent.is_root() && !s.extra.contains(&parent) {
                    s.extra.push(parent);
                }
            }
        }
    }
    s
}

/// The git directory of the worktree `root` is in (the root's own `.git`,
/// or one above it), and that worktree's top. A `.git` that is a symbolic
/// link is followed, as git follows it (to a directory, or a gitfile).
fn locate(root: &Path) -> (Option<PathBuf>, PathBuf) {
    /// What `candidate` (a `.git` in `dir`) gives git: `None` when git
    /// looks further up, `Some(None)` for a `.git` that names nothing.
    fn look(candidate: &Path, dir: &Path) -> Option<Option<PathBuf>> {
        let m = std::fs::symlink_metadata(candidate).ok()?;
        if m.is_dir() {
            return Some(Some(candidate.to_path_buf()));
        }
        if m.is_file() {
            return Some(read_gitfile(candidate, dir));
        }
        if m.file_type().is_symlink() {
            return match std::fs::metadata(candidate) {
                Ok(t) if t.is_dir() => Some(Some(canonical(candidate))),
                Ok(t) if t.is_file() => Some(read_gitfile(candidate, dir)),
                _ => None,
            };
        }
        Some(None)
    }
    match look(&root.join(GIT_DIR_NAME), root) {
        Some(found) => (found, root.to_path_buf()),
        // No `.git` here: the root may lie inside a repository above it.
        None => root
            .ancestors()
            .skip(1)
            .find_map(|dir| look(&dir.join(GIT_DIR_NAME), dir).map(|g| (g, dir.to_path_buf())))
            .unwrap_or_else(|| (None, root.to_path_buf())),
    }
}

/// The config files git reads first (the system's, the user's, the
/// repository's and the worktree's), before what they include.
fn config_list(
    host: &HostEnv,
    top: &Path,
    git_dir: Option<&Path>,
    common: Option<&Path>,
) -> Vec<PathBuf> {
    // The union of where git reads them by default and where cubby's
    // environment moves them: the host's git may run in an environment of
    // its own (an MCP client starts cubby with less of the user's).
    let mut configs: Vec<PathBuf> = vec![PathBuf::from("/etc/gitconfig")];
    if let Some(system) = host.var_os("GIT_CONFIG_SYSTEM") {
        configs.push(PathBuf::from(system));
    }
    if let Some(global) = host.var_os("GIT_CONFIG_GLOBAL") {
        configs.push(PathBuf::from(global));
    }
    if let Some(x) = host.var_os("XDG_CONFIG_HOME").filter(|x| !x.is_empty()) {
        configs.push(PathBuf::from(x).join("git/config"));
    }
    if let Some(h) = home(host) {
        configs.push(h.join(".config/git/config"));
        configs.push(h.join(".gitconfig"));
    }
    // A relative `XDG_CONFIG_HOME` or `GIT_CONFIG_*` is taken by git from
    // where it runs, the worktree's top (red-team pass 17, 6): within the
    // workspace, protected as its own config is.
    for config in &mut configs {
        if config.is_relative() {
            *config = top.join(&*config);
        }
    }
    if let Some(c) = common {
        configs.push(c.join("config"));
    }
    if let Some(g) = git_dir {
        configs.push(g.join("config.worktree"));
    }
    configs
}

/// Credentials the git configs of the workspace at `root` (a canonical
/// path) hold, as git would read them now (the files of [`surface`], with
/// what they include): the values of `http.<url>.extraheader` (the token
/// of an `Authorization` header, and its password once decoded when it is
/// `basic`), and the passwords in URLs (`https://user:token@host/`, in
/// remotes, submodules and `url.<base>.insteadOf` sections alike). Each as
/// (name for the redaction marker, value): cubby registers them as
/// secrets, so that no output shows them (`actions/checkout` leaves the
/// job's token in `.git/config`).
pub fn config_credentials(root: &Path, host: &HostEnv) -> Vec<(&'static str, String)> {
    let (git_dir, top) = locate(root);
    let common = git_dir
        .as_deref()
        .map(|g| common_dir(g).unwrap_or_else(|| g.to_path_buf()));
    let mut found = Found::default();
    for file in config_list(host, &top, git_dir.as_deref(), common.as_deref()) {
        read_config(&file, 0, host, &mut found);
    }
    found.credentials
}

/// The shortest user name of a URL that is taken for a token when it has
/// no password (`https://ghp_…@github.com/`): shorter ones are plain names
/// (`git@`, `alice@`).
const MIN_TOKEN_USER: usize = 20;
/// The shortest value registered as a credential (shorter ones would hide
/// ordinary text, and guard nothing).
const MIN_CREDENTIAL: usize = 6;

/// The credentials in one config file's text (see [`config_credentials`]).
fn text_credentials(text: &str, out: &mut Vec<(&'static str, String)>) {
    let mut push = |name: &'static str, value: &str| {
        let value = value.trim();
        if value.len() >= MIN_CREDENTIAL && !out.iter().any(|(_, v)| v == value) {
            out.push((name, value.to_string()));
        }
    };
    // URL userinfo anywhere: values and subsections.
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let after = &rest[at + 3..];
        let end = after
            .find(|c: char| c.is_whitespace() || matches!(c, '/' | '"' | '\'' | '#' | ';' | ']'))
            .unwrap_or(after.len());
        if let Some(userinfo) = after[..end].rsplit_once('@').map(|(u, _)| u) {
            match userinfo.split_once(':') {
                Some((_, password)) => push("GIT_URL_PASSWORD", password),
                None if userinfo.len() >= MIN_TOKEN_USER => push("GIT_URL_TOKEN", userinfo),
                None => {}
            }
        }
        rest = &after[end.min(after.len())..];
    }
    for (section, key, value) in parse_config(text) {
        if section != "http" || key != "extraheader" {
            continue;
        }
        let Some((header, field)) = value.split_once(':') else {
            push("GIT_EXTRAHEADER", &value);
            continue;
        };
        let field = field.trim();
        if !header.trim().eq_ignore_ascii_case("authorization") {
            // Another header (`PRIVATE-TOKEN: …`): its whole value.
            push("GIT_EXTRAHEADER", field);
            continue;
        }
        let (scheme, token) = field.split_once(' ').unwrap_or(("", field));
        push("GIT_EXTRAHEADER", token);
        if scheme.eq_ignore_ascii_case("basic")
            && let Some(plain) = base64_decode(token.trim())
            && let Some((_, password)) = plain.split_once(':')
        {
            push("GIT_EXTRAHEADER", password);
        }
    }
}

/// Standard base64 (padding optional) as UTF-8 text, if it is that.
fn base64_decode(text: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.trim_end_matches('=').bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            bytes.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    String::from_utf8(bytes).ok()
}

/// What the config files said.
#[derive(Default)]
struct Found {
    /// Every config file read (existing or not), includes too.
    files: Vec<PathBuf>,
    /// Every `core.hooksPath` value.
    hooks_paths: Vec<String>,
    /// The values that name a program git runs ([`PROGRAM_KEYS`], `!`
    /// aliases).
    programs: Vec<String>,
    /// Include paths cubby could not resolve.
    unresolved: Vec<String>,
    /// Every place a value names (any key's, as [`path_words`] finds
    /// them) and every name on the way to each config file read
    /// ([`names_on_the_way`]).
    places: Vec<PathBuf>,
    /// The credentials they hold ([`config_credentials`]).
    credentials: Vec<(&'static str, String)>,
}

/// Config keys (section, key; the subsection dropped) whose value is a
/// program git runs, its first word a path or a name on `PATH`.
const PROGRAM_KEYS: [(&str, &str); 27] = [
    ("core", "fsmonitor"),
    ("core", "pager"),
    ("core", "editor"),
    ("core", "sshcommand"),
    ("core", "askpass"),
    ("core", "gitproxy"),
    ("sequence", "editor"),
    ("credential", "helper"),
    ("gpg", "program"),
    ("gpg", "defaultkeycommand"),
    ("diff", "external"),
    ("diff", "textconv"),
    ("diff", "command"),
    ("filter", "clean"),
    ("filter", "smudge"),
    ("filter", "process"),
    ("merge", "driver"),
    ("mergetool", "cmd"),
    ("mergetool", "path"),
    ("difftool", "cmd"),
    ("difftool", "path"),
    ("interactive", "difffilter"),
    ("sendemail", "sendmailcmd"),
    ("tar", "command"),
    ("submodule", "update"),
    ("uploadpack", "packobjectshook"),
    ("init", "templatedir"),
];

/// Reads one config file (and what it includes) into `found`. `file` as
/// written: a relative include is taken from its directory as written
/// (git's rule), not from where a link leads.
fn read_config(file: &Path, depth: usize, host: &HostEnv, found: &mut Found) {
    let written = file;
    // Where it leads is the last of the names on its way.
    let ways = names_on_the_way(written);
    let Some(file) = ways.last().cloned() else {
        return;
    };
    if found.files.contains(&file) {
        return;
    }
    found.files.push(file.clone());
    found.places.extend(ways);
    let Some(text) = read_small(&file) else {
        return;
    };
    text_credentials(&text, &mut found.credentials);
    for (section, key, value) in parse_config(&text) {
        for word in path_words(&value) {
            match expand_word(&word, host) {
                Some(p) => found.places.extend(names_on_the_way(&p)),
                None => found.unresolved.push(value.clone()),
            }
        }
        match (section.as_str(), key.as_str()) {
            ("core", "hookspath") => found.hooks_paths.push(value),
            ("include" | "includeif", "path") if depth < MAX_INCLUDE_DEPTH => {
                let Some(p) = expand_home(&value, host) else {
                    found.unresolved.push(value);
                    continue;
                };
                if p.is_absolute() {
                    read_config(&p, depth + 1, host, found);
                } else {
                    // As written, and where its link leads (either may be
                    // what a git reads: the first is git's rule).
                    let beside = |f: &Path| f.parent().unwrap_or(Path::new("/")).join(&p);
                    read_config(&beside(written), depth + 1, host, found);
                    read_config(&beside(&file), depth + 1, host, found);
                }
            }
            ("alias", _) if value.starts_with('!') => {
                found.programs.push(value[1..].to_string());
            }
            ("pager", _) => found.programs.push(value),
            (section, key) if PROGRAM_KEYS.contains(&(section, key)) => {
                found.programs.push(value);
            }
            _ => {}
        }
    }
}

/// `(section, key, value)` of every variable in git config text; section
/// and key lowercased, the subsection dropped. A variable without `=` is
/// `true`.
fn parse_config(text: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let mut section = String::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let mut rest = line.trim_start();
        if let Some(header) = rest.strip_prefix('[') {
            let Some(end) = header.find(']') else {
                continue;
            };
            let name = &header[..end];
            // `[section "sub"]` or `[section.sub]`: the section only.
            let name = name
                .split(|c: char| c.is_whitespace() || c == '"' || c == '.')
                .next()
                .unwrap_or("");
            section = name.to_ascii_lowercase();
            rest = header[end + 1..].trim_start();
            if rest.is_empty() || rest.starts_with(['#', ';']) {
                continue;
            }
        }
        if rest.is_empty() || rest.starts_with(['#', ';']) {
            continue;
        }
        let key_end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .unwrap_or(rest.len());
        let key = rest[..key_end].to_ascii_lowercase();
        let after = rest[key_end..].trim_start();
        let Some(raw) = after.strip_prefix('=') else {
            out.push((section.clone(), key, "true".to_string()));
            continue;
        };
        // The value: quotes, escapes, comments, continuation lines.
        let mut value = String::new();
        let mut quoted = false;
        let mut pending_space = false;
        let mut chars: Vec<char> = raw.trim_start().chars().collect();
        let mut i = 0;
        loop {
            if i >= chars.len() {
                break;
            }
            let c = chars[i];
            i += 1;
            match c {
                '"' => quoted = !quoted,
                '\\' if i >= chars.len() => {
                    // A continuation line.
                    match lines.next() {
                        Some(next) => {
                            chars = next.chars().collect();
                            i = 0;
                        }
                        None => break,
                    }
                }
                '\\' => {
                    let e = chars[i];
                    i += 1;
                    value.push(match e {
                        'n' => '\n',
                        't' => '\t',
                        'b' => '\u{8}',
                        other => other,
                    });
                }
                '#' | ';' if !quoted => break,
                c if c.is_whitespace() && !quoted => pending_space = !value.is_empty(),
                c => {
                    if pending_space {
                        value.push(' ');
                        pending_space = false;
                    }
                    value.push(c);
                }
            }
        }
        out.push((section.clone(), key, value));
    }
    out
}

/// The git directory a gitfile (`gitdir: <path>`) at `file` names, relative
/// paths taken from `base`.
fn read_gitfile(file: &Path, base: &Path) -> Option<PathBuf> {
    let text = read_small(file)?;
    let target = text.lines().next()?.strip_prefix("gitdir:")?.trim();
    if target.is_empty() {
        return None;
    }
    Some(canonical(&base.join(target)))
}

/// The common directory `git_dir/commondir` names, when there is one.
fn common_dir(git_dir: &Path) -> Option<PathBuf> {
    let text = read_small(&git_dir.join("commondir"))?;
    let target = text.trim_end_matches(['\n', '\r']);
    if target.is_empty() {
        return None;
    }
    Some(canonical(&git_dir.join(target)))
}

/// The git directories below `dir` (a `modules` directory): each directory
/// holding one of [`GIT_DIR_MARKS`], at any depth (names with slashes, the
/// `modules` of a git directory), git's own directories left out.
fn modules(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    if depth > MAX_MODULE_DEPTH || out.len() > MAX_GIT_DIRS {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let path = e.path();
        if GIT_DIR_MARKS
            .iter()
            .any(|mark| std::fs::symlink_metadata(path.join(mark)).is_ok())
        {
            out.push(path.clone());
        }
        // A name with slashes (`modules/a/b`), also beneath a git directory:
        // a mark planted in `a` must not hide `a/b` (nor do submodules `a`
        // and `a/b` hide each other). Git's own directories are not names.
        if e.file_name()
            .to_str()
            .is_none_or(|n| !GIT_OWN_DIRS.contains(&n))
        {
            modules(&path, depth + 1, out);
        }
    }
}

/// `path` relative to `root` when it lies beneath it (not the root itself).
fn inside(root: &Path, path: &Path) -> Option<WorkspacePath> {
    let rest = path.strip_prefix(root).ok()?;
    let rel = WorkspacePath::parse(rest.to_str()?).ok()?;
    (!rel.is_root()).then_some(rel)
}

/// `path` with `.` and `..` taken off by name, as written.
pub(crate) fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The names of `path`'s components, `..` kept as a name (the root and
/// `.` left out).
fn names_of(path: &Path) -> std::collections::VecDeque<std::ffi::OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect()
}

/// `path` with its symbolic links resolved as far as it exists, the rest
/// joined lexically (`..` taken off). Resolved by the kernel (an `O_PATH`
/// open, then its `/proc/self/fd` link): a few system calls, where
/// `realpath` reads a link per component.
pub(crate) fn canonical(path: &Path) -> PathBuf {
    let lexical = lexical(path);
    // The longest existing prefix, resolved, and the rest joined.
    let mut existing = lexical.clone();
    let mut tail = Vec::new();
    loop {
        if let Some(mut p) = resolved(&existing) {
            for t in tail.iter().rev() {
                p.push(t);
            }
            return p;
        }
        match existing.file_name() {
            Some(n) => tail.push(n.to_os_string()),
            None => return lexical,
        }
        existing.pop();
    }
}

/// What `path` resolves to, when it exists.
fn resolved(path: &Path) -> Option<PathBuf> {
    use std::os::fd::AsRawFd;
    let fd = rustix::fs::open(
        path,
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ok()?;
    let link =
        rustix::fs::readlink(format!("/proc/self/fd/{}", fd.as_raw_fd()), Vec::new()).ok()?;
    let p = PathBuf::from(
        <std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(link.into_bytes()),
    );
    p.is_absolute().then_some(p)
}

fn read_small(path: &Path) -> Option<String> {
    use std::io::Read;
    let file = std::fs::File::open(path).ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut text = String::new();
    file.take(MAX_FILE_BYTES).read_to_string(&mut text).ok()?;
    Some(text)
}

fn home(host: &HostEnv) -> Option<PathBuf> {
    host.var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

/// `~/x` with the home directory, `~user/x` with that user's (from
/// `/etc/passwd`); `None` for what cannot be resolved: an unknown user,
/// git's `%(prefix)/`, an empty value.
fn expand_home(value: &str, host: &HostEnv) -> Option<PathBuf> {
    if value.is_empty() || value.starts_with("%(") {
        return None;
    }
    if let Some(rest) = value.strip_prefix("~/") {
        return home(host).map(|h| h.join(rest));
    }
    if let Some(named) = value.strip_prefix('~') {
        let (user, rest) = named.split_once('/').unwrap_or((named, ""));
        return user_home(user).map(|h| h.join(rest));
    }
    Some(PathBuf::from(value))
}

/// The words of a config value that name a place: each word (split at
/// blanks, quotes, `=`, `;`, `|`, `&`, parentheses, commas and backquotes;
/// a leading `!` and `file://` taken off) that starts with `/`, `~` or
/// `$`. A value that runs a program through a shell (`!gh auth
/// git-credential`, `LESS=FRX /x/less`, `env A=1 /x/ssh`, `"/x/ed" -w`) is
/// read as the shell would find its paths, and a path anywhere in any
/// value counts: what cubby does not know to be a program may be one
/// (red-team pass 17).
fn path_words(value: &str) -> Vec<String> {
    value
        .split(|c: char| c.is_whitespace() || "'\";|&()=,`".contains(c))
        .map(|w| w.trim_start_matches('!'))
        .map(|w| w.strip_prefix("file://").unwrap_or(w))
        .filter(|w| {
            (w.starts_with('/') && !w.starts_with("//"))
                || w.starts_with('~')
                || (w.starts_with('$') && w.contains('/'))
        })
        .map(str::to_string)
        .collect()
}

/// A word of [`path_words`] as a path: `~`, `~user` and `$HOME` (or
/// `${HOME}`) expanded; `None` for another variable, or what cannot be.
fn expand_word(word: &str, host: &HostEnv) -> Option<PathBuf> {
    for var in ["$HOME", "${HOME}"] {
        if let Some(rest) = word.strip_prefix(var) {
            if rest.is_empty() || rest.starts_with('/') {
                return home(host).map(|h| h.join(rest.trim_start_matches('/')));
            }
        }
    }
    if word.starts_with('$') {
        return None;
    }
    if word == "~" {
        return home(host);
    }
    expand_home(word, host).filter(|p| p.is_absolute())
}

/// Every name a writable root could change `path` through: `path` as
/// written (`..` taken off), each symbolic link met on the way to it (the
/// link's own place) and where it leads at last. A check of the last
/// alone let a command swap a link it could write (red-team pass 17).
pub(crate) fn names_on_the_way(path: &Path) -> Vec<PathBuf> {
    /// Links followed at most (the kernel's own limit).
    const MAX_HOPS: usize = 40;
    let lexical = lexical(path);
    // No link on the way (the common case, and one look): the name is
    // where it leads.
    if canonical(&lexical) == lexical {
        return vec![lexical];
    }
    let mut out = vec![lexical.clone()];
    let mut rest = names_of(&lexical);
    let mut at = PathBuf::from("/");
    let mut hops = 0;
    while let Some(name) = rest.pop_front() {
        if name == ".." {
            at.pop();
            continue;
        }
        if name == "." {
            continue;
        }
        let next = at.join(&name);
        match std::fs::read_link(&next) {
            Ok(target) if hops < MAX_HOPS => {
                hops += 1;
                if !out.contains(&next) {
                    out.push(next);
                }
                if target.is_absolute() {
                    at = PathBuf::from("/");
                }
                let mut ahead = names_of(&target);
                ahead.extend(rest);
                rest = ahead;
            }
            _ => at = next,
        }
    }
    if !out.contains(&at) {
        out.push(at);
    }
    out
}

/// The home directory of `user` in `/etc/passwd`.
fn user_home(user: &str) -> Option<PathBuf> {
    if user.is_empty() {
        return None;
    }
    let passwd = read_small(Path::new("/etc/passwd"))?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.len() >= 6 && fields[0] == user && fields[5].starts_with('/'))
            .then(|| PathBuf::from(fields[5]))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_credentials_are_found_in_headers_and_urls() {
        // `x-access-token:ghs_HEADERTOKEN` in base64.
        let text = "[http \"https://github.com/\"]\n\textraheader = AUTHORIZATION: basic \
                    eC1hY2Nlc3MtdG9rZW46Z2hzX0hFQURFUlRPS0VO\n\
                    [remote \"origin\"]\n\turl = https://x-access-token:ghs_URLTOKEN@github.com/o/r.git\n\
                    [url \"https://ghp_aaaaaaaaaaaaaaaaaaaaaaaa@example.com/\"]\n\tinsteadOf = https://example.com/\n\
                    [remote \"plain\"]\n\turl = ssh://git@github.com/o/r.git\n\
                    [http]\n\textraHeader = PRIVATE-TOKEN: glpat-PRIVATE\n";
        let mut found = Vec::new();
        text_credentials(text, &mut found);
        let values: Vec<&str> = found.iter().map(|(_, v)| v.as_str()).collect();
        assert_eq!(
            values,
            [
                "ghs_URLTOKEN",
                "ghp_aaaaaaaaaaaaaaaaaaaaaaaa",
                "eC1hY2Nlc3MtdG9rZW46Z2hzX0hFQURFUlRPS0VO",
                "ghs_HEADERTOKEN",
                "glpat-PRIVATE",
            ]
        );
    }

    /// A temporary directory and its canonical path.
    fn base_dir() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        (dir, base)
    }

    /// Asserts that each of `places` is in `s`'s outside pieces.
    fn assert_outside(s: &Surface, places: &[PathBuf]) {
        for place in places {
            assert!(
                s.outside.contains(place),
                "{} in {:?}",
                place.display(),
                s.outside
            );
        }
    }

    fn p(s: &str) -> WorkspacePath {
        WorkspacePath::parse(s).unwrap()
    }

    #[test]
    fn config_values_are_parsed_as_git_does() {
        let text = "[core]\n\thooksPath = \".hu sky\" ; comment\n[Core \"x\"]\nHOOKSPATH=a\\\nb\n\
                    [include]\npath = other.inc # c\n[includeIf \"gitdir:/x/\"]\n  path = ~/y\nbare\n";
        let got = parse_config(text);
        assert_eq!(
            got[0],
            ("core".into(), "hookspath".into(), ".hu sky".into())
        );
        assert_eq!(got[1], ("core".into(), "hookspath".into(), "ab".into()));
        assert_eq!(
            got[2],
            ("include".into(), "path".into(), "other.inc".into())
        );
        assert_eq!(got[3], ("includeif".into(), "path".into(), "~/y".into()));
        assert_eq!(got[4], ("includeif".into(), "bare".into(), "true".into()));
    }

    #[test]
    fn hooks_path_and_includes_inside_the_root_are_found() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(root.join(".git/modules/a/b/modules/c")).unwrap();
        std::fs::write(root.join(".git/modules/a/b/HEAD"), "x").unwrap();
        std::fs::write(root.join(".git/modules/a/b/modules/c/HEAD"), "x").unwrap();
        std::fs::create_dir_all(root.join(".git/worktrees/w")).unwrap();
        std::fs::write(
            root.join(".git/config"),
            "[core]\nhooksPath = .husky/_\n[include]\npath = ../shared.gitconfig\n",
        )
        .unwrap();
        std::fs::write(
            root.join("shared.gitconfig"),
            "[core]\nhooksPath = tools/hooks\n",
        )
        .unwrap();
        let s = surface(&root, &HostEnv::default());
        assert_eq!(
            s.git_dirs,
            vec![
                p(".git"),
                p(".git/modules/a/b"),
                p(".git/modules/a/b/modules/c"),
                p(".git/worktrees/w")
            ]
        );
        for want in ["shared.gitconfig", ".husky/_", ".husky", "tools/hooks"] {
            assert!(s.extra.contains(&p(want)), "{want}: {:?}", s.extra);
        }
        assert!(
            s.paths()
                .contains(&p(".git/modules/a/b/modules/c/commondir"))
        );
    }

    /// Red-team pass 3 (review): a mark planted in `a` made the scan take
    /// `a` for the git directory and stop there, leaving submodule `a/b`'s
    /// config writable.
    #[test]
    fn a_planted_mark_does_not_hide_a_nested_submodule() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(root.join(".git/modules/a/b/objects/pack")).unwrap();
        std::fs::write(root.join(".git/modules/a/b/HEAD"), "x").unwrap();
        std::fs::write(root.join(".git/modules/a/b/config"), "[core]\n").unwrap();
        std::fs::write(root.join(".git/modules/a/config"), "planted\n").unwrap();
        let s = surface(&root, &HostEnv::default());
        assert!(
            s.git_dirs.contains(&p(".git/modules/a/b")),
            "{:?}",
            s.git_dirs
        );
        assert!(
            s.git_dirs.contains(&p(".git/modules/a")),
            "{:?}",
            s.git_dirs
        );
        assert!(!s.git_dirs.iter().any(|d| d.display().contains("objects")));
    }

    #[test]
    fn a_reading_is_shared_only_within_its_window_and_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(root.join(".git")).unwrap();
        let read = SurfaceRead::now(&root, &HostEnv::default());
        assert_eq!(read.fresh_for(&root), Some(read.surface()));
        assert_eq!(read.fresh_for(&root.join("sub")), None);
        let later = read.at + SHARE_WINDOW;
        assert_eq!(read.fresh_at(&root, later), None);
        assert!(
            read.fresh_at(&root, later - Duration::from_millis(1))
                .is_some()
        );
    }

    #[test]
    fn a_linked_worktrees_git_directories_are_outside_and_reached_by_roots_holding_them() {
        let (_dir, base) = base_dir();
        let (root, main) = (base.join("wt"), base.join("main/.git"));
        std::fs::create_dir_all(main.join("worktrees/wt")).unwrap();
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(main.join("worktrees/wt/commondir"), "../..\n").unwrap();
        std::fs::write(
            root.join(".git"),
            format!("gitdir: {}/worktrees/wt\n", main.display()),
        )
        .unwrap();
        std::fs::write(
            main.join("config"),
            "[core]\n\tfsmonitor = /opt/tools/fsmon --flag\n\tpager = less\n\
             [alias]\n\tx = !/opt/alias.sh a\n",
        )
        .unwrap();
        let host = HostEnv::from_vars([("HOME", base.join("home"))]);
        let s = surface(&root, &host);
        assert!(s.git_dirs.is_empty(), "{:?}", s.git_dirs);
        assert_outside(
            &s,
            &[
                main.clone(),
                main.join("worktrees/wt"),
                base.join("home/.gitconfig"),
                base.join("home/.config/git/config"),
                PathBuf::from("/etc/gitconfig"),
                PathBuf::from("/opt/tools/fsmon"),
                PathBuf::from("/opt/alias.sh"),
            ],
        );
        assert!(s.unresolved.is_empty(), "{:?}", s.unresolved);
        // Nothing of a git directory is spared, its logs and objects no
        // more than its hooks (red-team pass 16: links planted there).
        for reaching in [
            base.clone(),
            main.clone(),
            main.join("hooks"),
            main.join("worktrees"),
            main.join("logs"),
            main.join("objects"),
            PathBuf::from("/opt/tools"),
        ] {
            assert!(s.reached_by(&reaching).is_some(), "{}", reaching.display());
        }
        assert_eq!(s.reached_by(&base.join("other")), None);
    }

    #[test]
    fn a_root_without_a_repository_names_each_git_above_it() {
        let (_dir, base) = base_dir();
        let root = base.join("proj/ws");
        std::fs::create_dir_all(&root).unwrap();
        let host = HostEnv::from_vars([("HOME", base.join("home"))]);
        let s = surface(&root, &host);
        for above in [
            base.join("proj/.git"),
            base.join(".git"),
            PathBuf::from("/.git"),
        ] {
            assert!(s.outside.contains(&above), "{}", above.display());
        }
        assert!(s.reached_by(&base.join("proj")).is_some());
        // A repository of its own does not change it: commands can make
        // it one git does not take (red-team pass 17).
        std::fs::create_dir(root.join(".git")).unwrap();
        std::fs::write(root.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        let again = surface(&root, &host);
        assert!(again.outside.contains(&base.join("proj/.git")));
    }

    #[test]
    fn a_linked_git_directory_above_the_root_is_followed() {
        let (_dir, base) = base_dir();
        let store = base.join("store/ws.git");
        std::fs::create_dir_all(&store).unwrap();
        std::fs::write(store.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::create_dir_all(base.join("ws/sub")).unwrap();
        std::os::unix::fs::symlink(&store, base.join("ws/.git")).unwrap();
        let host = HostEnv::from_vars([("HOME", base.join("home"))]);
        let s = surface(&base.join("ws/sub"), &host);
        assert!(s.outside.contains(&store), "{:?}", s.outside);
        assert!(s.reached_by(&base.join("store")).is_some());
    }

    #[test]
    fn paths_in_values_and_links_on_their_way_are_outside() {
        let (_dir, base) = base_dir();
        let root = base.join("ws");
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::create_dir_all(base.join("real")).unwrap();
        std::os::unix::fs::symlink(base.join("real"), base.join("tools")).unwrap();
        let t = base.join("tools");
        std::fs::write(
            root.join(".git/config"),
            format!(
                "[credential \"https://github.com\"]\n\thelper = !{t}/gh auth git-credential\n\
                 [core]\n\tpager = LESS=FRX {t}/less\n\teditor = \"{t}/ed\" -w\n\
                 \tsshCommand = env A=1 $HOME/bin/ssh\n[pager]\n\tlog = {t}/delta\n\
                 [init]\n\ttemplateDir = {t}/tmpl\n[alias]\n\tl = !f() {{ git log $1; }}; f\n",
                t = t.display()
            ),
        )
        .unwrap();
        let host = HostEnv::from_vars([("HOME", base.join("home"))]);
        let s = surface(&root, &host);
        assert_outside(
            &s,
            &[
                t.join("gh"),
                t.join("less"),
                t.join("ed"),
                t.join("delta"),
                t.join("tmpl"),
                base.join("home/bin/ssh"),
                // The link itself and where it leads.
                t.clone(),
                base.join("real/gh"),
            ],
        );
        assert!(s.unresolved.is_empty(), "{:?}", s.unresolved);
        assert!(s.reached_by(&base.join("real")).is_some());
        assert!(path_words("!f() { git log $1; }; f").is_empty());
    }

    #[test]
    fn a_relative_xdg_config_home_is_taken_from_the_worktrees_top() {
        let (_dir, root) = base_dir();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        let host = HostEnv::from_vars([
            ("HOME", root.join("home")),
            ("XDG_CONFIG_HOME", PathBuf::from("xdgrel")),
        ]);
        let s = surface(&root, &host);
        assert!(s.extra.contains(&p("xdgrel/git/config")), "{:?}", s.extra);
    }

    #[test]
    fn places_cubby_cannot_resolve_are_named() {
        let (_dir, base) = base_dir();
        let root = base.join("ws");
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(root.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(
            root.join(".git/config"),
            "[core]\n\thooksPath = ~no-such-user-here/hooks\n[include]\n\tpath = %(prefix)/x\n",
        )
        .unwrap();
        let host = HostEnv::from_vars([("HOME", base.join("home"))]);
        let s = surface(&root, &host);
        assert!(
            s.unresolved
                .iter()
                .any(|v| v.starts_with("~no-such-user-here"))
                && s.unresolved.iter().any(|v| v.starts_with("%(prefix)")),
            "{:?}",
            s.unresolved
        );
        // `~root/` is root's home, from /etc/passwd.
        assert_eq!(
            expand_home("~root/hooks", &host),
            Some(PathBuf::from("/root/hooks"))
        );
    }

    #[test]
    fn a_gitfile_inside_the_root_names_the_git_dir() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(root.join("store/wt")).unwrap();
        std::fs::write(root.join("store/wt/commondir"), "..\n").unwrap();
        std::fs::write(root.join(".git"), "gitdir: store/wt\n").unwrap();
        let s = surface(&root, &HostEnv::default());
        assert_eq!(s.git_dirs, vec![p("store/wt"), p("store")]);
    }
}
