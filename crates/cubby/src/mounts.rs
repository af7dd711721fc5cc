//! The host's mount table, read to find every name a directory is reached
//! by.
//!
//! A bind mount gives a directory a second name, and a name is how cubby's
//! checks compare places: a writable root `/mnt/alias` that is a bind of the
//! workspace's parent reached the workspace's `.git/hooks` although no
//! check saw `/mnt/alias` lie above it (red-team pass 17, 9), and a bind of
//! `--host-dir` inside the served root put every hosted workspace in reach
//! of `/mcp` (red-team pass 8, L2). [`MountTable::aliases`] gives a
//! directory's other names, and those of everything mounted beneath it, so
//! that the same name checks run on each.

use std::path::{Path, PathBuf};

/// Where the kernel lists this process's mounts.
const MOUNTINFO: &str = "/proc/self/mountinfo";

/// One line of `/proc/self/mountinfo`: which file system (its device), the
/// directory of it that is mounted, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Mount {
    dev: String,
    /// The mounted directory, as a path within its file system.
    root: PathBuf,
    /// Where it is mounted.
    point: PathBuf,
    /// An overlay's `upperdir` and `lowerdir` directories: what it shows
    /// under its own name (red-team pass 18, F3).
    layers: Vec<PathBuf>,
}

impl Mount {
    /// The names of `rest` (a path below the mount point) in an overlay's
    /// layers; none for another file system.
    fn overlay_names(&self, rest: &Path) -> impl Iterator<Item = PathBuf> + '_ {
        let rest = rest.to_path_buf();
        self.layers.iter().map(move |layer| within(layer, &rest))
    }
}

/// The mounts of this process's mount namespace, in the kernel's order (a
/// later mount at a point lies on top of an earlier one).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MountTable {
    mounts: Vec<Mount>,
}

impl MountTable {
    /// Reads this process's mount table.
    ///
    /// # Errors
    ///
    /// When `/proc/self/mountinfo` cannot be read (no `/proc`).
    pub fn read() -> std::io::Result<MountTable> {
        Ok(MountTable::parse(&std::fs::read_to_string(MOUNTINFO)?))
    }

    /// The table of a `mountinfo` text (see proc_pid_mountinfo(5)); a line
    /// that does not parse is left out.
    pub fn parse(text: &str) -> MountTable {
        let mounts = text
            .lines()
            .filter_map(|line| {
                let mut fields = line.split(' ');
                let _id = fields.next()?;
                let _parent = fields.next()?;
                let dev = fields.next()?;
                let root = unescape(fields.next()?);
                let point = unescape(fields.next()?);
                // After the optional fields and `-`: type, source, options.
                let mut rest = fields.skip_while(|f| *f != "-").skip(1);
                let layers = match (rest.next(), rest.nth(1)) {
                    (Some("overlay"), Some(options)) => overlay_layers(options),
                    _ => Vec::new(),
                };
                (root.is_absolute() && point.is_absolute()).then(|| Mount {
                    dev: dev.to_string(),
                    root,
                    point,
                    layers,
                })
            })
            .collect();
        MountTable { mounts }
    }

    /// Every name under which what lies at and beneath `path` (absolute,
    /// canonical) can be reached, `path` first: for the directory itself
    /// and for each mount beneath it, where else the same directory of the
    /// same file system is mounted, and where any part of it is. Checks
    /// that compare places by name run on each of these.
    pub fn aliases(&self, path: &Path) -> Vec<PathBuf> {
        let mut names = vec![path.to_path_buf()];
        let mut regions = Vec::new();
        // Every mount at the deepest point above `path`, not only the one
        // on top: the kernel's order is not always the stack's (a mount
        // moved onto a point is listed before one made there earlier; red-
        // team pass 18, F2), and a name too many only refuses more.
        for own in self.holding(path) {
            let rest = path.strip_prefix(&own.point).unwrap_or(Path::new(""));
            regions.push((own.dev.as_str(), within(&own.root, rest)));
            names.extend(own.overlay_names(rest));
        }
        for mount in &self.mounts {
            if mount.point.starts_with(path) && mount.point != path {
                regions.push((mount.dev.as_str(), mount.root.clone()));
                names.extend(mount.overlay_names(Path::new("")));
            }
        }
        for (dev, region) in &regions {
            for mount in self.mounts.iter().filter(|m| m.dev == *dev) {
                let name = if let Ok(rest) = region.strip_prefix(&mount.root) {
                    within(&mount.point, rest)
                } else if mount.root.starts_with(region) {
                    mount.point.clone()
                } else {
                    continue;
                };
                if !names.contains(&name) {
                    names.push(name);
                }
            }
        }
        names
    }

    /// The mounts at the deepest mount point above (or at) `path`: the
    /// one it lies on, and those beneath it there.
    fn holding(&self, path: &Path) -> Vec<&Mount> {
        let Some(deepest) = self
            .mounts
            .iter()
            .filter(|m| path.starts_with(&m.point))
            .max_by_key(|m| m.point.components().count())
        else {
            return Vec::new();
        };
        self.mounts
            .iter()
            .filter(|m| m.point == deepest.point)
            .collect()
    }
}

