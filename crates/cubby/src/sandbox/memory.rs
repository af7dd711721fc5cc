//! The `virtual` provider's file system: a tree in memory.
//!
//! It has no symbolic links and no special files, so confinement is the
//! lexical confinement of [`WorkspacePath`]. Writes replace a file's content
//! under one lock, which makes them atomic by construction.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use super::{DirEntry, EntryKind, FileSystem, Metadata, OpenFile};
use crate::error::{Error, ErrorKind, Result};
use crate::path::WorkspacePath;

/// Mode bits given to new files.
const NEW_FILE_MODE: u32 = 0o644;
/// Mode bits given to new directories.
const NEW_DIR_MODE: u32 = 0o755;
/// Largest tree [`MemoryFs::from_dir`] copies into memory.
pub const MAX_SEED_BYTES: u64 = 512 * 1024 * 1024;

#[derive(Clone, Debug)]
enum Node {
    File {
        data: Arc<Vec<u8>>,
        mode: u32,
        mtime_ns: i128,
        id: u64,
    },
    Dir {
        children: BTreeMap<OsString, ()>,
        mtime_ns: i128,
        id: u64,
    },
}

/// An in-memory file tree.
#[derive(Debug)]
pub struct MemoryFs {
    nodes: RwLock<HashMap<PathBuf, Node>>,
    clock: AtomicU64,
}

impl Default for MemoryFs {
    fn default() -> MemoryFs {
        MemoryFs::new()
    }
}

fn poisoned() -> Error {
    Error::internal("the virtual file system's lock was poisoned by an earlier panic")
}

impl MemoryFs {
    /// An empty tree.
    pub fn new() -> MemoryFs {
        let mut nodes = HashMap::new();
        nodes.insert(
            PathBuf::new(),
            Node::Dir {
                children: BTreeMap::new(),
                mtime_ns: 0,
                id: 0,
            },
        );
        MemoryFs {
            nodes: RwLock::new(nodes),
            clock: AtomicU64::new(1),
        }
    }

