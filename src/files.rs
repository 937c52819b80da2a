//! Reading the files the offline commands are given (`check`, `test`,
//! `policy suggest`, policy files): the one place they meet the file system.
//!
//! The files come from anyone (a pull request to a suite folder, evidence
//! copied off a cluster), so:
//! - only a regular file is read (a symlink to one is followed); a FIFO, a
//!   socket or a device is refused before it is opened, as it could block
//!   the reader for ever or never end;
//! - a file is read up to a limit (for a review, the largest body the
//!   webhook accepts), never without end;
//! - a walk of a folder reads each folder once, however many symlinks lead
//!   to it: a symlink loop, or two links to one folder, is reported, never
//!   followed again.

use std::collections::HashMap;
use std::fs::{File, FileType, Metadata};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// The largest AdmissionReview body the webhook accepts by default
/// (`serve --max-body-bytes`), and so the largest review `check` and `test`
/// read by default.
pub const DEFAULT_MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

/// The largest policy file read: far more than any policy needs (a
/// ConfigMap holds at most 1 MiB).
pub const MAX_POLICY_BYTES: u64 = DEFAULT_MAX_BODY_BYTES as u64;

/// Why a file was not read. Carried inside an [`io::Error`], whose message
/// it is, so a caller names the file as it names any other I/O error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotRead {
    /// A FIFO, a socket, a device or a folder: what it is.
    #[error("not a regular file ({0})")]
    NotRegular(&'static str),
    #[error("larger than {limit} bytes")]
    TooLarge { limit: u64 },
}

impl From<NotRead> for io::Error {
    fn from(why: NotRead) -> io::Error {
        let kind = match why {
            NotRead::NotRegular(_) => io::ErrorKind::InvalidInput,
            NotRead::TooLarge { .. } => io::ErrorKind::FileTooLarge,
        };
        io::Error::new(kind, why)
    }
}

/// What a file type is, for [`NotRead::NotRegular`].
fn what(file_type: FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if file_type.is_fifo() {
            return "a FIFO";
        }
        if file_type.is_socket() {
            return "a socket";
        }
        if file_type.is_char_device() {
            return "a character device";
        }
        if file_type.is_block_device() {
            return "a block device";
        }
    }
    if file_type.is_dir() {
        "a folder"
    } else if file_type.is_symlink() {
        "a symlink"
    } else {
        "of an unknown type"
    }
}

fn regular(meta: &Metadata) -> io::Result<()> {
    if meta.is_file() {
        Ok(())
    } else {
        Err(NotRead::NotRegular(what(meta.file_type())).into())
    }
}

/// Opens `path` for reading if it is a regular file (following symlinks).
/// Anything else is refused before it is opened; one swapped in between
/// is opened without blocking (a FIFO's open waits for a writer) and
/// refused too.
pub fn open_regular(path: &Path) -> io::Result<File> {
    regular(&std::fs::metadata(path)?)?;
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // No effect on a regular file's reads.
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path)?;
    regular(&file.metadata()?)?;
    Ok(file)
}

/// The bytes of the regular file at `path`, refused when larger than `limit`.
pub fn read_regular(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    let file = open_regular(path)?;
    let size = file.metadata()?.len();
    if size > limit {
        return Err(NotRead::TooLarge { limit }.into());
    }
    // The size said may be wrong (a file of /proc says 0): read at most
    // one byte more than the limit, to know.
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(NotRead::TooLarge { limit }.into());
    }
    Ok(bytes)
}

/// What a walk of a folder found, in the order found.
#[derive(Debug)]
pub enum Found {
    /// Anything but a folder: to be read with [`open_regular`] or
    /// [`read_regular`], which refuse what is not a regular file.
    File(PathBuf),
    /// A folder reached again (a symlink loop, or a second link to a
    /// folder): not read again.
    Again { path: PathBuf, first: PathBuf },
    /// A folder that could not be listed, or an entry that could not be
    /// looked at (a dangling symlink, say).
    Error { path: PathBuf, error: io::Error },
}

impl Found {
    pub fn path(&self) -> &Path {
        match self {
            Found::File(path) | Found::Again { path, .. } | Found::Error { path, .. } => path,
        }
    }
}

/// Why a folder was not read again, in one line.
pub fn again(first: &Path) -> String {
    format!(
        "the folder {} again (a symlink loop, or a second link to it): not read twice",
        first.display()
    )
}