/// The `upperdir` and `lowerdir` directories of an overlay's super
/// options (`lowerdir=/a:/b,upperdir=/c,workdir=/d`; a layer whose own `,`
/// or `:` the kernel escapes is not read back, and that name is missed).
fn overlay_layers(options: &str) -> Vec<PathBuf> {
    options
        .split(',')
        .filter_map(|o| {
            o.strip_prefix("lowerdir=")
                .or_else(|| o.strip_prefix("upperdir="))
        })
        .flat_map(|dirs| dirs.split(':'))
        .filter(|d| !d.is_empty())
        .map(unescape)
        .filter(|d| d.is_absolute())
        .collect()
}

/// `base` joined with `rest` (`base` itself when `rest` is empty).
fn within(base: &Path, rest: &Path) -> PathBuf {
    if rest.as_os_str().is_empty() {
        base.to_path_buf()
    } else {
        base.join(rest)
    }
}

/// A path of `mountinfo`, whose space, tab, newline and backslash are
/// written as octal escapes (`\040`).
fn unescape(field: &str) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = bytes[i] == b'\\'
            && bytes.len() >= i + 4
            && bytes[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b));
        if escaped {
            let value = bytes[i + 1..i + 4]
                .iter()
                .fold(0u32, |acc, b| acc * 8 + u32::from(b - b'0'));
            if let Ok(byte) = u8::try_from(value) {
                out.push(byte);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A root file system on 8:1, `/home` on 8:2, a tmpfs on `/tmp`, and
    /// binds: `/srv/alias` of `/home/u/.config`, `/data/ws/cache` of
    /// `/var/cache`, `/mnt/gh` of `/home/u/.config/gh`, a name with a space.
    const TABLE: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
23 22 8:2 / /home rw,relatime shared:2 - ext4 /dev/sda2 rw
24 22 0:30 / /tmp rw,nosuid shared:3 - tmpfs tmpfs rw
25 22 8:2 /u/.config /srv/alias rw,relatime shared:2 - ext4 /dev/sda2 rw
26 22 8:1 /var/cache /data/ws/cache rw,relatime shared:1 - ext4 /dev/sda1 rw
27 22 8:2 /u/.config/gh /mnt/gh rw,relatime shared:2 - ext4 /dev/sda2 rw
28 22 8:1 /opt/my\\040dir /mnt/spaced rw - ext4 /dev/sda1 rw
bad line
";

    fn aliases(path: &str) -> Vec<String> {
        MountTable::parse(TABLE)
            .aliases(Path::new(path))
            .into_iter()
            .map(|p| p.display().to_string())
            .collect()
    }

    #[test]
    fn a_bind_is_another_name_of_its_directory_and_of_what_holds_it() {
        assert_eq!(
            aliases("/srv/alias"),
            ["/srv/alias", "/home/u/.config", "/mnt/gh"],
            "the bind's own directory, and a part of it mounted elsewhere"
        );
        assert_eq!(
            aliases("/home/u"),
            ["/home/u", "/srv/alias", "/mnt/gh"],
            "the parts of it mounted elsewhere"
        );
        assert_eq!(
            aliases("/home/u/.config/gh/x"),
            ["/home/u/.config/gh/x", "/srv/alias/gh/x", "/mnt/gh/x"]
        );
    }

    #[test]
    fn what_is_mounted_beneath_a_directory_is_reached_through_it() {
        assert_eq!(aliases("/data"), ["/data", "/var/cache", "/data/ws/cache"]);
        assert_eq!(
            aliases("/data/ws/cache/pip"),
            ["/data/ws/cache/pip", "/var/cache/pip"]
        );
    }

    #[test]
    fn a_directory_with_no_other_mount_has_its_own_name_alone() {
        assert_eq!(aliases("/etc"), ["/etc"]);
        assert_eq!(aliases("/tmp/x"), ["/tmp/x"]);
    }

    #[test]
    fn escaped_names_are_read_back() {
        assert_eq!(aliases("/mnt/spaced/a"), ["/mnt/spaced/a", "/opt/my dir/a"]);
        assert_eq!(unescape("a\\134b\\011"), PathBuf::from("a\\b\t"));
        assert_eq!(unescape("a\\9"), PathBuf::from("a\\9"));
    }

    /// Red-team pass 18, F2: a bind moved onto a point that holds a tmpfs
    /// is listed before it; F3: an overlay shows its layers.
    #[test]
    fn every_mount_at_a_point_and_an_overlays_layers_count() {
        let table = MountTable::parse(
            "1 0 8:1 / / rw - ext4 a rw\n\
             5 1 8:1 /ws/.git /m rw - ext4 a rw\n\
             4 1 0:9 / /m rw - tmpfs t rw\n\
             6 1 0:50 / /o rw - overlay overlay rw,lowerdir=/home/u/.ssh:/l2,upperdir=/ws/.git/hooks,workdir=/w\n",
        );
        let names = table.aliases(Path::new("/m/x"));
        assert!(names.contains(&PathBuf::from("/ws/.git/x")), "{names:?}");
        let names = table.aliases(Path::new("/o"));
        for layer in ["/home/u/.ssh", "/l2", "/ws/.git/hooks"] {
            assert!(names.contains(&PathBuf::from(layer)), "{layer}: {names:?}");
        }
        let names = table.aliases(Path::new("/"));
        assert!(
            names.contains(&PathBuf::from("/ws/.git/hooks")),
            "{names:?}"
        );
    }

    #[test]
    fn this_process_has_a_table() {
        let table = MountTable::read().unwrap();
        assert_eq!(table.aliases(Path::new("/"))[0], Path::new("/"));
        assert!(table.mounts.iter().any(|m| m.point == Path::new("/")));
    }
}