    /// A tree seeded with a copy of the host directory `dir` (regular files
    /// and directories; links and special files are skipped, `.git` too).
    ///
    /// # Errors
    ///
    /// `not_found` when `dir` cannot be read; `too_large` past
    /// [`MAX_SEED_BYTES`].
    pub fn from_dir(dir: &Path) -> Result<MemoryFs> {
        let fs = MemoryFs::new();
        let local = super::LocalFs::open(dir)?;
        let mut total = 0u64;
        let mut stack = vec![WorkspacePath::root()];
        while let Some(d) = stack.pop() {
            for entry in local.read_dir(&d)? {
                if entry.name == ".git" {
                    continue;
                }
                let child = d.join_name(&entry.name);
                match entry.kind {
                    EntryKind::Dir => {
                        fs.create_dir_all(&child)?;
                        stack.push(child);
                    }
                    EntryKind::File => {
                        let bytes = local.read_to_vec(&child, MAX_SEED_BYTES - total)?;
                        total += bytes.len() as u64;
                        let mode = local.metadata(&child)?.mode;
                        fs.insert(&child, bytes, mode)?;
                    }
                    EntryKind::Symlink | EntryKind::Special => {}
                }
            }
        }
        Ok(fs)
    }

    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed)
    }

    /// Creates `path` and its missing parents as directories.
    ///
    /// # Errors
    ///
    /// `invalid_input` when a component is a file.
    pub fn create_dir_all(&self, path: &WorkspacePath) -> Result<()> {
        let mut nodes = self.nodes.write().map_err(|_| poisoned())?;
        self.ensure_dirs(&mut nodes, path)
    }

    fn ensure_dirs(&self, nodes: &mut HashMap<PathBuf, Node>, path: &WorkspacePath) -> Result<()> {
        let mut current = PathBuf::new();
        for name in path.components() {
            let next = current.join(name);
            match nodes.get(&next) {
                Some(Node::Dir { .. }) => {}
                Some(Node::File { .. }) => {
                    return Err(Error::invalid_input(format!(
                        "cannot create `{path}`: `{}` is a file, not a directory",
                        next.display()
                    )));
                }
                None => {
                    let now = self.tick();
                    nodes.insert(
                        next.clone(),
                        Node::Dir {
                            children: BTreeMap::new(),
                            mtime_ns: now as i128,
                            id: now,
                        },
                    );
                    if let Some(Node::Dir { children, .. }) = nodes.get_mut(&current) {
                        children.insert(name.to_os_string(), ());
                    }
                }
            }
            current = next;
        }
        Ok(())
    }

    /// Writes a file with the given mode bits, creating parents.
    ///
    /// # Errors
    ///
    /// `is_directory` when `path` is a directory.
    pub fn insert(&self, path: &WorkspacePath, content: Vec<u8>, mode: u32) -> Result<()> {
        let Some(name) = path.file_name() else {
            return Err(Error::new(
                ErrorKind::IsDirectory,
                "the root is a directory",
            ));
        };
        let mut nodes = self.nodes.write().map_err(|_| poisoned())?;
        let parent = path.parent();
        self.ensure_dirs(&mut nodes, &parent)?;
        let key = path.as_path().to_path_buf();
        if let Some(Node::Dir { .. }) = nodes.get(&key) {
            return Err(Error::new(
                ErrorKind::IsDirectory,
                format!("`{path}` is a directory; pass a file path"),
            ));
        }
        let now = self.tick();
        let id = match nodes.get(&key) {
            Some(Node::File { id, .. }) => *id,
            _ => now,
        };
        nodes.insert(
            key,
            Node::File {
                data: Arc::new(content),
                mode,
                mtime_ns: now as i128,
                id,
            },
        );
        if let Some(Node::Dir { children, .. }) = nodes.get_mut(parent.as_path()) {
            children.insert(name.to_os_string(), ());
        }
        Ok(())
    }

    /// Removes a file or a whole directory tree.
    ///
    /// # Errors
    ///
    /// `not_found` when nothing is there.
    pub fn remove(&self, path: &WorkspacePath) -> Result<()> {
        let mut nodes = self.nodes.write().map_err(|_| poisoned())?;
        let key = path.as_path().to_path_buf();
        if nodes.remove(&key).is_none() {
            return Err(not_found(path));
        }
        nodes.retain(|p, _| !p.starts_with(&key) || p.as_os_str().is_empty());
        if let (Some(name), Some(Node::Dir { children, .. })) =
            (path.file_name(), nodes.get_mut(path.parent().as_path()))
        {
            children.remove(name);
        }
        Ok(())
    }
}

fn not_found(path: &WorkspacePath) -> Error {
    Error::new(
        ErrorKind::NotFound,
        format!("`{path}` does not exist; use list_files or glob to find the right path"),
    )
}

fn meta(node: &Node) -> Metadata {
    match node {
        Node::File {
            data,
            mode,
            mtime_ns,
            id,
        } => Metadata {
            kind: EntryKind::File,
            size: data.len() as u64,
            mode: *mode,
            mtime_ns: *mtime_ns,
            ctime_ns: *mtime_ns,
            ino: *id,
            nlink: 1,
        },
        Node::Dir { mtime_ns, id, .. } => Metadata {
            kind: EntryKind::Dir,
            size: 0,
            mode: NEW_DIR_MODE,
            mtime_ns: *mtime_ns,
            ctime_ns: *mtime_ns,
            ino: *id,
            nlink: 1,
        },
    }
}

impl MemoryFs {
    /// Looks a path up, reporting a file met on the way as `not_found`
    /// (as the kernel's `ENOTDIR` would).
    fn lookup<T>(&self, path: &WorkspacePath, f: impl FnOnce(&Node) -> Result<T>) -> Result<T> {
        let nodes = self.nodes.read().map_err(|_| poisoned())?;
        match nodes.get(path.as_path()) {
            Some(node) => f(node),
            None => Err(not_found(path)),
        }
    }
}

impl FileSystem for MemoryFs {
    fn create_dir_all(&self, path: &WorkspacePath) -> Result<()> {
        MemoryFs::create_dir_all(self, path)
    }

    fn remove_empty_dir(&self, path: &WorkspacePath) -> Result<bool> {
        let empty = matches!(
            self.nodes.read().map_err(|_| poisoned())?.get(path.as_path()),
            Some(Node::Dir { children, .. }) if children.is_empty()
        );
        if empty && !path.is_root() {
            self.remove(path)?;
            return Ok(true);
        }
        Ok(false)
    }