/// Walks the folder `root`: the entries whose names `wanted` accepts, in
/// name order, each folder among them walked in its turn (depth first) and
/// every other entry found as a file. Symlinks are followed, but no folder
/// is walked twice: folders are known by device and inode.
pub fn walk(root: &Path, wanted: &dyn Fn(&Path) -> bool) -> Vec<Found> {
    let mut walk = Walk {
        wanted,
        seen: HashMap::new(),
        found: Vec::new(),
    };
    match std::fs::metadata(root) {
        Ok(meta) => walk.folder(root, &meta),
        Err(error) => walk.found.push(Found::Error {
            path: root.to_path_buf(),
            error,
        }),
    }
    walk.found
}

struct Walk<'w> {
    wanted: &'w dyn Fn(&Path) -> bool,
    /// Each folder walked, by (device, inode), and the path it was walked by.
    seen: HashMap<(u64, u64), PathBuf>,
    found: Vec<Found>,
}

impl Walk<'_> {
    fn folder(&mut self, path: &Path, meta: &Metadata) {
        if let Some(first) = self.seen.get(&identity(meta)) {
            let first = first.clone();
            return self.found.push(Found::Again {
                path: path.to_path_buf(),
                first,
            });
        }
        self.seen.insert(identity(meta), path.to_path_buf());
        let mut entries = Vec::new();
        let listed = std::fs::read_dir(path).and_then(|list| {
            for entry in list {
                entries.push(entry?.path());
            }
            Ok(())
        });
        if let Err(error) = listed {
            return self.found.push(Found::Error {
                path: path.to_path_buf(),
                error,
            });
        }
        entries.sort();
        for entry in entries {
            if !(self.wanted)(&entry) {
                continue;
            }
            match std::fs::metadata(&entry) {
                Ok(meta) if meta.is_dir() => self.folder(&entry, &meta),
                Ok(_) => self.found.push(Found::File(entry)),
                Err(error) => self.found.push(Found::Error { path: entry, error }),
            }
        }
    }
}

#[cfg(unix)]
fn identity(meta: &Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino())
}

/// Without inodes, no folder is known twice: only the files' reading is guarded.
#[cfg(not(unix))]
fn identity(_: &Metadata) -> (u64, u64) {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    (0, NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn not_read(e: &io::Error) -> Option<NotRead> {
        e.get_ref()?.downcast_ref::<NotRead>().cloned()
    }

    #[test]
    fn a_symlink_loop_is_walked_once() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("c.json"), "{}").unwrap();
        // Each link leads back: without the inodes, 2^depth paths.
        symlink(".", root.join("a.json")).unwrap();
        symlink(".", root.join("b.json")).unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        symlink("..", root.join("sub/up")).unwrap();
        let found = walk(root, &|_| true);
        let seen: Vec<String> = found
            .iter()
            .map(|f| {
                let path = f.path().strip_prefix(root).unwrap().display().to_string();
                match f {
                    Found::File(_) => format!("file {path}"),
                    Found::Again { first, .. } => {
                        assert_eq!(first, root);
                        format!("again {path}")
                    }
                    Found::Error { error, .. } => format!("error {path}: {error}"),
                }
            })
            .collect();
        assert_eq!(
            seen,
            [
                "again a.json",
                "again b.json",
                "file c.json",
                "again sub/up"
            ]
        );
    }

    #[test]
    fn only_regular_files_are_read_and_only_up_to_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("x.json");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo");
        assert!(made.success());
        // Refused, not blocked on: nobody ever writes to it.
        let e = read_regular(&fifo, 10).unwrap_err();
        assert_eq!(not_read(&e), Some(NotRead::NotRegular("a FIFO")), "{e}");
        assert_eq!(e.to_string(), "not a regular file (a FIFO)");
        let e = read_regular(dir.path(), 10).unwrap_err();
        assert_eq!(not_read(&e), Some(NotRead::NotRegular("a folder")));
        let e = read_regular(Path::new("/dev/zero"), 10).unwrap_err();
        assert_eq!(
            not_read(&e),
            Some(NotRead::NotRegular("a character device"))
        );

        let file = dir.path().join("r.json");
        std::fs::write(&file, "0123456789").unwrap();
        assert_eq!(read_regular(&file, 10).unwrap(), b"0123456789");
        let e = read_regular(&file, 9).unwrap_err();
        assert_eq!(not_read(&e), Some(NotRead::TooLarge { limit: 9 }));
        // Through a symlink, the file it leads to.
        let link = dir.path().join("l.json");
        symlink(&file, &link).unwrap();
        assert_eq!(read_regular(&link, 10).unwrap(), b"0123456789");
        let link = dir.path().join("f.json");
        symlink(&fifo, &link).unwrap();
        assert!(read_regular(&link, 10).is_err());
    }
}