    fn metadata(&self, path: &WorkspacePath) -> Result<Metadata> {
        self.lookup(path, |n| Ok(meta(n)))
    }

    fn open(&self, path: &WorkspacePath) -> Result<OpenFile> {
        self.lookup(path, |n| match n {
            Node::File { data, .. } => Ok(OpenFile {
                reader: Box::new(Cursor::new(SharedBytes(data.clone()))),
                metadata: meta(n),
            }),
            Node::Dir { .. } => Err(Error::new(
                ErrorKind::IsDirectory,
                format!("`{path}` is a directory; use list_files to see what it holds"),
            )),
        })
    }

    fn read_dir(&self, path: &WorkspacePath) -> Result<Vec<DirEntry>> {
        let nodes = self.nodes.read().map_err(|_| poisoned())?;
        match nodes.get(path.as_path()) {
            Some(Node::Dir { children, .. }) => Ok(children
                .keys()
                .map(|name| {
                    let kind = match nodes.get(&path.as_path().join(name)) {
                        Some(Node::Dir { .. }) => EntryKind::Dir,
                        _ => EntryKind::File,
                    };
                    DirEntry {
                        name: name.clone(),
                        kind,
                    }
                })
                .collect()),
            Some(Node::File { .. }) => Err(Error::new(
                ErrorKind::InvalidInput,
                format!("`{path}` is a file, not a directory; use read_file to read it"),
            )),
            None => Err(not_found(path)),
        }
    }

    fn write_atomic(&self, path: &WorkspacePath, content: &[u8]) -> Result<()> {
        let mode = match self.metadata(path) {
            Ok(m) if m.kind == EntryKind::File => m.mode,
            Ok(_) => {
                return Err(Error::new(
                    ErrorKind::IsDirectory,
                    format!("`{path}` is a directory; pass a file path"),
                ));
            }
            Err(_) => NEW_FILE_MODE,
        };
        self.insert(path, content.to_vec(), mode)
    }
}

/// Shared bytes readable through a `Cursor` without copying.
struct SharedBytes(Arc<Vec<u8>>);

impl AsRef<[u8]> for SharedBytes {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> WorkspacePath {
        WorkspacePath::parse(s).unwrap()
    }

    #[test]
    fn insert_creates_parents_and_lists_sorted() {
        let fs = MemoryFs::new();
        fs.insert(&p("b/z.txt"), b"z".to_vec(), 0o644).unwrap();
        fs.insert(&p("b/a.txt"), b"a".to_vec(), 0o600).unwrap();
        fs.insert(&p("a"), b"".to_vec(), 0o644).unwrap();
        let root: Vec<_> = fs
            .read_dir(&p("."))
            .unwrap()
            .into_iter()
            .map(|e| (e.name, e.kind))
            .collect();
        assert_eq!(
            root,
            vec![("a".into(), EntryKind::File), ("b".into(), EntryKind::Dir)]
        );
        assert_eq!(fs.metadata(&p("b/a.txt")).unwrap().mode, 0o600);
        fs.write_atomic(&p("b/a.txt"), b"new").unwrap();
        assert_eq!(fs.metadata(&p("b/a.txt")).unwrap().mode, 0o600);
        assert_eq!(fs.read_to_vec(&p("b/a.txt"), 10).unwrap(), b"new");
    }

    #[test]
    fn remove_drops_the_subtree() {
        let fs = MemoryFs::new();
        fs.insert(&p("d/e/f"), b"x".to_vec(), 0o644).unwrap();
        fs.remove(&p("d")).unwrap();
        assert!(fs.read_dir(&p(".")).unwrap().is_empty());
        assert_eq!(
            fs.metadata(&p("d/e/f")).unwrap_err().kind(),
            ErrorKind::NotFound
        );
    }

    #[test]
    fn a_file_in_the_way_is_reported() {
        let fs = MemoryFs::new();
        fs.insert(&p("f"), b"x".to_vec(), 0o644).unwrap();
        assert_eq!(
            fs.insert(&p("f/g"), vec![], 0o644).unwrap_err().kind(),
            ErrorKind::InvalidInput
        );
    }
}
